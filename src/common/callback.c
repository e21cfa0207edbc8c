/* SPDX-License-Identifier: MIT */
/*
 * The callback thread: every user state callback of a client runs here,
 * and every done of a call without a waiting thread (async.c), one at a
 * time and in the order the changes were noticed, so backends' I/O
 * threads and the watchdog never run user code and never wait for it.
 */
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
} event;

struct dlock__callbacks {
	GAsyncQueue *queue;
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

static gpointer callback_main(gpointer data)
{
	dlock__callbacks *cbs = data;
	event *ev;

	running = cbs;
	while ((ev = g_async_queue_pop(cbs->queue)) && (ev->lock || ev->mark)) {
		dlock_lock *lock = ev->lock;
		dlock_state_fn fn;
		void *user_data;

		if (ev->mark) {
			mark_reached(ev->mark);
			g_free(ev);
			continue;
		}

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
	g_free(ev);
	return NULL;
}

static gpointer callbacks_new(gpointer data, bool *ret_start)
{
	dlock__callbacks *cbs = g_new0(dlock__callbacks, 1);

	cbs->queue = g_async_queue_new();
	return cbs;
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
	cbs = wanted ? dlock__lazy_thread_get_locked(&client->callbacks, "dlock-callback", callbacks_new,
	                                             callback_main, NULL)
	             : NULL;
	if (!cbs) {
		dlock__mutex_unlock(&client->mu);
		return;
	}
	ev = g_new0(event, 1);
	ev->lock = dlock__lock_ref(lock);
	ev->kind = kind;
	ev->code = code;
	ev->text = g_strdup(text);
	g_async_queue_push(cbs->queue, ev);
	dlock__mutex_unlock(&client->mu);
}

void dlock__callbacks_post_done(dlock_client *client, dlock_lock *lock, dlock__op *op)
{
	dlock__callbacks *cbs;
	event *ev = g_new0(event, 1);

	ev->lock = dlock__lock_ref(lock);
	ev->op = op;
	/* The call that completes keeps the client from its free, which
	 * stops this thread only after that. */
	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	cbs = dlock__lazy_thread_get_locked(&client->callbacks, "dlock-callback", callbacks_new,
	                                    callback_main, NULL);
	g_async_queue_push(cbs->queue, ev);
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

/* Stop the thread after the events already queued, and join it. */
void dlock__callbacks_stop(dlock_client *client)
{
	dlock__callbacks *cbs = dlock__lazy_thread_stop(&client->callbacks, &client->mu, DLOCK__RANK_CLIENT,
	                                                callbacks_tell_stop);

	if (!cbs)
		return;
	g_async_queue_unref(cbs->queue);
	g_free(cbs);
}
