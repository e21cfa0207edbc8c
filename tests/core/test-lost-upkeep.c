/* SPDX-License-Identifier: MIT */
/*
 * A hold that has been declared LOST is no longer kept: its renewals or
 * keep-alives stop counting for it and what is left of it on the server
 * goes in the background, so another client gets the lock although the
 * holder never releases -- in every mode (mutex, READ, WRITE, a permit of
 * a semaphore, an election's leadership).
 *
 * The holder is a worker process that acquires, then only looks at its
 * holds (dlock_held() every millisecond, which is where the core judges a
 * hold by the clock) and never releases.  The faults are real: the proxy
 * holds back the server's answers (the requests still reach the server
 * and run there), and one library thread of the holder is held still with
 * ptrace, as after a pause in which the caller's thread runs first.
 *
 * Run with one argument: redis, redlock or zk.
 */
#include <dirent.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-proxy.h"
#include "test-redis.h"
#include "test-redlock.h"
#include "test-zk.h"

#define LINE_WAIT_MS 20000

/* The first segment of every resource name: one per test, so that one
 * test's leftovers cannot hold up the next. */
static const char *space = "up";

/* The holds a holder takes: every mode, or what a Redlock has. */
static const char *const all_modes[] = { "mutex", "read", "write", "permit", "elect", NULL };
static const char *const redlock_modes[] = { "mutex", "elect", NULL };

/* ---- the holder (worker process) ---------------------------------------- */

static void say(const char *fmt, ...) G_GNUC_PRINTF(1, 2);

/* One line on stdout in one write, from any thread. */
static void say(const char *fmt, ...)
{
	va_list ap;
	char *line;

	va_start(ap, fmt);
	line = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	if (write(STDOUT_FILENO, line, strlen(line)) < 0)
		abort();
	g_free(line);
}

static const char *state_word(int state)
{
	return state == DLOCK_STATE_SUSPENDED ? "suspended" : state == DLOCK_STATE_LOST ? "lost" : "reconnected";
}

static void on_state(dlock_lock *lock, dlock_state state, void *data)
{
	(void)lock;
	say("%s %s\n", state_word(state), (const char *)data);
}

static void on_election(dlock_election *e, dlock_election_event event, const char *id, void *data)
{
	(void)e;
	(void)id;
	(void)data;
	if (event == DLOCK_ELECTION_SUSPENDED)
		say("suspended elect\n");
	else if (event == DLOCK_ELECTION_LOST)
		say("lost elect\n");
}

static dlock_lock *holder_lock(dlock_client *client, const char *mode, int64_t ttl_ms)
{
	char *resource = g_strdup_printf("%s/%s", space, mode);
	dlock_lock *lock;

	if (dlock_lock_new(client, resource, &lock) != DLOCK_OK)
		exit(2);
	g_free(resource);
	if (ttl_ms > 0 && dlock_lock_set_ttl(lock, ttl_ms) != DLOCK_OK)
		exit(2);
	if (strcmp(mode, "read") == 0)
		dlock_lock_set_mode(lock, DLOCK_MODE_READ);
	else if (strcmp(mode, "write") == 0)
		dlock_lock_set_mode(lock, DLOCK_MODE_WRITE);
	else if (strcmp(mode, "permit") == 0)
		dlock_lock_set_permits(lock, 2);
	if (dlock_lock_set_state_callback(lock, on_state, (void *)mode) != DLOCK_OK ||
	    dlock_acquire(lock, 10000) != DLOCK_OK)
		exit(3);
	return lock;
}

/* The holds of MODES: "all", "redlock", or one mode. */
static const char *const *modes_of(const char *which, const char **one)
{
	if (strcmp(which, "all") == 0)
		return all_modes;
	if (strcmp(which, "redlock") == 0)
		return redlock_modes;
	one[0] = which;
	one[1] = NULL;
	return one;
}

/*
 * "hold URI TTL_MS MODES SPACE" (MODES "all", "redlock" or one mode; the
 * resources SPACE/mutex, SPACE/read...): take every hold,
 * say "held", then look at the holds every millisecond and never release.
 * Each state change is said as "suspended NAME", "lost NAME".  A line
 * "query" on stdin makes it ask the server who holds "SPACE/spare" (a
 * request answered on the same connection or session) and say "queried
 * RC"; at the end of stdin it exits without releasing anything.
 */
static int holder_main(const char *uri, int64_t ttl_ms, const char *which)
{
	const char *one[2];
	const char *const *modes = modes_of(which, one);
	dlock_lock *locks[8] = { NULL };
	dlock_client *client;
	dlock_election *e = NULL;
	dlock_lock *spare;
	char buf[64];
	size_t len = 0;
	int n = 0;

	char *name = g_strdup_printf("%s/spare", space);

	if (dlock_client_new(uri, &client) != DLOCK_OK || dlock_lock_new(client, name, &spare) != DLOCK_OK)
		return 2;
	g_free(name);
	name = g_strdup_printf("%s/elect", space);
	for (int i = 0; modes[i]; i++) {
		if (strcmp(modes[i], "elect") != 0) {
			locks[n++] = holder_lock(client, modes[i], ttl_ms);
			continue;
		}
		if (dlock_election_new(client, name, "lost-leader", &e) != DLOCK_OK ||
		    (ttl_ms > 0 && dlock_lock_set_ttl(dlock_election_lock(e), ttl_ms) != DLOCK_OK) ||
		    dlock_election_set_callback(e, on_election, NULL) != DLOCK_OK ||
		    dlock_election_campaign(e, 10000) != DLOCK_OK)
			return 3;
	}
	say("held\n");
	for (;;) {
		struct pollfd in = { .fd = STDIN_FILENO, .events = POLLIN };
		char c;

		for (int i = 0; i < n; i++)
			dlock_held(locks[i]);
		if (e)
			dlock_election_is_leader(e);
		if (poll(&in, 1, 1) <= 0)
			continue;
		if (read(STDIN_FILENO, &c, 1) != 1)
			break;
		if (c != '\n') {
			if (len + 1 < sizeof(buf))
				buf[len++] = c;
			continue;
		}
		buf[len] = '\0';
		len = 0;
		if (strcmp(buf, "query") == 0) {
			dlock_info *info = NULL;
			int rc = dlock_lock_query(spare, &info);

			dlock_info_free(info);
			say("queried %d\n", rc);
		}
	}
	/* Dies holding everything: no release, no free. */
	_exit(0);
}

/* ---- the test's side ---------------------------------------------------- */

typedef struct holder {
	pid_t pid;
	int in_fd, out_fd;
	const char *one[2];
	const char *const *modes; /* the holds it has */
	int n;
} holder;

static void holder_start(holder *h, const char *uri, int64_t ttl_ms, const char *which)
{
	char ttl[24];
	const char *args[] = { "hold", uri, ttl, which, space, NULL };
	char line[256];

	g_snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_ms);
	h->modes = modes_of(which, h->one);
	h->n = (int)g_strv_length((char **)h->modes);
	h->pid = test_spawn_worker_io(args, &h->in_fd, &h->out_fd);
	if (!test_read_line(h->out_fd, line, sizeof(line), LINE_WAIT_MS))
		fail_msg("the holder did not take its locks");
	assert_string_equal(line, "held");
}

/* Read the holder's lines until it has said "lost" of every hold; other
 * lines are shown. */
static void holder_expect_lost(holder *h)
{
	char line[256];
	int lost = 0;

	while (lost < h->n) {
		if (!test_read_line(h->out_fd, line, sizeof(line), LINE_WAIT_MS))
			fail_msg("the holder reported %d of %d holds lost", lost, h->n);
		print_message("holder: %s\n", line);
		lost += g_str_has_prefix(line, "lost ");
	}
}

static void holder_query(holder *h)
{
	char line[256];

	assert_true(test_write_str(h->in_fd, "query\n"));
	do {
		if (!test_read_line(h->out_fd, line, sizeof(line), LINE_WAIT_MS))
			fail_msg("the holder did not answer the query");
		print_message("holder: %s\n", line);
	} while (!g_str_has_prefix(line, "queried "));
	assert_string_equal(line, "queried 0");
}

static void holder_kill(holder *h)
{
	kill(h->pid, SIGKILL);
	test_wait_worker(h->pid);
	close(h->in_fd);
	close(h->out_fd);
}

/* The id of the holder's thread with this name, waiting for it. */
static pid_t thread_named(pid_t pid, const char *name)
{
	char *dir = g_strdup_printf("/proc/%d/task", (int)pid);
	int64_t until = test_now_ms() + 10000;
	pid_t found = 0;

	while (!found && test_now_ms() < until) {
		GDir *tasks = g_dir_open(dir, 0, NULL);
		const char *tid;

		assert_non_null(tasks);
		while (!found && (tid = g_dir_read_name(tasks))) {
			char *path = g_strdup_printf("%s/%s/comm", dir, tid);
			char *comm = NULL;

			if (g_file_get_contents(path, &comm, NULL, NULL) && strcmp(g_strchomp(comm), name) == 0)
				found = (pid_t)atoi(tid);
			g_free(comm);
			g_free(path);
		}
		g_dir_close(tasks);
		if (!found)
			g_usleep(10 * 1000);
	}
	g_free(dir);
	if (!found)
		fail_msg("the holder has no thread named %s", name);
	return found;
}

static void thread_thaw(pid_t tid)
{
	assert_int_equal(ptrace(PTRACE_DETACH, tid, NULL, 0), 0);
}

/* Whether thread tid of pid is in a futex wait with a timeout (a timed
 * condition wait; a mutex it waits for has none): /proc's syscall line
 * is "NR ARG1 ... ARG6 SP PC", futex is 202, its timeout the 4th arg. */
static bool in_timed_wait(pid_t pid, pid_t tid)
{
	char *path = g_strdup_printf("/proc/%d/task/%d/syscall", (int)pid, (int)tid);
	char *line = NULL;
	gchar **f = NULL;
	bool waiting;

	g_file_get_contents(path, &line, NULL, NULL);
	if (line)
		f = g_strsplit(g_strstrip(line), " ", -1);
	waiting = f && g_strv_length(f) > 4 && strcmp(f[0], "202") == 0 && strcmp(f[4], "0x0") != 0;
	g_strfreev(f);
	g_free(line);
	g_free(path);
	return waiting;
}

/*
 * Hold one thread of the holder still (the test process is its parent),
 * the others running on -- caught asleep in its timed wait, not holding a
 * mutex the others need; let go again at once and tried later otherwise.
 */
static void thread_freeze(pid_t pid, pid_t tid)
{
	for (int i = 0; i < 1000; i++) {
		int status;

		assert_int_equal(ptrace(PTRACE_SEIZE, tid, NULL, NULL), 0);
		assert_int_equal(ptrace(PTRACE_INTERRUPT, tid, NULL, NULL), 0);
		assert_int_equal(waitpid(tid, &status, __WALL), tid);
		assert_true(WIFSTOPPED(status));
		if (in_timed_wait(pid, tid))
			return;
		thread_thaw(tid);
		g_usleep(1000);
	}
	fail_msg("thread %d of the holder was never caught asleep", (int)tid);
}

/* One resource of the holder, taken by another client. */
typedef struct taker {
	const char *uri;
	const char *mode;
	int64_t wait_ms;
	GThread *thread;
	int rc;
	int64_t took_ms;
} taker;

static int take(dlock_client *client, const char *mode, int64_t wait_ms)
{
	char *resource = g_strdup_printf("%s/%s", space, mode);
	dlock_lock *locks[2] = { NULL, NULL };
	dlock_election *e = NULL;
	int rc;

	if (strcmp(mode, "elect") == 0) {
		rc = dlock_election_new(client, resource, "heir", &e);
		if (rc == DLOCK_OK)
			rc = dlock_election_campaign(e, wait_ms);
		if (rc == DLOCK_OK)
			rc = dlock_election_resign(e);
		dlock_election_free(e);
		g_free(resource);
		return rc;
	}
	/* A reader keeps a writer out, a permit of 2 the second of two. */
	for (int i = 0; i < (strcmp(mode, "permit") == 0 ? 2 : 1); i++) {
		rc = dlock_lock_new(client, resource, &locks[i]);
		if (rc == DLOCK_OK && strcmp(mode, "permit") == 0) {
			dlock_lock_set_permits(locks[i], 2);
			dlock_lock_set_owner(locks[i], DLOCK_OWNER_HANDLE);
		} else if (rc == DLOCK_OK && strcmp(mode, "read") == 0) {
			dlock_lock_set_mode(locks[i], DLOCK_MODE_WRITE);
		}
		if (rc == DLOCK_OK)
			rc = dlock_acquire(locks[i], wait_ms);
		if (rc != DLOCK_OK)
			break;
	}
	for (int i = 0; i < 2; i++) {
		if (locks[i] && dlock_held(locks[i]))
			dlock_release(locks[i]);
		dlock_lock_free(locks[i]);
	}
	g_free(resource);
	return rc;
}

static gpointer take_main(gpointer data)
{
	taker *t = data;
	int64_t t0 = test_now_ms();
	dlock_client *client;

	t->rc = dlock_client_new(t->uri, &client);
	if (t->rc == DLOCK_OK) {
		t->rc = take(client, t->mode, t->wait_ms);
		dlock_client_free(client);
	}
	t->took_ms = test_now_ms() - t0;
	return NULL;
}

/*
 * Another client takes every resource the holder holds, all at once, each
 * waiting up to bound_ms (scaled by the slack factor); fails the test for
 * any it did not get.
 */
static void others_get_in(const char *uri, const char *const *modes, int64_t bound_ms)
{
	taker t[8];
	int n = 0;
	int failed = 0;

	for (int i = 0; modes[i]; i++) {
		t[i] = (taker){ uri, modes[i], bound_ms * test_slack_factor(), NULL, 0, 0 };
		t[i].thread = g_thread_new("taker", take_main, &t[i]);
	}
	for (int i = 0; modes[i]; i++) {
		g_thread_join(t[i].thread);
		print_message("%-6s another client: %s after %" PRId64 " ms (bound %" PRId64 " ms)\n",
		              modes[i], dlock_code_name(t[i].rc), t[i].took_ms, bound_ms);
		failed += t[i].rc != DLOCK_OK;
		n++;
	}
	if (failed)
		fail_msg("%d of %d holds of a holder that never released stayed on the server", failed, n);
}

/* ---- Redis --------------------------------------------------------------- */

static test_redis *redis;

static long long holder_keys(void)
{
	/* Lock keys, reader and permit sets, the permits key; not the counters. */
	char *locks = g_strdup_printf("dlock:{%s/*}", space);
	char *permits = g_strdup_printf("dlock:{%s/*}:permits", space);
	long long n = test_redis_count_keys(redis, locks) + test_redis_count_keys(redis, permits);

	g_free(locks);
	g_free(permits);
	return n;
}

/*
 * Until every holder's lease key on server has been renewed once (its
 * time to live went up): from then on the server has the renewal script,
 * so renewals sent while answers are held back run there.
 */
static void wait_renewed(test_redis *server, const char *const *modes, int64_t ttl_ms)
{
	long long last[8];
	bool renewed[8] = { false };
	int64_t until = test_now_ms() + 3 * ttl_ms * test_slack_factor();
	int n = (int)g_strv_length((char **)modes), done = 0;

	for (int i = 0; i < n; i++)
		last[i] = test_redis_int(server, "PTTL dlock:{%s/%s}", space, modes[i]);
	while (done < n) {
		if (test_now_ms() > until)
			fail_msg("%d of %d leases were renewed within %" PRId64 " ms", done, n, 3 * ttl_ms);
		g_usleep(5 * 1000);
		for (int i = 0; i < n; i++) {
			long long now = test_redis_int(server, "PTTL dlock:{%s/%s}", space, modes[i]);

			if (!renewed[i] && now > last[i] + 20) {
				renewed[i] = true;
				done++;
			}
			last[i] = now;
		}
	}
}

/* One holder process per mode, each through proxy (so that each one's
 * watchdog has a renewal of its own in flight when the answers stop). */
static void holders_start(holder *hs, const char *uri, int64_t ttl_ms, const char *const *modes)
{
	for (int i = 0; modes[i]; i++)
		holder_start(&hs[i], uri, ttl_ms, modes[i]);
}

typedef struct renewed {
	test_proxy *proxy;
	int from;
	int holds;
} renewed;

/* The holders' watchdogs have renewed twice since the link came back
 * (one EVALSHA per hold a round), or their keys are gone. */
static bool renewed_twice_or_gone(void *arg)
{
	renewed *r = arg;

	return test_proxy_requests(r->proxy, "EVALSHA") >= r->from + 2 * r->holds || holder_keys() == 0;
}

/*
 * The case of a resumed holder whose caller looks before the library's
 * expiry thread runs: a renewal is sent, its answer is held back past the
 * lease's end (the renewal ran on the server, so the key lives on), the
 * holder's dlock_held() declares the hold LOST by the clock, and then the
 * answer arrives: "renewed".  The expiry thread, held still until then,
 * finds the lease renewed.  A lease of 1.5 s.
 */
static void test_redis_hold_lost_by_the_clock_is_not_renewed_and_goes(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, redis->port);
	char *via = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=2s", test_proxy_port(proxy));
	char *direct = test_redis_uri(redis, "");
	int n = (int)g_strv_length((char **)all_modes);
	renewed r = { proxy, 0, n };
	holder h[8];
	pid_t expiry[8];
	int64_t t0;

	space = "clock";
	holders_start(h, via, 1500, all_modes);
	for (int i = 0; i < n; i++) {
		expiry[i] = thread_named(h[i].pid, "dlock-expiry");
		thread_freeze(h[i].pid, expiry[i]);
	}
	wait_renewed(redis, all_modes, 1500);
	test_proxy_stall(proxy, TEST_PROXY_DOWN);
	for (int i = 0; i < n; i++)
		holder_expect_lost(&h[i]);
	r.from = test_proxy_requests(proxy, "EVALSHA");
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
	t0 = test_now_ms();
	assert_true(test_wait_until(renewed_twice_or_gone, &r, 10000));
	print_message("after the answers came back: %d renewals, %lld holder keys on the server\n",
	              test_proxy_requests(proxy, "EVALSHA") - r.from, holder_keys());
	for (int i = 0; i < n; i++)
		thread_thaw(expiry[i]);
	others_get_in(direct, all_modes, 3000);
	print_message("all taken %" PRId64 " ms after the answers came back\n", test_now_ms() - t0);
	for (int i = 0; i < n; i++)
		holder_kill(&h[i]);
	test_proxy_stop(proxy);
	g_free(via);
	g_free(direct);
}

/*
 * Renewals run on the server but their answers are held back until the
 * lease has ended: LOST, however it is noticed; the renewals that ran
 * kept the key for another lease, and it must go without waiting for it.
 * A lease of 4 s: the bound, 2 s, is well inside it.
 */
static void test_redis_hold_lost_while_renewals_ran_goes_before_its_lease_ends(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, redis->port);
	char *via = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=2s", test_proxy_port(proxy));
	char *direct = test_redis_uri(redis, "");
	int n = (int)g_strv_length((char **)all_modes);
	holder h[8];

	space = "ran";
	holders_start(h, via, 4000, all_modes);
	wait_renewed(redis, all_modes, 4000);
	test_proxy_stall(proxy, TEST_PROXY_DOWN);
	for (int i = 0; i < n; i++)
		holder_expect_lost(&h[i]);
	print_message("%lld holder keys on the server when the holders reported the loss\n", holder_keys());
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
	others_get_in(direct, all_modes, 2000);
	for (int i = 0; i < n; i++)
		holder_kill(&h[i]);
	test_proxy_stop(proxy);
	g_free(via);
	g_free(direct);
}

/* ---- Redlock ------------------------------------------------------------- */

static test_redlock *redlock;

/* The same on three masters, every one's answers held back: the rounds
 * that ran there kept the keys for another lease of 6 s; the bound is
 * 3 s. */
static void test_redlock_hold_lost_while_renewals_ran_goes_before_its_lease_ends(void **state)
{
	test_proxy *proxies[3];
	GString *via = g_string_new("redis://");
	char *direct = test_redlock_uri(redlock, 3, "");
	holder h;

	space = "quorum";
	for (int i = 0; i < 3; i++) {
		proxies[i] = test_proxy_start_proto(TEST_PROXY_REDIS, redlock->masters[i]->port);
		g_string_append_printf(via, "%s127.0.0.1:%d", i ? "," : "", test_proxy_port(proxies[i]));
	}
	holder_start(&h, via->str, 6000, "redlock");
	for (int i = 0; i < 3; i++)
		wait_renewed(redlock->masters[i], redlock_modes, 6000);
	for (int i = 0; i < 3; i++)
		test_proxy_stall(proxies[i], TEST_PROXY_DOWN);
	holder_expect_lost(&h);
	for (int i = 0; i < 3; i++)
		print_message("master %d: the lock key lives %lld ms more\n", i,
		              test_redis_int(redlock->masters[i], "PTTL dlock:{%s/mutex}", space));
	for (int i = 0; i < 3; i++)
		test_proxy_unstall(proxies[i], TEST_PROXY_DOWN);
	others_get_in(direct, redlock_modes, 3000);
	holder_kill(&h);
	for (int i = 0; i < 3; i++)
		test_proxy_stop(proxies[i]);
	g_string_free(via, TRUE);
	g_free(direct);
}

/* ---- ZooKeeper ----------------------------------------------------------- */

static test_zk *zk;

static bool no_holder_nodes(void *arg)
{
	(void)arg;
	return test_zk_leftover_nodes(zk, "/dlock/session") == 0;
}

/*
 * A session of 2 s whose session thread is held still: no keep-alive of
 * dlock's refreshes its contact (the client library's own pings keep the
 * session alive on the server), so dlock_held() declares every hold LOST
 * by the clock.  Then a request on the session is answered -- the session
 * lives -- and the session thread runs again and keeps it.
 */
static void test_zk_hold_lost_by_the_clock_while_the_session_lives_goes(void **state)
{
	char *u = test_zk_uri(zk, "?session-timeout=2s");
	holder h;
	pid_t session;

	space = "session";
	holder_start(&h, u, 0, "all");
	session = thread_named(h.pid, "dlock-zksession");
	thread_freeze(h.pid, session);
	holder_expect_lost(&h);
	holder_query(&h);
	thread_thaw(session);
	others_get_in(u, all_modes, 3000);
	holder_kill(&h);
	/* The holder's session ends with its process. */
	assert_true(test_wait_until(no_holder_nodes, NULL, 10000));
	g_free(u);
}

/* ---- main ---------------------------------------------------------------- */

static int redis_setup(void **state)
{
	redis = test_redis_start(NULL, NULL, false);
	return 0;
}

static int redis_teardown(void **state)
{
	test_redis_stop(redis);
	return 0;
}

static int redlock_setup(void **state)
{
	redlock = test_redlock_start(3);
	return 0;
}

static int redlock_teardown(void **state)
{
	test_redlock_stop(redlock);
	return 0;
}

static int zk_setup(void **state)
{
	zk = test_zk_start(1, 200, 0);
	return 0;
}

static int zk_teardown(void **state)
{
	test_zk_stop(zk);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest redis_tests[] = {
		cmocka_unit_test(test_redis_hold_lost_by_the_clock_is_not_renewed_and_goes),
		cmocka_unit_test(test_redis_hold_lost_while_renewals_ran_goes_before_its_lease_ends),
	};
	const struct CMUnitTest redlock_tests[] = {
		cmocka_unit_test(test_redlock_hold_lost_while_renewals_ran_goes_before_its_lease_ends),
	};
	const struct CMUnitTest zk_tests[] = {
		cmocka_unit_test(test_zk_hold_lost_by_the_clock_while_the_session_lives_goes),
	};
	const char *backend = argc > 1 ? argv[1] : "";

	test_init(argv[0]);
	if (argc > 6 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "hold") == 0) {
		space = argv[6];
		return holder_main(argv[3], atoll(argv[4]), argv[5]);
	}
	if (strcmp(backend, "redis") == 0)
		return test_finish(cmocka_run_group_tests_name("lost-upkeep-redis", redis_tests, redis_setup,
		                                               redis_teardown));
	if (strcmp(backend, "redlock") == 0)
		return test_finish(cmocka_run_group_tests_name("lost-upkeep-redlock", redlock_tests,
		                                               redlock_setup, redlock_teardown));
	if (strcmp(backend, "zk") == 0)
		return test_zk_finish(cmocka_run_group_tests_name("lost-upkeep-zk", zk_tests, zk_setup,
		                                                  zk_teardown));
	fprintf(stderr, "usage: %s redis|redlock|zk\n", argv[0]);
	return 2;
}
