/* SPDX-License-Identifier: MIT */
/*
 * ZooKeeper sessions under faults: a holder paused until the server expires
 * its session, a server
 * frozen past the session timeout, an ensemble losing its leader while
 * locks are held and contended, and a follower cut off from its leader
 * that still answers its clients.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
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
#include "test-resume.h"
#include "test-zk.h"

/* ---- state callback recording ------------------------------------------ */

typedef struct events {
	GMutex mu;
	int count;
	dlock_state states[16];
	int64_t at_ms[16];
} events;

static void record(dlock_lock *lock, dlock_state state, void *user_data)
{
	events *e = user_data;

	g_mutex_lock(&e->mu);
	if (e->count < 16) {
		e->states[e->count] = state;
		e->at_ms[e->count] = test_now_ms();
		e->count++;
	}
	g_mutex_unlock(&e->mu);
}

typedef struct seen_state {
	events *e;
	dlock_state state;
} seen_state;

/* When state was first reported, or -1. */
static int64_t first_at(events *e, dlock_state state)
{
	int64_t at = -1;

	g_mutex_lock(&e->mu);
	for (int i = 0; i < e->count && at < 0; i++)
		if (e->states[i] == state)
			at = e->at_ms[i];
	g_mutex_unlock(&e->mu);
	return at;
}

static bool has_state(void *arg)
{
	seen_state *s = arg;

	return first_at(s->e, s->state) >= 0;
}

typedef struct empty_dir {
	test_zk *zk;
	const char *path;
} empty_dir;

static bool is_empty(void *arg)
{
	empty_dir *d = arg;

	return test_zk_count_children(d->zk, d->path) == 0;
}

/* ---- tests ------------------------------------------------------------ */

/* ---- worker: a holder that gets paused ---- */

static events worker_events;

/*
 * Acquire and print "held TOKEN"; then, for each line on stdin:
 * "release" waits (up to 10 s) for LOST and prints "release RC held=H
 * lost=L" (L: whether the callback reported LOST);
 * "try" prints "try RC" for a try; "acquire" prints "acquire RC" for a
 * 10 s acquire, then releases.
 */
static int worker_pause(const char *uri, const char *resource)
{
	seen_state lost = { &worker_events, DLOCK_STATE_LOST };
	dlock_client *client;
	dlock_lock *lock;
	char line[64];

	g_mutex_init(&worker_events.mu);
	if (dlock_client_new(uri, &client) != DLOCK_OK || dlock_lock_new(client, resource, &lock) != DLOCK_OK ||
	    dlock_lock_set_state_callback(lock, record, &worker_events) != DLOCK_OK ||
	    dlock_acquire(lock, 10000) != DLOCK_OK)
		return 2;
	printf("held %" PRIu64 "\n", dlock_fencing_token(lock));
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "release", 7) == 0) {
			bool saw_lost = test_wait_until(has_state, &lost, 10000);

			printf("release %d held=%d lost=%d\n", dlock_release(lock), dlock_held(lock), saw_lost);
		} else if (strncmp(line, "try", 3) == 0) {
			printf("try %d\n", dlock_acquire(lock, 0));
		} else if (strncmp(line, "acquire", 7) == 0) {
			int rc = dlock_acquire(lock, 10000);

			printf("acquire %d\n", rc);
			if (rc == DLOCK_OK)
				dlock_release(lock);
		}
		fflush(stdout);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	return 0;
}

/*
 * A holder paused past its session timeout while another process acquires
 * does not see the lock as its own for a moment after it resumes: the
 * session's end is judged by the clock when asked, not when the session
 * thread next wakes.  The first dlock_held() after the pause returns 0,
 * the release right after returns DLOCK_ELOST, and LOST is reported once.
 */
static void test_resumed_holder_sees_lost_at_once_past_its_session(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	char *u = test_zk_uri(zk, "?session-timeout=2s");

	test_resume_rounds(u, "sess/resumed", 0, 4);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_zk_stop(zk);
	g_free(u);
}

/*
 * A holder process paused (SIGSTOP: a GC or VM pause) past its session
 * timeout: the server expires the session and deletes the node, another
 * process acquires meanwhile, and once the holder runs again it reports
 * LOST, its release returns DLOCK_ELOST, and it can acquire again later
 * on a new session.
 */
static void test_paused_holder_session_expires_and_it_recovers(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	char *u = test_zk_uri(zk, "?session-timeout=2s");
	const char *args[] = { "pause", u, "sess/expired", NULL };
	dlock_client *b;
	dlock_lock *lb;
	char line[128];
	int64_t paused_ms, waited_ms;
	uint64_t token;
	int fd_out, fd_in;
	pid_t pid = test_spawn_worker_io(args, &fd_in, &fd_out);

	assert_true(test_read_line(fd_out, line, sizeof(line), 20000));
	assert_true(g_str_has_prefix(line, "held "));
	token = g_ascii_strtoull(line + 5, NULL, 10);
	assert_int_equal(dlock_client_new(u, &b), DLOCK_OK);
	assert_int_equal(dlock_lock_new(b, "sess/expired", &lb), DLOCK_OK);

	kill(pid, SIGSTOP);
	paused_ms = test_now_ms();
	assert_int_equal(dlock_acquire(lb, 20000), DLOCK_OK);
	waited_ms = test_now_ms() - paused_ms;
	print_message("acquired %" PRId64 " ms into the holder's pause\n", waited_ms);
	assert_true(waited_ms >= 1000);
	assert_true(dlock_fencing_token(lb) > token);

	kill(pid, SIGCONT);
	assert_true(test_write_str(fd_in, "release\n"));
	assert_true(test_read_line(fd_out, line, sizeof(line), 20000));
	assert_string_equal(line, "release -5 held=0 lost=1"); /* LOST reported, then DLOCK_ELOST */
	assert_true(test_write_str(fd_in, "try\n"));
	assert_true(test_read_line(fd_out, line, sizeof(line), 20000));
	assert_string_equal(line, "try -2"); /* DLOCK_EBUSY: we hold it */
	assert_int_equal(dlock_release(lb), DLOCK_OK);
	assert_true(test_write_str(fd_in, "acquire\n"));
	assert_true(test_read_line(fd_out, line, sizeof(line), 20000));
	assert_string_equal(line, "acquire 0");
	close(fd_in);
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd_out);

	dlock_lock_free(lb);
	dlock_client_free(b);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_zk_stop(zk);
	g_free(u);
}

/*
 * A frozen server answers nothing.  The client reports SUSPENDED when its
 * connection times out, and LOST from its own timer before the session
 * timeout has passed since the server last heard from it, while the
 * server is still frozen.  Once the server runs again it expires the
 * session, so our node goes and others acquire.
 */
static void test_frozen_server_gives_suspended_then_lost_before_the_timeout(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	char *u = test_zk_uri(zk, "?session-timeout=2s");
	events ev = { 0 };
	seen_state lost = { &ev, DLOCK_STATE_LOST };
	empty_dir gone = { zk, "/dlock/sess/frozen" };
	dlock_client *a, *b;
	dlock_lock *la, *lb;
	int64_t stopped_ms, suspended_ms, lost_ms;

	g_mutex_init(&ev.mu);
	assert_int_equal(dlock_client_new(u, &a), DLOCK_OK);
	assert_int_equal(dlock_lock_new(a, "sess/frozen", &la), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(la, record, &ev), DLOCK_OK);
	assert_int_equal(dlock_acquire(la, 10000), DLOCK_OK);
	g_usleep(1000 * 1000); /* a few keep-alive rounds */

	test_zk_signal(zk, 0, SIGSTOP);
	stopped_ms = test_now_ms();
	assert_true(test_wait_until(has_state, &lost, 10000));
	suspended_ms = first_at(&ev, DLOCK_STATE_SUSPENDED) - stopped_ms;
	lost_ms = first_at(&ev, DLOCK_STATE_LOST) - stopped_ms;
	print_message("SUSPENDED %" PRId64 " ms, LOST %" PRId64 " ms after the freeze\n", suspended_ms,
	              lost_ms);
	assert_true(first_at(&ev, DLOCK_STATE_SUSPENDED) >= 0);
	assert_true(suspended_ms <= lost_ms);
	/* The server last heard from us before it froze. */
	assert_true(lost_ms < 2000);
	assert_int_equal(dlock_held(la), 0);
	assert_int_equal(dlock_release(la), DLOCK_ELOST);

	test_zk_signal(zk, 0, SIGCONT);
	assert_true(test_wait_until(is_empty, &gone, 20000));
	assert_int_equal(dlock_client_new(u, &b), DLOCK_OK);
	assert_int_equal(dlock_lock_new(b, "sess/frozen", &lb), DLOCK_OK);
	assert_int_equal(dlock_acquire(lb, 10000), DLOCK_OK);
	assert_int_equal(dlock_release(lb), DLOCK_OK);
	/* and the first client works again on a new session */
	assert_int_equal(dlock_acquire(la, 10000), DLOCK_OK);
	assert_int_equal(dlock_release(la), DLOCK_OK);

	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_free(a);
	dlock_client_free(b);
	test_zk_stop(zk);
	g_mutex_clear(&ev.mu);
	g_free(u);
}

/* ---- the ensemble ---- */

#define ENS_THREADS 4

typedef struct ens_job {
	const char *uri;
	volatile int stop;
	int inside;      /* threads inside the critical section now */
	int overlaps;
	int rounds;
	int failures;
	uint64_t last_token;
	GMutex mu;
} ens_job;

static void *ens_thread(void *data)
{
	ens_job *job = data;
	dlock_client *client;
	dlock_lock *lock;

	if (dlock_client_new(job->uri, &client) != DLOCK_OK ||
	    dlock_lock_new(client, "ens/counter", &lock) != DLOCK_OK) {
		__atomic_add_fetch(&job->failures, 1, __ATOMIC_SEQ_CST);
		return NULL;
	}
	while (!job->stop) {
		int rc = dlock_acquire(lock, 30000);

		if (rc != DLOCK_OK) {
			fprintf(stderr, "ensemble acquire: %s\n", dlock_last_error_message());
			__atomic_add_fetch(&job->failures, 1, __ATOMIC_SEQ_CST);
			continue;
		}
		if (__atomic_add_fetch(&job->inside, 1, __ATOMIC_SEQ_CST) != 1)
			__atomic_add_fetch(&job->overlaps, 1, __ATOMIC_SEQ_CST);
		g_mutex_lock(&job->mu);
		if (dlock_fencing_token(lock) <= job->last_token)
			job->overlaps++;
		job->last_token = dlock_fencing_token(lock);
		job->rounds++;
		g_mutex_unlock(&job->mu);
		g_usleep(2000);
		__atomic_sub_fetch(&job->inside, 1, __ATOMIC_SEQ_CST);
		rc = dlock_release(lock);
		/* A release during the election may find the node already
		 * gone only if the session ended, which must not happen. */
		if (rc != DLOCK_OK)
			__atomic_add_fetch(&job->failures, 1, __ATOMIC_SEQ_CST);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	return NULL;
}

typedef struct held_again {
	dlock_lock *lock;
} held_again;

static bool is_held(void *arg)
{
	return dlock_held(((held_again *)arg)->lock) == 1;
}

static void test_leader_kill_keeps_holds_and_exclusion(void **state)
{
	test_zk *zk = test_zk_start(3, 200, 30000);
	char *u = test_zk_uri(zk, "?session-timeout=10s");
	ens_job job = { 0 };
	events ev = { 0 };
	pthread_t threads[ENS_THREADS];
	dlock_client *client;
	dlock_lock *lock;
	held_again again;
	uint64_t token;
	int leader, rounds_at_kill;

	g_mutex_init(&ev.mu);
	g_mutex_init(&job.mu);
	job.uri = u;
	assert_int_equal(dlock_client_new(u, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "ens/held", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(lock, record, &ev), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	token = dlock_fencing_token(lock);
	for (int i = 0; i < ENS_THREADS; i++)
		pthread_create(&threads[i], NULL, ens_thread, &job);
	g_usleep(1000 * 1000);

	leader = test_zk_leader(zk, 10000);
	assert_true(leader >= 0);
	g_mutex_lock(&job.mu);
	rounds_at_kill = job.rounds;
	g_mutex_unlock(&job.mu);
	test_zk_signal(zk, leader, SIGKILL);
	assert_true(test_zk_leader(zk, 20000) >= 0);
	g_usleep(2000 * 1000); /* contention goes on under the new leader */

	again.lock = lock;
	assert_true(test_wait_until(is_held, &again, 15000));
	assert_int_equal(first_at(&ev, DLOCK_STATE_LOST), -1);
	assert_int_equal(dlock_fencing_token(lock), token);

	job.stop = 1;
	for (int i = 0; i < ENS_THREADS; i++)
		pthread_join(threads[i], NULL);
	print_message("rounds: %d before the kill, %d in all; events on the held lock: %d\n",
	              rounds_at_kill, job.rounds, ev.count);
	assert_int_equal(job.overlaps, 0);
	assert_int_equal(job.failures, 0);
	assert_true(job.rounds > rounds_at_kill);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);

	test_zk_restart_server(zk, leader, false);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_zk_stop(zk);
	g_mutex_clear(&ev.mu);
	g_mutex_clear(&job.mu);
	g_free(u);
}

/* ---- a follower cut off from its leader -------------------------------- */

/* The threads of server i's JVM by which it follows its leader
 * ("QuorumPeer[myid=N]..." and its listener), held still with ptrace: the
 * leader hears nothing more from it, while its client threads go on
 * answering reads from what it knew, as a follower does for its sync
 * limit when the network between it and the leader fails. */
static GArray *cut_off_from_leader(test_zk *zk, int i)
{
	GArray *tids = g_array_new(FALSE, FALSE, sizeof(pid_t));
	char *dir = g_strdup_printf("/proc/%d/task", (int)zk->servers[i].pid);
	GDir *d = g_dir_open(dir, 0, NULL);
	const char *name;

	assert_non_null(d);
	while ((name = g_dir_read_name(d))) {
		char *path = g_strdup_printf("%s/%s/comm", dir, name);
		char *comm = NULL;

		if (g_file_get_contents(path, &comm, NULL, NULL) && g_str_has_prefix(comm, "QuorumPeer")) {
			pid_t tid = (pid_t)atoi(name);
			int status;

			assert_int_equal(ptrace(PTRACE_SEIZE, tid, NULL, NULL), 0);
			assert_int_equal(ptrace(PTRACE_INTERRUPT, tid, NULL, NULL), 0);
			assert_int_equal(waitpid(tid, &status, __WALL), tid);
			g_array_append_val(tids, tid);
		}
		g_free(comm);
		g_free(path);
	}
	g_dir_close(d);
	g_free(dir);
	assert_true(tids->len > 0);
	return tids;
}

static void reconnect_to_leader(GArray *tids)
{
	for (guint k = 0; k < tids->len; k++)
		ptrace(PTRACE_DETACH, g_array_index(tids, pid_t, k), NULL, 0);
	g_array_unref(tids);
}

/*
 * A holder connected to a follower that lost its leader: the leader
 * expires the holder's session a session timeout later and another
 * client, on another server, is granted the lock.  The follower still
 * answers reads, so answers to reads prove nothing of the session: the
 * holder must have been told LOST by the time the other is granted.
 */
static void test_holder_on_a_follower_cut_off_from_its_leader_is_lost_before_another_holds(void **state)
{
	test_zk *zk = test_zk_start(3, 200, 30000);
	int leader = test_zk_leader(zk, 10000);
	int follower = (leader + 1) % 3, other = (leader + 2) % 3;
	char *u1 = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=2s", zk->servers[follower].port);
	char *u2 = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=2s", zk->servers[other].port);
	dlock_client *c1, *c2;
	dlock_lock *held, *next;
	events ev = { 0 };
	seen_state lost;
	GArray *frozen;
	int64_t cut_ms, granted_ms, lost_ms;
	int held_at_grant;

	(void)state;
	assert_true(leader >= 0);
	g_mutex_init(&ev.mu);
	assert_int_equal(dlock_client_new(u1, &c1), DLOCK_OK);
	assert_int_equal(dlock_client_new(u2, &c2), DLOCK_OK);
	assert_int_equal(dlock_lock_new(c1, "cut/off", &held), DLOCK_OK);
	assert_int_equal(dlock_lock_new(c2, "cut/off", &next), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(held, record, &ev), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 10000), DLOCK_OK);
	g_usleep(1000 * 1000); /* a few keep-alives */

	frozen = cut_off_from_leader(zk, follower);
	cut_ms = test_now_ms();
	assert_int_equal(dlock_acquire(next, 20000), DLOCK_OK);
	granted_ms = test_now_ms();
	held_at_grant = dlock_held(held);
	lost_ms = first_at(&ev, DLOCK_STATE_LOST);
	print_message("cut off at 0 ms; the other client granted at %" PRId64 " ms; the holder %s\n",
	              granted_ms - cut_ms, held_at_grant ? "still held" : "no longer held");
	assert_int_equal(held_at_grant, 0);
	/* Reported too (the report may come a moment after the clock's verdict). */
	lost.e = &ev;
	lost.state = DLOCK_STATE_LOST;
	assert_true(lost_ms >= 0 || test_wait_until(has_state, &lost, 10000));

	reconnect_to_leader(frozen);
	assert_int_equal(dlock_release(next), DLOCK_OK);
	dlock_release(held);
	dlock_lock_free(held);
	dlock_lock_free(next);
	dlock_client_free(c1);
	dlock_client_free(c2);
	test_zk_stop(zk);
	g_mutex_clear(&ev.mu);
	g_free(u1);
	g_free(u2);
}

/* ---- the log callback and the session's locks ------------------------- */

/* A log callback that blocks on the first "disconnected" message, for
 * up to 3 s, as a callback writing to a stalled pipe would. */
typedef struct blocking_log {
	int blocked; /* atomic: it is blocking now */
	int done;    /* atomic: it has returned */
} blocking_log;

static void block_on_disconnect(dlock_log_level level, const char *message, void *user_data)
{
	blocking_log *b = user_data;
	int64_t until = test_now_ms() + 3000;

	(void)level;
	if (!strstr(message, "disconnected") || g_atomic_int_get(&b->done))
		return;
	g_atomic_int_set(&b->blocked, 1);
	while (test_now_ms() < until)
		g_usleep(10 * 1000);
	g_atomic_int_set(&b->blocked, 0);
	g_atomic_int_set(&b->done, 1);
}

static bool log_blocked(void *arg)
{
	return g_atomic_int_get(&((blocking_log *)arg)->blocked) != 0;
}

/*
 * The client's log callback blocks while it is told that the session was
 * disconnected.  The session's locks are not held meanwhile: a release of
 * a hold on that session returns at once (the delete left to the
 * background), and once the server is back the lock is free.
 */
static void test_a_blocking_log_callback_stalls_no_release(void **state)
{
	test_zk *z = test_zk_start(1, 200, 20000);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, z->servers[0].port);
	char *via = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=8s", test_proxy_port(proxy));
	dlock_client *client;
	dlock_lock *lock;
	blocking_log b = { 0 };
	int64_t t0, took;

	assert_int_equal(dlock_client_new(via, &client), DLOCK_OK);
	assert_int_equal(dlock_client_set_log_callback(client, DLOCK_LOG_WARNING, block_on_disconnect, &b),
	                 DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "log-blocks", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);

	test_proxy_admit_mode(proxy, TEST_PROXY_REFUSE);
	test_proxy_reset_all(proxy);
	assert_true(test_wait_until(log_blocked, &b, 10000));
	t0 = test_now_ms();
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	took = test_now_ms() - t0;
	print_message("release while the log callback blocks: %" PRId64 " ms\n", took);
	assert_true(took <= test_slack(500));

	test_proxy_admit_mode(proxy, TEST_PROXY_ADMIT);
	assert_true(test_zk_wait_children(z, "/dlock/log-blocks", 0, 15000));
	dlock_lock_free(lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	test_zk_stop(z);
	g_free(via);
}

/* ---- two servers, one of them down -------------------------------------- */

typedef struct state_count {
	events *e;
	dlock_state state;
	int n;
} state_count;

static bool reported_n(void *arg)
{
	state_count *c = arg;
	int n = 0;

	g_mutex_lock(&c->e->mu);
	for (int i = 0; i < c->e->count; i++)
		n += c->e->states[i] == c->state;
	g_mutex_unlock(&c->e->mu);
	return n >= c->n;
}

/*
 * Two servers, one that refuses connections and one behind the proxy: a
 * holder whose connection drops (the proxy resets it) comes back each
 * time, to the live server, long before its session could end -- the
 * client never gets stuck trying the dead server alone.
 */
static void test_two_servers_one_down_every_drop_reconnects(void **state)
{
	test_zk *z = test_zk_start(1, 200, 20000);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, z->servers[0].port);
	int closed_fd, closed = test_closed_port(&closed_fd);
	char *uri = g_strdup_printf("zk://127.0.0.1:%d,127.0.0.1:%d?session-timeout=8s", closed,
	                            test_proxy_port(proxy));
	dlock_client *client;
	dlock_lock *lock;
	events ev = { 0 };

	g_mutex_init(&ev.mu);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "two-servers", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(lock, record, &ev), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	for (int i = 1; i <= 6; i++) {
		state_count back = { &ev, DLOCK_STATE_RECONNECTED, i };

		test_proxy_reset_all(proxy);
		if (!test_wait_until(reported_n, &back, 4000))
			fail_msg("drop %d: no RECONNECTED within 4 s", i);
	}
	assert_int_equal(first_at(&ev, DLOCK_STATE_LOST), -1);
	assert_int_equal(dlock_held(lock), 1);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	close(closed_fd);
	test_proxy_stop(proxy);
	test_zk_stop(z);
	g_free(uri);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_paused_holder_session_expires_and_it_recovers),
		cmocka_unit_test(test_resumed_holder_sees_lost_at_once_past_its_session),
		cmocka_unit_test(test_frozen_server_gives_suspended_then_lost_before_the_timeout),
		cmocka_unit_test(test_leader_kill_keeps_holds_and_exclusion),
		cmocka_unit_test(test_holder_on_a_follower_cut_off_from_its_leader_is_lost_before_another_holds),
		cmocka_unit_test(test_a_blocking_log_callback_stalls_no_release),
		cmocka_unit_test(test_two_servers_one_down_every_drop_reconnects),
	};

	test_init(argv[0]);
	if (argc >= 5 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "pause") == 0)
		return worker_pause(argv[3], argv[4]);
	if (argc >= 7 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "resume") == 0)
		return test_resume_worker(argv[3], argv[4], atoll(argv[5]), atoi(argv[6]));
	return test_zk_finish(cmocka_run_group_tests_name("zk-session", tests, NULL, NULL));
}
