/* SPDX-License-Identifier: MIT */
/*
 * ZooKeeper under network faults injected by the proxy (ZooKeeper mode)
 * between the library and a real server: an answer lost with its
 * connection, a link that drops while a session only waits, and a grant
 * whose answer is read only after the connection dropped or the session
 * ended (the acquiring thread held still with ptrace meanwhile, the
 * client's other threads running on).
 */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-proxy.h"
#include "test-zk.h"

/* ---- helpers ------------------------------------------------------------ */

static bool proxy_accepted_two(void *proxy)
{
	return test_proxy_accepted(proxy) >= 2;
}

/* A dlock acquire running on its own thread. */
typedef struct bg_acquire {
	dlock_lock *lock;
	int64_t wait_ms;
	pthread_t thread;
	int rc;
	int64_t done_ms;    /* when it returned, or 0 */
} bg_acquire;

static void *bg_acquire_run(void *data)
{
	bg_acquire *job = data;
	int rc = dlock_acquire(job->lock, job->wait_ms);

	__atomic_store_n(&job->rc, rc, __ATOMIC_SEQ_CST);
	__atomic_store_n(&job->done_ms, test_now_ms(), __ATOMIC_SEQ_CST);
	return NULL;
}

static void bg_acquire_start(bg_acquire *job, dlock_lock *lock, int64_t wait_ms)
{
	job->lock = lock;
	job->wait_ms = wait_ms;
	job->rc = -1000;
	job->done_ms = 0;
	assert_int_equal(pthread_create(&job->thread, NULL, bg_acquire_run, job), 0);
}

static bool bg_acquire_done(void *arg)
{
	return __atomic_load_n(&((bg_acquire *)arg)->done_ms, __ATOMIC_SEQ_CST) != 0;
}

/* The lock node of the contender that is not `other` among two (g_free). */
static char *the_other_child(test_zk *zk, const char *dir, char *const *before)
{
	char **now = test_zk_children(zk, dir);
	char *found = NULL;

	assert_non_null(now);
	for (size_t i = 0; now[i] && !found; i++) {
		bool old = false;

		for (size_t j = 0; before && before[j]; j++)
			old = old || strcmp(before[j], now[i]) == 0;
		if (!old)
			found = g_strdup(now[i]);
	}
	g_strfreev(now);
	assert_non_null(found);
	return found;
}

/* ---- a create whose answer is lost ------------------------------------ */

/*
 * The server makes the lock node but the answer is lost with the
 * connection, and the acquire's deadline passes before the client gets
 * through again.  Nobody knows the node's name; it must still not stay
 * first in the queue for the rest of the session: after the reconnect
 * the client finds it by its uuid and deletes it, and another client
 * acquires.
 */
static void test_create_answer_lost_then_deadline_leaves_no_node_after_reconnect(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, zk->servers[0].port);
	char *via = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=8s", test_proxy_port(proxy));
	char *direct = test_zk_uri(zk, "?session-timeout=8s");
	dlock_client *a, *b;
	dlock_lock *warm, *la, *lb;
	int64_t started_ms, took_ms, reconnect_ms;

	/* The resource's node exists, so the first create is the lock node's. */
	assert_int_equal(test_zk_create(zk, "/dlock", ""), 0);
	assert_int_equal(test_zk_create(zk, "/dlock/lost-create", ""), 0);
	assert_int_equal(dlock_client_new(via, &a), DLOCK_OK);
	assert_int_equal(dlock_lock_new(a, "lost-create-warm", &warm), DLOCK_OK);
	assert_int_equal(dlock_lock_new(a, "lost-create", &la), DLOCK_OK);
	/* A session first, so that what follows is one create. */
	assert_int_equal(dlock_acquire(warm, 10000), DLOCK_OK);
	assert_int_equal(dlock_release(warm), DLOCK_OK);

	test_proxy_admit_mode(proxy, TEST_PROXY_REFUSE);
	test_proxy_drop_replies(proxy, "create2", 1, true);
	started_ms = test_now_ms();
	assert_int_equal(dlock_acquire(la, 1500), DLOCK_ETIMEDOUT);
	took_ms = test_now_ms() - started_ms;
	print_message("acquire gave up after %" PRId64 " ms\n", took_ms);
	assert_true(took_ms >= 1400 && took_ms <= 1500 + test_slack(1000));
	assert_int_equal(test_proxy_dropped(proxy), 1);
	/* The create did happen: its node is there, with nobody's name on it. */
	assert_int_equal(test_zk_count_children(zk, "/dlock/lost-create"), 1);

	reconnect_ms = test_now_ms();
	test_proxy_admit_mode(proxy, TEST_PROXY_ADMIT);
	assert_true(test_zk_wait_children(zk, "/dlock/lost-create", 0, 8000));
	print_message("orphan deleted %" PRId64 " ms after connections were admitted again\n",
	              test_now_ms() - reconnect_ms);

	assert_int_equal(dlock_client_new(direct, &b), DLOCK_OK);
	assert_int_equal(dlock_lock_new(b, "lost-create", &lb), DLOCK_OK);
	assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lb), DLOCK_OK);
	/* and the first client still works on its session */
	assert_int_equal(dlock_acquire(la, 10000), DLOCK_OK);
	assert_int_equal(dlock_release(la), DLOCK_OK);

	dlock_lock_free(lb);
	dlock_lock_free(la);
	dlock_lock_free(warm);
	dlock_client_free(b);
	dlock_client_free(a);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_proxy_stop(proxy);
	test_zk_stop(zk);
	g_free(via);
	g_free(direct);
}

/* ---- a waiter's session across a short disconnection ----------------- */

/*
 * A session used only by a waiter sits idle (no request of its own) for
 * longer than the session timeout, then its connection drops for a
 * moment.  The server kept the session all along, so the waiter keeps
 * its place in the queue: when the holder releases, the waiter is
 * granted at once, before a client that queued after it.
 */
static void test_waiter_keeps_its_place_across_a_short_disconnection(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, zk->servers[0].port);
	char *via = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=2s", test_proxy_port(proxy));
	char *direct = test_zk_uri(zk, "?session-timeout=8s");
	dlock_client *holder, *waiter, *late;
	dlock_lock *lh, *lw, *ll;
	bg_acquire wjob, ljob;
	char **before;
	char *wnode, *wpath;
	int64_t released_ms;

	assert_int_equal(dlock_client_new(direct, &holder), DLOCK_OK);
	assert_int_equal(dlock_client_new(via, &waiter), DLOCK_OK);
	assert_int_equal(dlock_client_new(direct, &late), DLOCK_OK);
	assert_int_equal(dlock_lock_new(holder, "idle-waiter", &lh), DLOCK_OK);
	assert_int_equal(dlock_lock_new(waiter, "idle-waiter", &lw), DLOCK_OK);
	assert_int_equal(dlock_lock_new(late, "idle-waiter", &ll), DLOCK_OK);
	/* Acquired on threads of their own, released from here. */
	assert_int_equal(dlock_lock_set_owner(lw, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(ll, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_acquire(lh, 10000), DLOCK_OK);

	before = test_zk_children(zk, "/dlock/idle-waiter");
	bg_acquire_start(&wjob, lw, 60000);
	assert_true(test_zk_wait_children(zk, "/dlock/idle-waiter", 2, 10000));
	wnode = the_other_child(zk, "/dlock/idle-waiter", before);
	wpath = g_strconcat("/dlock/idle-waiter/", wnode, NULL);
	g_strfreev(before);
	bg_acquire_start(&ljob, ll, 60000);
	assert_true(test_zk_wait_children(zk, "/dlock/idle-waiter", 3, 10000));

	/* Idle past the session timeout: the waiter has nothing to ask. */
	g_usleep(3000 * 1000);
	/* A short disconnection: every connection reset, reconnecting refused
	 * for a moment (far less than the session timeout). */
	test_proxy_admit_mode(proxy, TEST_PROXY_REFUSE);
	test_proxy_reset_all(proxy);
	g_usleep(300 * 1000);
	test_proxy_admit_mode(proxy, TEST_PROXY_ADMIT);
	assert_true(test_wait_until(proxy_accepted_two, proxy, 10000)); /* connected again */
	g_usleep(300 * 1000);

	/* The waiter's node is where it was: its session was not ended. */
	assert_true(test_zk_exists(zk, wpath));
	released_ms = test_now_ms();
	assert_int_equal(dlock_release(lh), DLOCK_OK);
	assert_true(test_wait_until(bg_acquire_done, &wjob, 3000));
	print_message("waiter granted %" PRId64 " ms after the release\n", wjob.done_ms - released_ms);
	assert_int_equal(wjob.rc, DLOCK_OK);
	assert_true(wjob.done_ms - released_ms <= test_slack(1000));
	assert_false(bg_acquire_done(&ljob)); /* the later client waits its turn */
	assert_int_equal(dlock_release(lw), DLOCK_OK);
	assert_true(test_wait_until(bg_acquire_done, &ljob, 10000));
	assert_int_equal(ljob.rc, DLOCK_OK);
	assert_int_equal(dlock_release(ll), DLOCK_OK);
	pthread_join(wjob.thread, NULL);
	pthread_join(ljob.thread, NULL);

	dlock_lock_free(lh);
	dlock_lock_free(lw);
	dlock_lock_free(ll);
	dlock_client_free(holder);
	dlock_client_free(waiter);
	dlock_client_free(late);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_proxy_stop(proxy);
	test_zk_stop(zk);
	g_free(wnode);
	g_free(wpath);
	g_free(via);
	g_free(direct);
}

/* ---- a grant read after the connection dropped or the session ended --- */


typedef struct events {
	GMutex mu;
	int count[4];       /* by dlock_state */
} events;

static events worker_events;

static void record(dlock_lock *lock, dlock_state state, void *user_data)
{
	events *e = user_data;

	(void)lock;
	g_mutex_lock(&e->mu);
	if (state >= 0 && state < 4)
		e->count[state]++;
	g_mutex_unlock(&e->mu);
}

/* The hold `keep` reports each state as one line, "keep STATE MS" (MS:
 * CLOCK_MONOTONIC, the same as the test process's). */
static void print_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	char line[64];
	int len = snprintf(line, sizeof(line), "keep %d %" PRId64 "\n", (int)state, test_now_ms());

	(void)lock;
	(void)user_data;
	if (write(STDOUT_FILENO, line, (size_t)len) != len)
		abort();
}

static bool settled(void *arg)
{
	events *e = arg;
	bool done;

	g_mutex_lock(&e->mu);
	done = e->count[DLOCK_STATE_LOST] > 0 || e->count[DLOCK_STATE_RECONNECTED] > 0;
	g_mutex_unlock(&e->mu);
	return done;
}

/*
 * Hold `keep` (so that the session's own timer runs), print "held", then
 * acquire `wanted` (waiting up to 10 s) and print "acquire RC".  On a line
 * "report" from stdin, wait up to 5 s for LOST or RECONNECTED on `wanted`
 * and print "states S R L held=H": how many SUSPENDED, RECONNECTED and LOST
 * it reported, and whether it is held.
 */
static int worker_grant(const char *uri, const char *keep, const char *wanted)
{
	dlock_client *client;
	dlock_lock *lk, *lw;
	char line[64];
	int rc;

	g_mutex_init(&worker_events.mu);
	if (dlock_client_new(uri, &client) != DLOCK_OK || dlock_lock_new(client, keep, &lk) != DLOCK_OK ||
	    dlock_lock_new(client, wanted, &lw) != DLOCK_OK ||
	    dlock_lock_set_state_callback(lk, print_state, NULL) != DLOCK_OK ||
	    dlock_lock_set_state_callback(lw, record, &worker_events) != DLOCK_OK ||
	    dlock_acquire(lk, 10000) != DLOCK_OK)
		return 2;
	printf("held\n");
	fflush(stdout);
	rc = dlock_acquire(lw, 10000);
	printf("acquire %d\n", rc);
	fflush(stdout);
	if (fgets(line, sizeof(line), stdin) && strncmp(line, "report", 6) == 0) {
		test_wait_until(settled, &worker_events, 5000);
		g_mutex_lock(&worker_events.mu);
		printf("states %d %d %d held=%d\n", worker_events.count[DLOCK_STATE_SUSPENDED],
		       worker_events.count[DLOCK_STATE_RECONNECTED], worker_events.count[DLOCK_STATE_LOST],
		       dlock_held(lw));
		g_mutex_unlock(&worker_events.mu);
		fflush(stdout);
	}
	if (rc == DLOCK_OK)
		dlock_release(lw);
	dlock_release(lk);
	dlock_lock_free(lw);
	dlock_lock_free(lk);
	dlock_client_free(client);
	return 0;
}

/* Hold `keep`, print "held", and keep it until stdin ends. */
static int worker_keep(const char *uri, const char *keep)
{
	dlock_client *client;
	dlock_lock *lk;
	char line[64];

	if (dlock_client_new(uri, &client) != DLOCK_OK || dlock_lock_new(client, keep, &lk) != DLOCK_OK ||
	    dlock_lock_set_state_callback(lk, print_state, NULL) != DLOCK_OK ||
	    dlock_acquire(lk, 10000) != DLOCK_OK)
		return 2;
	printf("held\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	dlock_release(lk);
	dlock_lock_free(lk);
	dlock_client_free(client);
	return 0;
}

/* The next line from the worker that starts with prefix ("keep" lines
 * from its callback thread may come in between). */
static void read_reply(int fd, const char *prefix, char *line, size_t len)
{
	do
		assert_true(test_read_line(fd, line, len, 30000));
	while (!g_str_has_prefix(line, prefix));
}

static bool no_watch(void *arg)
{
	return test_zk_mntr(arg, 0, "zk_watch_count") == 0;
}

static bool one_watch(void *arg)
{
	return test_zk_mntr(arg, 0, "zk_watch_count") == 1;
}

typedef struct late_grant {
	test_zk *zk;
	test_proxy *proxy;
	char *direct;
	dlock_client *b;
	dlock_lock *lb;
	pid_t pid;
	int fd_in, fd_out;
} late_grant;

/*
 * The worker holds "<resource>-keep" and waits for <resource>, which we
 * hold.  We release while its requests are stalled in the proxy, so its
 * listing (which will grant it the lock) waits there; then we stop its
 * acquiring thread, let the listing through, and make sure the answer
 * has come.  The answer is now in the worker, unread by the thread that
 * will make a hold of it.
 */
static void late_grant_start(late_grant *g, const char *resource, const char *session_timeout)
{
	char *suffix = g_strdup_printf("?session-timeout=%s", session_timeout);
	char *via;
	char *keep = g_strconcat(resource, "-keep", NULL);
	char *dir = g_strconcat("/dlock/", resource, NULL);
	char line[128];

	g->zk = test_zk_start(1, 200, 20000);
	g->proxy = test_proxy_start_proto(TEST_PROXY_ZK, g->zk->servers[0].port);
	via = g_strdup_printf("zk://127.0.0.1:%d%s", test_proxy_port(g->proxy), suffix);
	g->direct = test_zk_uri(g->zk, "?session-timeout=8s");
	assert_int_equal(dlock_client_new(g->direct, &g->b), DLOCK_OK);
	assert_int_equal(dlock_lock_new(g->b, resource, &g->lb), DLOCK_OK);
	assert_int_equal(dlock_acquire(g->lb, 10000), DLOCK_OK);
	{
		const char *args[] = { "grant", via, keep, resource, NULL };

		g->pid = test_spawn_worker_io(args, &g->fd_in, &g->fd_out);
	}
	read_reply(g->fd_out, "held", line, sizeof(line));
	assert_true(test_zk_wait_children(g->zk, dir, 2, 10000));
	assert_true(test_wait_until(one_watch, g->zk, 10000)); /* its watch on our node is set */

	test_proxy_stall(g->proxy, TEST_PROXY_UP);
	assert_int_equal(dlock_release(g->lb), DLOCK_OK);
	assert_true(test_wait_until(no_watch, g->zk, 5000)); /* the worker's watch fired */
	g_usleep(200 * 1000); /* and its listing is kept in the proxy */
	test_thread_freeze(g->pid);
	test_proxy_unstall(g->proxy, TEST_PROXY_UP);
	g_usleep(300 * 1000); /* the answer reaches the worker */
	g_free(via);
	g_free(suffix);
	g_free(keep);
	g_free(dir);
}

static void late_grant_finish(late_grant *g)
{
	close(g->fd_in);
	assert_int_equal(test_wait_worker(g->pid), 0);
	close(g->fd_out);
	dlock_lock_free(g->lb);
	dlock_client_free(g->b);
	assert_int_equal(test_zk_leftover_nodes(g->zk, "/dlock"), 0);
	test_proxy_stop(g->proxy);
	test_zk_stop(g->zk);
	g_free(g->direct);
}

/*
 * The answer that grants a waiter the lock has come, but before its
 * acquiring thread reads it the session ends: the link stalls, the
 * client's own timer ends the session (LOST on its other hold), the server
 * expires it, and another client acquires.  The answer must not make a
 * hold on the ended session: the acquire does not return DLOCK_OK, or if
 * it does the hold is reported LOST.  Never two holders.
 */
static void test_grant_read_after_the_session_ended_is_not_a_hold(void **state)
{
	late_grant g;
	char line[128];
	int rc, suspended, reconnected, lost, held;

	late_grant_start(&g, "late-ended", "2s");
	test_proxy_stall(g.proxy, TEST_PROXY_BOTH);
	/* LOST on its other hold: its session has ended for it. */
	read_reply(g.fd_out, "keep 3", line, sizeof(line));
	/* The server has expired it too: we acquire. */
	assert_int_equal(dlock_acquire(g.lb, 20000), DLOCK_OK);
	test_proxy_unstall(g.proxy, TEST_PROXY_BOTH);
	test_thread_thaw(g.pid);

	read_reply(g.fd_out, "acquire ", line, sizeof(line));
	print_message("worker: %s\n", line);
	rc = atoi(line + 8);
	assert_true(test_write_str(g.fd_in, "report\n"));
	read_reply(g.fd_out, "states ", line, sizeof(line));
	print_message("worker: %s\n", line);
	assert_int_equal(sscanf(line, "states %d %d %d held=%d", &suspended, &reconnected, &lost, &held), 4);
	assert_true(rc != DLOCK_OK || (lost == 1 && held == 0));
	assert_true(dlock_held(g.lb));
	assert_int_equal(dlock_release(g.lb), DLOCK_OK);
	late_grant_finish(&g);
}

/*
 * The answer that grants a waiter the lock has come, but before its
 * acquiring thread reads it the connection drops (the session lives on).
 * The hold it makes is reported SUSPENDED at once, since it was made on
 * a disconnected session, and RECONNECTED once the client is back.
 */
static void test_grant_read_after_the_connection_dropped_is_suspended_at_once(void **state)
{
	late_grant g;
	char line[128];
	int suspended, reconnected, lost, held;

	late_grant_start(&g, "late-dropped", "6s");
	test_proxy_admit_mode(g.proxy, TEST_PROXY_REFUSE);
	test_proxy_reset_all(g.proxy);
	/* SUSPENDED on its other hold: the worker knows it is disconnected. */
	read_reply(g.fd_out, "keep 1", line, sizeof(line));
	test_thread_thaw(g.pid);
	read_reply(g.fd_out, "acquire ", line, sizeof(line));
	print_message("worker: %s\n", line);
	assert_string_equal(line, "acquire 0");
	test_proxy_admit_mode(g.proxy, TEST_PROXY_ADMIT);
	assert_true(test_write_str(g.fd_in, "report\n"));
	read_reply(g.fd_out, "states ", line, sizeof(line));
	print_message("worker: %s\n", line);
	assert_int_equal(sscanf(line, "states %d %d %d held=%d", &suspended, &reconnected, &lost, &held), 4);
	assert_int_equal(suspended, 1);
	assert_int_equal(reconnected, 1);
	assert_int_equal(lost, 0);
	assert_int_equal(held, 1);
	late_grant_finish(&g);
}

/* ---- a reconnection reported late ---------------------------------------- */

/*
 * The ZooKeeper client's completion thread of a worker that holds a lock
 * and has had no state event yet (so no callback thread): not the main
 * thread, and asleep on a futex without a timeout (the I/O thread sleeps
 * in poll, dlock's session thread on a futex with a deadline).
 */
static pid_t completion_thread(pid_t pid)
{
	char *dir = g_strdup_printf("/proc/%d/task", (int)pid);
	GDir *tasks = g_dir_open(dir, 0, NULL);
	const char *name;
	pid_t found = 0;
	int candidates = 0;

	assert_non_null(tasks);
	while ((name = g_dir_read_name(tasks))) {
		pid_t tid = (pid_t)atoi(name);
		char *path, *comm = NULL, *syscall = NULL;

		if (tid == pid)
			continue;
		path = g_strdup_printf("%s/%s/comm", dir, name);
		g_file_get_contents(path, &comm, NULL, NULL);
		g_free(path);
		path = g_strdup_printf("%s/%s/syscall", dir, name);
		g_file_get_contents(path, &syscall, NULL, NULL);
		g_free(path);
		if (comm && syscall && !g_str_has_prefix(comm, "dlock-")) {
			char **fields = g_strsplit(g_strstrip(syscall), " ", -1);

			/* futex (x86_64) without a timeout: a condition wait with
			 * no end, as the completion thread's; dlock's session
			 * thread always waits with a deadline. */
			if (g_strv_length(fields) > 4 && strcmp(fields[0], "202") == 0 &&
			    strcmp(fields[4], "0x0") == 0) {
				found = tid;
				candidates++;
			}
			g_strfreev(fields);
		}
		g_free(comm);
		g_free(syscall);
	}
	g_dir_close(tasks);
	g_free(dir);
	assert_int_equal(candidates, 1);
	return found;
}

typedef struct try_job {
	dlock_lock *lock;
} try_job;

static bool try_acquire(void *arg)
{
	return dlock_acquire(((try_job *)arg)->lock, 0) == DLOCK_OK;
}

/*
 * A holder's connection drops and the client reconnects at once, but the
 * reconnection is reported (processed by the client's completion thread)
 * only some time later, after which the link stalls for good.  The server
 * last heard from the holder at the reconnection, not when it was
 * reported, so the holder's LOST must come before the server can expire
 * the session and hand the lock to someone else.
 */
static void test_late_reported_reconnect_does_not_delay_lost(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, zk->servers[0].port);
	char *via = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=3s", test_proxy_port(proxy));
	char *direct = test_zk_uri(zk, "?session-timeout=8s");
	const char *args[] = { "keep", via, "late-reconnect", NULL };
	dlock_client *b;
	dlock_lock *lb;
	try_job job;
	char line[128];
	int64_t lost_ms, acquired_ms;
	int fd_in, fd_out;
	pid_t pid, completion;

	assert_int_equal(dlock_client_new(direct, &b), DLOCK_OK);
	assert_int_equal(dlock_lock_new(b, "late-reconnect", &lb), DLOCK_OK);
	pid = test_spawn_worker_io(args, &fd_in, &fd_out);
	read_reply(fd_out, "held", line, sizeof(line));
	g_usleep(1500 * 1000); /* a few keep-alive rounds */

	completion = completion_thread(pid);
	test_thread_freeze(completion);
	test_proxy_reset_all(proxy);
	/* The client reconnects to its session on its own (I/O) thread. */
	assert_true(test_wait_until(proxy_accepted_two, proxy, 5000));
	g_usleep(200 * 1000);
	test_proxy_stall(proxy, TEST_PROXY_BOTH);
	g_usleep(1000 * 1000);
	test_thread_thaw(completion);

	/* The server expires the session: we acquire. */
	job.lock = lb;
	assert_true(test_wait_until(try_acquire, &job, 20000));
	acquired_ms = test_now_ms();
	read_reply(fd_out, "keep 3 ", line, sizeof(line));
	lost_ms = g_ascii_strtoll(line + 7, NULL, 10);
	print_message("holder's LOST %" PRId64 " ms before our acquire\n", acquired_ms - lost_ms);
	assert_true(lost_ms < acquired_ms);

	assert_int_equal(dlock_release(lb), DLOCK_OK);
	test_proxy_unstall(proxy, TEST_PROXY_BOTH);
	close(fd_in);
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd_out);
	dlock_lock_free(lb);
	dlock_client_free(b);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_proxy_stop(proxy);
	test_zk_stop(zk);
	g_free(via);
	g_free(direct);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_answer_lost_then_deadline_leaves_no_node_after_reconnect),
		cmocka_unit_test(test_waiter_keeps_its_place_across_a_short_disconnection),
		cmocka_unit_test(test_grant_read_after_the_session_ended_is_not_a_hold),
		cmocka_unit_test(test_grant_read_after_the_connection_dropped_is_suspended_at_once),
		cmocka_unit_test(test_late_reported_reconnect_does_not_delay_lost),
	};

	test_init(argv[0]);
	if (argc >= 6 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "grant") == 0)
		return worker_grant(argv[3], argv[4], argv[5]);
	if (argc >= 5 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "keep") == 0)
		return worker_keep(argv[3], argv[4]);
	return test_zk_finish(cmocka_run_group_tests_name("zk-faults", tests, NULL, NULL));
}
