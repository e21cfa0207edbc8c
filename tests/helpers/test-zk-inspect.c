/* SPDX-License-Identifier: MIT */
/*
 * The inspection session of the ZooKeeper test servers: what the library
 * left on the server, read with the ZooKeeper C client.  See
 * test-zk-inspect.h.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>
#include <zookeeper/zookeeper.h>

#include "test-zk-inspect.h"

/* Bounds: a server answers within half a second, so these only matter
 * when something is wrong. */
#define CALL_TIMEOUT_MS 20000
#define SESSION_TIMEOUT_MS 10000

/* ---- inspection session ---- */

void test_zk_inspect_close(test_zk *z)
{
	if (z->inspect) {
		zookeeper_close(z->inspect);
		z->inspect = NULL;
	}
}

static void discard_log(const char *message)
{
	(void)message;
}

static void ignore_events(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	(void)zh;
	(void)type;
	(void)state;
	(void)path;
	(void)ctx;
}

/* The inspection session, connected (opened, or opened again after it
 * expired); fails the test if it cannot connect before until. */
static zhandle_t *session(test_zk *z, int64_t until, const char *what, const char *path)
{
	for (;;) {
		if (z->inspect) {
			if (zoo_state(z->inspect) == ZOO_CONNECTED_STATE)
				return z->inspect;
			/* Expired (a wiped server forgets it) or refused. */
			if (is_unrecoverable(z->inspect) == ZINVALIDSTATE)
				test_zk_inspect_close(z);
		}
		if (test_now_ms() >= until)
			break;
		if (!z->inspect) {
			char *hosts = test_zk_hosts(z);
			sigset_t all, old;

			/* The client's threads inherit this mask: signals meant
			 * for the test are never handled on them. */
			sigfillset(&all);
			pthread_sigmask(SIG_SETMASK, &all, &old);
			z->inspect = zookeeper_init2(hosts, ignore_events, SESSION_TIMEOUT_MS, NULL, NULL, 0,
			                             discard_log);
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			if (!z->inspect)
				fail_msg("zookeeper_init2(%s): %s", hosts, strerror(errno));
			g_free(hosts);
		} else {
			g_usleep(10000);
		}
	}
	test_zk_inspect_close(z);
	fail_msg("%s %s: the inspection session could not connect to ZooKeeper within %d s", what, path,
	         CALL_TIMEOUT_MS / 1000);
	return NULL;
}

/* After a call returned rc: whether to make it again, on a new session
 * (the connection was lost, or the session is gone).  Fails the test once
 * until has passed. */
static bool again(test_zk *z, int rc, int64_t until, const char *what, const char *path)
{
	if (rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT && rc != ZSESSIONEXPIRED &&
	    rc != ZINVALIDSTATE && rc != ZSESSIONMOVED)
		return false;
	test_zk_inspect_close(z);
	if (test_now_ms() >= until)
		fail_msg("%s %s: ZooKeeper did not answer within %d s (%s)", what, path,
		         CALL_TIMEOUT_MS / 1000, zerror(rc));
	g_usleep(100000);
	return true;
}

static int compare_strings(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

char **test_zk_children(test_zk *z, const char *path)
{
	int64_t until = test_now_ms() + CALL_TIMEOUT_MS;
	struct String_vector v;
	char **list;
	size_t n;
	int rc;

	do {
		memset(&v, 0, sizeof(v));
		rc = zoo_get_children(session(z, until, "get_children", path), path, 0, &v);
	} while (again(z, rc, until, "get_children", path));
	if (rc == ZNONODE)
		return NULL;
	if (rc != ZOK)
		fail_msg("get_children %s: %s", path, zerror(rc));
	n = v.count > 0 ? (size_t)v.count : 0;
	list = g_new0(char *, n + 1);
	for (size_t i = 0; i < n; i++)
		list[i] = g_strdup(v.data[i]);
	deallocate_String_vector(&v);
	qsort(list, n, sizeof(char *), compare_strings);
	return list;
}

int test_zk_count_children(test_zk *z, const char *path)
{
	char **children = test_zk_children(z, path);
	int n = children ? (int)g_strv_length(children) : 0;

	g_strfreev(children);
	return n;
}

typedef struct children_count {
	test_zk *z;
	const char *path;
	int n;
} children_count;

static bool has_children_count(void *arg)
{
	children_count *c = arg;

	return test_zk_count_children(c->z, c->path) == c->n;
}

bool test_zk_wait_children(test_zk *z, const char *path, int n, int64_t timeout_ms)
{
	children_count c = { z, path, n };

	return test_wait_until(has_children_count, &c, timeout_ms);
}

bool test_zk_exists(test_zk *z, const char *path)
{
	int64_t until = test_now_ms() + CALL_TIMEOUT_MS;
	struct Stat st;
	int rc;

	do
		rc = zoo_exists(session(z, until, "exists", path), path, 0, &st);
	while (again(z, rc, until, "exists", path));
	if (rc != ZOK && rc != ZNONODE)
		fail_msg("exists %s: %s", path, zerror(rc));
	return rc == ZOK;
}

char *test_zk_get(test_zk *z, const char *path, int64_t *ret_czxid)
{
	int64_t until = test_now_ms() + CALL_TIMEOUT_MS;
	int size = 65536;
	char *buf = g_malloc((size_t)size + 1);
	struct Stat st;
	int rc, len;

	for (;;) {
		len = size;
		rc = zoo_get(session(z, until, "get", path), path, 0, buf, &len, &st);
		if (rc == ZOK && st.dataLength > size) {
			/* Larger than ZooKeeper's default limit (jute.maxbuffer
			 * raised): read it again whole. */
			size = st.dataLength;
			buf = g_realloc(buf, (size_t)size + 1);
			continue;
		}
		if (!again(z, rc, until, "get", path))
			break;
	}
	if (rc == ZNONODE) {
		g_free(buf);
		return NULL;
	}
	if (rc != ZOK)
		fail_msg("get %s: %s", path, zerror(rc));
	if (len < 0) /* no data at all */
		len = 0;
	buf[len] = '\0';
	if (ret_czxid)
		*ret_czxid = st.czxid;
	return g_realloc(buf, (size_t)len + 1);
}

int test_zk_delete(test_zk *z, const char *path)
{
	int64_t until = test_now_ms() + CALL_TIMEOUT_MS;
	int rc;

	do
		rc = zoo_delete(session(z, until, "delete", path), path, -1);
	while (again(z, rc, until, "delete", path));
	return rc;
}

int test_zk_create(test_zk *z, const char *path, const char *data)
{
	int64_t until = test_now_ms() + CALL_TIMEOUT_MS;
	int rc;

	do
		rc = zoo_create(session(z, until, "create", path), path, data, data ? (int)strlen(data) : -1,
		                &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
	while (again(z, rc, until, "create", path));
	return rc;
}

/* A sequential node's name: it ends in ten decimal digits. */
static bool lock_node_name(const char *name)
{
	size_t len = strlen(name);

	if (len < 10)
		return false;
	for (size_t i = len - 10; i < len; i++)
		if (!g_ascii_isdigit(name[i]))
			return false;
	return true;
}

long long test_zk_leftover_nodes(test_zk *z, const char *path)
{
	char **children = test_zk_children(z, path);
	const char *name = strrchr(path, '/');
	long long found = 0;

	if (!children)
		return 0;
	if (lock_node_name(name ? name + 1 : path)) {
		fprintf(stderr, "left over: %s\n", path);
		found++;
	}
	for (int i = 0; children[i]; i++) {
		char *child = g_strconcat(strcmp(path, "/") == 0 ? "" : path, "/", children[i], NULL);

		found += test_zk_leftover_nodes(z, child);
		g_free(child);
	}
	g_strfreev(children);
	return found;
}
