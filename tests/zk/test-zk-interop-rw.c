/*
 * Read-write lock interoperability on one lock path: Apache Curator's
 * InterProcessReadWriteLock (Debian's Curator 5.4) and kazoo's
 * ReadLock/WriteLock (with the extra_lock_patterns of SPEC 8) exclude
 * dlock and are excluded by it in every pairing, and readers share
 * across them.
 *
 * The peers (tests/zk/peers) only try, never queue: Debian's kazoo
 * 2.8.0 deadlocks a reader queued before a writer (fixed in kazoo
 * 2.9.0), an ordering these tests therefore avoid.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-zk.h"

#ifndef KAZOO_RW_PEER
#error "KAZOO_RW_PEER must name tests/zk/peers/kazoo_rw_peer.py"
#endif
#ifndef CURATOR_PEER
#error "CURATOR_PEER must name bench/peers/curator-peer.sh"
#endif
#ifndef CURATOR_RW_PEER
#error "CURATOR_RW_PEER must name tests/zk/peers/CuratorRwPeer.java"
#endif

static test_zk *zk;

typedef struct peer {
	pid_t pid;
	int in_fd;
	int out_fd;
	const char *what;
} peer;

/* A peer ("kazoo" or "curator") taking a READ or WRITE ("read",
 * "write") hold in mode "try" or "hold" on path. */
static peer peer_start(const char *kind, const char *rw, const char *mode, const char *path)
{
	char *hosts = test_zk_hosts(zk);
	const char *kazoo[] = { "/usr/bin/python3", KAZOO_RW_PEER, mode, rw, "--server", hosts,
	                        "--resource", path, NULL };
	const char *curator[] = { "/usr/bin/env", "CURATOR_PEER_SOURCE=" CURATOR_RW_PEER, CURATOR_PEER,
	                          mode, rw, "--server", hosts, "--resource", path, NULL };
	bool is_kazoo = strcmp(kind, "kazoo") == 0;
	peer p;

	p.what = is_kazoo ? "kazoo" : "Curator";
	p.pid = test_spawn(is_kazoo ? kazoo : curator, &p.in_fd, &p.out_fd);
	g_free(hosts);
	return p;
}

static void assert_peer_says(peer *p, const char *expected)
{
	char line[512];

	if (!test_read_line(p->out_fd, line, sizeof(line), 30000))
		fail_msg("no answer from the %s peer", p->what);
	assert_string_equal(line, expected);
}

static void peer_finish(peer *p)
{
	int sig;

	close(p->in_fd);
	close(p->out_fd);
	assert_int_equal(test_wait_child(p->pid, &sig), 0);
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

static void open_lock(const char *resource, dlock_mode mode, dlock_client **ret_client,
                      dlock_lock **ret_lock)
{
	char *u = test_zk_uri(zk, NULL);

	assert_int_equal(dlock_client_new(u, ret_client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(*ret_client, resource, ret_lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(*ret_lock, mode), DLOCK_OK);
	g_free(u);
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
	open_lock(resource, mode_of(dlock_rw), &client, &lock);
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

	open_lock(resource, mode_of(dlock_rw), &client, &lock);
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

/* Curator's and dlock's node names: InterProcessReadWriteLock's own. */
static void test_node_names_match_curators_exactly(void **state)
{
	GRegex *re = g_regex_new("^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-"
	                         "__(READ|WRIT)__[0-9]{10}$",
	                         0, 0, NULL);
	peer p = peer_start("curator", "read", "hold", "/dlock/interop-rw/names");
	dlock_client *client;
	dlock_lock *lock;
	char **children;

	assert_peer_says(&p, "held");
	open_lock("interop-rw/names", DLOCK_MODE_READ, &client, &lock);
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
		cmocka_unit_test(test_curator_read_write_lock_and_dlock_in_every_pairing),
		cmocka_unit_test(test_kazoo_read_and_write_locks_and_dlock_in_every_pairing),
		cmocka_unit_test(test_node_names_match_curators_exactly),
		cmocka_unit_test(test_no_lock_node_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_zk_finish(cmocka_run_group_tests_name("zk-interop-rw", tests, setup, teardown));
}
