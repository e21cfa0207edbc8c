/* SPDX-License-Identifier: MIT */
/*
 * Holds: one granted lock, its reentrancy count and its state.  The
 * hold's state machine lives here alone: its phases, the counts of
 * re-entry and which handles they came through, and every transition --
 * grant, re-entry, count down, report, expiry, abandon, end -- with the
 * pins of downgrades under way and the backend's release.  Where a hold
 * is found -- its owner thread's table, or its handle -- and what an
 * acquire comes to for an owner are owner.c's, which calls these; nothing
 * here writes a lock handle's fields or calls owner.c: a transition that
 * ends a hold says so, and owner.c forgets it and releases it.
 *
 * Every live hold is in its client's registry (client->holds), which
 * teardown walks.  A hold released by anyone but its owner (lock or
 * client teardown) ends here (HOLD_RELEASED), and its owner's stale
 * reference is dropped on its next lookup (dlock__hold_stale()).
 */
#include <unistd.h>

#include "clock.h"
#include "core.h"
#include "mutex.h"

typedef enum hold_phase {
	HOLD_ACQUIRING,  /* the backend is taking it */
	HOLD_HELD,
	HOLD_SUSPENDED,
	HOLD_LOST,
	HOLD_RELEASED    /* released (or never granted): a stale reference */
} hold_phase;

/*
 * A hold the core declared LOST by the clock (check_expiry_locked()) is
 * handed to the backend's abandon, once, by the thread that looked, after
 * it lets go of hold->mu; its release waits for an abandon under way and
 * makes a pending one needless (settle_locked()).
 */
typedef enum hold_abandon {
	ABANDON_NONE,    /* not lost by the clock, or the backend has no abandon */
	ABANDON_DUE,     /* lost by the clock: the backend is still to be told */
	ABANDON_RUNNING, /* being told, on some thread */
	ABANDON_DONE     /* told, or the release took care of it */
} hold_abandon;

/* The counts that came through one handle. */
typedef struct hold_via {
	dlock_lock *lock;
	unsigned count;
} hold_via;

struct dlock__hold {
	gatomicrefcount ref;
	GMutex mu;               /* guards the fields below the line (rank HOLD) */
	/* fixed at creation */
	dlock__slot *slot;
	char *resource;
	dlock__holder holder;
	dlock__mode mode;
	uint32_t permits;
	int64_t ttl_ms;
	bool watchdog;
	/* ---- */
	dlock_client *client;    /* NULL once the client has been freed */
	hold_phase phase;
	unsigned count;          /* reentrancy count, the sum of via[].count */
	GArray *via;             /* of hold_via: which handles the counts came through */
	GPtrArray *waiters;      /* dlock__waiter * re-entering while suspended */
	uint64_t token;
	_Atomic int64_t valid_until_us; /* not under mu: dlock__hold_set_valid_until() */
	void *backend_data;
	dlock_lock *handle_owner; /* DLOCK_OWNER_HANDLE: the owning handle, else NULL */
	dlock__hold *downgrade_of; /* during a downgrade's acquire: the write hold, referenced */
	hold_abandon abandon;
	unsigned pins;           /* downgrades under way that read this write hold */
	GCond settled;           /* broadcast when abandon leaves ABANDON_RUNNING
	                          * and when pins drops to 0 */
	dlock_lock *tell_grant;  /* a recipe's handle not yet told of this grant */
	hold_phase granted_as;   /* its phase when granted, until the grant is told */
};

dlock__hold *dlock__hold_new(dlock_client *client, dlock_lock *lock)
{
	dlock__hold *hold = g_new0(dlock__hold, 1);
	const dlock__slot *slot = lock->slot;

	g_atomic_ref_count_init(&hold->ref);
	g_mutex_init(&hold->mu);
	g_cond_init(&hold->settled);
	hold->slot = lock->slot;
	hold->resource = g_strdup(lock->resource);
	/* As dlock__holder_init_self(), without a system call for the host
	 * name (GLib keeps it) or the pid (the client keeps it). */
	hold->holder.host = g_strdup(g_get_host_name());
	hold->holder.pid = client->pid;
	hold->holder.tid = dlock__self_tid();
	hold->holder.since_ms = dlock__wall_ms();
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	hold->mode = lock->mode;
	hold->permits = lock->permits;
	/* Only a lease has a TTL and a watchdog; elsewhere the handle's
	 * settings are accepted and mean nothing. */
	if (slot->ops->caps & DLOCK__CAP_LEASE) {
		hold->ttl_ms = lock->ttl_ms > 0 ? lock->ttl_ms : slot->ttl_ms;
		hold->watchdog = lock->watchdog >= 0 ? lock->watchdog != 0 : slot->watchdog;
	}
	if (lock->owner == DLOCK_OWNER_HANDLE)
		hold->handle_owner = lock;
	if (lock->recipe_ops)
		hold->holder.id = g_strdup(lock->recipe_ops->holder_id(lock->recipe));
	dlock__mutex_unlock(&lock->mu);
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
	dlock__hold_unref(hold->downgrade_of);
	g_free(hold->resource);
	dlock__holder_clear(&hold->holder);
	g_array_unref(hold->via);
	g_ptr_array_unref(hold->waiters);
	g_cond_clear(&hold->settled);
	g_mutex_clear(&hold->mu);
	g_free(hold);
}

const char *dlock__hold_resource(const dlock__hold *hold)
{
	return hold->resource;
}

dlock__mode dlock__hold_mode(const dlock__hold *hold)
{
	return hold->mode;
}

dlock__hold *dlock__hold_downgrade_of(const dlock__hold *hold)
{
	return hold->downgrade_of;
}

uint32_t dlock__hold_permits(const dlock__hold *hold)
{
	return hold->permits;
}

int64_t dlock__hold_ttl_ms(const dlock__hold *hold)
{
	return hold->ttl_ms;
}

bool dlock__hold_watchdog(const dlock__hold *hold)
{
	return hold->watchdog;
}

const char *dlock__hold_participant(const dlock__hold *hold)
{
	return hold->holder.id;
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
	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	hold->token = token;
	dlock__mutex_unlock(&hold->mu);
}

void dlock__hold_set_valid_until(dlock__hold *hold, int64_t boot_us)
{
	atomic_store(&hold->valid_until_us, boot_us);
}

/* ---- phases ----------------------------------------------------------- */

/* Granted and, as far as we know, still ours on the server. */
static bool live_locked(const dlock__hold *hold)
{
	dlock__mutex_assert_held(&hold->mu);
	return hold->phase == HOLD_HELD || hold->phase == HOLD_SUSPENDED;
}

/* Granted and not yet ended on our side: whoever ends it owes the server a
 * release (a lost hold too, whose key may still be ours there). */
static bool owes_release_locked(const dlock__hold *hold)
{
	dlock__mutex_assert_held(&hold->mu);
	return live_locked(hold) || hold->phase == HOLD_LOST;
}

/* Ended on our side: a reference to it is stale. */
static bool ended_locked(const dlock__hold *hold)
{
	dlock__mutex_assert_held(&hold->mu);
	return hold->phase == HOLD_RELEASED;
}

/*
 * A recipe's handle hears of its grant (DLOCK__EVENT_GRANT; an election
 * tells it as ELECTED) once, before anything else of the hold: when the
 * grant is installed and can be found, or, if a state change or the
 * hold's end comes first (a resignation from another thread as the
 * campaign returns), just before that.  Called with hold->mu held.
 */
static void tell_grant_locked(dlock__hold *hold)
{
	dlock__mutex_assert_held(&hold->mu);
	if (hold->tell_grant && hold->client)
		dlock__callbacks_post_event(hold->client, hold->tell_grant, DLOCK__EVENT_GRANT, 0, NULL);
	hold->tell_grant = NULL;
}

/* Tell the handles the counts came through, and wake re-entrants waiting
 * out a suspension.  Called with hold->mu held. */
static void notify_locked(dlock__hold *hold, dlock_state state)
{
	dlock__mutex_assert_held(&hold->mu);
	tell_grant_locked(hold);
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

/*
 * A HELD or SUSPENDED hold whose backend bound (valid_until_us) has passed
 * becomes LOST now, reported as the backend's own LOST report would be
 * (once).  Every local look at a hold's phase goes through here first, so
 * that no caller sees a hold as its own past that bound.
 *
 * The backend has not seen the loss: its renewal or session may still
 * succeed (an answer that comes after a pause), and it would keep the
 * lock on the server for a holder that was told it lost it.  The hold is
 * marked for abandon_if_due(), which the looking thread calls once it has
 * let go of hold->mu.
 */
static void check_expiry_locked(dlock__hold *hold)
{
	int64_t until;

	dlock__mutex_assert_held(&hold->mu);
	if (!live_locked(hold))
		return;
	until = atomic_load(&hold->valid_until_us);
	/* Costs a clock read (vDSO), no system call, and only for a bounded hold. */
	if (until == INT64_MAX || dlock__boot_us() < until)
		return;
	hold->phase = HOLD_LOST;
	if (hold->slot->ops->abandon && hold->abandon == ABANDON_NONE)
		hold->abandon = ABANDON_DUE;
	notify_locked(hold, DLOCK_STATE_LOST);
}

/*
 * Tell the backend of a loss the clock found (check_expiry_locked()): it
 * stops keeping the hold and removes what is left of it on the server in
 * the background, so others get in without waiting for the owner's
 * release.  Called without hold->mu, by whoever looked; a release that
 * comes meanwhile waits for it (settle_locked()).
 */
static void abandon_if_due(dlock__hold *hold)
{
	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	if (hold->abandon != ABANDON_DUE) {
		dlock__mutex_unlock(&hold->mu);
		return;
	}
	hold->abandon = ABANDON_RUNNING;
	dlock__mutex_unlock(&hold->mu);
	hold->slot->ops->abandon(hold->slot->impl, hold);
	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	hold->abandon = ABANDON_DONE;
	g_cond_broadcast(&hold->settled);
	dlock__mutex_unlock(&hold->mu);
}

/* Before the release on the server: an abandon under way finishes first
 * (the backend's state of the hold goes with the release), one not begun
 * never runs (the release does its work), and a downgrade that reads the
 * hold's backend state returns first (dlock__hold_set_downgrade()).
 * hold->mu held. */
static void settle_locked(dlock__hold *hold)
{
	dlock__mutex_assert_held(&hold->mu);
	while (hold->abandon == ABANDON_RUNNING || hold->pins > 0)
		g_cond_wait(&hold->settled, &hold->mu);
	if (hold->abandon == ABANDON_DUE)
		hold->abandon = ABANDON_DONE;
}

/*
 * A downgrade's acquire reads the write hold's backend state (its lease,
 * its node, its descriptor) while it runs, and another thread may release
 * the write hold meanwhile, by freeing its handle.  So the write hold is
 * pinned -- only while it is live -- and its release on the server waits
 * until the downgrade's acquire is over (settle_locked()), which then
 * keeps the read hold as a downgrade should.  A write hold that ended
 * before it could be pinned makes no downgrade: the read hold is
 * acquired as any reader's.
 */
bool dlock__hold_set_downgrade(dlock__hold *hold, dlock__hold *write)
{
	dlock__hold *old = hold->downgrade_of;
	bool live = false;

	if (write) {
		dlock__mutex_lock(&write->mu, DLOCK__RANK_HOLD);
		check_expiry_locked(write);
		live = live_locked(write);
		if (live)
			write->pins++;
		dlock__mutex_unlock(&write->mu);
		abandon_if_due(write);
	}
	hold->downgrade_of = live ? dlock__hold_ref(write) : NULL;
	if (old) {
		dlock__mutex_lock(&old->mu, DLOCK__RANK_HOLD);
		if (--old->pins == 0)
			g_cond_broadcast(&old->settled);
		dlock__mutex_unlock(&old->mu);
		dlock__hold_unref(old);
	}
	return live;
}

/*
 * End a hold locally: HOLD_RELEASED, no count left, and every re-entrant
 * acquire waiting out its suspension woken (it then sees the hold gone and
 * asks the server afresh).  Every path that ends a hold goes through here:
 * a hold that leaves HELD or SUSPENDED without waking them would leave
 * them asleep until their deadline.
 */
static void end_locked(dlock__hold *hold)
{
	dlock__mutex_assert_held(&hold->mu);
	tell_grant_locked(hold);
	hold->phase = HOLD_RELEASED;
	hold->count = 0;
	for (guint i = 0; i < hold->waiters->len; i++)
		dlock__waiter_wake(hold->waiters->pdata[i]);
}

/* End it locally if it owes the server a release; true if so. */
static bool end_owed_locked(dlock__hold *hold)
{
	dlock__mutex_assert_held(&hold->mu);
	if (!owes_release_locked(hold))
		return false;
	end_locked(hold);
	return true;
}

void dlock__hold_report(dlock__hold *hold, dlock_state state)
{
	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
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
		if (live_locked(hold) || hold->phase == HOLD_ACQUIRING) {
			hold->phase = HOLD_LOST;
			notify_locked(hold, state);
		}
		break;
	}
	dlock__mutex_unlock(&hold->mu);
}

/* ---- counts ----------------------------------------------------------- */

/* One more count, through lock. */
static void count_up_locked(dlock__hold *hold, dlock_lock *lock)
{
	hold_via via = { lock, 1 };

	dlock__mutex_assert_held(&hold->mu);
	hold->count++;
	for (guint i = 0; i < hold->via->len; i++) {
		hold_via *v = &g_array_index(hold->via, hold_via, i);

		if (v->lock == lock) {
			v->count++;
			return;
		}
	}
	g_array_append_val(hold->via, via);
}

/* One count less, preferably one that came through lock; true when it was
 * the last. */
static bool count_down_locked(dlock__hold *hold, dlock_lock *lock)
{
	hold_via *any = NULL;

	dlock__mutex_assert_held(&hold->mu);
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
	return --hold->count == 0;
}

/* Take away every count that came through lock. */
static void drop_counts_locked(dlock__hold *hold, const dlock_lock *lock)
{
	dlock__mutex_assert_held(&hold->mu);
	for (guint i = 0; i < hold->via->len; i++) {
		hold_via *via = &g_array_index(hold->via, hold_via, i);

		if (via->lock != lock)
			continue;
		hold->count -= via->count;
		g_array_remove_index_fast(hold->via, i);
		break;
	}
}

/* ---- granting and ending -------------------------------------------- */

bool dlock__hold_stale(dlock__hold *hold, const dlock_client *client)
{
	bool stale;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	stale = ended_locked(hold) || hold->client != client;
	dlock__mutex_unlock(&hold->mu);
	return stale;
}

bool dlock__hold_ended(dlock__hold *hold)
{
	bool ended;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	ended = ended_locked(hold) || !hold->client;
	dlock__mutex_unlock(&hold->mu);
	return ended;
}

bool dlock__hold_live(dlock__hold *hold)
{
	bool live;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	check_expiry_locked(hold);
	live = live_locked(hold);
	dlock__mutex_unlock(&hold->mu);
	if (!live)
		abandon_if_due(hold);
	return live;
}

/* End the hold on the server (the backend's release). */
static int release_on_server(dlock__hold *hold)
{
	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	settle_locked(hold);
	dlock__mutex_unlock(&hold->mu);
	return hold->slot->ops->release(hold->slot->impl, hold);
}

dlock_lock *dlock__hold_unregister(dlock__hold *hold)
{
	dlock_client *client;
	dlock_lock *owner;
	bool registered;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	client = hold->client;
	owner = hold->handle_owner;
	dlock__mutex_unlock(&hold->mu);
	if (client) {
		dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
		registered = g_hash_table_steal(client->holds, hold);
		dlock__mutex_unlock(&client->mu);
		if (registered)
			dlock__hold_unref(hold);
	}
	return owner;
}

int dlock__hold_release(dlock__hold *hold)
{
	return release_on_server(hold);
}

void dlock__hold_grant(dlock__hold *hold, dlock_lock *lock)
{
	dlock_client *client = lock->client;

	/* Counted and HELD before another thread can find it through the
	 * handle: a re-entry that found it still ACQUIRING would go to the
	 * server and queue behind this very hold.  A suspension or loss the
	 * backend reported before this is told to the handle at the end
	 * (dlock__hold_tell_grant()), after an older hold's loss and after the
	 * grant itself (reports from now on are told as they come, each after
	 * the grant: tell_grant_locked()). */
	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	count_up_locked(hold, lock);
	hold->granted_as = hold->phase;
	if (hold->phase == HOLD_ACQUIRING)
		hold->phase = HOLD_HELD;
	if (lock->recipe_ops)
		hold->tell_grant = lock;
	dlock__mutex_unlock(&hold->mu);

	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	g_hash_table_add(client->holds, dlock__hold_ref(hold));
	dlock__mutex_unlock(&client->mu);
}

void dlock__hold_tell_grant(dlock__hold *hold)
{
	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	tell_grant_locked(hold);
	if (hold->granted_as == HOLD_SUSPENDED && hold->phase == HOLD_SUSPENDED)
		notify_locked(hold, DLOCK_STATE_SUSPENDED);
	else if (hold->granted_as == HOLD_LOST && hold->phase == HOLD_LOST)
		notify_locked(hold, DLOCK_STATE_LOST);
	dlock__mutex_unlock(&hold->mu);
}

bool dlock__hold_join(dlock__hold *hold, dlock_lock *lock)
{
	bool joined;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	check_expiry_locked(hold);
	joined = hold->phase == HOLD_HELD;
	if (joined)
		count_up_locked(hold, lock);
	dlock__mutex_unlock(&hold->mu);
	abandon_if_due(hold);
	return joined;
}

bool dlock__hold_supersede(dlock__hold *old)
{
	bool lost;

	dlock__mutex_lock(&old->mu, DLOCK__RANK_HOLD);
	lost = owes_release_locked(old);
	if (live_locked(old))
		notify_locked(old, DLOCK_STATE_LOST);
	end_locked(old);
	old->handle_owner = NULL;
	dlock__mutex_unlock(&old->mu);
	return lost;
}

void dlock__hold_discard(dlock__hold *hold)
{
	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	end_locked(hold);
	dlock__mutex_unlock(&hold->mu);
	release_on_server(hold);
}

/* ---- re-entry and release -------------------------------------------- */

int dlock__hold_reenter(dlock__hold *hold, dlock_lock *lock, dlock__waiter *waiter,
                        int64_t deadline_us, bool count)
{
	bool waiting = false;
	int rc = DLOCK_OK;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	for (;;) {
		check_expiry_locked(hold);
		if (hold->phase == HOLD_HELD) {
			if (count)
				count_up_locked(hold, lock);
			break;
		}
		if (hold->phase == HOLD_LOST) {
			end_locked(hold);
			rc = DLOCK__HOLD_CLEARED;
			break;
		}
		if (hold->phase != HOLD_SUSPENDED) {
			rc = DLOCK__HOLD_ENDED;
			break;
		}
		/* Suspended: wait for the backend to confirm or lose it. */
		if (!waiter) {
			rc = DLOCK__HOLD_WAIT;
			break;
		}
		if (!waiting) {
			g_ptr_array_add(hold->waiters, waiter);
			waiting = true;
		}
		uint64_t seen = dlock__waiter_seq(waiter);

		dlock__mutex_unlock(&hold->mu);
		rc = dlock__waiter_sleep(waiter, seen, deadline_us);
		dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
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
	if (waiting)
		g_ptr_array_remove_fast(hold->waiters, waiter);
	dlock__mutex_unlock(&hold->mu);
	return rc;
}

int dlock__hold_reenter_step(dlock__hold *hold, dlock_lock *lock, dlock__waiter *waiter,
                             int64_t deadline_us, bool count, bool may_block,
                             dlock__turn *ret_turn)
{
	int rc = DLOCK_OK;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	check_expiry_locked(hold);
	if (hold->phase == HOLD_HELD) {
		if (count)
			count_up_locked(hold, lock);
	} else if (hold->phase == HOLD_LOST && !may_block) {
		rc = DLOCK__HOLD_LEFT_LOST;
	} else if (hold->phase == HOLD_LOST) {
		end_locked(hold);
		rc = DLOCK__HOLD_CLEARED;
	} else if (hold->phase != HOLD_SUSPENDED) {
		rc = DLOCK__HOLD_ENDED;
	} else if (dlock__waiter_canceled(waiter)) {
		rc = dlock__error_canceled(hold->resource);
	} else if (dlock__remaining_us(deadline_us) == 0) {
		rc = dlock__error(DLOCK_ETIMEDOUT,
		                  "lock '%s' is suspended and was not confirmed before the deadline",
		                  hold->resource);
	} else {
		/* The phase changes under hold->mu and its waiters are woken
		 * after: a change after this look bumps the sequence read here. */
		if (!g_ptr_array_find(hold->waiters, waiter, NULL))
			g_ptr_array_add(hold->waiters, waiter);
		dlock__waiter_turn_begin(ret_turn, dlock__waiter_seq(waiter), deadline_us, INT64_MAX);
		rc = DLOCK__HOLD_WAIT;
	}
	if (rc != DLOCK__HOLD_WAIT)
		g_ptr_array_remove_fast(hold->waiters, waiter);
	dlock__mutex_unlock(&hold->mu);
	/* Lost by the clock: the backend's abandon does no I/O. */
	if (rc == DLOCK__HOLD_LEFT_LOST)
		abandon_if_due(hold);
	return rc;
}

bool dlock__hold_count_up_live(dlock__hold *hold, dlock_lock *lock)
{
	bool live;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	check_expiry_locked(hold);
	live = hold->phase == HOLD_HELD || hold->phase == HOLD_SUSPENDED;
	if (live)
		count_up_locked(hold, lock);
	dlock__mutex_unlock(&hold->mu);
	return live;
}

int dlock__hold_count_down(dlock__hold *hold, dlock_lock *lock, bool *ret_last)
{
	bool last = false;
	int rc = DLOCK_OK;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	check_expiry_locked(hold);
	switch (hold->phase) {
	case HOLD_LOST:
		end_locked(hold);
		last = true;
		rc = dlock__error(DLOCK_ELOST, "lock '%s' had been lost before this release", lock->resource);
		break;
	case HOLD_HELD:
	case HOLD_SUSPENDED:
		if (count_down_locked(hold, lock)) {
			end_locked(hold);
			last = true;
		}
		break;
	default:
		rc = dlock__error(DLOCK_ENOTHELD, "lock '%s' is not held by the caller", lock->resource);
		break;
	}
	dlock__mutex_unlock(&hold->mu);
	*ret_last = last;
	return rc;
}

bool dlock__hold_drop_lock(dlock__hold *hold, dlock_lock *lock)
{
	bool last;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	drop_counts_locked(hold, lock);
	last = (hold->count == 0 || hold->handle_owner == lock) && end_owed_locked(hold);
	dlock__mutex_unlock(&hold->mu);
	return last;
}

dlock_hold dlock__hold_state(dlock__hold *hold, uint64_t *ret_token)
{
	dlock_hold state;
	bool due;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	check_expiry_locked(hold);
	switch (hold->phase) {
	case HOLD_HELD:
		state = DLOCK_HOLD_HELD;
		break;
	case HOLD_SUSPENDED:
		state = DLOCK_HOLD_SUSPENDED;
		break;
	case HOLD_LOST:
		state = DLOCK_HOLD_LOST;
		break;
	default:
		state = DLOCK_HOLD_NONE;
		break;
	}
	if (ret_token && live_locked(hold))
		*ret_token = hold->token;
	due = hold->abandon == ABANDON_DUE;
	dlock__mutex_unlock(&hold->mu);
	if (due)
		abandon_if_due(hold);
	return state;
}

void dlock__hold_teardown(dlock__hold *hold)
{
	bool release;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	release = owes_release_locked(hold);
	end_locked(hold);
	hold->client = NULL;
	g_array_set_size(hold->via, 0);
	dlock__mutex_unlock(&hold->mu);
	if (release)
		release_on_server(hold);
}

dlock_client *dlock__hold_end_at_exit(dlock__hold *hold)
{
	dlock_client *client;
	bool entered = false;

	dlock__mutex_lock(&hold->mu, DLOCK__RANK_HOLD);
	client = hold->client;
	if (client && owes_release_locked(hold) && dlock__client_enter(client) == DLOCK_OK) {
		end_locked(hold);
		entered = true;
	}
	dlock__mutex_unlock(&hold->mu);
	return entered ? client : NULL;
}
