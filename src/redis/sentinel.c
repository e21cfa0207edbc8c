/*
 * Redis Sentinel: the master of a service, as the sentinels name it
 * (docs/redis.md, "Sentinel").
 *
 * Every new connection to the master asks the sentinels first, in order
 * (SENTINEL GET-MASTER-ADDR-BY-NAME): the one that answered moves to the
 * front, each one that did not to the back; conn.c then checks that the
 * server named answers ROLE as a master.  So a reconnect after the master
 * died, or after a command was answered READONLY or LOADING
 * (dlock__redis_master_doubt()), finds the master of the moment.
 *
 * A thread ("dlock-sentinel") subscribes to +switch-master on one
 * sentinel, so that a failover is heard before a command runs into it:
 * the idle connections are dropped and the subscriber reconnects.  A
 * sentinel that refuses SUBSCRIBE (an ACL, or a proxy in front of it) is
 * no error: the thread tries the next one, and after a round of refusals
 * asks the sentinels every second which master they name until the next
 * round.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "log.h"
#include "mutex.h"
#include "thread.h"

#define SENTINEL_PORT 26379
/* Each sentinel gets at least this much of a caller's time, however many
 * are left to ask: a silent one must not starve those after it. */
#define ASK_SHARE_MIN_US (250 * 1000)
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

struct redis_sentinel {
	char *service;
	char *user;               /* sentinel-user, or NULL */
	char *password;           /* sentinel-password, or NULL */
	GMutex mu;                /* guards the fields below (rank REDIS_SENTINEL) */
	GPtrArray *sentinels;     /* dlock__host *, in the order to ask them */
	char *master;             /* "host:port" of the last master connected to, or NULL */
	bool stop;                /* the watcher thread is to end */
	int wake_fd;              /* pokes the watcher thread */
	dlock__waiter *waiter;    /* the watcher's: canceled to stop it mid-connect */
};

static void host_free(gpointer data)
{
	dlock__host *h = data;

	g_free(h->host);
	g_free(h);
}

static char *host_text(const dlock__host *h)
{
	return strchr(h->host, ':') ? g_strdup_printf("[%s]:%d", h->host, h->port)
	                            : g_strdup_printf("%s:%d", h->host, h->port);
}

redis_sentinel *dlock__redis_sentinel_new(const dlock__uri *uri, const char *service,
                                          const char *user, const char *password)
{
	redis_sentinel *s = g_new0(redis_sentinel, 1);

	s->service = g_strdup(service);
	s->user = user && *user ? g_strdup(user) : NULL;
	s->password = g_strdup(password);
	g_mutex_init(&s->mu);
	s->sentinels = g_ptr_array_new_with_free_func(host_free);
	for (guint i = 0; i < uri->hosts->len; i++) {
		const dlock__host *from = uri->hosts->pdata[i];
		dlock__host *h = g_new0(dlock__host, 1);

		h->host = g_strdup(from->host);
		h->port = from->port ? from->port : SENTINEL_PORT;
		g_ptr_array_add(s->sentinels, h);
	}
	s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->wake_fd < 0)
		g_error("dlock: eventfd: %s", g_strerror(errno));
	s->waiter = dlock__waiter_new();
	return s;
}

const char *dlock__redis_sentinel_service(const redis_sentinel *s)
{
	return s->service;
}

char *dlock__redis_sentinel_master(redis_sentinel *s)
{
	char *master;

	dlock__mutex_lock(&s->mu, DLOCK__RANK_REDIS_SENTINEL);
	master = g_strdup(s->master);
	dlock__mutex_unlock(&s->mu);
	return master;
}

void dlock__redis_sentinel_set_master(redis_sentinel *s, const char *host, int port)
{
	dlock__mutex_lock(&s->mu, DLOCK__RANK_REDIS_SENTINEL);
	g_free(s->master);
	s->master = strchr(host, ':') ? g_strdup_printf("[%s]:%d", host, port)
	                              : g_strdup_printf("%s:%d", host, port);
	dlock__mutex_unlock(&s->mu);
}

/* The sentinels in the order to ask them (a copy: asking takes no lock). */
static GPtrArray *sentinels_now(redis_sentinel *s)
{
	GPtrArray *list = g_ptr_array_new_with_free_func(host_free);

	dlock__mutex_lock(&s->mu, DLOCK__RANK_REDIS_SENTINEL);
	for (guint i = 0; i < s->sentinels->len; i++) {
		const dlock__host *from = s->sentinels->pdata[i];
		dlock__host *h = g_new0(dlock__host, 1);

		h->host = g_strdup(from->host);
		h->port = from->port;
		g_ptr_array_add(list, h);
	}
	dlock__mutex_unlock(&s->mu);
	return list;
}

/* Move the sentinel host:port to the front, or to the back. */
static void move(redis_sentinel *s, const dlock__host *which, bool front)
{
	dlock__mutex_lock(&s->mu, DLOCK__RANK_REDIS_SENTINEL);
	for (guint i = 0; i < s->sentinels->len; i++) {
		dlock__host *h = s->sentinels->pdata[i];

		if (h->port != which->port || strcmp(h->host, which->host) != 0)
			continue;
		g_ptr_array_steal_index(s->sentinels, i);
		if (front)
			g_ptr_array_insert(s->sentinels, 0, h);
		else
			g_ptr_array_add(s->sentinels, h);
		break;
	}
	dlock__mutex_unlock(&s->mu);
}

guint dlock__redis_sentinel_count(const redis_sentinel *s)
{
	return s->sentinels->len; /* fixed at creation */
}

void dlock__redis_sentinel_rotate(redis_sentinel *s)
{
	dlock__mutex_lock(&s->mu, DLOCK__RANK_REDIS_SENTINEL);
	if (s->sentinels->len > 1)
		g_ptr_array_add(s->sentinels, g_ptr_array_steal_index(s->sentinels, 0));
	dlock__mutex_unlock(&s->mu);
}

/* A sentinel's error answer, worded for the sentinel options. */
static int sentinel_refusal(const char *label, const redisReply *reply)
{
	const char *text = reply->str;

	if (g_str_has_prefix(text, "NOAUTH"))
		return dlock__error(DLOCK_EACCES, "%s: requires a password (option sentinel-password)", label);
	if (g_str_has_prefix(text, "WRONGPASS") || g_str_has_prefix(text, "ERR invalid password"))
		return dlock__error(DLOCK_EACCES, "%s: refused the sentinel-user and sentinel-password "
		                    "given: wrong user name or password", label);
	if (strstr(text, "without any password configured") || strstr(text, "no password is set"))
		return dlock__error(DLOCK_EACCES, "%s: option sentinel-password given, but the sentinel "
		                    "has no password set", label);
	if (g_str_has_prefix(text, "NOPERM"))
		return dlock__error(DLOCK_EACCES, "%s: refused by its ACL: %s", label, text);
	return dlock__error(DLOCK_EUNAVAILABLE, "%s: %s", label, text);
}

/* One command to a sentinel, its reply whatever it is; a cancel of
 * waiter (may be NULL) ends the wait for it at once. */
static int sentinel_command(redis_backend *b, const char *label, redisContext *ctx,
                            dlock__waiter *waiter, int64_t deadline_us, const char *what, int argc,
                            const char **argv, redisReply **ret_reply)
{
	int rc = DLOCK_ECANCELED;

	*ret_reply = NULL;
	if (dlock__waiter_io_begin(waiter, ctx->fd))
		rc = dlock__redis_setup_command(b, label, ctx, deadline_us, what, argc, argv, ret_reply);
	if (dlock__waiter_io_end(waiter) || rc == DLOCK_ECANCELED) {
		if (*ret_reply)
			freeReplyObject(*ret_reply);
		*ret_reply = NULL;
		return dlock__error(DLOCK_ECANCELED, "%s: canceled", label);
	}
	return rc;
}

/* Connect to sentinel h and authenticate, by deadline_us.  label: for
 * messages.  NULL with the message recorded on failure. */
static redisContext *sentinel_connect(redis_backend *b, const dlock__host *h, const char *label,
                                      dlock__waiter *waiter, int64_t deadline_us, int *ret_rc)
{
	redis_sentinel *s = b->sentinel;
	redisContext *ctx = dlock__redis_dial_host(b, label, h->host, h->port, waiter, deadline_us, ret_rc);
	redisReply *reply = NULL;

	if (ctx)
		*ret_rc = DLOCK_OK;
	if (ctx && s->password) {
		const char *argv[3] = { "AUTH", s->user ? s->user : s->password, s->password };

		*ret_rc = sentinel_command(b, label, ctx, waiter, deadline_us, "AUTH", s->user ? 3 : 2,
		                           argv, &reply);
		if (*ret_rc == DLOCK_OK && reply->type == REDIS_REPLY_ERROR)
			*ret_rc = sentinel_refusal(label, reply);
		if (reply)
			freeReplyObject(reply);
		if (*ret_rc != DLOCK_OK) {
			redisFree(ctx);
			ctx = NULL;
		}
	}
	return ctx;
}

/*
 * Ask sentinel h for the master: DLOCK_OK and the address, or a failure
 * recorded as the message (unknown: the sentinel answered that it does
 * not know the service).
 */
static int ask_one(redis_backend *b, const dlock__host *h, dlock__waiter *waiter, int64_t deadline_us,
                   char **ret_host, int *ret_port, bool *ret_unknown)
{
	redis_sentinel *s = b->sentinel;
	char *addr = host_text(h);
	char *label = g_strdup_printf("sentinel %s", addr);
	const char *argv[3] = { "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s->service };
	redisReply *reply = NULL;
	redisContext *ctx;
	int rc;

	ctx = sentinel_connect(b, h, label, waiter, deadline_us, &rc);
	if (ctx)
		rc = sentinel_command(b, label, ctx, waiter, deadline_us, "SENTINEL GET-MASTER-ADDR-BY-NAME",
		                      3, argv, &reply);
	if (rc == DLOCK_OK && reply->type == REDIS_REPLY_ERROR) {
		rc = sentinel_refusal(label, reply);
	} else if (rc == DLOCK_OK && reply->type == REDIS_REPLY_NIL) {
		*ret_unknown = true;
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: does not know service '%s'", label, s->service);
	} else if (rc == DLOCK_OK && (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	                              reply->element[0]->type != REDIS_REPLY_STRING ||
	                              reply->element[1]->type != REDIS_REPLY_STRING ||
	                              atoi(reply->element[1]->str) <= 0 ||
	                              atoi(reply->element[1]->str) > 65535)) {
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: an answer that is not an address", label);
	} else if (rc == DLOCK_OK) {
		*ret_host = g_strdup(reply->element[0]->str);
		*ret_port = atoi(reply->element[1]->str);
	}
	if (reply)
		freeReplyObject(reply);
	if (ctx)
		redisFree(ctx);
	g_free(label);
	g_free(addr);
	return rc;
}

int dlock__redis_sentinel_ask(redis_backend *b, dlock__waiter *waiter, int64_t deadline_us,
                              char **ret_host, int *ret_port)
{
	redis_sentinel *s = b->sentinel;
	GPtrArray *list = sentinels_now(s);
	GString *why = g_string_new(NULL);
	bool all_unknown = true;
	int rc = DLOCK_EUNAVAILABLE;

	for (guint i = 0; i < list->len; i++) {
		const dlock__host *h = list->pdata[i];
		int64_t left_us = dlock__remaining_us(deadline_us);
		int64_t share_us = MAX(left_us / (int64_t)(list->len - i), ASK_SHARE_MIN_US);
		bool unknown = false;

		if (left_us <= 0)
			break;
		share_us = MIN(share_us, b->command_timeout_ms * 1000);
		rc = ask_one(b, h, waiter, dlock__mono_us() + MIN(share_us, left_us), ret_host, ret_port,
		             &unknown);
		if (rc == DLOCK_OK) {
			if (i > 0)
				move(s, h, true);
			break;
		}
		if (rc == DLOCK_ECANCELED)
			break;
		/* Asked last from now on: a silent sentinel first in line
		 * would take the whole of every short wait (its share is at
		 * least ASK_SHARE_MIN_US), and no such call would reach the
		 * others. */
		move(s, h, false);
		all_unknown = all_unknown && unknown;
		g_string_append_printf(why, "%s%s", why->len ? "; " : "", dlock_last_error_message());
	}
	if (rc == DLOCK_OK || rc == DLOCK_ECANCELED) {
		g_string_free(why, TRUE);
	} else if (why->len == 0) {
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: no time left to ask the sentinels", b->label);
		g_string_free(why, TRUE);
	} else {
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: %s: %s", b->label,
		                  all_unknown ? "the sentinels do not know the service"
		                              : "no sentinel named the master", why->str);
		g_string_free(why, TRUE);
	}
	g_ptr_array_unref(list);
	return rc;
}

/* ---- the watcher: +switch-master, heard early ---- */

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

	if (ask_one(b, h, b->sentinel->waiter, dlock__mono_us() + b->command_timeout_ms * 1000, &host,
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
	char *addr = host_text(h);
	char *label = g_strdup_printf("sentinel %s", addr);
	redisReply *reply = NULL;
	redisContext *ctx;
	int64_t last_input_us = dlock__mono_us(), ping_sent_us = 0;
	int64_t answer_us = MIN(WATCH_PING_ANSWER_US, b->command_timeout_ms * 1000);
	bool subscribed = false;
	int rc;

	ctx = sentinel_connect(b, h, label, s->waiter, dlock__mono_us() + b->connect_timeout_ms * 1000,
	                       &rc);
	if (ctx)
		rc = sentinel_command(b, label, ctx, s->waiter, dlock__mono_us() + b->command_timeout_ms * 1000,
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
		GPtrArray *list = sentinels_now(s);
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

void dlock__redis_sentinel_free(redis_backend *b)
{
	redis_sentinel *s = b->sentinel;

	if (!s)
		return;
	dlock__lazy_thread_stop(&b->sentinel_watcher, &b->lazy_mu, DLOCK__RANK_THREAD_START,
	                        watcher_tell_stop);
	close(s->wake_fd);
	dlock__waiter_free(s->waiter);
	g_ptr_array_unref(s->sentinels);
	g_mutex_clear(&s->mu);
	g_free(s->service);
	g_free(s->user);
	dlock__secret_free(s->password);
	g_free(s->master);
	g_free(s);
	b->sentinel = NULL;
}
