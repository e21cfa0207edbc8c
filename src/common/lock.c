/*
 * Lock handles: options, acquire, release, cancel and the local queries.
 *
 * The server is contacted only for a fresh hold (acquire) and for the
 * last count of one (release); re-entry and the local queries work on the
 * caller's owner's hold (hold.c) alone.
 */
#include <string.h>

#include "clock.h"
#include "core.h"

dlock_lock *dlock__lock_ref(dlock_lock *lock)
{
	g_atomic_ref_count_inc(&lock->ref);
	return lock;
}

void dlock__lock_unref(dlock_lock *lock)
{
	if (!lock || !g_atomic_ref_count_dec(&lock->ref))
		return;
	g_free(lock->resource);
	g_free(lock->thread_key);
	g_ptr_array_unref(lock->waiters);
	g_mutex_clear(&lock->mu);
	g_cond_clear(&lock->idle);
	g_free(lock);
}

/*
 * Count a call in flight on the handle, so that dlock_lock_free() waits for
 * it; false, counting nothing, once the free has begun.  No error is
 * recorded here: the getters (dlock_held, dlock_fencing_token) are not
 * failing calls and must leave the thread's last error message alone.  The
 * handle is only touched through its mutex and counter, hence const.
 */
static bool call_begin(const dlock_lock *handle)
{
	dlock_lock *lock = (dlock_lock *)handle; /* its mutex and counter only */
	bool counted;

	g_mutex_lock(&lock->mu);
	counted = !lock->freed;
	if (counted)
		lock->calls++;
	g_mutex_unlock(&lock->mu);
	return counted;
}

static void call_end(const dlock_lock *handle)
{
	dlock_lock *lock = (dlock_lock *)handle;

	g_mutex_lock(&lock->mu);
	/* Only dlock_lock_free() waits on idle; a broadcast costs a system call. */
	if (--lock->calls == 0 && lock->freed)
		g_cond_broadcast(&lock->idle);
	g_mutex_unlock(&lock->mu);
}

int dlock__lock_enter(dlock_lock *lock, const char *what)
{
	int rc;

	if (!lock)
		return dlock__error(DLOCK_EINVAL, "%s: lock is NULL", what);
	if (!lock->client)
		return dlock__error(DLOCK_ECANCELED, "%s: the lock's client has been freed", what);
	if (!call_begin(lock))
		return dlock__error(DLOCK_ECANCELED, "%s: the lock handle is being freed", what);
	rc = dlock__client_enter(lock->client);
	if (rc != DLOCK_OK)
		call_end(lock);
	return rc;
}

void dlock__lock_leave(dlock_lock *lock)
{
	dlock_client *client = lock->client;

	call_end(lock);
	dlock__client_leave(client);
}

static char *thread_key_for(const dlock_client *client, const dlock__slot *slot,
                            const char *resource)
{
	return g_strdup_printf("%p/%p/%s", (const void *)client, (const void *)slot, resource);
}

DLOCK_API int dlock_lock_new(dlock_client *client, const char *resource, dlock_lock **ret_lock)
{
	dlock__slot *slot;
	dlock_lock *lock;
	int rc;

	if (!client || !ret_lock)
		return dlock__error(DLOCK_EINVAL, "dlock_lock_new: client and ret_lock must not be NULL");
	if (!resource)
		return dlock__error(DLOCK_EINVAL, "resource name is NULL");
	rc = dlock__client_enter(client);
	if (rc != DLOCK_OK)
		return rc;
	rc = dlock__resource_check(resource);
	if (rc != DLOCK_OK) {
		dlock__client_leave(client);
		return rc;
	}

	slot = dlock__client_route(client, resource);
	if (slot->ops->check_resource) {
		rc = slot->ops->check_resource(slot->impl, resource);
		if (rc != DLOCK_OK) {
			dlock__client_leave(client);
			return rc;
		}
	}

	lock = g_new0(dlock_lock, 1);
	g_atomic_ref_count_init(&lock->ref);
	g_mutex_init(&lock->mu);
	g_cond_init(&lock->idle);
	lock->client = client;
	lock->resource = g_strdup(resource);
	lock->slot = slot;
	lock->thread_key = thread_key_for(client, lock->slot, resource);
	lock->owner = DLOCK_OWNER_THREAD;
	lock->watchdog = -1;
	lock->waiters = g_ptr_array_new();

	g_mutex_lock(&client->mu);
	g_hash_table_add(client->locks, lock);
	g_mutex_unlock(&client->mu);
	dlock__client_leave(client);
	*ret_lock = lock;
	return DLOCK_OK;
}

/* Snapshot of the client's live holds, each referenced. */
static GPtrArray *client_holds(dlock_client *client)
{
	GPtrArray *holds = g_ptr_array_new_with_free_func((GDestroyNotify)dlock__hold_unref);
	GHashTableIter iter;
	gpointer key;

	g_mutex_lock(&client->mu);
	g_hash_table_iter_init(&iter, client->holds);
	while (g_hash_table_iter_next(&iter, &key, NULL))
		g_ptr_array_add(holds, dlock__hold_ref(key));
	g_mutex_unlock(&client->mu);
	return holds;
}

DLOCK_API void dlock_lock_free(dlock_lock *lock)
{
	dlock_client *client;

	if (!lock)
		return;
	client = lock->client;
	if (client && !dlock__client_forked(client)) {
		GPtrArray *holds;

		/* Refuse new calls, wake this handle's waiters, and wait for
		 * every call in flight: an acquire granted meanwhile has either
		 * installed its hold (dropped below) or released it. */
		g_mutex_lock(&lock->mu);
		lock->freed = true;
		for (guint i = 0; i < lock->waiters->len; i++)
			dlock__waiter_cancel(lock->waiters->pdata[i]);
		while (lock->calls > 0)
			g_cond_wait(&lock->idle, &lock->mu);
		g_mutex_unlock(&lock->mu);

		holds = client_holds(client);
		for (guint i = 0; i < holds->len; i++)
			dlock__hold_drop_lock(holds->pdata[i], lock);
		g_ptr_array_unref(holds);

		g_mutex_lock(&client->mu);
		g_hash_table_remove(client->locks, lock);
		g_mutex_unlock(&client->mu);
	} else if (client) {
		/* In a forked child: the parent's structures are not ours to
		 * touch; the memory goes when the child exits or execs. */
		return;
	}
	dlock__lock_unref(lock);
}

/* Common checks of the option setters: the handle exists, belongs to this
 * process, and no acquire has started.  On DLOCK_OK, lock->mu is held. */
static int option_begin(dlock_lock *lock, const char *what)
{
	if (!lock)
		return dlock__error(DLOCK_EINVAL, "%s: lock is NULL", what);
	if (!lock->client || dlock__client_forked(lock->client))
		return dlock__error(DLOCK_ECANCELED, "%s: client was freed or belongs to the parent process", what);
	g_mutex_lock(&lock->mu);
	if (lock->started) {
		g_mutex_unlock(&lock->mu);
		return dlock__error(DLOCK_EINVAL, "%s: options must be set before the first acquire", what);
	}
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_ttl(dlock_lock *lock, int64_t ttl_ms)
{
	int rc = option_begin(lock, "dlock_lock_set_ttl");

	if (rc != DLOCK_OK)
		return rc;
	if (ttl_ms < DLOCK__TTL_MIN_MS || ttl_ms > DLOCK__TTL_MAX_MS) {
		g_mutex_unlock(&lock->mu);
		return dlock__error(DLOCK_EINVAL, "ttl %" G_GINT64_FORMAT " ms is outside the range from the "
		                    "minimum of %d ms to the maximum of %" G_GINT64_FORMAT " ms (7 days)",
		                    ttl_ms, DLOCK__TTL_MIN_MS, DLOCK__TTL_MAX_MS);
	}
	lock->ttl_ms = ttl_ms;
	g_mutex_unlock(&lock->mu);
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_watchdog(dlock_lock *lock, int enabled)
{
	int rc = option_begin(lock, "dlock_lock_set_watchdog");

	if (rc != DLOCK_OK)
		return rc;
	lock->watchdog = enabled ? 1 : 0;
	g_mutex_unlock(&lock->mu);
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_owner(dlock_lock *lock, dlock_owner owner)
{
	int rc = option_begin(lock, "dlock_lock_set_owner");

	if (rc != DLOCK_OK)
		return rc;
	if (owner != DLOCK_OWNER_THREAD && owner != DLOCK_OWNER_HANDLE) {
		g_mutex_unlock(&lock->mu);
		return dlock__error(DLOCK_EINVAL, "unknown owner mode %d", (int)owner);
	}
	lock->owner = owner;
	g_mutex_unlock(&lock->mu);
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_backend(dlock_lock *lock, const char *backend)
{
	dlock__slot *found;
	int rc;

	if (!backend)
		return dlock__error(DLOCK_EINVAL, "dlock_lock_set_backend: backend name is NULL");
	rc = option_begin(lock, "dlock_lock_set_backend");
	if (rc != DLOCK_OK)
		return rc;
	found = dlock__client_slot(lock->client, backend);
	if (!found) {
		/* A URI given where a name goes may carry a password. */
		char *shown = dlock__uri_redact(backend);

		g_mutex_unlock(&lock->mu);
		rc = dlock__error(DLOCK_EINVAL, "no backend named '%s' in this client", shown);
		g_free(shown);
		return rc;
	}
	if (found->ops->check_resource &&
	    (rc = found->ops->check_resource(found->impl, lock->resource)) != DLOCK_OK) {
		g_mutex_unlock(&lock->mu);
		return rc;
	}
	lock->slot = found;
	g_free(lock->thread_key);
	lock->thread_key = thread_key_for(lock->client, found, lock->resource);
	g_mutex_unlock(&lock->mu);
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_state_callback(dlock_lock *lock, dlock_state_fn fn, void *user_data)
{
	if (!lock)
		return dlock__error(DLOCK_EINVAL, "dlock_lock_set_state_callback: lock is NULL");
	if (!lock->client || dlock__client_forked(lock->client))
		return dlock__error(DLOCK_ECANCELED, "client was freed or belongs to the parent process");
	g_mutex_lock(&lock->mu);
	lock->state_fn = fn;
	lock->state_user_data = user_data;
	g_mutex_unlock(&lock->mu);
	return DLOCK_OK;
}

DLOCK_API const char *dlock_lock_resource(const dlock_lock *lock)
{
	return lock ? lock->resource : NULL;
}

DLOCK_API const char *dlock_lock_backend_uri(const dlock_lock *lock)
{
	return lock && lock->slot ? lock->slot->redacted : NULL;
}

DLOCK_API const char *dlock_lock_backend_name(const dlock_lock *lock)
{
	return lock && lock->slot ? lock->slot->name : NULL;
}

static void lock_add_waiter(dlock_lock *lock, dlock__waiter *waiter)
{
	g_mutex_lock(&lock->mu);
	g_ptr_array_add(lock->waiters, waiter);
	if (lock->freed)
		dlock__waiter_cancel(waiter);
	g_mutex_unlock(&lock->mu);
}

static void lock_remove_waiter(dlock_lock *lock, dlock__waiter *waiter)
{
	g_mutex_lock(&lock->mu);
	g_ptr_array_remove_fast(lock->waiters, waiter);
	g_mutex_unlock(&lock->mu);
}

static void via_add(dlock__hold *hold, dlock_lock *lock)
{
	hold_via via = { lock, 1 };

	for (guint i = 0; i < hold->via->len; i++) {
		hold_via *v = &g_array_index(hold->via, hold_via, i);

		if (v->lock == lock) {
			v->count++;
			return;
		}
	}
	g_array_append_val(hold->via, via);
}

/* Take one count back, preferably one that came through lock. */
static void via_remove(dlock__hold *hold, dlock_lock *lock)
{
	hold_via *any = NULL;

	for (guint i = 0; i < hold->via->len; i++) {
		hold_via *v = &g_array_index(hold->via, hold_via, i);

		if (v->count == 0)
			continue;
		if (v->lock == lock) {
			any = v;
			break;
		}
		if (!any)
			any = v;
	}
	if (any)
		any->count--;
}

/*
 * The owner already has a hold: count it again without I/O, wait out a
 * suspension within the deadline, or report and clear a lost hold.
 * Returns 1 when the hold turned out to be stale (released by teardown):
 * the caller then takes a fresh one.
 */
static int reenter(dlock_lock *lock, dlock__hold *hold, int64_t deadline_us)
{
	dlock__waiter *waiter = NULL;
	int rc = DLOCK_OK;

	g_mutex_lock(&hold->mu);
	for (;;) {
		dlock__hold_check_expiry_locked(hold);
		if (hold->phase == HOLD_HELD) {
			hold->count++;
			via_add(hold, lock);
			break;
		}
		if (hold->phase == HOLD_LOST) {
			dlock__hold_end_locked(hold);
			g_mutex_unlock(&hold->mu);
			dlock__hold_finish(hold, lock, true);
			g_mutex_lock(&hold->mu);
			rc = dlock__error(DLOCK_ELOST, "lock '%s' was lost while held; the hold is cleared",
			                  hold->resource);
			break;
		}
		if (hold->phase != HOLD_SUSPENDED) {
			rc = 1;
			break;
		}
		/* Suspended: wait for the backend to confirm or lose it. */
		if (!waiter) {
			waiter = dlock__waiter_new();
			lock_add_waiter(lock, waiter);
			g_ptr_array_add(hold->waiters, waiter);
		}
		uint64_t seen = dlock__waiter_seq(waiter);

		g_mutex_unlock(&hold->mu);
		rc = dlock__waiter_sleep(waiter, seen, deadline_us);
		g_mutex_lock(&hold->mu);
		if (rc == DLOCK_ETIMEDOUT && hold->phase == HOLD_SUSPENDED) {
			rc = dlock__error(DLOCK_ETIMEDOUT,
			                  "lock '%s' is suspended and was not confirmed before the deadline",
			                  hold->resource);
			break;
		}
		if (rc == DLOCK_ECANCELED) {
			rc = dlock__error_canceled(hold->resource);
			break;
		}
		rc = DLOCK_OK;
	}
	if (waiter)
		g_ptr_array_remove_fast(hold->waiters, waiter);
	g_mutex_unlock(&hold->mu);
	if (waiter) {
		lock_remove_waiter(lock, waiter);
		dlock__waiter_free(waiter);
	}
	return rc;
}

/*
 * A grant that lands after dlock_lock_free() has begun on the handle is
 * not installed (the free would not see it): it is released at once and
 * the acquire returns DLOCK_ECANCELED.
 */
static bool grant_refused(dlock_lock *lock, dlock__hold *hold)
{
	bool freed;

	g_mutex_lock(&lock->mu);
	freed = lock->freed;
	g_mutex_unlock(&lock->mu);
	if (!freed)
		return false;
	g_mutex_lock(&hold->mu);
	dlock__hold_end_locked(hold);
	g_mutex_unlock(&hold->mu);
	hold->slot->ops->release(hold->slot->impl, hold);
	return true;
}

/*
 * A cancel (dlock_lock_cancel(), the handle's free or the client's) that
 * came while the backend was in a step it cannot interrupt -- a connect, a
 * name lookup -- is what the caller asked for, and what dlock.h promises:
 * DLOCK_ECANCELED, whatever failure that step reported when it ended.
 * The backend's message is kept after it.
 */
static int canceled_failure(const dlock_lock *lock, int rc)
{
	char *why = g_strdup(dlock_last_error_message());

	rc = dlock__error(DLOCK_ECANCELED, "wait for lock '%s' was canceled (meanwhile: %s: %s)",
	                  lock->resource, dlock_strerror(rc), why);
	g_free(why);
	return rc;
}

DLOCK_API int dlock_acquire(dlock_lock *lock, int64_t wait_ms)
{
	int64_t deadline_us = dlock__deadline_after_ms(wait_ms);
	dlock_client *client;
	dlock__waiter *waiter;
	dlock__hold *hold;
	int rc;

	rc = dlock__lock_enter(lock, "dlock_acquire");
	if (rc != DLOCK_OK)
		return rc;
	client = lock->client;

	g_mutex_lock(&lock->mu);
	lock->started = true;
	g_mutex_unlock(&lock->mu);

	hold = dlock__hold_find(lock);
	if (hold) {
		rc = reenter(lock, hold, deadline_us);
		dlock__hold_unref(hold);
		if (rc != 1) {
			dlock__lock_leave(lock);
			return rc;
		}
	}

	hold = dlock__hold_new(client, lock);
	waiter = dlock__waiter_new();
	lock_add_waiter(lock, waiter);
	/* A try (wait 0) is bounded by the backend's own timeouts alone. */
	rc = lock->slot->ops->acquire(lock->slot->impl, hold, waiter, wait_ms,
	                              wait_ms == 0 ? INT64_MAX : deadline_us);
	if (rc != DLOCK_OK && rc != DLOCK_ECANCELED && dlock__waiter_canceled(waiter))
		rc = canceled_failure(lock, rc);
	lock_remove_waiter(lock, waiter);
	dlock__waiter_free(waiter);
	if (rc == DLOCK_OK && grant_refused(lock, hold))
		rc = dlock__error(DLOCK_ECANCELED, "lock '%s': the handle was freed while acquiring; "
		                  "the grant was released", lock->resource);
	else if (rc == DLOCK_OK)
		dlock__hold_install(hold, lock);
	dlock__hold_unref(hold);
	dlock__lock_leave(lock);
	return rc;
}

/*
 * A handle whose lost hold was replaced by a fresh grant (another thread's
 * acquire through the handle, waiting when the hold was lost) owes one
 * release DLOCK_ELOST, as the lost hold would have given; the fresh hold
 * keeps its count.  True once, when that is the case.
 */
static bool take_lost_pending(dlock_lock *lock)
{
	bool pending;

	g_mutex_lock(&lock->mu);
	pending = lock->lost_pending;
	lock->lost_pending = false;
	g_mutex_unlock(&lock->mu);
	return pending;
}

DLOCK_API int dlock_release(dlock_lock *lock)
{
	dlock__hold *hold;
	bool finish = false;
	int rc = DLOCK_OK;

	rc = dlock__lock_enter(lock, "dlock_release");
	if (rc != DLOCK_OK)
		return rc;
	if (take_lost_pending(lock)) {
		rc = dlock__error(DLOCK_ELOST, "lock '%s' had been lost before this release (a later "
		                  "acquire through this handle holds it again)", lock->resource);
		dlock__lock_leave(lock);
		return rc;
	}

	hold = dlock__hold_find(lock);
	if (!hold) {
		rc = dlock__error(DLOCK_ENOTHELD, "lock '%s' is not held by the caller", lock->resource);
		dlock__lock_leave(lock);
		return rc;
	}
	g_mutex_lock(&hold->mu);
	dlock__hold_check_expiry_locked(hold);
	switch (hold->phase) {
	case HOLD_LOST:
		dlock__hold_end_locked(hold);
		finish = true;
		rc = dlock__error(DLOCK_ELOST, "lock '%s' had been lost before this release", lock->resource);
		break;
	case HOLD_HELD:
	case HOLD_SUSPENDED:
		via_remove(hold, lock);
		if (--hold->count == 0) {
			dlock__hold_end_locked(hold);
			finish = true;
		}
		break;
	default:
		rc = dlock__error(DLOCK_ENOTHELD, "lock '%s' is not held by the caller", lock->resource);
		break;
	}
	g_mutex_unlock(&hold->mu);

	if (finish) {
		int released = dlock__hold_finish(hold, lock, true);

		if (rc == DLOCK_OK && released == DLOCK_ELOST)
			rc = dlock__error(DLOCK_ELOST, "lock '%s' had expired on the server before this release",
			                  lock->resource);
	}
	dlock__hold_unref(hold);
	dlock__lock_leave(lock);
	return rc;
}

DLOCK_API int dlock_lock_cancel(dlock_lock *lock)
{
	if (!lock)
		return dlock__error(DLOCK_EINVAL, "dlock_lock_cancel: lock is NULL");
	if (!lock->client || dlock__client_forked(lock->client))
		return dlock__error(DLOCK_ECANCELED, "client was freed or belongs to the parent process");
	/* A call like any other, which dlock_lock_free() waits for; once the
	 * free has begun, the waiters are canceled already. */
	if (!call_begin(lock))
		return DLOCK_OK;
	g_mutex_lock(&lock->mu);
	for (guint i = 0; i < lock->waiters->len; i++)
		dlock__waiter_cancel(lock->waiters->pdata[i]);
	g_mutex_unlock(&lock->mu);
	call_end(lock);
	return DLOCK_OK;
}

/* The caller's hold's phase and token, for the local queries. */
static hold_phase caller_phase(const dlock_lock *lock, uint64_t *ret_token)
{
	hold_phase phase = HOLD_RELEASED;
	dlock__hold *hold;

	if (!lock || !lock->client || dlock__client_forked(lock->client))
		return phase;
	if (!call_begin(lock))
		return phase;
	hold = dlock__hold_find(lock);
	if (hold) {
		g_mutex_lock(&hold->mu);
		dlock__hold_check_expiry_locked(hold);
		phase = hold->phase;
		if (ret_token)
			*ret_token = hold->token;
		g_mutex_unlock(&hold->mu);
		dlock__hold_unref(hold);
	}
	call_end(lock);
	return phase;
}

DLOCK_API int dlock_held(const dlock_lock *lock)
{
	return caller_phase(lock, NULL) == HOLD_HELD;
}

DLOCK_API uint64_t dlock_fencing_token(const dlock_lock *lock)
{
	uint64_t token = 0;
	hold_phase phase = caller_phase(lock, &token);

	return phase == HOLD_HELD || phase == HOLD_SUSPENDED ? token : 0;
}

dlock_hold dlock__lock_caller_hold(const dlock_lock *lock)
{
	switch (caller_phase(lock, NULL)) {
	case HOLD_HELD:
		return DLOCK_HOLD_HELD;
	case HOLD_SUSPENDED:
		return DLOCK_HOLD_SUSPENDED;
	case HOLD_LOST:
		return DLOCK_HOLD_LOST;
	default:
		return DLOCK_HOLD_NONE;
	}
}
