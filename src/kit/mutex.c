/* SPDX-License-Identifier: MIT */
/*
 * The lock order's check (mutex.h): each thread keeps the mutexes it took
 * through the checked forms, with their ranks and where it took them.
 */
#include <stdio.h>
#include <stdlib.h>

#include "mutex.h"

/* Deeper than any nesting the order allows. */
#define HELD_MAX 32

typedef struct held {
	GMutex *mu;
	dlock__rank rank;
	const char *file;
	int line;
} held;

static _Thread_local held stack[HELD_MAX];
static _Thread_local int depth;

static const char *const names[DLOCK__RANK_COUNT] = {
	[DLOCK__RANK_NONE] = "none",
	[DLOCK__RANK_ELECTION_TURN] = "election turn",
	[DLOCK__RANK_ELECTION] = "election",
	[DLOCK__RANK_REDLOCK_WATCH] = "redlock watch",
	[DLOCK__RANK_REDIS_WATCHDOG] = "redis watchdog",
	[DLOCK__RANK_ZK_BACKEND] = "zk backend",
	[DLOCK__RANK_ZK_SESSION] = "zk session",
	[DLOCK__RANK_FILE_RW] = "file rw",
	[DLOCK__RANK_FILE_WATCH] = "file watch",
	[DLOCK__RANK_HOLD] = "hold",
	[DLOCK__RANK_CLIENT] = "client",
	[DLOCK__RANK_LOCK] = "lock",
	[DLOCK__RANK_ZK_CALL] = "zk call",
	[DLOCK__RANK_THREAD_START] = "thread start",
	[DLOCK__RANK_REDLOCK] = "redlock",
	[DLOCK__RANK_REDIS_POOL] = "redis pool",
	[DLOCK__RANK_REDIS_SUB] = "redis subscriber",
	[DLOCK__RANK_REDIS_SENTINEL] = "redis sentinel",
	[DLOCK__RANK_REDIS_CLUSTER] = "redis cluster",
	[DLOCK__RANK_FILE_POOL] = "file pool",
	[DLOCK__RANK_FILE_WAKE] = "file wake",
	[DLOCK__RANK_WAITER] = "waiter",
	[DLOCK__RANK_STEPPER] = "stepper",
	[DLOCK__RANK_DELIVERY] = "delivery",
	[DLOCK__RANK_CALLBACK_MARK] = "callback mark",
	[DLOCK__RANK_ANNOUNCE] = "announce",
	[DLOCK__RANK_RESOLVE] = "resolve",
	[DLOCK__RANK_LOG] = "log",
};

const char *dlock__rank_name(dlock__rank rank)
{
	return (unsigned)rank < DLOCK__RANK_COUNT && names[rank] ? names[rank] : "?";
}

G_GNUC_NORETURN static void breach(const char *what, const char *file, int line)
{
	fprintf(stderr, "dlock: lock order: %s at %s:%d; this thread holds:", what, file, line);
	if (depth == 0)
		fprintf(stderr, " nothing");
	for (int i = 0; i < depth; i++)
		fprintf(stderr, "%s %s (%s:%d)", i ? "," : "", dlock__rank_name(stack[i].rank),
		        stack[i].file, stack[i].line);
	fprintf(stderr, "\n");
	fflush(stderr);
	abort();
}

static int find(const GMutex *mu)
{
	for (int i = depth - 1; i >= 0; i--)
		if (stack[i].mu == mu)
			return i;
	return -1;
}

void dlock__mutex_lock_checked(GMutex *mu, dlock__rank rank, const char *file, int line)
{
	char what[96];

	if (rank <= DLOCK__RANK_NONE || rank >= DLOCK__RANK_COUNT) {
		snprintf(what, sizeof what, "a mutex taken with no rank (%d)", (int)rank);
		breach(what, file, line);
	}
	if (find(mu) >= 0) {
		snprintf(what, sizeof what, "%s taken again by its holder", dlock__rank_name(rank));
		breach(what, file, line);
	}
	for (int i = 0; i < depth; i++)
		if (stack[i].rank >= rank) {
			snprintf(what, sizeof what, "%s taken under %s", dlock__rank_name(rank),
			         dlock__rank_name(stack[i].rank));
			breach(what, file, line);
		}
	if (depth == HELD_MAX)
		breach("too many mutexes held", file, line);
	g_mutex_lock(mu);
	stack[depth++] = (held){ mu, rank, file, line };
}

void dlock__mutex_unlock_checked(GMutex *mu, const char *file, int line)
{
	int i = find(mu);

	if (i < 0)
		breach("a mutex let go that this thread does not hold", file, line);
	/* Let go in any order: keep the rest in the order they were taken. */
	for (; i < depth - 1; i++)
		stack[i] = stack[i + 1];
	depth--;
	g_mutex_unlock(mu);
}

void dlock__mutex_assert_held_checked(const GMutex *mu, const char *file, int line)
{
	if (find(mu) < 0)
		breach("a _locked helper called without its mutex", file, line);
}

gboolean dlock__mutex_held(const GMutex *mu)
{
	return find(mu) >= 0;
}
