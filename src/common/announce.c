/* SPDX-License-Identifier: MIT */
/*
 * Announcements of elections' leaders (the seam's announce): a new
 * leader's word on the Redis channel, a touch of the lock file.  Each is a
 * round trip to a server, and on a slow or silent one it takes up to that
 * backend's timeouts (a Redlock's, one master timeout per master), while a
 * campaign must return by its deadline.  So they are made on a thread of
 * the client's ("dlock-announce", started by the first), one at a time
 * and in the order asked for, which keeps a resignation's word after the
 * election's word that came before it.  Observers query the server when a
 * word wakes them, so a late word misleads nobody; a lost one only
 * delays them until their next look.  So of the words for one resource
 * only the last asked for is worth making: a new one replaces those still
 * waiting.  Otherwise a backend slower than the campaigns (a frozen
 * Redlock master costs each word a master timeout) would pile up words
 * without bound, to be made one after the other, also by the client's
 * free.
 */
#include <string.h>

#include "core.h"
#include "mutex.h"
#include "thread.h"

typedef struct announcement {
	dlock__slot *slot;
	char *resource;
	char *id;             /* NULL: a resignation */
	uint64_t token;
	int64_t ttl_ms;
} announcement;

struct dlock__announcer {
	GMutex mu;            /* guards queue and stop (rank ANNOUNCE) */
	GCond cond;
	GQueue queue;         /* announcement *, not begun yet */
	bool stop;            /* make those queued, then end */
};

static void announcement_free(announcement *a)
{
	g_free(a->resource);
	g_free(a->id);
	g_free(a);
}

static gpointer announce_main(gpointer data)
{
	dlock__announcer *announcer = data;

	dlock__mutex_lock(&announcer->mu, DLOCK__RANK_ANNOUNCE);
	for (;;) {
		announcement *a = g_queue_pop_head(&announcer->queue);

		if (!a && announcer->stop)
			break;
		if (!a) {
			g_cond_wait(&announcer->cond, &announcer->mu);
			continue;
		}
		dlock__mutex_unlock(&announcer->mu);
		a->slot->ops->announce(a->slot->impl, a->resource, a->id, a->token, a->ttl_ms);
		announcement_free(a);
		dlock__mutex_lock(&announcer->mu, DLOCK__RANK_ANNOUNCE);
	}
	dlock__mutex_unlock(&announcer->mu);
	return NULL;
}

static gpointer announcer_new(gpointer data, bool *ret_start)
{
	dlock__announcer *announcer = g_new0(dlock__announcer, 1);

	(void)data;
	(void)ret_start;
	g_mutex_init(&announcer->mu);
	g_cond_init(&announcer->cond);
	g_queue_init(&announcer->queue);
	return announcer;
}

static void announcer_tell_stop(gpointer data)
{
	dlock__announcer *announcer = data;

	dlock__mutex_lock(&announcer->mu, DLOCK__RANK_ANNOUNCE);
	announcer->stop = true;
	g_cond_signal(&announcer->cond);
	dlock__mutex_unlock(&announcer->mu);
}

/* Queue a, dropping the words for its resource that have not begun.
 * announcer->mu held. */
static void enqueue_locked(dlock__announcer *announcer, announcement *a)
{
	dlock__mutex_assert_held(&announcer->mu);
	for (GList *l = announcer->queue.head, *next; l; l = next) {
		announcement *old = l->data;

		next = l->next;
		if (old->slot == a->slot && strcmp(old->resource, a->resource) == 0) {
			announcement_free(old);
			g_queue_delete_link(&announcer->queue, l);
		}
	}
	g_queue_push_tail(&announcer->queue, a);
	g_cond_signal(&announcer->cond);
}

void dlock__announce_later(dlock_client *client, dlock__slot *slot, const char *resource,
                           const char *id, uint64_t token, int64_t ttl_ms)
{
	dlock__announcer *announcer;
	announcement *a;

	if (!slot->ops->announce)
		return;
	a = g_new0(announcement, 1);
	a->slot = slot;
	a->resource = g_strdup(resource);
	a->id = g_strdup(id);
	a->token = token;
	a->ttl_ms = ttl_ms;
	/* Queued under client->mu, so that a stop, which marks the thread
	 * stopped under it first, finds it queued and makes it before the
	 * thread ends. */
	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	announcer = dlock__lazy_thread_get_locked(&client->announcer, "dlock-announce", announcer_new,
	                                          announce_main, NULL);
	if (announcer) {
		dlock__mutex_lock(&announcer->mu, DLOCK__RANK_ANNOUNCE);
		enqueue_locked(announcer, a);
		dlock__mutex_unlock(&announcer->mu);
	}
	dlock__mutex_unlock(&client->mu);
	if (!announcer)
		announcement_free(a);
}

void dlock__announce_stop(dlock_client *client)
{
	dlock__announcer *announcer = dlock__lazy_thread_stop(&client->announcer, &client->mu, DLOCK__RANK_CLIENT,
	                                                      announcer_tell_stop);

	if (!announcer)
		return;
	g_mutex_clear(&announcer->mu);
	g_cond_clear(&announcer->cond);
	g_free(announcer);
}
