/* SPDX-License-Identifier: MIT */
/*
 * The ZooKeeper floor: the bare C client (zookeeper_mt, synchronous
 * calls) on one session, with none of dlock's work around it.
 *
 * A pair is the lock recipe's uncontended path, three round trips as in
 * dlock: create an ephemeral sequential node under a parent created once
 * beforehand, list the parent's children (ours is the only one, so it
 * holds), delete the node.  dlock also writes holder data into its node
 * (the floor writes a token of the same size), orders the children and
 * keeps its own state; that is what the ratio measures.  The round-trip
 * floor is exists("/"), a read answered by the connected server alone.
 *
 * The pipelined pair is the same recipe as a client that pipelines can
 * run it: the create and the listing sent back to back (asynchronous
 * calls, both in flight at once; the session applies them in order, so
 * the listing sees our node), then the delete once both have answered —
 * two round trips instead of three, the best any client can do.
 *
 * The handoff floor is the recipe's waiting path: the waiter creates its
 * node, lists the children, sets a watch on its predecessor (exists) and
 * sleeps until the watch fires, lists again and holds; the holder's
 * release is the delete of its node.
 *
 * The parent is a persistent node, "/dlock-bench-floor-<id>", created and
 * deleted by the floor's owner.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zookeeper/zookeeper.h>

#include "bench.h"

#define SESSION_TIMEOUT_MS 10000
#define CONNECT_TIMEOUT_MS 20000

typedef struct zk_floor {
	bench_floor base;
	zhandle_t *zh;
	bool owner;
	char parent[64];
	char prefix[96];
	char data[160];
	char held[160]; /* hold(): our node */
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int fired; /* the predecessor's watch fired (0 or 1) */
	/* The pipelined pair's answers, filled in on the completion thread. */
	int answers, create_rc, children_rc, children_count;
	char created[160];
} zk_floor;

/* The client's log, per handle: silent, as dlock keeps it. */
static void quiet_log(const char *message)
{
	(void)message;
}

static void no_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	(void)zh;
	(void)type;
	(void)state;
	(void)path;
	(void)ctx;
}

static void check(int rc, const char *what)
{
	if (rc != ZOK)
		bench_fail("ZooKeeper %s: %s", what, zerror(rc));
}

static void pair(bench_floor *f)
{
	zk_floor *zf = f->impl;
	char path[160];
	struct String_vector children = { 0 };

	check(zoo_create(zf->zh, zf->prefix, zf->data, (int)strlen(zf->data), &ZOO_OPEN_ACL_UNSAFE,
	                 ZOO_EPHEMERAL_SEQUENTIAL, path, sizeof(path)),
	      "floor create");
	check(zoo_get_children(zf->zh, zf->parent, 0, &children), "floor get_children");
	if (children.count != 1)
		bench_fail("ZooKeeper floor: %d children under %s, expected 1", children.count, zf->parent);
	deallocate_String_vector(&children);
	check(zoo_delete(zf->zh, path, -1), "floor delete");
}

/* Sleep until the completion thread has counted *count up to want. */
static void await_count(zk_floor *zf, const int *count, int want, const char *what)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += BENCH_ACQUIRE_WAIT_MS / 1000;
	pthread_mutex_lock(&zf->mu);
	while (*count < want)
		if (pthread_cond_timedwait(&zf->cond, &zf->mu, &until) != 0)
			bench_fail("ZooKeeper floor: %s", what);
	pthread_mutex_unlock(&zf->mu);
}

static void created(int rc, const char *value, const void *data)
{
	zk_floor *zf = (zk_floor *)data;

	pthread_mutex_lock(&zf->mu);
	zf->create_rc = rc;
	if (rc == ZOK)
		snprintf(zf->created, sizeof(zf->created), "%s", value);
	zf->answers++;
	pthread_cond_signal(&zf->cond);
	pthread_mutex_unlock(&zf->mu);
}

static void listed(int rc, const struct String_vector *strings, const void *data)
{
	zk_floor *zf = (zk_floor *)data;

	pthread_mutex_lock(&zf->mu);
	zf->children_rc = rc;
	zf->children_count = rc == ZOK && strings ? strings->count : -1;
	zf->answers++;
	pthread_cond_signal(&zf->cond);
	pthread_mutex_unlock(&zf->mu);
}

static void pair_pipelined(bench_floor *f)
{
	zk_floor *zf = f->impl;

	zf->answers = 0;
	check(zoo_acreate(zf->zh, zf->prefix, zf->data, (int)strlen(zf->data), &ZOO_OPEN_ACL_UNSAFE,
	                  ZOO_EPHEMERAL_SEQUENTIAL, created, zf),
	      "floor create (pipelined)");
	check(zoo_aget_children(zf->zh, zf->parent, 0, listed, zf), "floor get_children (pipelined)");
	await_count(zf, &zf->answers, 2, "no answer to the pipelined create and get_children");
	check(zf->create_rc, "floor create (pipelined)");
	check(zf->children_rc, "floor get_children (pipelined)");
	if (zf->children_count != 1)
		bench_fail("ZooKeeper floor: %d children under %s after the pipelined create, expected 1",
		           zf->children_count, zf->parent);
	check(zoo_delete(zf->zh, zf->created, -1), "floor delete");
}

/* Children of dlock's lock node for resource (default root /dlock):
 * the holder and every queued waiter. */
static int queued(bench_floor *f, const char *resource, const char **how)
{
	zk_floor *zf = f->impl;
	struct String_vector children = { 0 };
	char path[512];
	int n;

	*how = "children";
	snprintf(path, sizeof(path), "/dlock/%s", resource);
	if (zoo_get_children(zf->zh, path, 0, &children) != ZOK)
		return 0;
	n = children.count;
	deallocate_String_vector(&children);
	return n > 0 ? n - 1 : 0;
}

/* Create our node; return its path in path. */
static void create_node(zk_floor *zf, char *path, size_t len)
{
	check(zoo_create(zf->zh, zf->prefix, zf->data, (int)strlen(zf->data), &ZOO_OPEN_ACL_UNSAFE,
	                 ZOO_EPHEMERAL_SEQUENTIAL, path, (int)len),
	      "floor create");
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* List the children; put the name of the node just before ours (same
 * prefix, so name order is sequence order) in pred, "" if ours is first. */
static void predecessor(zk_floor *zf, const char *path, char *pred, size_t len)
{
	struct String_vector children = { 0 };
	const char *name = strrchr(path, '/') + 1;

	check(zoo_get_children(zf->zh, zf->parent, 0, &children), "floor get_children");
	qsort(children.data, (size_t)children.count, sizeof(char *), cmp_names);
	pred[0] = '\0';
	for (int i = 0; i < children.count && strcmp(children.data[i], name) < 0; i++)
		snprintf(pred, len, "%s/%s", zf->parent, children.data[i]);
	deallocate_String_vector(&children);
}

static void hold(bench_floor *f)
{
	zk_floor *zf = f->impl;
	char pred[160];

	create_node(zf, zf->held, sizeof(zf->held));
	predecessor(zf, zf->held, pred, sizeof(pred));
	if (pred[0])
		bench_fail("ZooKeeper floor: the lock is held by the waiter");
}

static void unhold(bench_floor *f)
{
	zk_floor *zf = f->impl;

	check(zoo_delete(zf->zh, zf->held, -1), "floor delete");
}

/* The predecessor's watch: runs on the client's completion thread. */
static void pred_gone(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	zk_floor *zf = ctx;

	(void)zh;
	(void)type;
	(void)state;
	(void)path;
	pthread_mutex_lock(&zf->mu);
	zf->fired = 1;
	pthread_cond_signal(&zf->cond);
	pthread_mutex_unlock(&zf->mu);
}

static int64_t wait_acquire(bench_floor *f)
{
	zk_floor *zf = f->impl;
	char path[160], pred[160];
	int64_t t;

	create_node(zf, path, sizeof(path));
	for (int tries = 0;; tries++) {
		struct Stat stat;
		int rc;

		if (tries == 100)
			bench_fail("ZooKeeper floor: still not first after 100 watches");
		predecessor(zf, path, pred, sizeof(pred));
		if (!pred[0])
			break;
		zf->fired = 0;
		rc = zoo_wexists(zf->zh, pred, pred_gone, zf, &stat);
		if (rc == ZNONODE)
			continue;
		check(rc, "floor exists (watch)");
		await_count(zf, &zf->fired, 1, "the predecessor's watch never fired");
	}
	t = bench_now_ns();
	check(zoo_delete(zf->zh, path, -1), "floor delete");
	return t;
}

static void rtt(bench_floor *f)
{
	zk_floor *zf = f->impl;
	struct Stat stat;

	check(zoo_exists(zf->zh, "/", 0, &stat), "exists");
}

static void close_floor(bench_floor *f)
{
	zk_floor *zf = f->impl;

	if (zf->owner)
		zoo_delete(zf->zh, zf->parent, -1);
	zookeeper_close(zf->zh);
	pthread_cond_destroy(&zf->cond);
	pthread_mutex_destroy(&zf->mu);
	free(zf);
}

bench_floor *bench_floor_zk_open(const bench_target *t, int id, bool owner)
{
	zk_floor *zf = calloc(1, sizeof(*zf));
	int64_t until = bench_now_ns() + (int64_t)CONNECT_TIMEOUT_MS * 1000000;
	int rc;

	if (!zf)
		bench_fail("out of memory");
	zf->zh = zookeeper_init2(t->hosts, no_watch, SESSION_TIMEOUT_MS, NULL, NULL, 0, quiet_log);
	if (!zf->zh)
		bench_fail("ZooKeeper %s: cannot start a session: %s", t->hosts, strerror(errno));
	/* As dlock sets it: by default the client looks the servers up again
	 * in every turn of its I/O loop, some twenty system calls per request
	 * that find nothing new when the hosts are addresses.  A floor without
	 * that work is the lower one. */
	zoo_set_servers_resolution_delay(zf->zh, -1);
	while (zoo_state(zf->zh) != ZOO_CONNECTED_STATE) {
		if (bench_now_ns() > until)
			bench_fail("ZooKeeper %s: not connected after %d ms", t->hosts, CONNECT_TIMEOUT_MS);
		bench_sleep_ns(1000000);
	}
	zf->owner = owner;
	pthread_mutex_init(&zf->mu, NULL);
	pthread_cond_init(&zf->cond, NULL);
	snprintf(zf->parent, sizeof(zf->parent), "/dlock-bench-floor-%d", id);
	snprintf(zf->prefix, sizeof(zf->prefix), "%s/lock-", zf->parent);
	bench_token(zf->data, sizeof(zf->data));
	if (owner) {
		rc = zoo_create(zf->zh, zf->parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
		if (rc != ZOK && rc != ZNODEEXISTS)
			check(rc, "create the floor's parent");
	}
	zf->base.pair = pair;
	zf->base.pair_pipelined = pair_pipelined;
	zf->base.rtt = rtt;
	zf->base.queued = queued;
	zf->base.hold = hold;
	zf->base.unhold = unhold;
	zf->base.wait_acquire = wait_acquire;
	zf->base.close = close_floor;
	zf->base.impl = zf;
	return &zf->base;
}
