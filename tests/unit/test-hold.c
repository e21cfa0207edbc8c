/* SPDX-License-Identifier: MIT */
/*
 * The core's ownership rules — reentrancy counts, owners, hold states,
 * cancel and teardown — run on an in-memory backend behind the real
 * operations table, so every rule is checked without a server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <glib.h>

#include "clock.h"
#include "core.h"

/* ---- the in-memory backend ------------------------------------------- */

struct dlock__backend {
	GMutex mu;
	GHashTable *owners;  /* resource -> dlock__hold * holding it */
	GPtrArray *waiters;  /* dlock__waiter * sleeping in acquire */
	uint64_t counter;
	int acquires;        /* grants */
	int releases;
	int abandons;        /* holds the core declared lost by the clock */
	int abandons_after_release; /* of a hold already released: never */
	dlock__mode last_mode; /* of the last grant */
	uint32_t last_permits;
	GHashTable *downgrades; /* READ holds granted as downgrades (set) */
	dlock__hold *last_downgrade_of; /* the write hold of the last downgrade */
};

static struct dlock__backend *fake; /* the one open instance */

static int fake_open(const dlock__backend_env *env, const dlock__uri *uri,
                     const dlock__options *opts, dlock__backend **ret)
{
	dlock__backend *b = g_new0(dlock__backend, 1);

	g_mutex_init(&b->mu);
	b->owners = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	b->waiters = g_ptr_array_new();
	b->downgrades = g_hash_table_new(NULL, NULL);
	fake = b;
	*ret = b;
	return DLOCK_OK;
}

static void fake_close(dlock__backend *b)
{
	g_hash_table_unref(b->owners);
	g_hash_table_unref(b->downgrades);
	g_ptr_array_unref(b->waiters);
	g_mutex_clear(&b->mu);
	g_free(b);
	fake = NULL;
}

static int fake_acquire(dlock__backend *b, dlock__hold *hold, dlock__waiter *waiter, int64_t wait_ms,
                        int64_t deadline_us)
{
	const char *resource = dlock__hold_resource(hold);
	int rc;

	/* A downgrade is granted at once beside the owner's write hold, as
	 * the seam asks of every backend. */
	if (dlock__hold_downgrade_of(hold)) {
		g_mutex_lock(&b->mu);
		g_hash_table_add(b->downgrades, hold);
		b->last_downgrade_of = dlock__hold_downgrade_of(hold);
		dlock__hold_set_token(hold, ++b->counter);
		b->acquires++;
		g_mutex_unlock(&b->mu);
		return DLOCK_OK;
	}
	for (;;) {
		uint64_t seen = dlock__waiter_seq(waiter);

		g_mutex_lock(&b->mu);
		if (!g_hash_table_contains(b->owners, resource)) {
			g_hash_table_insert(b->owners, g_strdup(resource), hold);
			dlock__hold_set_token(hold, ++b->counter);
			b->acquires++;
			b->last_mode = dlock__hold_mode(hold);
			b->last_permits = dlock__hold_permits(hold);
			g_mutex_unlock(&b->mu);
			return DLOCK_OK;
		}
		if (wait_ms == 0) {
			g_mutex_unlock(&b->mu);
			return DLOCK_EBUSY;
		}
		g_ptr_array_add(b->waiters, waiter);
		g_mutex_unlock(&b->mu);
		rc = dlock__waiter_sleep(waiter, seen, deadline_us);
		g_mutex_lock(&b->mu);
		g_ptr_array_remove(b->waiters, waiter);
		g_mutex_unlock(&b->mu);
		if (rc != DLOCK_OK)
			return rc;
	}
}

static int fake_release(dlock__backend *b, dlock__hold *hold)
{
	const char *resource = dlock__hold_resource(hold);
	int rc = DLOCK_ELOST;

	g_mutex_lock(&b->mu);
	if (g_hash_table_lookup(b->owners, resource) == hold) {
		g_hash_table_remove(b->owners, resource);
		rc = DLOCK_OK;
	} else if (g_hash_table_remove(b->downgrades, hold)) {
		rc = DLOCK_OK;
	}
	b->releases++;
	for (guint i = 0; i < b->waiters->len; i++)
		dlock__waiter_wake(b->waiters->pdata[i]);
	g_mutex_unlock(&b->mu);
	return rc;
}

/* The core's look that found the hold past its bound tells the backend
 * here, holding no lock of the core: a look at the hold from here would
 * otherwise wait for itself (and the test would hang). */
static void fake_abandon(dlock__backend *b, dlock__hold *hold)
{
	assert_int_equal(dlock__hold_state(hold, NULL), DLOCK_HOLD_LOST);
	g_mutex_lock(&b->mu);
	b->abandons++;
	if (g_hash_table_lookup(b->owners, dlock__hold_resource(hold)) != hold)
		b->abandons_after_release++;
	g_mutex_unlock(&b->mu);
}

static int fake_query(dlock__backend *b, const char *resource, int64_t deadline_us,
                      dlock__server_info *ret)
{
	g_mutex_lock(&b->mu);
	ret->locked = g_hash_table_contains(b->owners, resource);
	ret->fencing_token = b->counter;
	g_mutex_unlock(&b->mu);
	return DLOCK_OK;
}

static const dlock__backend_ops fake_ops = {
	.type = "fake",
	.options = NULL,
	.open = fake_open,
	.close = fake_close,
	.acquire = fake_acquire,
	.release = fake_release,
	.abandon = fake_abandon,
	.query = fake_query,
};

static int counter(int *field)
{
	int v;

	g_mutex_lock(&fake->mu);
	v = *field;
	g_mutex_unlock(&fake->mu);
	return v;
}

static dlock__hold *holder_of(const char *resource)
{
	dlock__hold *hold;

	g_mutex_lock(&fake->mu);
	hold = g_hash_table_lookup(fake->owners, resource);
	g_mutex_unlock(&fake->mu);
	return hold;
}

/* ---- fixtures -------------------------------------------------------- */

typedef struct fixture {
	dlock_client *client;
	dlock_lock *lock;
	dlock_lock *other;
} fixture;

static int setup(void **state)
{
	fixture *f = g_new0(fixture, 1);

	assert_int_equal(dlock__client_new_with_ops("fake://", &fake_ops, &f->client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(f->client, "jobs/nightly", &f->lock), DLOCK_OK);
	assert_int_equal(dlock_lock_new(f->client, "jobs/nightly", &f->other), DLOCK_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;

	dlock_lock_free(f->lock);
	dlock_lock_free(f->other);
	dlock_client_free(f->client);
	g_free(f);
	return 0;
}

typedef struct call {
	dlock_lock *lock;
	int64_t wait_ms;
	int rc;
} call;

static gpointer acquire_in_thread(gpointer data)
{
	call *c = data;

	c->rc = dlock_acquire(c->lock, c->wait_ms);
	return NULL;
}

static gpointer release_in_thread(gpointer data)
{
	call *c = data;

	c->rc = dlock_release(c->lock);
	return NULL;
}

static gpointer acquire_and_exit(gpointer data)
{
	call *c = data;

	c->rc = dlock_acquire(c->lock, 0);
	return NULL; /* exits holding it */
}

static bool wait_for(bool (*cond)(void *), void *arg, int64_t timeout_ms)
{
	int64_t until = g_get_monotonic_time() + timeout_ms * 1000;

	while (!cond(arg)) {
		if (g_get_monotonic_time() > until)
			return false;
		g_usleep(1000);
	}
	return true;
}

static bool has_waiter(void *arg)
{
	dlock_lock *lock = arg;
	bool waiting;

	g_mutex_lock(&lock->mu);
	waiting = lock->waiters->len > 0;
	g_mutex_unlock(&lock->mu);
	return waiting;
}

/* ---- tests ----------------------------------------------------------- */

static void test_reentry_counts_locally_without_backend_calls(void **state)
{
	fixture *f = *state;

	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(f->lock, -1), DLOCK_OK);
	assert_int_equal(counter(&fake->acquires), 1);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
	assert_int_equal(counter(&fake->releases), 0);
	assert_true(dlock_held(f->lock));
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
	assert_int_equal(counter(&fake->releases), 1);
	assert_false(dlock_held(f->lock));
	assert_int_equal(dlock_release(f->lock), DLOCK_ENOTHELD);
	assert_non_null(strstr(dlock_last_error_message(), "not held"));
}

static void test_second_handle_in_same_thread_is_same_owner(void **state)
{
	fixture *f = *state;
	uint64_t token;

	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	token = dlock_fencing_token(f->lock);
	assert_true(token > 0);
	assert_int_equal(dlock_acquire(f->other, 0), DLOCK_OK);
	assert_int_equal(dlock_fencing_token(f->other), token);
	assert_true(dlock_held(f->other));
	assert_int_equal(counter(&fake->acquires), 1);
	/* Counts from either handle add up: two releases end it. */
	assert_int_equal(dlock_release(f->other), DLOCK_OK);
	assert_true(dlock_held(f->lock));
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
	assert_false(dlock_held(f->lock));
	assert_int_equal(counter(&fake->releases), 1);
}

static void test_release_by_other_thread_is_refused(void **state)
{
	fixture *f = *state;
	call rel = { f->lock, 0, 99 }, acq = { f->other, 0, 99 };
	GThread *t;

	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	t = g_thread_new("releaser", release_in_thread, &rel);
	g_thread_join(t);
	assert_int_equal(rel.rc, DLOCK_ENOTHELD);
	assert_true(dlock_held(f->lock));
	assert_int_equal(counter(&fake->releases), 0);
	/* Another thread is another owner: it contends like anyone else. */
	t = g_thread_new("contender", acquire_in_thread, &acq);
	g_thread_join(t);
	assert_int_equal(acq.rc, DLOCK_EBUSY);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
}

static void test_thread_exit_releases_its_holds(void **state)
{
	fixture *f = *state;
	call acq = { f->lock, 0, 99 };
	GThread *t = g_thread_new("holder", acquire_and_exit, &acq);

	g_thread_join(t);
	assert_int_equal(acq.rc, DLOCK_OK);
	assert_null(holder_of("jobs/nightly"));
	assert_int_equal(counter(&fake->releases), 1);
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
}

static void test_handle_owner_is_released_from_another_thread(void **state)
{
	fixture *f = *state;
	call rel = { f->lock, 0, 99 }, acq = { f->lock, 0, 99 };
	GThread *t;

	assert_int_equal(dlock_lock_set_owner(f->lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	/* Same handle from another thread: the same owner, so it re-enters. */
	t = g_thread_new("reenter", acquire_in_thread, &acq);
	g_thread_join(t);
	assert_int_equal(acq.rc, DLOCK_OK);
	assert_int_equal(counter(&fake->acquires), 1);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
	t = g_thread_new("releaser", release_in_thread, &rel);
	g_thread_join(t);
	assert_int_equal(rel.rc, DLOCK_OK);
	assert_null(holder_of("jobs/nightly"));
	/* A thread-owner handle of the same client is another owner. */
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(f->other, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
}

typedef struct seen_states {
	GMutex mu;
	GArray *states;
} seen_states;

static void record_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	seen_states *seen = user_data;
	int s = state;

	g_mutex_lock(&seen->mu);
	g_array_append_val(seen->states, s);
	g_mutex_unlock(&seen->mu);
}

static bool got_states(void *arg)
{
	seen_states *seen = arg;
	bool enough;

	g_mutex_lock(&seen->mu);
	enough = seen->states->len >= 2;
	g_mutex_unlock(&seen->mu);
	return enough;
}

static void test_lost_hold_is_reported_and_cleared_by_first_release(void **state)
{
	fixture *f = *state;
	seen_states seen;

	g_mutex_init(&seen.mu);
	seen.states = g_array_new(FALSE, FALSE, sizeof(int));
	assert_int_equal(dlock_lock_set_state_callback(f->lock, record_state, &seen), DLOCK_OK);
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	dlock__hold_report(holder_of("jobs/nightly"), DLOCK_STATE_SUSPENDED);
	assert_false(dlock_held(f->lock));
	dlock__hold_report(holder_of("jobs/nightly"), DLOCK_STATE_LOST);
	assert_true(wait_for(got_states, &seen, 5000));
	assert_int_equal(g_array_index(seen.states, int, 0), DLOCK_STATE_SUSPENDED);
	assert_int_equal(g_array_index(seen.states, int, 1), DLOCK_STATE_LOST);
	assert_false(dlock_held(f->lock));
	assert_int_equal(dlock_fencing_token(f->lock), 0);
	/* Count 2, but the first release clears it; the next finds nothing. */
	assert_int_equal(dlock_release(f->lock), DLOCK_ELOST);
	assert_int_equal(dlock_release(f->lock), DLOCK_ENOTHELD);
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
	dlock_lock_set_state_callback(f->lock, NULL, NULL);
	g_array_unref(seen.states);
	g_mutex_clear(&seen.mu);
}

/* Give the caller's hold of lock a bound the clock has passed. */
static void bound_passed(dlock_lock *lock)
{
	dlock__hold *hold = dlock__owner_find(lock);

	assert_non_null(hold);
	dlock__hold_set_valid_until(hold, dlock__boot_us() - 1);
	dlock__hold_unref(hold);
}

/*
 * A hold the clock finds past its backend's bound is LOST at the first
 * look, and the backend is told once -- its renewal may still succeed,
 * and would keep the lock for an owner told it lost it -- before the
 * release, which follows once.
 */
static void test_hold_lost_by_the_clock_is_abandoned_once_before_its_release(void **state)
{
	fixture *f = *state;

	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	bound_passed(f->lock);
	assert_false(dlock_held(f->lock));
	assert_int_equal(counter(&fake->abandons), 1);
	assert_false(dlock_held(f->lock));
	assert_int_equal(dlock_fencing_token(f->lock), 0);
	assert_int_equal(counter(&fake->abandons), 1);
	assert_int_equal(dlock_release(f->lock), DLOCK_ELOST);
	assert_int_equal(counter(&fake->releases), 1);
	assert_int_equal(counter(&fake->abandons), 1);
	assert_int_equal(counter(&fake->abandons_after_release), 0);
}

/* A release or a re-entry that finds the bound passed releases at once:
 * nothing is left for an abandon to do. */
static void test_release_or_reentry_past_the_bound_releases_without_abandon(void **state)
{
	fixture *f = *state;

	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	bound_passed(f->lock);
	assert_int_equal(dlock_release(f->lock), DLOCK_ELOST);
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	bound_passed(f->lock);
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_ELOST);
	assert_int_equal(counter(&fake->releases), 2);
	assert_int_equal(counter(&fake->abandons), 0);
}

static void test_reentry_into_lost_hold_returns_elost(void **state)
{
	fixture *f = *state;

	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	dlock__hold_report(holder_of("jobs/nightly"), DLOCK_STATE_LOST);
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_ELOST);
	assert_int_equal(dlock_release(f->lock), DLOCK_ENOTHELD);
}

static gpointer reconnect_later(gpointer data)
{
	g_usleep(100 * 1000);
	dlock__hold_report(data, DLOCK_STATE_RECONNECTED);
	return NULL;
}

/* Acquire "jobs/nightly" through lock and have the backend suspend it. */
static dlock__hold *acquire_and_suspend(dlock_lock *lock)
{
	dlock__hold *hold;

	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	hold = holder_of("jobs/nightly");
	dlock__hold_report(hold, DLOCK_STATE_SUSPENDED);
	return hold;
}

static void test_reentry_while_suspended_waits_for_confirmation(void **state)
{
	fixture *f = *state;
	dlock__hold *hold;
	int64_t t0;
	GThread *t;

	hold = acquire_and_suspend(f->lock);
	t0 = g_get_monotonic_time();
	assert_int_equal(dlock_acquire(f->lock, 100), DLOCK_ETIMEDOUT);
	assert_true(g_get_monotonic_time() - t0 >= 100 * 1000);
	t = g_thread_new("reconnect", reconnect_later, hold);
	assert_int_equal(dlock_acquire(f->lock, 5000), DLOCK_OK);
	g_thread_join(t);
	assert_true(dlock_held(f->lock));
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
	assert_null(holder_of("jobs/nightly"));
}

static gpointer cancel_when_waiting(gpointer data)
{
	dlock_lock *lock = data;

	if (wait_for(has_waiter, lock, 5000))
		dlock_lock_cancel(lock);
	return NULL;
}

/* A re-entry waiting out a suspension waits on a waiter of the handle:
 * the handle's cancel ends it, and the hold stays the owner's. */
static void test_cancel_ends_a_reentry_waiting_out_a_suspension(void **state)
{
	fixture *f = *state;
	dlock__hold *hold;
	int64_t t0;
	GThread *t;

	hold = acquire_and_suspend(f->lock);
	t = g_thread_new("cancel", cancel_when_waiting, f->lock);
	t0 = g_get_monotonic_time();
	assert_int_equal(dlock_acquire(f->lock, 10000), DLOCK_ECANCELED);
	assert_true(g_get_monotonic_time() - t0 < 5000 * 1000);
	g_thread_join(t);
	assert_false(has_waiter(f->lock));
	dlock__hold_report(hold, DLOCK_STATE_RECONNECTED);
	assert_true(dlock_held(f->lock));
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
	assert_null(holder_of("jobs/nightly"));
}

static void test_cancel_wakes_waiter_with_ecanceled(void **state)
{
	fixture *f = *state;
	call acq = { f->other, -1, 99 };
	GThread *t;

	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	t = g_thread_new("waiter", acquire_in_thread, &acq);
	assert_true(wait_for(has_waiter, f->other, 5000));
	assert_int_equal(dlock_lock_cancel(f->other), DLOCK_OK);
	g_thread_join(t);
	assert_int_equal(acq.rc, DLOCK_ECANCELED);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
}

static void test_lock_free_releases_holds_made_through_it(void **state)
{
	fixture *f = *state;

	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(f->other, 0), DLOCK_OK);
	dlock_lock_free(f->lock);
	f->lock = NULL;
	/* The count that came through the other handle remains. */
	assert_true(dlock_held(f->other));
	assert_int_equal(counter(&fake->releases), 0);
	dlock_lock_free(f->other);
	f->other = NULL;
	assert_null(holder_of("jobs/nightly"));
	assert_int_equal(counter(&fake->releases), 1);
}

/* In a thread of its own: 500 handles on distinct resources, each
 * acquired and freed without a release (the free releases it). */
static gpointer acquire_and_free_many(gpointer data)
{
	dlock_client *client = data;
	unsigned most = 0;

	for (int i = 0; i < 500; i++) {
		char resource[32];
		dlock_lock *lock;

		g_snprintf(resource, sizeof(resource), "jobs/%d", i);
		assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
		assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
		dlock_lock_free(lock);
		most = MAX(most, dlock__owner_thread_count());
	}
	return GUINT_TO_POINTER(most);
}

/*
 * A thread-owned hold released by its handle's free (or its client's)
 * leaves an entry in its owner thread's table that only the owner may
 * remove.  A long-lived thread that never looks at those resources again
 * must not keep them all: the table stays bounded.
 */
static void test_holds_ended_by_handle_frees_do_not_pile_up_in_the_thread(void **state)
{
	fixture *f = *state;
	GThread *t = g_thread_new("many", acquire_and_free_many, f->client);
	unsigned most = GPOINTER_TO_UINT(g_thread_join(t));

	print_message("the thread's table kept at most %u holds\n", most);
	assert_true(most <= 64);
	assert_int_equal(counter(&fake->releases), 500);
}

static void test_client_free_cancels_waiters_and_releases_holds(void **state)
{
	fixture *f = *state;
	call acq = { f->other, -1, 99 };
	GThread *t;

	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	t = g_thread_new("waiter", acquire_in_thread, &acq);
	assert_true(wait_for(has_waiter, f->other, 5000));
	dlock_client_free(f->client);
	f->client = NULL;
	g_thread_join(t);
	assert_int_equal(acq.rc, DLOCK_ECANCELED);
	assert_null(fake); /* closed, after releasing the holder's lock */
	/* Handles outlive their client; freeing them only frees memory. */
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_ECANCELED);
}

static void test_options_are_frozen_by_first_acquire(void **state)
{
	fixture *f = *state;

	assert_int_equal(dlock_lock_set_ttl(f->lock, 99), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_ttl(f->lock, 5000), DLOCK_OK);
	assert_int_equal(dlock_lock_set_backend(f->lock, "nonesuch"), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "nonesuch"));
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(f->lock, 6000), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_owner(f->lock, DLOCK_OWNER_HANDLE), DLOCK_EINVAL);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
}

/* Give a handle a mode and a number of permits, as their setters will. */
static void set_ask(dlock_lock *lock, dlock__mode mode, uint32_t permits)
{
	g_mutex_lock(&lock->mu);
	lock->mode = mode;
	lock->permits = permits;
	g_mutex_unlock(&lock->mu);
}

/* An acquire through lock asking for mode and permits is refused before
 * any I/O, with a message naming what it asked for and the backend. */
static void assert_refused(dlock_lock *lock, dlock__mode mode, uint32_t permits, int64_t wait_ms,
                           const char *asked)
{
	set_ask(lock, mode, permits);
	assert_int_equal(dlock_acquire(lock, wait_ms), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), asked));
	assert_non_null(strstr(dlock_last_error_message(), "backend 'default' (fake)"));
	assert_int_equal(counter(&fake->acquires), 0);
}

static void test_hold_is_exclusive_with_one_permit_by_default(void **state)
{
	fixture *f = *state;

	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	assert_int_equal(fake->last_mode, DLOCK__MODE_EXCLUSIVE);
	assert_int_equal(fake->last_permits, 1);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
}

static void test_shared_modes_are_refused_before_io_without_the_capability(void **state)
{
	fixture *f = *state;

	assert_refused(f->lock, DLOCK__MODE_READ, 1, 0, "a READ hold");
	assert_refused(f->lock, DLOCK__MODE_WRITE, 1, -1, "a WRITE hold");
	/* Refused before the options froze: the handle can still be set right. */
	set_ask(f->lock, DLOCK__MODE_EXCLUSIVE, 1);
	assert_int_equal(dlock_acquire(f->lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(f->lock), DLOCK_OK);
}

static void test_permits_are_refused_before_io_without_the_capability(void **state)
{
	fixture *f = *state;

	assert_refused(f->lock, DLOCK__MODE_EXCLUSIVE, 3, 0, "3 permits");
}

static void test_backend_with_the_capabilities_gets_mode_and_permits(void **state)
{
	dlock__backend_ops ops = fake_ops;
	dlock_client *client;
	dlock_lock *lock;

	ops.caps = DLOCK__CAP_SHARED | DLOCK__CAP_PERMITS;
	assert_int_equal(dlock__client_new_with_ops("fake://", &ops, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "jobs/nightly", &lock), DLOCK_OK);
	set_ask(lock, DLOCK__MODE_EXCLUSIVE, 3);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(fake->last_mode, DLOCK__MODE_EXCLUSIVE);
	assert_int_equal(fake->last_permits, 3);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	assert_int_equal(dlock_lock_new(client, "jobs/nightly", &lock), DLOCK_OK);
	set_ask(lock, DLOCK__MODE_READ, 1);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(fake->last_mode, DLOCK__MODE_READ);
	assert_int_equal(fake->last_permits, 1);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	/* A semaphore's holds have no mode. */
	assert_int_equal(dlock_lock_new(client, "jobs/nightly", &lock), DLOCK_OK);
	set_ask(lock, DLOCK__MODE_READ, 3);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "a semaphore's holds have no mode"));
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* A client whose backend serves shared holds, with handles of each mode
 * on one resource. */
typedef struct rw_fixture {
	dlock_client *client;
	dlock_lock *read, *write, *exclusive;
} rw_fixture;

static dlock__backend_ops shared_ops;

static int rw_setup(void **state)
{
	rw_fixture *f = g_new0(rw_fixture, 1);

	shared_ops = fake_ops;
	shared_ops.caps = DLOCK__CAP_SHARED;
	assert_int_equal(dlock__client_new_with_ops("fake://", &shared_ops, &f->client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(f->client, "data/set", &f->read), DLOCK_OK);
	assert_int_equal(dlock_lock_new(f->client, "data/set", &f->write), DLOCK_OK);
	assert_int_equal(dlock_lock_new(f->client, "data/set", &f->exclusive), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(f->read, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(f->write, DLOCK_MODE_WRITE), DLOCK_OK);
	*state = f;
	return 0;
}

static int rw_teardown(void **state)
{
	rw_fixture *f = *state;

	dlock_lock_free(f->read);
	dlock_lock_free(f->write);
	dlock_lock_free(f->exclusive);
	dlock_client_free(f->client);
	g_free(f);
	return 0;
}

static void test_set_mode_refuses_an_unknown_mode_and_a_started_handle(void **state)
{
	rw_fixture *f = *state;

	assert_int_equal(dlock_lock_set_mode(f->exclusive, (dlock_mode)7), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "unknown mode 7"));
	assert_int_equal(dlock_acquire(f->exclusive, 0), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(f->exclusive, DLOCK_MODE_READ), DLOCK_EINVAL);
	assert_int_equal(dlock_release(f->exclusive), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(NULL, DLOCK_MODE_READ), DLOCK_EINVAL);
}

/* An owner holding only READ that asks for WRITE or EXCLUSIVE would wait
 * for itself: refused at once, before the backend is asked. */
static void test_upgrade_is_refused_at_once_with_edeadlk(void **state)
{
	rw_fixture *f = *state;

	assert_int_equal(dlock_acquire(f->read, 0), DLOCK_OK);
	assert_int_equal(counter(&fake->acquires), 1);
	assert_int_equal(dlock_acquire(f->write, -1), DLOCK_EDEADLK);
	assert_non_null(strstr(dlock_last_error_message(), "holds it for reading"));
	assert_int_equal(dlock_acquire(f->exclusive, 1000), DLOCK_EDEADLK);
	assert_int_equal(counter(&fake->acquires), 1);
	assert_true(dlock_held(f->read));
	assert_int_equal(dlock_release(f->read), DLOCK_OK);
	/* Without the read hold, the same handles take the lock. */
	assert_int_equal(dlock_acquire(f->write, 0), DLOCK_OK);
	assert_int_equal(dlock_release(f->write), DLOCK_OK);
}

/* READ while holding WRITE reaches the backend as a downgrade of that
 * hold; releasing the write hold leaves the read hold held. */
static void test_downgrade_reaches_the_backend_with_the_write_hold(void **state)
{
	rw_fixture *f = *state;
	dlock__hold *write;
	uint64_t write_token;

	assert_int_equal(dlock_acquire(f->write, 0), DLOCK_OK);
	write = holder_of("data/set");
	write_token = dlock_fencing_token(f->write);
	assert_int_equal(dlock_acquire(f->read, 0), DLOCK_OK);
	assert_ptr_equal(fake->last_downgrade_of, write);
	assert_true(dlock_fencing_token(f->read) > write_token);
	assert_int_equal(dlock_release(f->write), DLOCK_OK);
	assert_false(dlock_held(f->write));
	assert_true(dlock_held(f->read));
	assert_int_equal(dlock_release(f->read), DLOCK_OK);
	assert_int_equal(counter(&fake->releases), 2);
}

/* WRITE and EXCLUSIVE are one class to dlock: re-entry, one grant.  So
 * are two READ handles of one owner. */
static void test_write_and_exclusive_reenter_each_other_and_reads_reenter(void **state)
{
	rw_fixture *f = *state;
	dlock_lock *read2;

	assert_int_equal(dlock_acquire(f->exclusive, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(f->write, 0), DLOCK_OK);
	assert_int_equal(counter(&fake->acquires), 1);
	assert_int_equal(dlock_release(f->write), DLOCK_OK);
	assert_int_equal(dlock_release(f->exclusive), DLOCK_OK);
	assert_int_equal(counter(&fake->releases), 1);

	assert_int_equal(dlock_lock_new(f->client, "data/set", &read2), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(read2, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_acquire(f->read, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(read2, 0), DLOCK_OK);
	assert_int_equal(counter(&fake->acquires), 2);
	assert_int_equal(dlock_release(read2), DLOCK_OK);
	assert_int_equal(dlock_release(f->read), DLOCK_OK);
	assert_int_equal(dlock_release(f->read), DLOCK_ENOTHELD);
	dlock_lock_free(read2);
}

static void test_invalid_resource_is_refused_before_io(void **state)
{
	fixture *f = *state;
	dlock_lock *lock = NULL;

	assert_int_equal(dlock_lock_new(f->client, "a//b", &lock), DLOCK_EINVAL);
	assert_null(lock);
	assert_int_equal(dlock_lock_new(f->client, "", &lock), DLOCK_EINVAL);
	assert_int_equal(counter(&fake->acquires), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reentry_counts_locally_without_backend_calls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_second_handle_in_same_thread_is_same_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_release_by_other_thread_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_thread_exit_releases_its_holds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_handle_owner_is_released_from_another_thread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lost_hold_is_reported_and_cleared_by_first_release, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reentry_into_lost_hold_returns_elost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hold_lost_by_the_clock_is_abandoned_once_before_its_release,
		                                setup, teardown),
		cmocka_unit_test_setup_teardown(test_release_or_reentry_past_the_bound_releases_without_abandon,
		                                setup, teardown),
		cmocka_unit_test_setup_teardown(test_reentry_while_suspended_waits_for_confirmation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_ends_a_reentry_waiting_out_a_suspension, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_wakes_waiter_with_ecanceled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lock_free_releases_holds_made_through_it, setup, teardown),
		cmocka_unit_test_setup_teardown(test_holds_ended_by_handle_frees_do_not_pile_up_in_the_thread,
		                                setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_free_cancels_waiters_and_releases_holds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_options_are_frozen_by_first_acquire, setup, teardown),
		cmocka_unit_test_setup_teardown(test_invalid_resource_is_refused_before_io, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hold_is_exclusive_with_one_permit_by_default, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shared_modes_are_refused_before_io_without_the_capability, setup, teardown),
		cmocka_unit_test_setup_teardown(test_permits_are_refused_before_io_without_the_capability, setup, teardown),
		cmocka_unit_test(test_backend_with_the_capabilities_gets_mode_and_permits),
		cmocka_unit_test_setup_teardown(test_set_mode_refuses_an_unknown_mode_and_a_started_handle, rw_setup,
		                                rw_teardown),
		cmocka_unit_test_setup_teardown(test_upgrade_is_refused_at_once_with_edeadlk, rw_setup, rw_teardown),
		cmocka_unit_test_setup_teardown(test_downgrade_reaches_the_backend_with_the_write_hold, rw_setup,
		                                rw_teardown),
		cmocka_unit_test_setup_teardown(test_write_and_exclusive_reenter_each_other_and_reads_reenter,
		                                rw_setup, rw_teardown),
	};

	return cmocka_run_group_tests_name("hold", tests, NULL, NULL);
}
