/* SPDX-License-Identifier: MIT */
/*
 * dlock-glib.h — dlock in a GLib main loop.
 *
 * Header only: static inline functions over dlock.h's calls without a
 * waiting thread (docs/async.md, "GLib").  A program using it compiles
 * with pkg-config's dlock-glib (dlock and gio-unix-2.0) and links libdlock;
 * there is no library of its own.
 *
 *  - dlock_glib_source_new() and dlock_glib_attach() run a client's
 *    callbacks in a GMainContext, for a client in DLOCK_DELIVER_DISPATCH.
 *  - dlock_glib_acquire_async() and dlock_glib_acquire_finish() are
 *    dlock_acquire_async() as a GIO asynchronous pair: a GTask, a
 *    GCancellable, a GAsyncReadyCallback in the caller's thread-default
 *    main context.  They work in either delivery mode.
 *
 * Errors come as GError: G_IO_ERROR_CANCELLED for a canceled call, else
 * DLOCK_GLIB_ERROR with the dlock code (a negative DLOCK_E*) as the
 * error's code and dlock_last_error_message() as its message.
 *
 * Names beginning dlock_glib__ are the header's own, not for programs.
 */
#ifndef DLOCK_GLIB_H
#define DLOCK_GLIB_H

#include <stdint.h>

#include <gio/gio.h>
#include <glib-unix.h>

#include <dlock.h>

G_BEGIN_DECLS

/* ------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------ */

/*
 * The error domain of dlock's codes: a GError in it has a negative
 * DLOCK_E* as its code (dlock_code_name(error->code) names it) and the
 * failure's dlock_last_error_message() as its message.  The quark is the
 * same in every translation unit and every program.  Safe from any
 * thread.
 */
#define DLOCK_GLIB_ERROR (dlock_glib_error_quark())

static inline GQuark dlock_glib_error_quark(void)
{
	return g_quark_from_static_string("dlock-error-quark");
}

/* A GError for dlock code rc with detail (or rc's text when detail is
 * NULL or ""): G_IO_ERROR_CANCELLED for DLOCK_ECANCELED. */
static inline GError *dlock_glib__error_new(int rc, const char *detail)
{
	const char *message = detail != NULL && detail[0] != '\0' ? detail : dlock_strerror(rc);

	if (rc == DLOCK_ECANCELED)
		return g_error_new_literal(G_IO_ERROR, G_IO_ERROR_CANCELLED, message);
	return g_error_new_literal(DLOCK_GLIB_ERROR, rc, message);
}

/* ------------------------------------------------------------------------
 * A client's callbacks in a GMainContext
 * ------------------------------------------------------------------------ */

static inline gboolean dlock_glib__dispatch(gint fd, GIOCondition condition, gpointer user_data)
{
	(void)fd;
	(void)condition;
	/* Only fails after fork() or on a client not in dispatch mode: the
	 * descriptor would stay readable, and the source spin. */
	return dlock_client_dispatch((dlock_client *)user_data, 0) >= 0 ? G_SOURCE_CONTINUE
	                                                                 : G_SOURCE_REMOVE;
}

/*
 * A GSource, named "dlock", that watches the client's event fd
 * (dlock_client_event_fd()) and runs the client's waiting callbacks --
 * dones, state callbacks, election events -- with dlock_client_dispatch()
 * whenever it is readable, on the thread that iterates the context the
 * source is attached to.  The client must be in DLOCK_DELIVER_DISPATCH
 * (dlock_client_set_delivery()), and is borrowed: destroy the source
 * (g_source_destroy()) before dlock_client_free().  The source removes
 * itself if a dispatch fails (after fork()).
 *
 * Returns a new source (caller attaches it and drops its reference with
 * g_source_unref()), or NULL, with nothing logged, when client is NULL or
 * not in DLOCK_DELIVER_DISPATCH.  Safe from any thread; attach the source
 * to one context only (dispatch is for one thread at a time).
 */
static inline GSource *dlock_glib_source_new(dlock_client *client)
{
	GSource *source;
	int fd = dlock_client_event_fd(client);

	if (fd < 0)
		return NULL;
	source = g_unix_fd_source_new(fd, G_IO_IN);
	g_source_set_name(source, "dlock");
	g_source_set_callback(source, G_SOURCE_FUNC(dlock_glib__dispatch), client, NULL);
	return source;
}

/*
 * dlock_glib_source_new() attached to context (NULL: the default main
 * context).  Returns the source's id (g_source_remove() removes it from
 * the default context; for another, g_main_context_find_source_by_id()
 * then g_source_destroy()), or 0 when client is NULL or not in
 * DLOCK_DELIVER_DISPATCH.  Safe from any thread.
 */
static inline guint dlock_glib_attach(dlock_client *client, GMainContext *context)
{
	GSource *source = dlock_glib_source_new(client);
	guint id;

	if (source == NULL)
		return 0;
	id = g_source_attach(source, context);
	g_source_unref(source);
	return id;
}

/* ------------------------------------------------------------------------
 * Acquire as a GIO asynchronous call
 * ------------------------------------------------------------------------ */

/* The task's data: what done found, and the cancellable's connection.
 * The starting thread, done and the cancel handler may run on three
 * threads at once. */
typedef struct dlock_glib__acquire {
	dlock_lock *lock;
	GCancellable *cancellable;  /* a reference, or NULL */
	GMutex mu;
	gulong handler;             /* guarded by mu: the connection, 0 if none */
	gboolean connected;         /* guarded by mu: the start has connected */
	gboolean finished;          /* guarded by mu: done has run */
	uint64_t token;             /* written by done, read after the return */
	GError *error;              /* the same; NULL for success */
} dlock_glib__acquire;

static inline void dlock_glib__acquire_free(gpointer data)
{
	dlock_glib__acquire *a = (dlock_glib__acquire *)data;

	g_mutex_clear(&a->mu);
	g_clear_object(&a->cancellable);
	g_clear_error(&a->error);
	g_free(a);
}

/* The tag of the pair's tasks: a quark, the same in every translation
 * unit (a static inline function's address is not). */
static inline gpointer dlock_glib__acquire_tag(void)
{
	return GUINT_TO_POINTER(g_quark_from_static_string("dlock-glib-acquire"));
}

static inline gboolean dlock_glib__acquire_return(gpointer data)
{
	GTask *task = G_TASK(data);
	dlock_glib__acquire *a = (dlock_glib__acquire *)g_task_get_task_data(task);

	if (a->error != NULL)
		g_task_return_error(task, g_steal_pointer(&a->error));
	else
		g_task_return_boolean(task, TRUE);
	return G_SOURCE_REMOVE;
}

/*
 * Return the task, taking over the caller's reference: from an idle
 * source of the task's context, so that the callback never runs inside
 * the starting call nor inside a dlock callback (where
 * dlock_client_free() would be refused), whichever thread this runs on.
 */
static inline void dlock_glib__acquire_deliver(GTask *task)
{
	GSource *idle = g_idle_source_new();

	g_source_set_priority(idle, g_task_get_priority(task));
	g_source_set_name(idle, "dlock_glib_acquire_async");
	g_source_set_callback(idle, dlock_glib__acquire_return, task, g_object_unref);
	g_source_attach(idle, g_task_get_context(task));
	g_source_unref(idle);
}

/* The cancellable's "cancelled" handler: ends the call unless its done
 * has run already. */
static inline void dlock_glib__acquire_cancel(GCancellable *cancellable, gpointer data)
{
	dlock_glib__acquire *a = (dlock_glib__acquire *)data;

	(void)cancellable;
	g_mutex_lock(&a->mu);
	if (!a->finished)
		dlock_lock_cancel(a->lock);
	g_mutex_unlock(&a->mu);
}

/*
 * The call's done, where the client's callbacks run.  The cancellable is
 * disconnected before the task is returned (outside mu: a disconnect
 * waits for a handler running on another thread, and that handler takes
 * mu); if the start has not connected yet, the start disconnects and
 * returns the task once it has.
 */
static inline void dlock_glib__acquire_done(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	GTask *task = G_TASK(data);
	dlock_glib__acquire *a = (dlock_glib__acquire *)g_task_get_task_data(task);
	gulong handler;
	gboolean connected;

	(void)lock;
	if (rc == DLOCK_OK)
		a->token = token;
	else
		a->error = dlock_glib__error_new(rc, dlock_last_error_message());
	g_mutex_lock(&a->mu);
	a->finished = TRUE;
	connected = a->connected;
	handler = a->handler;
	a->handler = 0;
	g_mutex_unlock(&a->mu);
	if (!connected)
		return;
	if (handler != 0)
		g_cancellable_disconnect(a->cancellable, handler);
	dlock_glib__acquire_deliver(task);
}

/*
 * Start dlock_acquire_async(lock, wait_ms, ...) and return at once;
 * callback(NULL, result, user_data) runs once when it ends, in the
 * thread-default main context of the calling thread (that context must
 * be iterated), never inside this call nor inside a dlock callback; it
 * calls dlock_glib_acquire_finish() for the outcome.  lock is borrowed
 * until then: it must be a DLOCK_OWNER_HANDLE handle, with no other
 * call of its own in flight.
 *
 * It works with both delivery modes of the client: with
 * DLOCK_DELIVER_DISPATCH, the client's callbacks must be run (by
 * dlock_glib_attach() to a context that is iterated, say) for the call to
 * end; with DLOCK_DELIVER_THREAD they run on the client's callback thread
 * and the result is handed to the caller's context.
 *
 * A refusal of dlock_acquire_async() (DLOCK_EINVAL for a handle owned by
 * its thread, DLOCK_EBUSY for a call in flight, ...) comes to callback
 * as well, as an error of DLOCK_GLIB_ERROR.  A cancellable already
 * cancelled when this is called gives G_IO_ERROR_CANCELLED without
 * acquiring.  A cancel afterwards, from any thread, calls
 * dlock_lock_cancel() on the handle: a wait ends with
 * G_IO_ERROR_CANCELLED and a grant that came meanwhile is released in
 * the background, so nothing stays held.  A cancel that comes after the
 * lock was granted (after dlock's done began) changes nothing: the result
 * is the success, and the lock is held -- a success is never reported as
 * canceled.  dlock_lock_free() of the handle or dlock_client_free() of
 * its client while the call is in flight ends it with
 * G_IO_ERROR_CANCELLED (the callback still comes, if the context is
 * iterated).
 *
 * Not from inside a "cancelled" handler of the same cancellable, nor
 * iterating the caller's context from one: the call disconnects from the
 * cancellable, which waits for its running handlers.  Safe from any
 * thread that has a thread-default context it iterates.
 */
static inline void dlock_glib_acquire_async(dlock_lock *lock, int64_t wait_ms,
                                            GCancellable *cancellable,
                                            GAsyncReadyCallback callback, gpointer user_data)
{
	GTask *task = g_task_new(NULL, cancellable, callback, user_data);
	dlock_glib__acquire *a = g_new0(dlock_glib__acquire, 1);
	gulong handler;
	gboolean finished;
	int rc;

	g_task_set_name(task, "dlock_glib_acquire_async");
	g_task_set_source_tag(task, dlock_glib__acquire_tag());
	/* The result is dlock's: GTask must not turn a success into a
	 * cancel when the cancellable fires after the grant. */
	g_task_set_check_cancellable(task, FALSE);
	a->lock = lock;
	a->cancellable = cancellable != NULL ? G_CANCELLABLE(g_object_ref(cancellable)) : NULL;
	g_mutex_init(&a->mu);
	g_task_set_task_data(task, a, dlock_glib__acquire_free);

	if (g_cancellable_is_cancelled(cancellable)) {
		a->error = g_error_new_literal(G_IO_ERROR, G_IO_ERROR_CANCELLED,
		                               "canceled before the acquire started");
		dlock_glib__acquire_deliver(task);
		return;
	}
	/* done gets the task's one reference, and returns it. */
	rc = dlock_acquire_async(lock, wait_ms, dlock_glib__acquire_done, task);
	if (rc != DLOCK_OK) {
		a->error = dlock_glib__error_new(rc, dlock_last_error_message());
		dlock_glib__acquire_deliver(task);
		return;
	}
	/* Connected only now that there is a call to cancel.  A cancellable
	 * cancelled meanwhile runs the handler here, at once. */
	handler = cancellable != NULL
	                  ? g_cancellable_connect(cancellable, G_CALLBACK(dlock_glib__acquire_cancel), a, NULL)
	                  : 0;
	g_mutex_lock(&a->mu);
	a->connected = TRUE;
	finished = a->finished;
	a->handler = finished ? 0 : handler;
	g_mutex_unlock(&a->mu);
	if (finished) {
		/* done ran before the connection was made: it left the
		 * disconnect and the return to this call. */
		if (handler != 0)
			g_cancellable_disconnect(cancellable, handler);
		dlock_glib__acquire_deliver(task);
	}
}

/*
 * The outcome of dlock_glib_acquire_async() on lock, from its callback's
 * result.  Returns TRUE when the handle holds the lock (its hold, as
 * after dlock_acquire(): release it with dlock_release() or
 * dlock_release_async()), with the hold's fencing token in *token if
 * token is not NULL.  Else FALSE, *token untouched, and *error (if error
 * is not NULL) set: G_IO_ERROR_CANCELLED in domain G_IO_ERROR when dlock
 * reported DLOCK_ECANCELED (a GCancellable, dlock_lock_cancel(), a free
 * of the handle or client), otherwise an error of DLOCK_GLIB_ERROR whose
 * code is what dlock_acquire() returns (DLOCK_ETIMEDOUT, DLOCK_EBUSY with
 * wait 0, DLOCK_EINVAL, ...) and whose message is the failure's
 * dlock_last_error_message(); also DLOCK_EINVAL when result is not a
 * result of dlock_glib_acquire_async() on this handle.  Call it once per
 * result.  Safe from any thread.
 */
static inline gboolean dlock_glib_acquire_finish(dlock_lock *lock, GAsyncResult *result,
                                                 guint64 *token, GError **error)
{
	dlock_glib__acquire *a;

	if (!G_IS_TASK(result) || g_task_get_source_tag(G_TASK(result)) != dlock_glib__acquire_tag() ||
	    (a = (dlock_glib__acquire *)g_task_get_task_data(G_TASK(result))) == NULL ||
	    a->lock != lock) {
		g_set_error_literal(error, DLOCK_GLIB_ERROR, DLOCK_EINVAL,
		                    "not a result of dlock_glib_acquire_async() on this handle");
		return FALSE;
	}
	if (!g_task_propagate_boolean(G_TASK(result), error))
		return FALSE;
	if (token != NULL)
		*token = a->token;
	return TRUE;
}

G_END_DECLS

#endif
