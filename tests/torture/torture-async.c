/* SPDX-License-Identifier: MIT */
/*
 * A torture worker's calls without a waiting thread.
 *
 * Workers of odd slots make most of their acquires, releases and
 * campaigns with dlock_acquire_async(), dlock_release_async() and
 * dlock_election_campaign_async(): slot 1, 5, ... with their dones on the
 * client's callback thread, slot 3, 7, ... with the client's callbacks --
 * dones, states and election events alike -- dispatched by a loop thread
 * of the worker's own that polls the client's event fd.  The worker's
 * thread waits for each done, and now and then cancels the call after a
 * random delay, so cancels land on every step of a call, grants among
 * them (reported as EV_CANCEL, the one thing that allows DLOCK_ECANCELED).
 * The rest of the worker, and what it reports, are the same: the checker
 * holds these calls to every invariant the blocking ones keep, and to
 * their own -- a done that does not come within a generous bound, or
 * comes twice, is a NOTE_DONE_NOT_ONCE.
 */
#include "torture-worker.h"

#include <poll.h>
#include <stdlib.h>

/* How long past its deadline a done may take: a backend's timeouts, and
 * a frozen or killed server's, with room to spare. */
#define DONE_BOUND_MS 60000

int tw_async;

/* The loop thread of a dispatching worker. */
static dlock_client *loop_client;
static GThread *loop_thread;
static int loop_stop; /* atomic */

/* A call's end, as its done tells it; what it is, for the reports. */
typedef struct ending {
	GMutex mu;
	GCond cond;
	bool done;
	int rc;
	char mode;
	int res;
} ending;

static void on_done(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	ending *e = data;

	(void)lock;
	(void)token;
	g_mutex_lock(&e->mu);
	if (e->done) {
		/* Twice: the second may find the first's waiter gone. */
		tw_emit(EV_NOTE, e->mode, 0, e->res, 0, NOTE_DONE_NOT_ONCE, 0);
		abort();
	}
	e->rc = rc;
	e->done = true;
	g_cond_broadcast(&e->cond);
	g_mutex_unlock(&e->mu);
}

static gpointer loop_main(gpointer data)
{
	struct pollfd p = { .fd = dlock_client_event_fd(loop_client), .events = POLLIN };

	(void)data;
	while (!g_atomic_int_get(&loop_stop))
		if (poll(&p, 1, 50) > 0)
			dlock_client_dispatch(loop_client, 0);
	return NULL;
}

bool tw_async_start(dlock_client *client, int slot)
{
	tw_async = slot % 4 == 1 ? TW_ASYNC_THREAD : slot % 4 == 3 ? TW_ASYNC_DISPATCH : TW_ASYNC_NONE;
	if (tw_async != TW_ASYNC_DISPATCH)
		return true;
	if (dlock_client_set_delivery(client, DLOCK_DELIVER_DISPATCH) != DLOCK_OK)
		return false;
	loop_client = client;
	loop_thread = g_thread_new("torture-loop", loop_main, NULL);
	return true;
}

void tw_async_stop(void)
{
	if (!loop_thread)
		return;
	g_atomic_int_set(&loop_stop, 1);
	g_thread_join(loop_thread);
	loop_thread = NULL;
}

bool tw_async_pick(GRand *rand)
{
	return tw_async != TW_ASYNC_NONE && g_rand_int_range(rand, 0, 100) < 75;
}

/*
 * Wait for a started call's done; in one call of four with a cancel,
 * cancel it first if it has not ended within a few ms (up to its wait,
 * and 30): most land while it runs or as its grant comes.  The done's
 * result.
 */
static int wait_done(ending *e, GRand *rand, int64_t wait_ms, int (*cancel)(void *), void *target)
{
	int64_t bound = g_get_monotonic_time() + (MAX(wait_ms, 0) + DONE_BOUND_MS) * 1000;
	int rc;

	if (cancel && g_rand_int_range(rand, 0, 4) == 0) {
		int64_t until = g_get_monotonic_time() +
		                g_rand_int_range(rand, 0, (gint32)CLAMP(wait_ms, 2, 30) * 1000);
		bool done;

		g_mutex_lock(&e->mu);
		while (!e->done && g_cond_wait_until(&e->cond, &e->mu, until))
			;
		done = e->done;
		g_mutex_unlock(&e->mu);
		if (!done) {
			tw_emit(EV_CANCEL, e->mode, 0, e->res, 0, 0, 0);
			cancel(target);
		}
	}
	g_mutex_lock(&e->mu);
	while (!e->done && g_cond_wait_until(&e->cond, &e->mu, bound))
		;
	if (!e->done) {
		tw_emit(EV_NOTE, e->mode, 0, e->res, 0, NOTE_DONE_NOT_ONCE, 0);
		abort();
	}
	rc = e->rc;
	g_mutex_unlock(&e->mu);
	g_mutex_clear(&e->mu);
	g_cond_clear(&e->cond);
	return rc;
}

/*
 * Start a call: the worker's thread learns of a done from the done
 * itself, before it returns, and until it has the handle refuses its
 * next call with DLOCK_EBUSY -- so that, and only that, is tried again
 * (for up to a second).
 */
static int start(int (*call)(void *, int64_t, void *), void *target, int64_t wait_ms, ending *e)
{
	int64_t until = g_get_monotonic_time() + G_USEC_PER_SEC;
	int rc;

	while ((rc = call(target, wait_ms, e)) == DLOCK_EBUSY && g_get_monotonic_time() < until)
		g_usleep(200);
	return rc;
}

static int start_acquire(void *lock, int64_t wait_ms, void *e)
{
	return dlock_acquire_async(lock, wait_ms, on_done, e);
}

static int start_release(void *lock, int64_t wait_ms, void *e)
{
	(void)wait_ms;
	return dlock_release_async(lock, on_done, e);
}

static int start_campaign(void *election, int64_t wait_ms, void *e)
{
	return dlock_election_campaign_async(election, wait_ms, on_done, e);
}

static int cancel_lock(void *lock)
{
	return dlock_lock_cancel(lock);
}

static int cancel_election(void *e)
{
	return dlock_election_cancel(e);
}

/* One call: started (DLOCK_EBUSY tried again), then waited for, perhaps
 * canceled; what its done got, or the refusal. */
static int call(int (*begin)(void *, int64_t, void *), void *target, int64_t wait_ms,
                int (*cancel)(void *), char mode, int res, GRand *rand)
{
	ending e = { .mode = mode, .res = res };
	int rc;

	g_mutex_init(&e.mu);
	g_cond_init(&e.cond);
	rc = start(begin, target, wait_ms, &e);
	if (rc != DLOCK_OK) {
		g_mutex_clear(&e.mu);
		g_cond_clear(&e.cond);
		return rc;
	}
	return wait_done(&e, rand, wait_ms, cancel, target);
}

int tw_acquire_async(dlock_lock *lock, char mode, int res, int64_t wait_ms, GRand *rand)
{
	return call(start_acquire, lock, wait_ms, cancel_lock, mode, res, rand);
}

int tw_release_async(dlock_lock *lock, char mode, int res, GRand *rand)
{
	return call(start_release, lock, 0, NULL, mode, res, rand);
}

int tw_campaign_async(dlock_election *election, int res, int64_t wait_ms, GRand *rand)
{
	return call(start_campaign, election, wait_ms, cancel_election, MODE_LEADER, res, rand);
}
