/* SPDX-License-Identifier: MIT */
/* A Redis Sentinel setup for the tests: see test-sentinel.h. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "test-sentinel.h"

/* How long a fresh setup may take to get ready: about 2.5 s here, most of
 * it the sentinels' 2 s hello period before they know each other. */
#define START_MS 20000
/* How often conditions are polled: each poll is a few commands on every
 * sentinel, so not at test_wait_until()'s 5 ms. */
#define POLL_MS 20

/* ---- configuration ---------------------------------------------------- */

/* The arguments of a data server: a replica of master_port, or a master if
 * master_port is 0.  g_strfreev. */
static char **server_extra(const test_sentinel *ts, int master_port)
{
	GPtrArray *argv = g_ptr_array_new();

	/* Without it a master waits 5 s before it feeds a new replica. */
	g_ptr_array_add(argv, g_strdup("--repl-diskless-sync-delay"));
	g_ptr_array_add(argv, g_strdup("0"));
	if (ts->password) {
		g_ptr_array_add(argv, g_strdup("--masterauth"));
		g_ptr_array_add(argv, g_strdup(ts->password));
	}
	if (master_port) {
		g_ptr_array_add(argv, g_strdup("--replicaof"));
		g_ptr_array_add(argv, g_strdup("127.0.0.1"));
		g_ptr_array_add(argv, g_strdup_printf("%d", master_port));
	}
	g_ptr_array_add(argv, NULL);
	return (char **)g_ptr_array_free(argv, FALSE);
}

/* Lines every sentinel configuration of later starts ends with. */
static char *extra_conf;

void test_sentinel_set_extra_conf(const char *lines)
{
	g_free(extra_conf);
	extra_conf = g_strdup(lines);
}

/* A sentinel's configuration, monitoring the master on master_port.  Its
 * port, bind address and own password come from the command line. */
static char *sentinel_conf(const test_sentinel *ts, int master_port)
{
	GString *conf = g_string_new(NULL);

	g_string_append(conf, "sentinel resolve-hostnames no\n");
	g_string_append_printf(conf, "sentinel monitor %s 127.0.0.1 %d 2\n", ts->service, master_port);
	g_string_append_printf(conf, "sentinel down-after-milliseconds %s 1000\n", ts->service);
	g_string_append_printf(conf, "sentinel failover-timeout %s 4000\n", ts->service);
	if (ts->password)
		g_string_append_printf(conf, "sentinel auth-pass %s %s\n", ts->service, ts->password);
	if (extra_conf)
		g_string_append_printf(conf, "%s\n", extra_conf);
	return g_string_free(conf, FALSE);
}

/* A word that goes into a configuration line unquoted. */
static bool plain_word(const char *s)
{
	if (!s || !*s)
		return false;
	for (; *s; s++)
		if (!g_ascii_isgraph(*s) || *s == '"' || *s == '\'' || *s == '\\')
			return false;
	return true;
}

/* ---- asking ----------------------------------------------------------- */

/* Sentinel i is running and not frozen, so it answers at once. */
static bool askable(const test_sentinel *ts, int i)
{
	return ts->sentinels[i] && ts->sentinels[i]->pid > 0 && !ts->frozen[i];
}

static test_redis *server_on(const test_sentinel *ts, int port)
{
	for (int i = 0; i < ts->n_servers; i++)
		if (ts->servers[i]->port == port)
			return ts->servers[i];
	return NULL;
}

/* The master's port as sentinel i names it; 0 if it is not asked or does
 * not name one. */
static int named_port(test_sentinel *ts, int i)
{
	redisReply *reply;
	int port = 0;

	if (!askable(ts, i))
		return 0;
	reply = test_redis_cmd(ts->sentinels[i], "SENTINEL GET-MASTER-ADDR-BY-NAME %s", ts->service);
	if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
	    reply->element[1]->type == REDIS_REPLY_STRING)
		port = atoi(reply->element[1]->str);
	if (reply)
		freeReplyObject(reply);
	return port;
}

/* The port a majority of all the sentinels name as master; 0 if none. */
static int majority_port(test_sentinel *ts)
{
	int ports[TEST_SENTINEL_COUNT];

	for (int i = 0; i < TEST_SENTINEL_COUNT; i++)
		ports[i] = named_port(ts, i);
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++) {
		int votes = 0;

		for (int j = 0; ports[i] && j < TEST_SENTINEL_COUNT; j++)
			votes += ports[j] == ports[i];
		if (votes * 2 > TEST_SENTINEL_COUNT)
			return ports[i];
	}
	return 0;
}

/* A running data server that answers ROLE as master. */
static bool answers_master(test_redis *r)
{
	redisReply *reply;
	bool master;

	if (!r || r->pid <= 0)
		return false;
	reply = test_redis_cmd(r, "ROLE");
	master = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
	         reply->element[0]->type == REDIS_REPLY_STRING && strcmp(reply->element[0]->str, "master") == 0;
	if (reply)
		freeReplyObject(reply);
	return master;
}

/* Whether a write on master reaches n replicas: a replica whose link is
 * "up" may not be receiving yet, WAIT on the writing connection says. */
static bool writes_reach(test_redis *master, int n)
{
	redisReply *set = test_redis_cmd(master, "SET test-sentinel:probe 1");
	bool written = set && set->type == REDIS_REPLY_STATUS;
	long long acked = 0;

	if (set)
		freeReplyObject(set);
	if (written && n > 0)
		acked = test_redis_int(master, "WAIT %d 100", n);
	if (written)
		freeReplyObject(test_redis_cmd(master, "DEL test-sentinel:probe"));
	return written && acked >= n;
}

/* A field of one entry of SENTINEL REPLICAS or SENTINELS (name, value,
 * name, value...); NULL if absent. */
static const char *field(const redisReply *entry, const char *name)
{
	if (entry->type != REDIS_REPLY_ARRAY)
		return NULL;
	for (size_t i = 0; i + 1 < entry->elements; i += 2)
		if (entry->element[i]->type == REDIS_REPLY_STRING && strcmp(entry->element[i]->str, name) == 0 &&
		    entry->element[i + 1]->type == REDIS_REPLY_STRING)
			return entry->element[i + 1]->str;
	return NULL;
}

/* Whether sentinel i's answer to SENTINEL what lists port as reachable
 * (neither down nor disconnected), as a failover needs it. */
static bool lists_reachable(test_sentinel *ts, int i, const char *what, int port)
{
	redisReply *reply = test_redis_cmd(ts->sentinels[i], "SENTINEL %s %s", what, ts->service);
	bool found = false;

	for (size_t k = 0; reply && reply->type == REDIS_REPLY_ARRAY && k < reply->elements && !found; k++) {
		const char *p = field(reply->element[k], "port");
		const char *flags = field(reply->element[k], "flags");

		found = p && flags && atoi(p) == port && !strstr(flags, "down") && !strstr(flags, "disconnected");
	}
	if (reply)
		freeReplyObject(reply);
	return found;
}

/* Whether sentinel i names master and lists every running replica and
 * every other sentinel asked; else why, in *why. */
static bool sentinel_ready(test_sentinel *ts, int i, const test_redis *master, GString *why)
{
	int named = named_port(ts, i);

	if (named != master->port) {
		g_string_printf(why, "sentinel %d (port %d) names port %d as master, not %d", i, ts->sentinels[i]->port,
		                named, master->port);
		return false;
	}
	for (int k = 0; k < ts->n_servers; k++) {
		test_redis *r = ts->servers[k];

		if (r != master && r->pid > 0 && !lists_reachable(ts, i, "REPLICAS", r->port)) {
			g_string_printf(why, "sentinel %d (port %d) does not list the replica on port %d as reachable", i,
			                ts->sentinels[i]->port, r->port);
			return false;
		}
	}
	for (int j = 0; j < TEST_SENTINEL_COUNT; j++) {
		if (j != i && askable(ts, j) && !lists_reachable(ts, i, "SENTINELS", ts->sentinels[j]->port)) {
			g_string_printf(why, "sentinel %d (port %d) does not list sentinel %d (port %d) as reachable", i,
			                ts->sentinels[i]->port, j, ts->sentinels[j]->port);
			return false;
		}
	}
	return true;
}

/* Whether the setup is ready (test-sentinel.h); else why, in *why. */
static bool ready(test_sentinel *ts, GString *why)
{
	int port = majority_port(ts);
	test_redis *master = server_on(ts, port);
	int replicas = 0;

	if (!master || master->pid <= 0) {
		g_string_printf(why, "no majority of the sentinels names a running master (port %d)", port);
		return false;
	}
	if (!answers_master(master)) {
		g_string_printf(why, "the server on port %d, named master, does not answer ROLE as master", port);
		return false;
	}
	for (int k = 0; k < ts->n_servers; k++)
		replicas += ts->servers[k] != master && ts->servers[k]->pid > 0;
	if (!writes_reach(master, replicas)) {
		g_string_printf(why, "writes on the master (port %d) do not reach its %d running replicas", port,
		                replicas);
		return false;
	}
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++)
		if (askable(ts, i) && !sentinel_ready(ts, i, master, why))
			return false;
	return true;
}

/* Poll cond(arg) every POLL_MS for up to timeout_ms, scaled. */
static bool poll_until(bool (*cond)(void *), void *arg, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + test_slack(timeout_ms);

	for (;;) {
		if (cond(arg))
			return true;
		if (test_now_ms() > until)
			return false;
		g_usleep(POLL_MS * 1000);
	}
}

typedef struct ready_wait {
	test_sentinel *ts;
	GString *why;
} ready_wait;

static bool ready_now(void *arg)
{
	ready_wait *w = arg;

	return ready(w->ts, w->why);
}

/* Wait until ready; false with the last reason in why. */
static bool wait_ready(test_sentinel *ts, int64_t timeout_ms, GString *why)
{
	ready_wait w = { ts, why };

	return poll_until(ready_now, &w, timeout_ms);
}

bool test_sentinel_wait_ready(test_sentinel *ts, int64_t timeout_ms)
{
	GString *why = g_string_new(NULL);
	bool ok = wait_ready(ts, timeout_ms, why);

	if (!ok)
		print_error("Sentinel setup '%s' not ready within %lld ms: %s\n", ts->service,
		            (long long)test_slack(timeout_ms), why->str);
	g_string_free(why, TRUE);
	return ok;
}

/* ---- starting and stopping -------------------------------------------- */

typedef struct fed_wait {
	test_redis *master;
	int replicas;
} fed_wait;

static bool fed_now(void *arg)
{
	fed_wait *w = arg;

	return writes_reach(w->master, w->replicas);
}

static test_redis *start_sentinel(const test_sentinel *ts, int master_port)
{
	static const char *const extra[] = { "--sentinel", NULL };
	char *conf = sentinel_conf(ts, master_port);
	test_redis *s = test_redis_start_conf(conf, extra, ts->sentinel_password);

	g_free(conf);
	return s;
}

/* Stop everything, fail the test with what, and leave the logs to
 * test_finish(). */
static void fail_setup(test_sentinel *ts, const char *what)
{
	test_sentinel_stop(ts);
	fail_msg("%s (the servers' logs follow the results)", what);
}

test_sentinel *test_sentinel_start(const char *service, int n_replicas, const char *password,
                                   const char *sentinel_password)
{
	test_sentinel *ts = g_new0(test_sentinel, 1);
	GString *why = g_string_new(NULL);
	char **extra;
	fed_wait fed;

	assert_true(n_replicas >= 1 && n_replicas <= TEST_SENTINEL_MAX_REPLICAS);
	assert_true(plain_word(service));
	assert_true(!password || plain_word(password));
	ts->service = g_strdup(service);
	ts->password = g_strdup(password);
	ts->sentinel_password = g_strdup(sentinel_password);

	extra = server_extra(ts, 0);
	ts->servers[ts->n_servers++] = test_redis_start((const char *const *)extra, password, false);
	g_strfreev(extra);
	extra = server_extra(ts, ts->servers[0]->port);
	for (int i = 0; i < n_replicas; i++)
		ts->servers[ts->n_servers++] = test_redis_start((const char *const *)extra, password, false);
	g_strfreev(extra);

	/* A sentinel learns the replicas from the master's INFO, sent at
	 * once and then every 10 s: they must be attached before it asks. */
	fed = (fed_wait){ ts->servers[0], n_replicas };
	if (!poll_until(fed_now, &fed, START_MS))
		fail_setup(ts, "the replicas do not receive the master's writes");
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++)
		ts->sentinels[i] = start_sentinel(ts, ts->servers[0]->port);
	if (!wait_ready(ts, START_MS, why)) {
		char what[512];

		g_snprintf(what, sizeof(what), "Sentinel setup '%s' not ready within %lld ms: %s", service,
		           (long long)test_slack(START_MS), why->str);
		g_string_free(why, TRUE);
		fail_setup(ts, what);
	}
	g_string_free(why, TRUE);
	return ts;
}

static void kill_and_stop(test_redis *r)
{
	if (r && r->pid > 0)
		test_redis_signal(r, SIGKILL);
	test_redis_stop(r);
}

void test_sentinel_stop(test_sentinel *ts)
{
	GString *legend;

	if (!ts)
		return;
	legend = g_string_new(NULL);
	g_string_printf(legend, "---- Sentinel setup '%s': data servers on ports", ts->service);
	for (int i = 0; i < ts->n_servers; i++)
		g_string_append_printf(legend, " %d%s", ts->servers[i]->port, i ? "" : " (first master)");
	g_string_append(legend, ", sentinels on ports");
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++)
		if (ts->sentinels[i])
			g_string_append_printf(legend, " %d", ts->sentinels[i]->port);
	g_string_append(legend, "; their logs follow ----");
	test_logs_keep(g_string_free(legend, FALSE));

	/* The sentinels first, so they do not act on the servers' going;
	 * SIGKILL, since nothing is kept and a master would wait up to 1 s
	 * for its replicas on SIGTERM. */
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++)
		kill_and_stop(ts->sentinels[i]);
	for (int i = 0; i < ts->n_servers; i++)
		kill_and_stop(ts->servers[i]);
	g_free(ts->service);
	g_free(ts->password);
	g_free(ts->sentinel_password);
	g_free(ts);
}

/* ---- addresses and accessors ------------------------------------------ */

char *test_sentinel_uri_userinfo(const test_sentinel *ts, const char *userinfo, const char *suffix)
{
	GString *uri = g_string_new("redis+sentinel://");

	if (userinfo)
		g_string_append_printf(uri, "%s@", userinfo);
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++)
		g_string_append_printf(uri, "%s127.0.0.1:%d", i ? "," : "", ts->sentinels[i]->port);
	g_string_append_printf(uri, "/%s%s", ts->service, suffix ? suffix : "");
	return g_string_free(uri, FALSE);
}

char *test_sentinel_uri(const test_sentinel *ts, const char *suffix)
{
	return test_sentinel_uri_userinfo(ts, NULL, suffix);
}

int test_sentinel_port(const test_sentinel *ts, int i)
{
	assert_true(i >= 0 && i < TEST_SENTINEL_COUNT);
	return ts->sentinels[i]->port;
}

redisReply *test_sentinel_cmd(test_sentinel *ts, int i, const char *fmt, ...)
{
	redisReply *reply;
	va_list ap;

	assert_true(i >= 0 && i < TEST_SENTINEL_COUNT);
	va_start(ap, fmt);
	reply = test_redis_vcmd(ts->sentinels[i], fmt, ap);
	va_end(ap);
	return reply;
}

test_redis *test_sentinel_master(test_sentinel *ts)
{
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++) {
		int port = named_port(ts, i);
		test_redis *r;

		if (!port)
			continue;
		if (!(r = server_on(ts, port)))
			fail_msg("sentinel %d names port %d as master of '%s', none of the setup's servers", i, port,
			         ts->service);
		return r;
	}
	fail_msg("no sentinel names a master of '%s'", ts->service);
	return NULL;
}

test_redis *test_sentinel_replica(test_sentinel *ts, int i)
{
	test_redis *master = test_sentinel_master(ts);

	assert_true(i >= 0);
	for (int k = 0; k < ts->n_servers; k++)
		if (ts->servers[k] != master && i-- == 0)
			return ts->servers[k];
	fail_msg("the Sentinel setup has no such replica");
	return NULL;
}

/* ---- faults ------------------------------------------------------------ */

int test_sentinel_kill_master(test_sentinel *ts)
{
	test_redis *master = test_sentinel_master(ts);

	assert_true(master->pid > 0);
	test_redis_signal(master, SIGKILL);
	/* Reaps it; the port and directory stay the server's. */
	test_redis_halt(master);
	return master->port;
}

typedef struct promotion_wait {
	test_sentinel *ts;
	int old_port;
} promotion_wait;

static bool promoted_now(void *arg)
{
	promotion_wait *w = arg;
	int port = majority_port(w->ts);

	return port && port != w->old_port && answers_master(server_on(w->ts, port));
}

bool test_sentinel_wait_promoted(test_sentinel *ts, int old_port, int64_t timeout_ms)
{
	promotion_wait w = { ts, old_port };

	return poll_until(promoted_now, &w, timeout_ms);
}

int test_sentinel_failover(test_sentinel *ts)
{
	int old_port = test_sentinel_master(ts)->port;
	bool asked = false;

	for (int i = 0; i < TEST_SENTINEL_COUNT && !asked; i++) {
		redisReply *reply;

		char answer[256];
		bool ok;

		if (!askable(ts, i) || !(reply = test_sentinel_cmd(ts, i, "SENTINEL FAILOVER %s", ts->service)))
			continue;
		ok = reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0;
		g_strlcpy(answer, reply->str ? reply->str : "(neither a status nor an error)", sizeof(answer));
		freeReplyObject(reply);
		if (!ok)
			fail_msg("SENTINEL FAILOVER %s on sentinel %d: %s", ts->service, i, answer);
		asked = true;
	}
	if (!asked)
		fail_msg("no sentinel answers SENTINEL FAILOVER %s", ts->service);
	if (!test_sentinel_wait_promoted(ts, old_port, 15000))
		fail_msg("SENTINEL FAILOVER %s: no replica promoted within %lld ms", ts->service,
		         (long long)test_slack(15000));
	return old_port;
}

void test_sentinel_restart_as_replica(test_sentinel *ts, test_redis *server)
{
	test_redis *master = test_sentinel_master(ts);

	assert_true(server->pid == 0);
	assert_true(server != master);
	g_strfreev(server->extra);
	server->extra = server_extra(ts, master->port);
	test_redis_resume(server);
}

void test_sentinel_freeze(test_sentinel *ts, int i)
{
	assert_true(i >= 0 && i < TEST_SENTINEL_COUNT);
	test_redis_signal(ts->sentinels[i], SIGSTOP);
	ts->frozen[i] = true;
}

void test_sentinel_thaw(test_sentinel *ts, int i)
{
	assert_true(i >= 0 && i < TEST_SENTINEL_COUNT);
	test_redis_signal(ts->sentinels[i], SIGCONT);
	ts->frozen[i] = false;
}

void test_sentinel_halt(test_sentinel *ts, int i)
{
	assert_true(i >= 0 && i < TEST_SENTINEL_COUNT);
	test_redis_signal(ts->sentinels[i], SIGKILL);
	test_redis_halt(ts->sentinels[i]);
	ts->frozen[i] = false;
}

void test_sentinel_resume(test_sentinel *ts, int i)
{
	test_redis *s;

	assert_true(i >= 0 && i < TEST_SENTINEL_COUNT);
	s = ts->sentinels[i];
	assert_true(s->pid == 0);
	g_free(s->conf);
	s->conf = sentinel_conf(ts, test_sentinel_master(ts)->port);
	test_redis_resume(s);
}
