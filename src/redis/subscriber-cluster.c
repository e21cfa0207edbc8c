/* SPDX-License-Identifier: MIT */
/*
 * The subscriber on a Redis Cluster: the same table of channels and
 * waiters as on one server (subscriber.c), served over one connection per
 * master, by sharded pub/sub.  A resource's channels carry its hash tag,
 * so each lives in the resource's slot, and the scripts' SPUBLISH reaches
 * the subscribers of that slot's master alone -- which is what the
 * release's "did the grant reach anyone" count needs (PUBLISH on a
 * cluster reaches every node's subscribers but counts only the node's
 * own).
 *
 * Each channel is subscribed (SSUBSCRIBE) on the master the slot map
 * names; where it went is the thread's own record (placed).  A node that
 * answers MOVED has the map updated and the channel subscribed again
 * there; a slot moved away pushes "sunsubscribe" for each of its
 * channels, whose waiters then try once more (a release may have gone
 * unheard) while the channel is subscribed again on the new owner, the
 * map asked for first.  A connection lost is the same for every channel
 * on it.  Connections to masters no channel uses any more are closed.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "log.h"
#include "mutex.h"
#include "subscriber.h"

#define LINKS_MAX 64

/* One master's connection. */
typedef struct sub_link {
	redis_node *node;
	redisContext *ctx;
	GQueue sent;              /* channel of each command unanswered, NULL for a PING */
	int64_t last_input_us;
	int64_t ping_sent_us;
	int channels;             /* subscribed or pending here */
} sub_link;

typedef struct cluster_sub {
	redis_sub *sub;
	redis_backend *b;
	GPtrArray *links;         /* sub_link * */
	GHashTable *placed;       /* channel -> redis_node * it is (being) subscribed on */
	bool map_stale;           /* ask for the slot map before subscribing again */
	int64_t connect_after_us; /* no connection made before this (a pause after
	                           * a failure, doubling) */
	int64_t refresh_after_us; /* no map asked for before this (a pause after each
	                           * time: a master may be missing for seconds) */
	int64_t backoff_us;       /* the next pause; reset by a confirmed subscription */
} cluster_sub;

static sub_link *link_find(cluster_sub *cs, redis_node *node)
{
	for (guint i = 0; i < cs->links->len; i++) {
		sub_link *link = cs->links->pdata[i];

		if (link->node == node)
			return link;
	}
	return NULL;
}

/* The channel is on no node any more. */
static void unplace(cluster_sub *cs, const char *name)
{
	redis_node *node = g_hash_table_lookup(cs->placed, name);
	sub_link *link = node ? link_find(cs, node) : NULL;

	if (link)
		link->channels--;
	g_hash_table_remove(cs->placed, name);
}

/* The channel's state is gone from the server (sub->mu held): its
 * waiters retry if it was subscribed, and it leaves the record. */
static void forget_locked(cluster_sub *cs, const char *name, bool wake)
{
	redis_sub *sub = cs->sub;
	unsigned state = GPOINTER_TO_UINT(dlock__waketable_data(sub->channels, name));

	if (wake && (state & SUBSCRIBED))
		dlock__waketable_wake(sub->channels, name);
	unplace(cs, name);
	if (dlock__waketable_contains(sub->channels, name))
		dlock__waketable_set_data(sub->channels, name, NULL);
}

/* A connection ended: nothing of it is subscribed any more. */
static void link_lost(cluster_sub *cs, sub_link *link, const char *why)
{
	redis_sub *sub = cs->sub;
	GHashTableIter iter;
	gpointer name, node;
	GPtrArray *names = g_ptr_array_new_with_free_func(g_free);

	if (!dlock__redis_sub_stopping(sub))
		dlock__log(cs->b->logger, DLOCK_LOG_INFO, "%s: subscriber connection to %s ended: %s",
		           cs->b->label, link->node->addr, why);
	g_hash_table_iter_init(&iter, cs->placed);
	while (g_hash_table_iter_next(&iter, &name, &node))
		if (node == link->node)
			g_ptr_array_add(names, g_strdup(name));
	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	for (guint i = 0; i < names->len; i++)
		forget_locked(cs, names->pdata[i], true);
	dlock__mutex_unlock(&sub->mu);
	g_ptr_array_unref(names);
	g_ptr_array_remove(cs->links, link);
	redisFree(link->ctx);
	g_queue_clear_full(&link->sent, g_free);
	g_free(link);
	cs->map_stale = true;
}

/* The connection to node, made if there is none (bounded by the connect
 * timeout); NULL if it cannot be made now. */
static sub_link *link_get(cluster_sub *cs, redis_node *node)
{
	sub_link *link = link_find(cs, node);
	redisContext *ctx;
	int rc;

	if (link || cs->links->len >= LINKS_MAX || dlock__mono_us() < cs->connect_after_us)
		return link;
	ctx = dlock__redis_connect_node(cs->b, node, cs->sub->waiter, cs->b->connect_timeout_ms * 1000, &rc);
	if (!ctx) {
		if (rc != DLOCK_ECANCELED)
			dlock__log(cs->b->logger, DLOCK_LOG_WARNING, "subscriber: %s", dlock_last_error_message());
		cs->map_stale = true;
		cs->connect_after_us = dlock__mono_us() + cs->backoff_us;
		cs->backoff_us = MIN(cs->backoff_us * 2, RECONNECT_CAP_US);
		return NULL;
	}
	link = g_new0(sub_link, 1);
	link->node = node;
	link->ctx = ctx;
	link->last_input_us = dlock__mono_us();
	g_queue_init(&link->sent);
	g_ptr_array_add(cs->links, link);
	return link;
}

/* One command for channel on link; the channel marked pending. */
static void send_one(cluster_sub *cs, sub_link *link, dlock__waketable_iter *iter, const char *name,
                     bool subscribe, unsigned state)
{
	redisAppendCommand(link->ctx, subscribe ? "SSUBSCRIBE %s" : "SUNSUBSCRIBE %s", name);
	g_queue_push_tail(&link->sent, g_strdup(name));
	dlock__waketable_iter_set_data(iter, GUINT_TO_POINTER(state | PENDING));
	if (subscribe) {
		g_hash_table_insert(cs->placed, g_strdup(name), link->node);
		link->channels++;
	}
}

/*
 * Bring the servers in line with the table: each wanted channel
 * subscribed on its slot's master, each unwanted one unsubscribed where
 * it is.  Connections are made outside sub->mu: the channels whose
 * master has none yet are collected first.
 */
static void sync_channels(cluster_sub *cs)
{
	redis_sub *sub = cs->sub;
	GPtrArray *missing = g_ptr_array_new();
	dlock__waketable_iter iter;

	for (int pass = 0; pass < 2; pass++) {
		for (guint i = 0; i < missing->len; i++)
			link_get(cs, missing->pdata[i]);
		g_ptr_array_set_size(missing, 0);
		dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
		dlock__waketable_iter_init(&iter, sub->channels);
		while (dlock__waketable_iter_next(&iter)) {
			unsigned state = GPOINTER_TO_UINT(dlock__waketable_iter_data(&iter));
			bool wanted = dlock__waketable_iter_count(&iter) > 0;
			const char *name = dlock__waketable_iter_key(&iter);
			redis_node *node;
			sub_link *link;

			if (state & REFUSED) {
				if (!wanted) {
					unplace(cs, name);
					dlock__waketable_iter_set_data(&iter, NULL);
				}
				continue;
			}
			if ((state & PENDING) || wanted == !!(state & SUBSCRIBED))
				continue;
			node = wanted ? dlock__redis_cluster_owner(cs->b->cluster, dlock__redis_slot(name), NULL)
			              : g_hash_table_lookup(cs->placed, name);
			if (!node) {
				cs->map_stale = cs->map_stale || wanted;
				continue;
			}
			link = link_find(cs, node);
			if (link)
				send_one(cs, link, &iter, name, wanted, state);
			else if (wanted && pass == 0 && !g_ptr_array_find(missing, node, NULL))
				g_ptr_array_add(missing, node);
		}
		dlock__mutex_unlock(&sub->mu);
		if (missing->len == 0)
			break;
	}
	g_ptr_array_unref(missing);
}

/* An answer to the oldest command of link, which it takes off. */
static char *take_sent(sub_link *link)
{
	return g_queue_pop_head(&link->sent);
}

static void handle_error(cluster_sub *cs, sub_link *link, const redisReply *reply)
{
	redis_sub *sub = cs->sub;
	char *channel = take_sent(link);
	redis_redirect redirect = dlock__redis_redirect_of(reply);

	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	if (channel && strncmp(reply->str, "NOPERM", 6) == 0) {
		dlock__redis_sub_refuse_locked(sub, channel, reply->str);
	} else if (channel) {
		/* Not subscribed there: tried again, on the master the map
		 * names once it is updated. */
		forget_locked(cs, channel, false);
	}
	dlock__mutex_unlock(&sub->mu);
	if (redirect.kind == REDIRECT_MOVED)
		dlock__redis_cluster_moved(cs->b->cluster, redirect.slot, redirect.addr);
	else if (redirect.kind != REDIRECT_NONE)
		cs->map_stale = true;
	if (redirect.kind == REDIRECT_NONE && (!channel || strncmp(reply->str, "NOPERM", 6) != 0))
		dlock__log(cs->b->logger, DLOCK_LOG_WARNING, "%s: subscriber: %s: %s", cs->b->label,
		           link->node->addr, reply->str);
	g_free(channel);
}

static void handle_reply(cluster_sub *cs, sub_link *link, const redisReply *reply)
{
	redis_sub *sub = cs->sub;
	const char *kind, *name;

	if (reply->type == REDIS_REPLY_ERROR) {
		handle_error(cs, link, reply);
		return;
	}
	if (reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0) {
		g_free(take_sent(link));
		link->ping_sent_us = 0;
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING || reply->element[1]->type != REDIS_REPLY_STRING)
		return;
	kind = reply->element[0]->str;
	name = reply->element[1]->str;
	if (strcmp(kind, "pong") == 0) {
		g_free(take_sent(link));
		link->ping_sent_us = 0;
		return;
	}
	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	if (strcmp(kind, "ssubscribe") == 0) {
		g_free(take_sent(link));
		cs->backoff_us = RECONNECT_FIRST_US;
		dlock__redis_sub_confirmed_locked(sub, name);
	} else if (strcmp(kind, "sunsubscribe") == 0) {
		const char *head = g_queue_peek_head(&link->sent);
		/* Replies come in the order of the commands, and a channel's
		 * SSUBSCRIBE is answered before its slot can move: with our
		 * SUNSUBSCRIBE of it the oldest unanswered command, this is
		 * its answer (or a push that came first, after which the
		 * answer is taken for a push: either way one of each). */
		bool ours = head && strcmp(head, name) == 0;

		/* Not ours: the slot moved away, and the server says so. */
		if (ours)
			g_free(take_sent(link));
		else
			cs->map_stale = true;
		forget_locked(cs, name, !ours);
	} else if (strcmp(kind, "smessage") == 0) {
		dlock__redis_sub_message_locked(sub, name, reply);
	}
	dlock__mutex_unlock(&sub->mu);
}

/* Send what is queued on every link, ping the quiet ones, close the
 * ones that failed, went silent, or serve no channel any more. */
static void flush_links(cluster_sub *cs)
{
	int64_t now = dlock__mono_us();

	for (guint i = cs->links->len; i-- > 0;) {
		sub_link *link = cs->links->pdata[i];

		if (!link->ping_sent_us && now - link->last_input_us > PING_IDLE_US) {
			redisAppendCommand(link->ctx, "PING");
			g_queue_push_tail(&link->sent, NULL);
			link->ping_sent_us = now;
		}
		if (dlock__redis_flush(link->ctx) != REDIS_OK)
			link_lost(cs, link, link->ctx->errstr);
		else if (link->ping_sent_us && now - link->ping_sent_us > cs->b->command_timeout_ms * 1000)
			link_lost(cs, link, "no answer to PING");
		else if (link->channels == 0 && g_queue_is_empty(&link->sent))
			link_lost(cs, link, "no channel left");
	}
}

/* Read what came on the links that poll found ready. */
static void read_links(cluster_sub *cs, const struct pollfd *fds, GPtrArray *polled)
{
	for (guint i = 0; i < polled->len; i++) {
		sub_link *link = polled->pdata[i];
		redisReply *reply;

		if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)) || !g_ptr_array_find(cs->links, link, NULL))
			continue;
		if (redisBufferRead(link->ctx) != REDIS_OK) {
			link_lost(cs, link, link->ctx->errstr[0] ? link->ctx->errstr : "closed");
			continue;
		}
		link->last_input_us = dlock__mono_us();
		while (redisGetReplyFromReader(link->ctx, (void **)&reply) == REDIS_OK && reply) {
			handle_reply(cs, link, reply);
			freeReplyObject(reply);
		}
		if (link->ctx->err)
			link_lost(cs, link, link->ctx->errstr);
	}
}

static void drop_all(cluster_sub *cs, const char *why)
{
	while (cs->links->len > 0)
		link_lost(cs, cs->links->pdata[0], why);
}

/*
 * Ask for the map when it is stale, not before the pause is over.  The
 * pause follows every refresh, answered or not: a map may lack a slot's
 * master for the seconds a replica takes to replace it, and asking again
 * at once would only repeat it.
 */
static void refresh_map(cluster_sub *cs)
{
	int64_t now = dlock__mono_us();

	if (!cs->map_stale || now < cs->refresh_after_us)
		return;
	if (dlock__redis_cluster_refresh(cs->b, cs->sub->waiter, now + cs->b->connect_timeout_ms * 1000) ==
	    DLOCK_OK)
		cs->map_stale = false;
	cs->refresh_after_us = dlock__mono_us() + cs->backoff_us;
	cs->backoff_us = MIN(cs->backoff_us * 2, RECONNECT_CAP_US);
}

gpointer dlock__redis_sub_cluster_main(gpointer data)
{
	redis_sub *sub = data;
	cluster_sub cs = { .sub = sub, .b = sub->b, .backoff_us = RECONNECT_FIRST_US };
	GPtrArray *polled = g_ptr_array_new();

	cs.links = g_ptr_array_new();
	cs.placed = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	while (!dlock__redis_sub_stopping(sub)) {
		struct pollfd fds[LINKS_MAX + 1];
		int n = 0, timeout_ms = 1000;

		if (dlock__redis_sub_reconnecting(sub))
			drop_all(&cs, "reconnecting");
		refresh_map(&cs);
		sync_channels(&cs);
		flush_links(&cs);
		g_ptr_array_set_size(polled, 0);
		for (guint i = 0; i < cs.links->len; i++) {
			sub_link *link = cs.links->pdata[i];

			fds[n++] = (struct pollfd){ .fd = link->ctx->fd, .events = POLLIN };
			g_ptr_array_add(polled, link);
			if (link->ping_sent_us)
				timeout_ms = (int)MIN(cs.b->command_timeout_ms, 1000);
		}
		if (cs.map_stale)
			timeout_ms = (int)CLAMP((cs.refresh_after_us - dlock__mono_us()) / 1000, 1, timeout_ms);
		fds[n] = (struct pollfd){ .fd = sub->wake_fd, .events = POLLIN };
		if (poll(fds, (nfds_t)n + 1, timeout_ms) < 0 && errno != EINTR)
			continue;
		if (fds[n].revents & POLLIN)
			dlock__wake_fd_drain(sub->wake_fd);
		read_links(&cs, fds, polled);
	}
	drop_all(&cs, "stopping");
	g_ptr_array_unref(cs.links);
	g_ptr_array_unref(polled);
	g_hash_table_unref(cs.placed);
	return NULL;
}
