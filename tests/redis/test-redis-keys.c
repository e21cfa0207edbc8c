/* SPDX-License-Identifier: MIT */
/*
 * What dlock writes on the server and what it reports about it: key and
 * channel names in each key format, the owner token with the holder's
 * info, fencing counters (including one lost by the server), and
 * dlock_lock_query.
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
#include "test-redis.h"

static test_redis *server;

typedef struct handle {
	dlock_client *client;
	dlock_lock *lock;
} handle;

static void open_handle(handle *h, const char *suffix, const char *resource)
{
	char *uri = test_redis_uri(server, suffix);

	assert_int_equal(dlock_client_new(uri, &h->client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(h->client, resource, &h->lock), DLOCK_OK);
	g_free(uri);
}

static void close_handle(handle *h)
{
	dlock_lock_free(h->lock);
	dlock_client_free(h->client);
}

static char *hostname(void)
{
	char buf[256] = "";

	assert_int_equal(gethostname(buf, sizeof(buf) - 1), 0);
	return g_strdup(buf);
}

typedef struct waiter {
	dlock_lock *lock;
	int rc;
} waiter;

static gpointer acquire_and_release(gpointer data)
{
	waiter *w = data;

	w->rc = dlock_acquire(w->lock, 10000);
	if (w->rc == DLOCK_OK)
		w->rc = dlock_release(w->lock);
	return NULL;
}

static bool has_subscriber(void *channel)
{
	return test_redis_numsub(server, channel) > 0;
}

static bool has_no_subscriber(void *channel)
{
	return test_redis_numsub(server, channel) == 0;
}

/*
 * Hold resource through a client built with suffix and check the lock
 * key, the counter (whose value is the token) and, with a waiter from a
 * second client, the release channel.
 */
static void check_names(const char *suffix, const char *resource, const char *key,
                        const char *fence, const char *channel)
{
	handle a, b;
	waiter w = { NULL, 99 };
	GThread *t;
	char *counter;

	open_handle(&a, suffix, resource);
	open_handle(&b, suffix, resource);
	assert_int_equal(dlock_acquire(a.lock, 0), DLOCK_OK);
	assert_int_equal(test_redis_int(server, "EXISTS %s", key), 1);
	assert_int_equal(test_redis_int(server, "EXISTS %s", fence), 1);
	counter = test_redis_str(server, "GET %s", fence);
	assert_non_null(counter);
	assert_int_equal(g_ascii_strtoull(counter, NULL, 10), dlock_fencing_token(a.lock));
	g_free(counter);

	w.lock = b.lock;
	t = g_thread_new("waiter", acquire_and_release, &w);
	assert_true(test_wait_until(has_subscriber, (void *)channel, 5000));
	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	g_thread_join(t);
	assert_int_equal(w.rc, DLOCK_OK);
	assert_true(test_wait_until(has_no_subscriber, (void *)channel, 3000));
	assert_int_equal(test_redis_int(server, "EXISTS %s", key), 0);
	close_handle(&a);
	close_handle(&b);
}

static void test_default_keys_are_braced_with_dlock_prefix(void **state)
{
	check_names(NULL, "keys/braced", "dlock:{keys/braced}", "dlock:{keys/braced}:fence",
	            "dlock:{keys/braced}:released");
}

static void test_prefix_option_replaces_the_prefix(void **state)
{
	check_names("?prefix=app:", "keys/prefixed", "app:{keys/prefixed}", "app:{keys/prefixed}:fence",
	            "app:{keys/prefixed}:released");
	assert_int_equal(test_redis_int(server, "EXISTS dlock:{keys/prefixed}:fence"), 0);
}

static void test_plain_format_uses_the_bare_name(void **state)
{
	check_names("?key-format=plain", "keys/plain", "keys/plain", "keys/plain:fence",
	            "keys/plain:released");
	assert_int_equal(test_redis_int(server, "EXISTS dlock:{keys/plain}:fence"), 0);
}

typedef struct token_check {
	int64_t before_ms;
	char *token;
	uint64_t tid;
} token_check;

static gpointer acquire_in_thread(gpointer data)
{
	token_check *c = data;
	char *uri = test_redis_uri(server, NULL);
	dlock_client *client;
	dlock_lock *lock;

	/* No cmocka assertion here: they may only fail on the test's thread;
	 * the test checks c->token instead. */
	c->before_ms = test_wall_ms();
	c->tid = (uint64_t)gettid();
	if (dlock_client_new(uri, &client) == DLOCK_OK) {
		if (dlock_lock_new(client, "keys/value", &lock) == DLOCK_OK) {
			if (dlock_acquire(lock, 2000) == DLOCK_OK) {
				c->token = test_redis_str(server, "GET dlock:{keys/value}");
				dlock_release(lock);
			}
			dlock_lock_free(lock);
		}
		dlock_client_free(client);
	}
	g_free(uri);
	return NULL;
}

static void test_key_value_is_random_token_with_holder_info(void **state)
{
	GRegex *re = g_regex_new("^dlock1:([0-9a-f]{32}):([0-9]+):([0-9]+):([0-9]+):(.+)$", 0, 0, NULL);
	char *host = hostname();
	char *randoms[2] = { NULL, NULL };

	for (int i = 0; i < 2; i++) {
		token_check c = { 0, NULL, 0 };
		GMatchInfo *m = NULL;
		GThread *t = g_thread_new("holder", acquire_in_thread, &c);
		char *pid, *tid, *ms, *h;

		g_thread_join(t);
		assert_non_null(c.token);
		if (!g_regex_match(re, c.token, 0, &m))
			fail_msg("owner token '%s' is not dlock1:<32 hex>:<pid>:<tid>:<ms>:<host>", c.token);
		randoms[i] = g_match_info_fetch(m, 1);
		pid = g_match_info_fetch(m, 2);
		tid = g_match_info_fetch(m, 3);
		ms = g_match_info_fetch(m, 4);
		h = g_match_info_fetch(m, 5);
		assert_int_equal(g_ascii_strtoll(pid, NULL, 10), getpid());
		assert_int_equal(g_ascii_strtoull(tid, NULL, 10), c.tid);
		/* Acquisition time, wall clock, in milliseconds. */
		assert_true(g_ascii_strtoll(ms, NULL, 10) >= c.before_ms - 1000);
		assert_true(g_ascii_strtoll(ms, NULL, 10) <= test_wall_ms() + 1000);
		assert_string_equal(h, host);
		g_free(pid);
		g_free(tid);
		g_free(ms);
		g_free(h);
		g_match_info_free(m);
		g_free(c.token);
	}
	/* 128 random bits per acquisition: two never repeat. */
	assert_string_not_equal(randoms[0], randoms[1]);
	g_free(randoms[0]);
	g_free(randoms[1]);
	g_free(host);
	g_regex_unref(re);
}

static void test_tokens_increase_even_after_the_counter_is_lost(void **state)
{
	handle a, b;
	uint64_t last = 0;

	open_handle(&a, NULL, "keys/fence");
	open_handle(&b, NULL, "keys/fence");
	for (int i = 0; i < 10; i++) {
		dlock_lock *lock = i % 2 ? a.lock : b.lock;

		assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
		assert_true(dlock_fencing_token(lock) > last);
		last = dlock_fencing_token(lock);
		assert_int_equal(dlock_release(lock), DLOCK_OK);
		assert_int_equal(dlock_fencing_token(lock), 0);
	}
	/* As after a restart without persistence: the counter is gone, and
	 * is started again from the server's clock, above every old token. */
	assert_int_equal(test_redis_int(server, "DEL dlock:{keys/fence}:fence"), 1);
	assert_int_equal(dlock_acquire(a.lock, 2000), DLOCK_OK);
	print_message("token before the loss %" PRIu64 ", after %" PRIu64 "\n", last, dlock_fencing_token(a.lock));
	assert_true(dlock_fencing_token(a.lock) > last);
	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	close_handle(&a);
	close_handle(&b);
}

static void test_query_reports_holder_and_free_after_release(void **state)
{
	handle a, b;
	dlock_info *info;
	char *host = hostname();
	int64_t before = test_wall_ms();
	uint64_t token;

	open_handle(&a, "?ttl=10s", "keys/query");
	open_handle(&b, NULL, "keys/query");

	/* Free before anyone holds it. */
	assert_int_equal(dlock_lock_query(b.lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_locked(info), 0);
	assert_int_equal(dlock_info_hold(info), DLOCK_HOLD_NONE);
	assert_string_equal(dlock_info_holder(info), "");
	dlock_info_free(info);

	assert_int_equal(dlock_acquire(a.lock, 0), DLOCK_OK);
	token = dlock_fencing_token(a.lock);

	/* Seen by its holder. */
	assert_int_equal(dlock_lock_query(a.lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_locked(info), 1);
	assert_int_equal(dlock_info_hold(info), DLOCK_HOLD_HELD);
	assert_int_equal(dlock_info_fencing_token(info), token);
	dlock_info_free(info);

	/* Seen by another client. */
	assert_int_equal(dlock_lock_query(b.lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_locked(info), 1);
	assert_int_equal(dlock_info_hold(info), DLOCK_HOLD_NONE);
	assert_int_equal(dlock_info_holder_pid(info), getpid());
	assert_int_equal(dlock_info_holder_tid(info), gettid());
	assert_string_equal(dlock_info_holder_host(info), host);
	assert_true(dlock_info_holder_since_ms(info) >= before - 1000);
	assert_true(dlock_info_holder_since_ms(info) <= test_wall_ms() + 1000);
	assert_true(dlock_info_expires_in_ms(info) > 0);
	assert_true(dlock_info_expires_in_ms(info) <= 10000);
	assert_int_equal(dlock_info_fencing_token(info), token);
	assert_non_null(strstr(dlock_info_holder(info), host));
	assert_non_null(dlock_info_backend(info));
	assert_non_null(strstr(dlock_info_backend(info), "127.0.0.1"));
	dlock_info_free(info);

	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	assert_int_equal(dlock_lock_query(b.lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_locked(info), 0);
	assert_int_equal(dlock_info_hold(info), DLOCK_HOLD_NONE);
	assert_string_equal(dlock_info_holder(info), "");
	assert_int_equal(dlock_info_holder_pid(info), 0);
	assert_null(dlock_info_holder_host(info));
	/* The counter outlives the lock: the latest token handed out. */
	assert_int_equal(dlock_info_fencing_token(info), token);
	dlock_info_free(info);
	close_handle(&a);
	close_handle(&b);
	g_free(host);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{keys/"), 0);
	assert_int_equal(test_redis_leftover_keys(server, "app:{keys/"), 0);
	assert_int_equal(test_redis_leftover_keys(server, "keys/"), 0);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	return 0;
}

static int teardown(void **state)
{
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_keys_are_braced_with_dlock_prefix),
		cmocka_unit_test(test_prefix_option_replaces_the_prefix),
		cmocka_unit_test(test_plain_format_uses_the_bare_name),
		cmocka_unit_test(test_key_value_is_random_token_with_holder_info),
		cmocka_unit_test(test_tokens_increase_even_after_the_counter_is_lost),
		cmocka_unit_test(test_query_reports_holder_and_free_after_release),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-keys", tests, setup, teardown));
}
