/* SPDX-License-Identifier: MIT */
/*
 * A ZooKeeper downgrade under faults, against a real server: the write
 * hold it stands beside ends on the server (its node deleted, as by an
 * operator or a session the server ended) while the downgrade waits for
 * its session to reconnect, and a writer of another client queued behind
 * the write node gets in.  The downgrade must then not hold READ beside
 * that writer: it queues as any reader.  (Freeing the write handle from
 * another thread does not end the hold under a downgrade: that release
 * waits until the downgrade's acquire has returned.)
 *
 * The downgrading thread of a worker process is held still with ptrace
 * at the right moment (the test process is the worker's parent), its
 * other threads running on, so the order is forced, not hoped for.
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
#include "test-rw.h"
#include "test-zk.h"

/* ---- the worker ----------------------------------------------------------- */

static dlock_lock *worker_write;

/* Each state of the write hold as a line "state N". */
static void print_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	char line[32];
	int len = snprintf(line, sizeof(line), "state %d\n", (int)state);

	(void)lock;
	(void)user_data;
	if (write(STDOUT_FILENO, line, (size_t)len) != len)
		abort();
}

/* On a line "free" from stdin, free the write hold's handle (so its hold
 * is released), and say "freed"; until stdin ends. */
static gpointer free_on_command(gpointer data)
{
	char line[64];

	(void)data;
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "free", 4) == 0 && worker_write) {
			dlock_lock_free(worker_write);
			worker_write = NULL;
			printf("freed\n");
			fflush(stdout);
		}
	}
	return NULL;
}

/*
 * Hold resource in WRITE mode through one handle (print "held"), and on
 * a line "downgrade" take it in READ mode through another on this, the
 * main, thread (print "downgrading" first, "downgrade RC held=H" after),
 * while another thread frees the write handle on "free".
 */
static int worker_downgrade(const char *uri, const char *resource)
{
	dlock_client *client;
	dlock_lock *lr;
	GThread *freer;
	char line[64];
	int rc;

	if (dlock_client_new(uri, &client) != DLOCK_OK ||
	    dlock_lock_new(client, resource, &worker_write) != DLOCK_OK ||
	    dlock_lock_set_mode(worker_write, DLOCK_MODE_WRITE) != DLOCK_OK ||
	    dlock_lock_set_state_callback(worker_write, print_state, NULL) != DLOCK_OK ||
	    dlock_lock_new(client, resource, &lr) != DLOCK_OK ||
	    dlock_lock_set_mode(lr, DLOCK_MODE_READ) != DLOCK_OK ||
	    dlock_acquire(worker_write, 10000) != DLOCK_OK)
		return 2;
	printf("held\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin) || strncmp(line, "downgrade", 9) != 0)
		return 3;
	freer = g_thread_new("freer", free_on_command, NULL);
	printf("downgrading\n");
	fflush(stdout);
	rc = dlock_acquire(lr, 15000);
	printf("downgrade %d held=%d\n", rc, dlock_held(lr));
	fflush(stdout);
	if (rc == DLOCK_OK)
		dlock_release(lr);
	g_thread_join(freer);
	dlock_lock_free(worker_write);
	dlock_lock_free(lr);
	dlock_client_free(client);
	return 0;
}

/* ---- helpers -------------------------------------------------------------- */


/* Whether thread tid of process pid sleeps in a futex wait (x86_64
 * system call 202): a condition variable's, a waiter's. */
static bool sleeps_in_futex(pid_t pid, pid_t tid)
{
	char *path = g_strdup_printf("/proc/%d/task/%d/syscall", (int)pid, (int)tid);
	char *text = NULL;
	bool futex = false;

	if (g_file_get_contents(path, &text, NULL, NULL))
		futex = g_str_has_prefix(text, "202 ");
	g_free(text);
	g_free(path);
	return futex;
}

typedef struct worker {
	pid_t pid;
	int fd_in, fd_out;
	int settled; /* consecutive looks finding it asleep */
} worker;

static bool main_thread_settled(void *arg)
{
	worker *w = arg;

	w->settled = sleeps_in_futex(w->pid, w->pid) ? w->settled + 1 : 0;
	return w->settled >= 10;
}

/* The next line from the worker that starts with prefix ("state" lines
 * from its callback thread may come in between); false if none comes
 * within timeout_ms. */
static void expect_line(worker *w, const char *prefix, char *line, size_t len)
{
	if (!test_read_line_prefixed(w->fd_out, prefix, line, len, 30000 * test_slack_factor()))
		fail_msg("no '%s' line from the worker", prefix);
}

/* ---- tests ---------------------------------------------------------------- */

/*
 * The worker holds WRITE and a writer of another client queues behind
 * it.  The worker's connection drops; it starts a downgrade, which waits
 * for the session to reconnect, and its downgrading thread is held still
 * there.  Meanwhile the write node is deleted on the server, and the
 * queued writer is granted WRITE.  Only then does the downgrading thread
 * run on, once its session is back.
 * The write hold it was to stand beside is gone, so it must not hold READ
 * while that writer holds WRITE: it waits as a reader and is granted once
 * the writer releases.
 */
static void test_downgrade_after_its_write_hold_ended_never_shares_with_a_writer(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, zk->servers[0].port);
	char *via = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=8s", test_proxy_port(proxy));
	char *direct = test_zk_uri(zk, "?session-timeout=8s");
	const char *args[] = { "downgrade", via, "down-race", NULL };
	test_rw_waiter q;
	worker w = { 0 };
	char line[128], *write_node, **children;
	bool early;

	w.pid = test_spawn_worker_io(args, &w.fd_in, &w.fd_out);
	expect_line(&w, "held", line, sizeof(line));
	children = test_zk_children(zk, "/dlock/down-race");
	assert_non_null(children);
	assert_int_equal(g_strv_length(children), 1);
	write_node = g_strconcat("/dlock/down-race/", children[0], NULL);
	g_strfreev(children);
	test_rw_waiter_start(&q, direct, "down-race", DLOCK_MODE_WRITE, 30000);
	assert_true(test_zk_wait_children(zk, "/dlock/down-race", 2, 10000));

	/* The worker's connection drops and stays down. */
	test_proxy_admit_mode(proxy, TEST_PROXY_REFUSE);
	test_proxy_reset_all(proxy);
	expect_line(&w, "state 1", line, sizeof(line)); /* SUSPENDED */

	/* The downgrade starts and waits for the session. */
	assert_true(test_write_str(w.fd_in, "downgrade\n"));
	expect_line(&w, "downgrading", line, sizeof(line));
	assert_true(test_wait_until(main_thread_settled, &w, 10000));
	test_thread_freeze(w.pid);

	/* The write hold ends on the server: the queued writer gets in. */
	assert_int_equal(test_zk_delete(zk, write_node), 0);
	assert_true(test_wait_until(test_rw_waiter_done, &q, 15000));
	test_proxy_admit_mode(proxy, TEST_PROXY_ADMIT);
	test_rw_waiter_join(&q);
	assert_int_equal(q.rc, DLOCK_OK);

	/* Now the downgrade runs on, while the other client holds WRITE. */
	test_thread_thaw(w.pid);
	early = test_read_line_prefixed(w.fd_out, "downgrade ", line, sizeof(line), 1500);
	if (early) {
		print_message("worker, while another client holds WRITE: %s\n", line);
		if (strcmp(line, "downgrade 0 held=1") == 0)
			fail_msg("the downgrade holds READ while another client holds WRITE");
	}
	assert_int_equal(dlock_held(q.owner.lock), 1);
	assert_int_equal(dlock_release(q.owner.lock), DLOCK_OK);
	if (!early)
		expect_line(&w, "downgrade ", line, sizeof(line));
	print_message("worker, once the writer released: %s\n", line);
	assert_string_equal(line, "downgrade 0 held=1");

	close(w.fd_in);
	assert_int_equal(test_wait_worker(w.pid), 0);
	close(w.fd_out);
	test_rw_owner_close(&q.owner);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_proxy_stop(proxy);
	test_zk_stop(zk);
	g_free(write_node);
	g_free(via);
	g_free(direct);
}

typedef struct node_ref {
	test_zk *zk;
	char *path;
} node_ref;

static bool node_gone(void *arg)
{
	node_ref *n = arg;

	return !test_zk_exists(n->zk, n->path);
}

/*
 * The downgrade's create is applied but its answer is lost with the
 * connection, and before the downgrade tries again its write hold ends
 * on the server (the write node deleted).  The second try finds no write
 * node; the read node the first one made must not stay behind, where the
 * writer queued behind the write node would wait for it: that writer
 * gets in, and then the downgrade, as a reader.
 */
static void test_downgrade_whose_first_create_landed_leaves_no_read_node_when_it_queues(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, zk->servers[0].port);
	char *via = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=8s", test_proxy_port(proxy));
	char *direct = test_zk_uri(zk, "?session-timeout=8s");
	const char *args[] = { "downgrade", via, "down-lost", NULL };
	test_rw_waiter q;
	worker w = { 0 };
	node_ref write_node = { zk, NULL };
	char line[128], **children;

	w.pid = test_spawn_worker_io(args, &w.fd_in, &w.fd_out);
	expect_line(&w, "held", line, sizeof(line));
	children = test_zk_children(zk, "/dlock/down-lost");
	assert_non_null(children);
	assert_int_equal(g_strv_length(children), 1);
	write_node.path = g_strconcat("/dlock/down-lost/", children[0], NULL);
	g_strfreev(children);
	test_rw_waiter_start(&q, direct, "down-lost", DLOCK_MODE_WRITE, 30000);
	assert_true(test_zk_wait_children(zk, "/dlock/down-lost", 2, 10000));

	/* The create is applied, its answer lost with the connection, and
	 * no new connection is let in. */
	test_proxy_admit_mode(proxy, TEST_PROXY_REFUSE);
	test_proxy_drop_replies(proxy, "multi", 1, true);
	assert_true(test_write_str(w.fd_in, "downgrade\n"));
	expect_line(&w, "downgrading", line, sizeof(line));
	expect_line(&w, "state 1", line, sizeof(line)); /* SUSPENDED: the connection is gone */
	assert_true(test_zk_wait_children(zk, "/dlock/down-lost", 3, 10000)); /* the read node */
	assert_true(test_wait_until(main_thread_settled, &w, 10000));
	test_thread_freeze(w.pid);

	/* The write hold ends on the server, then the session comes back. */
	assert_int_equal(test_zk_delete(zk, write_node.path), 0);
	assert_true(test_wait_until(node_gone, &write_node, 15000));
	test_proxy_admit_mode(proxy, TEST_PROXY_ADMIT);
	test_thread_thaw(w.pid);

	/* The writer that queued behind the write node gets in... */
	if (!test_wait_until(test_rw_waiter_done, &q, 10000))
		fail_msg("the queued writer was not granted: a read node of the downgrade stays before it");
	test_rw_waiter_join(&q);
	assert_int_equal(q.rc, DLOCK_OK);
	/* ...and the downgrade, which queued as a reader, after it. */
	assert_int_equal(dlock_release(q.owner.lock), DLOCK_OK);
	expect_line(&w, "downgrade ", line, sizeof(line));
	print_message("worker: %s\n", line);
	assert_string_equal(line, "downgrade 0 held=1");

	close(w.fd_in);
	assert_int_equal(test_wait_worker(w.pid), 0);
	close(w.fd_out);
	test_rw_owner_close(&q.owner);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_proxy_stop(proxy);
	test_zk_stop(zk);
	g_free(write_node.path);
	g_free(via);
	g_free(direct);
}

static bool held_one(void *proxy)
{
	return test_proxy_held(proxy) >= 1;
}

/* Cancels a handle once the proxy holds an answer back. */
typedef struct canceller {
	test_proxy *proxy;
	dlock_lock *lock;
	int64_t canceled_ms;
} canceller;

static gpointer cancel_when_held(gpointer data)
{
	canceller *c = data;

	if (test_wait_until(held_one, c->proxy, 10000)) {
		c->canceled_ms = test_now_ms();
		dlock_lock_cancel(c->lock);
	}
	return NULL;
}

/*
 * A downgrade that gives up -- by its deadline, or a cancel from another
 * thread -- while the answer to its create is held back: it returns on
 * time, the read node the server made is deleted once answers flow, and
 * the write hold is still held.
 */
static void downgrade_gives_up(bool canceling)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, zk->servers[0].port);
	char *via = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=8s", test_proxy_port(proxy));
	dlock_client *client;
	dlock_lock *lw, *lr;
	canceller c = { 0 };
	GThread *thread = NULL;
	int64_t wait_ms = canceling ? 60000 : 300, started, took;
	int rc;

	assert_int_equal(dlock_client_new(via, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "down-give-up", &lw), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(lw, DLOCK_MODE_WRITE), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "down-give-up", &lr), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(lr, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_acquire(lw, 5000), DLOCK_OK);

	test_proxy_hold_replies_after(proxy, "multi", 0);
	if (canceling) {
		c.proxy = proxy;
		c.lock = lr;
		thread = g_thread_new("cancel", cancel_when_held, &c);
	}
	/* On this thread, which owns the write hold: a downgrade. */
	started = test_now_ms();
	rc = dlock_acquire(lr, wait_ms);
	took = test_now_ms() - (canceling ? c.canceled_ms : started);
	if (thread)
		g_thread_join(thread);
	print_message("downgrade gave up (%s) %" PRId64 " ms after %s\n", dlock_strerror(rc), took,
	              canceling ? "the cancel" : "it began");
	assert_int_equal(test_proxy_held(proxy), 1);
	assert_int_equal(rc, canceling ? DLOCK_ECANCELED : DLOCK_ETIMEDOUT);
	assert_true(took <= (canceling ? 0 : wait_ms) + test_slack(500));

	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
	/* The read node the server made goes; the write node stays. */
	assert_true(test_zk_wait_children(zk, "/dlock/down-give-up", 1, 10000));
	assert_int_equal(dlock_held(lw), 1);
	assert_int_equal(dlock_held(lr), 0);
	assert_int_equal(dlock_release(lw), DLOCK_OK);

	dlock_lock_free(lw);
	dlock_lock_free(lr);
	dlock_client_free(client);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_proxy_stop(proxy);
	test_zk_stop(zk);
	g_free(via);
}

static void test_downgrade_that_times_out_returns_on_time_and_leaves_nothing(void **state)
{
	downgrade_gives_up(false);
}

static void test_downgrade_canceled_returns_at_once_and_leaves_nothing(void **state)
{
	downgrade_gives_up(true);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_downgrade_after_its_write_hold_ended_never_shares_with_a_writer),
		cmocka_unit_test(test_downgrade_whose_first_create_landed_leaves_no_read_node_when_it_queues),
		cmocka_unit_test(test_downgrade_that_times_out_returns_on_time_and_leaves_nothing),
		cmocka_unit_test(test_downgrade_canceled_returns_at_once_and_leaves_nothing),
	};

	test_init(argv[0]);
	if (argc >= 5 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "downgrade") == 0)
		return worker_downgrade(argv[3], argv[4]);
	return test_zk_finish(cmocka_run_group_tests_name("zk-downgrade", tests, NULL, NULL));
}
