/* SPDX-License-Identifier: MIT */
/*
 * Redlock with one master of three stalled while the other two are
 * healthy: a link that stops carrying bytes (the proxy stalling both
 * directions), a frozen server (SIGSTOP: the kernel still completes
 * connections), and a host that silently drops connection attempts (a
 * listener whose backlog is full).  Each master's connect, setup and
 * script are in flight together, each bounded by the master timeout, so
 * the stalled one costs at most that: acquires succeed and holds stay
 * HELD through their renewals; a canceled wait does not even wait for
 * that.  The URI selects database 1, so every new connection sends
 * SELECT before its first script.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-events.h"
#include "test-redlock.h"

/* The suite's five masters; the tests use masters 1 and 2 as they are and
 * put a stalled one first in the URI, where it delays the others most if
 * they wait for it. */
#define rl test_redlock_suite

/* A 1 s lease, renewed every ~333 ms; rounds bounded by 200 ms -- each
 * stretched by the slack factor where the test process runs slower than
 * the servers (valgrind), as the library's own work is. */
#define TTL_MS (1000 * test_slack_factor())
#define MASTER_TIMEOUT_MS (200 * test_slack_factor())

typedef test_redlock_handle handle;

static char *uri_with_first(int first_port)
{
	return g_strdup_printf("redis://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/1?ttl=%dms&"
	                       "master-timeout=%dms", first_port, rl->masters[1]->port,
	                       rl->masters[2]->port, TTL_MS, MASTER_TIMEOUT_MS);
}

static void open_on(handle *h, int first_port, const char *resource)
{
	char *uri = uri_with_first(first_port);

	if (dlock_client_new(uri, &h->client) != DLOCK_OK)
		fail_msg("dlock_client_new(%s): %s", uri, dlock_last_error_message());
	assert_int_equal(dlock_lock_new(h->client, resource, &h->lock), DLOCK_OK);
	g_free(uri);
}

/* Acquire through h: granted, within one master timeout (plus slack),
 * with a token above last.  Returns the token. */
static uint64_t acquire_in_time(handle *h, const char *what, uint64_t last)
{
	int64_t start = test_now_ms(), took;
	int rc = dlock_acquire(h->lock, test_slack(3000));

	took = test_now_ms() - start;
	print_message("%s: acquire %s after %" PRId64 " ms\n", what, dlock_code_name(rc), took);
	if (rc != DLOCK_OK)
		fail_msg("%s: acquire returned %s after %" PRId64 " ms (%s)", what, dlock_code_name(rc),
		         took, dlock_last_error_message());
	assert_true(took <= MASTER_TIMEOUT_MS + test_slack(300));
	assert_true(dlock_fencing_token(h->lock) > last);
	return dlock_fencing_token(h->lock);
}

static void release_in_time(handle *h, const char *what)
{
	int64_t start = test_now_ms(), took;
	int rc = dlock_release(h->lock);

	took = test_now_ms() - start;
	if (rc != DLOCK_OK)
		fail_msg("%s: release returned %s after %" PRId64 " ms (%s)", what, dlock_code_name(rc),
		         took, dlock_last_error_message());
	assert_true(took <= MASTER_TIMEOUT_MS + test_slack(300));
}

/* The hold whose state changes a test watches: static, so that a failed
 * test does not leave the callback writing into its stack. */
static handle watched;
static test_events events;

static void open_watched(int first_port, const char *resource)
{
	test_events_init(&events);
	open_on(&watched, first_port, resource);
	assert_int_equal(dlock_lock_set_watchdog(watched.lock, 1), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(watched.lock, test_events_record, &events),
	                 DLOCK_OK);
}

static void close_watched(void)
{
	if (watched.client)
		test_redlock_close(&watched);
	memset(&watched, 0, sizeof(watched));
}

static bool troubled(void *arg)
{
	return test_events_index(arg, DLOCK_STATE_SUSPENDED) >= 0 ||
	       test_events_index(arg, DLOCK_STATE_LOST) >= 0;
}

/*
 * The watched hold, granted with the first master stalled, is renewed by
 * the two healthy masters for 1.5 s (four renewal periods of a 1 s
 * lease): never SUSPENDED or LOST; then released in time.  A fresh client,
 * whose first connections meet the stalled master too, takes turns with
 * it.  Tokens keep increasing throughout.
 */
static void hold_and_take_turns(int first_port, const char *what, const char *resource,
                                uint64_t last)
{
	handle fresh;

	last = acquire_in_time(&watched, what, last);
	if (test_poll_window(troubled, &events, TTL_MS * 3 / 2))
		fail_msg("%s: the hold went %s while two of three masters were healthy", what,
		         test_events_index(&events, DLOCK_STATE_LOST) >= 0 ? "LOST" : "SUSPENDED");
	assert_true(dlock_held(watched.lock));
	release_in_time(&watched, what);

	open_on(&fresh, first_port, resource);
	for (int i = 0; i < 3; i++) {
		last = acquire_in_time(&fresh, what, last);
		release_in_time(&fresh, what);
		last = acquire_in_time(&watched, what, last);
		release_in_time(&watched, what);
	}
	test_redlock_close(&fresh);
}

static void test_a_stalled_link_to_one_master_costs_at_most_the_master_timeout(void **state)
{
	test_proxy *proxy = test_proxy_start(rl->masters[0]->port);
	uint64_t last;

	open_watched(test_proxy_port(proxy), "rl/stall-link");
	/* Connected to every master first; then the link to the first one
	 * stops carrying bytes, for the connections open and for new ones. */
	last = acquire_in_time(&watched, "all healthy", 0);
	release_in_time(&watched, "all healthy");
	test_proxy_stall(proxy, TEST_PROXY_BOTH);
	hold_and_take_turns(test_proxy_port(proxy), "link stalled", "rl/stall-link", last);
	close_watched();
	test_proxy_unstall(proxy, TEST_PROXY_BOTH);
	test_proxy_stop(proxy);
}

static void test_a_frozen_master_costs_at_most_the_master_timeout(void **state)
{
	uint64_t last;

	open_watched(rl->masters[0]->port, "rl/stall-frozen");
	last = acquire_in_time(&watched, "all healthy", 0);
	release_in_time(&watched, "all healthy");
	/* Its kernel still completes new connections; nothing answers them. */
	test_redlock_freeze(rl, 0);
	hold_and_take_turns(rl->masters[0]->port, "master frozen", "rl/stall-frozen", last);
	close_watched();
	test_redlock_thaw(rl, 0);
}

static void test_a_host_dropping_connection_attempts_costs_at_most_the_master_timeout(void **state)
{
	test_dropping_port dropping = test_dropping_port_open();

	/* Never reachable: every connect to it hangs until given up. */
	open_watched(dropping.port, "rl/stall-dropping");
	hold_and_take_turns(dropping.port, "connects dropped", "rl/stall-dropping", 0);
	close_watched();
	test_dropping_port_close(&dropping);
}

/* After each test: every master running, and none of them left with a
 * key of the suite in any database once the stalled master's late
 * scripts have been cleaned up (within the lease). */
static long long lock_keys_in_db1(test_redis *master)
{
	long long found;

	freeReplyObject(test_redis_cmd(master, "SELECT 1"));
	found = test_redis_count_keys(master, "dlock:{rl/*}");
	freeReplyObject(test_redis_cmd(master, "SELECT 0"));
	return found;
}

static bool no_lock_key_of_the_suite(void *arg)
{
	long long found = 0;

	for (int i = 0; i < rl->n; i++)
		if (!rl->stopped[i] && rl->masters[i]->pid)
			found += lock_keys_in_db1(rl->masters[i]);
	return found == 0;
}

/* ---- elections' announcements to a frozen master ------------------------ */

/*
 * A leader's word goes to every master in turn, each bounded by the master
 * timeout (300 ms here), on the client's announcing thread.  With the
 * first master frozen, forty campaigns and resignations in a row ask for
 * forty words that each cost that bound there; only the last word of a
 * resource still matters to an observer, so the earlier ones still
 * waiting are dropped, and freeing the client waits for one or two words,
 * not for forty master timeouts (12 s).  The frozen master's scripts run
 * once it thaws; a key they set is left to its 2 s lease.
 */
static void test_announcements_to_a_frozen_master_never_pile_up(void **state)
{
	char *uri = g_strdup_printf("redis://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/1"
	                            "?ttl=2s&master-timeout=300ms", rl->masters[0]->port,
	                            rl->masters[1]->port, rl->masters[2]->port);
	dlock_client *client;
	dlock_election *e;
	int64_t start, took;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "rl/announce-frozen", "a", &e), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(e, 5000), DLOCK_OK);
	assert_int_equal(dlock_election_resign(e), DLOCK_OK);
	test_redlock_freeze(rl, 0);
	for (int i = 0; i < 40; i++) {
		int rc = dlock_election_campaign(e, 5000);

		if (rc != DLOCK_OK)
			fail_msg("campaign %d: %s (%s)", i, dlock_code_name(rc), dlock_last_error_message());
		assert_int_equal(dlock_election_resign(e), DLOCK_OK);
	}
	dlock_election_free(e);
	start = test_now_ms();
	dlock_client_free(client);
	took = test_now_ms() - start;
	print_message("client freed in %" PRId64 " ms\n", took);
	assert_true(took <= 4 * 300 + test_slack(1000));
	test_redlock_thaw(rl, 0);
	g_free(uri);
}

/* ---- a cancel while an attempt's undo would wait ------------------------ */

typedef struct canceled_wait {
	dlock_lock *lock;
	int rc;
	gint returned_ms; /* test_now_ms() + 1 once dlock_acquire returned */
} canceled_wait;

static gpointer canceled_wait_main(gpointer data)
{
	canceled_wait *w = data;

	w->rc = dlock_acquire(w->lock, -1);
	g_atomic_int_set(&w->returned_ms, (gint)(test_now_ms() + 1));
	return NULL;
}

static bool canceled_wait_returned(void *arg)
{
	return g_atomic_int_get(&((canceled_wait *)arg)->returned_ms) != 0;
}

static bool key_set(void *arg)
{
	return lock_keys_in_db1(arg) == 1;
}

/*
 * A wait forever, canceled while its attempt's first round waits for two
 * stalled masters, after the third said yes and then stalled too: the
 * attempt is undone on that master in the background, and the caller is
 * back at once, not a master timeout (3 s here) later.
 */
static void test_a_canceled_wait_does_not_wait_for_its_undo(void **state)
{
	test_proxy *proxy[3];
	canceled_wait w = { 0 };
	char *uri;
	handle h;
	GThread *thread;
	int64_t canceled_ms, took;

	for (int i = 0; i < 3; i++)
		proxy[i] = test_proxy_start(rl->masters[i]->port);
	uri = g_strdup_printf("redis://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/1"
	                      "?ttl=30s&master-timeout=3s", test_proxy_port(proxy[0]),
	                      test_proxy_port(proxy[1]), test_proxy_port(proxy[2]));
	assert_int_equal(dlock_client_new(uri, &h.client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(h.client, "rl/cancel-undo", &h.lock), DLOCK_OK);
	/* Connected to every master, the scripts loaded. */
	assert_int_equal(dlock_acquire(h.lock, 5000), DLOCK_OK);
	assert_int_equal(dlock_release(h.lock), DLOCK_OK);

	test_proxy_stall(proxy[0], TEST_PROXY_BOTH);
	test_proxy_stall(proxy[1], TEST_PROXY_BOTH);
	w.lock = h.lock;
	thread = g_thread_new("canceled-wait", canceled_wait_main, &w);
	/* The third master took the key; its answer is on the way. */
	assert_true(test_wait_until(key_set, rl->masters[2], 3000));
	g_usleep(test_slack(50) * 1000);
	test_proxy_stall(proxy[2], TEST_PROXY_BOTH);
	canceled_ms = test_now_ms();
	assert_int_equal(dlock_lock_cancel(h.lock), DLOCK_OK);
	if (!test_wait_until(canceled_wait_returned, &w, 10000))
		fail_msg("the canceled acquire has not returned");
	g_thread_join(thread);
	took = g_atomic_int_get(&w.returned_ms) - 1 - canceled_ms;
	print_message("canceled acquire returned %s %" PRId64 " ms after the cancel\n",
	              dlock_code_name(w.rc), took);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	assert_true(took <= test_slack(300));

	/* Once the links carry bytes again, nothing of the attempt is left. */
	for (int i = 0; i < 3; i++)
		test_proxy_unstall(proxy[i], TEST_PROXY_BOTH);
	assert_true(test_wait_until(no_lock_key_of_the_suite, NULL, 5000));
	test_redlock_close(&h);
	for (int i = 0; i < 3; i++)
		test_proxy_stop(proxy[i]);
	g_free(uri);
}

static int revive(void **state)
{
	(void)state;
	close_watched();
	return test_redlock_revive(rl, no_lock_key_of_the_suite, NULL, "dlock:{rl/");
}

#define STALL_TEST(f) cmocka_unit_test_teardown(f, revive)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		STALL_TEST(test_a_stalled_link_to_one_master_costs_at_most_the_master_timeout),
		STALL_TEST(test_a_frozen_master_costs_at_most_the_master_timeout),
		STALL_TEST(test_a_host_dropping_connection_attempts_costs_at_most_the_master_timeout),
		STALL_TEST(test_a_canceled_wait_does_not_wait_for_its_undo),
		STALL_TEST(test_announcements_to_a_frozen_master_never_pile_up),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-redlock-stall", tests,
	                                               test_redlock_suite_setup,
	                                               test_redlock_suite_teardown));
}
