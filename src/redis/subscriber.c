/* SPDX-License-Identifier: MIT */
/*
 * The subscriber: one pub/sub connection per backend, on its own thread
 * ("dlock-subscribe"), serving every waiter.  hiredis keeps one callback
 * per channel, so the channel -> waiters table is ours (a wake table).
 * Waiters are woken when their own channel's subscription is confirmed
 * (they queue then), on every message, and after a reconnect (messages
 * may have been missed while down).
 *
 * A wait queued on a resource listens on a channel of its own, on which a
 * release grants it the lock: "<fencing token> <ticket>".  Such a channel
 * has a mailbox (a redis_grant of the waiting thread) where the message is
 * left for the waiter before it is woken.
 *
 * Other threads never touch the connection: they change the table and
 * poke an eventfd; the thread then sends SUBSCRIBE/UNSUBSCRIBE for the
 * channels whose wanted state differs from what the server has.
 *
 * An ACL user without channel rights (-subscribe, resetchannels) gets
 * NOPERM for a SUBSCRIBE.  The error names no channel, but the server
 * answers a connection's commands in order: the thread keeps the channel
 * of every command it sent, in order, and the error belongs to the oldest
 * one unanswered.  Such a channel is marked refused and its waiters woken:
 * a wait whose channel is refused queues all the same, as a wait the
 * server cannot tell of its grant (acquire.c).
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "mutex.h"
#include "subscriber.h"
#include "thread.h"

void dlock__redis_sub_poke(redis_sub *sub)
{
	uint64_t one = 1;

	while (write(sub->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

/*
 * Queue the commands that bring the server in line with the table; the
 * channel of each goes to the end of sent (owned copies), the record of
 * what the server's next answers are for.  A refused channel is not asked
 * again on this connection, and is forgotten once nobody waits on it.
 */
static void sync_channels(redis_sub *sub, redisContext *ctx, GQueue *sent)
{
	dlock__waketable_iter iter;

	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	dlock__waketable_iter_init(&iter, sub->channels);
	while (dlock__waketable_iter_next(&iter)) {
		unsigned state = GPOINTER_TO_UINT(dlock__waketable_iter_data(&iter));
		bool wanted = dlock__waketable_iter_count(&iter) > 0;
		const char *name = dlock__waketable_iter_key(&iter);

		if (state & REFUSED) {
			if (!wanted)
				dlock__waketable_iter_set_data(&iter, NULL); /* frees it */
			continue;
		}
		if ((state & PENDING) || wanted == !!(state & SUBSCRIBED))
			continue;
		redisAppendCommand(ctx, wanted ? "SUBSCRIBE %s" : "UNSUBSCRIBE %s", name);
		g_queue_push_tail(sent, g_strdup(name));
		dlock__waketable_iter_set_data(&iter, GUINT_TO_POINTER(state | PENDING));
	}
	dlock__mutex_unlock(&sub->mu);
}

/* The server refused the SUBSCRIBE of name (sub->mu held): say so to its
 * waiters, once per connection. */
void dlock__redis_sub_refuse_locked(redis_sub *sub, const char *name, const char *why)
{
	unsigned state = GPOINTER_TO_UINT(dlock__waketable_data(sub->channels, name));

	dlock__mutex_assert_held(&sub->mu);
	if (!(state & PENDING) || (state & SUBSCRIBED))
		return;
	if (dlock__waketable_count(sub->channels, name) == 0) {
		dlock__waketable_set_data(sub->channels, name, NULL);
		return;
	}
	dlock__waketable_set_data(sub->channels, name, GUINT_TO_POINTER(REFUSED));
	dlock__log(sub->b->logger, DLOCK_LOG_INFO, "%s: subscribing to %s refused (%s): its waits are "
	           "told of their grants by their own tries", sub->b->label, name, why);
	dlock__waketable_wake(sub->channels, name);
}

/* Leave a grant in the mailbox of the wait that listens on name, if any.
 * Called with sub->mu held. */
static void post_grant(redis_sub *sub, const char *name, const char *text)
{
	redis_grant *box = g_hash_table_lookup(sub->boxes, name);
	uint64_t token;
	int64_t ticket;
	char *end;

	if (!box)
		return;
	token = g_ascii_strtoull(text, &end, 10);
	if (*end != ' ' || token == 0)
		return;
	ticket = g_ascii_strtoll(end + 1, &end, 10);
	if (*end != '\0' || ticket <= 0)
		return;
	box->token = token;
	box->ticket = ticket;
}

/*
 * Handle one reply from the server: subscribe, unsubscribe, message,
 * pong, or an error.  Every reply but a message answers the oldest
 * command in sent (a PING's entry is NULL), which it takes off.
 */
static void handle_reply(redis_sub *sub, redisReply *reply, int64_t *ping_sent_us, GQueue *sent)
{
	const char *kind, *name;
	bool known;

	if (reply->type == REDIS_REPLY_ERROR) {
		char *channel = g_queue_pop_head(sent);

		/* An ACL user without channel rights: that channel's waits
		 * queue without it.  Anything else is only logged. */
		dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
		if (channel && strncmp(reply->str, "NOPERM", 6) == 0)
			dlock__redis_sub_refuse_locked(sub, channel, reply->str);
		dlock__mutex_unlock(&sub->mu);
		if (!channel || strncmp(reply->str, "NOPERM", 6) != 0)
			dlock__log(sub->b->logger, DLOCK_LOG_WARNING, "%s: subscriber: %s", sub->b->label,
			           reply->str);
		g_free(channel);
		return;
	}
	/* PING is answered ["pong", ""] in subscribed mode, but +PONG once the
	 * connection has no channel left (every waiter has gone). */
	if (reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0) {
		g_free(g_queue_pop_head(sent));
		*ping_sent_us = 0;
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING)
		return;
	kind = reply->element[0]->str;
	if (strcmp(kind, "pong") == 0) {
		g_free(g_queue_pop_head(sent));
		*ping_sent_us = 0;
		return;
	}
	if (strcmp(kind, "subscribe") == 0 || strcmp(kind, "unsubscribe") == 0)
		g_free(g_queue_pop_head(sent));
	if (reply->element[1]->type != REDIS_REPLY_STRING)
		return;
	name = reply->element[1]->str;
	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	known = dlock__waketable_contains(sub->channels, name);
	if (known && strcmp(kind, "subscribe") == 0) {
		dlock__redis_sub_confirmed_locked(sub, name);
	} else if (known && strcmp(kind, "unsubscribe") == 0) {
		/* Frees the channel if it has no waiter left. */
		dlock__waketable_set_data(sub->channels, name, NULL);
	} else if (strcmp(kind, "message") == 0) {
		dlock__redis_sub_message_locked(sub, name, reply);
	}
	dlock__mutex_unlock(&sub->mu);
}

void dlock__redis_sub_confirmed_locked(redis_sub *sub, const char *name)
{
	dlock__mutex_assert_held(&sub->mu);
	if (!dlock__waketable_contains(sub->channels, name))
		return;
	dlock__waketable_set_data(sub->channels, name, GUINT_TO_POINTER(SUBSCRIBED));
	/* A wait queues once its own channel is confirmed; the release
	 * channel's confirmation would only make every waiter try once more
	 * for nothing. */
	if (g_hash_table_contains(sub->boxes, name))
		dlock__waketable_wake(sub->channels, name);
}

void dlock__redis_sub_message_locked(redis_sub *sub, const char *name, const redisReply *reply)
{
	dlock__mutex_assert_held(&sub->mu);
	if (reply->elements == 3 && reply->element[2]->type == REDIS_REPLY_STRING)
		post_grant(sub, name, reply->element[2]->str);
	dlock__waketable_wake(sub->channels, name);
}

/*
 * After a connection ends nothing is subscribed.  The waiters of channels
 * that were subscribed retry (a release may have been missed); the others
 * were never told anything by this connection, and waking them would only
 * make them retry as often as a failing connection is made.
 */
static void connection_lost(redis_sub *sub)
{
	dlock__waketable_iter iter;

	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	dlock__waketable_iter_init(&iter, sub->channels);
	while (dlock__waketable_iter_next(&iter)) {
		if (GPOINTER_TO_UINT(dlock__waketable_iter_data(&iter)) & SUBSCRIBED)
			dlock__waketable_iter_wake(&iter);
		dlock__waketable_iter_set_data(&iter, NULL);
	}
	dlock__mutex_unlock(&sub->mu);
}

bool dlock__redis_sub_stopping(redis_sub *sub)
{
	bool stop;

	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	stop = sub->stop;
	dlock__mutex_unlock(&sub->mu);
	return stop;
}

bool dlock__redis_sub_reconnecting(redis_sub *sub)
{
	bool reconnect;

	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	reconnect = sub->reconnect;
	sub->reconnect = false;
	dlock__mutex_unlock(&sub->mu);
	return reconnect;
}

/* Serve one connection until it fails or the subscriber stops.  Returns
 * whether the server answered anything but an error on it. */
static bool serve(redis_sub *sub, redisContext *ctx)
{
	redis_backend *b = sub->b;
	int64_t last_input_us = dlock__mono_us();
	int64_t ping_sent_us = 0;
	bool answered = false;
	GQueue sent = G_QUEUE_INIT; /* the channel of each command unanswered, NULL for a PING */

	for (;;) {
		struct pollfd fds[2] = {
			{ .fd = ctx->fd, .events = POLLIN },
			{ .fd = sub->wake_fd, .events = POLLIN },
		};
		int64_t now = dlock__mono_us();
		int timeout_ms;
		redisReply *reply;

		if (dlock__redis_sub_stopping(sub))
			break;
		if (dlock__redis_sub_reconnecting(sub)) {
			dlock__log(b->logger, DLOCK_LOG_INFO, "%s: subscriber: reconnecting, to follow the master",
			           b->label);
			break;
		}

		sync_channels(sub, ctx, &sent);
		if (!ping_sent_us && now - last_input_us > PING_IDLE_US) {
			redisAppendCommand(ctx, "PING");
			g_queue_push_tail(&sent, NULL);
			ping_sent_us = now;
		}
		if (dlock__redis_flush(ctx) != REDIS_OK)
			break;
		if (ping_sent_us && now - ping_sent_us > b->command_timeout_ms * 1000) {
			dlock__log(b->logger, DLOCK_LOG_WARNING, "%s: subscriber got no answer to PING; reconnecting",
			           b->label);
			break;
		}
		timeout_ms = ping_sent_us ? (int)MIN(b->command_timeout_ms, 1000) : 1000;
		if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR)
			break;
		if (fds[1].revents & POLLIN)
			dlock__wake_fd_drain(sub->wake_fd);
		if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		if (redisBufferRead(ctx) != REDIS_OK)
			break;
		last_input_us = dlock__mono_us();
		while (redisGetReplyFromReader(ctx, (void **)&reply) == REDIS_OK && reply) {
			/* Not an error: a server at maxclients says so and closes. */
			if (reply->type != REDIS_REPLY_ERROR)
				answered = true;
			handle_reply(sub, reply, &ping_sent_us, &sent);
			freeReplyObject(reply);
		}
		if (ctx->err)
			break;
	}
	g_queue_clear_full(&sent, g_free);
	if (dlock__redis_sub_stopping(sub))
		return answered;
	dlock__log(b->logger, DLOCK_LOG_INFO, "%s: subscriber connection ended: %s", b->label,
	           ctx->errstr[0] ? ctx->errstr : "no answer");
	return answered;
}

bool dlock__redis_sub_stopping_arg(void *sub)
{
	return dlock__redis_sub_stopping(sub);
}

static gpointer subscriber_main(gpointer data)
{
	redis_sub *sub = data;
	redis_backend *b = sub->b;
	int64_t backoff_us = RECONNECT_FIRST_US;

	for (;;) {
		redisContext *ctx;
		bool proven;
		int rc;

		if (dlock__redis_sub_stopping(sub))
			break;
		ctx = dlock__redis_connect_cancelable(b, sub->waiter, b->connect_timeout_ms * 1000, false,
		                                      &rc);
		if (ctx) {
			int64_t start_us = dlock__mono_us();

			proven = serve(sub, ctx) && dlock__mono_us() - start_us >= CONNECTION_PROVEN_US;
			redisFree(ctx);
			connection_lost(sub);
		} else {
			if (rc != DLOCK_ECANCELED) /* else stopping */
				dlock__log(b->logger, DLOCK_LOG_WARNING, "subscriber: %s",
				           dlock_last_error_message());
			proven = false;
		}
		/* Only a connection the server answered on, and that lasted,
		 * counts as made: one that a proxy or load balancer before a
		 * down server accepts and closes at once (or a server at
		 * maxclients) backs off like a refused one. */
		if (proven) {
			backoff_us = RECONNECT_FIRST_US;
		} else {
			/* Waiters coming and going poke the thread too, and do
			 * not cut the pause short. */
			dlock__wake_fd_pause(sub->wake_fd, backoff_us, dlock__redis_sub_stopping_arg, sub);
			backoff_us = MIN(backoff_us * 2, RECONNECT_CAP_US);
		}
	}
	return NULL;
}

static gpointer sub_new(gpointer data, bool *ret_start)
{
	redis_sub *sub = g_new0(redis_sub, 1);

	sub->b = data;
	g_mutex_init(&sub->mu);
	sub->channels = dlock__waketable_new(g_str_hash, g_str_equal, (dlock__key_copy_fn)g_strdup,
	                                     g_free, NULL);
	sub->boxes = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	sub->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sub->wake_fd < 0)
		g_error("dlock: eventfd: %s", g_strerror(errno));
	sub->waiter = dlock__waiter_new();
	return sub;
}

static redis_sub *sub_get(redis_backend *b)
{
	return dlock__lazy_thread_get(&b->sub, &b->lazy_mu, DLOCK__RANK_THREAD_START, "dlock-subscribe", sub_new,
	                              b->cluster ? dlock__redis_sub_cluster_main : subscriber_main, b);
}

void dlock__redis_sub_add_wait(redis_backend *b, const char *released, const char *name,
                               dlock__waiter *waiter, redis_grant *box)
{
	redis_sub *sub = sub_get(b);

	box->ticket = 0;
	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	g_hash_table_insert(sub->boxes, g_strdup(name), box);
	/* Woken when its own channel is confirmed, not before: it queues
	 * then, and a try before would be one too many. */
	dlock__waketable_add(sub->channels, name, waiter);
	dlock__waketable_add(sub->channels, released, waiter);
	dlock__mutex_unlock(&sub->mu);
	dlock__redis_sub_poke(sub);
}

void dlock__redis_sub_remove_wait(redis_backend *b, const char *released, const char *name,
                                  dlock__waiter *waiter)
{
	redis_sub *sub = dlock__lazy_thread_peek(&b->sub);

	if (!sub)
		return;
	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	g_hash_table_remove(sub->boxes, name);
	dlock__waketable_remove(sub->channels, name, waiter);
	dlock__waketable_remove(sub->channels, released, waiter);
	dlock__mutex_unlock(&sub->mu);
	/* No poke: the thread would compete with the caller, which is about
	 * to return with the lock, only to unsubscribe.  The UNSUBSCRIBEs go
	 * out with the next wait's SUBSCRIBE or within the thread's poll
	 * period; a channel left subscribed meanwhile is harmless, since no
	 * entry is queued under it any more. */
}

void dlock__redis_sub_listen(redis_backend *b, const char *channel, dlock__waiter *waiter)
{
	redis_sub *sub = sub_get(b);

	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	dlock__waketable_add(sub->channels, channel, waiter);
	dlock__mutex_unlock(&sub->mu);
	dlock__redis_sub_poke(sub);
}

void dlock__redis_sub_unlisten(redis_backend *b, const char *channel, dlock__waiter *waiter)
{
	redis_sub *sub = dlock__lazy_thread_peek(&b->sub);

	if (!sub)
		return;
	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	dlock__waketable_remove(sub->channels, channel, waiter);
	dlock__mutex_unlock(&sub->mu);
}

bool dlock__redis_sub_refused(redis_backend *b, const char *name)
{
	redis_sub *sub = dlock__lazy_thread_peek(&b->sub);
	bool refused;

	if (!sub)
		return false;
	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	refused = GPOINTER_TO_UINT(dlock__waketable_data(sub->channels, name)) & REFUSED;
	dlock__mutex_unlock(&sub->mu);
	return refused;
}

bool dlock__redis_sub_confirmed(redis_backend *b, const char *name)
{
	redis_sub *sub = dlock__lazy_thread_peek(&b->sub);
	bool confirmed;

	if (!sub)
		return false;
	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	confirmed = GPOINTER_TO_UINT(dlock__waketable_data(sub->channels, name)) & SUBSCRIBED;
	dlock__mutex_unlock(&sub->mu);
	return confirmed;
}

bool dlock__redis_sub_take_grant(redis_backend *b, redis_grant *box, int64_t ticket,
                                 uint64_t *ret_token)
{
	redis_sub *sub = dlock__lazy_thread_peek(&b->sub);
	bool granted;

	if (!sub)
		return false;
	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	granted = box->ticket == ticket;
	if (granted)
		*ret_token = box->token;
	box->ticket = 0;
	dlock__mutex_unlock(&sub->mu);
	return granted;
}

/* Called from other library threads (the sentinel watcher, the watchdog)
 * that may still run while the backend closes: under lazy_mu, so the
 * subscriber is either not stopped yet or seen as gone, never freed
 * under this call. */
void dlock__redis_sub_reconnect(redis_backend *b)
{
	redis_sub *sub;

	dlock__mutex_lock(&b->lazy_mu, DLOCK__RANK_THREAD_START);
	sub = dlock__lazy_thread_peek(&b->sub);
	if (sub) {
		dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
		sub->reconnect = true;
		dlock__mutex_unlock(&sub->mu);
		dlock__redis_sub_poke(sub);
	}
	dlock__mutex_unlock(&b->lazy_mu);
}

static void sub_tell_stop(gpointer data)
{
	redis_sub *sub = data;

	dlock__mutex_lock(&sub->mu, DLOCK__RANK_REDIS_SUB);
	sub->stop = true;
	dlock__mutex_unlock(&sub->mu);
	/* A connect under way (under Sentinel, asking silent sentinels one
	 * command timeout each) ends at once. */
	dlock__waiter_cancel(sub->waiter);
	dlock__redis_sub_poke(sub);
}

void dlock__redis_sub_stop(redis_backend *b)
{
	redis_sub *sub = dlock__lazy_thread_stop(&b->sub, &b->lazy_mu, DLOCK__RANK_THREAD_START, sub_tell_stop);

	if (!sub)
		return;
	close(sub->wake_fd);
	dlock__waiter_free(sub->waiter);
	dlock__waketable_free(sub->channels);
	g_hash_table_unref(sub->boxes);
	g_mutex_clear(&sub->mu);
	g_free(sub);
}
