/* SPDX-License-Identifier: MIT */
/*
 * Redis Sentinel: the master of a service, as the sentinels name it
 * (docs/redis.md, "Sentinel").
 *
 * Every new connection to the master asks the sentinels first, in order
 * (SENTINEL GET-MASTER-ADDR-BY-NAME): the one that answered moves to the
 * front, each one that did not to the back; then the server named must
 * answer ROLE as a master.  So a reconnect after the master died, or after
 * a command was answered READONLY or LOADING (dlock__redis_master_doubt()),
 * finds the master of the moment.  A thread (sentinel-watch.c) hears of
 * failovers before a command runs into them.
 */
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "log.h"
#include "mutex.h"
#include "sentinel.h"
#include "thread.h"

#define SENTINEL_PORT 26379
/* Each sentinel gets at least this much of a caller's time, however many
 * are left to ask: a silent one must not starve those after it. */
#define ASK_SHARE_MIN_US (250 * 1000)
/* The pause before asking the sentinels again when the master they named
 * could not be used (a failover under way). */
#define MASTER_RETRY_FIRST_US (100 * 1000)
#define MASTER_RETRY_CAP_US (800 * 1000)

static void host_free(gpointer data)
{
	dlock__host *h = data;

	g_free(h->host);
	g_free(h);
}

char *dlock__redis_sentinel_host_text(const dlock__host *h)
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
GPtrArray *dlock__redis_sentinel_list(redis_sentinel *s)
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
int dlock__redis_sentinel_command(redis_backend *b, const char *label, redisContext *ctx,
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
redisContext *dlock__redis_sentinel_connect(redis_backend *b, const dlock__host *h, const char *label,
                                      dlock__waiter *waiter, int64_t deadline_us, int *ret_rc)
{
	redis_sentinel *s = b->sentinel;
	redisContext *ctx = dlock__redis_dial_host(b, label, h->host, h->port, waiter, deadline_us, ret_rc);
	redisReply *reply = NULL;

	if (ctx)
		*ret_rc = DLOCK_OK;
	if (ctx && s->password) {
		const char *argv[3] = { "AUTH", s->user ? s->user : s->password, s->password };

		*ret_rc = dlock__redis_sentinel_command(b, label, ctx, waiter, deadline_us, "AUTH", s->user ? 3 : 2,
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
int dlock__redis_sentinel_ask_one(redis_backend *b, const dlock__host *h, dlock__waiter *waiter,
                                  int64_t deadline_us, char **ret_host, int *ret_port, bool *ret_unknown)
{
	redis_sentinel *s = b->sentinel;
	char *addr = dlock__redis_sentinel_host_text(h);
	char *label = g_strdup_printf("sentinel %s", addr);
	const char *argv[3] = { "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s->service };
	redisReply *reply = NULL;
	redisContext *ctx;
	int rc;

	ctx = dlock__redis_sentinel_connect(b, h, label, waiter, deadline_us, &rc);
	if (ctx)
		rc = dlock__redis_sentinel_command(b, label, ctx, waiter, deadline_us, "SENTINEL GET-MASTER-ADDR-BY-NAME",
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
	GPtrArray *list = dlock__redis_sentinel_list(s);
	GString *why = g_string_new(NULL);
	bool all_unknown = true, all_refused = true;
	guint asked = 0;
	int rc = DLOCK_EUNAVAILABLE;

	for (guint i = 0; i < list->len; i++) {
		const dlock__host *h = list->pdata[i];
		int64_t left_us = dlock__remaining_us(deadline_us);
		int64_t share_us = MAX(left_us / (int64_t)(list->len - i), ASK_SHARE_MIN_US);
		bool unknown = false;

		if (left_us <= 0)
			break;
		share_us = MIN(share_us, b->command_timeout_ms * 1000);
		rc = dlock__redis_sentinel_ask_one(b, h, waiter, dlock__mono_us() + MIN(share_us, left_us), ret_host, ret_port,
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
		asked++;
		all_unknown = all_unknown && unknown;
		all_refused = all_refused && rc == DLOCK_EACCES;
		g_string_append_printf(why, "%s%s", why->len ? "; " : "", dlock_last_error_message());
	}
	if (rc == DLOCK_OK || rc == DLOCK_ECANCELED) {
		g_string_free(why, TRUE);
	} else if (why->len == 0) {
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: no time left to ask the sentinels", b->label);
		g_string_free(why, TRUE);
	} else if (all_refused && asked == list->len) {
		/* The credentials, not an outage: a refusal, as from one server. */
		rc = dlock__error(DLOCK_EACCES, "%s: every sentinel refused: %s", b->label, why->str);
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

/* DLOCK_OK if the server answers ROLE as a master; else DLOCK_EUNAVAILABLE
 * naming the role it has (a replica, or a sentinel's address by mistake). */
static int check_master(redis_backend *b, const char *label, redisContext *ctx, int64_t deadline_us)
{
	const char *argv[1] = { "ROLE" };
	redisReply *reply;
	int rc = dlock__redis_setup_command(b, label, ctx, deadline_us, "ROLE", 1, argv, &reply);

	if (rc != DLOCK_OK)
		return rc;
	if (reply->type == REDIS_REPLY_ERROR)
		rc = dlock__redis_reply_error(b, reply, "ROLE");
	else if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
	         reply->element[0]->type != REDIS_REPLY_STRING)
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: ROLE: an answer that is not a role", label);
	else if (strcmp(reply->element[0]->str, "master") != 0)
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: not the master (its role: %s)", label,
		                  reply->element[0]->str);
	freeReplyObject(reply);
	return rc;
}

/* The last error again, with the master it came from. */
static int error_naming(int code, const char *host, int port)
{
	char *why = g_strdup(dlock_last_error_message());

	code = dlock__error(code, "%s (master %s:%d)", why, host, port);
	g_free(why);
	return code;
}

/*
 * The master of a Sentinel service, by deadline_us: ask the sentinels,
 * connect to the address they name, authenticate, and check that it
 * answers ROLE as a master.  During a failover the sentinels may still
 * name a master that has died, or one already demoted: they are asked
 * again after a pause, within the deadline, and the last failure is what
 * the caller is told.  A master that refuses the credentials sends the
 * sentinel that named it to the back, so that the next asking starts with
 * another; once every sentinel has named a master that refused, that is
 * the answer.
 */
redisContext *dlock__redis_sentinel_connect_master(redis_backend *b, dlock__waiter *waiter,
                                                   int64_t deadline_us, int *ret_rc)
{
	int64_t pause_us = MASTER_RETRY_FIRST_US;
	guint refusals = 0;

	for (;;) {
		char *host = NULL, *label;
		redisContext *ctx;
		int port = 0, rc;

		rc = dlock__redis_sentinel_ask(b, waiter, deadline_us, &host, &port);
		if (rc != DLOCK_OK) {
			*ret_rc = rc == DLOCK_ETIMEDOUT ? DLOCK_EUNAVAILABLE : rc;
			return NULL;
		}
		label = g_strdup_printf("%s: master %s:%d", b->label, host, port);
		ctx = dlock__redis_dial_host(b, label, host, port, waiter, deadline_us, &rc);
		if (ctx && (rc = dlock__redis_authenticate(b, ctx, deadline_us)) == DLOCK_OK)
			rc = check_master(b, label, ctx, deadline_us);
		else if (ctx && rc == DLOCK_EACCES)
			rc = error_naming(rc, host, port);
		if (rc == DLOCK_OK) {
			dlock__redis_sentinel_set_master(b->sentinel, host, port);
			dlock__redis_sentinel_watch(b);
		} else if (ctx) {
			redisFree(ctx);
			ctx = NULL;
		}
		g_free(label);
		g_free(host);
		if (rc == DLOCK_OK) {
			*ret_rc = DLOCK_OK;
			return ctx;
		}
		if (rc == DLOCK_EACCES) {
			if (++refusals >= dlock__redis_sentinel_count(b->sentinel)) {
				*ret_rc = DLOCK_EACCES;
				return NULL;
			}
			dlock__redis_sentinel_rotate(b->sentinel);
			continue;
		}
		if (rc == DLOCK_ECANCELED || dlock__remaining_us(deadline_us) <= pause_us) {
			*ret_rc = rc == DLOCK_ECANCELED ? rc : dlock__error_prefix(DLOCK_EUNAVAILABLE, "");
			return NULL;
		}
		if (waiter ? dlock__waiter_sleep(waiter, dlock__waiter_seq(waiter),
		                                 dlock__mono_us() + pause_us) == DLOCK_ECANCELED
		           : (g_usleep((gulong)pause_us), false)) {
			*ret_rc = dlock__error(DLOCK_ECANCELED, "%s: canceled while looking for the master",
			                       b->label);
			return NULL;
		}
		pause_us = MIN(pause_us * 2, MASTER_RETRY_CAP_US);
	}
}

void dlock__redis_sentinel_free(redis_backend *b)
{
	redis_sentinel *s = b->sentinel;

	if (!s)
		return;
	dlock__redis_sentinel_unwatch(b);
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
