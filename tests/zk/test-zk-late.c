/* SPDX-License-Identifier: MIT */
/*
 * Answers that arrive after the session may have ended: an acquirer
 * process whose last answer -- the one that shows it first -- reaches its
 * socket just as the process is paused (a GC or VM pause, SIGSTOP), and is
 * read only after the server has expired its session and another client
 * has taken the lock.  The answer is true of a moment long past: a grant
 * made of it would hold beside that client.
 *
 * The worker's threads are held still with ptrace (the test process is
 * the worker's parent), and resumed all but its session thread, whose
 * timer would otherwise end the session first in some runs and hide the
 * grant: the order is forced, not hoped for.  Each recipe makes its grant
 * of another answer: a lock's of a listing of the resource's children, a
 * semaphore's of a listing of its leases, a downgrade's of the create of
 * its read node.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-proxy.h"
#include "test-zk.h"

/* ---- the worker ----------------------------------------------------------- */

/*
 * As kind says ("lock", "permit" of 2, "downgrade": hold WRITE, print
 * "held", and on a line "go" take READ through another handle), acquire
 * resource and print "acquired RC held=H token=T"; then wait for stdin
 * to end and release.
 */
static int worker_late(const char *uri, const char *resource, const char *kind)
{
	bool downgrade = strcmp(kind, "downgrade") == 0;
	dlock_client *client;
	dlock_lock *lock, *write = NULL;
	char line[64];
	int rc;

	if (dlock_client_new(uri, &client) != DLOCK_OK || dlock_lock_new(client, resource, &lock) != DLOCK_OK)
		return 2;
	if (strcmp(kind, "permit") == 0 && dlock_lock_set_permits(lock, 2) != DLOCK_OK)
		return 2;
	if (downgrade && (dlock_lock_set_mode(lock, DLOCK_MODE_READ) != DLOCK_OK ||
	                  dlock_lock_new(client, resource, &write) != DLOCK_OK ||
	                  dlock_lock_set_mode(write, DLOCK_MODE_WRITE) != DLOCK_OK ||
	                  dlock_acquire(write, 10000) != DLOCK_OK))
		return 2;
	printf("%s\n", downgrade ? "held" : "ready");
	fflush(stdout);
	if (downgrade && (!fgets(line, sizeof(line), stdin) || strncmp(line, "go", 2) != 0))
		return 3;
	rc = dlock_acquire(lock, 60000);
	printf("acquired %d held=%d token=%" PRIu64 "\n", rc, dlock_held(lock), dlock_fencing_token(lock));
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	if (rc == DLOCK_OK)
		dlock_release(lock);
	if (write)
		dlock_release(write);
	dlock_lock_free(lock);
	dlock_lock_free(write);
	dlock_client_free(client);
	return 0;
}

/* ---- helpers -------------------------------------------------------------- */


/* Hold every thread of process pid still; *ret_session gets the id of
 * its ZooKeeper session thread ("dlock-zksession"). */
static GArray *process_freeze(pid_t pid, pid_t *ret_session)
{
	char *dir = g_strdup_printf("/proc/%d/task", (int)pid);
	GDir *d = g_dir_open(dir, 0, NULL);
	GArray *tids = g_array_new(FALSE, FALSE, sizeof(pid_t));
	const char *name;

	assert_non_null(d);
	*ret_session = 0;
	while ((name = g_dir_read_name(d))) {
		char *path = g_strdup_printf("%s/%s/comm", dir, name), *comm = NULL;
		pid_t tid = (pid_t)atoi(name);

		if (g_file_get_contents(path, &comm, NULL, NULL) && g_str_has_prefix(comm, "dlock-zksession"))
			*ret_session = tid;
		g_free(comm);
		g_free(path);
		g_array_append_val(tids, tid);
	}
	g_dir_close(d);
	g_free(dir);
	assert_true(*ret_session > 0);
	for (guint i = 0; i < tids->len; i++)
		test_thread_freeze(g_array_index(tids, pid_t, i));
	return tids;
}

typedef struct worker {
	pid_t pid;
	int fd_in, fd_out;
} worker;

/* The next line from the worker that starts with prefix; false if none
 * comes within timeout_ms. */
static void expect_line(worker *w, const char *prefix, char *line, size_t len)
{
	if (!test_read_line_prefixed(w->fd_out, prefix, line, len, 30000 * test_slack_factor()))
		fail_msg("no '%s' line from the worker", prefix);
}

static bool held_one(void *proxy)
{
	return test_proxy_held(proxy) >= 1;
}

typedef struct children_of {
	test_zk *zk;
	const char *path;
	int n;
} children_of;

static bool has_children(void *arg)
{
	children_of *c = arg;

	return test_zk_count_children(c->zk, c->path) == c->n;
}

/* ---- the test ------------------------------------------------------------- */

/*
 * The other client, on its own session, holds permits (1: a lock, 2: a
 * semaphore's, WRITE for a downgrade) through handles of its own.
 */
typedef struct other {
	dlock_client *client;
	dlock_lock *locks[2];
	int count;
} other;

static void other_take(other *o, int i)
{
	assert_int_equal(dlock_acquire(o->locks[i], 20000), DLOCK_OK);
}

static void other_open(other *o, const char *uri, const char *resource, const char *kind)
{
	o->count = strcmp(kind, "permit") == 0 ? 2 : 1;
	assert_int_equal(dlock_client_new(uri, &o->client), DLOCK_OK);
	for (int i = 0; i < o->count; i++) {
		assert_int_equal(dlock_lock_new(o->client, resource, &o->locks[i]), DLOCK_OK);
		assert_int_equal(dlock_lock_set_owner(o->locks[i], DLOCK_OWNER_HANDLE), DLOCK_OK);
		if (o->count == 2)
			assert_int_equal(dlock_lock_set_permits(o->locks[i], 2), DLOCK_OK);
		if (strcmp(kind, "downgrade") == 0)
			assert_int_equal(dlock_lock_set_mode(o->locks[i], DLOCK_MODE_WRITE), DLOCK_OK);
	}
}

static void other_close(other *o)
{
	for (int i = 0; i < o->count; i++)
		dlock_lock_free(o->locks[i]);
	dlock_client_free(o->client);
}

/*
 * The worker waits for its kind of grant, whose answer the proxy holds
 * back; the worker is held still, the answer let into its socket, and
 * the server expires the worker's session (2 s) meanwhile, so the other
 * client takes what the worker was to get.  The worker then runs on (its
 * session thread still held): it reads the answer, which shows it first,
 * but must not return a grant while the other client holds -- it asks
 * again, finds its session ended and queues anew, and is granted once
 * the other client has released, with a larger token.
 */
static void late_answer_grants_nothing(const char *kind)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, zk->servers[0].port);
	char *via = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=2s", test_proxy_port(proxy));
	char *direct = test_zk_uri(zk, "?session-timeout=8s");
	char *resource = g_strdup_printf("late-%s", kind);
	char *dir = g_strconcat("/dlock/", resource, NULL);
	char *leases = g_strconcat(dir, "/leases", NULL);
	const char *args[] = { "late", via, resource, kind, NULL };
	bool permit = strcmp(kind, "permit") == 0, downgrade = strcmp(kind, "downgrade") == 0;
	children_of gone = { zk, permit ? leases : dir, permit ? 1 : 0 };
	other o = { 0 };
	worker w = { 0 };
	GArray *tids;
	pid_t session_tid;
	uint64_t token;
	char line[128];

	other_open(&o, direct, resource, kind);
	if (!downgrade) {
		for (int i = 0; i < o.count; i++)
			other_take(&o, i);
	}
	w.pid = test_spawn_worker_io(args, &w.fd_in, &w.fd_out);
	if (downgrade) {
		/* The worker holds WRITE; its downgrade's create is answered
		 * late. */
		expect_line(&w, "held", line, sizeof(line));
		test_proxy_hold_replies_after(proxy, "multi", 0);
		assert_true(test_write_str(w.fd_in, "go\n"));
	} else {
		/* The worker queues; the listing after the other's release,
		 * which shows it first, is answered late. */
		expect_line(&w, "ready", line, sizeof(line));
		if (permit)
			assert_true(test_zk_wait_children(zk, leases, 3, 10000));
		else
			assert_true(test_zk_wait_children(zk, dir, 2, 10000));
		g_usleep(200 * 1000); /* its watch is set */
		test_proxy_hold_replies_after(proxy, "getChildren", 0);
		assert_int_equal(dlock_release(o.locks[o.count - 1]), DLOCK_OK);
	}
	assert_true(test_wait_until(held_one, proxy, 10000));
	tids = process_freeze(w.pid, &session_tid);
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);

	/* The server expires the worker's session; the other client takes
	 * what the worker was to get. */
	if (!test_wait_until(has_children, &gone, 15000))
		fail_msg("the worker's nodes stayed on the server");
	other_take(&o, o.count - 1);
	token = dlock_fencing_token(o.locks[o.count - 1]);

	for (guint i = 0; i < tids->len; i++)
		if (g_array_index(tids, pid_t, i) != session_tid)
			test_thread_thaw(g_array_index(tids, pid_t, i));
	if (test_read_line_prefixed(w.fd_out, "acquired ", line, sizeof(line), 3000)) {
		print_message("worker, while the other client holds (token %" PRIu64 "): %s\n", token, line);
		fail_msg("the %s was granted while another client holds", kind);
	}
	test_thread_thaw(session_tid);
	g_array_unref(tids);

	for (int i = 0; i < o.count; i++)
		assert_int_equal(dlock_release(o.locks[i]), DLOCK_OK);
	expect_line(&w, "acquired ", line, sizeof(line));
	print_message("worker, once the other client released (token %" PRIu64 "): %s\n", token, line);
	assert_true(g_str_has_prefix(line, "acquired 0 held=1 token="));
	assert_true(g_ascii_strtoull(line + strlen("acquired 0 held=1 token="), NULL, 10) > token);

	close(w.fd_in);
	assert_int_equal(test_wait_worker(w.pid), 0);
	close(w.fd_out);
	other_close(&o);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_proxy_stop(proxy);
	test_zk_stop(zk);
	g_free(leases);
	g_free(dir);
	g_free(resource);
	g_free(via);
	g_free(direct);
}

static void test_lock_answer_after_the_session_expired_grants_nothing(void **state)
{
	late_answer_grants_nothing("lock");
}

static void test_permit_answer_after_the_session_expired_grants_nothing(void **state)
{
	late_answer_grants_nothing("permit");
}

static void test_downgrade_answer_after_the_session_expired_grants_nothing(void **state)
{
	late_answer_grants_nothing("downgrade");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lock_answer_after_the_session_expired_grants_nothing),
		cmocka_unit_test(test_permit_answer_after_the_session_expired_grants_nothing),
		cmocka_unit_test(test_downgrade_answer_after_the_session_expired_grants_nothing),
	};

	test_init(argv[0]);
	if (argc >= 6 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "late") == 0)
		return worker_late(argv[3], argv[4], argv[5]);
	return test_zk_finish(cmocka_run_group_tests_name("zk-late", tests, NULL, NULL));
}
