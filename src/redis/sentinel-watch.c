/* SPDX-License-Identifier: MIT */
/*
 * The Sentinel watcher ("dlock-sentinel"): failovers heard before a
 * command runs into them (docs/redis.md, "Sentinel").  It subscribes to
 * +switch-master on one sentinel, asks it once which master it names,
 * pings it when silent and moves on when it stays so; when no sentinel
 * takes the subscription it asks them every second instead.  A master
 * other than the one in use is doubted (dlock__redis_master_doubt()).
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "log.h"
#include "mutex.h"
#include "sentinel.h"
#include "thread.h"

#define WATCH_RETRY_FIRST_US (200 * 1000)
#define WATCH_RETRY_CAP_US (30 * 1000 * 1000)
/* How often the sentinels are asked when none takes the subscription. */
#define WATCH_POLL_US (1000 * 1000)
/* The watcher pings its sentinel after this much silence, and leaves it
 * for the next when the answer takes longer than this too (or than a
 * command timeout, if shorter): a switch announced while it listens to a
 * silent sentinel goes unheard, and the old master answers as one for
 * seconds after a switchover.  A local sentinel answers in microseconds. */
#define WATCH_PING_IDLE_US (1000 * 1000)
#define WATCH_PING_ANSWER_US (1000 * 1000)

static bool watcher_stopping(redis_sentinel *s)
{
	bool stop;

	dlock__mutex_lock(&s->mu, DLOCK__RANK_REDIS_SENTINEL);
	stop = s->stop;
	dlock__mutex_unlock(&s->mu);
	return stop;
}

static bool watcher_stopping_arg(void *s)
{
	return watcher_stopping(s);
}

/* Sleep us, or less if stopped. */
static void watcher_pause(redis_sentinel *s, int64_t us)
{
	dlock__wake_fd_pause(s->wake_fd, us, watcher_stopping_arg, s);
}

/* A message on +switch-master: "<service> <old ip> <old port> <new ip> <new port>". */
static void heard(redis_backend *b, const redisReply *reply)
{
	redis_sentinel *s = b->sentinel;
	const char *text;
	size_t n = strlen(s->service);

	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
	    reply->element[0]->type != REDIS_REPLY_STRING || strcmp(reply->element[0]->str, "message") != 0 ||
	    reply->element[2]->type != REDIS_REPLY_STRING)
		return;
	text = reply->element[2]->str;
	if (strncmp(text, s->service, n) != 0 || text[n] != ' ')
		return;
	dlock__log(b->logger, DLOCK_LOG_INFO, "%s: the sentinels switched the master: %s", b->label, text + n + 1);
	dlock__redis_master_doubt(b);
}

/*
 * Once subscribed on h: ask it which master it names.  A switch announced
 * before the subscription (while the thread listened to a sentinel that
 * fell silent, or between two sentinels) is heard this way: a master
 * other than the one last connected to is doubted, as +switch-master is.
 */
static void compare_named(redis_backend *b, const char *host, int port)
{
	redis_sentinel *s = b->sentinel;
	char *named, *known;

	named = strchr(host, ':') ? g_strdup_printf("[%s]:%d", host, port)
	                          : g_strdup_printf("%s:%d", host, port);
	known = dlock__redis_sentinel_master(s);
	if (known && strcmp(known, named) != 0) {
		dlock__log(b->logger, DLOCK_LOG_INFO, "%s: the sentinels name master %s, not %s", b->label,
		           named, known);
		dlock__redis_master_doubt(b);
	}
	g_free(known);
	g_free(named);
}

static void check_named(redis_backend *b, const dlock__host *h)
{
	char *host = NULL;
	int port = 0;
	bool unknown = false;

	if (dlock__redis_sentinel_ask_one(b, h, b->sentinel->waiter, dlock__mono_us() + b->command_timeout_ms * 1000, &host,
	            &port, &unknown) != DLOCK_OK)
		return;
	compare_named(b, host, port);
	g_free(host);
}

/*
 * No sentinel took the subscription (their ACL refuses SUBSCRIBE, say):
 * until the next round of subscriptions, in for_us, ask them every
 * second which master they name instead.  Without it a switchover would
 * go unnoticed for as long as the old master answers as one.
 */
static void poll_named(redis_backend *b, int64_t for_us)
{
	redis_sentinel *s = b->sentinel;
	int64_t until_us = dlock__mono_us() + for_us;

	while (!watcher_stopping(s) && dlock__mono_us() < until_us) {
		char *host = NULL;
		int port = 0;

		if (dlock__redis_sentinel_ask(b, s->waiter, dlock__mono_us() + b->command_timeout_ms * 1000,
		                              &host, &port) == DLOCK_OK)
			compare_named(b, host, port);
		g_free(host);
		watcher_pause(s, MIN(WATCH_POLL_US, until_us - dlock__mono_us()));
	}
}

/*
 * Listen on one sentinel until it fails or the thread stops.  Returns
 * whether the sentinel took the subscription (a refusal, or no answer,
 * sends the thread on to the next one).
 */
static bool watch_one(redis_backend *b, const dlock__host *h)
{
	redis_sentinel *s = b->sentinel;
	const char *argv[2] = { "SUBSCRIBE", "+switch-master" };
	char *addr = dlock__redis_sentinel_host_text(h);
	char *label = g_strdup_printf("sentinel %s", addr);
	redisReply *reply = NULL;
	redisContext *ctx;
	int64_t last_input_us = dlock__mono_us(), ping_sent_us = 0;
	int64_t answer_us = MIN(WATCH_PING_ANSWER_US, b->command_timeout_ms * 1000);
	bool subscribed = false;
	int rc;

	ctx = dlock__redis_sentinel_connect(b, h, label, s->waiter, dlock__mono_us() + b->connect_timeout_ms * 1000,
	                       &rc);
	if (ctx)
		rc = dlock__redis_sentinel_command(b, label, ctx, s->waiter, dlock__mono_us() + b->command_timeout_ms * 1000,
		                      "SUBSCRIBE", 2, argv, &reply);
	subscribed = rc == DLOCK_OK && reply->type == REDIS_REPLY_ARRAY;
	if (rc == DLOCK_OK && !subscribed)
		dlock__log(b->logger, DLOCK_LOG_DEBUG, "%s: %s does not take SUBSCRIBE: %s", b->label, label,
		           reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected answer");
	else if (rc != DLOCK_OK)
		dlock__log(b->logger, DLOCK_LOG_DEBUG, "%s: listening for failovers: %s", b->label,
		           dlock_last_error_message());
	if (reply)
		freeReplyObject(reply);
	if (subscribed)
		check_named(b, h);
	while (subscribed && !watcher_stopping(s)) {
		struct pollfd fds[2] = { { .fd = ctx->fd, .events = POLLIN },
		                         { .fd = s->wake_fd, .events = POLLIN } };
		int64_t now = dlock__mono_us(), wait_us;

		/* A sentinel that stopped answering would otherwise keep the
		 * thread deaf to the others. */
		if (!ping_sent_us && now - last_input_us > WATCH_PING_IDLE_US) {
			redisAppendCommand(ctx, "PING");
			if (dlock__redis_flush(ctx) != REDIS_OK)
				break;
			ping_sent_us = now;
		}
		if (ping_sent_us && now - ping_sent_us > answer_us)
			break;
		/* Until the next PING is due, or its answer. */
		wait_us = ping_sent_us ? ping_sent_us + answer_us - now
		                       : last_input_us + WATCH_PING_IDLE_US - now;
		if (poll(fds, 2, (int)CLAMP((wait_us + 999) / 1000, 1, 1000)) < 0 && errno != EINTR)
			break;
		if (fds[1].revents & POLLIN)
			dlock__wake_fd_drain(s->wake_fd);
		if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		if (redisBufferRead(ctx) != REDIS_OK)
			break;
		last_input_us = dlock__mono_us();
		ping_sent_us = 0;
		while (redisGetReplyFromReader(ctx, (void **)&reply) == REDIS_OK && reply) {
			heard(b, reply);
			freeReplyObject(reply);
		}
		if (ctx->err)
			break;
	}
	if (subscribed && !watcher_stopping(s))
		dlock__log(b->logger, DLOCK_LOG_DEBUG, "%s: %s: connection ended: %s", b->label, label,
		           ctx->errstr[0] ? ctx->errstr : "closed");
	if (ctx)
		redisFree(ctx);
	g_free(label);
	g_free(addr);
	return subscribed;
}

static gpointer watcher_main(gpointer data)
{
	redis_backend *b = data;
	redis_sentinel *s = b->sentinel;
	int64_t backoff_us = WATCH_RETRY_FIRST_US;

	while (!watcher_stopping(s)) {
		GPtrArray *list = dlock__redis_sentinel_list(s);
		bool any = false;

		for (guint i = 0; i < list->len && !watcher_stopping(s); i++)
			any = watch_one(b, list->pdata[i]) || any;
		g_ptr_array_unref(list);
		/* A sentinel that took the subscription and then went away
		 * is followed at once by the next; after a round of refusals
		 * and failures the sentinels are asked instead, for a time
		 * that grows before the subscriptions are tried again. */
		backoff_us = any ? WATCH_RETRY_FIRST_US : MIN(backoff_us * 2, WATCH_RETRY_CAP_US);
		if (any)
			watcher_pause(s, backoff_us);
		else
			poll_named(b, backoff_us);
	}
	return NULL;
}

void dlock__redis_sentinel_watch(redis_backend *b)
{
	if (!dlock__lazy_thread_peek(&b->sentinel_watcher))
		dlock__lazy_thread_get(&b->sentinel_watcher, &b->lazy_mu, DLOCK__RANK_THREAD_START,
		                       "dlock-sentinel", NULL, watcher_main, b);
}

static void watcher_tell_stop(gpointer data)
{
	redis_backend *b = data;
	uint64_t one = 1;

	dlock__mutex_lock(&b->sentinel->mu, DLOCK__RANK_REDIS_SENTINEL);
	b->sentinel->stop = true;
	dlock__mutex_unlock(&b->sentinel->mu);
	dlock__waiter_cancel(b->sentinel->waiter);
	while (write(b->sentinel->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

void dlock__redis_sentinel_unwatch(redis_backend *b)
{
	dlock__lazy_thread_stop(&b->sentinel_watcher, &b->lazy_mu, DLOCK__RANK_THREAD_START,
	                        watcher_tell_stop);
}
