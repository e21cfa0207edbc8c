/* SPDX-License-Identifier: MIT */
/*
 * dlock_lock_query() and the dlock_info accessors: who holds a resource,
 * as the backend sees it now, plus the caller's own relation to it.
 */
#include "core.h"

/* One holder as the backend records it. */
typedef struct info_holder {
	char *text;           /* described dlock holder, or a peer's raw value */
	dlock__holder parsed;
	bool parsed_ok;
} info_holder;

struct dlock_info {
	bool locked;
	dlock_hold hold;
	dlock_held_as mode;
	GArray *holders;      /* of info_holder; empty when free */
	int64_t expires_in_ms;
	uint64_t fencing_token;
	uint32_t permits;     /* a semaphore's N; 0 when not one */
	bool bare_ids;        /* a foreign holder's raw value is a participant id */
	char *backend;
	GArray *masters;      /* of info_master; empty unless a Redlock */
	char *master;         /* the master that answered, where it is looked for */
	char *service;        /* Sentinel's service name */
};

/* One master of a Redlock. */
typedef struct info_master {
	char *address;
	bool reachable;
	info_holder holder;   /* text "" when its key is missing */
	int64_t expires_in_ms;
	uint64_t fencing_token;
} info_master;

void dlock__server_info_clear(dlock__server_info *info)
{
	g_free(info->holder_raw);
	info->holder_raw = NULL;
	if (info->readers)
		g_ptr_array_unref(info->readers);
	info->readers = NULL;
	if (info->masters)
		g_array_unref(info->masters);
	info->masters = NULL;
	g_clear_pointer(&info->master, g_free);
	g_clear_pointer(&info->service, g_free);
}

void dlock__master_view_clear(gpointer data)
{
	dlock__master_view *view = data;

	g_free(view->address);
	g_free(view->holder_raw);
}

static info_holder holder_of(const char *raw)
{
	info_holder h = { 0 };

	if (dlock__token_parse(raw, &h.parsed)) {
		h.parsed_ok = true;
		h.text = dlock__holder_describe(&h.parsed);
	} else {
		h.text = g_strdup(raw);
	}
	return h;
}

static void holder_add(dlock_info *info, const char *raw)
{
	info_holder h = holder_of(raw);

	g_array_append_val(info->holders, h);
}

static void holder_clear(gpointer data)
{
	info_holder *h = data;

	g_free(h->text);
	if (h->parsed_ok)
		dlock__holder_clear(&h->parsed);
}

static void master_clear(gpointer data)
{
	info_master *m = data;

	g_free(m->address);
	holder_clear(&m->holder);
}

static GArray *masters_of(const dlock__server_info *server)
{
	GArray *masters = g_array_new(FALSE, TRUE, sizeof(info_master));

	g_array_set_clear_func(masters, master_clear);
	for (guint i = 0; server->masters && i < server->masters->len; i++) {
		const dlock__master_view *v = &g_array_index(server->masters, dlock__master_view, i);
		info_master m = { g_strdup(v->address), v->reachable,
		                  holder_of(v->holder_raw ? v->holder_raw : ""), v->expires_in_ms,
		                  v->fencing_token };

		g_array_append_val(masters, m);
	}
	return masters;
}

DLOCK_API int dlock_lock_query(dlock_lock *lock, dlock_info **ret_info)
{
	dlock__server_info server = { .expires_in_ms = -1 };
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
	info->permits = server.permits;
	info->bare_ids = (lock->slot->ops->caps & DLOCK__CAP_BARE_IDS) != 0;
	info->backend = g_strdup(lock->slot->redacted);
	info->masters = masters_of(&server);
	info->master = g_steal_pointer(&server.master);
	info->service = g_steal_pointer(&server.service);
	info->holders = g_array_new(FALSE, TRUE, sizeof(info_holder));
	g_array_set_clear_func(info->holders, holder_clear);
	if (!server.locked) {
		info->mode = DLOCK_HELD_FREE;
	} else if (server.shared) {
		info->mode = DLOCK_HELD_SHARED;
		for (guint i = 0; server.readers && i < server.readers->len; i++)
			holder_add(info, server.readers->pdata[i]);
	} else {
		info->mode = DLOCK_HELD_EXCLUSIVE;
		holder_add(info, server.holder_raw ? server.holder_raw : "");
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
	g_array_unref(info->holders);
	g_array_unref(info->masters);
	g_free(info->backend);
	g_free(info->master);
	g_free(info->service);
	g_free(info);
}

/* Holder i, or NULL (NULL info, or out of range). */
static const info_holder *holder_at(const dlock_info *info, size_t i)
{
	if (!info || i >= info->holders->len)
		return NULL;
	return &g_array_index(info->holders, info_holder, i);
}

DLOCK_API int dlock_info_locked(const dlock_info *info)
{
	return info && info->locked;
}

DLOCK_API dlock_hold dlock_info_hold(const dlock_info *info)
{
	return info ? info->hold : DLOCK_HOLD_NONE;
}

DLOCK_API dlock_held_as dlock_info_mode(const dlock_info *info)
{
	return info ? info->mode : DLOCK_HELD_FREE;
}

DLOCK_API uint32_t dlock_info_permits(const dlock_info *info)
{
	return info ? info->permits : 0;
}

DLOCK_API size_t dlock_info_holders(const dlock_info *info)
{
	return info ? info->holders->len : 0;
}

DLOCK_API const char *dlock_info_holder_at(const dlock_info *info, size_t i)
{
	const info_holder *h = holder_at(info, i);

	return h ? h->text : "";
}

DLOCK_API const char *dlock_info_holder_host_at(const dlock_info *info, size_t i)
{
	const info_holder *h = holder_at(info, i);

	return h && h->parsed_ok ? h->parsed.host : NULL;
}

DLOCK_API int64_t dlock_info_holder_pid_at(const dlock_info *info, size_t i)
{
	const info_holder *h = holder_at(info, i);

	return h && h->parsed_ok ? h->parsed.pid : 0;
}

DLOCK_API int64_t dlock_info_holder_tid_at(const dlock_info *info, size_t i)
{
	const info_holder *h = holder_at(info, i);

	return h && h->parsed_ok ? h->parsed.tid : 0;
}

DLOCK_API int64_t dlock_info_holder_since_ms_at(const dlock_info *info, size_t i)
{
	const info_holder *h = holder_at(info, i);

	return h && h->parsed_ok ? h->parsed.since_ms : 0;
}

DLOCK_API const char *dlock_info_holder(const dlock_info *info)
{
	return dlock_info_holder_at(info, 0);
}

DLOCK_API const char *dlock_info_holder_host(const dlock_info *info)
{
	return dlock_info_holder_host_at(info, 0);
}

DLOCK_API int64_t dlock_info_holder_pid(const dlock_info *info)
{
	return dlock_info_holder_pid_at(info, 0);
}

DLOCK_API int64_t dlock_info_holder_tid(const dlock_info *info)
{
	return dlock_info_holder_tid_at(info, 0);
}

DLOCK_API int64_t dlock_info_holder_since_ms(const dlock_info *info)
{
	return dlock_info_holder_since_ms_at(info, 0);
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

/* Master i, or NULL (NULL info, or out of range). */
static const info_master *master_at(const dlock_info *info, size_t i)
{
	if (!info || i >= info->masters->len)
		return NULL;
	return &g_array_index(info->masters, info_master, i);
}

DLOCK_API size_t dlock_info_masters(const dlock_info *info)
{
	return info ? info->masters->len : 0;
}

DLOCK_API const char *dlock_info_master_at(const dlock_info *info, size_t i)
{
	const info_master *m = master_at(info, i);

	return m ? m->address : "";
}

DLOCK_API int dlock_info_master_reachable_at(const dlock_info *info, size_t i)
{
	const info_master *m = master_at(info, i);

	return m && m->reachable;
}

DLOCK_API const char *dlock_info_master_holder_at(const dlock_info *info, size_t i)
{
	const info_master *m = master_at(info, i);

	return m ? m->holder.text : "";
}

DLOCK_API int64_t dlock_info_master_expires_in_ms_at(const dlock_info *info, size_t i)
{
	const info_master *m = master_at(info, i);

	return m ? m->expires_in_ms : -1;
}

DLOCK_API uint64_t dlock_info_master_fencing_token_at(const dlock_info *info, size_t i)
{
	const info_master *m = master_at(info, i);

	return m ? m->fencing_token : 0;
}

DLOCK_API const char *dlock_info_leader(const dlock_info *info)
{
	const info_holder *h = holder_at(info, 0);

	if (!h || !info->locked || info->mode != DLOCK_HELD_EXCLUSIVE)
		return NULL;
	if (h->parsed_ok)
		return h->parsed.id;
	return info->bare_ids && *h->text ? h->text : NULL;
}

DLOCK_API const char *dlock_info_master(const dlock_info *info)
{
	return info ? info->master : NULL;
}

DLOCK_API const char *dlock_info_service(const dlock_info *info)
{
	return info ? info->service : NULL;
}
