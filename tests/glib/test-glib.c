/* SPDX-License-Identifier: MIT */
/*
 * The GLib adapter (include/dlock-glib.h) on the backend named by
 * argv[1], "file" or "redis": the GIO pair in a GMainLoop with either
 * delivery, its callback in the caller's context and thread, a wait
 * woken by a release, a deadline, a cancel while waiting and a cancel
 * racing the grant (never a success reported as canceled, never a hold
 * left behind), refusals as errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <dlock-glib.h>

#include "test-redis.h"
#include "test-util.h"

static const char *backend;
static test_redis *server;
static char *dir;
static char *uri;

/* ---- clients, handles, probes ------------------------------------------- */

static dlock_client *client_new(dlock_delivery mode)
{
	dlock_client *client = NULL;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_client_set_delivery(client, mode), DLOCK_OK);
	return client;
}

static dlock_lock *handle_new(dlock_client *client, const char *resource)
{
	dlock_lock *lock = NULL;

	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	return lock;
}

/* Whether another client takes resource within ms (tries every 5 ms). */
static bool free_within(const char *resource, int64_t ms)
{
	int64_t until = g_get_monotonic_time() + test_slack(ms) * 1000;
	dlock_client *c = client_new(DLOCK_DELIVER_THREAD);
	dlock_lock *probe = handle_new(c, resource);
	bool ok = false;

	do {
		if (dlock_acquire(probe, 0) == DLOCK_OK) {
			assert_int_equal(dlock_release(probe), DLOCK_OK);
			ok = true;
			break;
		}
		g_usleep(5000);
	} while (g_get_monotonic_time() < until);
	dlock_lock_free(probe);
	dlock_client_free(c);
	return ok;
}

/* ---- one call's outcome, seen by its callback ---------------------------- */

typedef struct outcome {
	dlock_lock *lock;
	bool called;
	gboolean ok;
	guint64 token;
	GError *error;
	int held;                /* dlock_held() in the callback */
	GThread *thread;         /* where the callback ran */
	GMainContext *context;   /* its thread-default context there */
} outcome;

static volatile bool starting;  /* inside dlock_glib_acquire_async() */
static int called_inside_start;

static void on_acquired(GObject *source, GAsyncResult *result, gpointer data)
{
	outcome *o = data;

	assert_null(source);
	if (starting)
		called_inside_start++;
	o->ok = dlock_glib_acquire_finish(o->lock, result, &o->token, &o->error);
	o->held = dlock_held(o->lock);
	o->thread = g_thread_self();
	o->context = g_main_context_ref_thread_default();
	o->called = true;
}

static void outcome_clear(outcome *o)
{
	g_clear_error(&o->error);
	if (o->context != NULL)
		g_main_context_unref(o->context);
	memset(o, 0, sizeof *o);
}

static void start(dlock_lock *lock, int64_t wait_ms, GCancellable *cancellable, outcome *o)
{
	memset(o, 0, sizeof *o);
	o->lock = lock;
	starting = true;
	dlock_glib_acquire_async(lock, wait_ms, cancellable, on_acquired, o);
	starting = false;
	assert_false(o->called);
}

/* Iterate the thread-default context until the callback has run (up to
 * 10 s). */
static void wait_outcome(outcome *o)
{
	GMainContext *context = g_main_context_ref_thread_default();
	int64_t until = g_get_monotonic_time() + test_slack(10000) * 1000;

	while (!o->called && g_get_monotonic_time() < until) {
		if (!g_main_context_iteration(context, FALSE))
			g_usleep(1000);
	}
	g_main_context_unref(context);
	assert_true(o->called);
	assert_int_equal(called_inside_start, 0);
}

static void assert_dlock_error(const outcome *o, int code)
{
	assert_false(o->ok);
	assert_non_null(o->error);
	if (!g_error_matches(o->error, DLOCK_GLIB_ERROR, code))
		fail_msg("expected %s, got %s %d: %s", dlock_code_name(code),
		         g_quark_to_string(o->error->domain), o->error->code, o->error->message);
	assert_true(o->error->message[0] != '\0');
}

static void assert_cancelled(const outcome *o)
{
	assert_false(o->ok);
	assert_non_null(o->error);
	if (!g_error_matches(o->error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
		fail_msg("expected G_IO_ERROR_CANCELLED, got %s %d: %s",
		         g_quark_to_string(o->error->domain), o->error->code, o->error->message);
	assert_int_equal(o->held, 0);
}

static gboolean release_later(gpointer data)
{
	assert_int_equal(dlock_release(data), DLOCK_OK);
	return G_SOURCE_REMOVE;
}

static gboolean cancel_later(gpointer data)
{
	g_cancellable_cancel(data);
	return G_SOURCE_REMOVE;
}

/* ---- the tests ------------------------------------------------------------ */

static void test_the_source_needs_a_client_in_dispatch_mode(void **state)
{
	dlock_client *threaded = client_new(DLOCK_DELIVER_THREAD);
	dlock_client *dispatched = client_new(DLOCK_DELIVER_DISPATCH);
	GSource *source;
	guint id;

	(void)state;
	assert_null(dlock_glib_source_new(NULL));
	assert_null(dlock_glib_source_new(threaded));
	assert_int_equal(dlock_glib_attach(NULL, NULL), 0);
	assert_int_equal(dlock_glib_attach(threaded, NULL), 0);
	source = dlock_glib_source_new(dispatched);
	assert_non_null(source);
	assert_string_equal(g_source_get_name(source), "dlock");
	g_source_unref(source);
	id = dlock_glib_attach(dispatched, NULL);
	assert_int_not_equal(id, 0);
	assert_true(g_source_remove(id));
	dlock_client_free(dispatched);
	dlock_client_free(threaded);
}

static void test_dispatch_mode_acquires_through_the_attached_source(void **state)
{
	dlock_client *client = client_new(DLOCK_DELIVER_DISPATCH);
	dlock_lock *lock = handle_new(client, "glib-dispatch");
	guint id = dlock_glib_attach(client, NULL);
	outcome o;

	(void)state;
	assert_int_not_equal(id, 0);
	start(lock, 5000, NULL, &o);
	wait_outcome(&o);
	assert_true(o.ok);
	assert_null(o.error);
	assert_int_equal(o.held, 1);
	assert_true(o.token > 0);
	assert_true(o.token == dlock_fencing_token(lock));
	assert_ptr_equal(o.thread, g_thread_self());
	assert_ptr_equal(o.context, g_main_context_default());
	assert_false(free_within("glib-dispatch", 0));
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_true(free_within("glib-dispatch", 2000));
	outcome_clear(&o);
	assert_true(g_source_remove(id));
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* A thread with a context of its own, which acquires there. */
typedef struct in_thread {
	dlock_lock *lock;
	GMainContext *context;
	outcome o;
} in_thread;

static gpointer acquire_in_thread(gpointer data)
{
	in_thread *t = data;

	g_main_context_push_thread_default(t->context);
	start(t->lock, 5000, NULL, &t->o);
	wait_outcome(&t->o);
	g_main_context_pop_thread_default(t->context);
	return NULL;
}

static void test_thread_mode_returns_in_the_callers_context_and_thread(void **state)
{
	dlock_client *client = client_new(DLOCK_DELIVER_THREAD);
	dlock_lock *lock = handle_new(client, "glib-thread");
	in_thread t = { .lock = lock, .context = g_main_context_new() };
	GThread *thread;
	outcome o;

	(void)state;
	/* From the main thread, in the default context. */
	start(lock, 5000, NULL, &o);
	wait_outcome(&o);
	assert_true(o.ok);
	assert_int_equal(o.held, 1);
	assert_ptr_equal(o.thread, g_thread_self());
	assert_ptr_equal(o.context, g_main_context_default());
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	outcome_clear(&o);

	/* From another thread, in its own context. */
	thread = g_thread_new("glib-acquirer", acquire_in_thread, &t);
	g_thread_join(thread);
	assert_true(t.o.ok);
	assert_int_equal(t.o.held, 1);
	assert_ptr_equal(t.o.thread, thread);
	assert_ptr_equal(t.o.context, t.context);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	outcome_clear(&t.o);
	g_main_context_unref(t.context);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/*
 * A contended scene: another client holds resource (a blocking acquire),
 * and the test's handle on a client in mode waits for it, its callbacks
 * dispatched by an attached source in DLOCK_DELIVER_DISPATCH.
 */
typedef struct scene {
	dlock_client *other_client;
	dlock_lock *other;
	dlock_client *client;
	dlock_lock *lock;
	guint id;
} scene;

static void scene_open(scene *sc, dlock_delivery mode, const char *resource)
{
	sc->other_client = client_new(DLOCK_DELIVER_THREAD);
	sc->other = handle_new(sc->other_client, resource);
	assert_int_equal(dlock_acquire(sc->other, 5000), DLOCK_OK);
	sc->client = client_new(mode);
	sc->lock = handle_new(sc->client, resource);
	sc->id = mode == DLOCK_DELIVER_DISPATCH ? dlock_glib_attach(sc->client, NULL) : 0;
}

static void scene_close(scene *sc)
{
	if (sc->id != 0)
		assert_true(g_source_remove(sc->id));
	dlock_lock_free(sc->lock);
	dlock_client_free(sc->client);
	dlock_lock_free(sc->other);
	dlock_client_free(sc->other_client);
}

static const dlock_delivery modes[] = { DLOCK_DELIVER_DISPATCH, DLOCK_DELIVER_THREAD };

static void test_a_waiting_acquire_is_woken_by_a_release(void **state)
{
	(void)state;
	for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) {
		scene sc;
		int64_t began;
		outcome o;

		scene_open(&sc, modes[i], "glib-wake");
		began = g_get_monotonic_time();
		start(sc.lock, 20000, NULL, &o);
		g_timeout_add(300, release_later, sc.other);
		wait_outcome(&o);
		assert_true(o.ok);
		assert_int_equal(o.held, 1);
		/* Woken by the release, not by a nap or the deadline. */
		assert_true(g_get_monotonic_time() - began >= 250 * 1000);
		assert_true(g_get_monotonic_time() - began < test_slack(5000) * 1000);
		assert_int_equal(dlock_release(sc.lock), DLOCK_OK);
		outcome_clear(&o);
		scene_close(&sc);
	}
}

static void test_a_deadline_is_a_dlock_etimedout_error(void **state)
{
	scene sc;
	int64_t began;
	outcome o;

	(void)state;
	scene_open(&sc, DLOCK_DELIVER_DISPATCH, "glib-deadline");
	began = g_get_monotonic_time();
	start(sc.lock, 300, NULL, &o);
	wait_outcome(&o);
	assert_dlock_error(&o, DLOCK_ETIMEDOUT);
	assert_int_equal(o.held, 0);
	assert_true(g_get_monotonic_time() - began >= 300 * 1000);
	outcome_clear(&o);
	scene_close(&sc);
}

static void test_a_cancel_while_waiting_is_cancelled_and_leaves_nothing(void **state)
{
	(void)state;
	for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) {
		GCancellable *cancellable = g_cancellable_new();
		scene sc;
		outcome o;

		scene_open(&sc, modes[i], "glib-cancel");
		start(sc.lock, -1, cancellable, &o);
		g_timeout_add(200, cancel_later, cancellable);
		wait_outcome(&o);
		assert_cancelled(&o);
		/* The holder leaves: nothing of the canceled wait takes the
		 * lock -- at once on the file backend; on Redis once the
		 * wait's entry has left the queue, in the background after
		 * a cancel (docs/redis.md, "Leaving"). */
		assert_int_equal(dlock_release(sc.other), DLOCK_OK);
		assert_true(free_within("glib-cancel", server != NULL ? 2000 : 0));
		assert_int_equal(dlock_held(sc.lock), 0);
		outcome_clear(&o);
		g_object_unref(cancellable);
		scene_close(&sc);
	}
}

static void test_an_already_cancelled_cancellable_acquires_nothing(void **state)
{
	dlock_client *client = client_new(DLOCK_DELIVER_DISPATCH);
	dlock_lock *lock = handle_new(client, "glib-precancel");
	guint id = dlock_glib_attach(client, NULL);
	GCancellable *cancellable = g_cancellable_new();
	outcome o;

	(void)state;
	g_cancellable_cancel(cancellable);
	start(lock, 5000, cancellable, &o);
	wait_outcome(&o);
	assert_cancelled(&o);
	assert_true(free_within("glib-precancel", 0));
	outcome_clear(&o);
	g_object_unref(cancellable);
	assert_true(g_source_remove(id));
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* Cancels after a pause, on a thread of its own. */
typedef struct canceler {
	GCancellable *cancellable;
	gulong pause_us;
} canceler;

static gpointer cancel_after(gpointer data)
{
	canceler *c = data;

	g_usleep(c->pause_us);
	g_cancellable_cancel(c->cancellable);
	return NULL;
}

static void test_a_cancel_racing_the_grant_is_never_a_cancelled_hold(void **state)
{
	const int rounds = test_under_valgrind() ? 40 : 200;

	(void)state;
	for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) {
		dlock_client *client = client_new(modes[i]);
		dlock_lock *lock = handle_new(client, "glib-race");
		guint id = modes[i] == DLOCK_DELIVER_DISPATCH ? dlock_glib_attach(client, NULL) : 0;
		int granted = 0, cancelled = 0;

		for (int round = 0; round < rounds; round++) {
			canceler c = { g_cancellable_new(), (gulong)(round % 20) * 50 };
			GThread *thread;
			outcome o;

			start(lock, 5000, c.cancellable, &o);
			thread = g_thread_new("glib-canceler", cancel_after, &c);
			wait_outcome(&o);
			g_thread_join(thread);
			if (o.ok) {
				/* A success is a hold, canceled or not. */
				assert_null(o.error);
				assert_int_equal(o.held, 1);
				assert_int_equal(dlock_held(lock), 1);
				assert_int_equal(dlock_release(lock), DLOCK_OK);
				granted++;
			} else {
				assert_cancelled(&o);
				cancelled++;
			}
			assert_int_equal(dlock_held(lock), 0);
			assert_true(free_within("glib-race", 2000));
			outcome_clear(&o);
			g_object_unref(c.cancellable);
		}
		printf("# %s: %d granted, %d cancelled\n",
		       modes[i] == DLOCK_DELIVER_DISPATCH ? "dispatch" : "thread", granted, cancelled);
		if (id != 0)
			assert_true(g_source_remove(id));
		dlock_lock_free(lock);
		dlock_client_free(client);
	}
}

static void test_a_refused_start_is_an_error_after_the_call(void **state)
{
	dlock_client *client = client_new(DLOCK_DELIVER_DISPATCH);
	dlock_lock *owned = NULL;
	dlock_lock *lock = handle_new(client, "glib-refused");
	guint id = dlock_glib_attach(client, NULL);
	outcome o;

	(void)state;
	/* Owned by its thread: dlock_acquire_async() refuses it. */
	assert_int_equal(dlock_lock_new(client, "glib-refused", &owned), DLOCK_OK);
	start(owned, 1000, NULL, &o);
	wait_outcome(&o);
	assert_dlock_error(&o, DLOCK_EINVAL);
	outcome_clear(&o);

	/* A second call while the first is in flight: DLOCK_EBUSY. */
	{
		outcome first, second;

		start(lock, 5000, NULL, &first);
		start(lock, 5000, NULL, &second);
		wait_outcome(&second);
		wait_outcome(&first);
		assert_true(first.ok);
		assert_dlock_error(&second, DLOCK_EBUSY);
		assert_int_equal(dlock_release(lock), DLOCK_OK);
		outcome_clear(&first);
		outcome_clear(&second);
	}
	assert_true(g_source_remove(id));
	dlock_lock_free(owned);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* A finish that is given another handle's result. */
static void on_acquired_wrong_handle(GObject *source, GAsyncResult *result, gpointer data)
{
	outcome *o = data;
	GError *error = NULL;

	(void)source;
	assert_false(dlock_glib_acquire_finish(NULL, result, NULL, &error));
	assert_true(g_error_matches(error, DLOCK_GLIB_ERROR, DLOCK_EINVAL));
	g_error_free(error);
	on_acquired(source, result, o);
}

static void test_finish_refuses_a_result_of_another_handle(void **state)
{
	dlock_client *client = client_new(DLOCK_DELIVER_DISPATCH);
	dlock_lock *lock = handle_new(client, "glib-finish");
	guint id = dlock_glib_attach(client, NULL);
	outcome o = { .lock = lock };

	(void)state;
	dlock_glib_acquire_async(lock, 5000, NULL, on_acquired_wrong_handle, &o);
	wait_outcome(&o);
	assert_true(o.ok);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	outcome_clear(&o);
	assert_true(g_source_remove(id));
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static int setup(void **state)
{
	(void)state;
	if (strcmp(backend, "redis") == 0) {
		server = test_redis_start(NULL, NULL, false);
		uri = test_redis_uri(server, NULL);
	} else {
		test_file_dir_make("dlock-glib", &dir, &uri);
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (server) {
		assert_int_equal(test_redis_leftover_count(server, "dlock:"), 0);
		test_redis_stop(server);
	} else {
		test_file_dir_remove(dir);
		g_free(dir);
	}
	g_free(uri);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_the_source_needs_a_client_in_dispatch_mode),
		cmocka_unit_test(test_dispatch_mode_acquires_through_the_attached_source),
		cmocka_unit_test(test_thread_mode_returns_in_the_callers_context_and_thread),
		cmocka_unit_test(test_a_waiting_acquire_is_woken_by_a_release),
		cmocka_unit_test(test_a_deadline_is_a_dlock_etimedout_error),
		cmocka_unit_test(test_a_cancel_while_waiting_is_cancelled_and_leaves_nothing),
		cmocka_unit_test(test_an_already_cancelled_cancellable_acquires_nothing),
		cmocka_unit_test(test_a_cancel_racing_the_grant_is_never_a_cancelled_hold),
		cmocka_unit_test(test_a_refused_start_is_an_error_after_the_call),
		cmocka_unit_test(test_finish_refuses_a_result_of_another_handle),
	};

	test_init(argv[0]);
	if (argc < 2 || (strcmp(argv[1], "file") != 0 && strcmp(argv[1], "redis") != 0)) {
		fprintf(stderr, "usage: %s file|redis\n", argv[0]);
		return 2;
	}
	backend = argv[1];
	return test_finish(cmocka_run_group_tests_name(backend, tests, setup, teardown));
}
