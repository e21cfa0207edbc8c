/* SPDX-License-Identifier: MIT */
/*
 * The Redis floor: bare hiredis on synchronous connections, with none of
 * dlock's work around it.
 *
 * A pair is the textbook SET-NX-PX lock: "SET key token NX PX 30000" and
 * then the compare-and-delete script by EVALSHA (GET == token then DEL) —
 * two round trips, as dlock's uncontended acquire (one EVALSHA) and
 * release (one EVALSHA) are.  dlock's scripts also count a fencing token
 * and publish the release; that is part of what the ratio measures.  The
 * round-trip floor is PING.
 *
 * The fenced pair is the least a lock that hands out fencing tokens
 * costs: one script that does SET NX PX and, when it set the key, INCR of
 * a counter (the token), then the same compare-and-delete.  dlock's
 * acquire is that script plus the wait queue's check; the ratio to it is
 * what dlock adds to a fenced lock, the ratio of it to the plain pair what
 * fencing itself costs on this server.
 *
 * The handoff floor is the same lock with a release channel: the holder's
 * compare-and-delete script also PUBLISHes; the waiter, subscribed on a
 * connection of its own, tries SET NX once, blocks reading that
 * connection until the message arrives, and sets the key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"

static const char release_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
static const char acquire_fenced_lua[] =
	"if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
	"return redis.call('INCR', KEYS[2]) end return -1";
static const char release_publish_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) "
	"redis.call('PUBLISH', ARGV[2], 'released') return 1 end return 0";

typedef struct redis_floor {
	bench_floor base;
	const bench_target *t;
	redisContext *c;
	redisContext *sub; /* the waiter's subscription, opened on first use */
	bool owner;
	char sha[48], sha_publish[48], sha_fenced[48];
	char key[64], channel[80], fence[80];
	char token[160];
} redis_floor;

redisContext *bench_redis_connect(const bench_target *t, int i)
{
	struct timeval timeout = { .tv_sec = 5 };
	redisContext *c = redisConnectWithTimeout(t->host[i], t->port[i], timeout);

	if (!c || c->err)
		bench_fail("cannot connect to Redis at %s:%d: %s", t->host[i], t->port[i],
		           c ? c->errstr : "out of memory");
	timeout.tv_sec = 30;
	redisSetTimeout(c, timeout);
	return c;
}

/* The single-master floor talks to the first host only. */
static redisContext *connect_to(const bench_target *t)
{
	return bench_redis_connect(t, 0);
}

redisReply *bench_redis_must(redisContext *c, int want, redisReply *r, const char *what)
{
	if (!r)
		bench_fail("Redis %s: %s", what, c->errstr);
	if (r->type != want)
		bench_fail("Redis %s: unexpected reply (type %d%s%s)", what, r->type,
		           r->type == REDIS_REPLY_ERROR ? ": " : "", r->type == REDIS_REPLY_ERROR ? r->str : "");
	return r;
}

/* SET NX PX: true if set, false if held. */
static bool try_set(redis_floor *rf)
{
	redisReply *r = redisCommand(rf->c, "SET %s %s NX PX 30000", rf->key, rf->token);
	bool set;

	if (!r)
		bench_fail("Redis floor SET NX PX: %s", rf->c->errstr);
	if (r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_NIL)
		bench_redis_must(rf->c, REDIS_REPLY_STATUS, r, "floor SET NX PX");
	set = r->type == REDIS_REPLY_STATUS;
	freeReplyObject(r);
	return set;
}

static void release(redis_floor *rf, bool publish)
{
	redisReply *r;

	if (publish)
		r = redisCommand(rf->c, "EVALSHA %s 1 %s %s %s", rf->sha_publish, rf->key, rf->token, rf->channel);
	else
		r = redisCommand(rf->c, "EVALSHA %s 1 %s %s", rf->sha, rf->key, rf->token);
	bench_redis_must(rf->c, REDIS_REPLY_INTEGER, r, "floor release");
	if (r->integer != 1) {
		redisReply *v = redisCommand(rf->c, "GET %s", rf->key);

		bench_fail("Redis floor release (pid %d): %s holds '%s', not our '%s'", (int)getpid(), rf->key,
		           v && v->type == REDIS_REPLY_STRING ? v->str : "(nothing)", rf->token);
	}
	freeReplyObject(r);
}

static void pair(bench_floor *f)
{
	redis_floor *rf = f->impl;

	if (!try_set(rf))
		bench_fail("Redis floor: %s is held", rf->key);
	release(rf, false);
}

static void pair_fenced(bench_floor *f)
{
	redis_floor *rf = f->impl;
	redisReply *r = redisCommand(rf->c, "EVALSHA %s 2 %s %s %s 30000", rf->sha_fenced, rf->key, rf->fence,
	                             rf->token);

	bench_redis_must(rf->c, REDIS_REPLY_INTEGER, r, "floor fenced acquire");
	if (r->integer <= 0)
		bench_fail("Redis floor: %s is held", rf->key);
	freeReplyObject(r);
	release(rf, false);
}

static void rtt(bench_floor *f)
{
	redis_floor *rf = f->impl;

	freeReplyObject(bench_redis_must(rf->c, REDIS_REPLY_STATUS, redisCommand(rf->c, "PING"), "PING"));
}

static void hold(bench_floor *f)
{
	if (!try_set(f->impl))
		bench_fail("Redis floor: the lock is held by the waiter");
}

static void unhold(bench_floor *f)
{
	release(f->impl, true);
}

static int64_t wait_acquire(bench_floor *f)
{
	redis_floor *rf = f->impl;
	int64_t t;

	if (!rf->sub) {
		rf->sub = connect_to(rf->t);
		freeReplyObject(bench_redis_must(rf->sub, REDIS_REPLY_ARRAY,
		                                 redisCommand(rf->sub, "SUBSCRIBE %s", rf->channel), "SUBSCRIBE"));
	}
	/* One try now that the subscription is confirmed, then one per
	 * message (the holder publishes once per release). */
	while (!try_set(rf)) {
		void *reply = NULL;

		if (redisGetReply(rf->sub, &reply) != REDIS_OK)
			bench_fail("Redis floor: no release message: %s", rf->sub->errstr);
		freeReplyObject(reply);
	}
	t = bench_now_ns();
	release(rf, false);
	return t;
}

/* An integer reply of the command, or -1. */
static long long integer_reply(redisReply *r)
{
	long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

	freeReplyObject(r);
	return n;
}

int bench_redis_queued(struct redisContext *c, const char *resource, const char **how)
{
	redisReply *r;
	long long n = -1;

	if (integer_reply(redisCommand(c, "EXISTS dlock:{%s}:q", resource)) == 1) {
		*how = "queue";
		return (int)integer_reply(redisCommand(c, "ZCARD dlock:{%s}:q", resource));
	}
	*how = "channel";
	r = redisCommand(c, "PUBSUB NUMSUB dlock:{%s}:released", resource);
	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER)
		n = r->element[1]->integer;
	freeReplyObject(r);
	return (int)n;
}

static int queued(bench_floor *f, const char *resource, const char **how)
{
	redis_floor *rf = f->impl;

	return bench_redis_queued(rf->c, resource, how);
}

static void close_floor(bench_floor *f)
{
	redis_floor *rf = f->impl;

	if (rf->owner)
		freeReplyObject(redisCommand(rf->c, "DEL %s %s", rf->key, rf->fence));
	redisFree(rf->c);
	if (rf->sub)
		redisFree(rf->sub);
	free(rf);
}

void bench_redis_load(redisContext *c, const char *body, char *sha, size_t len)
{
	redisReply *r = bench_redis_must(c, REDIS_REPLY_STRING, redisCommand(c, "SCRIPT LOAD %s", body),
	                                 "SCRIPT LOAD");

	snprintf(sha, len, "%s", r->str);
	freeReplyObject(r);
}

bench_floor *bench_floor_redis_open(const bench_target *t, int id, bool owner)
{
	redis_floor *rf = calloc(1, sizeof(*rf));

	if (!rf)
		bench_fail("out of memory");
	rf->t = t;
	rf->owner = owner;
	rf->c = connect_to(t);
	bench_redis_load(rf->c, release_lua, rf->sha, sizeof(rf->sha));
	bench_redis_load(rf->c, release_publish_lua, rf->sha_publish, sizeof(rf->sha_publish));
	bench_redis_load(rf->c, acquire_fenced_lua, rf->sha_fenced, sizeof(rf->sha_fenced));
	snprintf(rf->key, sizeof(rf->key), "dlock-bench:floor:%d", id);
	snprintf(rf->fence, sizeof(rf->fence), "dlock-bench:floor:%d:fence", id);
	snprintf(rf->channel, sizeof(rf->channel), "dlock-bench:floor:%d:released", id);
	bench_token(rf->token, sizeof(rf->token));
	rf->base.pair = pair;
	rf->base.pair_fenced = pair_fenced;
	rf->base.rtt = rtt;
	rf->base.hold = hold;
	rf->base.unhold = unhold;
	rf->base.wait_acquire = wait_acquire;
	rf->base.queued = queued;
	rf->base.close = close_floor;
	rf->base.impl = rf;
	return &rf->base;
}

/* DEL key on a Redis Cluster: asked of the first seed, and again of the
 * master its -MOVED names when the key's slot is elsewhere. */
static void cluster_del(const bench_target *t, const char *key)
{
	redisContext *c = bench_redis_connect(t, 0);
	redisReply *r = redisCommand(c, "DEL %s", key);
	char host[64];
	int port;

	/* "MOVED <slot> <host>:<port>" */
	if (r && r->type == REDIS_REPLY_ERROR && sscanf(r->str, "MOVED %*d %63[^:]:%d", host, &port) == 2) {
		struct timeval timeout = { .tv_sec = 5 };
		redisContext *owner = redisConnectWithTimeout(host, port, timeout);

		if (owner && !owner->err)
			freeReplyObject(redisCommand(owner, "DEL %s", key));
		if (owner)
			redisFree(owner);
	}
	freeReplyObject(r);
	redisFree(c);
}

/* DEL the fencing counters dlock left for the bench's resources, in both
 * key formats (braced with the default prefix, and plain), on every
 * master of a Redlock URI; on a cluster (braced only: it refuses the
 * plain format) on the master of each counter's slot. */
void bench_floor_redis_forget(const bench_target *t, const char *const *resources, int n)
{
	if (t->cluster) {
		for (int i = 0; i < n; i++) {
			char key[512];

			snprintf(key, sizeof(key), "dlock:{%s}:fence", resources[i]);
			cluster_del(t, key);
		}
		return;
	}
	for (int h = 0; h < t->n_hosts; h++) {
		redisContext *c = bench_redis_connect(t, h);

		for (int i = 0; i < n; i++)
			freeReplyObject(redisCommand(c, "DEL dlock:{%s}:fence %s:fence", resources[i],
			                             resources[i]));
		redisFree(c);
	}
}
