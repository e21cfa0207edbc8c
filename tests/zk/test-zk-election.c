/*
 * Leader election on ZooKeeper (SPEC §12): the shared checks
 * (test-election.h) -- resignation hands over at once (the next node's
 * watch), an observer sees every leader (a child watch), a killed
 * leader's session ends and the next participant leads -- and the node
 * format: the leader's node holds its participant id alone, as Curator's
 * LeaderSelector and kazoo's Election write it.
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
#include "test-election.h"
#include "test-zk.h"
#include "test-util.h"

#define SESSION_MS 2000

static test_zk *zk;
static char *uri;

static void test_resignation_hands_over_and_the_observer_sees_each_leader(void **state)
{
	test_election_handover(uri, "elect/handover", 300);
}

/* The killed leader's node goes when the server expires its session. */
static void test_killed_leader_is_replaced_after_its_session(void **state)
{
	test_election_failover(uri, "elect/failover", SESSION_MS + 2000);
}

static void test_leader_node_holds_the_participant_id_alone(void **state)
{
	dlock_client *client;
	dlock_election *e;
	char **children;
	char *path, *data;
	int64_t czxid = 0;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/format", "node-7 east", &e), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(e, 5000), DLOCK_OK);
	children = test_zk_children(zk, "/dlock/elect/format");
	assert_non_null(children);
	assert_non_null(children[0]);
	assert_null(children[1]);
	assert_non_null(strstr(children[0], "-lock-"));
	path = g_strdup_printf("/dlock/elect/format/%s", children[0]);
	data = test_zk_get(zk, path, &czxid);
	assert_string_equal(data, "node-7 east");
	assert_int_equal((uint64_t)czxid, dlock_election_fencing_token(e));
	g_free(data);
	g_free(path);
	g_strfreev(children);
	dlock_election_free(e);
	dlock_client_free(client);
}

static void test_nothing_is_left_on_the_server(void **state)
{
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
}

static int worker_main(int argc, char **argv)
{
	if (argc >= 6 && strcmp(argv[2], "elect") == 0)
		return test_election_worker(argv + 3);
	return 2;
}

static int setup(void **state)
{
	char *suffix = g_strdup_printf("?session-timeout=%dms", SESSION_MS);

	zk = test_zk_start(1, 200, 20000);
	uri = test_zk_uri(zk, suffix);
	g_free(suffix);
	return 0;
}

static int teardown(void **state)
{
	g_free(uri);
	test_zk_stop(zk);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resignation_hands_over_and_the_observer_sees_each_leader),
		cmocka_unit_test(test_killed_leader_is_replaced_after_its_session),
		cmocka_unit_test(test_leader_node_holds_the_participant_id_alone),
		cmocka_unit_test(test_nothing_is_left_on_the_server),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return worker_main(argc, argv);
	return test_zk_finish(cmocka_run_group_tests_name("zk-election", tests, setup, teardown));
}
