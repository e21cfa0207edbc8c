/* SPDX-License-Identifier: MIT */
/*
 * Calls without a waiting thread (src/common/async.c) on the backend named
 * by argv[1], "file", "redis", "redlock" (three masters) or "zk": done runs once, never inside the
 * starting call, with DLOCK_OK exactly when the handle holds; deadlines,
 * cancels and the frees; refusals; delivery by the program's dispatch and
 * its order; no thread or descriptor left behind.  Linked with the
 * library's internals: it looks at a handle's call in flight, and posts
 * state events as a backend does.
 */
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "clock.h"
#include "core.h"
#include "test-redis.h"
#include "test-redlock.h"
#include "test-util.h"
#include "test-zk-inspect.h"
#include "test-zk-server.h"

static const char *backend;
static test_redis *server;
static test_redlock *masters;
static test_zk *zk;
static char *dir;
static char *uri;

/* ---- a recorder of dones --------------------------------------------- */

typedef struct record {
	GMutex mu;
	GCond cond;
	int calls;                 /* dones run */
	int rc;
	uint64_t token;
	int held;                  /* dlock_held() inside done */
	pthread_t thread;
	char message[256];
	/* While set, done waits (holding the callback thread). */
	bool gate;
	bool inside;               /* done is running */
} record;

static pthread_t starter;
static volatile int starting;  /* the test thread is inside a starting call */
static volatile int in_start_calls; /* dones run inside a starting call */

static void record_init(record *r)
{
	memset(r, 0, sizeof *r);
	g_mutex_init(&r->mu);
	g_cond_init(&r->cond);
}

static void record_clear(record *r)
{
	g_mutex_clear(&r->mu);
	g_cond_clear(&r->cond);
}

static void on_done(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	record *r = data;

	if (starting && pthread_equal(pthread_self(), starter))
		in_start_calls++;
	g_mutex_lock(&r->mu);
	r->inside = true;
	g_cond_broadcast(&r->cond);
	while (r->gate)
		g_cond_wait(&r->cond, &r->mu);
	r->calls++;
	r->rc = rc;
	r->token = token;
	r->held = dlock_held(lock);
	r->thread = pthread_self();
	g_strlcpy(r->message, rc == DLOCK_OK ? "" : dlock_last_error_message(), sizeof r->message);
	r->inside = false;
	g_cond_broadcast(&r->cond);
	g_mutex_unlock(&r->mu);
}

static void gate_open(record *r)
{
	g_mutex_lock(&r->mu);
	r->gate = false;
	g_cond_broadcast(&r->cond);
	g_mutex_unlock(&r->mu);
}

/* Wait up to ms for the record's n-th done; whether it came. */
static bool wait_calls(record *r, int n, int64_t ms)
{
	int64_t until = g_get_monotonic_time() + ms * 1000;
	bool ok;

	g_mutex_lock(&r->mu);
	while (r->calls < n && g_cond_wait_until(&r->cond, &r->mu, until))
		;
	ok = r->calls >= n;
	g_mutex_unlock(&r->mu);
	return ok;
}

static bool wait_inside(record *r)
{
	int64_t until = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
	bool ok;

	g_mutex_lock(&r->mu);
	while (!r->inside && g_cond_wait_until(&r->cond, &r->mu, until))
		;
	ok = r->inside;
	g_mutex_unlock(&r->mu);
	return ok;
}

/*
 * Wait until the handle's call is over, done returned (up to 5 s): a done
 * seen to run may not have returned yet, and until it has the handle
 * refuses another call (DLOCK_EBUSY).
 */
static void settled(dlock_lock *lock)
{
	int64_t until = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
	bool busy;

	do {
		g_mutex_lock(&lock->mu);
		busy = lock->async_op != NULL;
		g_mutex_unlock(&lock->mu);
		if (busy)
			g_usleep(200);
	} while (busy && g_get_monotonic_time() < until);
	assert_false(busy);
}

static int acquire_async(dlock_lock *lock, int64_t wait_ms, record *r)
{
	int rc;

	starter = pthread_self();
	starting = 1;
	rc = dlock_acquire_async(lock, wait_ms, on_done, r);
	starting = 0;
	return rc;
}

static int release_async(dlock_lock *lock, record *r)
{
	int rc;

	starter = pthread_self();
	starting = 1;
	rc = dlock_release_async(lock, on_done, r);
	starting = 0;
	return rc;
}

/* ---- handles ------------------------------------------------------------ */

static dlock_client *client_new(void)
{
	dlock_client *client = NULL;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	return client;
}

static dlock_lock *handle_new(dlock_client *client, const char *resource)
{
	dlock_lock *lock = NULL;

	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	return lock;
}

/* Whether a fresh client can take resource at once, within ms: what a
 * call left behind would keep it from. */
static bool free_within(const char *resource, int64_t ms)
{
	int64_t until = g_get_monotonic_time() + ms * 1000;
	dlock_client *c = client_new();
	dlock_lock *probe = handle_new(c, resource);
	bool ok = false;

	do {
		if (dlock_acquire(probe, 0) == DLOCK_OK) {
			assert_int_equal(dlock_release(probe), DLOCK_OK);
			ok = true;
			break;
		}
		g_usleep(5000);
	} while (g_get_monotonic_time() < until);
	dlock_lock_free(probe);
	dlock_client_free(c);
	return ok;
}

/* Whether resource is found taken within ms: by a call whose step has
 * run, while its done waits. */
static bool taken_within(const char *resource, int64_t ms)
{
	int64_t until = g_get_monotonic_time() + ms * 1000;
	dlock_client *c = client_new();
	dlock_lock *probe = handle_new(c, resource);
	bool taken = false;

	do {
		if (dlock_acquire(probe, 0) != DLOCK_OK) {
			taken = true;
			break;
		}
		assert_int_equal(dlock_release(probe), DLOCK_OK);
		g_usleep(2000);
	} while (g_get_monotonic_time() < until);
	dlock_lock_free(probe);
	dlock_client_free(c);
	return taken;
}

static int count_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* ---- tests -------------------------------------------------------------- */

static void test_acquire_and_release_run_done_once_on_the_callback_thread(void **state)
{
	dlock_client *client = client_new();
	dlock_lock *lock = handle_new(client, "async-once");
	record a, r;

	(void)state;
	record_init(&a);
	record_init(&r);
	in_start_calls = 0;
	assert_int_equal(acquire_async(lock, 1000, &a), DLOCK_OK);
	assert_true(wait_calls(&a, 1, 5000));
	assert_int_equal(a.rc, DLOCK_OK);
	assert_int_equal(a.held, 1);
	assert_true(a.token > 0);
	assert_true(a.token == dlock_fencing_token(lock));
	assert_false(pthread_equal(a.thread, pthread_self()));
	assert_int_equal(dlock_held(lock), 1);

	settled(lock);
	assert_int_equal(release_async(lock, &r), DLOCK_OK);
	assert_true(wait_calls(&r, 1, 5000));
	assert_int_equal(r.rc, DLOCK_OK);
	assert_int_equal(r.held, 0);
	assert_int_equal(dlock_held(lock), 0);

	/* Exactly once: no second done comes. */
	g_usleep(100 * 1000);
	assert_int_equal(a.calls, 1);
	assert_int_equal(r.calls, 1);
	assert_int_equal(in_start_calls, 0);
	dlock_lock_free(lock);
	dlock_client_free(client);
	record_clear(&a);
	record_clear(&r);
}

static void test_a_second_acquire_of_the_handle_is_a_reentry(void **state)
{
	dlock_client *client = client_new();
	dlock_lock *lock = handle_new(client, "async-reentry");
	record a, b, r;

	(void)state;
	record_init(&a);
	record_init(&b);
	record_init(&r);
	assert_int_equal(acquire_async(lock, 1000, &a), DLOCK_OK);
	assert_true(wait_calls(&a, 1, 5000));
	settled(lock);
	assert_int_equal(acquire_async(lock, 0, &b), DLOCK_OK);
	assert_true(wait_calls(&b, 1, 5000));
	assert_int_equal(b.rc, DLOCK_OK);
	assert_true(b.token == a.token);
	/* Two counts: the first release keeps it. */
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_int_equal(dlock_held(lock), 1);
	settled(lock);
	assert_int_equal(release_async(lock, &r), DLOCK_OK);
	assert_true(wait_calls(&r, 1, 5000));
	assert_int_equal(dlock_held(lock), 0);
	assert_true(free_within("async-reentry", 0));
	dlock_lock_free(lock);
	dlock_client_free(client);
	record_clear(&a);
	record_clear(&b);
	record_clear(&r);
}

static void test_waits_for_a_release_and_keeps_its_deadline(void **state)
{
	dlock_client *client = client_new();
	dlock_lock *holder = handle_new(client, "async-wait");
	dlock_lock *lock = handle_new(client, "async-wait");
	record a, t;
	int64_t started;

	(void)state;
	record_init(&a);
	record_init(&t);
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	assert_int_equal(acquire_async(lock, 20000, &a), DLOCK_OK);
	assert_false(wait_calls(&a, 1, 200));
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	assert_true(wait_calls(&a, 1, 5000));
	assert_int_equal(a.rc, DLOCK_OK);
	assert_int_equal(a.held, 1);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	settled(lock);

	/* Held by the other handle all along: ETIMEDOUT at the deadline. */
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	started = g_get_monotonic_time();
	assert_int_equal(acquire_async(lock, 300, &t), DLOCK_OK);
	assert_true(wait_calls(&t, 1, 5000));
	assert_int_equal(t.rc, DLOCK_ETIMEDOUT);
	assert_true(g_get_monotonic_time() - started >= 300 * 1000);
	assert_true(g_get_monotonic_time() - started < 3 * G_USEC_PER_SEC);
	assert_int_equal(t.held, 0);
	assert_non_null(strstr(t.message, "async-wait"));
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	assert_true(free_within("async-wait", 0));
	dlock_lock_free(holder);
	dlock_lock_free(lock);
	dlock_client_free(client);
	record_clear(&a);
	record_clear(&t);
}

static void test_refusals_come_at_once_without_a_callback(void **state)
{
	dlock_client *client = client_new();
	dlock_lock *threads = NULL, *lock = handle_new(client, "async-refused");
	dlock_lock *holder = handle_new(client, "async-refused");
	record a, b;

	(void)state;
	record_init(&a);
	record_init(&b);
	assert_int_equal(dlock_lock_new(client, "async-refused", &threads), DLOCK_OK);
	assert_int_equal(acquire_async(threads, 0, &b), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "DLOCK_OWNER_HANDLE"));
	assert_int_equal(dlock_acquire_async(lock, 0, NULL, NULL), DLOCK_EINVAL);
	assert_int_equal(dlock_acquire_async(NULL, 0, on_done, &b), DLOCK_EINVAL);

	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	assert_int_equal(acquire_async(lock, 20000, &a), DLOCK_OK);
	assert_int_equal(acquire_async(lock, 0, &b), DLOCK_EBUSY);
	assert_int_equal(release_async(lock, &b), DLOCK_EBUSY);
	/* A blocking acquire too: it would wait for the call's own grant. */
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	assert_true(wait_calls(&a, 1, 5000));
	assert_int_equal(a.rc, DLOCK_OK);
	/* Once its done has returned, the handle takes another call. */
	settled(lock);
	assert_int_equal(release_async(lock, &b), DLOCK_OK);
	assert_true(wait_calls(&b, 1, 5000));
	assert_int_equal(b.rc, DLOCK_OK);
	g_usleep(50 * 1000);
	assert_int_equal(b.calls, 1);
	dlock_lock_free(threads);
	dlock_lock_free(holder);
	dlock_lock_free(lock);
	dlock_client_free(client);
	record_clear(&a);
	record_clear(&b);
}

static void test_cancel_ends_a_wait_with_ecanceled_and_leaves_nothing(void **state)
{
	dlock_client *client = client_new();
	dlock_lock *holder = handle_new(client, "async-cancel");
	dlock_lock *lock = handle_new(client, "async-cancel");
	record a;

	(void)state;
	record_init(&a);
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	assert_int_equal(acquire_async(lock, -1, &a), DLOCK_OK);
	assert_false(wait_calls(&a, 1, 100));
	assert_int_equal(dlock_lock_cancel(lock), DLOCK_OK);
	assert_true(wait_calls(&a, 1, 5000));
	assert_int_equal(a.rc, DLOCK_ECANCELED);
	assert_int_equal(a.held, 0);
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	assert_true(free_within("async-cancel", 0));
	g_usleep(50 * 1000);
	assert_int_equal(a.calls, 1);
	dlock_lock_free(holder);
	dlock_lock_free(lock);
	dlock_client_free(client);
	record_clear(&a);
}

/*
 * A cancel that lands as the grant does: done gets DLOCK_OK with the
 * lock held, or DLOCK_ECANCELED with nothing held anywhere -- never a
 * grant kept without its owner knowing.
 */
static void test_a_cancel_racing_the_grant_never_leaves_a_hold(void **state)
{
	dlock_client *client = client_new();
	dlock_lock *holder = handle_new(client, "async-race");
	dlock_lock *lock = handle_new(client, "async-race");
	int granted = 0, canceled = 0;
	int rounds = test_under_valgrind() ? 40 : 150;

	(void)state;
	for (int i = 0; i < rounds; i++) {
		record a;

		record_init(&a);
		assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
		assert_int_equal(acquire_async(lock, 10000, &a), DLOCK_OK);
		if (i % 3)
			g_usleep(g_random_int_range(0, 2000));
		assert_int_equal(dlock_release(holder), DLOCK_OK);
		g_usleep(g_random_int_range(0, i % 2 ? 300 : 3000));
		assert_int_equal(dlock_lock_cancel(lock), DLOCK_OK);
		assert_true(wait_calls(&a, 1, 5000));
		settled(lock);
		if (a.rc == DLOCK_OK) {
			granted++;
			assert_int_equal(a.held, 1);
			assert_int_equal(dlock_release(lock), DLOCK_OK);
		} else {
			canceled++;
			assert_int_equal(a.rc, DLOCK_ECANCELED);
			assert_int_equal(a.held, 0);
			assert_int_equal(dlock_held(lock), 0);
		}
		/* Nothing left: the background release of a revoked grant
		 * comes within moments. */
		assert_true(free_within("async-race", 2000));
		assert_int_equal(a.calls, 1);
		record_clear(&a);
	}
	printf("# %d granted, %d canceled\n", granted, canceled);
	assert_true(canceled > 0);
	dlock_lock_free(holder);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/*
 * The callback thread is kept busy in one call's done, so the next call's
 * result waits in the queue: freeing its handle runs its done on the
 * freeing thread, with DLOCK_ECANCELED, and releases the grant.
 */
static void test_freeing_a_handle_runs_its_pending_done_with_ecanceled(void **state)
{
	dlock_client *client = client_new();
	dlock_lock *busy = handle_new(client, "async-busy");
	dlock_lock *lock = handle_new(client, "async-free");
	dlock_lock *waiting = handle_new(client, "async-free-wait");
	dlock_lock *holder = handle_new(client, "async-free-wait");
	record g, a, w;

	(void)state;
	record_init(&g);
	record_init(&a);
	record_init(&w);
	g.gate = true;
	assert_int_equal(acquire_async(busy, 0, &g), DLOCK_OK);
	assert_true(wait_inside(&g));
	assert_int_equal(acquire_async(lock, 5000, &a), DLOCK_OK);
	/* Granted once a worker has run its step; its done waits behind g's. */
	assert_true(taken_within("async-free", 5000));
	dlock_lock_free(lock);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.rc, DLOCK_ECANCELED);
	assert_true(pthread_equal(a.thread, pthread_self()));
	assert_true(free_within("async-free", 0));

	/* A call still waiting when its handle is freed: the same. */
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	assert_int_equal(acquire_async(waiting, -1, &w), DLOCK_OK);
	dlock_lock_free(waiting);
	assert_int_equal(w.calls, 1);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	assert_true(pthread_equal(w.thread, pthread_self()));

	gate_open(&g);
	assert_true(wait_calls(&g, 1, 5000));
	assert_int_equal(g.rc, DLOCK_OK);
	g_usleep(50 * 1000);
	assert_int_equal(a.calls, 1);
	assert_int_equal(w.calls, 1);
	dlock_lock_free(busy);
	dlock_lock_free(holder);
	dlock_client_free(client);
	record_clear(&g);
	record_clear(&a);
	record_clear(&w);
}

static gpointer open_later(gpointer data)
{
	g_usleep(300 * 1000);
	gate_open(data);
	return NULL;
}

static void test_freeing_the_client_runs_every_done_before_it_returns(void **state)
{
	dlock_client *client = client_new();
	dlock_client *other = client_new();
	dlock_lock *busy = handle_new(client, "async-cf-busy");
	dlock_lock *granted = handle_new(client, "async-cf-granted");
	dlock_lock *waiting = handle_new(client, "async-cf-waiting");
	dlock_lock *holder = handle_new(other, "async-cf-waiting");
	record g, a, w;
	GThread *opener;

	(void)state;
	record_init(&g);
	record_init(&a);
	record_init(&w);
	g.gate = true;
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	assert_int_equal(acquire_async(busy, 0, &g), DLOCK_OK);
	assert_true(wait_inside(&g));
	assert_int_equal(acquire_async(granted, 5000, &a), DLOCK_OK);
	assert_int_equal(acquire_async(waiting, -1, &w), DLOCK_OK);
	assert_true(taken_within("async-cf-granted", 5000));
	opener = g_thread_new("opener", open_later, &g);
	dlock_client_free(client);
	g_thread_join(opener);
	assert_int_equal(g.calls, 1);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.rc, DLOCK_ECANCELED);
	assert_true(pthread_equal(a.thread, pthread_self()));
	assert_int_equal(w.calls, 1);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	assert_true(free_within("async-cf-granted", 0));
	assert_true(free_within("async-cf-busy", 0));
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	dlock_lock_free(busy);
	dlock_lock_free(granted);
	dlock_lock_free(waiting);
	dlock_lock_free(holder);
	dlock_client_free(other);
	record_clear(&g);
	record_clear(&a);
	record_clear(&w);
}

static void test_many_cycles_leave_no_thread_or_descriptor(void **state)
{
	dlock_client *client = client_new();
	dlock_lock *lock = handle_new(client, "async-cycles");
	int fds = 0, tasks = 0;
	/* 10,000 where a cycle is cheap; a cycle on ZooKeeper or three
	 * masters costs a few round trips more; valgrind, which looks for
	 * memory errors rather than growth, slows every cycle down. */
	int cycles = test_under_valgrind() ? 500 : zk || masters ? 2000 : 10000;

	(void)state;
	for (int i = 0; i < cycles; i++) {
		record a, r;

		record_init(&a);
		record_init(&r);
		assert_int_equal(acquire_async(lock, 1000, &a), DLOCK_OK);
		assert_true(wait_calls(&a, 1, 5000));
		assert_int_equal(a.rc, DLOCK_OK);
		settled(lock);
		assert_int_equal(release_async(lock, &r), DLOCK_OK);
		assert_true(wait_calls(&r, 1, 5000));
		assert_int_equal(r.rc, DLOCK_OK);
		settled(lock);
		record_clear(&a);
		record_clear(&r);
		if (i == 10) {
			fds = count_entries("/proc/self/fd");
			tasks = count_entries("/proc/self/task");
		}
	}
	/* A release that overlaps a renewal takes another connection from
	 * a server's pool, which keeps up to 8 idle ones: no more than that
	 * per server, whatever the number of cycles (a leak per cycle would
	 * show thousands). */
	assert_true(count_entries("/proc/self/fd") <= fds + (masters ? 3 * 7 : server ? 7 : 0));
	/* The callback thread, the timer and at most four workers. */
	assert_true(count_entries("/proc/self/task") <= tasks + DLOCK__STEPPER_MAX_WORKERS);
	dlock_lock_free(lock);
	dlock_client_free(client);
	assert_true(count_entries("/proc/self/task") <= 2);
}

/* Several handles of two clients on one resource, each driven through the
 * calls by a thread of its own, with deadlines and cancels at random:
 * every call's done once, and never two holders. */
#define DRIVERS 6
#define ROUNDS 150

static int holders;
static int overlaps;

static gpointer driver_main(gpointer data)
{
	dlock_lock *lock = data;
	static const int64_t waits[] = { 0, 2, 20, 2000 };

	for (int i = 0; i < ROUNDS; i++) {
		record a;

		record_init(&a);
		assert_int_equal(dlock_acquire_async(lock, waits[g_random_int_range(0, 4)], on_done, &a),
		                 DLOCK_OK);
		if (g_random_int_range(0, 5) == 0) {
			g_usleep(g_random_int_range(0, 1000));
			dlock_lock_cancel(lock);
		}
		assert_true(wait_calls(&a, 1, 10000));
		settled(lock);
		if (a.rc == DLOCK_OK) {
			if (g_atomic_int_add(&holders, 1) != 0)
				g_atomic_int_inc(&overlaps);
			g_usleep(g_random_int_range(0, 300));
			g_atomic_int_add(&holders, -1);
			assert_int_equal(dlock_release(lock), DLOCK_OK);
		} else {
			assert_true(a.rc == DLOCK_EBUSY || a.rc == DLOCK_ETIMEDOUT || a.rc == DLOCK_ECANCELED);
		}
		g_usleep(1000);
		assert_int_equal(a.calls, 1);
		record_clear(&a);
	}
	return NULL;
}

static void test_contending_calls_each_end_once_and_never_overlap(void **state)
{
	dlock_client *clients[2] = { client_new(), client_new() };
	dlock_lock *locks[DRIVERS];
	GThread *drivers[DRIVERS];

	(void)state;
	holders = overlaps = 0;
	for (int i = 0; i < DRIVERS; i++) {
		locks[i] = handle_new(clients[i % 2], "async-contend");
		drivers[i] = g_thread_new("driver", driver_main, locks[i]);
	}
	for (int i = 0; i < DRIVERS; i++)
		g_thread_join(drivers[i]);
	assert_int_equal(overlaps, 0);
	for (int i = 0; i < DRIVERS; i++)
		dlock_lock_free(locks[i]);
	dlock_client_free(clients[0]);
	dlock_client_free(clients[1]);
	assert_true(free_within("async-contend", 0));
}

/*
 * One done of a handle at a time, in order: a done that starts the
 * handle's next call (a re-entry try, which ends at once) is still running
 * when another thread frees the handle, or its client.  The free waits for
 * it, and only then runs the next call's done.
 */
typedef struct chain {
	GMutex mu;
	int inside;                /* dones of the handle running now */
	int overlaps;              /* dones that found another running */
	int first_running;
	int first_returned;
	int second_early;          /* the second done ran before the first returned */
	record second;
} chain;

static void chain_enter(chain *c)
{
	g_mutex_lock(&c->mu);
	if (c->inside++)
		c->overlaps++;
	g_mutex_unlock(&c->mu);
}

static void chain_leave(chain *c)
{
	g_mutex_lock(&c->mu);
	c->inside--;
	g_mutex_unlock(&c->mu);
}

static void chain_second(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	chain *c = data;

	chain_enter(c);
	if (!g_atomic_int_get(&c->first_returned))
		c->second_early++;
	on_done(lock, rc, token, &c->second);
	chain_leave(c);
}

static void chain_first(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	chain *c = data;

	(void)token;
	assert_int_equal(rc, DLOCK_OK);
	chain_enter(c);
	assert_int_equal(dlock_acquire_async(lock, 0, chain_second, c), DLOCK_OK);
	g_atomic_int_set(&c->first_running, 1);
	g_usleep(150 * 1000); /* the free comes meanwhile */
	chain_leave(c);
	g_atomic_int_set(&c->first_returned, 1);
}

static void test_a_free_runs_no_done_beside_a_running_one(void **state)
{
	(void)state;
	for (int i = 0; i < 4; i++) {
		bool client_first = i % 2;
		dlock_client *client = client_new();
		dlock_lock *lock = handle_new(client, "async-chain");
		chain c;

		memset(&c, 0, sizeof c);
		g_mutex_init(&c.mu);
		record_init(&c.second);
		assert_int_equal(dlock_acquire_async(lock, 0, chain_first, &c), DLOCK_OK);
		while (!g_atomic_int_get(&c.first_running))
			g_usleep(200);
		g_usleep(30 * 1000); /* the second call (a re-entry) has ended */
		if (client_first) {
			dlock_client_free(client);
			dlock_lock_free(lock);
		} else {
			dlock_lock_free(lock);
			dlock_client_free(client);
		}
		assert_int_equal(c.second.calls, 1);
		assert_int_equal(c.overlaps, 0);
		assert_int_equal(c.second_early, 0);
		assert_true(free_within("async-chain", 0));
		record_clear(&c.second);
		g_mutex_clear(&c.mu);
	}
}

/*
 * A semaphore of two permits and a read-write lock, where the backend has
 * them: at most two permits granted, the third call waits for a release;
 * readers share, a writer waits for them.
 */
static void test_permits_and_shared_holds_wait_as_blocking_ones_do(void **state)
{
	dlock_client *client;
	dlock_lock *sem[3], *readers[2], *writer;
	record s[3], r[2], w, x;

	(void)state;
	if (masters) {
		/* Redlock has neither: each is refused at once, as with
		 * dlock_acquire(). */
		client = client_new();
		writer = handle_new(client, "async-sem");
		assert_int_equal(dlock_lock_set_permits(writer, 2), DLOCK_OK);
		record_init(&x);
		assert_int_equal(acquire_async(writer, 0, &x), DLOCK_EINVAL);
		assert_int_equal(x.calls, 0);
		record_clear(&x);
		dlock_lock_free(writer);
		dlock_client_free(client);
		return;
	}
	client = client_new();
	for (int i = 0; i < 3; i++) {
		record_init(&s[i]);
		sem[i] = handle_new(client, "async-sem");
		assert_int_equal(dlock_lock_set_permits(sem[i], 2), DLOCK_OK);
	}
	assert_int_equal(acquire_async(sem[0], 5000, &s[0]), DLOCK_OK);
	assert_true(wait_calls(&s[0], 1, 5000));
	assert_int_equal(acquire_async(sem[1], 5000, &s[1]), DLOCK_OK);
	assert_true(wait_calls(&s[1], 1, 5000));
	assert_int_equal(s[0].rc, DLOCK_OK);
	assert_int_equal(s[1].rc, DLOCK_OK);
	assert_int_equal(acquire_async(sem[2], 10000, &s[2]), DLOCK_OK);
	assert_false(wait_calls(&s[2], 1, 300));
	assert_int_equal(dlock_release(sem[0]), DLOCK_OK);
	assert_true(wait_calls(&s[2], 1, 5000));
	assert_int_equal(s[2].rc, DLOCK_OK);
	assert_int_equal(s[2].held, 1);
	assert_int_equal(dlock_release(sem[1]), DLOCK_OK);
	assert_int_equal(dlock_release(sem[2]), DLOCK_OK);
	for (int i = 0; i < 3; i++) {
		settled(sem[i]);
		dlock_lock_free(sem[i]);
		record_clear(&s[i]);
	}

	for (int i = 0; i < 2; i++) {
		record_init(&r[i]);
		readers[i] = handle_new(client, "async-rw");
		assert_int_equal(dlock_lock_set_mode(readers[i], DLOCK_MODE_READ), DLOCK_OK);
		assert_int_equal(acquire_async(readers[i], 5000, &r[i]), DLOCK_OK);
		assert_true(wait_calls(&r[i], 1, 5000));
		assert_int_equal(r[i].rc, DLOCK_OK);
	}
	record_init(&w);
	writer = handle_new(client, "async-rw");
	assert_int_equal(dlock_lock_set_mode(writer, DLOCK_MODE_WRITE), DLOCK_OK);
	assert_int_equal(acquire_async(writer, 10000, &w), DLOCK_OK);
	assert_false(wait_calls(&w, 1, 300));
	assert_int_equal(dlock_release(readers[0]), DLOCK_OK);
	assert_false(wait_calls(&w, 1, 200));
	assert_int_equal(dlock_release(readers[1]), DLOCK_OK);
	assert_true(wait_calls(&w, 1, 5000));
	assert_int_equal(w.rc, DLOCK_OK);
	assert_int_equal(w.held, 1);
	assert_int_equal(dlock_release(writer), DLOCK_OK);
	settled(writer);
	dlock_lock_free(writer);
	record_clear(&w);
	for (int i = 0; i < 2; i++) {
		settled(readers[i]);
		dlock_lock_free(readers[i]);
		record_clear(&r[i]);
	}
	dlock_client_free(client);
}

/* ---- DLOCK_DELIVER_DISPATCH -------------------------------------------- */

static dlock_client *dispatch_client_new(void)
{
	dlock_client *client = client_new();

	assert_int_equal(dlock_client_set_delivery(client, DLOCK_DELIVER_DISPATCH), DLOCK_OK);
	assert_true(dlock_client_event_fd(client) >= 0);
	return client;
}

/* Whether fd becomes readable within ms. */
static bool readable_within(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void test_dispatch_runs_done_on_the_dispatching_thread(void **state)
{
	dlock_client *client = dispatch_client_new();
	int fd = dlock_client_event_fd(client);
	dlock_lock *lock = handle_new(client, "dispatch-once");
	record a, r;

	(void)state;
	record_init(&a);
	record_init(&r);
	assert_false(readable_within(fd, 0));
	assert_int_equal(acquire_async(lock, 1000, &a), DLOCK_OK);
	assert_true(readable_within(fd, 5000));
	/* Queued, not run: nobody has dispatched. */
	assert_int_equal(a.calls, 0);
	assert_int_equal(dlock_client_dispatch(client, 0), 1);
	assert_false(readable_within(fd, 0));
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.rc, DLOCK_OK);
	assert_int_equal(a.held, 1);
	assert_true(pthread_equal(a.thread, pthread_self()));
	/* Returned: the handle takes the next call at once. */
	assert_int_equal(release_async(lock, &r), DLOCK_OK);
	assert_true(readable_within(fd, 5000));
	assert_int_equal(dlock_client_dispatch(client, 1), 1);
	assert_int_equal(r.rc, DLOCK_OK);
	assert_int_equal(r.held, 0);
	assert_int_equal(dlock_client_dispatch(client, 0), 0);
	dlock_lock_free(lock);
	dlock_client_free(client);
	record_clear(&a);
	record_clear(&r);
}

static void test_delivery_is_set_before_the_first_handle(void **state)
{
	dlock_client *client = client_new();
	dlock_lock *lock = handle_new(client, "dispatch-late");

	(void)state;
	assert_int_equal(dlock_client_event_fd(client), -1);
	assert_int_equal(dlock_client_dispatch(client, 0), DLOCK_EINVAL);
	assert_int_equal(dlock_client_set_delivery(client, DLOCK_DELIVER_DISPATCH), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "before the first"));
	assert_int_equal(dlock_client_event_fd(client), -1);
	assert_int_equal(dlock_client_set_delivery(client, (dlock_delivery)7), DLOCK_EINVAL);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* Calls whose deadlines pass while the program does not dispatch: each
 * ends by itself, the fd becomes readable, and a dispatch tells each
 * once. */
#define LATE 12

static void test_deadlines_pass_without_dispatch(void **state)
{
	dlock_client *client = dispatch_client_new();
	dlock_client *other = client_new();
	dlock_lock *holder = handle_new(other, "dispatch-late-wait");
	dlock_lock *locks[LATE];
	record recs[LATE];
	int fd = dlock_client_event_fd(client);
	int64_t started, seen;
	int ran = 0;

	(void)state;
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	started = g_get_monotonic_time();
	for (int i = 0; i < LATE; i++) {
		record_init(&recs[i]);
		locks[i] = handle_new(client, "dispatch-late-wait");
		assert_int_equal(acquire_async(locks[i], 200, &recs[i]), DLOCK_OK);
	}
	assert_true(readable_within(fd, 5000));
	seen = g_get_monotonic_time() - started;
	assert_true(seen >= 200 * 1000);
	assert_true(seen < 200 * 1000 + 800 * 1000);
	/* Every call ends by its deadline, dispatched or not. */
	g_usleep(300 * 1000);
	while (ran < LATE) {
		int n = dlock_client_dispatch(client, 0);

		assert_true(n >= 0);
		if (n == 0)
			assert_true(readable_within(fd, 2000));
		ran += n;
	}
	for (int i = 0; i < LATE; i++) {
		assert_int_equal(recs[i].calls, 1);
		assert_int_equal(recs[i].rc, DLOCK_ETIMEDOUT);
		dlock_lock_free(locks[i]);
		record_clear(&recs[i]);
	}
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	dlock_lock_free(holder);
	dlock_client_free(other);
	dlock_client_free(client);
}

/* The order a handle's callbacks come in: done(OK) before the LOST of
 * the hold it granted, even when the loss came before the dispatch. */
static GString *seen_events;

static void on_state(dlock_lock *lock, dlock_state st, void *data)
{
	(void)lock;
	(void)data;
	g_string_append_printf(seen_events, "state:%d ", (int)st);
}

static void on_done_ordered(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	(void)lock;
	(void)token;
	(void)data;
	g_string_append_printf(seen_events, "done:%d ", rc);
}

static void test_done_comes_before_the_states_of_its_hold(void **state)
{
	dlock_client *client = dispatch_client_new();
	dlock_lock *lock = handle_new(client, "dispatch-order");
	int fd = dlock_client_event_fd(client);
	char *path = g_build_filename(dir, "r-dispatch-order", NULL);
	char *expected;

	(void)state;
	seen_events = g_string_new("");
	assert_int_equal(dlock_lock_set_state_callback(lock, on_state, NULL), DLOCK_OK);
	/* A short lease: its renewal finds the key gone within moments. */
	if (server || masters)
		assert_int_equal(dlock_lock_set_ttl(lock, 900), DLOCK_OK);
	assert_int_equal(dlock_acquire_async(lock, 1000, on_done_ordered, NULL), DLOCK_OK);
	assert_true(readable_within(fd, 5000));
	/* Granted, its done queued: now the lock goes on the server (the lock
	 * file, the key), and the hold with it. */
	if (server)
		assert_int_equal(test_redis_int(server, "DEL dlock:{dispatch-order}"), 1);
	for (int i = 0; masters && i < masters->n; i++)
		assert_int_equal(test_redis_int(masters->masters[i], "DEL dlock:{dispatch-order}"), 1);
	/* ZooKeeper: the server freezes, and the session's connection with
	 * it: SUSPENDED (a lock node is no lease that a delete would end). */
	if (zk)
		test_zk_signal(zk, 0, SIGSTOP);
	if (!server && !masters && !zk)
		assert_int_equal(g_unlink(path), 0);
	g_usleep(zk ? 2500 * 1000 : server || masters ? 1500 * 1000 : 300 * 1000);
	while (dlock_client_dispatch(client, 0) > 0 || readable_within(fd, 300))
		;
	if (zk) {
		int rc;

		/* SUSPENDED, and LOST too once the session's time has run out
		 * by dlock's own clock: either way after done. */
		test_zk_signal(zk, 0, SIGCONT);
		assert_true(g_str_has_prefix(seen_events->str, "done:0 state:"));
		expected = g_strdup_printf("done:0 state:%d ", (int)DLOCK_STATE_SUSPENDED);
		if (!g_str_has_prefix(seen_events->str, expected)) {
			g_free(expected);
			expected = g_strdup_printf("done:0 state:%d ", (int)DLOCK_STATE_LOST);
			assert_string_equal(seen_events->str, expected);
		}
		g_free(expected);
		rc = dlock_release(lock);
		assert_true(rc == DLOCK_OK || rc == DLOCK_ELOST);
		/* The node goes: deleted, or with the session dlock closed (the
		 * server, frozen, had not counted that session's time). */
		assert_true(test_zk_wait_children(zk, "/dlock/dispatch-order", 0, 10000));
	} else {
		expected = g_strdup_printf("done:0 state:%d ", (int)DLOCK_STATE_LOST);
		assert_string_equal(seen_events->str, expected);
		g_free(expected);
		assert_int_equal(dlock_release(lock), DLOCK_ELOST);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_string_free(seen_events, TRUE);
	g_free(path);
}

/*
 * A call canceled as it starts, on a handle whose hold the core's clock
 * has found lost (past the bound its backend gave it, before the backend
 * looked): its first step may be urgent, on the stepper's timer thread,
 * where the lost hold's release on the server, which waits for an
 * answer, must not run (sanitizer builds abort if it does).  Canceled
 * before its first step, the call leaves the hold to the next release,
 * which tells the loss; begun before the cancel, the step clears it.
 */
static void test_a_call_canceled_at_its_start_leaves_a_lost_hold_alone(void **state)
{
	dlock_client *client = client_new();
	int left = 0;

	(void)state;
	for (int i = 0; i < 20; i++) {
		char *resource = g_strdup_printf("async-lost-cancel-%d", i);
		dlock_lock *lock = handle_new(client, resource);
		dlock__hold *hold;
		record a;
		int rc;

		assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
		dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
		hold = lock->hold;
		dlock__mutex_unlock(&lock->mu);
		assert_non_null(hold);
		dlock__hold_set_valid_until(hold, dlock__boot_us() - 1);
		record_init(&a);
		assert_int_equal(dlock_acquire_async(lock, 2000, on_done, &a), DLOCK_OK);
		dlock_lock_cancel(lock);
		assert_true(wait_calls(&a, 1, 10000));
		settled(lock);
		assert_true(a.rc == DLOCK_ECANCELED || a.rc == DLOCK_ELOST);
		rc = dlock_release(lock);
		assert_true(rc == DLOCK_ELOST || rc == DLOCK_ENOTHELD);
		left += rc == DLOCK_ELOST;
		assert_int_equal(dlock_release(lock), DLOCK_ENOTHELD);
		record_clear(&a);
		dlock_lock_free(lock);
		assert_true(free_within(resource, 5000));
		g_free(resource);
	}
	print_message("%d of 20 calls left the lost hold to the release\n", left);
	dlock_client_free(client);
}

/*
 * dispatch(0) runs those queued when it is called, and none queued after,
 * even when a callback it runs frees a handle whose queued callbacks then
 * leave the queue.
 */
typedef struct limit_case {
	dlock_client *client;
	dlock_lock *second, *third;
	int first_ran, second_ran, third_ran;
} limit_case;

static limit_case *limits;

static void limit_first(dlock_lock *lock, dlock_state st, void *data)
{
	(void)lock;
	(void)st;
	(void)data;
	limits->first_ran++;
	dlock_lock_free(limits->second);
	limits->second = NULL;
	/* As a backend's thread posts them. */
	dlock__callbacks_post(limits->client, limits->third, DLOCK_STATE_SUSPENDED);
	dlock__callbacks_post(limits->client, limits->third, DLOCK_STATE_RECONNECTED);
}

static void limit_count(dlock_lock *lock, dlock_state st, void *data)
{
	(void)st;
	(void)data;
	if (lock == limits->third)
		limits->third_ran++;
	else
		limits->second_ran++;
}

static void test_dispatch_runs_only_the_callbacks_queued_at_its_call(void **state)
{
	limit_case c = { 0 };
	dlock_lock *first;

	(void)state;
	limits = &c;
	c.client = dispatch_client_new();
	first = handle_new(c.client, "dispatch-limit-1");
	c.second = handle_new(c.client, "dispatch-limit-2");
	c.third = handle_new(c.client, "dispatch-limit-3");
	assert_int_equal(dlock_lock_set_state_callback(first, limit_first, NULL), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(c.second, limit_count, NULL), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(c.third, limit_count, NULL), DLOCK_OK);
	dlock__callbacks_post(c.client, first, DLOCK_STATE_SUSPENDED);
	dlock__callbacks_post(c.client, c.second, DLOCK_STATE_SUSPENDED);
	dlock__callbacks_post(c.client, c.second, DLOCK_STATE_RECONNECTED);
	/* The first runs and frees the second, whose two go with it; the
	 * two posted meanwhile wait for the next dispatch. */
	assert_int_equal(dlock_client_dispatch(c.client, 0), 1);
	assert_int_equal(c.first_ran, 1);
	assert_int_equal(c.second_ran, 0);
	assert_int_equal(c.third_ran, 0);
	assert_true(readable_within(dlock_client_event_fd(c.client), 0));
	assert_int_equal(dlock_client_dispatch(c.client, 0), 2);
	assert_int_equal(c.third_ran, 2);
	assert_false(readable_within(dlock_client_event_fd(c.client), 0));
	dlock_lock_free(first);
	dlock_lock_free(c.third);
	dlock_client_free(c.client);
	limits = NULL;
}

static void test_freeing_the_client_runs_the_undispatched_dones(void **state)
{
	dlock_client *client = dispatch_client_new();
	dlock_client *other = client_new();
	dlock_lock *granted = handle_new(client, "dispatch-cf-granted");
	dlock_lock *waiting = handle_new(client, "dispatch-cf-waiting");
	dlock_lock *holder = handle_new(other, "dispatch-cf-waiting");
	record a, w;

	(void)state;
	record_init(&a);
	record_init(&w);
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	assert_int_equal(acquire_async(granted, 5000, &a), DLOCK_OK);
	assert_int_equal(acquire_async(waiting, -1, &w), DLOCK_OK);
	assert_true(readable_within(dlock_client_event_fd(client), 5000));
	dlock_client_free(client);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.rc, DLOCK_ECANCELED);
	assert_true(pthread_equal(a.thread, pthread_self()));
	assert_int_equal(w.calls, 1);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	assert_true(pthread_equal(w.thread, pthread_self()));
	assert_true(free_within("dispatch-cf-granted", 0));
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	dlock_lock_free(granted);
	dlock_lock_free(waiting);
	dlock_lock_free(holder);
	dlock_client_free(other);
	record_clear(&a);
	record_clear(&w);
}

/* ---- campaigns ---------------------------------------------------------- */

/* What a participant was told, in order: "done:RC" and "ev:EVENT". */
typedef struct told {
	GMutex mu;
	GCond cond;
	GString *log;
	int dones;
	int rc;
	uint64_t token;
	int leader;            /* dlock_election_is_leader() inside done */
	char message[256];
	dlock_election *again; /* a done that fails campaigns again, once */
} told;

static void told_init(told *t)
{
	memset(t, 0, sizeof *t);
	g_mutex_init(&t->mu);
	g_cond_init(&t->cond);
	t->log = g_string_new("");
}

static void told_clear(told *t)
{
	g_string_free(t->log, TRUE);
	g_mutex_clear(&t->mu);
	g_cond_clear(&t->cond);
}

static void on_campaign_done(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	told *t = data;
	dlock_election *again;

	g_mutex_lock(&t->mu);
	again = rc != DLOCK_OK ? t->again : NULL;
	t->again = NULL;
	t->dones++;
	t->rc = rc;
	t->token = token;
	t->leader = dlock_held(lock);
	g_strlcpy(t->message, rc == DLOCK_OK ? "" : dlock_last_error_message(), sizeof t->message);
	g_string_append_printf(t->log, "done:%d ", rc);
	g_cond_broadcast(&t->cond);
	g_mutex_unlock(&t->mu);
	if (again)
		assert_int_equal(dlock_election_campaign_async(again, 10000, on_campaign_done, t),
		                 DLOCK_OK);
}

static void on_told(dlock_election *e, dlock_election_event event, const char *id, void *data)
{
	told *t = data;

	(void)e;
	(void)id;
	g_mutex_lock(&t->mu);
	g_string_append_printf(t->log, "ev:%d ", (int)event);
	g_cond_broadcast(&t->cond);
	g_mutex_unlock(&t->mu);
}

/* Wait up to ms until the log is exactly want. */
static bool told_within(told *t, const char *want, int64_t ms)
{
	int64_t until = g_get_monotonic_time() + ms * 1000;
	bool ok;

	g_mutex_lock(&t->mu);
	while (strcmp(t->log->str, want) != 0 && g_cond_wait_until(&t->cond, &t->mu, until))
		;
	ok = strcmp(t->log->str, want) == 0;
	if (!ok)
		fprintf(stderr, "told \"%s\", want \"%s\"\n", t->log->str, want);
	g_mutex_unlock(&t->mu);
	return ok;
}

static dlock_election *participant_new(dlock_client *client, const char *name, const char *id,
                                       told *t)
{
	dlock_election *e = NULL;

	assert_int_equal(dlock_election_new(client, name, id, &e), DLOCK_OK);
	assert_int_equal(dlock_election_set_callback(e, on_told, t), DLOCK_OK);
	return e;
}

/* The codes in a log: DLOCK_EBUSY -2, DLOCK_ETIMEDOUT -3, DLOCK_ECANCELED -9;
 * an event as its number (ELECTED 1, RESIGNED 4). */
#define EV(x) "ev:" G_STRINGIFY(x) " "

static void test_a_campaign_without_blocking_leads_then_tells_elected(void **state)
{
	dlock_client *c1 = client_new(), *c2 = client_new();
	told t1, t2;
	dlock_election *e1, *e2;
	char *leader = NULL;
	uint64_t first;

	(void)state;
	told_init(&t1);
	told_init(&t2);
	e1 = participant_new(c1, "campaign", "one", &t1);
	e2 = participant_new(c2, "campaign", "two", &t2);

	/* Granted: done sees the leadership, ELECTED follows it. */
	assert_int_equal(dlock_election_campaign_async(e1, 5000, on_campaign_done, &t1), DLOCK_OK);
	assert_true(told_within(&t1, "done:0 " EV(1), 5000));
	assert_int_equal(t1.leader, 1);
	assert_true(t1.token > 0);
	assert_int_equal(t1.token, dlock_election_fencing_token(e1));
	assert_int_equal(dlock_election_leader(e2, &leader), DLOCK_OK);
	assert_string_equal(leader, "one");
	free(leader);
	first = t1.token;

	/* Leading already: DLOCK_OK with the same token, no second ELECTED. */
	assert_int_equal(dlock_election_campaign_async(e1, 0, on_campaign_done, &t1), DLOCK_OK);
	assert_true(told_within(&t1, "done:0 " EV(1) "done:0 ", 5000));
	assert_int_equal(t1.token, first);
	settled(dlock_election_lock(e1));

	/* Another participant's try, and a short wait: refused, as the
	 * election's, and nothing of them stays. */
	assert_int_equal(dlock_election_campaign_async(e2, 0, on_campaign_done, &t2), DLOCK_OK);
	assert_true(told_within(&t2, "done:-2 ", 5000));
	assert_non_null(strstr(t2.message, "another participant leads"));
	settled(dlock_election_lock(e2));
	assert_int_equal(dlock_election_campaign_async(e2, 200, on_campaign_done, &t2), DLOCK_OK);
	assert_true(told_within(&t2, "done:-2 done:-3 ", 5000));
	assert_non_null(strstr(t2.message, "not elected within 200 ms"));
	settled(dlock_election_lock(e2));

	/* A waiting campaign: one at a time, blocking or not; the leader's
	 * resignation (one, though it campaigned twice) elects it. */
	g_string_truncate(t2.log, 0);
	assert_int_equal(dlock_election_campaign_async(e2, 10000, on_campaign_done, &t2), DLOCK_OK);
	assert_int_equal(dlock_election_campaign_async(e2, 10000, on_campaign_done, &t2), DLOCK_EINVAL);
	assert_int_equal(dlock_election_campaign(e2, 0), DLOCK_EINVAL);
	g_usleep(100 * 1000);
	assert_int_equal(dlock_election_resign(e1), DLOCK_OK);
	assert_true(told_within(&t1, "done:0 " EV(1) "done:0 " EV(4), 5000));
	assert_true(told_within(&t2, "done:0 " EV(1), 10000));
	assert_int_equal(t2.leader, 1);
	assert_true(t2.token > first);
	assert_int_equal(dlock_election_leader(e1, &leader), DLOCK_OK);
	assert_string_equal(leader, "two");
	free(leader);
	settled(dlock_election_lock(e2));

	assert_int_equal(dlock_election_resign(e2), DLOCK_OK);
	assert_int_equal(dlock_election_resign(e1), DLOCK_ENOTHELD);
	dlock_election_free(e1);
	dlock_election_free(e2);
	dlock_client_free(c1);
	dlock_client_free(c2);
	assert_int_equal(t1.dones, 2);
	assert_int_equal(t2.dones, 3);
	told_clear(&t1);
	told_clear(&t2);
}

static void test_a_campaign_without_blocking_ends_by_cancel_free_or_its_own_done(void **state)
{
	dlock_client *c1 = client_new(), *c2 = client_new();
	told t1, t2;
	dlock_election *e1, *e2;

	(void)state;
	told_init(&t1);
	told_init(&t2);
	e1 = participant_new(c1, "campaign-end", "one", &t1);
	e2 = participant_new(c2, "campaign-end", "two", &t2);
	assert_int_equal(dlock_election_campaign(e1, 5000), DLOCK_OK);
	assert_true(told_within(&t1, EV(1), 5000));

	/* Canceled while it waits. */
	assert_int_equal(dlock_election_campaign_async(e2, 30000, on_campaign_done, &t2), DLOCK_OK);
	g_usleep(100 * 1000);
	assert_int_equal(dlock_election_cancel(e2), DLOCK_OK);
	assert_true(told_within(&t2, "done:-9 ", 5000));
	settled(dlock_election_lock(e2));

	/* A failed try's done campaigns again, waiting this time: elected
	 * when the leader resigns. */
	g_string_truncate(t2.log, 0);
	t2.again = e2;
	assert_int_equal(dlock_election_campaign_async(e2, 0, on_campaign_done, &t2), DLOCK_OK);
	assert_true(told_within(&t2, "done:-2 ", 5000));
	g_usleep(100 * 1000);
	assert_int_equal(dlock_election_resign(e1), DLOCK_OK);
	assert_true(told_within(&t2, "done:-2 done:0 " EV(1), 10000));
	settled(dlock_election_lock(e2));

	/* The election freed while its campaign waits: done runs with
	 * DLOCK_ECANCELED before the free returns. */
	g_string_truncate(t1.log, 0);
	assert_int_equal(dlock_election_campaign_async(e1, 30000, on_campaign_done, &t1), DLOCK_OK);
	g_usleep(100 * 1000);
	dlock_election_free(e1);
	assert_string_equal(t1.log->str, "done:-9 ");

	assert_int_equal(dlock_election_resign(e2), DLOCK_OK);
	dlock_election_free(e2);
	dlock_client_free(c1);
	dlock_client_free(c2);
	told_clear(&t1);
	told_clear(&t2);
}

static int setup(void **state)
{
	(void)state;
	if (strcmp(backend, "redis") == 0) {
		server = test_redis_start(NULL, NULL, false);
		uri = test_redis_uri(server, NULL);
	} else if (strcmp(backend, "redlock") == 0) {
		masters = test_redlock_start(3);
		uri = test_redlock_uri(masters, 3, "");
	} else if (strcmp(backend, "zk") == 0) {
		zk = test_zk_start(1, 200, 20000);
		/* A session's loss shows within moments (the ordering test). */
		uri = test_zk_uri(zk, "?session-timeout=2s");
	} else {
		test_file_dir_make("dlock-async", &dir, &uri);
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (server) {
		/* Nothing of any call is left on the server. */
		assert_int_equal(test_redis_leftover_count(server, "dlock:"), 0);
		test_redis_stop(server);
	} else if (masters) {
		assert_int_equal(test_redlock_leftover_keys(masters, "dlock:"), 0);
		test_redlock_stop(masters);
	} else if (zk) {
		assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
		test_zk_stop(zk);
	} else {
		test_file_dir_remove(dir);
		g_free(dir);
	}
	g_free(uri);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_acquire_and_release_run_done_once_on_the_callback_thread),
		cmocka_unit_test(test_a_second_acquire_of_the_handle_is_a_reentry),
		cmocka_unit_test(test_waits_for_a_release_and_keeps_its_deadline),
		cmocka_unit_test(test_refusals_come_at_once_without_a_callback),
		cmocka_unit_test(test_cancel_ends_a_wait_with_ecanceled_and_leaves_nothing),
		cmocka_unit_test(test_a_cancel_racing_the_grant_never_leaves_a_hold),
		cmocka_unit_test(test_freeing_a_handle_runs_its_pending_done_with_ecanceled),
		cmocka_unit_test(test_freeing_the_client_runs_every_done_before_it_returns),
		cmocka_unit_test(test_many_cycles_leave_no_thread_or_descriptor),
		cmocka_unit_test(test_contending_calls_each_end_once_and_never_overlap),
		cmocka_unit_test(test_a_free_runs_no_done_beside_a_running_one),
		cmocka_unit_test(test_permits_and_shared_holds_wait_as_blocking_ones_do),
		cmocka_unit_test(test_dispatch_runs_done_on_the_dispatching_thread),
		cmocka_unit_test(test_delivery_is_set_before_the_first_handle),
		cmocka_unit_test(test_deadlines_pass_without_dispatch),
		cmocka_unit_test(test_done_comes_before_the_states_of_its_hold),
		cmocka_unit_test(test_a_call_canceled_at_its_start_leaves_a_lost_hold_alone),
		cmocka_unit_test(test_freeing_the_client_runs_the_undispatched_dones),
		cmocka_unit_test(test_dispatch_runs_only_the_callbacks_queued_at_its_call),
		cmocka_unit_test(test_a_campaign_without_blocking_leads_then_tells_elected),
		cmocka_unit_test(test_a_campaign_without_blocking_ends_by_cancel_free_or_its_own_done),
	};

	test_init(argv[0]);
	if (argc < 2 || (strcmp(argv[1], "file") != 0 && strcmp(argv[1], "redis") != 0 &&
	                 strcmp(argv[1], "redlock") != 0 && strcmp(argv[1], "zk") != 0)) {
		fprintf(stderr, "usage: %s file|redis|redlock|zk\n", argv[0]);
		return 2;
	}
	backend = argv[1];
	return cmocka_run_group_tests_name(backend, tests, setup, teardown);
}
