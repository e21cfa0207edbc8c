/* SPDX-License-Identifier: MIT */
/*
 * key-format=plain against a real peer: redis-py's Lock (SET NX PX on the
 * bare name) and dlock exclude each other in both directions, also while
 * dlock waiters queue (redis-py, which does not queue, takes the lock only
 * when it is free), and against dlock's readers, whose sorted set at the
 * same name keeps its SET NX out.
 *
 * The peer is the benchmark's redis-py driver (bench/peers/redispy_peer.py,
 * its try and hold modes), run by Debian's /usr/bin/python3 (or
 * $DLOCK_TEST_PYTHON); a missing interpreter or redis module fails the
 * test.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redis.h"
#include "test-waiters.h"

#ifndef REDISPY_PEER
#error "REDISPY_PEER must name bench/peers/redispy_peer.py"
#endif

static test_redis *server;

static const char *python(void)
{
	const char *env = getenv("DLOCK_TEST_PYTHON");

	return env && *env ? env : "/usr/bin/python3";
}

/* A running redis-py peer. */
typedef struct peer {
	pid_t pid;
	int in_fd;
	int out_fd;
} peer;

static peer peer_start(const char *name, const char *mode)
{
	char address[32];
	const char *argv[] = { python(), REDISPY_PEER, mode, "--server",
	                       address, "--resource", name, NULL };
	peer p;

	g_snprintf(address, sizeof(address), "127.0.0.1:%d", server->port);
	p.pid = test_spawn(argv, &p.in_fd, &p.out_fd);
	return p;
}

/* The peer's next line; fails the test if there is none in 15 s. */
static char *peer_line(peer *p)
{
	char line[256];

	if (!test_read_line(p->out_fd, line, sizeof(line), 15000))
		fail_msg("no answer from the redis-py peer (%s %s)", python(), REDISPY_PEER);
	return g_strdup(line);
}

static void peer_finish(peer *p)
{
	int sig;

	close(p->in_fd);
	close(p->out_fd);
	assert_int_equal(test_wait_child(p->pid, &sig), 0);
}

/* The peer, told to release, says so and ends. */
static void peer_released(peer *p)
{
	char *line = peer_line(p);

	assert_string_equal(line, "released");
	g_free(line);
	peer_finish(p);
}

/* What a one-shot redis-py acquire says: "acquired" or "busy". */
static char *peer_try(const char *name)
{
	peer p = peer_start(name, "try");
	char *answer = peer_line(&p);

	peer_finish(&p);
	return answer;
}

/* A peer that holds the lock under name until told to release. */
static peer peer_holding(const char *name)
{
	peer p = peer_start(name, "hold");
	char *line = peer_line(&p);

	assert_string_equal(line, "held");
	g_free(line);
	return p;
}

/* Tell the peer holding name to release: lock then takes it at once, and
 * its release leaves nothing under name. */
static void peer_release_then_dlock_takes(peer *p, const char *name, dlock_lock *lock)
{
	assert_true(test_write_str(p->in_fd, "release\n"));
	peer_released(p);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_int_equal(test_redis_int(server, "EXISTS %s", name), 0);
}

static void open_plain(const char *name, dlock_client **ret_client, dlock_lock **ret_lock)
{
	char *uri = test_redis_uri(server, "?key-format=plain");

	assert_int_equal(dlock_client_new(uri, ret_client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(*ret_client, name, ret_lock), DLOCK_OK);
	g_free(uri);
}

static void test_redis_py_holder_makes_dlock_busy_until_it_releases(void **state)
{
	const char *name = "interop/py-holds";
	peer p = peer_holding(name);
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;
	char *value;

	/* redis-py keeps its lock under the bare name. */
	value = test_redis_str(server, "GET %s", name);
	assert_non_null(value);

	open_plain(name, &client, &lock);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_acquire(lock, 300), DLOCK_ETIMEDOUT);
	assert_false(dlock_held(lock));
	/* The foreign holder is shown as its raw value. */
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_locked(info), 1);
	assert_int_equal(dlock_info_hold(info), DLOCK_HOLD_NONE);
	assert_string_equal(dlock_info_holder(info), value);
	assert_int_equal(dlock_info_holder_pid(info), 0);
	dlock_info_free(info);
	{
		char *after = test_redis_str(server, "GET %s", name);

		assert_string_equal(after, value);
		g_free(after);
	}

	peer_release_then_dlock_takes(&p, name, lock);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(value);
}

static void test_dlock_holder_makes_redis_py_fail_until_it_releases(void **state)
{
	const char *name = "interop/dlock-holds";
	dlock_client *client;
	dlock_lock *lock;
	char *answer;

	open_plain(name, &client, &lock);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	/* Exactly the bare name is the lock key. */
	assert_int_equal(test_redis_int(server, "EXISTS %s", name), 1);
	assert_int_equal(test_redis_int(server, "EXISTS dlock:{%s}", name), 0);
	answer = peer_try(name);
	assert_string_equal(answer, "busy");
	g_free(answer);
	assert_true(dlock_held(lock));

	assert_int_equal(dlock_release(lock), DLOCK_OK);
	answer = peer_try(name);
	assert_string_equal(answer, "acquired");
	g_free(answer);
	/* And dlock can take it again after redis-py's release. */
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

typedef struct waiter {
	dlock_lock *lock;
	int rc;
	int64_t granted_ms;
} waiter;

static gpointer wait_for_lock(gpointer data)
{
	waiter *w = data;

	w->rc = dlock_acquire(w->lock, 15000);
	w->granted_ms = test_now_ms();
	if (w->rc == DLOCK_OK)
		w->rc = dlock_release(w->lock);
	return NULL;
}

static bool waiting_on_channel(void *arg)
{
	return test_redis_numsub(server, arg) > 0;
}

static void test_dlock_waiter_gets_the_lock_after_redis_py_releases(void **state)
{
	const char *name = "interop/dlock-waits";
	peer p = peer_start(name, "hold");
	dlock_client *client;
	waiter w = { NULL, 99, 0 };
	GThread *t;
	char *line = peer_line(&p);
	int64_t released;

	assert_string_equal(line, "held");
	g_free(line);
	open_plain(name, &client, &w.lock);
	t = g_thread_new("waiter", wait_for_lock, &w);
	/* The waiter is blocked once it listens on the release channel. */
	assert_true(test_wait_until(waiting_on_channel, "interop/dlock-waits:released", 5000));
	released = test_now_ms();
	assert_true(test_write_str(p.in_fd, "release\n"));
	g_thread_join(t);
	assert_int_equal(w.rc, DLOCK_OK);
	/* redis-py publishes nothing on release: dlock finds out by trying
	 * again within its capped backoff, long before the peer's 30 s lease
	 * would have ended. */
	print_message("dlock acquired %" PRId64 " ms after redis-py was told to release\n",
	              w.granted_ms - released);
	assert_true(w.granted_ms - released < 5000);
	peer_released(&p);
	dlock_lock_free(w.lock);
	dlock_client_free(client);
}

/* A plain-format dlock waiter that holds until told. */
static void queue_plain_waiter(test_waiter *w, const char *name, long long n)
{
	char *plain = test_redis_uri(server, "?key-format=plain");

	test_queue_waiter_start(server, w, name, plain, name, 30000, n, NULL);
	g_free(plain);
}

static void assert_redis_py_gets(const char *name, const char *expected)
{
	char *answer = peer_try(name);

	assert_string_equal(answer, expected);
	g_free(answer);
}

static void test_redis_py_is_kept_out_while_dlock_waiters_queue(void **state)
{
	const char *name = "interop/queued";
	char *plain = test_redis_uri(server, "?key-format=plain");
	test_holder h;
	test_waiter w;

	test_holder_open(&h, plain, name, NULL);
	test_holder_take(&h);
	queue_plain_waiter(&w, name, 1);
	assert_redis_py_gets(name, "busy");
	/* The release hands the key to the waiter: it is never free. */
	test_holder_release(&h, DLOCK_OK);
	assert_redis_py_gets(name, "busy");
	test_waiter_granted(&w, 5000);
	assert_int_equal(test_lock_holder_pid(server, name), w.pid);
	test_waiter_release(&w);
	test_waiter_finish(&w);
	/* Nobody holds or waits: redis-py takes it. */
	assert_redis_py_gets(name, "acquired");
	test_holder_close(&h);
	test_queue_assert_only_fence(server, name);
	g_free(plain);
}

static void test_dlock_waiters_queue_behind_redis_py_and_get_it_in_order(void **state)
{
	const char *name = "interop/py-then-queue";
	char *plain = test_redis_uri(server, "?key-format=plain");
	peer p = peer_start(name, "hold");
	char *line = peer_line(&p);
	test_waiter a, b;
	test_holder newcomer;
	int64_t released;

	assert_string_equal(line, "held");
	g_free(line);
	queue_plain_waiter(&a, name, 1);
	queue_plain_waiter(&b, name, 2);
	test_holder_open(&newcomer, plain, name, NULL);
	assert_int_equal(dlock_acquire(newcomer.lock, 0), DLOCK_EBUSY);
	/* redis-py publishes nothing: the head finds the key free on its
	 * next try, within its capped backoff. */
	released = test_now_ms();
	assert_true(test_write_str(p.in_fd, "release\n"));
	test_waiter_granted(&a, 5000);
	print_message("the head of the queue got the lock %" PRId64 " ms after redis-py was told to release\n",
	              a.at_ms - released);
	assert_true(a.at_ms - released < 3000);
	peer_released(&p);
	assert_redis_py_gets(name, "busy");
	test_waiter_release(&a);
	test_waiter_granted(&b, 5000);
	assert_true(b.token > a.token);
	assert_redis_py_gets(name, "busy");
	test_waiter_release(&b);
	test_waiter_finish(&a);
	test_waiter_finish(&b);
	assert_redis_py_gets(name, "acquired");
	test_holder_close(&newcomer);
	test_queue_assert_only_fence(server, name);
	g_free(plain);
}

/* A READ handle on a client of its own, key-format=plain. */
static dlock_lock *open_plain_reader(const char *name, dlock_client **ret_client)
{
	dlock_lock *lock;

	open_plain(name, ret_client, &lock);
	assert_int_equal(dlock_lock_set_mode(lock, DLOCK_MODE_READ), DLOCK_OK);
	return lock;
}

static void test_redis_py_holder_keeps_dlock_readers_out(void **state)
{
	const char *name = "interop/rw-py-holds";
	peer p = peer_holding(name);
	dlock_client *client;
	dlock_lock *reader;
	dlock_info *info;

	reader = open_plain_reader(name, &client);
	assert_int_equal(dlock_acquire(reader, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_acquire(reader, 300), DLOCK_ETIMEDOUT);
	/* The reader touched neither redis-py's string nor its expiry. */
	assert_int_equal(test_redis_int(server, "EXISTS %s", name), 1);
	assert_true(test_redis_int(server, "PTTL %s", name) > 25000);
	assert_int_equal(dlock_lock_query(reader, &info), DLOCK_OK);
	assert_int_equal(dlock_info_mode(info), DLOCK_HELD_EXCLUSIVE);
	dlock_info_free(info);
	peer_release_then_dlock_takes(&p, name, reader);
	dlock_lock_free(reader);
	dlock_client_free(client);
}

static void test_dlock_readers_keep_redis_py_out_until_the_last_releases(void **state)
{
	const char *name = "interop/rw-dlock-reads";
	dlock_client *client_a, *client_b;
	dlock_lock *a = open_plain_reader(name, &client_a);
	dlock_lock *b = open_plain_reader(name, &client_b);

	assert_int_equal(dlock_acquire(a, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(b, 0), DLOCK_OK);
	assert_int_equal(test_redis_int(server, "ZCARD %s", name), 2);
	assert_redis_py_gets(name, "busy");
	assert_int_equal(dlock_release(a), DLOCK_OK);
	assert_redis_py_gets(name, "busy");
	assert_true(dlock_held(b));
	assert_int_equal(dlock_release(b), DLOCK_OK);
	assert_redis_py_gets(name, "acquired");
	dlock_lock_free(b);
	dlock_lock_free(a);
	dlock_client_free(client_b);
	dlock_client_free(client_a);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "interop/"), 0);
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{interop/"), 0);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	return 0;
}

static int teardown(void **state)
{
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redis_py_holder_makes_dlock_busy_until_it_releases),
		cmocka_unit_test(test_dlock_holder_makes_redis_py_fail_until_it_releases),
		cmocka_unit_test(test_dlock_waiter_gets_the_lock_after_redis_py_releases),
		cmocka_unit_test(test_redis_py_is_kept_out_while_dlock_waiters_queue),
		cmocka_unit_test(test_dlock_waiters_queue_behind_redis_py_and_get_it_in_order),
		cmocka_unit_test(test_redis_py_holder_keeps_dlock_readers_out),
		cmocka_unit_test(test_dlock_readers_keep_redis_py_out_until_the_last_releases),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};
	int status;

	test_init(argv[0]);
	if (test_waiter_worker_main(argc, argv, &status))
		return status;
	return test_finish(cmocka_run_group_tests_name("redis-interop", tests, setup, teardown));
}
