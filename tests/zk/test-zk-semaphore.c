/*
 * Semaphores on ZooKeeper (SPEC §11), in Curator InterProcessSemaphoreV2's
 * layout: the shared checks (test-permits.h) -- at most N at once and N
 * reached across processes, busy, a waiter given a released permit,
 * agreement on N, re-entry, a lock kept out, a killed holder's permit back
 * after its session -- and what is ZooKeeper's own: the nodes, Curator
 * semaphores sharing the permits with dlock's in both directions, a lock
 * refused among a semaphore's leases, nothing left behind.
 */
#include <inttypes.h>
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
#include "test-permits.h"
#include "test-util.h"
#include "test-zk.h"

#ifndef CURATOR_SEMAPHORE_PEER
#error "CURATOR_SEMAPHORE_PEER must name tests/zk/peers/CuratorSemaphorePeer.java"
#endif

#define SESSION_MS 2000
#define PEER_ANSWER_MS 30000

static test_zk *zk;
static char *uri;

static void test_never_more_than_n_and_n_reached_across_processes(void **state)
{
	test_permits_run(uri, "sem/census", 3, 3, 2, 4);
}

/* A release deletes a lease, whose child watch wakes the acquirer that
 * holds the internal mutex. */
static void test_permits_busy_wake_agreement_reentry_and_locks(void **state)
{
	test_permits_basics(uri, "sem/basics", 500, false);
}

/* The killed holder's lease goes with its session. */
static void test_killed_holders_permit_returns_after_its_session(void **state)
{
	test_permits_killed_holder(uri, "sem/killed", SESSION_MS + 2000);
}

static void test_nodes_are_curators_layout(void **state)
{
	dlock_client *client;
	dlock_lock *sem;
	char **leases, *data, *path;
	int64_t czxid = 0;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/layout", &sem), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(sem, 4), DLOCK_OK);
	assert_int_equal(dlock_acquire(sem, 5000), DLOCK_OK);
	data = test_zk_get(zk, "/dlock/sem/layout", NULL);
	assert_string_equal(data, "4");
	g_free(data);
	leases = test_zk_children(zk, "/dlock/sem/layout/leases");
	assert_non_null(leases[0]);
	assert_null(leases[1]);
	assert_true(g_str_has_prefix(leases[0], "_c_"));
	assert_non_null(strstr(leases[0], "-lease-"));
	path = g_strconcat("/dlock/sem/layout/leases/", leases[0], NULL);
	data = test_zk_get(zk, path, &czxid);
	assert_true(g_str_has_prefix(data, "dlock1:"));
	assert_int_equal((uint64_t)czxid, dlock_fencing_token(sem));
	/* The internal mutex was given up once the lease was taken. */
	assert_int_equal(test_zk_count_children(zk, "/dlock/sem/layout/locks"), 0);
	assert_int_equal(dlock_release(sem), DLOCK_OK);
	assert_false(test_zk_exists(zk, path));
	g_free(data);
	g_free(path);
	g_strfreev(leases);
	dlock_lock_free(sem);
	dlock_client_free(client);
}

/* A lock whose nodes would count as leases of a semaphore in use. */
static void test_lock_among_a_semaphores_leases_is_refused(void **state)
{
	dlock_client *client;
	dlock_lock *sem, *lock;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/guarded", &sem), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(sem, 2), DLOCK_OK);
	assert_int_equal(dlock_acquire(sem, 5000), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/guarded/leases", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 5000), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "leases of a semaphore of 2"));
	assert_int_equal(test_zk_count_children(zk, "/dlock/sem/guarded/leases"), 1);
	dlock_lock_free(lock);
	assert_int_equal(dlock_release(sem), DLOCK_OK);
	dlock_lock_free(sem);
	dlock_client_free(client);
}

/* A Curator lease, its stdin and stdout. */
typedef struct peer {
	pid_t pid;
	int in_fd, out_fd;
} peer;

static peer curator_start(const char *mode, const char *path, const char *permits)
{
	char *hosts = test_zk_hosts(zk);
	const char *argv[] = { "/usr/bin/env", "CURATOR_PEER_SOURCE=" CURATOR_SEMAPHORE_PEER, CURATOR_PEER,
		               mode, "--server", hosts, "--resource", path, "--permits", permits, NULL };
	peer p;

	p.pid = test_spawn(argv, &p.in_fd, &p.out_fd);
	g_free(hosts);
	return p;
}

static void curator_expect(peer *p, const char *line)
{
	char got[256];

	if (!test_read_line(p->out_fd, got, sizeof(got), PEER_ANSWER_MS))
		fail_msg("no '%s' from the Curator peer", line);
	assert_string_equal(got, line);
}

static void curator_finish(peer *p, bool held)
{
	if (held) {
		assert_true(test_write_str(p->in_fd, "release\n"));
		curator_expect(p, "released");
	}
	close(p->in_fd);
	close(p->out_fd);
	assert_int_equal(test_wait_worker(p->pid), 0);
}

/* Curator semaphores and dlock's share 2 permits on one path. */
static void test_curator_and_dlock_share_the_permits(void **state)
{
	dlock_client *client;
	dlock_lock *a, *b;
	peer c1, c2;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/curator", &a), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(a, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(a, 2), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/curator", &b), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(b, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(b, 2), DLOCK_OK);

	/* One Curator lease and one of dlock's fill it, both ways round. */
	c1 = curator_start("try", "/dlock/sem/curator", "2");
	curator_expect(&c1, "held");
	assert_int_equal(dlock_acquire(a, 5000), DLOCK_OK);
	assert_int_equal(dlock_acquire(b, 0), DLOCK_EBUSY);
	c2 = curator_start("try", "/dlock/sem/curator", "2");
	curator_expect(&c2, "busy");
	curator_finish(&c2, false);
	/* A permit returned by Curator lets dlock in... */
	curator_finish(&c1, true);
	assert_int_equal(dlock_acquire(b, 10000), DLOCK_OK);
	c2 = curator_start("try", "/dlock/sem/curator", "2");
	curator_expect(&c2, "busy");
	curator_finish(&c2, false);
	/* ...and one returned by dlock lets Curator in. */
	c2 = curator_start("wait", "/dlock/sem/curator", "2");
	g_usleep(500 * 1000);
	assert_int_equal(dlock_release(a), DLOCK_OK);
	curator_expect(&c2, "held");
	assert_int_equal(dlock_acquire(a, 0), DLOCK_EBUSY);
	curator_finish(&c2, true);
	assert_int_equal(dlock_release(b), DLOCK_OK);
	dlock_lock_free(a);
	dlock_lock_free(b);
	dlock_client_free(client);
}

static void test_nothing_is_left_on_the_server(void **state)
{
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
}

static int setup(void **state)
{
	char *suffix = g_strdup_printf("?session-timeout=%dms", SESSION_MS);

	zk = test_zk_start(1, 200, 20000);
	uri = test_zk_uri(zk, suffix);
	g_free(suffix);
	return 0;
}

static int teardown(void **state)
{
	g_free(uri);
	test_zk_stop(zk);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_never_more_than_n_and_n_reached_across_processes),
		cmocka_unit_test(test_permits_busy_wake_agreement_reentry_and_locks),
		cmocka_unit_test(test_killed_holders_permit_returns_after_its_session),
		cmocka_unit_test(test_nodes_are_curators_layout),
		cmocka_unit_test(test_lock_among_a_semaphores_leases_is_refused),
		cmocka_unit_test(test_curator_and_dlock_share_the_permits),
		cmocka_unit_test(test_nothing_is_left_on_the_server),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return test_permits_worker_main(argc, argv);
	return test_zk_finish(cmocka_run_group_tests_name("zk-semaphore", tests, setup, teardown));
}
