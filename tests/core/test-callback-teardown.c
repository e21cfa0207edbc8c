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
	};
	char *name;
	int failures;

	test_init(argv[0]);
	if (argc > 3 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "client-free") == 0)
		return worker_free_in_callback(argv[3]);
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
