/* SPDX-License-Identifier: MIT */
/*
 * Fencing tokens across a failover: a replica promoted after it missed the
 * master's last increments of a counter must not hand out a token again.
 * Every token drawn (an uncontended hold of each mode, a grant through
 * the queue, a permit's grant, a downgrade, a queue ticket) is at least
 * the server's clock in microseconds, and the counter is stored back as a
 * decimal integer.
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

#include "dlock.h"
#include "test-redis.h"

static test_redis *server;

/* The server's clock (TIME), in microseconds. */
static uint64_t server_us(test_redis *r)
{
	redisReply *reply = test_redis_cmd(r, "TIME");
	uint64_t us;

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_ARRAY);
	assert_int_equal(reply->elements, 2);
	us = g_ascii_strtoull(reply->element[0]->str, NULL, 10) * 1000000 +
	     g_ascii_strtoull(reply->element[1]->str, NULL, 10);
	freeReplyObject(reply);
	return us;
}

/* The counter of resource as stored: digits only, equal to want. */
static void assert_counter(test_redis *r, const char *resource, uint64_t want)
{
	char *text = test_redis_str(r, "GET dlock:{%s}:fence", resource);
	char *expected = g_strdup_printf("%" PRIu64, want);

	assert_non_null(text);
	assert_string_equal(text, expected);
	g_free(expected);
	g_free(text);
}

/* Wind the counter back, as a replica that missed its increments has it. */
static void set_counter_behind(test_redis *r, const char *resource)
{
	redisReply *reply = test_redis_cmd(r, "SET dlock:{%s}:fence 5", resource);

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
}

static dlock_lock *new_lock(dlock_client *client, const char *resource, dlock_mode mode, uint32_t permits)
{
	dlock_lock *lock;

	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	if (permits)
		assert_int_equal(dlock_lock_set_permits(lock, permits), DLOCK_OK);
	else
		assert_int_equal(dlock_lock_set_mode(lock, mode), DLOCK_OK);
	return lock;
}

static dlock_client *new_client(test_redis *r)
{
	char *uri = test_redis_uri(r, NULL);
	dlock_client *client;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	g_free(uri);
	return client;
}

/* An uncontended hold of each kind, drawn over a counter left behind. */
static void test_an_uncontended_hold_draws_at_least_the_servers_clock(void **state)
{
	static const struct {
		dlock_mode mode;
		uint32_t permits;
	} kinds[] = { { DLOCK_MODE_EXCLUSIVE, 0 }, { DLOCK_MODE_WRITE, 0 }, { DLOCK_MODE_READ, 0 }, { 0, 3 } };
	dlock_client *client = new_client(server);

	for (size_t i = 0; i < G_N_ELEMENTS(kinds); i++) {
		char *resource = g_strdup_printf("failover/uncontended/%zu", i);
		dlock_lock *lock = new_lock(client, resource, kinds[i].mode, kinds[i].permits);
		uint64_t before;

		set_counter_behind(server, resource);
		before = server_us(server);
		assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
		print_message("kind %zu: clock before %" PRIu64 ", token %" PRIu64 "\n", i, before,
		              dlock_fencing_token(lock));
		assert_true(dlock_fencing_token(lock) >= before);
		assert_counter(server, resource, dlock_fencing_token(lock));
		assert_int_equal(dlock_release(lock), DLOCK_OK);
		dlock_lock_free(lock);
		g_free(resource);
	}
	dlock_client_free(client);
}

typedef struct waiter {
	dlock_lock *lock;
	int rc;
	uint64_t token;
} waiter;

static gpointer wait_for_grant(gpointer data)
{
	waiter *w = data;

	w->rc = dlock_acquire(w->lock, 20000);
	w->token = dlock_fencing_token(w->lock);
	return NULL;
}

static bool queued(void *resource)
{
	return test_redis_int(server, "ZCARD dlock:{%s}:q", (const char *)resource) > 0;
}

/* The queue's one entry's ticket (its score). */
static uint64_t ticket(const char *resource)
{
	redisReply *reply = test_redis_cmd(server, "ZRANGE dlock:{%s}:q 0 0 WITHSCORES", resource);
	uint64_t t;

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_ARRAY);
	assert_int_equal(reply->elements, 2);
	t = g_ascii_strtoull(reply->element[1]->str, NULL, 10);
	freeReplyObject(reply);
	return t;
}

/*
 * A waiter queued behind a holder: its ticket and then the token of the
 * grant its holder's release hands it, each drawn over a counter left
 * behind.  permits 0: an EXCLUSIVE lock; else a semaphore of that many.
 */
static void check_queued_grant(const char *resource, uint32_t permits)
{
	dlock_client *holder = new_client(server), *other = new_client(server);
	dlock_lock *held = new_lock(holder, resource, DLOCK_MODE_EXCLUSIVE, permits);
	waiter w = { new_lock(other, resource, DLOCK_MODE_EXCLUSIVE, permits), 99, 0 };
	uint64_t before;
	GThread *t;

	/* Released here, by another thread than the one that waited. */
	assert_int_equal(dlock_lock_set_owner(w.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 2000), DLOCK_OK);
	set_counter_behind(server, resource);
	before = server_us(server);
	t = g_thread_new("waiter", wait_for_grant, &w);
	assert_true(test_wait_until(queued, (void *)resource, 10000));
	print_message("clock before %" PRIu64 ", ticket %" PRIu64 "\n", before, ticket(resource));
	assert_true(ticket(resource) >= before);

	set_counter_behind(server, resource);
	before = server_us(server);
	assert_int_equal(dlock_release(held), DLOCK_OK);
	g_thread_join(t);
	assert_int_equal(w.rc, DLOCK_OK);
	print_message("clock before %" PRIu64 ", granted token %" PRIu64 "\n", before, w.token);
	assert_true(w.token >= before);
	assert_counter(server, resource, w.token);
	assert_int_equal(dlock_release(w.lock), DLOCK_OK);
	dlock_lock_free(w.lock);
	dlock_lock_free(held);
	dlock_client_free(other);
	dlock_client_free(holder);
}

static void test_a_ticket_and_a_grant_through_the_queue_draw_at_least_the_clock(void **state)
{
	check_queued_grant("failover/queued", 0);
}

static void test_a_permit_granted_through_the_queue_draws_at_least_the_clock(void **state)
{
	check_queued_grant("failover/permit", 1);
}

static void test_a_downgrade_draws_at_least_the_servers_clock(void **state)
{
	const char *resource = "failover/downgrade";
	dlock_client *client = new_client(server);
	dlock_lock *write = new_lock(client, resource, DLOCK_MODE_WRITE, 0);
	dlock_lock *read = new_lock(client, resource, DLOCK_MODE_READ, 0);
	uint64_t before;

	assert_int_equal(dlock_acquire(write, 2000), DLOCK_OK);
	set_counter_behind(server, resource);
	before = server_us(server);
	assert_int_equal(dlock_acquire(read, 0), DLOCK_OK);
	print_message("clock before %" PRIu64 ", read token %" PRIu64 "\n", before, dlock_fencing_token(read));
	assert_true(dlock_fencing_token(read) >= before);
	assert_counter(server, resource, dlock_fencing_token(read));
	assert_int_equal(dlock_release(write), DLOCK_OK);
	assert_int_equal(dlock_release(read), DLOCK_OK);
	dlock_lock_free(read);
	dlock_lock_free(write);
	dlock_client_free(client);
}

/* A counter ahead of the clock goes on by one, exactly, in decimal. */
static void test_a_counter_ahead_of_the_clock_goes_on_by_one(void **state)
{
	const char *resource = "failover/ahead";
	dlock_client *client = new_client(server);
	dlock_lock *lock = new_lock(client, resource, DLOCK_MODE_EXCLUSIVE, 0);

	assert_int_equal(test_redis_int(server, "EXISTS dlock:{%s}:fence", resource), 0);
	freeReplyObject(test_redis_cmd(server, "SET dlock:{%s}:fence 8000000000000000", resource));
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
	assert_int_equal(dlock_fencing_token(lock), UINT64_C(8000000000000001));
	assert_counter(server, resource, UINT64_C(8000000000000001));
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
	assert_int_equal(dlock_fencing_token(lock), UINT64_C(8000000000000002));
	assert_counter(server, resource, UINT64_C(8000000000000002));
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/*
 * Near 2^53 a double (Lua's number) cannot hold counter + 1: a next
 * token would repeat the last one or fall below it, and a counter past
 * 2^63 was written back negative.  Below 2^53 - 2^20 tokens go on; from
 * there the acquire is refused, naming the counter, and leaves no key.
 */
static void test_a_counter_past_exact_tokens_is_refused_never_repeated(void **state)
{
	static const char *const beyond[] = { "9007199253692416", "9007199254740993",
	                                      "20000000000000000000" };
	const char *resource = "failover/exhausted";
	dlock_client *client = new_client(server);
	dlock_lock *lock = new_lock(client, resource, DLOCK_MODE_EXCLUSIVE, 0);

	freeReplyObject(test_redis_cmd(server, "SET dlock:{%s}:fence 9007199253692415", resource));
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
	assert_int_equal(dlock_fencing_token(lock), UINT64_C(9007199253692416));
	assert_counter(server, resource, UINT64_C(9007199253692416));
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	for (size_t i = 0; i < G_N_ELEMENTS(beyond); i++) {
		int rc;

		freeReplyObject(test_redis_cmd(server, "SET dlock:{%s}:fence %s", resource, beyond[i]));
		rc = dlock_acquire(lock, 0);
		print_message("counter %s: %s, token %" PRIu64 ": %s\n", beyond[i], dlock_code_name(rc),
		              rc == DLOCK_OK ? dlock_fencing_token(lock) : 0, dlock_last_error_message());
		if (rc == DLOCK_OK)
			assert_int_equal(dlock_release(lock), DLOCK_OK);
		assert_int_equal(rc, DLOCK_EBACKEND);
		assert_non_null(strstr(dlock_last_error_message(), "fencing counter"));
		assert_int_equal(test_redis_int(server, "EXISTS dlock:{%s}", resource), 0);
		/* Left as it was, for whoever sets it right. */
		assert_int_equal(test_redis_int(server, "EXISTS dlock:{%s}:fence", resource), 1);
	}
	freeReplyObject(test_redis_cmd(server, "DEL dlock:{%s}:fence", resource));
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static bool replica_in_sync(void *data)
{
	test_redis *replica = data;
	char *info = test_redis_str(replica, "INFO replication");
	bool up = info && strstr(info, "master_link_status:up");

	g_free(info);
	return up;
}

/*
 * A master with one replica.  The replica sees a first token, then is
 * frozen and dropped; the master hands out more tokens and dies holding
 * the lock; the replica is promoted by hand (REPLICAOF NO ONE).  The
 * promoted server missed the lock and the counter's increments, and
 * grants the lock again at once (what min-replicas closes), but with a
 * token larger than every earlier one.
 */
static void test_tokens_increase_across_the_promotion_of_a_replica_that_missed_them(void **state)
{
	const char *resource = "failover/promoted";
	test_redis *master = test_redis_start(NULL, NULL, false);
	char *port = g_strdup_printf("%d", master->port);
	const char *const extra[] = { "--replicaof", "127.0.0.1", port, NULL };
	test_redis *replica = test_redis_start(extra, NULL, false);
	dlock_client *old = new_client(master), *fresh;
	dlock_lock *lock = new_lock(old, resource, DLOCK_MODE_EXCLUSIVE, 0), *again;
	uint64_t seen = 0;

	assert_true(test_wait_until(replica_in_sync, replica, 10000));
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
	seen = dlock_fencing_token(lock);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	/* The replica has the counter as of this first token. */
	assert_int_equal(test_redis_int(master, "WAIT 1 5000"), 1);

	test_redis_signal(replica, SIGSTOP);
	assert_true(test_redis_int(master, "CLIENT KILL TYPE replica") >= 1);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
		assert_true(dlock_fencing_token(lock) > seen);
		seen = dlock_fencing_token(lock);
		if (i < 2)
			assert_int_equal(dlock_release(lock), DLOCK_OK);
	}
	/* The master dies with the lock held and the last token out. */
	test_redis_signal(master, SIGKILL);
	test_redis_halt(master);
	test_redis_signal(replica, SIGCONT);
	freeReplyObject(test_redis_cmd(replica, "REPLICAOF NO ONE"));
	assert_int_equal(test_redis_int(replica, "EXISTS dlock:{%s}", resource), 0);

	fresh = new_client(replica);
	again = new_lock(fresh, resource, DLOCK_MODE_EXCLUSIVE, 0);
	assert_int_equal(dlock_acquire(again, 2000), DLOCK_OK);
	print_message("last token on the old master %" PRIu64 ", first on the promoted replica %" PRIu64 "\n",
	              seen, dlock_fencing_token(again));
	assert_true(dlock_fencing_token(again) > seen);
	assert_int_equal(dlock_release(again), DLOCK_OK);

	dlock_lock_free(again);
	dlock_client_free(fresh);
	dlock_lock_free(lock);
	dlock_client_free(old);
	test_redis_stop(replica);
	test_redis_stop(master);
	g_free(port);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{failover/"), 0);
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
		cmocka_unit_test(test_an_uncontended_hold_draws_at_least_the_servers_clock),
		cmocka_unit_test(test_a_ticket_and_a_grant_through_the_queue_draw_at_least_the_clock),
		cmocka_unit_test(test_a_permit_granted_through_the_queue_draws_at_least_the_clock),
		cmocka_unit_test(test_a_downgrade_draws_at_least_the_servers_clock),
		cmocka_unit_test(test_a_counter_ahead_of_the_clock_goes_on_by_one),
		cmocka_unit_test(test_a_counter_past_exact_tokens_is_refused_never_repeated),
		cmocka_unit_test(test_tokens_increase_across_the_promotion_of_a_replica_that_missed_them),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-failover", tests, setup, teardown));
}
