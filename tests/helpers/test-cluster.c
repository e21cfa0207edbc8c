/* SPDX-License-Identifier: MIT */
/* A Redis Cluster for the tests: forming it, knowing when it is whole,
 * roles and faults.  See test-cluster.h; slots are in
 * test-cluster-slots.c. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "test-cluster-map.h"

/* How long a fresh cluster may take to get whole: about 2.5 s here, most
 * of it the 2 s a master waits after its start before it says
 * cluster_state:ok. */
#define START_MS 20000
/* How long the nodes may take to know each other after CLUSTER MEET: a
 * handshake each, a few milliseconds. */
#define MEET_MS 10000
/* How long a manual failover may take: a few hundred milliseconds, and
 * the replica waits up to 5 s for its master's last writes. */
#define FAILOVER_MS 15000

/* ---- asking ------------------------------------------------------------- */

bool test_cluster__role(test_cluster *tc, int i, bool *ret_master, int *ret_master_port, bool *ret_linked)
{
	redisReply *reply = test_redis_cmd(tc->nodes[i], "ROLE");
	bool ok = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
	          reply->element[0]->type == REDIS_REPLY_STRING;

	if (ok) {
		*ret_master = strcmp(reply->element[0]->str, "master") == 0;
		*ret_master_port = 0;
		*ret_linked = false;
		/* A replica: "slave", master ip, master port, link state, offset. */
		if (!*ret_master && reply->elements >= 4 && reply->element[2]->type == REDIS_REPLY_INTEGER &&
		    reply->element[3]->type == REDIS_REPLY_STRING) {
			*ret_master_port = (int)reply->element[2]->integer;
			*ret_linked = strcmp(reply->element[3]->str, "connected") == 0;
		}
	}
	if (reply)
		freeReplyObject(reply);
	return ok;
}

void test_cluster__expect_ok(test_cluster *tc, int i, const char *what, redisReply *reply)
{
	bool ok = reply && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0;
	char answer[256];

	g_strlcpy(answer, reply && reply->str ? reply->str : "no reply", sizeof(answer));
	if (reply)
		freeReplyObject(reply);
	if (!ok)
		fail_msg("%s on node %d (port %d): %s", what, i, tc->nodes[i]->port, answer);
}

bool test_cluster_is_master(test_cluster *tc, int i)
{
	bool master;
	int master_port;
	bool linked;

	return test_cluster__askable(tc, i) && test_cluster__role(tc, i, &master, &master_port, &linked) && master;
}

int test_cluster_replica_of(test_cluster *tc, int master)
{
	assert_true(master >= 0 && master < tc->n_nodes);
	for (int i = 0; i < tc->n_nodes; i++) {
		bool is_master;
		int master_port;
		bool linked;

		if (i != master && test_cluster__askable(tc, i) &&
		    test_cluster__role(tc, i, &is_master, &master_port, &linked) && !is_master &&
		    master_port == tc->nodes[master]->port)
			return i;
	}
	return -1;
}

/* ---- whole or not ------------------------------------------------------- */

static bool state_ok(test_cluster *tc, int i, GString *why)
{
	char *info = test_redis_str(tc->nodes[i], "CLUSTER INFO");
	bool ok = info && strstr(info, "cluster_state:ok");

	if (!ok)
		g_string_printf(why, "node %d (port %d) does not say cluster_state:ok", i, tc->nodes[i]->port);
	g_free(info);
	return ok;
}

/* Every slot is served by one of our nodes that runs. */
static bool map_covered(test_cluster *tc, const uint16_t *ports, GString *why)
{
	for (int s = 0; s < TEST_CLUSTER_SLOTS; s++) {
		int owner = test_cluster_node_on(tc, ports[s]);

		if (owner < 0 || tc->nodes[owner]->pid <= 0) {
			g_string_printf(why, "slot %d is served by port %u, none of the running nodes", s, ports[s]);
			return false;
		}
	}
	return true;
}

/* A key in a slot the node on port serves, into buf; false if it serves
 * none. */
static bool probe_key(const uint16_t *ports, int port, char *buf, size_t size)
{
	bool serves = false;

	for (int s = 0; s < TEST_CLUSTER_SLOTS && !serves; s++)
		serves = ports[s] == port;
	/* About 16384 / (the slots it serves) tries. */
	for (int n = 0; serves && n < 10000000; n++) {
		g_snprintf(buf, size, "test-cluster:probe:{%d}", n);
		if (ports[test_cluster_keyslot(buf)] == port)
			return true;
	}
	return false;
}

/* Whether a write on master reaches its n replicas: WAIT on the writing
 * connection says.  A master that serves no slot cannot be written to:
 * its replicas' links must do. */
static bool writes_reach(test_cluster *tc, int master, int n, const uint16_t *ports, GString *why)
{
	test_redis *r = tc->nodes[master];
	char key[64];
	redisReply *set;
	bool written;
	long long acked = 0;

	if (!probe_key(ports, r->port, key, sizeof(key)))
		return true;
	set = test_redis_cmd(r, "SET %s 1", key);
	written = set && set->type == REDIS_REPLY_STATUS;
	if (set)
		freeReplyObject(set);
	if (written)
		acked = test_redis_int(r, "WAIT %d 100", n);
	if (written)
		freeReplyObject(test_redis_cmd(r, "DEL %s", key));
	if (!written || acked < n)
		g_string_printf(why, "writes on node %d (port %d) do not reach its %d replicas (%lld acknowledged)",
		                master, r->port, n, acked);
	return written && acked >= n;
}

/* Every askable replica is linked to a running master and receives its
 * writes. */
static bool replicas_fed(test_cluster *tc, const uint16_t *ports, GString *why)
{
	int replicas[TEST_CLUSTER_MAX_NODES] = { 0 };

	for (int i = 0; i < tc->n_nodes; i++) {
		bool master, linked;
		int master_port, m;

		if (!test_cluster__askable(tc, i))
			continue;
		if (!test_cluster__role(tc, i, &master, &master_port, &linked)) {
			g_string_printf(why, "node %d (port %d) does not answer ROLE", i, tc->nodes[i]->port);
			return false;
		}
		if (master)
			continue;
		m = test_cluster_node_on(tc, master_port);
		if (m < 0 || !test_cluster__askable(tc, m) || !linked) {
			g_string_printf(why, "node %d (port %d) is not linked to a running master (port %d)", i,
			                tc->nodes[i]->port, master_port);
			return false;
		}
		replicas[m]++;
	}
	for (int m = 0; m < tc->n_nodes; m++)
		if (replicas[m] && !writes_reach(tc, m, replicas[m], ports, why))
			return false;
	return true;
}

/* Whether the cluster is whole (test-cluster.h); else why, in *why. */
static bool whole(test_cluster *tc, GString *why)
{
	uint16_t *ports = g_new(uint16_t, TEST_CLUSTER_SLOTS);
	bool ok = true;

	for (int i = 0; i < tc->n_nodes && ok; i++)
		ok = !test_cluster__askable(tc, i) || state_ok(tc, i, why);
	ok = ok && test_cluster__agreed_map(tc, ports, why) && map_covered(tc, ports, why) &&
	     replicas_fed(tc, ports, why);
	g_free(ports);
	return ok;
}

typedef struct whole_wait {
	test_cluster *tc;
	GString *why;
} whole_wait;

static bool whole_now(void *arg)
{
	whole_wait *w = arg;

	return whole(w->tc, w->why);
}

bool test_cluster_wait_ok(test_cluster *tc, int64_t timeout_ms)
{
	whole_wait w = { tc, g_string_new(NULL) };
	bool ok = test_cluster__poll(whole_now, &w, timeout_ms);

	if (!ok)
		print_error("Redis Cluster not whole within %lld ms: %s\n", (long long)test_slack(timeout_ms),
		            w.why->str);
	g_string_free(w.why, TRUE);
	return ok;
}

/* ---- forming ------------------------------------------------------------ */

/* Every node's CLUSTER NODES lists all n_nodes, none of them still in
 * the handshake, each link connected. */
static bool met_now(void *arg)
{
	test_cluster *tc = arg;

	for (int i = 0; i < tc->n_nodes; i++) {
		char *nodes = test_redis_str(tc->nodes[i], "CLUSTER NODES");
		char **lines = g_strsplit(nodes ? nodes : "", "\n", -1);
		int known = 0;
		bool ok = nodes != NULL;

		for (int k = 0; ok && lines[k]; k++) {
			if (!*lines[k])
				continue;
			known++;
			ok = !strstr(lines[k], "handshake") && !strstr(lines[k], "noaddr") &&
			     (strstr(lines[k], "myself") || strstr(lines[k], " connected"));
		}
		g_strfreev(lines);
		g_free(nodes);
		if (!ok || known != tc->n_nodes)
			return false;
	}
	return true;
}

/* Stop everything, fail the test with what (freed here), and leave the
 * logs to test_finish(). */
static void fail_setup(test_cluster *tc, char *what)
{
	char message[1024];

	g_strlcpy(message, what, sizeof(message));
	g_free(what);
	test_cluster_stop(tc);
	fail_msg("%s (the nodes' logs follow the results)", message);
}

/* reply (freed here) to what, run on node i, is +OK; else false, with
 * why. */
static bool answered_ok(test_cluster *tc, int i, const char *what, redisReply *reply, GString *why)
{
	bool ok = reply && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0;

	if (!ok)
		g_string_printf(why, "%s on node %d (port %d): %s", what, i, tc->nodes[i]->port,
		                reply && reply->str ? reply->str : "no reply");
	if (reply)
		freeReplyObject(reply);
	return ok;
}

/* Meet every pair directly, rather than have them learn of each other
 * through gossip. */
static bool meet(test_cluster *tc, GString *why)
{
	for (int i = 0; i < tc->n_nodes; i++)
		for (int j = i + 1; j < tc->n_nodes; j++)
			if (!answered_ok(tc, i, "CLUSTER MEET",
			                 test_redis_cmd(tc->nodes[i], "CLUSTER MEET 127.0.0.1 %d %d",
			                                tc->nodes[j]->port, tc->nodes[j]->cluster_port),
			                 why))
				return false;
	if (!test_cluster__poll(met_now, tc, MEET_MS)) {
		g_string_printf(why, "the nodes do not all know each other within %lld ms of CLUSTER MEET",
		                (long long)test_slack(MEET_MS));
		return false;
	}
	return true;
}

/* Give the masters their slots, introduce everyone, set the replicas to
 * follow; false, with why, at the first refusal. */
static bool form(test_cluster *tc, GString *why)
{
	for (int i = 0; i < tc->n_nodes; i++) {
		char *id = test_redis_str(tc->nodes[i], "CLUSTER MYID");
		bool ok = id && strlen(id) == 40;

		if (ok)
			g_strlcpy(tc->ids[i], id, sizeof(tc->ids[i]));
		else
			g_string_printf(why, "node %d (port %d) does not answer CLUSTER MYID with an id", i,
			                tc->nodes[i]->port);
		g_free(id);
		if (!ok)
			return false;
	}
	/* Distinct epochs from the start, as redis-cli gives them: the nodes
	 * need not settle a collision first. */
	for (int i = 0; i < tc->n_nodes; i++)
		if (!answered_ok(tc, i, "CLUSTER SET-CONFIG-EPOCH",
		                 test_redis_cmd(tc->nodes[i], "CLUSTER SET-CONFIG-EPOCH %d", i + 1), why))
			return false;
	for (int m = 0; m < tc->n_masters; m++)
		if (!answered_ok(tc, m, "CLUSTER ADDSLOTSRANGE",
		                 test_redis_cmd(tc->nodes[m], "CLUSTER ADDSLOTSRANGE %d %d",
		                                m * TEST_CLUSTER_SLOTS / tc->n_masters,
		                                (m + 1) * TEST_CLUSTER_SLOTS / tc->n_masters - 1),
		                 why))
			return false;
	if (!meet(tc, why))
		return false;
	/* A replica must know its master, as a master, before it follows. */
	for (int i = tc->n_masters; i < tc->n_nodes; i++) {
		int m = (i - tc->n_masters) / tc->replicas_per_master;

		if (!answered_ok(tc, i, "CLUSTER REPLICATE",
		                 test_redis_cmd(tc->nodes[i], "CLUSTER REPLICATE %s", tc->ids[m]), why))
			return false;
	}
	return true;
}

/* The arguments of every node.  g_strfreev. */
static char **node_extra(const char *password)
{
	GPtrArray *argv = g_ptr_array_new();

	g_ptr_array_add(argv, g_strdup("--cluster-enabled"));
	g_ptr_array_add(argv, g_strdup("yes"));
	/* In the node's own fresh directory, where --dir puts it. */
	g_ptr_array_add(argv, g_strdup("--cluster-config-file"));
	g_ptr_array_add(argv, g_strdup("nodes.conf"));
	g_ptr_array_add(argv, g_strdup("--cluster-node-timeout"));
	g_ptr_array_add(argv, g_strdup("1000"));
	/* The address CLUSTER SLOTS names from the first moment, not only
	 * once a peer has told the node what it is. */
	g_ptr_array_add(argv, g_strdup("--cluster-announce-ip"));
	g_ptr_array_add(argv, g_strdup("127.0.0.1"));
	/* The tests decide the topology: no replica wanders to another
	 * master, and a master whose slots were all migrated away stays a
	 * master. */
	g_ptr_array_add(argv, g_strdup("--cluster-allow-replica-migration"));
	g_ptr_array_add(argv, g_strdup("no"));
	/* Without it a master waits 5 s before it feeds a new replica. */
	g_ptr_array_add(argv, g_strdup("--repl-diskless-sync-delay"));
	g_ptr_array_add(argv, g_strdup("0"));
	if (password) {
		g_ptr_array_add(argv, g_strdup("--masterauth"));
		g_ptr_array_add(argv, g_strdup(password));
	}
	g_ptr_array_add(argv, NULL);
	return (char **)g_ptr_array_free(argv, FALSE);
}

test_cluster *test_cluster_start(int n_masters, int replicas_per_master, const char *password)
{
	test_cluster *tc = g_new0(test_cluster, 1);
	whole_wait w = { tc, NULL };
	char **extra;

	assert_true(n_masters >= 1 && n_masters <= TEST_CLUSTER_MAX_MASTERS);
	assert_true(replicas_per_master >= 0 && replicas_per_master <= TEST_CLUSTER_MAX_REPLICAS);
	tc->password = g_strdup(password);
	tc->n_masters = n_masters;
	tc->replicas_per_master = replicas_per_master;
	for (int s = 0; s < TEST_CLUSTER_SLOTS; s++)
		tc->migrating_from[s] = tc->migrating_to[s] = -1;

	extra = node_extra(password);
	for (int i = 0; i < n_masters * (1 + replicas_per_master); i++) {
		tc->nodes[i] = test_redis_start_cluster_node((const char *const *)extra, password);
		tc->n_nodes++;
	}
	g_strfreev(extra);

	w.why = g_string_new(NULL);
	if (!form(tc, w.why)) {
		char *what = g_strdup_printf("Redis Cluster not formed: %s", w.why->str);

		g_string_free(w.why, TRUE);
		fail_setup(tc, what);
	}
	if (!test_cluster__poll(whole_now, &w, START_MS)) {
		char *what = g_strdup_printf("Redis Cluster not whole within %lld ms: %s",
		                             (long long)test_slack(START_MS), w.why->str);

		g_string_free(w.why, TRUE);
		fail_setup(tc, what);
	}
	g_string_free(w.why, TRUE);
	return tc;
}

void test_cluster_stop(test_cluster *tc)
{
	GString *legend;

	if (!tc)
		return;
	legend = g_string_new("---- Redis Cluster: nodes on ports");
	for (int i = 0; i < tc->n_nodes; i++)
		g_string_append_printf(legend, " %d (node %d, started as a %s; bus %d)", tc->nodes[i]->port, i,
		                       i < tc->n_masters ? "master" : "replica", tc->nodes[i]->cluster_port);
	g_string_append(legend, "; their logs follow ----");
	test_logs_keep(g_string_free(legend, FALSE));

	/* SIGKILL: nothing is kept, and SIGTERM would have a master wait for
	 * its replicas. */
	for (int i = 0; i < tc->n_nodes; i++) {
		if (tc->nodes[i]->pid > 0)
			test_redis_signal(tc->nodes[i], SIGKILL);
		test_redis_stop(tc->nodes[i]);
	}
	g_free(tc->password);
	g_free(tc);
}

/* ---- addresses and accessors -------------------------------------------- */

char *test_cluster_uri_userinfo(const test_cluster *tc, const char *userinfo, const char *suffix)
{
	GString *uri = g_string_new("redis+cluster://");

	if (userinfo)
		g_string_append_printf(uri, "%s@", userinfo);
	for (int i = 0; i < tc->n_masters; i++)
		g_string_append_printf(uri, "%s127.0.0.1:%d", i ? "," : "", tc->nodes[i]->port);
	g_string_append(uri, suffix ? suffix : "");
	return g_string_free(uri, FALSE);
}

char *test_cluster_uri(const test_cluster *tc, const char *suffix)
{
	return test_cluster_uri_userinfo(tc, NULL, suffix);
}

char *test_cluster_uri_seed(const test_cluster *tc, int i, const char *suffix)
{
	return g_strdup_printf("redis+cluster://127.0.0.1:%d%s", test_cluster_port(tc, i), suffix ? suffix : "");
}

test_redis *test_cluster_node(const test_cluster *tc, int i)
{
	assert_true(i >= 0 && i < tc->n_nodes);
	return tc->nodes[i];
}

int test_cluster_port(const test_cluster *tc, int i)
{
	return test_cluster_node(tc, i)->port;
}

int test_cluster_node_on(const test_cluster *tc, int port)
{
	for (int i = 0; port > 0 && i < tc->n_nodes; i++)
		if (tc->nodes[i]->port == port)
			return i;
	return -1;
}

redisReply *test_cluster_cmd(test_cluster *tc, int i, const char *fmt, ...)
{
	redisReply *reply;
	va_list ap;

	va_start(ap, fmt);
	reply = test_redis_vcmd(test_cluster_node(tc, i), fmt, ap);
	va_end(ap);
	return reply;
}

/* ---- faults ------------------------------------------------------------- */

typedef struct failover_wait {
	test_cluster *tc;
	int old;
	int replica;
	const bool *slots; /* the old master's */
	GString *why;
} failover_wait;

static bool failed_over_now(void *arg)
{
	failover_wait *w = arg;
	uint16_t *ports = g_new(uint16_t, TEST_CLUSTER_SLOTS);
	int new_port = w->tc->nodes[w->replica]->port;
	bool ok = test_cluster__agreed_map(w->tc, ports, w->why);
	bool master;
	int master_port;
	bool linked;

	for (int s = 0; ok && s < TEST_CLUSTER_SLOTS; s++)
		if (w->slots[s] && ports[s] != new_port) {
			g_string_printf(w->why, "slot %d is served by port %u, not the replica's %d", s, ports[s],
			                new_port);
			ok = false;
		}
	g_free(ports);
	if (ok && !test_cluster_is_master(w->tc, w->replica)) {
		g_string_printf(w->why, "the replica (node %d) does not answer ROLE as master", w->replica);
		ok = false;
	}
	if (ok && !(test_cluster__role(w->tc, w->old, &master, &master_port, &linked) && !master)) {
		g_string_printf(w->why, "the old master (node %d) does not answer ROLE as a replica", w->old);
		ok = false;
	}
	return ok;
}

int test_cluster_failover(test_cluster *tc, int master)
{
	bool *slots = g_new0(bool, TEST_CLUSTER_SLOTS);
	uint16_t *ports = g_new(uint16_t, TEST_CLUSTER_SLOTS);
	failover_wait w = { tc, master, test_cluster_replica_of(tc, master), slots, g_string_new(NULL) };

	if (w.replica < 0)
		fail_msg("node %d has no running replica to fail over to", master);
	if (!test_cluster__agreed_map(tc, ports, w.why))
		fail_msg("no slot map before the failover of node %d: %s", master, w.why->str);
	for (int s = 0; s < TEST_CLUSTER_SLOTS; s++)
		slots[s] = ports[s] == tc->nodes[master]->port;
	g_free(ports);
	test_cluster__expect_ok(tc, w.replica, "CLUSTER FAILOVER",
	                        test_redis_cmd(tc->nodes[w.replica], "CLUSTER FAILOVER"));
	if (!test_cluster__poll(failed_over_now, &w, FAILOVER_MS))
		fail_msg("CLUSTER FAILOVER on node %d: not done within %lld ms: %s", w.replica,
		         (long long)test_slack(FAILOVER_MS), w.why->str);
	g_string_free(w.why, TRUE);
	g_free(slots);
	return w.replica;
}

void test_cluster_kill(test_cluster *tc, int i)
{
	test_redis *r = test_cluster_node(tc, i);

	assert_true(r->pid > 0);
	test_redis_signal(r, SIGKILL);
	/* Reaps it; the ports and directory stay the node's. */
	test_redis_halt(r);
	tc->frozen[i] = false;
}

void test_cluster_restart(test_cluster *tc, int i)
{
	test_redis *r = test_cluster_node(tc, i);

	assert_true(r->pid == 0);
	test_redis_resume(r);
}

void test_cluster_freeze(test_cluster *tc, int i)
{
	test_redis_signal(test_cluster_node(tc, i), SIGSTOP);
	tc->frozen[i] = true;
}

void test_cluster_thaw(test_cluster *tc, int i)
{
	test_redis_signal(test_cluster_node(tc, i), SIGCONT);
	tc->frozen[i] = false;
}
