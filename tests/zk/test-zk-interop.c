/* SPDX-License-Identifier: MIT */
/*
 * Interoperability on one lock path with kazoo's Lock (told to see
 * "-lock-" nodes) and Apache Curator's InterProcessMutex, both ways, and
 * digest credentials: a lock taken with them is readable but not
 * deletable by another identity.  Read-write locks: Curator's
 * InterProcessReadWriteLock (Debian's Curator 5.4) and kazoo's
 * ReadLock/WriteLock (with the extra_lock_patterns of docs/zookeeper.md,
 * "Peers") exclude dlock and are excluded by it in every pairing, and
 * readers share across them.
 *
 * The mutex peers are the benchmark's drivers (bench/peers/kazoo_peer.py
 * and bench/peers/curator-peer.sh, their try and hold modes); the
 * read-write ones are tests/zk/peers/kazoo_rw_peer.py and
 * CuratorRwPeer.java (run by curator-peer.sh).  They only try, never
 * queue: Debian's kazoo 2.8.0 deadlocks a reader queued before a writer
 * (fixed in kazoo 2.9.0), an ordering these tests therefore avoid.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <zookeeper/zookeeper.h>

#include "dlock.h"
#include "test-zk.h"

#ifndef KAZOO_PEER
#error "KAZOO_PEER must name bench/peers/kazoo_peer.py"
#endif
#ifndef CURATOR_PEER
#error "CURATOR_PEER must name bench/peers/curator-peer.sh"
#endif
#ifndef KAZOO_RW_PEER
#error "KAZOO_RW_PEER must name tests/zk/peers/kazoo_rw_peer.py"
#endif
#ifndef CURATOR_RW_PEER
#error "CURATOR_RW_PEER must name tests/zk/peers/CuratorRwPeer.java"
#endif

/* Curator's InterProcessMutex node, and dlock's: the same format. */
#define CURATOR_NODE_RE                                                                     \
	"^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-[0-9]{10}$"

static test_zk *zk;

typedef struct peer {
	pid_t pid;
	int in_fd;
	int out_fd;
	const char *what;
} peer;

/* A peer ("kazoo" or "curator") in mode ("try", "hold") on path: the
 * benchmark's mutex driver, or with rw ("read", "write") the read-write
 * one. */
static peer peer_start(const char *kind, const char *rw, const char *mode, const char *path)
{
	char *hosts = test_zk_hosts(zk);
	bool is_kazoo = strcmp(kind, "kazoo") == 0;
	GPtrArray *argv = g_ptr_array_new();
	peer p;

	if (is_kazoo) {
		g_ptr_array_add(argv, "/usr/bin/python3");
		g_ptr_array_add(argv, rw ? KAZOO_RW_PEER : KAZOO_PEER);
	} else if (rw) {
		g_ptr_array_add(argv, "/usr/bin/env");
		g_ptr_array_add(argv, "CURATOR_PEER_SOURCE=" CURATOR_RW_PEER);
	}
	if (!is_kazoo)
		g_ptr_array_add(argv, CURATOR_PEER);
	g_ptr_array_add(argv, (char *)mode);
	if (rw)
		g_ptr_array_add(argv, (char *)rw);
	g_ptr_array_add(argv, "--server");
	g_ptr_array_add(argv, hosts);
	g_ptr_array_add(argv, "--resource");
	g_ptr_array_add(argv, (char *)path);
	g_ptr_array_add(argv, NULL);
	p.what = is_kazoo ? "kazoo" : "Curator";
	p.pid = test_spawn((const char *const *)argv->pdata, &p.in_fd, &p.out_fd);
	g_ptr_array_free(argv, TRUE);
	g_free(hosts);
	return p;
}

static char *peer_line(peer *p)
{
	char line[512];

	if (!test_read_line(p->out_fd, line, sizeof(line), 30000))
		fail_msg("no answer from the %s peer", p->what);
	return g_strdup(line);
}

static void peer_finish(peer *p)
{
	int sig;

	close(p->in_fd);
	close(p->out_fd);
	assert_int_equal(test_wait_child(p->pid, &sig), 0);
}

static char *peer_try(const char *kind, const char *path)
{
	peer p = peer_start(kind, NULL, "try", path);
	char *answer = peer_line(&p);

	peer_finish(&p);
	return answer;
}

static void open_lock(const char *resource, dlock_client **ret_client, dlock_lock **ret_lock)
{
	char *u = test_zk_uri(zk, NULL);

	assert_int_equal(dlock_client_new(u, ret_client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(*ret_client, resource, ret_lock), DLOCK_OK);
	g_free(u);
}

/* The peer holds: dlock is busy until it releases. */
static void peer_holds_then_dlock(const char *kind, const char *resource)
{
	char *path = g_strconcat("/dlock/", resource, NULL);
	peer p = peer_start(kind, NULL, "hold", path);
	char *line = peer_line(&p);
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;

	assert_true(g_str_has_prefix(line, "held"));
	open_lock(resource, &client, &lock);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_locked(info), 1);
	dlock_info_free(info);

	assert_true(test_write_str(p.in_fd, "go\n"));
	g_free(line);
	line = peer_line(&p);
	assert_string_equal(line, "released");
	peer_finish(&p);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(line);
	g_free(path);
}

/* dlock holds: the peer is busy until dlock releases. */
static void dlock_holds_then_peer(const char *kind, const char *resource)
{
	char *path = g_strconcat("/dlock/", resource, NULL);
	dlock_client *client;
	dlock_lock *lock;
	char *answer;

	open_lock(resource, &client, &lock);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	answer = peer_try(kind, path);
	assert_string_equal(answer, "busy");
	g_free(answer);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	answer = peer_try(kind, path);
	assert_string_equal(answer, "acquired");
	g_free(answer);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(path);
}

static void test_kazoo_holder_excludes_dlock(void **state)
{
	peer_holds_then_dlock("kazoo", "interop/kazoo-holds");
}

static void test_dlock_holder_excludes_kazoo(void **state)
{
	dlock_holds_then_peer("kazoo", "interop/dlock-holds-k");
}

static void test_curator_holder_excludes_dlock(void **state)
{
	peer_holds_then_dlock("curator", "interop/curator-holds");
}

static void test_dlock_holder_excludes_curator(void **state)
{
	dlock_holds_then_peer("curator", "interop/dlock-holds-c");
}

static void test_node_names_match_curators_exactly(void **state)
{
	GRegex *re = g_regex_new(CURATOR_NODE_RE, 0, 0, NULL);
	peer p = peer_start("curator", NULL, "hold", "/dlock/interop/names");
	char *line = peer_line(&p);
	dlock_client *client;
	dlock_lock *lock;
	char **children;

	assert_string_equal(line, "held");
	open_lock("interop/names", &client, &lock);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	children = test_zk_children(zk, "/dlock/interop/names");
	assert_non_null(children);
	assert_int_equal(g_strv_length(children), 1);
	assert_true(g_regex_match(re, children[0], 0, NULL)); /* Curator's own node */
	g_strfreev(children);
	assert_true(test_write_str(p.in_fd, "go\n"));
	g_free(line);
	line = peer_line(&p);
	peer_finish(&p);

	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	children = test_zk_children(zk, "/dlock/interop/names");
	assert_int_equal(g_strv_length(children), 1);
	assert_true(g_regex_match(re, children[0], 0, NULL)); /* ours, the same shape */
	g_strfreev(children);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_regex_unref(re);
	g_free(line);
}

static void test_credentialed_lock_is_readable_not_deletable_by_others(void **state)
{
	char *hosts = test_zk_hosts(zk);
	char *alice = g_strdup_printf("zk://alice:secret%%2Fpw@%s", hosts);
	char *bob = g_strdup_printf("zk://bob:other@%s", hosts);
	char *node, *data;
	char **children;
	dlock_client *a1, *a2, *b;
	dlock_lock *la1, *la2, *lb;
	dlock_info *info;

	assert_int_equal(dlock_client_new(alice, &a1), DLOCK_OK);
	assert_int_equal(dlock_client_new(alice, &a2), DLOCK_OK);
	assert_int_equal(dlock_client_new(bob, &b), DLOCK_OK);
	assert_int_equal(dlock_lock_new(a1, "cred/x", &la1), DLOCK_OK);
	assert_int_equal(dlock_lock_new(a2, "cred/x", &la2), DLOCK_OK);
	assert_int_equal(dlock_lock_new(b, "cred/x", &lb), DLOCK_OK);
	assert_int_equal(dlock_acquire(la1, 10000), DLOCK_OK);

	children = test_zk_children(zk, "/dlock/cred/x");
	assert_int_equal(g_strv_length(children), 1);
	node = g_strconcat("/dlock/cred/x/", children[0], NULL);
	/* Others read it (world READ): the inspection session, and bob. */
	data = test_zk_get(zk, node, NULL);
	assert_non_null(data);
	g_free(data);
	assert_int_equal(dlock_lock_query(lb, &info), DLOCK_OK);
	assert_int_equal(dlock_info_locked(info), 1);
	assert_int_equal(dlock_info_holder_pid(info), getpid());
	dlock_info_free(info);
	/* Nobody else deletes it, or queues on it. */
	assert_int_equal(test_zk_delete(zk, node), ZNOAUTH);
	assert_true(test_zk_exists(zk, node));
	assert_int_equal(dlock_acquire(lb, 0), DLOCK_EACCES);
	assert_non_null(strstr(dlock_last_error_message(), "ACL"));
	/* The same identity in another session waits its turn as usual. */
	assert_int_equal(dlock_acquire(la2, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(la1), DLOCK_OK);
	assert_false(test_zk_exists(zk, node));
	assert_int_equal(dlock_acquire(la2, 10000), DLOCK_OK);
	assert_int_equal(dlock_release(la2), DLOCK_OK);

	dlock_lock_free(la1);
	dlock_lock_free(la2);
	dlock_lock_free(lb);
	dlock_client_free(a1);
	dlock_client_free(a2);
	dlock_client_free(b);
	g_strfreev(children);
	g_free(node);
	g_free(alice);
	g_free(bob);
	g_free(hosts);
}

/* ---- read-write locks ---- */

static void assert_peer_says(peer *p, const char *expected)
{
	char *line = peer_line(p);

	assert_string_equal(line, expected);
	g_free(line);
}

/* What a peer's try says: "acquired" or "busy". */
static void assert_peer_try(const char *kind, const char *rw, const char *path, const char *expected)
{
	peer p = peer_start(kind, rw, "try", path);

	assert_peer_says(&p, expected);
	peer_finish(&p);
}

static dlock_mode mode_of(const char *rw)
{
	return strcmp(rw, "read") == 0 ? DLOCK_MODE_READ : DLOCK_MODE_WRITE;
}

static void open_rw_lock(const char *resource, dlock_mode mode, dlock_client **ret_client,
                         dlock_lock **ret_lock)
{
	open_lock(resource, ret_client, ret_lock);
	assert_int_equal(dlock_lock_set_mode(*ret_lock, mode), DLOCK_OK);
}

/*
 * The peer holds in mode peer_rw: a dlock try in mode dlock_rw gets
 * expected (DLOCK_OK: shared, then released; DLOCK_EBUSY: excluded,
 * and it gets the lock once the peer releases).
 */
static void peer_holds(const char *kind, const char *peer_rw, const char *dlock_rw, int expected)
{
	char *resource = g_strdup_printf("interop-rw/%s-%s-holds-%s", kind, peer_rw, dlock_rw);
	char *path = g_strconcat("/dlock/", resource, NULL);
	peer p = peer_start(kind, peer_rw, "hold", path);
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;

	assert_peer_says(&p, "held");
	open_rw_lock(resource, mode_of(dlock_rw), &client, &lock);
	assert_int_equal(dlock_acquire(lock, 0), expected);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_mode(info), strcmp(peer_rw, "read") == 0 ? DLOCK_HELD_SHARED
	                                                                     : DLOCK_HELD_EXCLUSIVE);
	/* the peer, and dlock's reader if it shares */
	assert_int_equal(dlock_info_holders(info), expected == DLOCK_OK ? 2 : 1);
	dlock_info_free(info);
	if (expected == DLOCK_OK)
		assert_int_equal(dlock_release(lock), DLOCK_OK);

	assert_true(test_write_str(p.in_fd, "go\n"));
	assert_peer_says(&p, "released");
	peer_finish(&p);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(path);
	g_free(resource);
}

/* dlock holds in mode dlock_rw: the peer's try in mode peer_rw says
 * expected, and "acquired" once dlock releases. */
static void dlock_holds(const char *kind, const char *dlock_rw, const char *peer_rw, const char *expected)
{
	char *resource = g_strdup_printf("interop-rw/dlock-%s-holds-%s-%s", dlock_rw, kind, peer_rw);
	char *path = g_strconcat("/dlock/", resource, NULL);
	dlock_client *client;
	dlock_lock *lock;

	open_rw_lock(resource, mode_of(dlock_rw), &client, &lock);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	assert_peer_try(kind, peer_rw, path, expected);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_peer_try(kind, peer_rw, path, "acquired");
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(path);
	g_free(resource);
}

/* Every pairing with one peer: its reader or writer holding against
 * dlock's reader and writer, and the other way round. */
static void every_pairing(const char *kind)
{
	peer_holds(kind, "read", "write", DLOCK_EBUSY);
	peer_holds(kind, "read", "read", DLOCK_OK);
	peer_holds(kind, "write", "read", DLOCK_EBUSY);
	peer_holds(kind, "write", "write", DLOCK_EBUSY);
	dlock_holds(kind, "read", "write", "busy");
	dlock_holds(kind, "read", "read", "acquired");
	dlock_holds(kind, "write", "read", "busy");
	dlock_holds(kind, "write", "write", "busy");
}

static void test_curator_read_write_lock_and_dlock_in_every_pairing(void **state)
{
	every_pairing("curator");
}

static void test_kazoo_read_and_write_locks_and_dlock_in_every_pairing(void **state)
{
	every_pairing("kazoo");
}

/*
 * Curator's recipes count only the nodes of their own names (its sorting
 * puts any other name after every sequence number): its read-write
 * lock's writers and readers pass an EXCLUSIVE hold's "-lock-" node, and
 * its InterProcessMutex passes WRITE's "__WRIT__" node, although dlock
 * sees theirs and keeps out of them.  Hence the rule in docs/zookeeper.md: where
 * Curator's read-write lock shares a path take WRITE (or READ), where
 * its mutex does EXCLUSIVE.
 */
static void test_curator_recipes_pass_dlock_holds_of_the_other_recipe(void **state)
{
	const char *path = "/dlock/interop-rw/other-recipe";
	dlock_client *client;
	dlock_lock *exclusive, *write;
	char *answer;
	peer p;

	open_lock("interop-rw/other-recipe", &client, &exclusive);
	assert_int_equal(dlock_lock_new(client, "interop-rw/other-recipe", &write), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(write, DLOCK_MODE_WRITE), DLOCK_OK);

	assert_int_equal(dlock_acquire(exclusive, 10000), DLOCK_OK);
	assert_peer_try("curator", "write", path, "acquired");
	assert_peer_try("curator", "read", path, "acquired");
	assert_int_equal(dlock_release(exclusive), DLOCK_OK);

	assert_int_equal(dlock_acquire(write, 10000), DLOCK_OK);
	answer = peer_try("curator", path);
	assert_string_equal(answer, "acquired");
	g_free(answer);
	assert_int_equal(dlock_release(write), DLOCK_OK);

	/* dlock, the other way round, is kept out by both. */
	p = peer_start("curator", "write", "hold", path);
	assert_peer_says(&p, "held");
	assert_int_equal(dlock_acquire(exclusive, 0), DLOCK_EBUSY);
	assert_true(test_write_str(p.in_fd, "go\n"));
	assert_peer_says(&p, "released");
	peer_finish(&p);
	p = peer_start("curator", NULL, "hold", path);
	answer = peer_line(&p);
	assert_true(g_str_has_prefix(answer, "held"));
	g_free(answer);
	assert_int_equal(dlock_acquire(write, 0), DLOCK_EBUSY);
	assert_true(test_write_str(p.in_fd, "go\n"));
	assert_peer_says(&p, "released");
	peer_finish(&p);

	dlock_lock_free(exclusive);
	dlock_lock_free(write);
	dlock_client_free(client);
}

/* Curator's and dlock's reader nodes: InterProcessReadWriteLock's names. */
static void test_read_write_node_names_match_curators_exactly(void **state)
{
	GRegex *re = g_regex_new("^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-"
	                         "__(READ|WRIT)__[0-9]{10}$",
	                         0, 0, NULL);
	peer p = peer_start("curator", "read", "hold", "/dlock/interop-rw/names");
	dlock_client *client;
	dlock_lock *lock;
	char **children;

	assert_peer_says(&p, "held");
	open_rw_lock("interop-rw/names", DLOCK_MODE_READ, &client, &lock);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	children = test_zk_children(zk, "/dlock/interop-rw/names");
	assert_int_equal(g_strv_length(children), 2);
	for (size_t i = 0; children[i]; i++)
		assert_true(g_regex_match(re, children[i], 0, NULL));
	g_strfreev(children);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_true(test_write_str(p.in_fd, "go\n"));
	assert_peer_says(&p, "released");
	peer_finish(&p);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_regex_unref(re);
}

static void test_no_lock_node_of_this_suite_remains(void **state)
{
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
}

static int setup(void **state)
{
	zk = test_zk_start(1, 200, 20000);
	return 0;
}

static int teardown(void **state)
{
	test_zk_stop(zk);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kazoo_holder_excludes_dlock),
		cmocka_unit_test(test_dlock_holder_excludes_kazoo),
		cmocka_unit_test(test_curator_holder_excludes_dlock),
		cmocka_unit_test(test_dlock_holder_excludes_curator),
		cmocka_unit_test(test_node_names_match_curators_exactly),
		cmocka_unit_test(test_credentialed_lock_is_readable_not_deletable_by_others),
		cmocka_unit_test(test_curator_read_write_lock_and_dlock_in_every_pairing),
		cmocka_unit_test(test_kazoo_read_and_write_locks_and_dlock_in_every_pairing),
		cmocka_unit_test(test_read_write_node_names_match_curators_exactly),
		cmocka_unit_test(test_curator_recipes_pass_dlock_holds_of_the_other_recipe),
		cmocka_unit_test(test_no_lock_node_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_zk_finish(cmocka_run_group_tests_name("zk-interop", tests, setup, teardown));
}
