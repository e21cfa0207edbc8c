/* SPDX-License-Identifier: MIT */
/*
 * Redlock (docs/redis.md, "Redlock"): a URI with several hosts locks N
 * independent masters by quorum.  Holding, releasing, fencing tokens and
 * exclusion with every master up, on 3 and 5 masters, and the input
 * Redlock refuses.  Faults (masters killed, frozen, emptied, keys deleted)
 * are in test-redis-redlock-faults.c.
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
#include "test-election.h"
#include "test-exclusion.h"
#include "test-redlock.h"

/* The suite's five masters. */
#define rl test_redlock_suite

typedef test_redlock_handle handle;

/* ---- holding and releasing -------------------------------------------- */

/* The lock key on a quorum of the first `masters` masters carries our
 * owner token (pid and thread of the holder) while held, and is gone from
 * every master after the release. */
static void check_hold_keys(int masters, const char *resource)
{
	char *key = g_strdup_printf("dlock:{%s}", resource);
	char *mine = g_strdup_printf(":%d:%d:", (int)getpid(), (int)gettid());
	handle h;
	char *value;

	test_redlock_open(rl, &h, masters, NULL, resource);
	assert_int_equal(dlock_acquire(h.lock, 5000), DLOCK_OK);
	assert_true(dlock_held(h.lock));
	assert_true(test_redlock_count_key(rl, key, &value) >= masters / 2 + 1);
	assert_true(g_str_has_prefix(value, "dlock1:"));
	assert_non_null(strstr(value, mine));
	g_free(value);
	assert_int_equal(dlock_release(h.lock), DLOCK_OK);
	assert_false(dlock_held(h.lock));
	assert_int_equal(test_redlock_count_key(rl, key, NULL), 0);
	test_redlock_close(&h);
	g_free(mine);
	g_free(key);
}

/* Two clients take turns: each holder's token is larger than the last. */
static void check_tokens_increase(int masters, const char *resource)
{
	handle a, b;
	uint64_t last = 0;

	test_redlock_open(rl, &a, masters, NULL, resource);
	test_redlock_open(rl, &b, masters, NULL, resource);
	for (int i = 0; i < 10; i++) {
		handle *h = i % 3 ? &a : &b;

		assert_int_equal(dlock_acquire(h->lock, 5000), DLOCK_OK);
		if (dlock_fencing_token(h->lock) <= last)
			fail_msg("holder %d got token %" PRIu64 " after %" PRIu64, i, dlock_fencing_token(h->lock),
			         last);
		last = dlock_fencing_token(h->lock);
		/* Held by one client: the other one cannot have it. */
		assert_int_equal(dlock_acquire((h == &a ? &b : &a)->lock, 0), DLOCK_EBUSY);
		assert_int_equal(dlock_release(h->lock), DLOCK_OK);
	}
	test_redlock_close(&a);
	test_redlock_close(&b);
}

/* SET the fencing counter of resource to value on the first n masters. */
static void set_counters(int n, const char *resource, const char *value)
{
	for (int i = 0; i < n; i++)
		freeReplyObject(test_redis_cmd(rl->masters[i], "SET dlock:{%s}:fence %s", resource, value));
}

/*
 * The token is the largest counter + 1, the counters read through Lua's
 * numbers (doubles): near 2^53 a counter rounds down, and the token
 * repeats one handed out; past 2^63 it came out as 1.  Such a counter
 * (only a hand puts it there) is refused, naming it, and leaves no key.
 */
static void test_a_counter_past_exact_tokens_is_refused_never_repeated(void **state)
{
	static const char *const beyond[] = { "9007199253692416", "9007199254740993",
	                                      "20000000000000000000" };
	const char *resource = "rl/exhausted";
	char *key = g_strdup_printf("dlock:{%s}", resource);
	handle h;

	test_redlock_open(rl, &h, 3, NULL, resource);
	set_counters(3, resource, "9007199253692415");
	assert_int_equal(dlock_acquire(h.lock, 2000), DLOCK_OK);
	assert_int_equal(dlock_fencing_token(h.lock), UINT64_C(9007199253692416));
	assert_int_equal(dlock_release(h.lock), DLOCK_OK);
	for (size_t i = 0; i < G_N_ELEMENTS(beyond); i++) {
		int rc;

		set_counters(3, resource, beyond[i]);
		rc = dlock_acquire(h.lock, 0);
		print_message("counter %s: %s, token %" PRIu64 ": %s\n", beyond[i], dlock_code_name(rc),
		              rc == DLOCK_OK ? dlock_fencing_token(h.lock) : 0, dlock_last_error_message());
		if (rc == DLOCK_OK)
			assert_int_equal(dlock_release(h.lock), DLOCK_OK);
		assert_int_equal(rc, DLOCK_EBACKEND);
		assert_non_null(strstr(dlock_last_error_message(), "fencing counter"));
		assert_int_equal(test_redlock_count_key(rl, key, NULL), 0);
	}
	for (int i = 0; i < 3; i++)
		freeReplyObject(test_redis_cmd(rl->masters[i], "DEL dlock:{%s}:fence", resource));
	test_redlock_close(&h);
	g_free(key);
}

/* Scripts run on master i since its statistics were reset (EVALSHA and
 * EVAL, which a master without the script cached gets). */
static long long calls_of(const char *info, const char *command)
{
	char *name = g_strdup_printf("cmdstat_%s:calls=", command);
	const char *at = strstr(info, name);
	long long n = at ? g_ascii_strtoll(at + strlen(name), NULL, 10) : 0;

	g_free(name);
	return n;
}

static long long scripts_run(int i)
{
	redisReply *r = test_redis_cmd(rl->masters[i], "INFO commandstats");
	long long n = calls_of(r->str, "evalsha") + calls_of(r->str, "eval");

	freeReplyObject(r);
	return n;
}

/*
 * The holds of a client are renewed together: one script per master for
 * every hold due, not one per hold.  8 holds with a 900 ms TTL (renewed
 * every 300 ms) for 2.4 s: about 8 renewals each, 64 scripts one by one,
 * about 8 together -- and every hold is still held, its key's expiry
 * pushed back on every master.
 */
static void test_the_holds_of_a_client_are_renewed_in_one_round(void **state)
{
	char *uri = test_redlock_uri(rl, 3, "?ttl=900ms");
	dlock_lock *locks[8];
	dlock_client *client;
	long long runs[3];

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	for (int i = 0; i < 8; i++) {
		char *resource = g_strdup_printf("rl/batch-%d", i);

		assert_int_equal(dlock_lock_new(client, resource, &locks[i]), DLOCK_OK);
		assert_int_equal(dlock_acquire(locks[i], 5000), DLOCK_OK);
		g_free(resource);
	}
	for (int m = 0; m < 3; m++)
		freeReplyObject(test_redis_cmd(rl->masters[m], "CONFIG RESETSTAT"));
	g_usleep(2400 * 1000);
	for (int m = 0; m < 3; m++) {
		runs[m] = scripts_run(m);
		print_message("master %d: %lld scripts\n", m, runs[m]);
	}
	for (int i = 0; i < 8; i++) {
		char *key = g_strdup_printf("dlock:{rl/batch-%d}", i);

		assert_true(dlock_held(locks[i]));
		for (int m = 0; m < 3; m++) {
			redisReply *r = test_redis_cmd(rl->masters[m], "PTTL %s", key);

			/* Renewed within the last period (300 ms, and slack). */
			if (r->integer < 400)
				fail_msg("%s on master %d expires in %lld ms", key, m, r->integer);
			freeReplyObject(r);
		}
		g_free(key);
	}
	for (int m = 0; m < 3; m++)
		if (runs[m] < 6 || runs[m] > 20)
			fail_msg("master %d ran %lld scripts in 2.4 s for 8 holds renewed every 300 ms", m, runs[m]);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(dlock_release(locks[i]), DLOCK_OK);
		dlock_lock_free(locks[i]);
	}
	dlock_client_free(client);
	g_free(uri);
}

static void test_three_masters_hold_on_a_quorum_and_release_everywhere(void **state)
{
	check_hold_keys(3, "rl/keys3");
}

static void test_three_masters_tokens_increase_across_holders_and_clients(void **state)
{
	check_tokens_increase(3, "rl/tokens3");
}

static void test_five_masters_hold_on_a_quorum_and_release_everywhere(void **state)
{
	check_hold_keys(5, "rl/keys5");
}

static void test_five_masters_tokens_increase_across_holders_and_clients(void **state)
{
	check_tokens_increase(5, "rl/tokens5");
}

/* What a query sees: the holder the quorum records, and free after the
 * release, also with one master down. */
static void expect_query(handle *h, int locked)
{
	dlock_info *info;

	if (dlock_lock_query(h->lock, &info) != DLOCK_OK)
		fail_msg("query: %s", dlock_last_error_message());
	assert_int_equal(dlock_info_locked(info), locked);
	if (locked) {
		assert_int_equal(dlock_info_mode(info), DLOCK_HELD_EXCLUSIVE);
		assert_int_equal(dlock_info_holder_pid(info), getpid());
		assert_int_equal(dlock_info_hold(info), DLOCK_HOLD_HELD);
		assert_true(dlock_info_expires_in_ms(info) > 0 && dlock_info_expires_in_ms(info) <= 30000);
		assert_true(dlock_info_fencing_token(info) >= dlock_fencing_token(h->lock));
	} else {
		assert_int_equal(dlock_info_mode(info), DLOCK_HELD_FREE);
		assert_int_equal(dlock_info_holders(info), 0);
	}
	dlock_info_free(info);
}

static void test_query_shows_the_quorums_holder(void **state)
{
	handle h;

	test_redlock_open(rl, &h, 3, NULL, "rl/query");
	expect_query(&h, 0);
	assert_int_equal(dlock_acquire(h.lock, 5000), DLOCK_OK);
	expect_query(&h, 1);
	test_redis_halt(rl->masters[2]);
	expect_query(&h, 1);
	assert_int_equal(dlock_release(h.lock), DLOCK_OK);
	expect_query(&h, 0);
	test_redis_resume(rl->masters[2]);
	test_redlock_close(&h);
}

/* ---- exclusion -------------------------------------------------------- */

static void test_processes_and_threads_never_overlap_and_tokens_increase(void **state)
{
	char *uri = test_redlock_uri(rl, 3, NULL);

	test_exclusion_run(uri, "rl/counter", 3, 3, 10);
	assert_int_equal(test_redlock_count_key(rl, "dlock:{rl/counter}", NULL), 0);
	g_free(uri);
}

static void test_five_masters_processes_and_threads_never_overlap(void **state)
{
	char *uri = test_redlock_uri(rl, 5, NULL);

	test_exclusion_run(uri, "rl/counter5", 2, 2, 10);
	assert_int_equal(test_redlock_count_key(rl, "dlock:{rl/counter5}", NULL), 0);
	g_free(uri);
}

#define RACE_ROUNDS 200

typedef struct race {
	int inside;       /* atomic: holders right now */
	int overlaps;     /* atomic */
	int failures;     /* atomic */
	int done;         /* atomic: acquires that succeeded */
} race;

static void *race_thread(void *data)
{
	race *r = data;
	char *uri = test_redlock_uri(rl, 3, NULL);
	dlock_client *client;
	dlock_lock *lock;

	/* No cmocka assertion off the test's thread: count failures. */
	if (dlock_client_new(uri, &client) != DLOCK_OK || dlock_lock_new(client, "rl/race", &lock) != DLOCK_OK) {
		__atomic_add_fetch(&r->failures, 1, __ATOMIC_SEQ_CST);
		g_free(uri);
		return NULL;
	}
	for (int i = 0; i < RACE_ROUNDS; i++) {
		if (dlock_acquire(lock, 10000) != DLOCK_OK) {
			__atomic_add_fetch(&r->failures, 1, __ATOMIC_SEQ_CST);
			continue;
		}
		if (__atomic_add_fetch(&r->inside, 1, __ATOMIC_SEQ_CST) != 1)
			__atomic_add_fetch(&r->overlaps, 1, __ATOMIC_SEQ_CST);
		g_usleep(100);
		__atomic_sub_fetch(&r->inside, 1, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&r->done, 1, __ATOMIC_SEQ_CST);
		if (dlock_release(lock) != DLOCK_OK)
			__atomic_add_fetch(&r->failures, 1, __ATOMIC_SEQ_CST);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
	return NULL;
}

static void test_two_clients_racing_never_both_hold_and_always_get_it(void **state)
{
	race r = { 0 };
	GThread *a = g_thread_new("racer-a", race_thread, &r);
	GThread *b = g_thread_new("racer-b", race_thread, &r);

	g_thread_join(a);
	g_thread_join(b);
	assert_int_equal(r.overlaps, 0);
	assert_int_equal(r.failures, 0);
	assert_int_equal(r.done, 2 * RACE_ROUNDS);
}

/* ---- waking a waiter -------------------------------------------------- */

typedef struct waiter {
	dlock_lock *lock;
	int rc;
	int64_t returned_ms;
} waiter;

static void *wait_thread(void *data)
{
	waiter *w = data;

	w->rc = dlock_acquire(w->lock, 10000);
	w->returned_ms = test_now_ms();
	if (w->rc == DLOCK_OK)
		dlock_release(w->lock);
	return NULL;
}

static void test_waiter_is_woken_by_the_release(void **state)
{
	/* A 30 s lease: only the release (or the 1 s backoff cap) can end
	 * B's wait; well under the cap shows the release message woke it. */
	handle a, b;
	waiter w = { 0 };
	GThread *t;
	int64_t released_ms;

	test_redlock_open(rl, &a, 3, "?ttl=30s", "rl/wake");
	test_redlock_open(rl, &b, 3, "?ttl=30s", "rl/wake");
	assert_int_equal(dlock_acquire(a.lock, 5000), DLOCK_OK);
	w.lock = b.lock;
	t = g_thread_new("waiter", wait_thread, &w);
	/* Let B try, find it held, subscribe and go to sleep. */
	g_usleep(300000);
	released_ms = test_now_ms();
	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	g_thread_join(t);
	assert_int_equal(w.rc, DLOCK_OK);
	print_message("waiter got the lock %" PRId64 " ms after the release\n", w.returned_ms - released_ms);
	assert_true(w.returned_ms - released_ms < 300 + test_slack(200));
	test_redlock_close(&a);
	test_redlock_close(&b);
}

/* ---- refused input ---------------------------------------------------- */

static void test_read_and_write_modes_are_refused_naming_redlock(void **state)
{
	dlock_mode modes[] = { DLOCK_MODE_READ, DLOCK_MODE_WRITE };

	for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) {
		handle h;
		int rc;
		char *message;

		test_redlock_open(rl, &h, 3, NULL, "rl/mode");
		rc = dlock_lock_set_mode(h.lock, modes[i]);
		if (rc == DLOCK_OK)
			rc = dlock_acquire(h.lock, 1000);
		assert_int_equal(rc, DLOCK_EINVAL);
		message = g_ascii_strdown(dlock_last_error_message(), -1);
		print_message("mode %d: %s\n", (int)modes[i], message);
		assert_true(strstr(message, "redlock") || strstr(message, "exclusive"));
		g_free(message);
		assert_false(dlock_held(h.lock));
		test_redlock_close(&h);
	}
	assert_int_equal(test_redlock_count_key(rl, "dlock:{rl/mode}", NULL), 0);
}

static void expect_config_error(const char *uri)
{
	dlock_client *client = NULL;
	int rc = dlock_client_new(uri, &client);

	if (rc != DLOCK_ECONFIG)
		fail_msg("dlock_client_new(%s) returned %s, not DLOCK_ECONFIG", uri, dlock_code_name(rc));
	assert_null(client);
}

static void test_bad_master_timeout_is_a_config_error(void **state)
{
	const char *bad[] = { "?master-timeout=0", "?master-timeout=0ms", "?master-timeout=garbage",
	                      "?master-timeout=-5ms", "?master-timeout=" };

	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		char *uri = test_redlock_uri(rl, 3, bad[i]);

		expect_config_error(uri);
		g_free(uri);
	}
}

static void test_master_timeout_on_one_host_is_a_config_error(void **state)
{
	char *uri = test_redlock_uri(rl, 1, "?master-timeout=200ms");
	char *good = test_redlock_uri(rl, 3, "?master-timeout=200ms");
	dlock_client *client;

	expect_config_error(uri);
	/* The same option with several masters is accepted. */
	assert_int_equal(dlock_client_new(good, &client), DLOCK_OK);
	dlock_client_free(client);
	g_free(good);
	g_free(uri);
}

/* One server named twice counts twice toward the quorum: refused when
 * the client is made, whatever the spelling of the same host and port. */
static void test_a_master_named_twice_is_refused_at_creation(void **state)
{
	int p0 = rl->masters[0]->port, p1 = rl->masters[1]->port;
	char *uris[] = {
		g_strdup_printf("redis://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", p0, p1, p0),
		g_strdup_printf("redis://LocalHost:%d,127.0.0.1:%d,localhost:%d", p0, p1, p0),
		g_strdup_printf("redis://127.0.0.1,127.0.0.1:%d,127.0.0.1:6379", p1),
	};

	for (size_t i = 0; i < G_N_ELEMENTS(uris); i++) {
		expect_config_error(uris[i]);
		print_message("%s: %s\n", uris[i], dlock_last_error_message());
		assert_non_null(strstr(dlock_last_error_message(), "twice"));
		g_free(uris[i]);
	}
}

/* The same server under two names is found at the first connect, by its
 * run_id, before a script counts it twice: the acquire and the query are
 * refused, naming both, and nothing is left on the masters.  The names
 * are an IPv4 address and the same address mapped into IPv6, which
 * reaches the IPv4 listener; a host name (localhost) is caught the same
 * way, but resolving one makes the C library leave an error for valgrind
 * at exit. */
static void test_one_server_under_two_names_is_refused_at_the_first_connect(void **state)
{
	char *uri = g_strdup_printf("redis://127.0.0.1:%d,[::ffff:127.0.0.1]:%d,127.0.0.1:%d",
	                            rl->masters[0]->port, rl->masters[0]->port, rl->masters[1]->port);
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info = NULL;
	int rc;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "rl/alias", &lock), DLOCK_OK);
	for (int i = 0; i < 2; i++) {
		rc = dlock_acquire(lock, 1000);
		print_message("acquire %d: %s: %s\n", i, dlock_code_name(rc), dlock_last_error_message());
		if (rc == DLOCK_OK)
			fail_msg("granted by one server counted twice; release then returned %s",
			         dlock_code_name(dlock_release(lock)));
		assert_int_equal(rc, DLOCK_ECONFIG);
		assert_non_null(strstr(dlock_last_error_message(), "redis 127.0.0.1:"));
		assert_non_null(strstr(dlock_last_error_message(), "redis ::ffff:127.0.0.1:"));
	}
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_ECONFIG);
	assert_null(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
	assert_int_equal(test_redlock_count_key(rl, "dlock:{rl/alias}", NULL), 0);
}

/* ---- short waits ------------------------------------------------------ */

/* Every one of the first three masters holds its clients' commands for
 * ms (CLIENT PAUSE, as a failover does): healthy, answering late. */
static void pause_masters(int ms)
{
	for (int i = 0; i < 3; i++) {
		redisReply *r = test_redis_cmd(rl->masters[i], "CLIENT PAUSE %d ALL", ms);

		assert_true(r && r->type == REDIS_REPLY_STATUS);
		freeReplyObject(r);
	}
}

/* Acquire h with wait_ms: rc expected, returned within wait_ms + slack. */
static void expect_short_wait(handle *h, int64_t wait_ms, int expected, int *ret_unavailable)
{
	int64_t start = test_now_ms(), took;
	int rc = dlock_acquire(h->lock, wait_ms);

	took = test_now_ms() - start;
	if (rc == DLOCK_EUNAVAILABLE)
		(*ret_unavailable)++;
	if (rc != expected)
		fail_msg("wait %" PRId64 " ms: %s after %" PRId64 " ms, not %s: %s", wait_ms,
		         dlock_code_name(rc), took, dlock_code_name(expected), dlock_last_error_message());
	if (wait_ms > 0)
		assert_true(took <= wait_ms + test_slack(200));
}

/*
 * While another client holds the lock, a wait of a few milliseconds on
 * healthy masters ends DLOCK_ETIMEDOUT (a try, DLOCK_EBUSY): never
 * DLOCK_EUNAVAILABLE because the caller's deadline cut its connects or
 * scripts short.  First from clients with no connection yet (each try
 * connects to every master); then with the masters answering 50 ms late,
 * well within their master timeout but past the caller's deadline.
 */
static void test_a_wait_of_a_few_ms_on_healthy_masters_is_never_unavailable(void **state)
{
	const int64_t waits[] = { 0, 1, 2, 3, 5, 10 };
	handle holder, h;
	int unavailable = 0;

	test_redlock_open(rl, &holder, 3, NULL, "rl/short");
	assert_int_equal(dlock_acquire(holder.lock, 5000), DLOCK_OK);
	for (int round = 0; round < 5; round++) {
		for (size_t i = 0; i < G_N_ELEMENTS(waits); i++) {
			test_redlock_open(rl, &h, 3, NULL, "rl/short");
			expect_short_wait(&h, waits[i], waits[i] ? DLOCK_ETIMEDOUT : DLOCK_EBUSY, &unavailable);
			test_redlock_close(&h);
		}
	}
	test_redlock_open(rl, &h, 3, NULL, "rl/short");
	for (size_t i = 0; i < G_N_ELEMENTS(waits); i++) {
		pause_masters(50);
		expect_short_wait(&h, waits[i], waits[i] ? DLOCK_ETIMEDOUT : DLOCK_EBUSY, &unavailable);
	}
	test_redlock_close(&h);
	assert_int_equal(unavailable, 0);
	assert_int_equal(dlock_release(holder.lock), DLOCK_OK);
	test_redlock_close(&holder);
}

/* "redis://USERINFO@127.0.0.1:P1,...,127.0.0.1:P3PATH": the first three
 * masters with credentials and a path of the test's; g_free. */
static char *uri_with(const char *userinfo, const char *path)
{
	return g_strdup_printf("redis://%s@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d%s", userinfo,
	                       rl->masters[0]->port, rl->masters[1]->port, rl->masters[2]->port, path);
}

/* An acquire and a query through uri fail with want, at once (a refusal
 * does not heal by waiting), with a message holding word and no password. */
static void expect_refusal(const char *uri, int want, const char *word)
{
	handle h;
	dlock_info *info = NULL;
	int64_t t0 = test_now_ms();
	int rc;

	assert_int_equal(dlock_client_new(uri, &h.client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(h.client, "rl/refused", &h.lock), DLOCK_OK);
	rc = dlock_acquire(h.lock, 3000);
	if (rc != want || !strstr(dlock_last_error_message(), word))
		fail_msg("acquire through %s: %s \"%s\", not %s naming '%s'", uri, dlock_code_name(rc),
		         dlock_last_error_message(), dlock_code_name(want), word);
	assert_null(strstr(dlock_last_error_message(), "rl-s3cret"));
	assert_null(strstr(dlock_last_error_message(), "wr0ng"));
	if (test_now_ms() - t0 > 2000)
		fail_msg("a refusal took %" PRId64 " ms of a 3000 ms wait", test_now_ms() - t0);
	rc = dlock_lock_query(h.lock, &info);
	if (rc != want)
		fail_msg("query through %s: %s, not %s", uri, dlock_code_name(rc), dlock_code_name(want));
	dlock_info_free(info);
	test_redlock_close(&h);
}

/* What every master refuses is the refusal itself, as on one server:
 * credentials DLOCK_EACCES (exit 77), a database out of range
 * DLOCK_ECONFIG (exit 78) -- not "no quorum reachable". */
static void test_masters_refusing_credentials_or_the_database_say_so(void **state)
{
	char *wrong = uri_with("rl-user:wr0ng", "");
	char *right_db = uri_with("rl-user:rl-s3cret", "/99");
	char *right = uri_with("rl-user:rl-s3cret", "");
	handle h;

	for (int i = 0; i < 3; i++)
		freeReplyObject(test_redis_cmd(rl->masters[i],
		                               "ACL SETUSER rl-user on >rl-s3cret ~* &* +@all"));
	expect_refusal(wrong, DLOCK_EACCES, "rl-user");
	expect_refusal(right_db, DLOCK_ECONFIG, "99");
	/* The same user with its password is served. */
	assert_int_equal(dlock_client_new(right, &h.client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(h.client, "rl/refused", &h.lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(h.lock, 3000), DLOCK_OK);
	assert_int_equal(dlock_release(h.lock), DLOCK_OK);
	test_redlock_close(&h);
	for (int i = 0; i < 3; i++)
		freeReplyObject(test_redis_cmd(rl->masters[i], "ACL DELUSER rl-user"));
	g_free(right);
	g_free(right_db);
	g_free(wrong);
}

/* Leader election on a Redlock: new leaders are announced on every
 * master, resignations heard on every master's release channel. */
static void test_election_hands_over_and_the_observer_sees_each_leader(void **state)
{
	char *uri = test_redlock_uri(rl, 3, "");

	test_election_handover(uri, "rl/elect", 500);
	g_free(uri);
}

/* A killed leader's lease (2 s) runs out on the quorum; the next leads. */
static void test_election_killed_leader_is_replaced_after_its_lease(void **state)
{
	char *uri = test_redlock_uri(rl, 3, "?ttl=2s");

	test_election_failover(uri, "rl/elect-failover", 2000 + 1000 + 1000);
	g_free(uri);
}

static void test_no_key_of_this_suite_remains_on_any_master(void **state)
{
	assert_int_equal(test_redlock_leftover_keys(rl, "dlock:{rl/"), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_three_masters_hold_on_a_quorum_and_release_everywhere),
		cmocka_unit_test(test_three_masters_tokens_increase_across_holders_and_clients),
		cmocka_unit_test(test_five_masters_hold_on_a_quorum_and_release_everywhere),
		cmocka_unit_test(test_five_masters_tokens_increase_across_holders_and_clients),
		cmocka_unit_test(test_a_counter_past_exact_tokens_is_refused_never_repeated),
		cmocka_unit_test(test_query_shows_the_quorums_holder),
		cmocka_unit_test(test_the_holds_of_a_client_are_renewed_in_one_round),
		cmocka_unit_test(test_processes_and_threads_never_overlap_and_tokens_increase),
		cmocka_unit_test(test_masters_refusing_credentials_or_the_database_say_so),
		cmocka_unit_test(test_election_hands_over_and_the_observer_sees_each_leader),
		cmocka_unit_test(test_election_killed_leader_is_replaced_after_its_lease),
		cmocka_unit_test(test_five_masters_processes_and_threads_never_overlap),
		cmocka_unit_test(test_two_clients_racing_never_both_hold_and_always_get_it),
		cmocka_unit_test(test_waiter_is_woken_by_the_release),
		cmocka_unit_test(test_read_and_write_modes_are_refused_naming_redlock),
		cmocka_unit_test(test_bad_master_timeout_is_a_config_error),
		cmocka_unit_test(test_master_timeout_on_one_host_is_a_config_error),
		cmocka_unit_test(test_a_master_named_twice_is_refused_at_creation),
		cmocka_unit_test(test_one_server_under_two_names_is_refused_at_the_first_connect),
		cmocka_unit_test(test_a_wait_of_a_few_ms_on_healthy_masters_is_never_unavailable),
		cmocka_unit_test(test_no_key_of_this_suite_remains_on_any_master),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return test_election_worker_main(argc, argv);
	return test_finish(cmocka_run_group_tests_name("redis-redlock", tests, test_redlock_suite_setup,
	                                               test_redlock_suite_teardown));
}
