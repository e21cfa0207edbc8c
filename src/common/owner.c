/* SPDX-License-Identifier: MIT */
/*
 * Owners: who holds what, and what an acquire comes to for its caller.
 *
 * A hold belongs to its owner: the thread that took it (DLOCK_OWNER_THREAD)
 * or the handle it was taken through (DLOCK_OWNER_HANDLE).  This file
 * alone finds a caller's hold, decides what an acquire through a handle
 * means for the holds the caller's owner has -- a re-entry, a refusal, a
 * downgrade or a fresh hold (dlock__owner_settle()) -- puts a granted hold
 * where its owner will find it, and forgets it there when it ends.  The
 * hold's own state (phases, counts, reports) is hold.c's, which this file
 * calls and which never calls back.
 *
 * A thread-owned hold is in its owner thread's table, a GHashTable reached
 * through a GPrivate and keyed by the lock handle's thread_key (client,
 * backend, resource) -- or its read_key, for a READ hold: a thread may
 * hold a resource in both classes at once, after a downgrade -- so
 * re-entry costs one local lookup and no server round trip.  A
 * handle-owned hold hangs off its handle (lock->hold) instead.  Only the
 * owner thread touches its table; a hold released by anyone else (lock or
 * client teardown) has ended (dlock__hold_stale()) and its stale entry is
 * dropped on the owner's next lookup, by a sweep as the table grows
 * (table_sweep()) or at thread exit.
 */
#include <inttypes.h>

#include "core.h"
#include "mutex.h"

static void thread_table_destroy(gpointer data);

static GPrivate thread_holds = G_PRIVATE_INIT(thread_table_destroy);
/* The thread's table size at which its next install sweeps it. */
static GPrivate thread_sweep_at;

/* The smallest table that is swept. */
#define SWEEP_MIN 32

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

static gboolean entry_ended(gpointer key, gpointer value, gpointer data)
{
	(void)key;
	(void)data;
	return dlock__hold_ended(value);
}

/*
 * An entry whose hold was ended by another thread (its handle's or its
 * client's free) stays until the owner looks it up, and a long-lived
 * thread may never look at that resource again.  So an install sweeps
 * the ended entries out whenever the table has doubled since its last
 * sweep: the table stays within about twice the thread's live holds, at a
 * constant cost per install on average.
 */
static void table_sweep(GHashTable *table)
{
	guint at = MAX(GPOINTER_TO_UINT(g_private_get(&thread_sweep_at)), SWEEP_MIN);

	if (g_hash_table_size(table) < at)
		return;
	g_hash_table_foreach_remove(table, entry_ended, NULL);
	g_private_set(&thread_sweep_at, GUINT_TO_POINTER(2 * g_hash_table_size(table)));
}

unsigned dlock__owner_thread_count(void)
{
	GHashTable *table = thread_table(false);

	return table ? g_hash_table_size(table) : 0;
}

/* The key of a thread-owned hold of this mode through lock: READ holds
 * and the others are two owners' worth of holds in one table. */
static const char *key_for_mode(const dlock_lock *lock, dlock__mode mode)
{
	return mode == DLOCK__MODE_READ ? lock->read_key : lock->thread_key;
}

/* The caller thread's hold under key, referenced, or NULL; a stale entry
 * (ended, or of a freed client at the same address) is dropped. */
static dlock__hold *table_find(const dlock_lock *lock, const char *key)
{
	GHashTable *table = thread_table(false);
	dlock__hold *hold;

	if (!table)
		return NULL;
	hold = g_hash_table_lookup(table, key);
	if (!hold)
		return NULL;
	if (dlock__hold_stale(hold, lock->client)) {
		g_hash_table_remove(table, key);
		return NULL;
	}
	return dlock__hold_ref(hold);
}

/* The caller's owner's hold of the handle's class, whatever its permits:
 * dlock__owner_settle() refuses one of other permits. */
static dlock__hold *find_own(const dlock_lock *lock, uint32_t *ret_permits)
{
	dlock_lock *mlock = (dlock_lock *)lock; /* its mutex, not its contents */
	dlock__hold *hold = NULL;
	dlock__mode mode;

	dlock__mutex_lock(&mlock->mu, DLOCK__RANK_LOCK);
	*ret_permits = lock->permits;
	if (lock->owner == DLOCK_OWNER_HANDLE) {
		if (lock->hold)
			hold = dlock__hold_ref(lock->hold);
		dlock__mutex_unlock(&mlock->mu);
		return hold;
	}
	mode = lock->mode;
	dlock__mutex_unlock(&mlock->mu);
	return table_find(lock, key_for_mode(lock, mode));
}

/*
 * A hold of the owner's with other permits than the handle's (a lock and
 * a semaphore of one client on one resource, in one thread) is not what
 * the handle stands for: its acquire was refused, and its release, state
 * and token must not reach that hold.
 */
dlock__hold *dlock__owner_find(const dlock_lock *lock)
{
	uint32_t permits;
	dlock__hold *hold = find_own(lock, &permits);

	if (hold && dlock__hold_permits(hold) != permits) {
		dlock__hold_unref(hold);
		return NULL;
	}
	return hold;
}

/*
 * For a thread-owned handle, the caller's live (held or suspended) hold of
 * the other class on the same resource -- READ for an EXCLUSIVE or WRITE
 * handle, EXCLUSIVE or WRITE for a READ handle -- referenced, or NULL: an
 * upgrade to refuse or a downgrade to make.
 */
static dlock__hold *find_other(const dlock_lock *lock)
{
	dlock_lock *mlock = (dlock_lock *)lock;
	dlock__hold *hold;
	dlock__mode mode;

	dlock__mutex_lock(&mlock->mu, DLOCK__RANK_LOCK);
	mode = lock->mode;
	if (lock->owner == DLOCK_OWNER_HANDLE) {
		dlock__mutex_unlock(&mlock->mu);
		return NULL;
	}
	dlock__mutex_unlock(&mlock->mu);
	hold = table_find(lock, mode == DLOCK__MODE_READ ? lock->thread_key : lock->read_key);
	if (hold && !dlock__hold_live(hold)) {
		dlock__hold_unref(hold);
		return NULL;
	}
	return hold;
}

/*
 * Forget an ended hold: take it out of the client's registry and, if the
 * caller is its owner, out of the owner's table (or off its handle); then
 * end it on the server.  Returns the backend's release result.
 */
static int finish(dlock__hold *hold, dlock_lock *lock, bool by_owner)
{
	dlock_lock *owner = dlock__hold_unregister(hold);

	if (owner) {
		dlock__mutex_lock(&owner->mu, DLOCK__RANK_LOCK);
		if (owner->hold == hold) {
			owner->hold = NULL;
			dlock__hold_unref(hold);
		}
		dlock__mutex_unlock(&owner->mu);
	} else if (by_owner && lock) {
		GHashTable *table = thread_table(false);
		const char *key = key_for_mode(lock, dlock__hold_mode(hold));

		if (table && g_hash_table_lookup(table, key) == hold)
			g_hash_table_remove(table, key);
	}
	return dlock__hold_release(hold);
}

/* dlock__hold_reenter(), forgetting and releasing a hold found lost:
 * DLOCK_ELOST then.  A suspension is waited out on a waiter of the handle,
 * so that cancel and free reach it, made only when one is needed. */
static int reenter(dlock__hold *hold, dlock_lock *lock, int64_t deadline_us, bool count)
{
	dlock__waiter *waiter = NULL;
	int rc;

	while ((rc = dlock__hold_reenter(hold, lock, waiter, deadline_us, count)) == DLOCK__HOLD_WAIT) {
		waiter = dlock__waiter_new();
		dlock__lock_add_waiter(lock, waiter);
	}
	if (waiter) {
		dlock__lock_remove_waiter(lock, waiter);
		dlock__waiter_free(waiter);
	}
	if (rc == DLOCK__HOLD_CLEARED) {
		finish(hold, lock, true);
		rc = dlock__error(DLOCK_ELOST, "lock '%s' was lost while held; the hold is cleared",
		                  dlock__hold_resource(hold));
	}
	return rc;
}

int dlock__owner_confirm(dlock_lock *lock, int64_t deadline_us)
{
	dlock__hold *hold = dlock__owner_find(lock);
	int rc = hold ? reenter(hold, lock, deadline_us, false) : DLOCK__HOLD_ENDED;

	dlock__hold_unref(hold);
	return rc;
}

const char *dlock__mode_name(dlock__mode mode)
{
	switch (mode) {
	case DLOCK__MODE_READ:
		return "READ";
	case DLOCK__MODE_WRITE:
		return "WRITE";
	default:
		return "EXCLUSIVE";
	}
}

/*
 * The caller's owner holds the resource already, with another number of
 * permits than the handle asks for (a semaphore and a lock, or two
 * semaphores of different sizes): neither a re-entry nor a second hold
 * would mean what the caller wants.
 */
static int permits_mismatch(const dlock_lock *lock, const dlock__hold *held)
{
	return dlock__error(DLOCK_EINVAL, "lock '%s': the caller holds it with %" PRIu32 " permit%s; "
	                    "this handle asks for %" PRIu32, lock->resource, dlock__hold_permits(held),
	                    dlock__hold_permits(held) == 1 ? " (a lock)" : "s", lock->permits);
}

/* The owner's hold of the other class: an upgrade is refused, a downgrade
 * goes to the backend as one (*ret_downgrade). */
static int settle_other(dlock_lock *lock, dlock__hold **ret_downgrade)
{
	dlock__hold *other = find_other(lock);
	int rc = DLOCK__OWNER_FRESH;

	if (other && dlock__hold_permits(other) != lock->permits)
		rc = permits_mismatch(lock, other);
	else if (other && lock->mode != DLOCK__MODE_READ)
		rc = dlock__error(DLOCK_EDEADLK, "lock '%s': the caller holds it for reading; a %s hold "
		                  "would wait for that hold itself (release it first)", lock->resource,
		                  dlock__mode_name(lock->mode));
	if (rc == DLOCK__OWNER_FRESH) {
		*ret_downgrade = other;
		other = NULL;
	}
	dlock__hold_unref(other);
	return rc;
}

int dlock__owner_settle(dlock_lock *lock, int64_t deadline_us, dlock__hold **ret_downgrade)
{
	uint32_t permits;
	dlock__hold *hold = find_own(lock, &permits);
	int rc = DLOCK__HOLD_ENDED;

	*ret_downgrade = NULL;
	if (hold) {
		rc = dlock__hold_permits(hold) != lock->permits ? permits_mismatch(lock, hold)
		                                                : reenter(hold, lock, deadline_us, true);
		dlock__hold_unref(hold);
	}
	/* No hold, or one that ended meanwhile (released by teardown). */
	if (rc == DLOCK__HOLD_ENDED)
		rc = settle_other(lock, ret_downgrade);
	return rc;
}

int dlock__owner_settle_step(dlock_lock *lock, int64_t deadline_us, dlock__waiter *waiter,
                             bool count, bool may_block, dlock__turn *ret_turn,
                             dlock__hold **ret_downgrade)
{
	uint32_t permits;
	dlock__hold *hold = find_own(lock, &permits);
	int rc = DLOCK__HOLD_ENDED;

	*ret_downgrade = NULL;
	if (hold && dlock__hold_permits(hold) != lock->permits) {
		rc = permits_mismatch(lock, hold);
	} else if (hold) {
		rc = dlock__hold_reenter_step(hold, lock, waiter, deadline_us, count, may_block, ret_turn);
		if (rc == DLOCK__HOLD_WAIT)
			rc = DLOCK__OWNER_WAIT;
		/* Clearing it would release it on the server, which waits for
		 * an answer: left as it is, for a call that may wait. */
		if (rc == DLOCK__HOLD_LEFT_LOST)
			rc = DLOCK__OWNER_WOULD_BLOCK;
		if (rc == DLOCK__HOLD_CLEARED) {
			finish(hold, lock, true);
			rc = dlock__error(DLOCK_ELOST, "lock '%s' was lost while held; the hold is cleared",
			                  dlock__hold_resource(hold));
		}
	}
	dlock__hold_unref(hold);
	if (rc == DLOCK__HOLD_ENDED)
		rc = settle_other(lock, ret_downgrade);
	return rc;
}

/*
 * Threads sharing a handle may race to a fresh grant, and where holds
 * share (READ, a semaphore's permits) the server may grant both.  The
 * handle is one owner with one hold: there a grant that finds the
 * handle's hold HELD is one more count of it, and its own grant is given
 * back (if that hold was lost unknown to us, the loss is told when it is
 * known).  An exclusive grant proves the older hold gone from the server,
 * and a grant that finds one not HELD -- lost, or suspended -- cannot
 * count on it: either replaces it.  The loss is still owed to the
 * handle's next release (DLOCK_ELOST), and to its state callback if the
 * backend has not reported it yet (dlock__hold_supersede()).  Grants are
 * placed one at a time, so that the second of two finds the first.
 */
static void place_begin(dlock_lock *lock)
{
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	while (lock->placing)
		g_cond_wait(&lock->placed, &lock->mu);
	lock->placing = true;
	dlock__mutex_unlock(&lock->mu);
}

static void place_end(dlock_lock *lock)
{
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	lock->placing = false;
	g_cond_broadcast(&lock->placed);
	dlock__mutex_unlock(&lock->mu);
}

/* The handle's hold, referenced, or NULL. */
static dlock__hold *handle_hold(dlock_lock *lock)
{
	dlock__hold *hold = NULL;

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	if (lock->hold)
		hold = dlock__hold_ref(lock->hold);
	dlock__mutex_unlock(&lock->mu);
	return hold;
}

static void handle_place(dlock__hold *hold, dlock_lock *lock)
{
	dlock__hold *old;

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	old = lock->hold;
	lock->hold = dlock__hold_ref(hold);
	dlock__mutex_unlock(&lock->mu);
	if (!old)
		return;
	/* One that ended already is forgotten and released by whoever ended
	 * it. */
	if (dlock__hold_supersede(old)) {
		dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
		lock->lost_pending = true;
		dlock__mutex_unlock(&lock->mu);
		finish(old, lock, false);
	}
	dlock__hold_unref(old);
}

static void handle_install(dlock__hold *hold, dlock_lock *lock)
{
	dlock__hold *old;

	place_begin(lock);
	old = handle_hold(lock);
	/* Mode and permits are frozen, as the owner option. */
	if (old && (lock->mode == DLOCK__MODE_READ || lock->permits > 1) && dlock__hold_join(old, lock)) {
		dlock__hold_discard(hold);
	} else {
		dlock__hold_grant(hold, lock);
		handle_place(hold, lock);
		dlock__hold_tell_grant(hold);
	}
	place_end(lock);
	dlock__hold_unref(old);
}

void dlock__owner_install(dlock__hold *hold, dlock_lock *lock)
{
	GHashTable *table;

	/* The owner option is frozen since the first acquire began. */
	if (lock->owner == DLOCK_OWNER_HANDLE) {
		handle_install(hold, lock);
		return;
	}
	dlock__hold_grant(hold, lock);
	table = thread_table(true);
	table_sweep(table);
	g_hash_table_replace(table, g_strdup(key_for_mode(lock, dlock__hold_mode(hold))),
	                     dlock__hold_ref(hold));
	dlock__hold_tell_grant(hold);
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

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	pending = lock->lost_pending;
	lock->lost_pending = false;
	dlock__mutex_unlock(&lock->mu);
	return pending;
}

int dlock__owner_release(dlock_lock *lock)
{
	dlock__hold *hold;
	bool last;
	int rc;

	if (take_lost_pending(lock))
		return dlock__error(DLOCK_ELOST, "lock '%s' had been lost before this release (a later "
		                    "acquire through this handle holds it again)", lock->resource);
	hold = dlock__owner_find(lock);
	if (!hold)
		return dlock__error(DLOCK_ENOTHELD, "lock '%s' is not held by the caller", lock->resource);
	rc = dlock__hold_count_down(hold, lock, &last);
	if (last) {
		int released = finish(hold, lock, true);

		if (rc == DLOCK_OK && released == DLOCK_ELOST)
			rc = dlock__error(DLOCK_ELOST, "lock '%s' had expired on the server before this release",
			                  lock->resource);
	}
	dlock__hold_unref(hold);
	return rc;
}

void dlock__owner_drop(dlock__hold *hold, dlock_lock *lock)
{
	if (dlock__hold_drop_lock(hold, lock))
		finish(hold, lock, false);
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
		dlock_client *client = dlock__hold_end_at_exit(hold);

		if (client) {
			finish(hold, NULL, false);
			dlock__client_leave(client);
		}
	}
	g_hash_table_destroy(table);
}
