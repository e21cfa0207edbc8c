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
 * delays them until their next look.
 */
#include "core.h"
#include "thread.h"

typedef struct announcement {
	dlock__slot *slot;    /* NULL: the stop sentinel */
	char *resource;
	char *id;             /* NULL: a resignation */
	uint64_t token;
	int64_t ttl_ms;
} announcement;

struct dlock__announcer {
	GAsyncQueue *queue;
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
	announcement *a;

	while ((a = g_async_queue_pop(announcer->queue)) && a->slot) {
		a->slot->ops->announce(a->slot->impl, a->resource, a->id, a->token, a->ttl_ms);
		announcement_free(a);
	}
	g_free(a);
	return NULL;
}

static gpointer announcer_new(gpointer data, bool *ret_start)
{
	dlock__announcer *announcer = g_new0(dlock__announcer, 1);

	(void)data;
	(void)ret_start;
	announcer->queue = g_async_queue_new();
	return announcer;
}

static void announcer_tell_stop(gpointer data)
{
	dlock__announcer *announcer = data;

	g_async_queue_push(announcer->queue, g_new0(announcement, 1));
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
	 * stopped under it first, always finds it ahead of its sentinel. */
	g_mutex_lock(&client->mu);
	announcer = dlock__lazy_thread_get_locked(&client->announcer, "dlock-announce", announcer_new,
	                                          announce_main, NULL);
	if (announcer)
		g_async_queue_push(announcer->queue, a);
	g_mutex_unlock(&client->mu);
	if (!announcer)
		announcement_free(a);
}

void dlock__announce_stop(dlock_client *client)
{
	dlock__announcer *announcer = dlock__lazy_thread_stop(&client->announcer, &client->mu,
	                                                      announcer_tell_stop);

	if (!announcer)
		return;
	g_async_queue_unref(announcer->queue);
	g_free(announcer);
}
