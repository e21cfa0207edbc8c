/*
 * Leader election on Redis (SPEC §12): the shared checks (test-election.h)
 * -- resignation hands over at once through the wait queue, an observer
 * sees every leader, a killed leader's lease runs out and the next
 * participant leads -- and the elected channel: each new leader is
 * announced on "<prefix>{R}:elected" as "<id> <token>".
 */
#include <inttypes.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <hiredis/hiredis.h>

#include "dlock.h"
#include "test-election.h"
#include "test-exclusion.h"
#include "test-proxy.h"
#include "test-redis.h"
#include "test-util.h"

static test_redis *server;
static char *uri;

/* Participants in 3 processes, 2 each, lead one at a time, 4 turns each. */
static void test_one_leader_at_a_time_across_processes(void **state)
{
	test_exclusion_run_elections(uri, "elect/census", 3, 2, 4);
}

static void test_resignation_hands_over_and_the_observer_sees_each_leader(void **state)
{
	test_election_handover(uri, "elect/handover", 300);
}

/* A 1 s lease: the next participant leads once it runs out, plus a
 * waiter's backoff (capped at 1 s), within generous slack. */
static void test_killed_leader_is_replaced_after_its_lease(void **state)
{
	char *short_uri = test_redis_uri(server, "?ttl=1s");

	test_election_failover(short_uri, "elect/failover", 1000 + 1000 + 1000);
	g_free(short_uri);
}

static void test_each_leader_is_announced_on_the_elected_channel(void **state)
{
	struct timeval tv = { 10, 0 };
	redisContext *sub = redisConnect("127.0.0.1", server->port);
	redisReply *reply;
	dlock_client *client;
	dlock_election *e;
	char *expected;

	assert_non_null(sub);
	assert_int_equal(sub->err, 0);
	redisSetTimeout(sub, tv);
	reply = redisCommand(sub, "SUBSCRIBE %s", "dlock:{elect/announce}:elected");
	freeReplyObject(reply);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/announce", "node a", &e), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(e, 5000), DLOCK_OK);
	expected = g_strdup_printf("node a %" PRIu64, dlock_election_fencing_token(e));
	assert_int_equal(redisGetReply(sub, (void **)&reply), REDIS_OK);
	assert_int_equal(reply->type, REDIS_REPLY_ARRAY);
	assert_int_equal(reply->elements, 3);
	assert_string_equal(reply->element[0]->str, "message");
	assert_string_equal(reply->element[2]->str, expected);
	freeReplyObject(reply);
	g_free(expected);
	dlock_election_free(e);
	dlock_client_free(client);
	redisFree(sub);
}

static void sig_stop(void *arg)
{
	test_redis_signal(arg, SIGSTOP);
}

static void sig_cont(void *arg)
{
	test_redis_signal(arg, SIGCONT);
}

/* A 6 s lease renewed every 2 s: a short freeze suspends leadership and
 * the next renewal confirms it. */
static void test_frozen_server_suspends_leadership_then_confirms_it(void **state)
{
	char *u = test_redis_uri(server, "?ttl=6s&command-timeout=500ms");

	test_election_freeze(u, "elect/freeze", sig_stop, sig_cont, server, 500, false);
	g_free(u);
}

/* A 2 s lease: a freeze past it loses leadership; a campaign after the
 * thaw leads afresh. */
static void test_frozen_server_past_the_lease_loses_leadership(void **state)
{
	char *u = test_redis_uri(server, "?ttl=2s&command-timeout=500ms");

	test_election_freeze(u, "elect/freeze-lost", sig_stop, sig_cont, server, 0, true);
	g_free(u);
}

/* The campaign's announcement (a PUBLISH) gets no answer: the proxy
 * drops the reply, and the command timeout is 300 ms. */
static void drop_publish_reply(void *proxy)
{
	test_proxy_drop_replies(proxy, "PUBLISH", 1, false);
}

/* A resignation from another thread as the campaign finishes, its
 * announcement held up as by a slow server: ELECTED always comes first. */
static void test_resignation_racing_a_slow_campaign_tail_comes_after_elected(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	char *u = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=300ms", test_proxy_port(proxy));

	test_election_resign_racing_campaign(u, "elect/race-slow", 10, drop_publish_reply, proxy);
	g_free(u);
	test_proxy_stop(proxy);
}

/* The same race without help, many times. */
static void test_resignation_racing_a_campaign_comes_after_elected(void **state)
{
	test_election_resign_racing_campaign(uri, "elect/race", 300, NULL, NULL);
}

static void test_free_right_after_resign_delivers_resigned(void **state)
{
	test_election_resign_then_free_delivers_resigned(uri, "elect/resign-free", 20);
}

/* A campaign granted at once returns within its wait although its
 * announcement gets no answer for a whole command timeout (3 s): the
 * announcement does not hold the caller. */
static void test_campaign_returns_by_its_deadline_when_its_announcement_is_unanswered(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	char *u = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=3s", test_proxy_port(proxy));
	dlock_client *client;
	dlock_election *e;
	int64_t t0, took;

	assert_int_equal(dlock_client_new(u, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/announce-late", "a", &e), DLOCK_OK);
	drop_publish_reply(proxy);
	t0 = test_now_ms();
	assert_int_equal(dlock_election_campaign(e, 1000), DLOCK_OK);
	took = test_now_ms() - t0;
	print_message("campaign with a 1000 ms wait returned after %" PRId64 " ms\n", took);
	assert_true(took <= 1000 * test_slack_factor());
	assert_true(dlock_election_is_leader(e));
	assert_int_equal(dlock_election_resign(e), DLOCK_OK);
	dlock_election_free(e);
	dlock_client_free(client);
	g_free(u);
	test_proxy_stop(proxy);
}

typedef struct resigner {
	dlock_election *e;
	int rc;
	int64_t took_ms;
} resigner;

static gpointer resign_main(gpointer data)
{
	resigner *r = data;
	int64_t t0 = test_now_ms();

	r->rc = dlock_election_resign(r->e);
	r->took_ms = test_now_ms() - t0;
	return NULL;
}

typedef struct campaigner {
	dlock_election *e;
	GThread *thread;
	gint tid;
	int rc;
} campaigner;

static gpointer campaign_main(gpointer data)
{
	campaigner *c = data;

	g_atomic_int_set(&c->tid, (gint)syscall(SYS_gettid));
	c->rc = dlock_election_campaign(c->e, -1);
	return NULL;
}

/* The campaigner thread has begun and sleeps (in its campaign). */
static bool campaigner_waits(void *data)
{
	campaigner *c = data;

	return g_atomic_int_get(&c->tid) && test_thread_sleeps(g_atomic_int_get(&c->tid));
}

static bool one_dropped(void *proxy)
{
	return test_proxy_dropped(proxy) >= 1;
}

/*
 * A resignation whose release gets no answer takes the command timeout
 * (3 s).  A campaign made meanwhile waits for that resignation to post
 * its RESIGNED, but no longer than its own wait (300 ms); a cancel ends
 * that wait too.  Once the resignation is done a campaign leads again.
 */
static void test_campaign_waits_for_a_slow_resignation_within_its_deadline(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	char *u = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=3s", test_proxy_port(proxy));
	resigner r = { 0 };
	campaigner forever = { 0 };
	dlock_client *client;
	GThread *thread;
	int64_t t0, took;
	int rc;

	assert_int_equal(dlock_client_new(u, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/slow-resign", "a", &r.e), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(r.e, 5000), DLOCK_OK);
	/* The release's script runs on the server; its answer never comes. */
	test_proxy_drop_replies(proxy, "EVALSHA", 1, false);
	thread = g_thread_new("resigner", resign_main, &r);
	assert_true(test_wait_until(one_dropped, proxy, 5000));

	t0 = test_now_ms();
	rc = dlock_election_campaign(r.e, 300);
	took = test_now_ms() - t0;
	print_message("campaign with a 300 ms wait during a slow resignation: %s after %" PRId64
	              " ms\n", dlock_code_name(rc), took);
	assert_int_equal(rc, DLOCK_ETIMEDOUT);
	assert_true(took < test_slack(1300));

	/* A campaign without a deadline is ended by a cancel. */
	forever.e = r.e;
	forever.thread = g_thread_new("campaigner", campaign_main, &forever);
	assert_true(test_wait_until(campaigner_waits, &forever, 2000));
	t0 = test_now_ms();
	assert_int_equal(dlock_election_cancel(r.e), DLOCK_OK);
	g_thread_join(forever.thread);
	took = test_now_ms() - t0;
	print_message("a campaign without a deadline, canceled: %s after %" PRId64 " ms\n",
	              dlock_code_name(forever.rc), took);
	assert_int_equal(forever.rc, DLOCK_ECANCELED);
	assert_true(took < test_slack(1000));

	g_thread_join(thread);
	print_message("the resignation returned %s after %" PRId64 " ms\n", dlock_code_name(r.rc),
	              r.took_ms);
	assert_int_equal(r.rc, DLOCK_OK);
	assert_int_equal(dlock_election_campaign(r.e, 5000), DLOCK_OK);
	assert_int_equal(dlock_election_resign(r.e), DLOCK_OK);
	dlock_election_free(r.e);
	dlock_client_free(client);
	g_free(u);
	test_proxy_stop(proxy);
}

static void test_no_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{elect/"), 0);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	uri = test_redis_uri(server, "");
	return 0;
}

static int teardown(void **state)
{
	g_free(uri);
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_leader_at_a_time_across_processes),
		cmocka_unit_test(test_resignation_hands_over_and_the_observer_sees_each_leader),
		cmocka_unit_test(test_killed_leader_is_replaced_after_its_lease),
		cmocka_unit_test(test_each_leader_is_announced_on_the_elected_channel),
		cmocka_unit_test(test_frozen_server_suspends_leadership_then_confirms_it),
		cmocka_unit_test(test_frozen_server_past_the_lease_loses_leadership),
		cmocka_unit_test(test_resignation_racing_a_slow_campaign_tail_comes_after_elected),
		cmocka_unit_test(test_resignation_racing_a_campaign_comes_after_elected),
		cmocka_unit_test(test_free_right_after_resign_delivers_resigned),
		cmocka_unit_test(test_campaign_returns_by_its_deadline_when_its_announcement_is_unanswered),
		cmocka_unit_test(test_campaign_waits_for_a_slow_resignation_within_its_deadline),
		cmocka_unit_test(test_no_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return test_election_worker_main(argc, argv);
	return test_finish(cmocka_run_group_tests_name("redis-election", tests, setup, teardown));
}
