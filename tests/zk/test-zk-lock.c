/* SPDX-License-Identifier: MIT */
/*
 * The ZooKeeper lock against a real server: exclusion across processes
 * and threads, node format, ownership and reentrancy, try and deadline
 * semantics, a killed holder, no herd, handoff, and bad input.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
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

#include "dlock.h"
#include "test-exclusion.h"
#include "test-handoff.h"
#include "test-zk.h"

#define PROCESSES 3
#define THREADS 4
#define ROUNDS 10
#define HERD 20

static test_zk *zk;

/* ---- worker side ------------------------------------------------------ */

/* Acquire, say so with the token, then hang until killed. */
static int worker_hold(char **argv)
{
	dlock_client *client;
	dlock_lock *lock;

	if (dlock_client_new(argv[0], &client) != DLOCK_OK ||
	    dlock_lock_new(client, argv[1], &lock) != DLOCK_OK || dlock_acquire(lock, 10000) != DLOCK_OK)
		return 2;
	printf("held %" PRIu64 "\n", dlock_fencing_token(lock));
	fflush(stdout);
	for (;;)
		pause();
}

static int worker_main(int argc, char **argv)
{
	if (argc >= 9 && strcmp(argv[2], "counter") == 0)
		return test_exclusion_worker(argv + 3);
	if (argc >= 5 && strcmp(argv[2], "hold") == 0)
		return worker_hold(argv + 3);
	if (argc >= 6 && strcmp(argv[2], "handoff") == 0)
		return test_handoff_worker(argv[3], argv[4], atoi(argv[5]));
	return 64;
}

/* ---- helpers ---------------------------------------------------------- */

static char *uri(const char *suffix)
{
	return test_zk_uri(zk, suffix);
}

static int count_children(const char *path)
{
	return test_zk_count_children(zk, path);
}

typedef struct children_at_most {
	const char *path;
	int n;
} children_at_most;

static bool has_at_most(void *arg)
{
	children_at_most *c = arg;

	return count_children(c->path) <= c->n;
}

/* ---- tests ------------------------------------------------------------ */

static void test_processes_and_threads_never_overlap_and_tokens_increase(void **state)
{
	char *u = uri(NULL);

	test_exclusion_run(u, "excl/counter", PROCESSES, THREADS, ROUNDS);
	assert_int_equal(count_children("/dlock/excl/counter"), 0);
	g_free(u);
}

static void test_node_is_curator_format_with_holder_data_and_czxid_token(void **state)
{
	char *u = uri(NULL);
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;
	char **children;
	char *path, *data;
	int64_t czxid = 0;
	GRegex *re = g_regex_new("^_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
	                         "-lock-[0-9]{10}$", 0, 0, NULL);

	assert_int_equal(dlock_client_new(u, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "fmt/a", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	children = test_zk_children(zk, "/dlock/fmt/a");
	assert_non_null(children);
	assert_int_equal(g_strv_length(children), 1);
	assert_true(g_regex_match(re, children[0], 0, NULL));
	path = g_strconcat("/dlock/fmt/a/", children[0], NULL);
	data = test_zk_get(zk, path, &czxid);
	assert_non_null(data);
	assert_true(g_str_has_prefix(data, "dlock1:"));
	assert_int_equal(dlock_fencing_token(lock), (uint64_t)czxid);

	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_locked(info), 1);
	assert_int_equal(dlock_info_holder_pid(info), getpid());
	assert_int_equal(dlock_info_fencing_token(info), (uint64_t)czxid);
	dlock_info_free(info);

	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_false(test_zk_exists(zk, path));
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_locked(info), 0);
	dlock_info_free(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_regex_unref(re);
	g_strfreev(children);
	g_free(path);
	g_free(data);
	g_free(u);
}

static void test_reentrant_acquire_makes_no_server_call(void **state)
{
	char *u = uri(NULL);
	dlock_client *client;
	dlock_lock *lock;
	uint64_t token;
	int64_t t0;

	assert_int_equal(dlock_client_new(u, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "own/reentrant", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	token = dlock_fencing_token(lock);
	/* With the server frozen, anything that needed it would hang. */
	test_zk_signal(zk, 0, SIGSTOP);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_true(test_now_ms() - t0 < 200);
	test_zk_signal(zk, 0, SIGCONT);
	assert_int_equal(dlock_fencing_token(lock), token);
	assert_int_equal(dlock_held(lock), 1);
	assert_int_equal(count_children("/dlock/own/reentrant"), 1);
	/* three acquisitions, three releases: only the last one deletes */
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_int_equal(count_children("/dlock/own/reentrant"), 1);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_int_equal(count_children("/dlock/own/reentrant"), 0);
	assert_int_equal(dlock_release(lock), DLOCK_ENOTHELD);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(u);
}

typedef struct other_thread {
	dlock_lock *lock;
	int release_rc;
	int try_rc;
	int held;
} other_thread;

static void *other_thread_main(void *data)
{
	other_thread *t = data;

	t->held = dlock_held(t->lock);
	t->release_rc = dlock_release(t->lock);
	t->try_rc = dlock_acquire(t->lock, 0);
	return NULL;
}

static void test_other_thread_cannot_release_and_second_handle_is_same_owner(void **state)
{
	char *u = uri(NULL);
	dlock_client *client;
	dlock_lock *a, *b;
	other_thread t = { 0 };
	pthread_t th;

	assert_int_equal(dlock_client_new(u, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "own/handles", &a), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "own/handles", &b), DLOCK_OK);
	assert_int_equal(dlock_acquire(a, 10000), DLOCK_OK);
	/* Same thread, other handle: the same owner, counted locally. */
	assert_int_equal(dlock_acquire(b, 0), DLOCK_OK);
	assert_int_equal(dlock_fencing_token(b), dlock_fencing_token(a));
	assert_int_equal(count_children("/dlock/own/handles"), 1);

	/* Another thread of the same process (same session) is another owner. */
	t.lock = b;
	pthread_create(&th, NULL, other_thread_main, &t);
	pthread_join(th, NULL);
	assert_int_equal(t.held, 0);
	assert_int_equal(t.release_rc, DLOCK_ENOTHELD);
	assert_int_equal(t.try_rc, DLOCK_EBUSY);
	assert_int_equal(count_children("/dlock/own/handles"), 1);
	assert_int_equal(dlock_held(a), 1);

	assert_int_equal(dlock_release(b), DLOCK_OK);
	assert_int_equal(dlock_release(a), DLOCK_OK);
	assert_int_equal(count_children("/dlock/own/handles"), 0);
	dlock_lock_free(a);
	dlock_lock_free(b);
	dlock_client_free(client);
	g_free(u);
}

static void test_try_is_busy_and_deadline_times_out_leaving_no_node(void **state)
{
	char *u = uri(NULL);
	dlock_client *holder, *other;
	dlock_lock *h, *o;
	children_at_most one = { "/dlock/wait/busy", 1 };
	int64_t t0, took;

	assert_int_equal(dlock_client_new(u, &holder), DLOCK_OK);
	assert_int_equal(dlock_client_new(u, &other), DLOCK_OK);
	assert_int_equal(dlock_lock_new(holder, "wait/busy", &h), DLOCK_OK);
	assert_int_equal(dlock_lock_new(other, "wait/busy", &o), DLOCK_OK);
	assert_int_equal(dlock_acquire(h, 10000), DLOCK_OK);

	assert_int_equal(dlock_acquire(o, 0), DLOCK_EBUSY);
	/* a try waits for its own node's delete */
	assert_int_equal(count_children("/dlock/wait/busy"), 1);

	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(o, 300), DLOCK_ETIMEDOUT);
	took = test_now_ms() - t0;
	print_message("deadline of 300 ms returned after %" PRId64 " ms\n", took);
	assert_true(took >= 290 && took <= 300 + test_slack(200));
	assert_true(test_wait_until(has_at_most, &one, 5000));
	assert_int_equal(dlock_held(o), 0);

	assert_int_equal(dlock_release(h), DLOCK_OK);
	assert_int_equal(dlock_acquire(o, 0), DLOCK_OK);
	assert_int_equal(dlock_release(o), DLOCK_OK);
	dlock_lock_free(h);
	dlock_lock_free(o);
	dlock_client_free(holder);
	dlock_client_free(other);
	g_free(u);
}

static void test_killed_holder_is_replaced_once_its_session_expires(void **state)
{
	char *u = uri("?session-timeout=2s");
	const char *args[] = { "hold", u, "crash/a", NULL };
	dlock_client *client;
	dlock_lock *lock;
	uint64_t dead_token;
	int64_t killed_ms, waited_ms;
	char line[64];
	int fd;
	pid_t pid = test_spawn_worker(args, &fd);

	assert_true(test_read_line(fd, line, sizeof(line), 20000));
	assert_true(g_str_has_prefix(line, "held "));
	dead_token = g_ascii_strtoull(line + 5, NULL, 10);
	assert_int_equal(dlock_client_new(u, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "crash/a", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	kill(pid, SIGKILL);
	killed_ms = test_now_ms();
	test_wait_worker(pid);
	close(fd);

	assert_int_equal(dlock_acquire(lock, 20000), DLOCK_OK);
	waited_ms = test_now_ms() - killed_ms;
	print_message("acquired %" PRId64 " ms after the holder was killed\n", waited_ms);
	/* The server keeps the dead session for its timeout, and no longer. */
	assert_true(waited_ms >= 1000);
	assert_true(waited_ms <= 2000 + test_slack(2000));
	assert_true(dlock_fencing_token(lock) > dead_token);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(u);
}

typedef struct herd {
	const char *uri;
	int started;
	int acquired;
	int failures;
} herd;

static void *herd_thread(void *data)
{
	herd *h = data;
	dlock_client *client;
	dlock_lock *lock;

	if (dlock_client_new(h->uri, &client) != DLOCK_OK || dlock_lock_new(client, "herd/a", &lock) != DLOCK_OK) {
		__atomic_add_fetch(&h->failures, 1, __ATOMIC_SEQ_CST);
		return NULL;
	}
	__atomic_add_fetch(&h->started, 1, __ATOMIC_SEQ_CST);
	if (dlock_acquire(lock, 60000) == DLOCK_OK) {
		__atomic_add_fetch(&h->acquired, 1, __ATOMIC_SEQ_CST);
		g_usleep(5000);
		if (dlock_release(lock) != DLOCK_OK)
			__atomic_add_fetch(&h->failures, 1, __ATOMIC_SEQ_CST);
	} else {
		__atomic_add_fetch(&h->failures, 1, __ATOMIC_SEQ_CST);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	return NULL;
}

static bool all_queued(void *arg)
{
	(void)arg;
	return count_children("/dlock/herd/a") == HERD + 1 && test_zk_mntr(zk, 0, "zk_watch_count") == HERD;
}

static void test_each_release_wakes_exactly_one_of_twenty_waiters(void **state)
{
	char *u = uri(NULL);
	herd h = { u, 0, 0, 0 };
	pthread_t threads[HERD];
	dlock_client *client;
	dlock_lock *lock;
	long long sum0, cnt0, sum1, cnt1;

	assert_int_equal(dlock_client_new(u, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "herd/a", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	for (int i = 0; i < HERD; i++)
		pthread_create(&threads[i], NULL, herd_thread, &h);
	/* Every waiter has its node and watches exactly one node. */
	assert_true(test_wait_until(all_queued, NULL, 20000));
	sum0 = test_zk_mntr(zk, 0, "zk_sum_node_deleted_watch_count");
	cnt0 = test_zk_mntr(zk, 0, "zk_cnt_node_deleted_watch_count");
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	for (int i = 0; i < HERD; i++)
		pthread_join(threads[i], NULL);
	assert_int_equal(h.failures, 0);
	assert_int_equal(h.acquired, HERD);
	sum1 = test_zk_mntr(zk, 0, "zk_sum_node_deleted_watch_count");
	cnt1 = test_zk_mntr(zk, 0, "zk_cnt_node_deleted_watch_count");
	print_message("deletes that fired watches: %lld, watches fired: %lld\n", cnt1 - cnt0, sum1 - sum0);
	/* 20 releases had a waiter behind them (ours and 19 of theirs); each
	 * fired exactly one watch. */
	assert_int_equal(cnt1 - cnt0, HERD);
	assert_int_equal(sum1 - sum0, HERD);
	assert_int_equal(count_children("/dlock/herd/a"), 0);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(u);
}

static void test_waiter_in_another_process_is_woken_by_the_watch(void **state)
{
	char *u = uri(NULL);
	int64_t max_us;
	int64_t median_us = test_handoff_median_us(u, "handoff/a", 20, 150000, &max_us);

	print_message("handoff median %" PRId64 " us, max %" PRId64 " us\n", median_us, max_us);
	/* Nothing polls: only the watch can wake the waiter this soon. */
	assert_true(median_us < 20000);
	g_free(u);
}

static void test_unreachable_servers_give_unavailable_within_connect_timeout(void **state)
{
	int closed_fd, silent_fd;
	int closed = test_closed_port(&closed_fd), silent = test_silent_port(&silent_fd);
	int ports[2] = { closed, silent };

	for (int i = 0; i < 2; i++) {
		char *spec = g_strdup_printf("zk://127.0.0.1:%d?connect-timeout=500ms", ports[i]);
		dlock_client *client;
		dlock_lock *lock;
		int64_t t0, took;

		assert_int_equal(dlock_client_new(spec, &client), DLOCK_OK);
		assert_int_equal(dlock_lock_new(client, "down/a", &lock), DLOCK_OK);
		t0 = test_now_ms();
		assert_int_equal(dlock_acquire(lock, 10000), DLOCK_EUNAVAILABLE);
		took = test_now_ms() - t0;
		print_message("%s: unavailable after %" PRId64 " ms\n", i ? "silent" : "closed", took);
		assert_true(took >= 450 && took <= 500 + test_slack(300));
		assert_true(strstr(dlock_last_error_message(), "127.0.0.1") != NULL);
		t0 = test_now_ms();
		assert_int_equal(dlock_acquire(lock, 0), DLOCK_EUNAVAILABLE);
		assert_true(test_now_ms() - t0 <= 500 + test_slack(300));
		dlock_lock_free(lock);
		dlock_client_free(client);
		/* A wait shorter than the connect timeout ends at its deadline:
		 * a refused connection is known to be unavailable, a silent
		 * one has only not answered yet. */
		assert_int_equal(dlock_client_new(spec, &client), DLOCK_OK);
		assert_int_equal(dlock_lock_new(client, "down/a", &lock), DLOCK_OK);
		t0 = test_now_ms();
		assert_int_equal(dlock_acquire(lock, 200), i ? DLOCK_ETIMEDOUT : DLOCK_EUNAVAILABLE);
		took = test_now_ms() - t0;
		print_message("%s, wait 200 ms: %s after %" PRId64 " ms\n", i ? "silent" : "closed",
		              dlock_strerror(i ? DLOCK_ETIMEDOUT : DLOCK_EUNAVAILABLE), took);
		assert_true(took >= 190 && took <= 200 + test_slack(300));
		dlock_lock_free(lock);
		dlock_client_free(client);
		g_free(spec);
	}
	close(closed_fd);
	close(silent_fd);
}

/*
 * Waits of 1 to 20 ms on a healthy server, while another client holds the
 * resource: each ends DLOCK_ETIMEDOUT, in every mode and for a permit --
 * on a fresh client, whose session is not connected yet when the wait
 * ends, and on one whose session is -- never DLOCK_EUNAVAILABLE: the
 * server answers, the caller's time ran out.
 */
static void test_very_short_waits_on_a_healthy_server_time_out(void **state)
{
	static const struct {
		dlock_mode mode;
		uint32_t permits;
		const char *what;
	} kinds[] = {
		{ DLOCK_MODE_EXCLUSIVE, 1, "lock" },
		{ DLOCK_MODE_READ, 1, "read" },
		{ DLOCK_MODE_WRITE, 1, "write" },
		{ DLOCK_MODE_EXCLUSIVE, 2, "permit" },
	};
	static const int64_t waits[] = { 1, 2, 5, 10, 20 };
	char *u = uri(NULL);
	int unavailable = 0, other = 0, tries = 0;

	for (size_t k = 0; k < G_N_ELEMENTS(kinds); k++) {
		char *resource = g_strdup_printf("short-wait/%s", kinds[k].what);
		dlock_client *holder, *warm;
		dlock_lock *held[2] = { NULL, NULL }, *warm_lock;

		/* Held by another client: a WRITE hold keeps every mode out, two
		 * permits fill the semaphore. */
		assert_int_equal(dlock_client_new(u, &holder), DLOCK_OK);
		for (uint32_t i = 0; i < kinds[k].permits; i++) {
			assert_int_equal(dlock_lock_new(holder, resource, &held[i]), DLOCK_OK);
			assert_int_equal(dlock_lock_set_owner(held[i], DLOCK_OWNER_HANDLE), DLOCK_OK);
			if (kinds[k].permits > 1)
				assert_int_equal(dlock_lock_set_permits(held[i], kinds[k].permits), DLOCK_OK);
			else
				assert_int_equal(dlock_lock_set_mode(held[i], DLOCK_MODE_WRITE), DLOCK_OK);
			assert_int_equal(dlock_acquire(held[i], 5000), DLOCK_OK);
		}
		assert_int_equal(dlock_client_new(u, &warm), DLOCK_OK);
		assert_int_equal(dlock_lock_new(warm, resource, &warm_lock), DLOCK_OK);
		assert_int_equal(dlock_lock_set_mode(warm_lock, kinds[k].mode), DLOCK_OK);
		if (kinds[k].permits > 1)
			assert_int_equal(dlock_lock_set_permits(warm_lock, kinds[k].permits), DLOCK_OK);
		for (size_t w = 0; w < G_N_ELEMENTS(waits); w++) {
			for (int fresh = 0; fresh < 2; fresh++) {
				dlock_client *client = warm;
				dlock_lock *lock = warm_lock;
				int rc;

				if (fresh) {
					assert_int_equal(dlock_client_new(u, &client), DLOCK_OK);
					assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
					assert_int_equal(dlock_lock_set_mode(lock, kinds[k].mode), DLOCK_OK);
					if (kinds[k].permits > 1)
						assert_int_equal(dlock_lock_set_permits(lock, kinds[k].permits),
						                 DLOCK_OK);
				}
				rc = dlock_acquire(lock, waits[w]);
				tries++;
				if (rc != DLOCK_ETIMEDOUT) {
					print_message("%s, wait %" PRId64 " ms, %s client: %s (%s)\n", kinds[k].what,
					              waits[w], fresh ? "fresh" : "connected", dlock_strerror(rc),
					              dlock_last_error_message());
					if (rc == DLOCK_EUNAVAILABLE)
						unavailable++;
					else
						other++;
				}
				if (fresh) {
					dlock_lock_free(lock);
					dlock_client_free(client);
				}
			}
		}
		for (uint32_t i = 0; i < kinds[k].permits; i++) {
			assert_int_equal(dlock_release(held[i]), DLOCK_OK);
			dlock_lock_free(held[i]);
		}
		dlock_lock_free(warm_lock);
		dlock_client_free(warm);
		dlock_client_free(holder);
		g_free(resource);
	}
	print_message("%d of %d short waits gave DLOCK_EUNAVAILABLE, %d something else than a timeout\n",
	              unavailable, tries, other);
	assert_int_equal(unavailable, 0);
	assert_int_equal(other, 0);
	g_free(u);
}

static void test_bad_names_and_specs_are_refused(void **state)
{
	char *u = uri(NULL);
	char *bad_option = uri("?ttl=1s");
	char *bad_chroot = uri("/app/");
	dlock_client *client;
	dlock_lock *lock = NULL;
	const char *names[] = { "", "a//b", "a/./b", "a/x-lock-0000000001", "a/k__lock__0000000002", "{x}" };

	assert_int_equal(dlock_client_new(u, &client), DLOCK_OK);
	for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
		assert_int_equal(dlock_lock_new(client, names[i], &lock), DLOCK_EINVAL);
		assert_null(lock);
		assert_true(*dlock_last_error_message());
	}
	assert_int_equal(dlock_lock_new(client, "x-lock-0000000001", &lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);

	assert_int_equal(dlock_client_new(bad_option, &client), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "ttl"));
	assert_int_equal(dlock_client_new(bad_chroot, &client), DLOCK_ECONFIG);
	assert_int_equal(dlock_client_new("zk://", &client), DLOCK_ECONFIG);
	assert_int_equal(dlock_client_new("zk://user@127.0.0.1:1", &client), DLOCK_ECONFIG);
	assert_int_equal(dlock_client_new("zk://127.0.0.1:1?session-timeout=soon", &client), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "session-timeout"));
	g_free(u);
	g_free(bad_option);
	g_free(bad_chroot);
}

/* One acquire through spec that must fail with code, its message naming
 * word and never the password. */
static void assert_acquire_refused(const char *spec, int code, const char *word)
{
	dlock_client *client;
	dlock_lock *lock;
	int rc;

	assert_int_equal(dlock_client_new(spec, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "refused/x", &lock), DLOCK_OK);
	rc = dlock_acquire(lock, 5000);
	print_message("%s: %s\n", dlock_code_name(rc), dlock_last_error_message());
	if (rc != code)
		fail_msg("%s instead of %s", dlock_code_name(rc), dlock_code_name(code));
	assert_non_null(strstr(dlock_last_error_message(), word));
	assert_null(strstr(dlock_last_error_message(), "pw-not-shown"));
	assert_false(dlock_held(lock));
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/*
 * What the servers refuse is said as what it is: a chroot that does not
 * exist is a configuration error (exit 78), credentials refused -- by the
 * ACL of a resource another password made, or by servers that do not
 * accept digest authentication at all -- a permission error (exit 77),
 * never "unavailable".
 */
static void test_missing_chroot_is_econfig_and_refused_credentials_eacces(void **state)
{
	char *missing = uri("/no-such-chroot");
	char *hosts = test_zk_hosts(zk);
	char *owner = g_strdup_printf("zk://dana:right-pw@%s", hosts);
	char *other = g_strdup_printf("zk://dana:pw-not-shown@%s", hosts);
	dlock_client *client;
	dlock_lock *lock;
	test_zk *strict;
	char *strict_uri;

	assert_acquire_refused(missing, DLOCK_ECONFIG, "/no-such-chroot");

	/* dana's lock, with her password; the same name with another. */
	assert_int_equal(dlock_client_new(owner, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "refused/x", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	assert_acquire_refused(other, DLOCK_EACCES, "ACL");
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);

	/* Servers that refuse digest authentication end the session. */
	g_setenv("JAVA_TOOL_OPTIONS", "-Dzookeeper.DigestAuthenticationProvider.enabled=false", TRUE);
	strict = test_zk_start(1, 200, 20000);
	g_unsetenv("JAVA_TOOL_OPTIONS");
	g_free(hosts);
	hosts = test_zk_hosts(strict);
	strict_uri = g_strdup_printf("zk://dana:pw-not-shown@%s", hosts);
	assert_acquire_refused(strict_uri, DLOCK_EACCES, "refused the credentials");
	test_zk_stop(strict);

	g_free(strict_uri);
	g_free(missing);
	g_free(hosts);
	g_free(owner);
	g_free(other);
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
		cmocka_unit_test(test_processes_and_threads_never_overlap_and_tokens_increase),
		cmocka_unit_test(test_node_is_curator_format_with_holder_data_and_czxid_token),
		cmocka_unit_test(test_reentrant_acquire_makes_no_server_call),
		cmocka_unit_test(test_other_thread_cannot_release_and_second_handle_is_same_owner),
		cmocka_unit_test(test_try_is_busy_and_deadline_times_out_leaving_no_node),
		cmocka_unit_test(test_killed_holder_is_replaced_once_its_session_expires),
		cmocka_unit_test(test_each_release_wakes_exactly_one_of_twenty_waiters),
		cmocka_unit_test(test_waiter_in_another_process_is_woken_by_the_watch),
		cmocka_unit_test(test_unreachable_servers_give_unavailable_within_connect_timeout),
		cmocka_unit_test(test_very_short_waits_on_a_healthy_server_time_out),
		cmocka_unit_test(test_bad_names_and_specs_are_refused),
		cmocka_unit_test(test_missing_chroot_is_econfig_and_refused_credentials_eacces),
		cmocka_unit_test(test_no_lock_node_of_this_suite_remains),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return worker_main(argc, argv);
	return test_zk_finish(cmocka_run_group_tests_name("zk-lock", tests, setup, teardown));
}
