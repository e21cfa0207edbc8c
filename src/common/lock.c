/* SPDX-License-Identifier: MIT */
/*
 * Lock handles: options, acquire, release, cancel and the local queries.
 *
 * The server is contacted only for a fresh hold (acquire) and for the
 * last count of one (release); re-entry and the local queries work on the
 * caller's owner's hold alone (owner.c).
 */
#include <inttypes.h>
#include <string.h>

#include "clock.h"
#include "core.h"
#include "mutex.h"

dlock_lock *dlock__lock_ref(dlock_lock *lock)
{
	g_atomic_ref_count_inc(&lock->ref);
	return lock;
}

void dlock__lock_unref(dlock_lock *lock)
{
	if (!lock || !g_atomic_ref_count_dec(&lock->ref))
		return;
	/* A handle freed from a callback while its client is being freed
	 * still refers to its hold, which that free has released already. */
	dlock__hold_unref(lock->hold);
	g_free(lock->resource);
	g_free(lock->thread_key);
	g_free(lock->read_key);
	g_ptr_array_unref(lock->waiters);
	g_mutex_clear(&lock->mu);
	g_cond_clear(&lock->idle);
	g_cond_clear(&lock->placed);
	if (lock->recipe_ops)
		lock->recipe_ops->destroy(lock->recipe);
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

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	counted = !lock->freed;
	if (counted)
		lock->calls++;
	dlock__mutex_unlock(&lock->mu);
	return counted;
}

static void call_end(const dlock_lock *handle)
{
	dlock_lock *lock = (dlock_lock *)handle;

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	/* Only dlock_lock_free() waits on idle; a broadcast costs a system call. */
	if (--lock->calls == 0 && lock->freed)
		g_cond_broadcast(&lock->idle);
	dlock__mutex_unlock(&lock->mu);
}

int dlock__lock_enter(dlock_lock *lock, const char *what)
{
	int rc;

	if (!lock)
		return dlock__error(DLOCK_EINVAL, "%s: lock is NULL", what);
	if (!lock->client)
		return dlock__error(DLOCK_ECANCELED, "%s: the lock's client has been freed", what);
	/* Before any mutex: in a forked child one that a thread of the parent
	 * held at the fork stays held for good. */
	if (dlock__client_forked(lock->client))
		return dlock__client_enter(lock->client);
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

/* The keys of a handle's thread-owned holds: EXCLUSIVE and WRITE holds
 * share one (to dlock they are the same), READ holds have their own. */
static void thread_keys_set(dlock_lock *lock, const dlock__slot *slot)
{
	g_free(lock->thread_key);
	g_free(lock->read_key);
	lock->thread_key = g_strdup_printf("%p/%p/%s", (const void *)lock->client, (const void *)slot,
	                                   lock->resource);
	lock->read_key = g_strdup_printf("r:%s", lock->thread_key);
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
	g_cond_init(&lock->placed);
	lock->client = client;
	lock->resource = g_strdup(resource);
	lock->slot = slot;
	thread_keys_set(lock, slot);
	lock->owner = DLOCK_OWNER_THREAD;
	lock->watchdog = -1;
	lock->mode = DLOCK__MODE_EXCLUSIVE;
	lock->permits = 1;
	lock->waiters = g_ptr_array_new();

	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	g_hash_table_add(client->locks, lock);
	dlock__mutex_unlock(&client->mu);
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

	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	g_hash_table_iter_init(&iter, client->holds);
	while (g_hash_table_iter_next(&iter, &key, NULL))
		g_ptr_array_add(holds, dlock__hold_ref(key));
	dlock__mutex_unlock(&client->mu);
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
		dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
		lock->freed = true;
		for (guint i = 0; i < lock->waiters->len; i++)
			dlock__waiter_cancel(lock->waiters->pdata[i]);
		while (lock->calls > 0)
			g_cond_wait(&lock->idle, &lock->mu);
		dlock__mutex_unlock(&lock->mu);
		/* Its state events waiting for the program's dispatch go. */
		dlock__callbacks_drop(client, lock);
		/* A done of the handle running on the callback thread is
		 * waited for, unless this is it; then a call without a waiting
		 * thread whose done has not run yet has it run here, with
		 * DLOCK_ECANCELED -- one done of a handle at a time. */
		if (!dlock__callbacks_on_thread(client))
			dlock__op_wait_delivered(lock);
		dlock__op_claim(lock);

		holds = client_holds(client);
		for (guint i = 0; i < holds->len; i++)
			dlock__owner_drop(holds->pdata[i], lock);
		g_ptr_array_unref(holds);

		dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
		g_hash_table_remove(client->locks, lock);
		dlock__mutex_unlock(&client->mu);
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
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	if (lock->started) {
		dlock__mutex_unlock(&lock->mu);
		return dlock__error(DLOCK_EINVAL, "%s: options must be set before the first acquire", what);
	}
	return DLOCK_OK;
}

/*
 * Refuse, before any I/O, a hold the slot's backend cannot take: a READ
 * or WRITE mode without DLOCK__CAP_SHARED, more than one permit without
 * DLOCK__CAP_PERMITS.  The handle's first acquire checks here, whatever
 * order its options were set in, so a backend never sees a hold it cannot
 * serve; a setter of mode or permits may check here too, to fail sooner.
 */
static int check_support(const dlock__slot *slot, const char *resource, dlock__mode mode,
                         uint32_t permits)
{
	if (mode != DLOCK__MODE_EXCLUSIVE && !(slot->ops->caps & DLOCK__CAP_SHARED))
		return dlock__error(DLOCK_EINVAL, "lock '%s' asks for a %s hold, which backend '%s' "
		                    "(%s) does not support: it has exclusive holds only",
		                    resource, dlock__mode_name(mode), slot->name, slot->ops->type);
	if (permits > 1 && mode != DLOCK__MODE_EXCLUSIVE)
		return dlock__error(DLOCK_EINVAL, "lock '%s' asks for %" PRIu32 " permits and a %s hold: "
		                    "a semaphore's holds have no mode (leave it EXCLUSIVE)",
		                    resource, permits, dlock__mode_name(mode));
	if (permits > 1 && !(slot->ops->caps & DLOCK__CAP_PERMITS))
		return dlock__error(DLOCK_EINVAL, "lock '%s' asks for %" PRIu32 " permits, which backend "
		                    "'%s' (%s) does not support: it has one permit per resource only",
		                    resource, permits, slot->name, slot->ops->type);
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_ttl(dlock_lock *lock, int64_t ttl_ms)
{
	int rc = option_begin(lock, "dlock_lock_set_ttl");

	if (rc != DLOCK_OK)
		return rc;
	if (ttl_ms < DLOCK__TTL_MIN_MS || ttl_ms > DLOCK__TTL_MAX_MS) {
		dlock__mutex_unlock(&lock->mu);
		return dlock__error(DLOCK_EINVAL, "ttl %" G_GINT64_FORMAT " ms is outside the range from the "
		                    "minimum of %d ms to the maximum of %" G_GINT64_FORMAT " ms (7 days)",
		                    ttl_ms, DLOCK__TTL_MIN_MS, DLOCK__TTL_MAX_MS);
	}
	lock->ttl_ms = ttl_ms;
	dlock__mutex_unlock(&lock->mu);
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_watchdog(dlock_lock *lock, int enabled)
{
	int rc = option_begin(lock, "dlock_lock_set_watchdog");

	if (rc != DLOCK_OK)
		return rc;
	lock->watchdog = enabled ? 1 : 0;
	dlock__mutex_unlock(&lock->mu);
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_owner(dlock_lock *lock, dlock_owner owner)
{
	int rc = option_begin(lock, "dlock_lock_set_owner");

	if (rc != DLOCK_OK)
		return rc;
	if (owner != DLOCK_OWNER_THREAD && owner != DLOCK_OWNER_HANDLE) {
		dlock__mutex_unlock(&lock->mu);
		return dlock__error(DLOCK_EINVAL, "unknown owner mode %d", (int)owner);
	}
	lock->owner = owner;
	dlock__mutex_unlock(&lock->mu);
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_mode(dlock_lock *lock, dlock_mode mode)
{
	int rc = option_begin(lock, "dlock_lock_set_mode");

	if (rc != DLOCK_OK)
		return rc;
	if (mode != DLOCK_MODE_EXCLUSIVE && mode != DLOCK_MODE_READ && mode != DLOCK_MODE_WRITE) {
		dlock__mutex_unlock(&lock->mu);
		return dlock__error(DLOCK_EINVAL, "dlock_lock_set_mode: unknown mode %d (EXCLUSIVE 0, "
		                    "READ 1, WRITE 2)", (int)mode);
	}
	lock->mode = (dlock__mode)mode;
	dlock__mutex_unlock(&lock->mu);
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_permits(dlock_lock *lock, uint32_t permits)
{
	int rc = option_begin(lock, "dlock_lock_set_permits");

	if (rc != DLOCK_OK)
		return rc;
	if (permits < 1 || permits > DLOCK_PERMITS_MAX) {
		dlock__mutex_unlock(&lock->mu);
		return dlock__error(DLOCK_EINVAL, "dlock_lock_set_permits: %" PRIu32 " permits is outside "
		                    "the range from 1 (a lock) to %u", permits, DLOCK_PERMITS_MAX);
	}
	lock->permits = permits;
	dlock__mutex_unlock(&lock->mu);
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

		dlock__mutex_unlock(&lock->mu);
		rc = dlock__error(DLOCK_EINVAL, "no backend named '%s' in this client", shown);
		g_free(shown);
		return rc;
	}
	if (found->ops->check_resource &&
	    (rc = found->ops->check_resource(found->impl, lock->resource)) != DLOCK_OK) {
		dlock__mutex_unlock(&lock->mu);
		return rc;
	}
	lock->slot = found;
	thread_keys_set(lock, found);
	dlock__mutex_unlock(&lock->mu);
	return DLOCK_OK;
}

DLOCK_API int dlock_lock_set_state_callback(dlock_lock *lock, dlock_state_fn fn, void *user_data)
{
	if (!lock)
		return dlock__error(DLOCK_EINVAL, "dlock_lock_set_state_callback: lock is NULL");
	if (!lock->client || dlock__client_forked(lock->client))
		return dlock__error(DLOCK_ECANCELED, "client was freed or belongs to the parent process");
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	lock->state_fn = fn;
	lock->state_user_data = user_data;
	dlock__mutex_unlock(&lock->mu);
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

void dlock__lock_add_waiter(dlock_lock *lock, dlock__waiter *waiter)
{
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	g_ptr_array_add(lock->waiters, waiter);
	if (lock->freed || lock->closing)
		dlock__waiter_cancel(waiter);
	dlock__mutex_unlock(&lock->mu);
}

void dlock__lock_cancel_all(dlock_lock *lock)
{
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	lock->closing = true;
	for (guint i = 0; i < lock->waiters->len; i++)
		dlock__waiter_cancel(lock->waiters->pdata[i]);
	dlock__mutex_unlock(&lock->mu);
}

void dlock__lock_remove_waiter(dlock_lock *lock, dlock__waiter *waiter)
{
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	g_ptr_array_remove_fast(lock->waiters, waiter);
	dlock__mutex_unlock(&lock->mu);
}

/*
 * A grant that lands after dlock_lock_free() has begun on the handle is
 * not installed (the free would not see it): it is released at once and
 * the acquire returns DLOCK_ECANCELED.
 */
static bool grant_refused(dlock_lock *lock, dlock__hold *hold)
{
	bool freed;

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	freed = lock->freed;
	dlock__mutex_unlock(&lock->mu);
	if (!freed)
		return false;
	dlock__hold_discard(hold);
	return true;
}

/*
 * A cancel (dlock_lock_cancel(), the handle's free or the client's) that
 * came while the backend was in a step it cannot interrupt -- a connect, a
 * name lookup -- is what the caller asked for, and what dlock.h promises:
 * DLOCK_ECANCELED, whatever failure that step reported when it ended.
 * The backend's message is kept after it.
 */
int dlock__lock_canceled_failure(const dlock_lock *lock, int rc)
{
	char *why = g_strdup(dlock_last_error_message());

	rc = dlock__error(DLOCK_ECANCELED, "wait for lock '%s' was canceled (meanwhile: %s: %s)",
	                  lock->resource, dlock_strerror(rc), why);
	g_free(why);
	return rc;
}

/*
 * The first acquire freezes the options once they are found to fit the
 * backend; a refused handle may still be set right.
 */
int dlock__lock_freeze_options(dlock_lock *lock)
{
	int rc = DLOCK_OK;

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	if (!lock->started && lock->recipe_ops &&
	    (lock->mode != DLOCK__MODE_EXCLUSIVE || lock->permits != 1))
		rc = dlock__error(DLOCK_EINVAL, "%s '%s': its lock handle was given a mode or "
		                  "permits; an %s is an exclusive lock", lock->recipe_ops->kind,
		                  lock->resource, lock->recipe_ops->kind);
	else if (!lock->started)
		rc = check_support(lock->slot, lock->resource, lock->mode, lock->permits);
	if (rc == DLOCK_OK)
		lock->started = true;
	dlock__mutex_unlock(&lock->mu);
	return rc;
}

/*
 * A fresh hold from the backend, a downgrade of the owner's write-class
 * hold when downgrade is not NULL (its reference is taken over), installed
 * for its owner once granted.
 */
static int acquire_fresh(dlock_lock *lock, dlock__hold *downgrade, int64_t wait_ms,
                         int64_t deadline_us)
{
	dlock__hold *hold = dlock__hold_new(lock->client, lock);
	dlock__waiter *waiter;
	int rc;

	if (downgrade) {
		dlock__hold_set_downgrade(hold, downgrade);
		dlock__hold_unref(downgrade);
	}
	waiter = dlock__waiter_new();
	dlock__lock_add_waiter(lock, waiter);
	/* A try (wait 0) is bounded by the backend's own timeouts alone. */
	rc = dlock__slot_acquire(lock->slot, hold, waiter, wait_ms,
	                         wait_ms == 0 ? INT64_MAX : deadline_us);
	dlock__hold_set_downgrade(hold, NULL);
	if (rc != DLOCK_OK && rc != DLOCK_ECANCELED && dlock__waiter_canceled(waiter))
		rc = dlock__lock_canceled_failure(lock, rc);
	dlock__lock_remove_waiter(lock, waiter);
	dlock__waiter_free(waiter);
	if (rc == DLOCK_OK && grant_refused(lock, hold))
		rc = dlock__error(DLOCK_ECANCELED, "lock '%s': the handle was freed while acquiring; "
		                  "the grant was released", lock->resource);
	else if (rc == DLOCK_OK)
		dlock__owner_install(hold, lock);
	dlock__hold_unref(hold);
	return rc;
}

DLOCK_API int dlock_acquire(dlock_lock *lock, int64_t wait_ms)
{
	int64_t deadline_us = dlock__deadline_after_ms(wait_ms);
	dlock__hold *downgrade = NULL;
	int rc = dlock__lock_enter(lock, "dlock_acquire");

	if (rc == DLOCK_OK) {
		rc = dlock__lock_freeze_options(lock);
		/* A grant of the handle's call without a waiting thread would
		 * not be installed yet: the acquire would wait for it. */
		if (rc == DLOCK_OK && dlock__op_pending(lock))
			rc = dlock__error(DLOCK_EBUSY, "lock '%s' has a call without a waiting thread in "
			                  "flight, whose done has not run", lock->resource);
		/* Re-entry, refusal, or a fresh hold (maybe a downgrade). */
		if (rc == DLOCK_OK)
			rc = dlock__owner_settle(lock, deadline_us, &downgrade);
		if (rc == DLOCK__OWNER_FRESH)
			rc = acquire_fresh(lock, downgrade, wait_ms, deadline_us);
		dlock__lock_leave(lock);
	}
	return rc;
}

DLOCK_API int dlock_release(dlock_lock *lock)
{
	int rc = dlock__lock_enter(lock, "dlock_release");

	if (rc == DLOCK_OK) {
		rc = dlock__owner_release(lock);
		dlock__lock_leave(lock);
	}
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
	dlock__op_revoke(lock);
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	for (guint i = 0; i < lock->waiters->len; i++)
		dlock__waiter_cancel(lock->waiters->pdata[i]);
	dlock__mutex_unlock(&lock->mu);
	call_end(lock);
	return DLOCK_OK;
}

/* The caller's owner's relation to the lock, and its hold's fencing token
 * while HELD or SUSPENDED, for the local queries. */
static dlock_hold caller_state(const dlock_lock *lock, uint64_t *ret_token)
{
	dlock_hold state = DLOCK_HOLD_NONE;
	dlock__hold *hold;

	if (!lock || !lock->client || dlock__client_forked(lock->client))
		return state;
	if (!call_begin(lock))
		return state;
	hold = dlock__owner_find(lock);
	if (hold) {
		state = dlock__hold_state(hold, ret_token);
		dlock__hold_unref(hold);
	}
	call_end(lock);
	return state;
}

DLOCK_API int dlock_held(const dlock_lock *lock)
{
	return caller_state(lock, NULL) == DLOCK_HOLD_HELD;
}

DLOCK_API uint64_t dlock_fencing_token(const dlock_lock *lock)
{
	uint64_t token = 0;

	caller_state(lock, &token);
	return token;
}

dlock_hold dlock__lock_caller_hold(const dlock_lock *lock)
{
	return caller_state(lock, NULL);
}
