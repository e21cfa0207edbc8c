/* SPDX-License-Identifier: MIT */
/*
 * The file backend's waiting: a release wakes one waiter, not all of them;
 * a waiter that times out or is canceled leaves nothing behind (no
 * descriptor, no thread, no file) and the next waiter still gets the lock;
 * a holder killed while waiters sleep is still found.
 */
#include <dirent.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-util.h"

#define WAITERS 24

static char *dir;
static char *uri;

/* ---- observing threads and the process -------------------------------- */

/* Voluntary context switches of thread tid: one per time it went to sleep. */
static long voluntary_switches(int tid)
{
	char *path = g_strdup_printf("/proc/self/task/%d/status", tid);
	char *text = NULL;
	const char *p;
	long n = -1;

	if (g_file_get_contents(path, &text, NULL, NULL) && (p = strstr(text, "\nvoluntary_ctxt_switches:")))
		n = strtol(p + strlen("\nvoluntary_ctxt_switches:"), NULL, 10);
	g_free(text);
	g_free(path);
	return n;
}

/* Only lock files ("r-" or "h-" names) in the lock directory. */
static void assert_only_lock_files(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	assert_non_null(d);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		print_message("lock directory: %s\n", e->d_name);
		assert_true(g_str_has_prefix(e->d_name, "r-") || g_str_has_prefix(e->d_name, "h-"));
	}
	closedir(d);
}

/* ---- waiter threads ----------------------------------------------------- */

typedef struct waiter {
	GThread *thread;
	dlock_lock *lock;
	int64_t wait_ms;
	atomic_int tid;  /* set before it starts waiting */
	atomic_int rc;   /* 1 until its acquire returns */
	atomic_llong done_ms;
	atomic_ullong token; /* its fencing token, read on its own thread */
	int64_t hold_us;     /* how long it holds before releasing */
	bool keep;           /* or it keeps the lock */
	int order;           /* its place among the grants (grant_seq) */
} waiter;

static atomic_int grant_seq;
static GMutex park_mu;
static GCond park_cond;
static bool parked_go;

static gpointer waiter_main(gpointer data)
{
	waiter *w = data;
	int rc;

	atomic_store(&w->tid, (int)syscall(SYS_gettid));
	rc = dlock_acquire(w->lock, w->wait_ms);
	atomic_store(&w->done_ms, test_now_ms());
	if (rc == DLOCK_OK) {
		w->order = atomic_fetch_add(&grant_seq, 1);
		atomic_store(&w->token, dlock_fencing_token(w->lock));
		g_usleep(w->hold_us);
	}
	if (rc == DLOCK_OK && !w->keep && dlock_release(w->lock) != DLOCK_OK)
		rc = DLOCK_EBACKEND; /* not an acquire's result: fails the test */
	atomic_store(&w->rc, rc);
	/* Stay alive, asleep, so that its context switches can still be read. */
	g_mutex_lock(&park_mu);
	while (!parked_go)
		g_cond_wait(&park_cond, &park_mu);
	g_mutex_unlock(&park_mu);
	return NULL;
}

static void waiter_start(waiter *w, dlock_client *client, const char *resource, int64_t wait_ms)
{
	assert_int_equal(dlock_lock_new(client, resource, &w->lock), DLOCK_OK);
	w->wait_ms = wait_ms;
	atomic_store(&w->tid, 0);
	atomic_store(&w->rc, 1);
	w->thread = g_thread_new("test-waiter", waiter_main, w);
}

static void waiter_join(waiter *w)
{
	g_mutex_lock(&park_mu);
	parked_go = true;
	g_cond_broadcast(&park_cond);
	g_mutex_unlock(&park_mu);
	g_thread_join(w->thread);
	dlock_lock_free(w->lock);
}

typedef struct waiters {
	waiter *w;
	int n;
} waiters;

/* Every waiter is asleep inside acquire (or parked after it). */
static bool all_asleep(void *arg)
{
	const waiters *ws = arg;

	for (int i = 0; i < ws->n; i++) {
		int tid = atomic_load(&ws->w[i].tid);

		if (tid == 0 || !test_thread_sleeps(tid))
			return false;
	}
	return true;
}

static bool all_returned(void *arg)
{
	const waiters *ws = arg;

	for (int i = 0; i < ws->n; i++)
		if (atomic_load(&ws->w[i].rc) == 1)
			return false;
	return all_asleep(arg);
}

static long total_switches(const waiters *ws)
{
	long sum = 0;

	for (int i = 0; i < ws->n; i++)
		sum += voluntary_switches(atomic_load(&ws->w[i].tid));
	return sum;
}

/* ---- the log: tries a wake-up made in vain ------------------------------- */

static atomic_int busy_tries, wasted_wakes, no_futex;

static void count_tries(dlock_log_level level, const char *message, void *user_data)
{
	if (strstr(message, "no futex"))
		atomic_fetch_add(&no_futex, 1);
	if (strstr(message, "busy although woken"))
		atomic_fetch_add(&wasted_wakes, 1);
	else if (strstr(message, ": busy"))
		atomic_fetch_add(&busy_tries, 1);
}

/* Without futex_waitv (Linux before 5.16, or valgrind, which does not
 * know the call) waiters fall back to inotify, which wakes them all: what
 * a test of the futex cannot assert.  Under valgrind (scripts/test.sh sets
 * DLOCK_TEST_NO_FUTEX=valgrind for that run) the test is skipped, saying
 * so; anywhere else a missing futex is a failure, never a quiet skip. */
static void skip_without_futex(void)
{
	const char *why = getenv("DLOCK_TEST_NO_FUTEX");

	if (atomic_load(&no_futex) == 0)
		return;
	if (!why || !*why)
		fail_msg("no futex_waitv here (see the log), so waiters fell back to inotify; "
		         "set DLOCK_TEST_NO_FUTEX to the reason to skip this test instead");
	print_message("no futex here (%s): waiters fall back to inotify\n", why);
	skip();
}

/* Join the waiters and free the holder and the clients, then skip the
 * test if the waiters had no futex: what remains to assert needs it. */
static void end_group(const waiters *ws, dlock_lock *holder, dlock_client *client,
                      dlock_client *holder_client)
{
	for (int i = 0; i < ws->n; i++)
		waiter_join(&ws->w[i]);
	dlock_lock_free(holder);
	dlock_client_free(client);
	dlock_client_free(holder_client);
	skip_without_futex();
}

/* ---- tests ------------------------------------------------------------ */

/*
 * WAITERS threads wait, each on its own handle (its own open file
 * description); each holds 3 ms and releases, so one release of the
 * holder starts a chain of WAITERS handoffs, slow enough for the others
 * to fall asleep again between two.  Woken by every release, as with
 * inotify on the lock file, the waiters would sleep and wake again about
 * WAITERS * WAITERS / 2 times in all; woken one per release, about once
 * each (parked after its hold), plus a nap now and then.
 */
static void test_one_release_wakes_one_waiter(void **state)
{
	dlock_client *holder_client, *client;
	dlock_lock *holder;
	waiter w[WAITERS] = { 0 };
	waiters ws = { w, WAITERS };
	long before, after;
	int wasted;

	parked_go = false;
	assert_int_equal(dlock_client_new(uri, &holder_client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	dlock_client_set_log_callback(client, DLOCK_LOG_DEBUG, count_tries, NULL);
	assert_int_equal(dlock_lock_new(holder_client, "wake/one", &holder), DLOCK_OK);
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	for (int i = 0; i < WAITERS; i++) {
		w[i].hold_us = 3000;
		waiter_start(&w[i], client, "wake/one", 60000);
	}
	assert_true(test_wait_until(all_asleep, &ws, 10000));
	/* Past the start of any backoff: only releases should wake them now. */
	g_usleep(300 * 1000);
	assert_true(test_wait_until(all_asleep, &ws, 10000));
	before = total_switches(&ws);
	atomic_store(&wasted_wakes, 0);
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	assert_true(test_wait_until(all_returned, &ws, 30000));
	after = total_switches(&ws);
	wasted = atomic_load(&wasted_wakes);
	print_message("%d waiters, one chain of handoffs: %ld sleeps of the waiters, %d tries woken in vain, "
	              "%d busy tries in all\n", WAITERS, after - before, wasted, atomic_load(&busy_tries));
	for (int i = 0; i < WAITERS; i++)
		assert_int_equal(atomic_load(&w[i].rc), DLOCK_OK);
	end_group(&ws, holder, client, holder_client);
	assert_true(after - before < WAITERS * WAITERS / 4);
	assert_true(wasted <= WAITERS / 4);
}

typedef struct tries_seen {
	const waiters *ws;
	int tries;
} tries_seen;

/* The waiters are asleep and have made so many busy tries in all. */
static bool asleep_after_tries(void *arg)
{
	const tries_seen *t = arg;

	return atomic_load(&busy_tries) >= t->tries && all_asleep((void *)t->ws);
}

/*
 * Waiters that fall asleep one after another are granted the lock in that
 * order: the kernel's futex queue is first come, first woken.  A waiter
 * whose 200 ms nap ends goes to the back of the queue, so the order is
 * only asserted when everything took less than that.
 */
static void test_waiters_are_woken_in_arrival_order(void **state)
{
	enum { N = 8 };
	dlock_client *holder_client, *client;
	dlock_lock *holder;
	waiter w[N] = { 0 };
	waiters ws = { w, 0 };
	tries_seen seen = { &ws, 0 };
	int64_t t0, took;

	parked_go = false;
	atomic_store(&grant_seq, 0);
	atomic_store(&busy_tries, 0);
	assert_int_equal(dlock_client_new(uri, &holder_client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	dlock_client_set_log_callback(client, DLOCK_LOG_DEBUG, count_tries, NULL);
	assert_int_equal(dlock_lock_new(holder_client, "wake/order", &holder), DLOCK_OK);
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	t0 = test_now_ms();
	for (int i = 0; i < N; i++) {
		w[i].hold_us = 1000;
		waiter_start(&w[i], client, "wake/order", 60000);
		ws.n = i + 1;
		/* Its try and the one more before it sleeps: then it is queued. */
		seen.tries = 2 * (i + 1);
		assert_true(test_wait_until(asleep_after_tries, &seen, 10000));
	}
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	assert_true(test_wait_until(all_returned, &ws, 30000));
	took = atomic_load(&w[N - 1].done_ms) - t0;
	for (int i = 0; i < N; i++) {
		print_message("waiter %d granted %d%s\n", i, w[i].order, w[i].order == i ? "" : " (out of order)");
		assert_int_equal(atomic_load(&w[i].rc), DLOCK_OK);
	}
	print_message("first sleep to last grant: %" PRId64 " ms\n", took);
	end_group(&ws, holder, client, holder_client);
	if (took < 190)
		for (int i = 0; i < N; i++)
			assert_int_equal(w[i].order, i);
}

/*
 * A waiter that times out, and one that is canceled while asleep, return
 * promptly (the cancel well before the 200 ms nap would end a sleep), and
 * leave no descriptor, thread or file; the next waiter is woken by the
 * release as before.
 */
static void test_timed_out_and_canceled_waiters_leave_nothing_behind(void **state)
{
	dlock_client *holder_client, *client;
	dlock_lock *holder, *lock;
	waiter w = { 0 };
	waiters ws = { &w, 1 };
	int fds, threads;
	int64_t t0, elapsed;
	uint64_t held;

	parked_go = false;
	assert_int_equal(dlock_client_new(uri, &holder_client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(holder_client, "wake/giveup", &holder), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "wake/giveup", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	held = dlock_fencing_token(holder);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(lock, 300), DLOCK_ETIMEDOUT);
	elapsed = test_now_ms() - t0;
	assert_true(elapsed >= 300 && elapsed < 300 + test_slack(300));
	fds = test_count_entries("/proc/self/fd");
	threads = test_count_entries("/proc/self/task");

	waiter_start(&w, client, "wake/giveup", 60000);
	assert_true(test_wait_until(all_asleep, &ws, 10000));
	g_usleep(50 * 1000);
	t0 = test_now_ms();
	dlock_lock_cancel(w.lock);
	assert_true(test_wait_until(all_returned, &ws, 10000));
	elapsed = atomic_load(&w.done_ms) - t0;
	print_message("canceled waiter returned after %" PRId64 " ms\n", elapsed);
	assert_int_equal(atomic_load(&w.rc), DLOCK_ECANCELED);
	assert_true(elapsed < test_slack(150));
	waiter_join(&w);

	assert_int_equal(dlock_acquire(lock, 50), DLOCK_ETIMEDOUT);
	assert_int_equal(test_count_entries("/proc/self/fd"), fds);
	assert_int_equal(test_count_entries("/proc/self/task"), threads);
	assert_only_lock_files();

	/* The next waiter: woken by the release, not by its nap. */
	parked_go = false;
	waiter_start(&w, client, "wake/giveup", 60000);
	assert_true(test_wait_until(all_asleep, &ws, 10000));
	g_usleep(50 * 1000);
	t0 = test_now_ms();
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	assert_true(test_wait_until(all_returned, &ws, 10000));
	elapsed = atomic_load(&w.done_ms) - t0;
	print_message("next waiter granted after %" PRId64 " ms\n", elapsed);
	assert_int_equal(atomic_load(&w.rc), DLOCK_OK);
	assert_true(elapsed < test_slack(150));
	assert_true(atomic_load(&w.token) > held);
	waiter_join(&w);
	assert_only_lock_files();
	dlock_lock_free(lock);
	dlock_lock_free(holder);
	dlock_client_free(client);
	dlock_client_free(holder_client);
}

/* ---- readers behind a waiting writer ---------------------------------- */

/* The holders of an exclusive hold that let readers in. */
typedef enum handover_kind {
	HANDOVER_RELEASE,   /* a writer releases */
	HANDOVER_DOWNGRADE, /* a writer's lock becomes its owner's read lock */
} handover_kind;

/*
 * A writer owning write (and read, its READ handle) holds; waiters fall
 * asleep one after another in the modes given ('W' writer, 'R' reader);
 * the writer lets them in as kind says.  Returns the largest time in ms
 * from that moment to a reader's grant, with every waiter served in the
 * end.
 */
static int64_t readers_behind_a_writer(dlock_lock *write, dlock_lock *read, dlock_client *client,
                                       const char *modes, handover_kind kind)
{
	int n = (int)strlen(modes);
	waiter *w = g_new0(waiter, n);
	waiters ws = { w, 0 };
	tries_seen seen = { &ws, 0 };
	int64_t t0, worst = 0;

	parked_go = false;
	atomic_store(&busy_tries, 0);
	assert_int_equal(dlock_acquire(write, 0), DLOCK_OK);
	for (int i = 0; i < n; i++) {
		assert_int_equal(dlock_lock_new(client, dlock_lock_resource(write), &w[i].lock), DLOCK_OK);
		assert_int_equal(dlock_lock_set_mode(w[i].lock, modes[i] == 'W' ? DLOCK_MODE_WRITE : DLOCK_MODE_READ),
		                 DLOCK_OK);
		assert_int_equal(dlock_lock_set_owner(w[i].lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
		w[i].wait_ms = 60000;
		w[i].keep = modes[i] == 'R'; /* readers hold on, all at once */
		atomic_store(&w[i].tid, 0);
		atomic_store(&w[i].rc, 1);
		w[i].thread = g_thread_new("test-waiter", waiter_main, &w[i]);
		ws.n = i + 1;
		/* Its try and the one more before it sleeps: then it is queued. */
		seen.tries = 2 * (i + 1);
		assert_true(test_wait_until(asleep_after_tries, &seen, 10000));
	}
	if (kind == HANDOVER_DOWNGRADE)
		assert_int_equal(dlock_acquire(read, 0), DLOCK_OK);
	t0 = test_now_ms();
	assert_int_equal(dlock_release(write), DLOCK_OK);
	for (int i = 0; i < n; i++) {
		if (modes[i] != 'R')
			continue;
		assert_true(test_wait_until(all_returned, &(waiters){ &w[i], 1 }, 10000));
		assert_int_equal(atomic_load(&w[i].rc), DLOCK_OK);
		worst = MAX(worst, atomic_load(&w[i].done_ms) - t0);
	}
	/* The readers go, from another thread than theirs: their handles
	 * own their holds.  Then the writers get in, one after another. */
	if (kind == HANDOVER_DOWNGRADE)
		assert_int_equal(dlock_release(read), DLOCK_OK);
	for (int i = 0; i < n; i++)
		if (modes[i] == 'R')
			assert_int_equal(dlock_release(w[i].lock), DLOCK_OK);
	assert_true(test_wait_until(all_returned, &ws, 10000));
	for (int i = 0; i < n; i++) {
		assert_int_equal(atomic_load(&w[i].rc), DLOCK_OK);
		waiter_join(&w[i]);
	}
	g_free(w);
	return worst;
}

/*
 * Readers waiting behind a waiting writer get in at once when the file
 * becomes shared -- by a writer's release, or by a downgrade that turns
 * the writer's lock into its owner's read lock -- woken then, not by
 * their 200 ms nap, although the writer ahead of them in the futex queue
 * cannot get in and passes no wake-up on.
 */
static void test_readers_behind_a_waiting_writer_get_in_at_once(void **state)
{
	static const struct {
		const char *modes;
		handover_kind kind;
		const char *what;
	} cases[] = {
		{ "WR", HANDOVER_DOWNGRADE, "a downgrade; a writer, then a reader waiting" },
		{ "RWR", HANDOVER_RELEASE, "a release; a reader, a writer, a reader waiting" },
		{ "RWRWR", HANDOVER_RELEASE, "a release; readers between writers waiting" },
		{ "WRWR", HANDOVER_DOWNGRADE, "a downgrade; readers between writers waiting" },
	};
	dlock_client *owner_client, *client;
	dlock_lock *write, *read;
	int64_t worst = 0;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &owner_client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	dlock_client_set_log_callback(client, DLOCK_LOG_DEBUG, count_tries, NULL);
	assert_int_equal(dlock_lock_new(owner_client, "wake/readers", &write), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(write, DLOCK_MODE_WRITE), DLOCK_OK);
	assert_int_equal(dlock_lock_new(owner_client, "wake/readers", &read), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(read, DLOCK_MODE_READ), DLOCK_OK);
	for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
		for (int round = 0; round < 2; round++) {
			int64_t took = readers_behind_a_writer(write, read, client, cases[c].modes, cases[c].kind);

			print_message("%s: the last reader got in after %" PRId64 " ms\n", cases[c].what, took);
			worst = MAX(worst, took);
		}
	}
	dlock_lock_free(read);
	dlock_lock_free(write);
	dlock_client_free(client);
	dlock_client_free(owner_client);
	skip_without_futex();
	assert_true(worst < test_slack(150));
}

/*
 * A holder killed while a waiter sleeps: the kernel unlocks, and no
 * release wakes anyone, so the waiter's nap (at most 200 ms) finds it.
 * The child is forked before this process starts any library thread.
 */
static void test_holder_killed_while_a_waiter_sleeps_is_found(void **state)
{
	dlock_client *client;
	waiter w = { 0 };
	waiters ws = { &w, 1 };
	int pipefd[2];
	char line[64] = "";
	uint64_t dead;
	int64_t t0, elapsed;
	pid_t pid;

	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dlock_client *c;
		dlock_lock *l;

		alarm(30);
		close(pipefd[0]);
		if (dlock_client_new(uri, &c) != DLOCK_OK || dlock_lock_new(c, "wake/killed", &l) != DLOCK_OK ||
		    dlock_acquire(l, 5000) != DLOCK_OK)
			_exit(2);
		dprintf(pipefd[1], "held %" PRIu64 "\n", dlock_fencing_token(l));
		for (;;)
			pause();
	}
	close(pipefd[1]);
	assert_true(test_read_line(pipefd[0], line, sizeof(line), test_slack(5000)));
	dead = g_ascii_strtoull(line + 5, NULL, 10);
	parked_go = false;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	waiter_start(&w, client, "wake/killed", 60000);
	assert_true(test_wait_until(all_asleep, &ws, 10000));
	g_usleep(300 * 1000);
	t0 = test_now_ms();
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_true(test_wait_until(all_returned, &ws, 10000));
	elapsed = atomic_load(&w.done_ms) - t0;
	print_message("killed holder's lock granted after %" PRId64 " ms\n", elapsed);
	assert_int_equal(atomic_load(&w.rc), DLOCK_OK);
	assert_true(elapsed < 200 + test_slack(300));
	assert_true(atomic_load(&w.token) > dead);
	waiter_join(&w);
	close(pipefd[0]);
	dlock_client_free(client);
}

/*
 * A process waits, forks while its waiter sleeps (the child inherits the
 * process's memory mappings, and a mapping keeps its file description
 * alive), is granted the lock, and is killed: the child lives on, and the
 * lock must still be free at once.
 */
static void test_waiter_forked_child_does_not_keep_the_lock(void **state)
{
	const char *args[] = { "forkwait", uri, "wake/fork", NULL };
	dlock_client *client;
	dlock_lock *lock;
	char line[128];
	long child = 0;
	int64_t t0;
	int fd;
	pid_t pid;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "wake/fork", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	pid = test_spawn_worker(args, &fd);
	assert_true(test_read_line(fd, line, sizeof(line), test_slack(10000)));
	assert_int_equal(sscanf(line, "forked %ld", &child), 1);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_true(test_read_line(fd, line, sizeof(line), test_slack(10000)));
	assert_true(g_str_has_prefix(line, "held"));
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(fd);
	assert_int_equal(kill((pid_t)child, 0), 0);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
	assert_true(test_now_ms() - t0 < test_slack(500));
	kill((pid_t)child, SIGKILL);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* forkwait URI RESOURCE: see the test above. */
static int forkwait_worker(const char *spec, const char *resource)
{
	dlock_client *client;
	waiter w = { 0 };
	waiters ws = { &w, 1 };
	pid_t child;

	if (dlock_client_new(spec, &client) != DLOCK_OK)
		return 2;
	w.keep = true;
	waiter_start(&w, client, resource, 30000);
	if (!test_wait_until(all_asleep, &ws, 10000))
		return 3;
	g_usleep(50 * 1000);
	child = fork();
	if (child == 0) {
		alarm(30); /* outlives the worker, not the test */
		for (;;)
			pause();
	}
	printf("forked %ld\n", (long)child);
	fflush(stdout);
	if (!test_wait_until(all_returned, &ws, 20000) || atomic_load(&w.rc) != DLOCK_OK)
		return 4;
	printf("held %" PRIu64 "\n", (uint64_t)atomic_load(&w.token));
	fflush(stdout);
	for (;;)
		pause();
}

/* A private lock directory (g_dir_make_tmp makes it 0700) for the group. */
static int setup(void **state)
{
	dir = g_dir_make_tmp("dlock-file-wake-XXXXXX", NULL);
	uri = dir ? g_strconcat("file://", dir, NULL) : NULL;
	return dir ? 0 : -1;
}

static int teardown(void **state)
{
	test_remove_tree(dir);
	g_free(dir);
	g_free(uri);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_holder_killed_while_a_waiter_sleeps_is_found),
		cmocka_unit_test(test_one_release_wakes_one_waiter),
		cmocka_unit_test(test_waiters_are_woken_in_arrival_order),
		cmocka_unit_test(test_timed_out_and_canceled_waiters_leave_nothing_behind),
		cmocka_unit_test(test_readers_behind_a_waiting_writer_get_in_at_once),
		cmocka_unit_test(test_waiter_forked_child_does_not_keep_the_lock),
	};

	test_init(argv[0]);
	if (argc >= 5 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "forkwait") == 0)
		return forkwait_worker(argv[3], argv[4]);
	return cmocka_run_group_tests_name("file-wake", tests, setup, teardown);
}
