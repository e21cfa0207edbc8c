/* SPDX-License-Identifier: MIT */
/*
 * Ending objects from a callback, on the client's callback thread: what
 * dlock.h allows works there, and dlock_client_free(), which would wait
 * for the very thread it runs on, is refused with a message instead of
 * aborting the program.
 *
 * Run with one argument, the backend to use: file, redis or zk.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redis.h"
#include "test-zk.h"

#define WAIT_MS 10000

static const char *backend;
static char *uri;
static char *dir;          /* file */
static test_redis *redis;
static test_zk *zk;

/* ---- dlock_client_free() from a callback -------------------------------- */

typedef struct refusal {
	dlock_client *client;
	GAsyncQueue *logged;    /* char *: every log message */
	GAsyncQueue *done;      /* char *: what the callback saw */
} refusal;

static void keep_log(dlock_log_level level, const char *message, void *data)
{
	refusal *r = data;

	(void)level;
	g_async_queue_push(r->logged, g_strdup(message));
}

static void free_client_when_elected(dlock_election *e, dlock_election_event event, const char *id,
                                     void *data)
{
	refusal *r = data;

	(void)id;
	if (event != DLOCK_ELECTION_ELECTED)
		return;
	dlock_client_free(r->client);
	/* Still usable: the free was refused. */
	g_async_queue_push(r->done, g_strdup_printf("%d %s", dlock_election_is_leader(e),
	                                            dlock_last_error_message()));
}

/*
 * The worker: elected, its callback frees the client; prints what the
 * callback saw ("returned LEADING MESSAGE"), whether the refusal was
 * logged, then resigns and frees everything the ordinary way.
 */
static int worker_free_in_callback(const char *spec)
{
	refusal r = { NULL, g_async_queue_new_full(g_free), g_async_queue_new_full(g_free) };
	dlock_election *e;
	char *seen, *line;
	bool logged = false;

	if (dlock_client_new(spec, &r.client) != DLOCK_OK ||
	    dlock_client_set_log_callback(r.client, DLOCK_LOG_ERROR, keep_log, &r) != DLOCK_OK ||
	    dlock_election_new(r.client, "teardown/client", "a", &e) != DLOCK_OK ||
	    dlock_election_set_callback(e, free_client_when_elected, &r) != DLOCK_OK ||
	    dlock_election_campaign(e, WAIT_MS) != DLOCK_OK)
		return 2;
	seen = g_async_queue_timeout_pop(r.done, WAIT_MS * 1000);
	if (!seen)
		return 3;
	printf("returned %s\n", seen);
	while ((line = g_async_queue_try_pop(r.logged))) {
		logged = logged || strstr(line, "callback") != NULL;
		g_free(line);
	}
	printf("logged %d\n", logged);
	fflush(stdout);
	if (dlock_election_resign(e) != DLOCK_OK)
		return 4;
	dlock_election_free(e);
	dlock_client_free(r.client);
	g_free(seen);
	g_async_queue_unref(r.logged);
	g_async_queue_unref(r.done);
	return 0;
}

/* In a worker process, since the free it makes used to abort the
 * program: the callback's free returns at once, refused with a message
 * naming the callback, the client works on, and it is freed later. */
static void test_client_free_from_a_callback_is_refused_with_a_message(void **state)
{
	const char *args[] = { "client-free", uri, NULL };
	char line[1200];
	int out_fd, sig = 0, status;
	pid_t pid;

	pid = test_spawn_worker(args, &out_fd);
	if (!test_read_line(out_fd, line, sizeof(line), WAIT_MS)) {
		status = test_wait_child(pid, &sig);
		fail_msg("the worker said nothing; it exited %d (signal %d)", status, sig);
	}
	print_message("%s\n", line);
	assert_true(g_str_has_prefix(line, "returned 1 "));
	assert_non_null(strstr(line, "callback"));
	assert_true(test_read_line(out_fd, line, sizeof(line), WAIT_MS));
	assert_string_equal(line, "logged 1");
	status = test_wait_child(pid, &sig);
	close(out_fd);
	assert_int_equal(sig, 0);
	assert_int_equal(status, 0);
}

/* ---- dlock_lock_free() from its own state callback ---------------------- */

typedef struct self_free {
	dlock_lock *other;      /* a handle another thread waits on, freed too */
	GAsyncQueue *done;
} self_free;

static void free_on_state(dlock_lock *lock, dlock_state state, void *data)
{
	self_free *f = data;

	dlock_lock_free(f->other);
	dlock_lock_free(lock);
	g_async_queue_push(f->done, g_strdup_printf("freed on %d", (int)state));
}

typedef struct waiting {
	dlock_lock *lock;
	GThread *thread;
	int rc;
} waiting;

static gpointer wait_main(gpointer data)
{
	waiting *w = data;

	w->rc = dlock_acquire(w->lock, 60000);
	return NULL;
}

/* Make the hold of lock (on resource) change state: its file removed, its
 * lease run out, its server gone quiet. */
static void disturb(const char *resource)
{
	if (strcmp(backend, "file") == 0) {
		char *path = g_strdup_printf("%s/r-%s", dir, resource);

		assert_int_equal(unlink(path), 0);
		g_free(path);
	} else if (strcmp(backend, "zk") == 0) {
		test_zk_signal(zk, 0, SIGSTOP);
	}
	/* redis: the handle's lease of 300 ms without a watchdog runs out. */
}

static void undisturb(void)
{
	if (strcmp(backend, "zk") == 0)
		test_zk_signal(zk, 0, SIGCONT);
}

/*
 * A state callback frees its own handle and a handle on which another
 * thread waits in dlock_acquire(): both frees return, the waiter gets
 * DLOCK_ECANCELED, no other callback comes for the handle, and the
 * resource is free again.
 */
static void test_lock_free_from_its_own_state_callback(void **state)
{
	self_free f = { NULL, g_async_queue_new_full(g_free) };
	dlock_client *client, *peer;
	dlock_lock *lock, *probe;
	waiting w = { 0 };
	char *got, *late;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &peer), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "teardown.lock", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "teardown.busy", &f.other), DLOCK_OK);
	assert_int_equal(dlock_lock_new(peer, "teardown.busy", &probe), DLOCK_OK);
	if (strcmp(backend, "redis") == 0) {
		assert_int_equal(dlock_lock_set_ttl(lock, 300), DLOCK_OK);
		assert_int_equal(dlock_lock_set_watchdog(lock, 0), DLOCK_OK);
	}
	assert_int_equal(dlock_lock_set_state_callback(lock, free_on_state, &f), DLOCK_OK);
	assert_int_equal(dlock_acquire(probe, WAIT_MS), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, WAIT_MS), DLOCK_OK);
	w.lock = f.other;
	w.thread = g_thread_new("waiter", wait_main, &w);
	g_usleep(200 * 1000);

	disturb("teardown.lock");
	got = g_async_queue_timeout_pop(f.done, (guint64)WAIT_MS * test_slack_factor() * 1000);
	undisturb();
	assert_non_null(got);
	print_message("the callback %s\n", got);
	g_thread_join(w.thread);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	/* No second callback for the freed handle. */
	late = g_async_queue_timeout_pop(f.done, 500 * 1000);
	assert_null(late);
	/* Its hold was released: another client takes the lock. */
	assert_int_equal(dlock_release(probe), DLOCK_OK);
	dlock_lock_free(probe);
	assert_int_equal(dlock_lock_new(peer, "teardown.lock", &probe), DLOCK_OK);
	assert_int_equal(dlock_acquire(probe, WAIT_MS), DLOCK_OK);
	dlock_lock_free(probe);
	dlock_client_free(client);
	dlock_client_free(peer);
	g_free(got);
	g_async_queue_unref(f.done);
}

/* ---- dlock_election_free() from its own callback ----------------------- */

static void free_when_elected(dlock_election *e, dlock_election_event event, const char *id, void *data)
{
	GAsyncQueue *done = data;

	(void)id;
	if (event == DLOCK_ELECTION_ELECTED) {
		dlock_election_free(e);
		g_async_queue_push(done, g_strdup("freed"));
	} else if (event != DLOCK_ELECTION_LEADER_CHANGED) {
		g_async_queue_push(done, g_strdup_printf("event %d after the free", (int)event));
	}
}

/* An observing leader frees its election when told it leads: the free
 * returns, resigns (another participant leads at once) and nothing more
 * is told. */
static void test_election_free_from_its_own_callback(void **state)
{
	GAsyncQueue *done = g_async_queue_new_full(g_free);
	dlock_client *client, *peer;
	dlock_election *e, *next;
	char *got;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &peer), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "teardown/elect", "a", &e), DLOCK_OK);
	assert_int_equal(dlock_election_new(peer, "teardown/elect", "b", &next), DLOCK_OK);
	assert_int_equal(dlock_election_set_callback(e, free_when_elected, done), DLOCK_OK);
	assert_int_equal(dlock_election_observe(e, 1), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(e, WAIT_MS), DLOCK_OK);
	got = g_async_queue_timeout_pop(done, (guint64)WAIT_MS * test_slack_factor() * 1000);
	assert_non_null(got);
	assert_string_equal(got, "freed");
	g_free(got);
	assert_int_equal(dlock_election_campaign(next, WAIT_MS), DLOCK_OK);
	got = g_async_queue_timeout_pop(done, 500 * 1000);
	assert_null(got);
	assert_int_equal(dlock_election_resign(next), DLOCK_OK);
	dlock_election_free(next);
	dlock_client_free(client);
	dlock_client_free(peer);
	g_async_queue_unref(done);
}

/* ---- dlock_election_free() while its callback campaigns ----------------- */

#define CAMPAIGN_MS 20000

typedef struct recampaign {
	gint tid;               /* the callback thread's, once it campaigns */
	GAsyncQueue *done;      /* char *: what the campaign returned */
} recampaign;

/* Told who leads (another participant), it campaigns -- on the callback
 * thread, for a long while. */
static void campaign_when_told(dlock_election *e, dlock_election_event event, const char *id,
                               void *data)
{
	recampaign *r = data;
	int rc;

	(void)id;
	if (event != DLOCK_ELECTION_LEADER_CHANGED || g_atomic_int_get(&r->tid))
		return;
	g_atomic_int_set(&r->tid, (gint)syscall(SYS_gettid));
	rc = dlock_election_campaign(e, CAMPAIGN_MS);
	g_async_queue_push(r->done, g_strdup(dlock_code_name(rc)));
}

static bool campaigner_sleeps(void *data)
{
	recampaign *r = data;

	return g_atomic_int_get(&r->tid) && test_thread_sleeps(g_atomic_int_get(&r->tid));
}

/*
 * The election's free cancels a campaign under way, also one its own
 * callback runs on the callback thread, whose events the free waits for:
 * it returns at once, not when the campaign gives up.
 */
static void test_election_free_cancels_a_campaign_of_its_callback(void **state)
{
	recampaign r = { 0, g_async_queue_new_full(g_free) };
	dlock_client *client, *peer;
	dlock_election *e, *leader;
	int64_t start, took;
	char *got;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &peer), DLOCK_OK);
	assert_int_equal(dlock_election_new(peer, "teardown/recampaign", "leader", &leader), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(leader, WAIT_MS), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "teardown/recampaign", "me", &e), DLOCK_OK);
	assert_int_equal(dlock_election_set_callback(e, campaign_when_told, &r), DLOCK_OK);
	assert_int_equal(dlock_election_observe(e, 1), DLOCK_OK);
	assert_true(test_wait_until(campaigner_sleeps, &r, WAIT_MS));

	start = test_now_ms();
	dlock_election_free(e);
	took = test_now_ms() - start;
	print_message("dlock_election_free returned after %" PRId64 " ms\n", took);
	got = g_async_queue_timeout_pop(r.done, (guint64)CAMPAIGN_MS * test_slack_factor() * 1000);
	assert_non_null(got);
	assert_string_equal(got, "DLOCK_ECANCELED");
	assert_true(took < test_slack(3000));
	g_free(got);
	assert_int_equal(dlock_election_resign(leader), DLOCK_OK);
	dlock_election_free(leader);
	dlock_client_free(client);
	dlock_client_free(peer);
	g_async_queue_unref(r.done);
}

/* ---- callbacks that run while the client is being freed ----------------- */

/* Set by the worker just before it frees its client. */
static gint freeing;

static void wait_for_the_free(void)
{
	int64_t until = test_now_ms() + (int64_t)WAIT_MS * test_slack_factor();

	while (!g_atomic_int_get(&freeing) && test_now_ms() < until)
		g_usleep(1000);
}

typedef struct late {
	dlock_election *other; /* an election of the same client, not observing */
	char *uri;             /* the handle's backend as seen before the free */
} late;

/* Held up until the free has begun and had time to go past its
 * releases, then does what a callback may: read its handle's backend and
 * start observing another election, which the free no longer could stop
 * (refused). */
static void read_backend_when_elected(dlock_election *e, dlock_election_event event, const char *id,
                                      void *data)
{
	late *l = data;
	const char *now;
	int rc;

	(void)id;
	if (event != DLOCK_ELECTION_ELECTED)
		return;
	wait_for_the_free();
	g_usleep((gulong)test_slack(300) * 1000);
	now = dlock_lock_backend_uri(dlock_election_lock(e));
	printf("same-uri %d\n", now && strcmp(now, l->uri) == 0);
	rc = dlock_election_observe(l->other, 1);
	printf("observe %s\n", dlock_code_name(rc));
	fflush(stdout);
}

static int worker_late_callback(const char *spec)
{
	dlock_client *client;
	dlock_election *e;
	late l = { NULL, NULL };

	if (dlock_client_new(spec, &client) != DLOCK_OK ||
	    dlock_election_new(client, "teardown/late", "a", &e) != DLOCK_OK ||
	    dlock_election_new(client, "teardown/late-other", "a", &l.other) != DLOCK_OK ||
	    dlock_election_set_callback(e, read_backend_when_elected, &l) != DLOCK_OK)
		return 2;
	l.uri = g_strdup(dlock_lock_backend_uri(dlock_election_lock(e)));
	if (dlock_election_campaign(e, WAIT_MS) != DLOCK_OK)
		return 3;
	g_atomic_int_set(&freeing, 1);
	dlock_client_free(client);
	printf("freed\n");
	fflush(stdout);
	dlock_election_free(e);
	dlock_election_free(l.other);
	g_free(l.uri);
	return 0;
}

typedef struct child {
	pid_t pid;
	int status;
} child;

static bool child_exited(void *data)
{
	child *c = data;

	return waitpid(c->pid, &c->status, WNOHANG) == c->pid;
}

/* Read the worker's lines until it exits; fail unless it exited 0 within
 * the wait (one that hangs is killed). */
static char *worker_output(const char *const *args)
{
	GString *out = g_string_new(NULL);
	char line[1200];
	child c = { 0, 0 };
	int out_fd;

	c.pid = test_spawn_worker(args, &out_fd);
	while (test_read_line(out_fd, line, sizeof(line), (int64_t)WAIT_MS * test_slack_factor()))
		g_string_append_printf(out, "%s\n", line);
	close(out_fd);
	print_message("%s", out->str);
	if (!test_wait_until(child_exited, &c, WAIT_MS)) {
		kill(c.pid, SIGKILL);
		test_wait_child(c.pid, NULL);
		fail_msg("the worker hung after:\n%s", out->str);
	}
	if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0)
		fail_msg("the worker ended with wait status 0x%x (signal %d) after:\n%s", c.status,
		         WIFSIGNALED(c.status) ? WTERMSIG(c.status) : 0, out->str);
	return g_string_free(out, FALSE);
}

/*
 * The client's free runs the callbacks already queued before it returns,
 * and they may call any dlock function but the client's free: a callback
 * that runs once the free has released the holds still reads its handle's
 * backend (the backends are still open), and an observer it starts could
 * not be stopped by the free any more, so it is refused.
 */
static void test_a_callback_during_the_client_free_reads_its_backend(void **state)
{
	const char *args[] = { "late-callback", uri, NULL };
	char *out = worker_output(args);

	assert_non_null(strstr(out, "same-uri 1\n"));
	assert_non_null(strstr(out, "observe DLOCK_ECANCELED\n"));
	assert_non_null(strstr(out, "freed\n"));
	g_free(out);
}

#define LATE_ELECTIONS 20

static gint held_up;

static void free_when_elected_late(dlock_election *e, dlock_election_event event, const char *id,
                                   void *data)
{
	(void)id;
	(void)data;
	if (event != DLOCK_ELECTION_ELECTED)
		return;
	/* The first holds the others up until the free is under way. */
	if (g_atomic_int_compare_and_exchange(&held_up, 0, 1)) {
		wait_for_the_free();
		g_usleep((gulong)test_slack(500) * 1000);
	}
	dlock_election_free(e);
}

/*
 * spec names a configuration file whose default backend is the test's
 * and whose backend "silent" accepts connections and never answers.
 */
static int worker_free_elections_during_free(const char *spec)
{
	dlock_election *e[LATE_ELECTIONS], *slow;
	dlock_client *client;

	if (dlock_client_new(spec, &client) != DLOCK_OK ||
	    dlock_election_new(client, "teardown/slow", "a", &slow) != DLOCK_OK)
		return 2;
	for (int i = 0; i < LATE_ELECTIONS; i++) {
		char name[64];

		g_snprintf(name, sizeof(name), "teardown/late%d", i);
		if (dlock_election_new(client, name, "a", &e[i]) != DLOCK_OK ||
		    dlock_election_set_callback(e[i], free_when_elected_late, NULL) != DLOCK_OK)
			return 3;
	}
	/* The callbacks wait for the free before freeing their elections. */
	for (int i = 0; i < LATE_ELECTIONS; i++)
		if (dlock_election_campaign(e[i], WAIT_MS) != DLOCK_OK)
			return 4;
	/* An observer whose query waits for a server that never answers
	 * keeps the free's stop of observers busy meanwhile. */
	if (dlock_election_observe(slow, 1) != DLOCK_OK)
		return 5;
	g_usleep(100 * 1000);
	g_atomic_int_set(&freeing, 1);
	dlock_client_free(client);
	dlock_election_free(slow);
	printf("freed\n");
	fflush(stdout);
	return 0;
}

/*
 * Callbacks queued when the client's free begins free their elections
 * (allowed from their own callbacks) while the free stops the elections'
 * observers: the free does not touch an election freed meanwhile.
 */
static void test_elections_freed_by_their_callbacks_during_the_client_free(void **state)
{
	int silent_fd, port = test_silent_port(&silent_fd);
	char *conf_dir = g_dir_make_tmp("dlock-cb-teardown-XXXXXX", NULL);
	char *conf = g_build_filename(conf_dir, "dlock.conf", NULL);
	char *text = g_strdup_printf("[defaults]\nbackend = main\n\n[backend main]\nurl = %s\n\n"
	                             "[backend silent]\nurl = redis://127.0.0.1:%d"
	                             "?connect-timeout=2s&command-timeout=2s\n\n"
	                             "[route slow]\nmatch = teardown/slow\nbackend = silent\n",
	                             uri, port);
	const char *args[] = { "free-during-free", conf, NULL };
	char *out;

	assert_true(g_file_set_contents(conf, text, -1, NULL));
	out = worker_output(args);
	assert_non_null(strstr(out, "freed\n"));
	g_free(out);
	close(silent_fd);
	test_remove_tree(conf_dir);
	g_free(text);
	g_free(conf);
	g_free(conf_dir);
}

/* ---- servers ------------------------------------------------------------ */

static int setup(void **state)
{
	if (strcmp(backend, "file") == 0) {
		test_file_dir_make("dlock-cb-teardown", &dir, &uri);
	} else if (strcmp(backend, "redis") == 0) {
		redis = test_redis_start(NULL, NULL, false);
		uri = test_redis_uri(redis, "?command-timeout=500ms");
	} else {
		zk = test_zk_start(1, 200, 0);
		uri = test_zk_uri(zk, "?session-timeout=2s");
	}
	return 0;
}

static int teardown(void **state)
{
	if (dir) {
		test_file_dir_remove(dir);
		g_free(dir);
	}
	if (redis) {
		assert_int_equal(test_redis_leftover_keys(redis, "dlock:{teardown"), 0);
		test_redis_stop(redis);
	}
	if (zk) {
		assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
		test_zk_stop(zk);
	}
	g_free(uri);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_free_from_a_callback_is_refused_with_a_message),
		cmocka_unit_test(test_lock_free_from_its_own_state_callback),
		cmocka_unit_test(test_election_free_from_its_own_callback),
		cmocka_unit_test(test_election_free_cancels_a_campaign_of_its_callback),
		cmocka_unit_test(test_a_callback_during_the_client_free_reads_its_backend),
		cmocka_unit_test(test_elections_freed_by_their_callbacks_during_the_client_free),
	};
	char *name;
	int failures;

	test_init(argv[0]);
	if (argc > 3 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "client-free") == 0)
		return worker_free_in_callback(argv[3]);
	if (argc > 3 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "late-callback") == 0)
		return worker_late_callback(argv[3]);
	if (argc > 3 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "free-during-free") == 0)
		return worker_free_elections_during_free(argv[3]);
	backend = argc > 1 ? argv[1] : "";
	if (strcmp(backend, "file") != 0 && strcmp(backend, "redis") != 0 && strcmp(backend, "zk") != 0) {
		fprintf(stderr, "usage: %s file|redis|zk\n", argv[0]);
		return 2;
	}
	name = g_strdup_printf("callback-teardown-%s", backend);
	failures = cmocka_run_group_tests_name(name, tests, setup, teardown);
	g_free(name);
	if (strcmp(backend, "zk") == 0)
		return test_zk_finish(failures);
	return test_finish(failures);
}
