/* SPDX-License-Identifier: MIT */
/*
 * What leader elections need of the Redis backend (docs/recipes.md,
 * "Leader election"): a new leader announces itself on
 * "<prefix>{R}:elected" as "<id> <token>"; observers listen there and on
 * the release channel through the client's one subscriber connection.  A
 * leader that dies says nothing: observers find its end when its lease
 * runs out (the core sleeps until then), and the participant that takes
 * over announces itself.  A resignation that hands over is announced by
 * the next leader; one that leaves the lock free is announced on the
 * release channel, which a release nobody waits for leaves silent.  A
 * Redlock does all this on every master.  A user without channel rights
 * cannot listen: its watch is refused, and the core looks every second
 * instead.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "redlock.h"

/* How long an observer's watch waits for its subscriptions to be
 * confirmed before it trusts them to be on the way. */
#define CONFIRM_POLL_US 2000

typedef struct redis_observer {
	dlock__waiter *waiter;
	char *released;
	char *elected;
} redis_observer;

/* "<lock key>:elected": "<prefix>{R}:elected", or "R:elected" in the
 * plain format, as every name of R is made. */
static char *elected_channel(const redis_backend *b, const char *resource)
{
	char *key = dlock__redis_key(b, resource);
	char *channel = g_strconcat(key, ":elected", NULL);

	g_free(key);
	return channel;
}

/* Whether the server's ACL refused either of o's subscriptions (the user
 * has no channel rights): then no word can wake the observer. */
static bool refused(redis_backend *b, const redis_observer *o)
{
	return dlock__redis_sub_refused(b, o->released) || dlock__redis_sub_refused(b, o->elected);
}

/* DLOCK_OK while o's channels can wake the observer, else the refusal
 * (the core then looks again every second). */
static int armed(redis_backend *b, const redis_observer *o)
{
	if (refused(b, o))
		return dlock__error(DLOCK_EACCES, "%s: subscribing to %s refused: the user has no "
		                    "channel rights", b->label, o->elected);
	return DLOCK_OK;
}

static int observe(redis_backend *b, const char *resource, dlock__waiter *waiter, void **watch)
{
	redis_observer *o;
	redis_names names;
	int64_t until;

	/* The subscriptions last: the subscriber renews them after a
	 * reconnect, and wakes its listeners then. */
	if (*watch)
		return armed(b, *watch);
	o = g_new0(redis_observer, 1);
	dlock__redis_names_init(&names, b, resource);
	o->waiter = dlock__waiter_ref(waiter);
	o->released = g_strdup(names.released);
	o->elected = elected_channel(b, resource);
	dlock__redis_names_clear(&names);
	dlock__redis_sub_listen(b, o->released, waiter);
	dlock__redis_sub_listen(b, o->elected, waiter);
	/* A message published before the server confirms a subscription
	 * is not delivered: wait for both, within the timeouts, or until
	 * the server refuses one. */
	until = dlock__mono_us() + (b->connect_timeout_ms + b->command_timeout_ms) * 1000;
	while (!(dlock__redis_sub_confirmed(b, o->released) && dlock__redis_sub_confirmed(b, o->elected)) &&
	       !refused(b, o) && dlock__mono_us() < until && !dlock__waiter_canceled(waiter))
		g_usleep(CONFIRM_POLL_US);
	*watch = o;
	return armed(b, o);
}

static void unobserve(redis_backend *b, void *watch)
{
	redis_observer *o = watch;

	dlock__redis_sub_unlisten(b, o->released, o->waiter);
	dlock__redis_sub_unlisten(b, o->elected, o->waiter);
	dlock__waiter_free(o->waiter);
	g_free(o->released);
	g_free(o->elected);
	g_free(o);
}

int dlock__redis_observe(dlock__backend *backend, const char *resource, dlock__waiter *waiter,
                         void **watch)
{
	return observe(redis_of(backend), resource, waiter, watch);
}

void dlock__redis_unobserve(dlock__backend *backend, void *watch)
{
	unobserve(redis_of(backend), watch);
}

/* A resignation's word, when the release left the lock free: the
 * release itself publishes only to queued waiters.  ARGV[2]: PUBLISH, or
 * SPUBLISH on a cluster. */
static const char vacated_lua[] =
	"if redis.call('EXISTS', KEYS[1]) == 0 then redis.pcall(ARGV[2], ARGV[1], 'released') end\n"
	"return 0\n";

/* The announcement's command on conn: its reply, or a failure. */
static int announce_once(redis_backend *b, redis_conn *conn, const char *key, const char *channel,
                         const char *message, redisReply **ret)
{
	const char *publish = dlock__redis_publish_command(b);
	const char *publish_argv[] = { publish, channel, message };
	const char *vacated[] = { "EVAL", vacated_lua, "1", key, channel, publish };
	const char **argv = message ? publish_argv : vacated;
	int argc = message ? 3 : 6;
	size_t lens[6];

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	if (conn->asking) {
		const char *asking[1] = { "ASKING" };
		redisReply *asked = NULL;
		int rc = dlock__redis_command(b, conn, 1, asking, NULL, &asked);

		if (rc != DLOCK_OK)
			return rc;
		freeReplyObject(asked);
	}
	return dlock__redis_command(b, conn, argc, argv, lens, ret);
}

/* The announcement on one server, bounded by until_us. */
static void announce_until(redis_backend *b, const char *resource, const char *id, uint64_t token,
                           int64_t until_us)
{
	redis_names names;
	char *channel, *message;
	redisReply *reply = NULL;
	redis_route route;
	int rc;

	dlock__redis_names_init(&names, b, resource);
	channel = id ? elected_channel(b, resource) : g_strdup(names.released);
	message = id ? g_strdup_printf("%s %" PRIu64, id, token) : NULL;
	dlock__redis_route_init(&route, b->cluster ? names.key : NULL);
	for (;;) {
		redis_redirect redirect = { REDIRECT_NONE, -1, "" };
		redis_conn *conn;

		rc = dlock__redis_conn_get(b, &route, NULL, until_us, &conn);
		if (rc != DLOCK_OK)
			break;
		dlock__redis_conn_timeout(conn, MAX(dlock__remaining_us(until_us), 1000));
		conn->asking = route.ask != NULL;
		rc = announce_once(b, conn, names.key, channel, message, &reply);
		if (rc == DLOCK_OK && b->cluster)
			redirect = dlock__redis_redirect_of(reply);
		if (rc == DLOCK_OK && redirect.kind == REDIRECT_NONE)
			rc = dlock__redis_reply_error(b, reply, "announce");
		dlock__redis_conn_put(b, conn, rc == DLOCK_OK || rc == DLOCK_EBACKEND);
		if (redirect.kind == REDIRECT_NONE)
			break;
		freeReplyObject(reply);
		reply = NULL;
		rc = dlock__redis_route_follow(b, &route, &redirect, NULL, until_us);
		if (rc != DLOCK_OK)
			break;
	}
	if (rc != DLOCK_OK)
		dlock__log(b->logger, DLOCK_LOG_WARNING, "%s: %s of '%s' not announced on %s: %s",
		           b->label, id ? "new leader" : "resignation", resource, channel,
		           dlock_last_error_message());
	if (reply)
		freeReplyObject(reply);
	dlock__redis_names_clear(&names);
	g_free(channel);
	g_free(message);
}

void dlock__redis_announce(dlock__backend *backend, const char *resource, const char *id,
                           uint64_t token, int64_t ttl_ms)
{
	redis_backend *b = redis_of(backend);

	announce_until(b, resource, id, token, dlock__mono_us() + b->command_timeout_ms * 1000);
}

/* ---- a Redlock: the same on every master ------------------------------ */

typedef struct redlock_observer {
	int n;
	void *masters[]; /* redis_observer *, one per master */
} redlock_observer;

/* Every master publishes every word, so one whose channels can wake the
 * observer is enough; refused on all of them, the core looks every
 * second. */
int dlock__redlock_observe(dlock__backend *backend, const char *resource, dlock__waiter *waiter,
                           void **watch)
{
	redlock_backend *rl = redlock_of(backend);
	redlock_observer *o = *watch;
	int rc = DLOCK_OK, usable = 0;

	if (!o) {
		o = g_malloc0(sizeof(*o) + (size_t)rl->n_masters * sizeof(o->masters[0]));
		o->n = rl->n_masters;
		*watch = o;
	}
	for (int i = 0; i < o->n; i++) {
		int master_rc = observe(rl->masters[i], resource, waiter, &o->masters[i]);

		if (master_rc == DLOCK_OK)
			usable++;
		else
			rc = master_rc;
	}
	return usable > 0 ? DLOCK_OK : rc;
}

void dlock__redlock_unobserve(dlock__backend *backend, void *watch)
{
	redlock_backend *rl = redlock_of(backend);
	redlock_observer *o = watch;

	for (int i = 0; i < o->n; i++)
		unobserve(rl->masters[i], o->masters[i]);
	g_free(o);
}

/*
 * A new leader is published on every master, one after the other, each
 * bounded by the master timeout, so a master that does not answer delays
 * the campaign by that much at most.  A resignation needs no word: a
 * Redlock's release publishes on every master's release channel.
 */
void dlock__redlock_announce(dlock__backend *backend, const char *resource, const char *id,
                             uint64_t token, int64_t ttl_ms)
{
	redlock_backend *rl = redlock_of(backend);
	int64_t bound_us = dlock__redlock_master_timeout_ms(rl, ttl_ms) * 1000;

	if (!id)
		return;
	for (int i = 0; i < rl->n_masters; i++)
		announce_until(rl->masters[i], resource, id, token, dlock__mono_us() + bound_us);
}
