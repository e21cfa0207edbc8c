/* SPDX-License-Identifier: MIT */
/*
 * The callback thread: every user state callback of a client runs here,
 * and every done of a call without a waiting thread (async.c), one at a
 * time and in the order the changes were noticed, so backends' I/O
 * threads and the watchdog never run user code and never wait for it.
 * With DLOCK_DELIVER_DISPATCH there is no such thread: the same events
 * wait in a queue behind an eventfd, and the program runs them in
 * dlock_client_dispatch().
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core.h"
#include "mutex.h"
#include "thread.h"

/* A point in the queue that dlock__callbacks_flush() waits for. */
typedef struct mark {
	GMutex mu;        /* guards reached (rank CALLBACK_MARK) */
	GCond cond;
	bool reached;
} mark;

typedef struct event {
	dlock_lock *lock; /* referenced; NULL with no mark is the stop sentinel */
	dlock__event_kind kind;
	int code;         /* a dlock_state, or a recipe's own event */
	char *text;       /* a recipe event's text, or NULL */
	mark *mark;       /* a flush's mark instead of an event, or NULL */
	dlock__op *op;    /* a call's result (DONE), referenced, or NULL */
	uint64_t seq;     /* DLOCK_DELIVER_DISPATCH: its place in the order queued */
} event;

struct dlock__callbacks {
	GAsyncQueue *queue;      /* DLOCK_DELIVER_THREAD: the callback thread's */
	/* DLOCK_DELIVER_DISPATCH: the events wait for dlock_client_dispatch() */
	bool dispatch;
	GMutex mu;               /* guards pending; the event fd follows it (rank DELIVERY) */
	GQueue pending;          /* of event * */
	uint64_t next_seq;       /* the seq of the next event queued */
	int event_fd;            /* readable exactly while pending is not empty */
};

/* The callbacks whose thread this is, on that thread; NULL elsewhere. */
static _Thread_local const dlock__callbacks *running;

static void mark_reached(mark *m)
{
	dlock__mutex_lock(&m->mu, DLOCK__RANK_CALLBACK_MARK);
	m->reached = true;
	g_cond_signal(&m->cond);
	dlock__mutex_unlock(&m->mu);
}

/* Run one event of lock (not a mark) and free it. */
static void run_event(event *ev)
{
	dlock_lock *lock = ev->lock;
	dlock_state_fn fn;
	void *user_data;

	if (ev->op) {
		dlock__op_deliver(ev->op);
		dlock__op_unref(ev->op);
	} else if (lock->recipe_ops) {
		lock->recipe_ops->event(lock->recipe, ev->kind, ev->code, ev->text);
	} else {
		dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
		fn = lock->freed ? NULL : lock->state_fn;
		user_data = lock->state_user_data;
		dlock__mutex_unlock(&lock->mu);
		if (fn)
			fn(lock, (dlock_state)ev->code, user_data);
	}
	dlock__lock_unref(lock);
	g_free(ev->text);
	g_free(ev);
}

/* An event never run: freed, with what it holds. */
static void drop_event(event *ev)
{
	if (ev->op)
		dlock__op_unref(ev->op);
	dlock__lock_unref(ev->lock);
	g_free(ev->text);
	g_free(ev);
}

static gpointer callback_main(gpointer data)
{
	dlock__callbacks *cbs = data;
	event *ev;

	running = cbs;
	while ((ev = g_async_queue_pop(cbs->queue)) && (ev->lock || ev->mark)) {
		if (ev->mark) {
			mark_reached(ev->mark);
			g_free(ev);
			continue;
		}
		run_event(ev);
	}
	g_free(ev);
	return NULL;
}

static gpointer callbacks_new(gpointer data, bool *ret_start)
{
	dlock_client *client = data;
	dlock__callbacks *cbs = g_new0(dlock__callbacks, 1);

	cbs->dispatch = client->delivery == DLOCK_DELIVER_DISPATCH;
	cbs->event_fd = -1;
	g_mutex_init(&cbs->mu);
	g_queue_init(&cbs->pending);
	if (cbs->dispatch) {
		/* Made by dlock_client_set_delivery(), which is this call. */
		cbs->event_fd = client->event_fd;
		*ret_start = false;
	} else {
		cbs->queue = g_async_queue_new();
	}
	return cbs;
}

/* The client's callbacks, made (and the thread started) on first use;
 * NULL once stopped.  client->mu held. */
static dlock__callbacks *callbacks_get_locked(dlock_client *client)
{
	return dlock__lazy_thread_get_locked(&client->callbacks, "dlock-callback", callbacks_new,
	                                     callback_main, client);
}

static void eventfd_signal(int fd)
{
	uint64_t one = 1;

	while (write(fd, &one, sizeof one) < 0 && errno == EINTR)
		;
}

static void eventfd_drain(int fd)
{
	uint64_t count;

	while (read(fd, &count, sizeof count) < 0 && errno == EINTR)
		;
}

/* Queue ev for whoever runs the client's callbacks. */
static void queue_event(dlock__callbacks *cbs, event *ev)
{
	if (!cbs->dispatch) {
		g_async_queue_push(cbs->queue, ev);
		return;
	}
	dlock__mutex_lock(&cbs->mu, DLOCK__RANK_DELIVERY);
	if (g_queue_is_empty(&cbs->pending))
		eventfd_signal(cbs->event_fd);
	ev->seq = cbs->next_seq++;
	g_queue_push_tail(&cbs->pending, ev);
	dlock__mutex_unlock(&cbs->mu);
}

static void callbacks_tell_stop(gpointer data)
{
	dlock__callbacks *cbs = data;

	g_async_queue_push(cbs->queue, g_new0(event, 1));
}

void dlock__callbacks_post(dlock_client *client, dlock_lock *lock, dlock_state state)
{
	dlock__callbacks_post_event(client, lock, DLOCK__EVENT_STATE, (int)state, NULL);
}

void dlock__callbacks_post_event(dlock_client *client, dlock_lock *lock, dlock__event_kind kind,
                                 int code, const char *text)
{
	dlock__callbacks *cbs;
	event *ev;
	bool wanted;

	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	/* A recipe's handle posts every event: whether its callback is set
	 * is for the recipe to say when the event runs. */
	wanted = !lock->freed && (lock->state_fn || lock->recipe_ops);
	dlock__mutex_unlock(&lock->mu);
	cbs = wanted ? callbacks_get_locked(client) : NULL;
	if (!cbs) {
		dlock__mutex_unlock(&client->mu);
		return;
	}
	ev = g_new0(event, 1);
	ev->lock = dlock__lock_ref(lock);
	ev->kind = kind;
	ev->code = code;
	ev->text = g_strdup(text);
	queue_event(cbs, ev);
	dlock__mutex_unlock(&client->mu);
}

void dlock__callbacks_post_done(dlock_client *client, dlock_lock *lock, dlock__op *op)
{
	event *ev = g_new0(event, 1);

	ev->lock = dlock__lock_ref(lock);
	ev->op = op;
	/* The call that completes keeps the client from its free, which
	 * stops the callbacks only after that. */
	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	queue_event(callbacks_get_locked(client), ev);
	dlock__mutex_unlock(&client->mu);
}

bool dlock__callbacks_on_thread(dlock_client *client)
{
	const dlock__callbacks *cbs = dlock__lazy_thread_peek(&client->callbacks);

	return cbs && cbs == running;
}

void dlock__callbacks_flush(dlock_client *client)
{
	dlock__callbacks *cbs;
	mark m;
	event *ev;

	if (dlock__callbacks_on_thread(client))
		return;
	/* Nobody to wait for: the program runs the callbacks.  Those
	 * queued run here, as its dispatch would run them. */
	if (client->delivery == DLOCK_DELIVER_DISPATCH) {
		dlock_client_dispatch(client, 0);
		return;
	}
	g_mutex_init(&m.mu);
	g_cond_init(&m.cond);
	m.reached = false;
	/* Under client->mu, as events are posted: a stop that comes later
	 * queues its sentinel after the mark. */
	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	cbs = client->callbacks.stopped ? NULL : dlock__lazy_thread_peek(&client->callbacks);
	if (cbs) {
		ev = g_new0(event, 1);
		ev->mark = &m;
		g_async_queue_push(cbs->queue, ev);
	}
	dlock__mutex_unlock(&client->mu);
	if (cbs) {
		dlock__mutex_lock(&m.mu, DLOCK__RANK_CALLBACK_MARK);
		while (!m.reached)
			g_cond_wait(&m.cond, &m.mu);
		dlock__mutex_unlock(&m.mu);
	}
	g_cond_clear(&m.cond);
	g_mutex_clear(&m.mu);
}

/* Stop the thread after the events already queued, and join it; in
 * DLOCK_DELIVER_DISPATCH, drop the events nobody dispatched (a done
 * among them was claimed by the client's free, which ran it). */
void dlock__callbacks_stop(dlock_client *client)
{
	dlock__callbacks *cbs = dlock__lazy_thread_stop(&client->callbacks, &client->mu, DLOCK__RANK_CLIENT,
	                                                callbacks_tell_stop);
	event *ev;

	if (!cbs)
		return;
	while ((ev = g_queue_pop_head(&cbs->pending)))
		drop_event(ev);
	if (cbs->queue)
		g_async_queue_unref(cbs->queue);
	g_mutex_clear(&cbs->mu);
	g_free(cbs);
}

/* ---- DLOCK_DELIVER_DISPATCH ------------------------------------------- */

DLOCK_API int dlock_client_set_delivery(dlock_client *client, dlock_delivery mode)
{
	int rc = DLOCK_OK;
	int fd = -1;

	if (!client)
		return dlock__error(DLOCK_EINVAL, "dlock_client_set_delivery: client is NULL");
	if (mode != DLOCK_DELIVER_THREAD && mode != DLOCK_DELIVER_DISPATCH)
		return dlock__error(DLOCK_EINVAL, "dlock_client_set_delivery: unknown mode %d (THREAD 0, "
		                    "DISPATCH 1)", (int)mode);
	rc = dlock__client_enter(client);
	if (rc != DLOCK_OK)
		return rc;
	if (mode == DLOCK_DELIVER_DISPATCH) {
		fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (fd < 0) {
			rc = dlock__error(DLOCK_EBACKEND, "dlock_client_set_delivery: eventfd: %s",
			                  g_strerror(errno));
			dlock__client_leave(client);
			return rc;
		}
	}
	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	if (g_hash_table_size(client->locks) > 0 || dlock__lazy_thread_peek(&client->callbacks) ||
	    client->callbacks.stopped) {
		rc = dlock__error(DLOCK_EINVAL, "dlock_client_set_delivery: the client has lock handles "
		                  "already; the delivery is set before the first");
	} else if (client->delivery != mode) {
		if (client->event_fd >= 0)
			close(client->event_fd);
		client->delivery = mode;
		client->event_fd = fd;
		fd = -1;
		if (mode == DLOCK_DELIVER_DISPATCH)
			callbacks_get_locked(client);
	}
	dlock__mutex_unlock(&client->mu);
	if (fd >= 0)
		close(fd);
	dlock__client_leave(client);
	return rc;
}

DLOCK_API int dlock_client_event_fd(const dlock_client *client)
{
	if (!client || dlock__client_forked(client) || client->delivery != DLOCK_DELIVER_DISPATCH)
		return -1;
	return client->event_fd;
}

DLOCK_API int dlock_client_dispatch(dlock_client *client, unsigned max_callbacks)
{
	const dlock__callbacks *outer = running;
	dlock__callbacks *cbs;
	uint64_t before = UINT64_MAX;
	unsigned ran = 0;

	if (!client)
		return dlock__error(DLOCK_EINVAL, "dlock_client_dispatch: client is NULL");
	if (dlock__client_forked(client))
		return dlock__error(DLOCK_ECANCELED, "the client was created in process %ld; this is a "
		                    "forked child", (long)client->pid);
	if (client->delivery != DLOCK_DELIVER_DISPATCH)
		return dlock__error(DLOCK_EINVAL, "dlock_client_dispatch: the client's callbacks run on "
		                    "its callback thread (DLOCK_DELIVER_THREAD)");
	cbs = dlock__lazy_thread_peek(&client->callbacks);
	/* From a callback it runs: the callbacks after it wait for it. */
	if (!cbs || outer == cbs)
		return 0;
	/* 0: those queued now, by their place (a callback that frees a
	 * handle takes that handle's out of the queue: a count would let
	 * later ones in). */
	if (max_callbacks == 0) {
		dlock__mutex_lock(&cbs->mu, DLOCK__RANK_DELIVERY);
		before = cbs->next_seq;
		dlock__mutex_unlock(&cbs->mu);
		max_callbacks = UINT_MAX;
	}
	running = cbs;
	while (ran < max_callbacks) {
		event *ev;

		dlock__mutex_lock(&cbs->mu, DLOCK__RANK_DELIVERY);
		ev = g_queue_peek_head(&cbs->pending);
		if (ev && ev->seq >= before)
			ev = NULL;
		else if (ev)
			g_queue_pop_head(&cbs->pending);
		if (g_queue_is_empty(&cbs->pending))
			eventfd_drain(cbs->event_fd);
		dlock__mutex_unlock(&cbs->mu);
		if (!ev)
			break;
		run_event(ev);
		ran++;
	}
	running = outer;
	return (int)ran;
}

void dlock__callbacks_drop(dlock_client *client, dlock_lock *lock)
{
	dlock__callbacks *cbs = dlock__lazy_thread_peek(&client->callbacks);
	GQueue dropped = G_QUEUE_INIT;
	GList *l, *next;
	event *ev;

	if (!cbs || !cbs->dispatch)
		return;
	dlock__mutex_lock(&cbs->mu, DLOCK__RANK_DELIVERY);
	for (l = cbs->pending.head; l; l = next) {
		ev = l->data;
		next = l->next;
		/* A done stays: the free claims it, and the event is then
		 * skipped. */
		if (ev->lock == lock && !ev->op) {
			g_queue_unlink(&cbs->pending, l);
			g_queue_push_tail_link(&dropped, l);
		}
	}
	if (g_queue_is_empty(&cbs->pending))
		eventfd_drain(cbs->event_fd);
	dlock__mutex_unlock(&cbs->mu);
	/* Freed outside the mutex: a reference dropped may be a handle's
	 * last, which takes its recipe with it. */
	while ((ev = g_queue_pop_head(&dropped)))
		drop_event(ev);
}
