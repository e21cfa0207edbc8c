/*
 * Holds: one granted lock, its owner, its reentrancy count and its state.
 *
 * Every live hold is in its client's registry (client->holds), which
 * teardown walks.  A thread-owned hold is also in its owner thread's table,
 * a GHashTable reached through a GPrivate and keyed by the lock handle's
 * thread_key (client, backend, resource), so re-entry costs one local
 * lookup and no server round trip.  A handle-owned hold hangs off its
 * handle instead.  Only the owner thread touches its table; a hold released
 * by anyone else (lock or client teardown) is marked HOLD_RELEASED and its
 * stale entry is dropped on the owner's next lookup or at thread exit.
 */
#include <unistd.h>

#include "clock.h"
#include "core.h"

static void thread_table_destroy(gpointer data);

static GPrivate thread_holds = G_PRIVATE_INIT(thread_table_destroy);

static GHashTable *thread_table(bool create)
{
	GHashTable *table = g_private_get(&thread_holds);

	if (!table && create) {
		table = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
		                              (GDestroyNotify)dlock__hold_unref);
		g_private_set(&thread_holds, table);
	}
	return table;
}

dlock__hold *dlock__hold_new(dlock_client *client, dlock_lock *lock)
{
	dlock__hold *hold = g_new0(dlock__hold, 1);
	const dlock__slot *slot = lock->slot;

	g_atomic_ref_count_init(&hold->ref);
	g_mutex_init(&hold->mu);
	hold->slot = lock->slot;
	hold->resource = g_strdup(lock->resource);
	/* As dlock__holder_init_self(), without a system call for the host
	 * name (GLib keeps it) or the pid (the client keeps it). */
	hold->holder.host = g_strdup(g_get_host_name());
	hold->holder.pid = client->pid;
	hold->holder.tid = gettid();
	hold->holder.since_ms = dlock__wall_ms();
	g_mutex_lock(&lock->mu);
	hold->ttl_ms = slot->ttl_ms && lock->ttl_ms > 0 ? lock->ttl_ms : slot->ttl_ms;
	hold->watchdog = slot->ttl_ms && (lock->watchdog >= 0 ? lock->watchdog != 0 : slot->watchdog);
	if (lock->owner == DLOCK_OWNER_HANDLE)
		hold->handle_owner = lock;
	g_mutex_unlock(&lock->mu);
	hold->client = client;
	hold->phase = HOLD_ACQUIRING;
	atomic_init(&hold->valid_until_us, INT64_MAX);
	hold->via = g_array_new(FALSE, TRUE, sizeof(hold_via));
	hold->waiters = g_ptr_array_new();
	return hold;
}

dlock__hold *dlock__hold_ref(dlock__hold *hold)
{
	g_atomic_ref_count_inc(&hold->ref);
	return hold;
}

void dlock__hold_unref(dlock__hold *hold)
{
	if (!hold || !g_atomic_ref_count_dec(&hold->ref))
		return;
	g_free(hold->resource);
	dlock__holder_clear(&hold->holder);
	g_array_unref(hold->via);
	g_ptr_array_unref(hold->waiters);
	g_mutex_clear(&hold->mu);
	g_free(hold);
}

const char *dlock__hold_resource(const dlock__hold *hold)
{
	return hold->resource;
}

int64_t dlock__hold_ttl_ms(const dlock__hold *hold)
{
	return hold->ttl_ms;
}

bool dlock__hold_watchdog(const dlock__hold *hold)
{
	return hold->watchdog;
}

const dlock__holder *dlock__hold_holder(const dlock__hold *hold)
{
	return &hold->holder;
}

void dlock__hold_set_backend_data(dlock__hold *hold, void *data)
{
	hold->backend_data = data;
}

void *dlock__hold_backend_data(const dlock__hold *hold)
{
	return hold->backend_data;
}

void dlock__hold_set_token(dlock__hold *hold, uint64_t token)
{
	g_mutex_lock(&hold->mu);
	hold->token = token;
	g_mutex_unlock(&hold->mu);
}

void dlock__hold_set_valid_until(dlock__hold *hold, int64_t boot_us)
{
	atomic_store(&hold->valid_until_us, boot_us);
}

/* Tell the handles the counts came through, and wake re-entrants waiting
 * out a suspension.  Called with hold->mu held. */
static void notify_locked(dlock__hold *hold, dlock_state state)
{
	for (guint i = 0; i < hold->waiters->len; i++)
		dlock__waiter_wake(hold->waiters->pdata[i]);
	if (!hold->client)
		return;
	for (guint i = 0; i < hold->via->len; i++) {
		hold_via *via = &g_array_index(hold->via, hold_via, i);

		if (via->count > 0)
			dlock__callbacks_post(hold->client, via->lock, state);
	}
}

void dlock__hold_check_expiry_locked(dlock__hold *hold)
{
	int64_t until;

	if (hold->phase != HOLD_HELD && hold->phase != HOLD_SUSPENDED)
		return;
	until = atomic_load(&hold->valid_until_us);
	/* Costs a clock read (vDSO), no system call, and only for a bounded hold. */
	if (until == INT64_MAX || dlock__boot_us() < until)
		return;
	hold->phase = HOLD_LOST;
	notify_locked(hold, DLOCK_STATE_LOST);
}

void dlock__hold_end_locked(dlock__hold *hold)
{
	hold->phase = HOLD_RELEASED;
	hold->count = 0;
	for (guint i = 0; i < hold->waiters->len; i++)
		dlock__waiter_wake(hold->waiters->pdata[i]);
}

void dlock__hold_report(dlock__hold *hold, dlock_state state)
{
	g_mutex_lock(&hold->mu);
	switch (state) {
	case DLOCK_STATE_SUSPENDED:
		if (hold->phase == HOLD_HELD) {
			hold->phase = HOLD_SUSPENDED;
			notify_locked(hold, state);
		} else if (hold->phase == HOLD_ACQUIRING) {
			hold->phase = HOLD_SUSPENDED;
		}
		break;
	case DLOCK_STATE_RECONNECTED:
		if (hold->phase == HOLD_SUSPENDED) {
			hold->phase = HOLD_HELD;
			notify_locked(hold, state);
		}
		break;
	case DLOCK_STATE_LOST:
		if (hold->phase == HOLD_HELD || hold->phase == HOLD_SUSPENDED ||
		    hold->phase == HOLD_ACQUIRING) {
			hold->phase = HOLD_LOST;
			notify_locked(hold, state);
		}
		break;
	}
	g_mutex_unlock(&hold->mu);
}

dlock__hold *dlock__hold_find(const dlock_lock *lock)
{
	dlock_lock *mlock = (dlock_lock *)lock; /* its mutex, not its contents */
	dlock__hold *hold = NULL;
	GHashTable *table;
	bool stale;

	g_mutex_lock(&mlock->mu);
	if (lock->owner == DLOCK_OWNER_HANDLE) {
		if (lock->hold)
			hold = dlock__hold_ref(lock->hold);
		g_mutex_unlock(&mlock->mu);
		return hold;
	}
	g_mutex_unlock(&mlock->mu);

	table = thread_table(false);
	if (!table)
		return NULL;
	hold = g_hash_table_lookup(table, lock->thread_key);
	if (!hold)
		return NULL;
	g_mutex_lock(&hold->mu);
	stale = hold->phase == HOLD_RELEASED || hold->client != lock->client;
	g_mutex_unlock(&hold->mu);
	if (stale) {
		g_hash_table_remove(table, lock->thread_key);
		return NULL;
	}
	return dlock__hold_ref(hold);
}

void dlock__hold_install(dlock__hold *hold, dlock_lock *lock)
{
	dlock_client *client = lock->client;
	hold_via via = { lock, 1 };
	hold_phase granted;

	/* Counted and HELD before another thread can find it through the
	 * handle: a re-entry that found it still ACQUIRING would go to the
	 * server and queue behind this very hold.  A suspension or loss the
	 * backend reported before this is told to the handle at the end, after
	 * an older hold's loss (reports from now on are told as they come). */
	g_mutex_lock(&hold->mu);
	g_array_append_val(hold->via, via);
	hold->count = 1;
	granted = hold->phase;
	if (hold->phase == HOLD_ACQUIRING)
		hold->phase = HOLD_HELD;
	g_mutex_unlock(&hold->mu);

	g_mutex_lock(&client->mu);
	g_hash_table_add(client->holds, dlock__hold_ref(hold));
	g_mutex_unlock(&client->mu);

	if (hold->handle_owner) {
		dlock__hold *old;

		/* Threads sharing a handle may race to a fresh grant.  The one that
		 * finds an older hold here won because that hold had ended on the
		 * server (lost): the new grant replaces it.  The loss is still owed
		 * to the handle's next release (DLOCK_ELOST), and to its state
		 * callback if the backend has not reported it yet. */
		g_mutex_lock(&lock->mu);
		old = lock->hold;
		lock->hold = dlock__hold_ref(hold);
		g_mutex_unlock(&lock->mu);
		if (old) {
			bool lost;

			g_mutex_lock(&old->mu);
			lost = old->phase == HOLD_HELD || old->phase == HOLD_SUSPENDED ||
			       old->phase == HOLD_LOST;
			if (old->phase == HOLD_HELD || old->phase == HOLD_SUSPENDED)
				notify_locked(old, DLOCK_STATE_LOST);
			dlock__hold_end_locked(old);
			old->handle_owner = NULL;
			g_mutex_unlock(&old->mu);
			if (lost) {
				g_mutex_lock(&lock->mu);
				lock->lost_pending = true;
				g_mutex_unlock(&lock->mu);
			}
			dlock__hold_finish(old, lock, false);
			dlock__hold_unref(old);
		}
	} else {
		g_hash_table_replace(thread_table(true), g_strdup(lock->thread_key),
		                     dlock__hold_ref(hold));
	}

	g_mutex_lock(&hold->mu);
	if (granted == HOLD_SUSPENDED && hold->phase == HOLD_SUSPENDED)
		notify_locked(hold, DLOCK_STATE_SUSPENDED);
	else if (granted == HOLD_LOST && hold->phase == HOLD_LOST)
		notify_locked(hold, DLOCK_STATE_LOST);
	g_mutex_unlock(&hold->mu);
}

int dlock__hold_finish(dlock__hold *hold, dlock_lock *lock, bool by_owner)
{
	dlock_client *client;
	dlock_lock *owner;
	bool registered;

	g_mutex_lock(&hold->mu);
	client = hold->client;
	owner = hold->handle_owner;
	g_mutex_unlock(&hold->mu);

	if (client) {
		g_mutex_lock(&client->mu);
		registered = g_hash_table_steal(client->holds, hold);
		g_mutex_unlock(&client->mu);
		if (registered)
			dlock__hold_unref(hold);
	}
	if (owner) {
		g_mutex_lock(&owner->mu);
		if (owner->hold == hold) {
			owner->hold = NULL;
			dlock__hold_unref(hold);
		}
		g_mutex_unlock(&owner->mu);
	} else if (by_owner && lock) {
		GHashTable *table = thread_table(false);

		if (table && g_hash_table_lookup(table, lock->thread_key) == hold)
			g_hash_table_remove(table, lock->thread_key);
	}
	return hold->slot->ops->release(hold->slot->impl, hold);
}

void dlock__hold_drop_lock(dlock__hold *hold, dlock_lock *lock)
{
	bool finish = false;

	g_mutex_lock(&hold->mu);
	for (guint i = 0; i < hold->via->len; i++) {
		hold_via *via = &g_array_index(hold->via, hold_via, i);

		if (via->lock != lock)
			continue;
		hold->count -= via->count;
		g_array_remove_index_fast(hold->via, i);
		break;
	}
	if ((hold->count == 0 || hold->handle_owner == lock) &&
	    (hold->phase == HOLD_HELD || hold->phase == HOLD_SUSPENDED ||
	     hold->phase == HOLD_LOST)) {
		dlock__hold_end_locked(hold);
		finish = true;
	}
	g_mutex_unlock(&hold->mu);
	if (finish)
		dlock__hold_finish(hold, lock, false);
}

void dlock__hold_teardown(dlock__hold *hold)
{
	bool release;

	g_mutex_lock(&hold->mu);
	release = hold->phase == HOLD_HELD || hold->phase == HOLD_SUSPENDED ||
	          hold->phase == HOLD_LOST;
	dlock__hold_end_locked(hold);
	hold->client = NULL;
	g_array_set_size(hold->via, 0);
	g_mutex_unlock(&hold->mu);
	if (release)
		hold->slot->ops->release(hold->slot->impl, hold);
}

/*
 * A thread that exits holding locks has them released, as if it had
 * called dlock_release() until each count reached zero.  Holds whose client
 * is being freed are left to that teardown.
 */
static void thread_table_destroy(gpointer data)
{
	GHashTable *table = data;
	GHashTableIter iter;
	gpointer value;

	g_hash_table_iter_init(&iter, table);
	while (g_hash_table_iter_next(&iter, NULL, &value)) {
		dlock__hold *hold = value;
		dlock_client *client;
		bool release = false;

		g_mutex_lock(&hold->mu);
		client = hold->client;
		if (client && (hold->phase == HOLD_HELD || hold->phase == HOLD_SUSPENDED ||
		               hold->phase == HOLD_LOST) &&
		    dlock__client_enter(client) == DLOCK_OK) {
			dlock__hold_end_locked(hold);
			release = true;
		}
		g_mutex_unlock(&hold->mu);
		if (release) {
			dlock__hold_finish(hold, NULL, false);
			dlock__client_leave(client);
		}
	}
	g_hash_table_destroy(table);
}
