/* SPDX-License-Identifier: MIT */
/*
 * glib-daemon — hold several locks from a GLib main loop, without a
 * thread that waits.
 *
 *   glib-daemon [--uri URI] [--for SECONDS] NAME...
 *
 * Takes a lock on each NAME and keeps them until --for SECONDS have passed
 * (default: until a signal), or SIGINT or SIGTERM comes; then releases
 * them all and exits 0.  A lock found lost (its lease expired, its lock
 * file removed) is reported and taken again.  URI defaults to the file
 * backend in $DLOCK_DIR (else /tmp/dlock-<uid>).  Exit status: 0 done,
 * 64 usage error, 1 the backend refused the setup.
 *
 * It shows include/dlock-glib.h: the client delivers its callbacks on the
 * loop's thread (DLOCK_DELIVER_DISPATCH and dlock_glib_attach()), and
 * every acquire is a GIO call, dlock_glib_acquire_async(), that a
 * GCancellable ends at shutdown.
 */
#include <signal.h>
#include <stdio.h>

#include <dlock-glib.h>

typedef struct service service;

/* One lock the daemon keeps. */
typedef struct kept {
	service *d;
	dlock_lock *lock;
	const char *name;           /* borrowed from argv */
	GCancellable *cancellable;  /* ends the acquire in flight at shutdown */
	gboolean acquiring;         /* an acquire is in flight */
	gboolean held;
} kept;

struct service {
	GMainLoop *loop;
	kept *locks;
	int n;
	gboolean stopping;
	int in_flight;  /* calls not yet ended: the loop ends at 0 */
};

static void acquire(kept *k);
static void release(kept *k);

/* Once stopping, the loop ends when the last call has ended: its
 * callback then owns nothing more. */
static void maybe_quit(service *d)
{
	if (d->stopping && d->in_flight == 0)
		g_main_loop_quit(d->loop);
}

/* The end of an acquire, in the loop's thread (GIO brings it back to the
 * context that started it). */
static void on_acquired(GObject *source, GAsyncResult *result, gpointer data)
{
	kept *k = data;
	GError *error = NULL;
	guint64 token = 0;

	(void)source;
	k->acquiring = FALSE;
	k->d->in_flight--;
	if (dlock_glib_acquire_finish(k->lock, result, &token, &error)) {
		/* A success is always a hold, even if the cancellable fired
		 * meanwhile: the shutdown releases it below. */
		k->held = TRUE;
		printf("glib-daemon: holding %s (fencing token %" G_GUINT64_FORMAT ")\n", k->name, token);
		if (k->d->stopping)
			release(k);
	} else if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
		/* Our shutdown: nothing is held. */
	} else {
		/* DLOCK_GLIB_ERROR: the code is dlock's. */
		printf("glib-daemon: %s not acquired: %s (%s); trying again\n", k->name, error->message,
		       dlock_code_name(error->code));
		if (!k->d->stopping)
			acquire(k);
	}
	g_clear_error(&error);
	maybe_quit(k->d);
}

/* Wait for the lock as long as it takes; the shutdown cancels. */
static void acquire(kept *k)
{
	k->acquiring = TRUE;
	k->d->in_flight++;
	dlock_glib_acquire_async(k->lock, -1, k->cancellable, on_acquired, k);
}

/* The end of a release, in the loop's thread as every callback of the
 * client.  DLOCK_ELOST: the hold had been lost, and is cleared now. */
static void on_released(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	kept *k = data;

	(void)lock;
	(void)token;
	k->d->in_flight--;
	if (rc == DLOCK_OK)
		printf("glib-daemon: released %s\n", k->name);
	if (!k->d->stopping)
		acquire(k);
	maybe_quit(k->d);
}

/* Give the hold back without blocking the loop; on_released() follows. */
static void release(kept *k)
{
	k->held = FALSE;
	if (dlock_release_async(k->lock, on_released, k) == DLOCK_OK)
		k->d->in_flight++;
}

/* What the library noticed about a hold: with DLOCK_DELIVER_DISPATCH it
 * runs on the loop's thread, from the source dlock_glib_attach() made. */
static void on_state(dlock_lock *lock, dlock_state state, void *data)
{
	kept *k = data;

	(void)lock;
	if (state == DLOCK_STATE_SUSPENDED) {
		printf("glib-daemon: %s is uncertain: pausing its work\n", k->name);
	} else if (state == DLOCK_STATE_RECONNECTED) {
		printf("glib-daemon: %s is confirmed again\n", k->name);
	} else if (state == DLOCK_STATE_LOST) {
		/* Someone else may hold it now: stop what it guarded, clear
		 * the lost hold (its release says DLOCK_ELOST), take it anew. */
		printf("glib-daemon: lost %s: taking it again\n", k->name);
		release(k);
	}
}

/* --for's end, SIGINT or SIGTERM: cancel what waits, release what is
 * held, and let the loop end when every acquire has ended. */
static gboolean stop(gpointer data)
{
	service *d = data;

	if (d->stopping)
		return G_SOURCE_CONTINUE;
	printf("glib-daemon: stopping\n");
	d->stopping = TRUE;
	for (int i = 0; i < d->n; i++) {
		kept *k = &d->locks[i];

		if (k->acquiring)
			g_cancellable_cancel(k->cancellable);
		if (k->held)
			release(k);
	}
	maybe_quit(d);
	return G_SOURCE_CONTINUE;
}

int main(int argc, char **argv)
{
	char *uri = NULL;
	int seconds = 0;
	GOptionEntry entries[] = {
		{ "uri", 0, 0, G_OPTION_ARG_STRING, &uri, "the backend (default: file locks in $DLOCK_DIR)", "URI" },
		{ "for", 0, 0, G_OPTION_ARG_INT, &seconds, "stop after SECONDS (default: at a signal)", "SECONDS" },
		G_OPTION_ENTRY_NULL
	};
	GOptionContext *options = g_option_context_new("NAME... - hold locks until stopped");
	GError *error = NULL;
	dlock_client *client = NULL;
	service d = { 0 };
	guint source;
	int rc, status = 0;

	g_option_context_add_main_entries(options, entries, NULL);
	if (!g_option_context_parse(options, &argc, &argv, &error) || argc < 2 || seconds < 0) {
		fprintf(stderr, "glib-daemon: %s\n",
		        error != NULL ? error->message : argc < 2 ? "no lock NAME given" : "--for: a negative time");
		g_clear_error(&error);
		g_option_context_free(options);
		g_free(uri);
		return 64;
	}
	g_option_context_free(options);
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* Callbacks on this thread, from the loop: chosen before any handle. */
	if ((rc = dlock_client_new(uri != NULL ? uri : "file://", &client)) != DLOCK_OK ||
	    (rc = dlock_client_set_delivery(client, DLOCK_DELIVER_DISPATCH)) != DLOCK_OK) {
		fprintf(stderr, "glib-daemon: %s: %s\n", dlock_strerror(rc), dlock_last_error_message());
		dlock_client_free(client);
		g_free(uri);
		return 1;
	}
	source = dlock_glib_attach(client, NULL);

	/* Acquires of a handle-owned lock: the hold belongs to the handle,
	 * not to the thread that happened to start it. */
	d.loop = g_main_loop_new(NULL, FALSE);
	d.n = argc - 1;
	d.locks = g_new0(kept, d.n);
	for (int i = 0; i < d.n; i++) {
		kept *k = &d.locks[i];

		k->d = &d;
		k->name = argv[i + 1];
		k->cancellable = g_cancellable_new();
		if ((rc = dlock_lock_new(client, k->name, &k->lock)) != DLOCK_OK ||
		    (rc = dlock_lock_set_owner(k->lock, DLOCK_OWNER_HANDLE)) != DLOCK_OK) {
			/* A name the backend refuses: stop what started. */
			fprintf(stderr, "glib-daemon: %s: %s\n", k->name, dlock_last_error_message());
			status = 64;
			stop(&d);
			break;
		}
		dlock_lock_set_state_callback(k->lock, on_state, k);
		acquire(k);
	}

	g_unix_signal_add(SIGINT, stop, &d);
	g_unix_signal_add(SIGTERM, stop, &d);
	if (seconds > 0)
		g_timeout_add_seconds((guint)seconds, stop, &d);
	if (d.in_flight > 0 || !d.stopping)
		g_main_loop_run(d.loop);

	/* Every call has ended and nothing is held: free in order, the
	 * source before its client. */
	g_source_remove(source);
	for (int i = 0; i < d.n; i++) {
		dlock_lock_free(d.locks[i].lock);
		g_clear_object(&d.locks[i].cancellable);
	}
	dlock_client_free(client);
	g_free(d.locks);
	g_main_loop_unref(d.loop);
	g_free(uri);
	printf("glib-daemon: done\n");
	return status;
}
