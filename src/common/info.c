/*
 * dlock_lock_query() and the dlock_info accessors: who holds a resource,
 * as the backend sees it now, plus the caller's own relation to it.
 */
#include "core.h"

struct dlock_info {
	bool locked;
	dlock_hold hold;
	char *holder;     /* described dlock holder, or a peer's raw value */
	dlock__holder parsed;
	bool parsed_ok;
	int64_t expires_in_ms;
	uint64_t fencing_token;
	char *backend;
};

void dlock__server_info_clear(dlock__server_info *info)
{
	g_free(info->holder_raw);
	info->holder_raw = NULL;
}

DLOCK_API int dlock_lock_query(dlock_lock *lock, dlock_info **ret_info)
{
	dlock__server_info server = { false, NULL, -1, 0 };
	dlock_info *info;
	int rc;

	if (!ret_info)
		return dlock__error(DLOCK_EINVAL, "dlock_lock_query: ret_info is NULL");
	rc = dlock__lock_enter(lock, "dlock_lock_query");
	if (rc != DLOCK_OK)
		return rc;
	rc = lock->slot->ops->query(lock->slot->impl, lock->resource, INT64_MAX, &server);
	if (rc != DLOCK_OK) {
		dlock__server_info_clear(&server);
		dlock__lock_leave(lock);
		return rc;
	}

	info = g_new0(dlock_info, 1);
	info->locked = server.locked;
	info->hold = dlock__lock_caller_hold(lock);
	info->expires_in_ms = server.expires_in_ms;
	info->fencing_token = server.fencing_token;
	info->backend = g_strdup(lock->slot->redacted);
	if (server.holder_raw && dlock__token_parse(server.holder_raw, &info->parsed)) {
		info->parsed_ok = true;
		info->holder = dlock__holder_describe(&info->parsed);
	} else {
		info->holder = g_strdup(server.holder_raw ? server.holder_raw : "");
	}
	dlock__server_info_clear(&server);
	dlock__lock_leave(lock);
	*ret_info = info;
	return DLOCK_OK;
}

DLOCK_API void dlock_info_free(dlock_info *info)
{
	if (!info)
		return;
	g_free(info->holder);
	g_free(info->backend);
	if (info->parsed_ok)
		dlock__holder_clear(&info->parsed);
	g_free(info);
}

DLOCK_API int dlock_info_locked(const dlock_info *info)
{
	return info && info->locked;
}

DLOCK_API dlock_hold dlock_info_hold(const dlock_info *info)
{
	return info ? info->hold : DLOCK_HOLD_NONE;
}

DLOCK_API const char *dlock_info_holder(const dlock_info *info)
{
	return info ? info->holder : "";
}

DLOCK_API const char *dlock_info_holder_host(const dlock_info *info)
{
	return info && info->parsed_ok ? info->parsed.host : NULL;
}

DLOCK_API int64_t dlock_info_holder_pid(const dlock_info *info)
{
	return info && info->parsed_ok ? info->parsed.pid : 0;
}

DLOCK_API int64_t dlock_info_holder_tid(const dlock_info *info)
{
	return info && info->parsed_ok ? info->parsed.tid : 0;
}

DLOCK_API int64_t dlock_info_holder_since_ms(const dlock_info *info)
{
	return info && info->parsed_ok ? info->parsed.since_ms : 0;
}

DLOCK_API int64_t dlock_info_expires_in_ms(const dlock_info *info)
{
	return info ? info->expires_in_ms : -1;
}

DLOCK_API uint64_t dlock_info_fencing_token(const dlock_info *info)
{
	return info ? info->fencing_token : 0;
}

DLOCK_API const char *dlock_info_backend(const dlock_info *info)
{
	return info ? info->backend : "";
}
