/* SPDX-License-Identifier: MIT */
/*
 * The Redlock floor: bare hiredis, one synchronous connection per master,
 * running dlock's own Redlock scripts (the texts of src/redis/scripts.c,
 * SCRIPT_RL_*) with none of dlock's work around them.
 *
 * A round sends one EVALSHA to every master before it reads any answer,
 * so the masters work at once and the round costs about the slowest of
 * them, as dlock's rounds (src/redis/redlock-round.c) do.  The fenced pair is
 * dlock's uncontended path: round 1, the acquire script on every master;
 * the token, 1 + the largest counter of the masters that said yes; round
 * 2, the fencing round on those masters; round 3, the release script
 * (compare-and-delete and PUBLISH) on every master.  The plain pair leaves
 * round 2 out, so the difference of the two is what the fencing round
 * costs.  The round-trip floor is one PING round.
 *
 * The handoff floor is the same lock with the release channel the release
 * script publishes on: the waiter subscribes on every master, tries once,
 * and after each message tries again (undoing a try short of a quorum on
 * the masters that said yes), as dlock's Redlock waiter does without its
 * backoff.
 */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"

/* dlock's Redlock scripts, word for word as the server gets them
 * (src/redis/lua/redlock-*.lua without their comments, names numbered). */
static const char rl_acquire_lua[] =
	"local c = redis.call('GET', KEYS[2])\n"
	"if c and (tonumber(c) or 0) >= 9007199253692416 then\n"
	"  return redis.error_reply('ERR dlock: the fencing counter ' .. KEYS[2] .. ' is at ' .. c ..\n"
	"                           ': from 2^53 - 2^20 on tokens cannot stay exact (delete it, or set it lower)')\n"
	"end\n"
	"if redis.pcall('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"elseif not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
	"  return {0, redis.call('PTTL', KEYS[1])}\n"
	"end\n"
	"if not c then\n"
	"  local t = redis.call('TIME')\n"
	"  c = t[1] .. string.sub('000000' .. t[2], -6)\n"
	"  redis.call('SET', KEYS[2], c)\n"
	"end\n"
	"return {1, tonumber(c)}\n";
static const char rl_fence_lua[] =
	"if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
	"if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then\n"
	"  redis.call('SET', KEYS[2], ARGV[2])\n"
	"end\n"
	"return 1\n";
static const char rl_release_lua[] =
	"if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
	"redis.call('DEL', KEYS[1])\n"
	"redis.pcall('PUBLISH', ARGV[2], 'released')\n"
	"return 1\n";

typedef struct redlock_floor {
	bench_floor base;
	const bench_target *t;
	int n, quorum;
	redisContext *c[BENCH_MAX_HOSTS];
	redisContext *sub[BENCH_MAX_HOSTS]; /* the waiter's subscriptions, opened on first use */
	bool owner;
	char sha_acquire[48], sha_fence[48], sha_release[48];
	char key[64], fence[80], channel[80], quiet[96];
	char token[160];
} redlock_floor;

/*
 * One round: argv to every master picked by only (NULL: all), each
 * request written out before any answer is read.  replies[i] is master
 * i's answer, NULL where it was not asked; the caller frees them.
 */
static void round_trip(redlock_floor *rf, const bool *only, int argc, const char **argv,
                       redisReply **replies)
{
	for (int i = 0; i < rf->n; i++) {
		int done = 0;

		replies[i] = NULL;
		if (only && !only[i])
			continue;
		if (redisAppendCommandArgv(rf->c[i], argc, argv, NULL) != REDIS_OK)
			bench_fail("Redlock floor %s: %s", argv[0], rf->c[i]->errstr);
		while (!done)
			if (redisBufferWrite(rf->c[i], &done) != REDIS_OK)
				bench_fail("Redlock floor %s: %s", argv[0], rf->c[i]->errstr);
	}
	for (int i = 0; i < rf->n; i++) {
		void *reply = NULL;

		if (only && !only[i])
			continue;
		if (redisGetReply(rf->c[i], &reply) != REDIS_OK)
			bench_fail("Redlock floor %s: %s", argv[0], rf->c[i]->errstr);
		replies[i] = reply;
	}
}

static void free_replies(redlock_floor *rf, redisReply **replies)
{
	for (int i = 0; i < rf->n; i++)
		freeReplyObject(replies[i]);
}

/* How many of a round's answers are the integer 1 (the fence and release
 * scripts' "done, the key was ours"); frees them. */
static int count_ones(redlock_floor *rf, redisReply **replies)
{
	int ones = 0;

	for (int i = 0; i < rf->n; i++)
		if (replies[i] && replies[i]->type == REDIS_REPLY_INTEGER && replies[i]->integer == 1)
			ones++;
	free_replies(rf, replies);
	return ones;
}

/* Round 1; yes[i] for each master that set the key.  Returns how many did
 * and *ret_token, 1 + the largest of their counters. */
static int acquire_round(redlock_floor *rf, bool *yes, uint64_t *ret_token)
{
	const char *argv[] = { "EVALSHA", rf->sha_acquire, "2", rf->key, rf->fence, rf->token, "30000" };
	redisReply *replies[BENCH_MAX_HOSTS];
	uint64_t top = 0;
	int nyes = 0;

	round_trip(rf, NULL, 7, argv, replies);
	for (int i = 0; i < rf->n; i++) {
		redisReply *r = bench_redis_must(rf->c[i], REDIS_REPLY_ARRAY, replies[i], "Redlock acquire");

		yes[i] = r->elements == 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
		         r->element[0]->integer == 1 && r->element[1]->type == REDIS_REPLY_INTEGER;
		if (yes[i]) {
			nyes++;
			if ((uint64_t)r->element[1]->integer > top)
				top = (uint64_t)r->element[1]->integer;
		}
	}
	free_replies(rf, replies);
	*ret_token = top + 1;
	return nyes;
}

/* Round 2 on the masters that said yes: how many confirmed. */
static int fence_round(redlock_floor *rf, const bool *yes, uint64_t token)
{
	char token_text[24];
	const char *argv[] = { "EVALSHA", rf->sha_fence, "2", rf->key, rf->fence, rf->token, token_text };
	redisReply *replies[BENCH_MAX_HOSTS];

	snprintf(token_text, sizeof(token_text), "%" PRIu64, token);
	round_trip(rf, yes, 7, argv, replies);
	return count_ones(rf, replies);
}

/* The release round on the masters picked by only (NULL: all), publishing
 * on channel: how many held our key. */
static int release_round(redlock_floor *rf, const bool *only, const char *channel)
{
	const char *argv[] = { "EVALSHA", rf->sha_release, "1", rf->key, rf->token, channel };
	redisReply *replies[BENCH_MAX_HOSTS];

	round_trip(rf, only, 6, argv, replies);
	return count_ones(rf, replies);
}

/* One try at the lock, with or without the fencing round; a try short of
 * a quorum is undone on the masters that said yes.  True if taken. */
static bool try_lock(redlock_floor *rf, bool fenced)
{
	bool yes[BENCH_MAX_HOSTS];
	uint64_t token;
	int nyes = acquire_round(rf, yes, &token);

	if (nyes >= rf->quorum && (!fenced || fence_round(rf, yes, token) >= rf->quorum))
		return true;
	if (nyes > 0)
		release_round(rf, yes, rf->quiet);
	return false;
}

static void lock_or_fail(redlock_floor *rf, bool fenced)
{
	if (!try_lock(rf, fenced))
		bench_fail("Redlock floor: %s is held on a quorum of masters", rf->key);
}

static void unlock_or_fail(redlock_floor *rf, const char *channel)
{
	int ours = release_round(rf, NULL, channel);

	if (ours < rf->n)
		bench_fail("Redlock floor release (pid %d): %s was ours on %d of %d masters", (int)getpid(),
		           rf->key, ours, rf->n);
}

static void pair(bench_floor *f)
{
	redlock_floor *rf = f->impl;

	lock_or_fail(rf, false);
	unlock_or_fail(rf, rf->channel);
}

static void pair_fenced(bench_floor *f)
{
	redlock_floor *rf = f->impl;

	lock_or_fail(rf, true);
	unlock_or_fail(rf, rf->channel);
}

static void rtt(bench_floor *f)
{
	redlock_floor *rf = f->impl;
	const char *argv[] = { "PING" };
	redisReply *replies[BENCH_MAX_HOSTS];

	round_trip(rf, NULL, 1, argv, replies);
	for (int i = 0; i < rf->n; i++)
		bench_redis_must(rf->c[i], REDIS_REPLY_STATUS, replies[i], "PING");
	free_replies(rf, replies);
}

static void hold(bench_floor *f)
{
	if (!try_lock(f->impl, true))
		bench_fail("Redlock floor: the lock is held by the waiter");
}

static void unhold(bench_floor *f)
{
	redlock_floor *rf = f->impl;

	unlock_or_fail(rf, rf->channel);
}

/* Read whatever messages have arrived on the subscriptions, without
 * waiting (block false) or after waiting for at least one (block true). */
static void drain(redlock_floor *rf, bool block)
{
	struct pollfd fds[BENCH_MAX_HOSTS];
	int ready;

	for (int i = 0; i < rf->n; i++)
		fds[i] = (struct pollfd){ .fd = rf->sub[i]->fd, .events = POLLIN };
	ready = poll(fds, (nfds_t)rf->n, block ? BENCH_ACQUIRE_WAIT_MS : 0);
	if (ready < 0 || (block && ready == 0))
		bench_fail("Redlock floor: no release message");
	for (int i = 0; i < rf->n; i++) {
		void *reply = NULL;

		if (!(fds[i].revents & POLLIN))
			continue;
		if (redisBufferRead(rf->sub[i]) != REDIS_OK)
			bench_fail("Redlock floor: subscription: %s", rf->sub[i]->errstr);
		while (redisGetReplyFromReader(rf->sub[i], &reply) == REDIS_OK && reply) {
			freeReplyObject(reply);
			reply = NULL;
		}
	}
}

static int64_t wait_acquire(bench_floor *f)
{
	redlock_floor *rf = f->impl;
	int64_t t;

	if (!rf->sub[0]) {
		for (int i = 0; i < rf->n; i++) {
			rf->sub[i] = bench_redis_connect(rf->t, i);
			freeReplyObject(bench_redis_must(rf->sub[i], REDIS_REPLY_ARRAY,
			                                 redisCommand(rf->sub[i], "SUBSCRIBE %s", rf->channel),
			                                 "SUBSCRIBE"));
		}
	}
	/* A release publishes on every master: the messages of the last one
	 * still waiting would each cost a try. */
	drain(rf, false);
	while (!try_lock(rf, true))
		drain(rf, true);
	t = bench_now_ns();
	/* Released on a channel nobody listens to: the waiter's own
	 * release must not wake itself next time. */
	unlock_or_fail(rf, rf->quiet);
	return t;
}

static int queued(bench_floor *f, const char *resource, const char **how)
{
	redlock_floor *rf = f->impl;

	/* dlock's Redlock waiters listen on every master's release channel
	 * (no queue): the first master's subscribers are all of them. */
	return bench_redis_queued(rf->c[0], resource, how);
}

static void close_floor(bench_floor *f)
{
	redlock_floor *rf = f->impl;

	for (int i = 0; i < rf->n; i++) {
		if (rf->owner)
			freeReplyObject(redisCommand(rf->c[i], "DEL %s %s", rf->key, rf->fence));
		redisFree(rf->c[i]);
		if (rf->sub[i])
			redisFree(rf->sub[i]);
	}
	free(rf);
}

/*
 * The copies above are dlock's scripts only while their texts match, and
 * nothing links the two: once dlock has run a Redlock acquire and release
 * on t (its scripts are then in each master's cache), each copy's SHA1,
 * computed by the server without loading it, must be among them.  Called
 * before the floor loads its own.
 */
bool bench_redlock_scripts_match(const bench_target *t)
{
	const char *const texts[] = { rl_acquire_lua, rl_fence_lua, rl_release_lua };
	redisContext *c = bench_redis_connect(t, 0);
	bool all = true;

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		redisReply *sha = bench_redis_must(c, REDIS_REPLY_STRING,
		                                   redisCommand(c, "EVAL %s 0 %s", "return redis.sha1hex(ARGV[1])",
		                                                texts[i]),
		                                   "sha1hex");
		redisReply *r = bench_redis_must(c, REDIS_REPLY_ARRAY, redisCommand(c, "SCRIPT EXISTS %s", sha->str),
		                                 "SCRIPT EXISTS");

		all = all && r->elements == 1 && r->element[0]->integer == 1;
		freeReplyObject(r);
		freeReplyObject(sha);
	}
	redisFree(c);
	return all;
}

bench_floor *bench_floor_redlock_open(const bench_target *t, int id, bool owner)
{
	redlock_floor *rf = calloc(1, sizeof(*rf));

	if (!rf)
		bench_fail("out of memory");
	rf->t = t;
	rf->n = t->n_hosts;
	rf->quorum = t->n_hosts / 2 + 1;
	rf->owner = owner;
	for (int i = 0; i < rf->n; i++) {
		rf->c[i] = bench_redis_connect(t, i);
		/* The same text gives the same SHA1 on every master. */
		bench_redis_load(rf->c[i], rl_acquire_lua, rf->sha_acquire, sizeof(rf->sha_acquire));
		bench_redis_load(rf->c[i], rl_fence_lua, rf->sha_fence, sizeof(rf->sha_fence));
		bench_redis_load(rf->c[i], rl_release_lua, rf->sha_release, sizeof(rf->sha_release));
	}
	snprintf(rf->key, sizeof(rf->key), "dlock-bench:floor:%d", id);
	snprintf(rf->fence, sizeof(rf->fence), "dlock-bench:floor:%d:fence", id);
	snprintf(rf->channel, sizeof(rf->channel), "dlock-bench:floor:%d:released", id);
	snprintf(rf->quiet, sizeof(rf->quiet), "dlock-bench:floor:%d:unheard", id);
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
