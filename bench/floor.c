/* SPDX-License-Identifier: MIT */
/*
 * The one place that maps a backend to its floor, the clean-up of what
 * dlock keeps after a release, and the holder-like token the floors store, shaped like dlock's own owner token
 * ("<magic>:<128 random bits in hex>:pid:tid:ms:host") so that a floor
 * moves as many bytes to the server as dlock does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* Floors still open, closed at exit if a failure ends the program early,
 * so that no floor key, node or file is left behind. */
#define MAX_OPEN 8
static bench_floor *open_floors[MAX_OPEN];

static void close_open_floors(void)
{
	for (int i = 0; i < MAX_OPEN; i++)
		if (open_floors[i])
			bench_floor_close(open_floors[i]);
}

bench_floor *bench_floor_open(const bench_target *t, int id, bool owner)
{
	static bool registered;
	bench_floor *f = NULL;

	if (!registered) {
		atexit(close_open_floors);
		registered = true;
	}
	switch (t->kind) {
	case BENCH_REDIS:
		if (t->n_hosts > 1)
			f = bench_floor_redlock_open(t, id, owner);
		else
			f = bench_floor_redis_open(t, id, owner);
		break;
	case BENCH_ZK:
		f = bench_floor_zk_open(t, id, owner);
		break;
	case BENCH_FILE:
		f = bench_floor_file_open(t, id, owner);
		break;
	}
	for (int i = 0; f && i < MAX_OPEN; i++) {
		if (!open_floors[i]) {
			open_floors[i] = f;
			return f;
		}
	}
	bench_fail("too many floors open");
}

void bench_floor_close(bench_floor *f)
{
	for (int i = 0; i < MAX_OPEN; i++)
		if (open_floors[i] == f)
			open_floors[i] = NULL;
	f->close(f);
}

void bench_token(char *buf, size_t len)
{
	unsigned char random[16];
	char hex[2 * sizeof(random) + 1];
	char host[64] = "localhost";
	struct timespec now;

	if (getrandom(random, sizeof(random), 0) != (ssize_t)sizeof(random))
		bench_fail("getrandom failed");
	for (size_t i = 0; i < sizeof(random); i++)
		snprintf(hex + 2 * i, 3, "%02x", random[i]);
	gethostname(host, sizeof(host) - 1);
	clock_gettime(CLOCK_REALTIME, &now);
	snprintf(buf, len, "floor1:%s:%d:%d:%lld:%s", hex, (int)getpid(), (int)gettid(),
	         (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000, host);
}

/* The lock file dlock uses for a resource: "r-" and the name with every
 * byte outside [A-Za-z0-9._-] escaped as %XX (src/file/backend.c; the
 * bench's names are never long enough for its hashed form). */
static void file_forget(const bench_target *t, const char *resource)
{
	char path[4096 + 512];
	size_t len = (size_t)snprintf(path, sizeof(path), "%s/r-", t->dir);

	for (const unsigned char *p = (const unsigned char *)resource; *p && len + 4 < sizeof(path); p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("._-", *p))
			path[len++] = (char)*p;
		else
			len += (size_t)snprintf(path + len, sizeof(path) - len, "%%%02X", *p);
	}
	path[len] = '\0';
	unlink(path);
}

void bench_forget(const bench_target *t, const char *const *resources, int n)
{
	if (t->kind == BENCH_REDIS)
		bench_floor_redis_forget(t, resources, n);
	else if (t->kind == BENCH_FILE)
		for (int i = 0; i < n; i++)
			file_forget(t, resources[i]);
	/* ZooKeeper: dlock's parents are container nodes, which the server
	 * removes by itself once they are empty. */
}
