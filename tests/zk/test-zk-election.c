/* SPDX-License-Identifier: MIT */
/*
 * Leader election on ZooKeeper (docs/zookeeper.md, "Elections"): the
 * shared checks (test-election.h) -- resignation hands over at once (the
 * next node's watch), an observer sees every leader (a child watch), a
 * killed leader's session ends and the next participant leads -- and the
 * node format: the leader's node holds its participant id alone, as
 * Curator's LeaderSelector and kazoo's Election write it.  Curator
 * LeaderSelector participants and dlock's never lead at once, in either
 * order; a kazoo Election leader keeps dlock's participants waiting
 * (kazoo's Lock sees only its own nodes, so the other way round is
 * kazoo's to honour).
 */
#include <inttypes.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-election.h"
#include "test-exclusion.h"
#include "test-zk.h"
#include "test-util.h"

#ifndef CURATOR_ELECTION_PEER
#error "CURATOR_ELECTION_PEER must name tests/zk/peers/CuratorElectionPeer.java"
#endif

#define SESSION_MS 2000
#define PEER_ANSWER_MS 30000

static test_zk *zk;
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

/* A Curator or kazoo participant, its stdin and stdout. */
typedef struct peer {
	pid_t pid;
	int in_fd, out_fd;
	const char *what;
} peer;

static peer peer_start(bool curator, const char *path, const char *id)
{
	char *hosts = test_zk_hosts(zk);
	const char *curator_argv[] = { "/usr/bin/env", "CURATOR_PEER_SOURCE=" CURATOR_ELECTION_PEER,
		                       CURATOR_PEER, "--server", hosts, "--resource", path, "--id", id,
		                       NULL };
	const char *kazoo_argv[] = { "/usr/bin/python3", KAZOO_ELECTION_PEER, "--server", hosts,
		                     "--resource", path, "--id", id, NULL };
	peer p = { 0, -1, -1, curator ? "Curator" : "kazoo" };

	p.pid = test_spawn(curator ? curator_argv : kazoo_argv, &p.in_fd, &p.out_fd);
	g_free(hosts);
	return p;
}

static void peer_expect(peer *p, const char *line)
{
	char got[256];

	if (!test_read_line(p->out_fd, got, sizeof(got), PEER_ANSWER_MS))
		fail_msg("no '%s' from the %s peer", line, p->what);
	assert_string_equal(got, line);
}

/* The peer says nothing for window_ms: it does not lead. */
static void peer_silent(peer *p, int64_t window_ms)
{
	char got[256];

	if (test_read_line(p->out_fd, got, sizeof(got), window_ms))
		fail_msg("the %s peer said '%s' while dlock leads", p->what, got);
}

static void peer_resign(peer *p)
{
	assert_true(test_write_str(p->in_fd, "resign\n"));
	peer_expect(p, "resigned");
	close(p->in_fd);
	close(p->out_fd);
	assert_int_equal(test_wait_worker(p->pid), 0);
}

static void assert_leader_is(dlock_election *e, const char *id)
{
	char *leader = NULL;

	assert_int_equal(dlock_election_leader(e, &leader), DLOCK_OK);
	assert_string_equal(leader, id);
	free(leader);
}

static void test_curator_leader_selector_and_dlock_never_lead_at_once(void **state)
{
	dlock_client *client;
	dlock_election *e;
	peer p;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/curator", "dlock-1", &e), DLOCK_OK);
	/* dlock first: Curator waits until dlock resigns, then leads. */
	assert_int_equal(dlock_election_campaign(e, 5000), DLOCK_OK);
	p = peer_start(true, "/dlock/elect/curator", "curator-1");
	peer_expect(&p, "started");
	peer_silent(&p, 2000);
	assert_leader_is(e, "dlock-1");
	assert_int_equal(dlock_election_resign(e), DLOCK_OK);
	peer_expect(&p, "leader curator-1");
	/* Curator leads: dlock waits, and sees who leads. */
	assert_leader_is(e, "curator-1");
	assert_int_equal(dlock_election_campaign(e, 0), DLOCK_EBUSY);
	peer_resign(&p);
	assert_int_equal(dlock_election_campaign(e, 10000), DLOCK_OK);
	assert_int_equal(dlock_election_resign(e), DLOCK_OK);
	dlock_election_free(e);
	dlock_client_free(client);
}

static void test_kazoo_election_leader_keeps_dlock_waiting(void **state)
{
	dlock_client *client;
	dlock_election *e;
	peer p;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/kazoo", "dlock-1", &e), DLOCK_OK);
	p = peer_start(false, "/dlock/elect/kazoo", "kazoo-1");
	peer_expect(&p, "leader kazoo-1");
	assert_leader_is(e, "kazoo-1");
	assert_int_equal(dlock_election_campaign(e, 0), DLOCK_EBUSY);
	peer_resign(&p);
	assert_int_equal(dlock_election_campaign(e, 10000), DLOCK_OK);
	assert_leader_is(e, "dlock-1");
	dlock_election_free(e);
	dlock_client_free(client);
}

/* A resignation from another thread as the campaign finishes. */
static void test_resignation_racing_a_campaign_comes_after_elected(void **state)
{
	test_election_resign_racing_campaign(uri, "elect/race", 300, NULL, NULL);
}

static void test_free_right_after_resign_delivers_resigned(void **state)
{
	test_election_resign_then_free_delivers_resigned(uri, "elect/resign-free", 10);
}

static void sig_stop(void *arg)
{
	test_zk_signal(arg, 0, SIGSTOP);
}

static void sig_cont(void *arg)
{
	test_zk_signal(arg, 0, SIGCONT);
}

/* A 9 s session: a short freeze of the server suspends leadership, and
 * the reconnection within the session confirms it. */
static void test_frozen_server_suspends_leadership_then_confirms_it(void **state)
{
	char *u = test_zk_uri(zk, "?session-timeout=9s");

	test_election_freeze(u, "elect/freeze", sig_stop, sig_cont, zk, 500, false);
	g_free(u);
}

/* Past the session timeout the leadership is lost (the client's own
 * timer); after the thaw a campaign leads afresh. */
static void test_frozen_server_past_the_session_loses_leadership(void **state)
{
	test_election_freeze(uri, "elect/freeze-lost", sig_stop, sig_cont, zk, 0, true);
}

static void test_nothing_is_left_on_the_server(void **state)
{
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
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
		cmocka_unit_test(test_one_leader_at_a_time_across_processes),
		cmocka_unit_test(test_resignation_hands_over_and_the_observer_sees_each_leader),
		cmocka_unit_test(test_killed_leader_is_replaced_after_its_session),
		cmocka_unit_test(test_leader_node_holds_the_participant_id_alone),
		cmocka_unit_test(test_curator_leader_selector_and_dlock_never_lead_at_once),
		cmocka_unit_test(test_kazoo_election_leader_keeps_dlock_waiting),
		cmocka_unit_test(test_frozen_server_suspends_leadership_then_confirms_it),
		cmocka_unit_test(test_frozen_server_past_the_session_loses_leadership),
		cmocka_unit_test(test_resignation_racing_a_campaign_comes_after_elected),
		cmocka_unit_test(test_free_right_after_resign_delivers_resigned),
		cmocka_unit_test(test_nothing_is_left_on_the_server),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return test_election_worker_main(argc, argv);
	return test_zk_finish(cmocka_run_group_tests_name("zk-election", tests, setup, teardown));
}
