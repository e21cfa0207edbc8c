/*
 * Interoperability on one lock path with kazoo's Lock (told to see
 * "-lock-" nodes) and Apache Curator's InterProcessMutex, both ways, and
 * digest credentials: a lock taken with them is readable but not
 * deletable by another identity.
 *
 * The peers are the benchmark's drivers (bench/peers/kazoo_peer.py and
 * bench/peers/curator-peer.sh, their try and hold modes).
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

static peer peer_start(const char *kind, const char *path, const char *mode)
{
	char *hosts = test_zk_hosts(zk);
	const char *kazoo[] = { "/usr/bin/python3", KAZOO_PEER, mode, "--server",
	                        hosts, "--resource", path, NULL };
	const char *curator[] = { CURATOR_PEER, mode, "--server", hosts, "--resource", path, NULL };
	bool is_kazoo = strcmp(kind, "kazoo") == 0;
	peer p;

	p.what = is_kazoo ? "kazoo" : "Curator";
	p.pid = test_spawn(is_kazoo ? kazoo : curator, &p.in_fd, &p.out_fd);
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
	peer p = peer_start(kind, path, "try");
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
	peer p = peer_start(kind, path, "hold");
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
	peer p = peer_start("curator", "/dlock/interop/names", "hold");
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
	assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBACKEND);
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
		cmocka_unit_test(test_no_lock_node_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_zk_finish(cmocka_run_group_tests_name("zk-interop", tests, setup, teardown));
}
