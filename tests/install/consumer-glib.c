/* SPDX-License-Identifier: MIT */
/*
 * A program built against an installed dlock with pkg-config's dlock-glib
 * (tests/install): in a GLib main loop, takes a lock on the file backend
 * in the directory argv[1] through dlock-glib.h, then releases it.
 */
#include <stdio.h>

#include <dlock-glib.h>

typedef struct run {
	dlock_lock *lock;
	GMainLoop *loop;
	int status;
} run;

static void on_acquired(GObject *source, GAsyncResult *result, gpointer data)
{
	run *r = data;
	GError *error = NULL;
	guint64 token = 0;

	(void)source;
	if (dlock_glib_acquire_finish(r->lock, result, &token, &error)) {
		printf("dlock-glib: held with token %" G_GUINT64_FORMAT "\n", token);
		r->status = dlock_release(r->lock) == DLOCK_OK ? 0 : 1;
	} else {
		fprintf(stderr, "consumer-glib: %s\n", error->message);
		g_error_free(error);
	}
	g_main_loop_quit(r->loop);
}

int main(int argc, char **argv)
{
	char *uri;
	dlock_client *client = NULL;
	run r = { NULL, NULL, 1 };
	guint source;

	if (argc != 2) {
		fprintf(stderr, "usage: consumer-glib DIR\n");
		return 64;
	}
	uri = g_strdup_printf("file://%s", argv[1]);
	if (dlock_client_new(uri, &client) != DLOCK_OK ||
	    dlock_client_set_delivery(client, DLOCK_DELIVER_DISPATCH) != DLOCK_OK ||
	    dlock_lock_new(client, "install/check-glib", &r.lock) != DLOCK_OK ||
	    dlock_lock_set_owner(r.lock, DLOCK_OWNER_HANDLE) != DLOCK_OK ||
	    (source = dlock_glib_attach(client, NULL)) == 0) {
		fprintf(stderr, "consumer-glib: %s\n", dlock_last_error_message());
		return 1;
	}
	r.loop = g_main_loop_new(NULL, FALSE);
	dlock_glib_acquire_async(r.lock, 1000, NULL, on_acquired, &r);
	g_main_loop_run(r.loop);
	g_main_loop_unref(r.loop);
	g_source_remove(source);
	dlock_lock_free(r.lock);
	dlock_client_free(client);
	g_free(uri);
	return r.status;
}
