/* SPDX-License-Identifier: MIT */
/*
 * Leader election on Redis (docs/recipes.md, "Leader election"): the
 * shared checks (test-election.h) -- resignation hands over at once
 * through the wait queue, an observer sees every leader, a killed leader's
 * lease runs out and the next participant leads -- and the elected
 * channel: each new leader is announced on "<prefix>{R}:elected" as
 * "<id> <token>"; an observer that may not listen there looks every
 * second.
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
 * drops the reply, and the command timeout is 300 ms -- 6 s under
 * valgrind, where the campaign's own commands take longer than 300 ms:
 * with two valgrind runs on two cores a first try took longer than four
 * times that, and on a slower machine one took longer than 2.4 s (the
 * campaign then failed with DLOCK_EUNAVAILABLE, as a first try that
 * cannot reach the server does). */
static void drop_publish_reply(void *proxy)
{
	test_proxy_drop_replies(proxy, "PUBLISH", 1, false);
}

/* A resignation from another thread as the campaign finishes, its
 * announcement held up as by a slow server: ELECTED always comes first. */
static void test_resignation_racing_a_slow_campaign_tail_comes_after_elected(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	char *u = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=%dms", test_proxy_port(proxy),
	                          test_under_valgrind() ? 6000 : 300);

	test_election_resign_racing_campaign(u, "elect/race-slow", 10, drop_publish_reply, proxy);
	g_free(u);
	test_proxy_stop(proxy);
}

/* The same race without help, many times (fewer under valgrind, which
 * checks the memory of each round, not the race: the plain and sanitizer
 * passes run them all). */
static void test_resignation_racing_a_campaign_comes_after_elected(void **state)
{
	test_election_resign_racing_campaign(uri, "elect/race", test_under_valgrind() ? 60 : 300, NULL, NULL);
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

/* ---- an observer that may not subscribe --------------------------------- */

/* What the observer was told last, and when.  Static: a failed test must
 * not leave the callback writing into its stack. */
static GMutex seen_mu;
static char seen_leader[32];
static int64_t seen_at_ms;

static void record_leader(dlock_election *election, dlock_election_event event,
                          const char *leader_id, void *user_data)
{
	if (event != DLOCK_ELECTION_LEADER_CHANGED)
		return;
	g_mutex_lock(&seen_mu);
	g_strlcpy(seen_leader, leader_id ? leader_id : "-", sizeof(seen_leader));
	seen_at_ms = test_now_ms();
	g_mutex_unlock(&seen_mu);
}

static bool observer_saw(void *arg)
{
	bool saw;

	g_mutex_lock(&seen_mu);
	saw = strcmp(seen_leader, arg) == 0;
	g_mutex_unlock(&seen_mu);
	return saw;
}

/* How long after from_ms the observer was told leader (test_now_ms). */
static int64_t observer_told_after(const char *leader, int64_t from_ms)
{
	int64_t at;

	if (!test_wait_until(observer_saw, (void *)leader, 40000))
		fail_msg("the observer was never told of '%s'", leader);
	g_mutex_lock(&seen_mu);
	at = seen_at_ms;
	g_mutex_unlock(&seen_mu);
	return at - from_ms;
}

/*
 * An observer whose ACL user has no channel rights (resetchannels, Redis
 * 7's default for a new user) cannot be woken by the elected and release
 * channels: its watch is refused, and it looks every second instead.
 * Trusting the refused channels, it would look only when the leader's
 * 30 s lease could end (a resignation seen 27 s late), and its first look
 * would wait out the connect and command timeouts for confirmations that
 * never come.
 */
static void test_observer_without_channel_rights_looks_every_second(void **state)
{
	char *acl_uri = g_strdup_printf("redis://observer:acl-pw@127.0.0.1:%d", server->port);
	redisReply *reply = test_redis_cmd(server, "ACL SETUSER observer on >acl-pw ~* +@all "
	                                   "resetchannels");
	dlock_client *watching, *leading;
	dlock_election *observer, *leader;
	int64_t from_ms, took;

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	seen_leader[0] = '\0';
	assert_int_equal(dlock_client_new(acl_uri, &watching), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &leading), DLOCK_OK);
	assert_int_equal(dlock_election_new(watching, "elect/acl-observer", "o", &observer), DLOCK_OK);
	assert_int_equal(dlock_election_new(leading, "elect/acl-observer", "a", &leader), DLOCK_OK);
	assert_int_equal(dlock_election_set_callback(observer, record_leader, NULL), DLOCK_OK);

	from_ms = test_now_ms();
	assert_int_equal(dlock_election_observe(observer, 1), DLOCK_OK);
	took = observer_told_after("-", from_ms);
	print_message("first look after %" PRId64 " ms\n", took);
	assert_true(took <= test_slack(1000));

	from_ms = test_now_ms();
	assert_int_equal(dlock_election_campaign(leader, 5000), DLOCK_OK);
	took = observer_told_after("a", from_ms);
	print_message("leader seen after %" PRId64 " ms\n", took);
	assert_true(took <= 1000 + test_slack(500));

	from_ms = test_now_ms();
	assert_int_equal(dlock_election_resign(leader), DLOCK_OK);
	took = observer_told_after("-", from_ms);
	print_message("resignation seen after %" PRId64 " ms\n", took);
	assert_true(took <= 1000 + test_slack(500));

	dlock_election_free(observer);
	dlock_election_free(leader);
	dlock_client_free(watching);
	dlock_client_free(leading);
	freeReplyObject(test_redis_cmd(server, "ACL DELUSER observer"));
	g_free(acl_uri);
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
		cmocka_unit_test(test_observer_without_channel_rights_looks_every_second),
		cmocka_unit_test(test_no_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return test_election_worker_main(argc, argv);
	return test_finish(cmocka_run_group_tests_name("redis-election", tests, setup, teardown));
}
