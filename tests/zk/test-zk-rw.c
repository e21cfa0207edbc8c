/* SPDX-License-Identifier: MIT */
/*
 * Read-write locks on ZooKeeper against a real server: readers share,
 * writers and mutex holders exclude, arrival order (a reader behind a
 * queued writer waits), downgrade and upgrade, fencing tokens across
 * modes, LOST for a reader, a peer's write-class node keeping a mutex
 * out, and nothing left behind.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-events.h"
#include "test-rw.h"
#include "test-zk.h"

static test_zk *zk;

/* ---- helpers ---------------------------------------------------------- */

typedef test_rw_owner handle;

/* A handle in mode on its own client (its own session), owned by the
 * handle so that a thread may acquire it and the test release it. */
static handle open_handle(test_zk *z, const char *resource, dlock_mode mode)
{
	char *u = test_zk_uri(z, "?session-timeout=2s");
	handle h;

	test_rw_owner_open(&h, u, resource, mode);
	assert_int_equal(dlock_lock_set_owner(h.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	g_free(u);
	return h;
}

static void close_handle(handle *h)
{
	test_rw_owner_close(h);
}

/* Start w's acquire in mode on a thread and client of its own, and wait
 * until its node is there: the resource then has n children. */
static void queue_up(test_rw_waiter *w, const char *resource, dlock_mode mode, int n)
{
	char *u = test_zk_uri(zk, NULL);
	char *path = g_strconcat("/dlock/", resource, NULL);

	test_rw_waiter_start(w, u, resource, mode, 30000);
	assert_true(test_zk_wait_children(zk, path, n, 10000));
	assert_false(test_rw_waiter_done(w));
	g_free(path);
	g_free(u);
}

static int queued_join(test_rw_waiter *w)
{
	test_rw_waiter_join(w);
	return w->rc;
}

/* The sequence number of a lock node's name, as text. */
static const char *seq_of(const char *name)
{
	return name + strlen(name) - 10;
}

/* ---- tests ------------------------------------------------------------ */

/* Readers share; writers and mutex holders exclude every hold, readers
 * exclude them; tokens grow across modes; the query lists every reader
 * (the checks every backend passes, test-rw.h). */
static void test_readers_share_writers_exclude(void **state)
{
	char *u = test_zk_uri(zk, NULL);

	test_rw_share_and_exclude(u, "rw/share");
	g_free(u);
}

/*
 * Arrival order: a writer queues behind a reader, and a reader arriving
 * after that writer waits behind it (a try is busy, an acquire gets in
 * only after the writer had its turn): writers do not starve.
 */
static void test_reader_after_a_queued_writer_waits_behind_it(void **state)
{
	handle r1 = open_handle(zk, "rw/fair", DLOCK_MODE_READ);
	handle r2 = open_handle(zk, "rw/fair", DLOCK_MODE_READ);
	test_rw_waiter qw, qr;

	assert_int_equal(dlock_acquire(r1.lock, 0), DLOCK_OK);
	queue_up(&qw, "rw/fair", DLOCK_MODE_WRITE, 2);
	assert_int_equal(dlock_acquire(r2.lock, 0), DLOCK_EBUSY);
	queue_up(&qr, "rw/fair", DLOCK_MODE_READ, 3);

	assert_int_equal(dlock_release(r1.lock), DLOCK_OK);
	assert_int_equal(queued_join(&qw), DLOCK_OK);
	assert_false(test_poll_window(test_rw_waiter_done, &qr, 300)); /* behind the writer */
	assert_int_equal(dlock_release(qw.owner.lock), DLOCK_OK);
	assert_int_equal(queued_join(&qr), DLOCK_OK);
	assert_int_equal(dlock_release(qr.owner.lock), DLOCK_OK);
	close_handle(&r1);
	close_handle(&r2);
	close_handle(&qw.owner);
	close_handle(&qr.owner);
}

/*
 * A release lets in what stands at the head, in arrival order: the
 * readers queued behind a writer all at once, up to the next writer,
 * which gets in once they are gone; the reader behind it after that.
 */
static void test_release_lets_in_the_readers_up_to_the_next_writer(void **state)
{
	handle w = open_handle(zk, "rw/head", DLOCK_MODE_WRITE);
	test_rw_waiter q[4]; /* reader, reader, writer, reader */
	const dlock_mode modes[] = { DLOCK_MODE_READ, DLOCK_MODE_READ, DLOCK_MODE_WRITE,
	                             DLOCK_MODE_READ };

	assert_int_equal(dlock_acquire(w.lock, 0), DLOCK_OK);
	for (int i = 0; i < 4; i++)
		queue_up(&q[i], "rw/head", modes[i], i + 2);

	assert_int_equal(dlock_release(w.lock), DLOCK_OK);
	assert_int_equal(queued_join(&q[0]), DLOCK_OK);
	assert_int_equal(queued_join(&q[1]), DLOCK_OK);
	assert_false(test_poll_window(test_rw_waiter_done, &q[2], 300));
	assert_false(test_rw_waiter_done(&q[3]));

	assert_int_equal(dlock_release(q[0].owner.lock), DLOCK_OK);
	assert_false(test_poll_window(test_rw_waiter_done, &q[2], 200));
	assert_int_equal(dlock_release(q[1].owner.lock), DLOCK_OK);
	assert_int_equal(queued_join(&q[2]), DLOCK_OK);
	assert_false(test_poll_window(test_rw_waiter_done, &q[3], 300));
	assert_int_equal(dlock_release(q[2].owner.lock), DLOCK_OK);
	assert_int_equal(queued_join(&q[3]), DLOCK_OK);
	assert_int_equal(dlock_release(q[3].owner.lock), DLOCK_OK);
	close_handle(&w);
	for (int i = 0; i < 4; i++)
		close_handle(&q[i].owner);
}

/* A reader that gives up waiting behind a writer leaves no node behind,
 * and the writer's release then frees the resource. */
static void test_reader_that_times_out_leaves_nothing(void **state)
{
	handle w = open_handle(zk, "rw/timeout", DLOCK_MODE_WRITE);
	handle r = open_handle(zk, "rw/timeout", DLOCK_MODE_READ);

	assert_int_equal(dlock_acquire(w.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(r.lock, 300), DLOCK_ETIMEDOUT);
	assert_true(test_zk_wait_children(zk, "/dlock/rw/timeout", 1, 10000));
	assert_int_equal(dlock_release(w.lock), DLOCK_OK);
	assert_int_equal(test_zk_count_children(zk, "/dlock/rw/timeout"), 0);
	close_handle(&w);
	close_handle(&r);
}

/*
 * Downgrade: the owner of a WRITE (or EXCLUSIVE) hold takes READ at once,
 * beside its write node with the same sequence number; a writer queued
 * meanwhile stays out when the write hold goes, and gets in only once the
 * read hold goes too.
 */
static void downgrade_keeps_the_read_hold(const char *resource, dlock_mode write_mode)
{
	char *path = g_strconcat("/dlock/", resource, NULL);
	char *u = test_zk_uri(zk, NULL);
	dlock_client *owner;
	dlock_lock *lw, *lr;
	test_rw_waiter q;
	char **children;
	uint64_t write_token;

	assert_int_equal(dlock_client_new(u, &owner), DLOCK_OK);
	assert_int_equal(dlock_lock_new(owner, resource, &lw), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(lw, write_mode), DLOCK_OK);
	assert_int_equal(dlock_lock_new(owner, resource, &lr), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(lr, DLOCK_MODE_READ), DLOCK_OK);

	assert_int_equal(dlock_acquire(lw, 0), DLOCK_OK);
	write_token = dlock_fencing_token(lw);
	queue_up(&q, resource, DLOCK_MODE_WRITE, 2);
	assert_int_equal(dlock_acquire(lr, 0), DLOCK_OK); /* at once, though a writer waits */
	/* It continues the write hold, with its token (see downgrade.c). */
	assert_true(dlock_fencing_token(lr) == write_token);

	/* Beside the write node: the same number, Curator 5.5's name. */
	children = test_zk_children(zk, path);
	assert_int_equal(g_strv_length(children), 3);
	{
		const char *wn = NULL, *rn = NULL;

		for (size_t i = 0; children[i]; i++) {
			if (strstr(children[i], "__READ__"))
				rn = children[i];
			else if (!wn || strcmp(seq_of(children[i]), seq_of(wn)) < 0)
				wn = children[i]; /* ours, the earlier of the two writers */
		}
		assert_non_null(rn);
		assert_non_null(wn);
		assert_string_equal(seq_of(rn), seq_of(wn));
	}
	g_strfreev(children);

	assert_int_equal(dlock_release(lw), DLOCK_OK);
	assert_int_equal(dlock_held(lr), 1);
	assert_false(test_poll_window(test_rw_waiter_done, &q, 500)); /* the queued writer stays out */
	assert_int_equal(dlock_release(lr), DLOCK_OK);
	assert_int_equal(queued_join(&q), DLOCK_OK);
	assert_int_equal(dlock_release(q.owner.lock), DLOCK_OK);

	dlock_lock_free(lw);
	dlock_lock_free(lr);
	dlock_client_free(owner);
	close_handle(&q.owner);
	g_free(u);
	g_free(path);
}

/*
 * Token order across a downgrade: a writer that queued while the write
 * hold held is granted after the downgrade's read hold ended, so its
 * token must be larger than the read hold's -- although its node, whose
 * czxid it gets, was made before the read node.
 */
static void test_writer_granted_after_a_downgrade_gets_a_larger_token(void **state)
{
	char *u = test_zk_uri(zk, NULL);
	dlock_client *owner;
	dlock_lock *lw, *lr;
	test_rw_waiter q;
	uint64_t write_token, read_token, queued_token;

	assert_int_equal(dlock_client_new(u, &owner), DLOCK_OK);
	assert_int_equal(dlock_lock_new(owner, "rw/down-order", &lw), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(lw, DLOCK_MODE_WRITE), DLOCK_OK);
	assert_int_equal(dlock_lock_new(owner, "rw/down-order", &lr), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(lr, DLOCK_MODE_READ), DLOCK_OK);

	assert_int_equal(dlock_acquire(lw, 0), DLOCK_OK);
	write_token = dlock_fencing_token(lw);
	queue_up(&q, "rw/down-order", DLOCK_MODE_WRITE, 2);
	assert_int_equal(dlock_acquire(lr, 0), DLOCK_OK);
	read_token = dlock_fencing_token(lr);
	assert_int_equal(dlock_release(lw), DLOCK_OK);
	assert_int_equal(dlock_release(lr), DLOCK_OK);
	assert_int_equal(queued_join(&q), DLOCK_OK);
	queued_token = dlock_fencing_token(q.owner.lock);
	print_message("write %" PRIu64 ", its downgrade's read %" PRIu64 ", the writer queued meanwhile %"
	              PRIu64 "\n", write_token, read_token, queued_token);
	assert_true(read_token >= write_token);
	assert_true(queued_token > read_token);
	assert_int_equal(dlock_release(q.owner.lock), DLOCK_OK);

	dlock_lock_free(lw);
	dlock_lock_free(lr);
	dlock_client_free(owner);
	close_handle(&q.owner);
	g_free(u);
}

static void test_downgrade_from_write_lets_no_queued_writer_in(void **state)
{
	downgrade_keeps_the_read_hold("rw/down-write", DLOCK_MODE_WRITE);
}

static void test_downgrade_from_exclusive_lets_no_queued_writer_in(void **state)
{
	downgrade_keeps_the_read_hold("rw/down-excl", DLOCK_MODE_EXCLUSIVE);
}

/* The check every backend runs, in its fair form: a reader arriving after
 * the downgrade waits behind the queued writer. */
static void test_downgrade_shared_check(void **state)
{
	char *u = test_zk_uri(zk, NULL);

	test_rw_downgrade(u, "rw/down-shared", true);
	g_free(u);
}

/* An upgrade fails at once with DLOCK_EDEADLK; the read hold stays. */
static void test_upgrade_fails_at_once(void **state)
{
	char *u = test_zk_uri(zk, NULL);

	test_rw_upgrade_refused(u, "rw/upgrade");
	g_free(u);
}

/*
 * A peer's write-class node that dlock's mutex did not count before:
 * Curator's InterProcessReadWriteLock writer "_c_<uuid>-__WRIT__<seq>".
 * Every child ending in a sequence number is a contender, so a mutex
 * (and a reader) waits while it is there.
 */
static void test_peer_writer_node_keeps_a_mutex_out(void **state)
{
	const char *peer = "/dlock/rw/peer/_c_6f1c2a4e-8f0b-4d7e-9a51-3b2c1d0e9f87-__WRIT__0000000000";
	handle x = open_handle(zk, "rw/peer", DLOCK_MODE_EXCLUSIVE);
	handle r = open_handle(zk, "rw/peer", DLOCK_MODE_READ);

	test_zk_create(zk, "/dlock", NULL);
	test_zk_create(zk, "/dlock/rw", NULL);
	test_zk_create(zk, "/dlock/rw/peer", NULL);
	assert_int_equal(test_zk_create(zk, peer, "peer"), 0);
	assert_int_equal(dlock_acquire(x.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_acquire(r.lock, 0), DLOCK_EBUSY);
	assert_int_equal(test_zk_delete(zk, peer), 0);
	assert_int_equal(dlock_acquire(x.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(x.lock), DLOCK_OK);
	close_handle(&x);
	close_handle(&r);
}

static bool has_lost(void *arg)
{
	return test_events_first_at(arg, DLOCK_STATE_LOST) >= 0;
}

/*
 * READ holds whose sessions end (the server frozen past the session
 * timeout) are reported LOST, each of them, and their releases say
 * DLOCK_ELOST; a new session then reads again.
 */
static void test_reader_reports_lost_when_its_session_ends(void **state)
{
	test_zk *z = test_zk_start(1, 200, 20000);
	handle r1 = open_handle(z, "rw/lost", DLOCK_MODE_READ);
	handle r2 = open_handle(z, "rw/lost", DLOCK_MODE_READ);
	test_events e1, e2;

	test_events_init(&e1);
	test_events_init(&e2);
	assert_int_equal(dlock_lock_set_state_callback(r1.lock, test_events_record, &e1), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(r2.lock, test_events_record, &e2), DLOCK_OK);
	assert_int_equal(dlock_acquire(r1.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(r2.lock, 0), DLOCK_OK);

	test_zk_signal(z, 0, SIGSTOP);
	assert_true(test_wait_until(has_lost, &e1, 15000));
	assert_true(test_wait_until(has_lost, &e2, 15000));
	test_zk_signal(z, 0, SIGCONT);
	assert_int_equal(dlock_held(r1.lock), 0);
	assert_int_equal(dlock_release(r1.lock), DLOCK_ELOST);
	assert_int_equal(dlock_release(r2.lock), DLOCK_ELOST);
	/* and a new session reads again */
	assert_int_equal(dlock_acquire(r1.lock, 20000), DLOCK_OK);
	assert_int_equal(dlock_release(r1.lock), DLOCK_OK);
	close_handle(&r1);
	close_handle(&r2);
	test_events_clear(&e1);
	test_events_clear(&e2);
	/* the server expires the frozen sessions once it runs again */
	assert_true(test_zk_wait_children(z, "/dlock/rw/lost", 0, 20000));
	assert_int_equal(test_zk_leftover_nodes(z, "/dlock"), 0);
	test_zk_stop(z);
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
		cmocka_unit_test(test_peer_writer_node_keeps_a_mutex_out),
		cmocka_unit_test(test_readers_share_writers_exclude),
		cmocka_unit_test(test_reader_after_a_queued_writer_waits_behind_it),
		cmocka_unit_test(test_release_lets_in_the_readers_up_to_the_next_writer),
		cmocka_unit_test(test_reader_that_times_out_leaves_nothing),
		cmocka_unit_test(test_downgrade_from_write_lets_no_queued_writer_in),
		cmocka_unit_test(test_downgrade_from_exclusive_lets_no_queued_writer_in),
		cmocka_unit_test(test_writer_granted_after_a_downgrade_gets_a_larger_token),
		cmocka_unit_test(test_downgrade_shared_check),
		cmocka_unit_test(test_upgrade_fails_at_once),
		cmocka_unit_test(test_reader_reports_lost_when_its_session_ends),
		cmocka_unit_test(test_no_lock_node_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_zk_finish(cmocka_run_group_tests_name("zk-rw", tests, setup, teardown));
}
