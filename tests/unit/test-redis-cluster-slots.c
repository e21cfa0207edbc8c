/* SPDX-License-Identifier: MIT */
/*
 * Redis Cluster's routing, the parts that need no server
 * (src/redis/cluster.c): CRC16-XMODEM, the slot of a key by its hash tag,
 * and what a node's redirection says.  tests/redis/test-redis-cluster*.c
 * check the same against a real cluster.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "clock.h"
#include "dlock.h"
#include "redis/internal.h"

static void test_crc16_check_value(void **state)
{
	(void)state;
	/* The check value of CRC-16/XMODEM, as Redis Cluster's spec gives it. */
	assert_int_equal(dlock__redis_crc16("123456789", 9), 0x31C3);
	assert_int_equal(dlock__redis_crc16("", 0), 0);
}

static void test_slot_of_a_key_is_its_hash_tags(void **state)
{
	(void)state;
	assert_int_equal(dlock__redis_slot("123456789"), 0x31C3 % 16384);
	assert_int_equal(dlock__redis_slot("dlock:{R}"), 15031);
	/* Every key and channel of a resource shares the tag's slot. */
	assert_int_equal(dlock__redis_slot("dlock:{R}:fence"), 15031);
	assert_int_equal(dlock__redis_slot("other:{R}:w:abc"), 15031);
	assert_int_equal(dlock__redis_slot("{R}"), dlock__redis_slot("R"));
	/* An empty tag, or none closed, hashes the whole key. */
	assert_int_equal(dlock__redis_slot("a{}b"), dlock__redis_crc16("a{}b", 4) % 16384);
	assert_int_equal(dlock__redis_slot("a{b"), dlock__redis_crc16("a{b", 3) % 16384);
	/* The first '{' and the next '}' only. */
	assert_int_equal(dlock__redis_slot("{a}{b}"), dlock__redis_slot("a"));
	assert_int_equal(dlock__redis_slot("{{a}}"), dlock__redis_slot("{a"));
}

static redisReply error_reply(const char *text)
{
	redisReply r = { .type = REDIS_REPLY_ERROR, .str = (char *)text, .len = strlen(text) };

	return r;
}

static void test_redirections_are_read(void **state)
{
	redisReply r;
	redis_redirect d;

	(void)state;
	r = error_reply("MOVED 3999 127.0.0.1:6381");
	d = dlock__redis_redirect_of(&r);
	assert_int_equal(d.kind, REDIRECT_MOVED);
	assert_int_equal(d.slot, 3999);
	assert_string_equal(d.addr, "127.0.0.1:6381");

	r = error_reply("ASK 15031 ::1:7002");
	d = dlock__redis_redirect_of(&r);
	assert_int_equal(d.kind, REDIRECT_ASK);
	assert_int_equal(d.slot, 15031);
	assert_string_equal(d.addr, "::1:7002");

	r = error_reply("TRYAGAIN Multiple keys request during rehashing of slot");
	assert_int_equal(dlock__redis_redirect_of(&r).kind, REDIRECT_TRYAGAIN);
	r = error_reply("CLUSTERDOWN The cluster is down");
	assert_int_equal(dlock__redis_redirect_of(&r).kind, REDIRECT_DOWN);

	/* Not redirections: other errors, a slot out of range, no address. */
	r = error_reply("ERR unknown command");
	assert_int_equal(dlock__redis_redirect_of(&r).kind, REDIRECT_NONE);
	r = error_reply("MOVED 16384 127.0.0.1:6381");
	assert_int_equal(dlock__redis_redirect_of(&r).kind, REDIRECT_NONE);
	r = error_reply("MOVED 12");
	assert_int_equal(dlock__redis_redirect_of(&r).kind, REDIRECT_NONE);
	r = (redisReply){ .type = REDIS_REPLY_STRING, .str = (char *)"MOVED 1 a:1", .len = 11 };
	assert_int_equal(dlock__redis_redirect_of(&r).kind, REDIRECT_NONE);
}

/* A MOVED names a node by "host:port", IPv6 hosts unbracketed: the port
 * is after the last colon. */
static void test_moved_updates_the_slot_owner(void **state)
{
	GPtrArray *hosts = g_ptr_array_new();
	dlock__host seed = { .host = (char *)"127.0.0.1", .port = 7000 };
	dlock__uri uri = { .hosts = hosts };
	redis_cluster *c;
	redis_node *n, *v6;

	(void)state;
	g_ptr_array_add(hosts, &seed);
	c = dlock__redis_cluster_new(&uri);
	assert_null(dlock__redis_cluster_owner(c, 15031, NULL));
	n = dlock__redis_cluster_moved(c, 15031, "127.0.0.1:7001");
	assert_non_null(n);
	assert_ptr_equal(dlock__redis_cluster_owner(c, 15031, NULL), n);
	assert_string_equal(n->host, "127.0.0.1");
	assert_int_equal(n->port, 7001);
	/* The same node, not a second one. */
	assert_ptr_equal(dlock__redis_cluster_node(c, "127.0.0.1:7001"), n);
	v6 = dlock__redis_cluster_moved(c, 1, "::1:7002");
	assert_string_equal(v6->host, "::1");
	assert_int_equal(v6->port, 7002);
	assert_string_equal(v6->addr, "[::1]:7002");
	assert_null(dlock__redis_cluster_moved(c, 2, "nohost"));
	assert_null(dlock__redis_cluster_moved(c, 2, "h:0"));
	dlock__redis_cluster_free(c);
	g_ptr_array_unref(hosts);
}

/*
 * A command follows at most ROUTE_REDIRECTS_MAX redirections; a
 * migration's TRYAGAIN is waited out within the deadline, not counted,
 * and an ASK that led to one is not counted either, its target kept for
 * the next try.
 */
static void test_redirections_are_bounded_and_tryagain_waits(void **state)
{
	GPtrArray *hosts = g_ptr_array_new();
	dlock__host seed = { .host = (char *)"127.0.0.1", .port = 7000 };
	dlock__uri uri = { .hosts = hosts };
	redis_backend b = { .label = (char *)"redis+cluster test" };
	redis_redirect moved = { REDIRECT_MOVED, 15031, "127.0.0.1:7001" };
	redis_redirect ask = { REDIRECT_ASK, 15031, "127.0.0.1:7002" };
	redis_redirect again = { REDIRECT_TRYAGAIN, -1, "" };
	int64_t deadline = dlock__mono_us() + 10 * 1000 * 1000;
	redis_route route;

	(void)state;
	g_ptr_array_add(hosts, &seed);
	b.cluster = dlock__redis_cluster_new(&uri);
	dlock__redis_route_init(&route, "dlock:{R}");
	assert_int_equal(route.slot, 15031);
	for (int i = 0; i < ROUTE_REDIRECTS_MAX; i++)
		assert_int_equal(dlock__redis_route_follow(&b, &route, &moved, NULL, deadline), DLOCK_OK);
	assert_int_equal(dlock__redis_route_follow(&b, &route, &moved, NULL, deadline), DLOCK_EUNAVAILABLE);
	assert_non_null(strstr(dlock_last_error_message(), "redirections"));

	dlock__redis_route_init(&route, "dlock:{R}");
	for (int i = 0; i < ROUTE_REDIRECTS_MAX + 2; i++) {
		assert_int_equal(dlock__redis_route_follow(&b, &route, &ask, NULL, deadline), DLOCK_OK);
		assert_non_null(route.ask);
		assert_int_equal(route.ask->port, 7002);
		assert_int_equal(dlock__redis_route_follow(&b, &route, &again, NULL, deadline), DLOCK_OK);
		assert_non_null(route.ask);
	}
	assert_int_equal(route.redirects, 0);
	/* A MOVED ends the ASK's detour. */
	assert_int_equal(dlock__redis_route_follow(&b, &route, &moved, NULL, deadline), DLOCK_OK);
	assert_null(route.ask);
	/* No time for a pause: the migration outlasted the wait. */
	assert_int_equal(dlock__redis_route_follow(&b, &route, &again, NULL, dlock__mono_us() + 10 * 1000),
	                 DLOCK_EUNAVAILABLE);
	assert_non_null(strstr(dlock_last_error_message(), "migrated"));
	dlock__redis_cluster_free(b.cluster);
	g_ptr_array_unref(hosts);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc16_check_value),
		cmocka_unit_test(test_slot_of_a_key_is_its_hash_tags),
		cmocka_unit_test(test_redirections_are_read),
		cmocka_unit_test(test_moved_updates_the_slot_owner),
		cmocka_unit_test(test_redirections_are_bounded_and_tryagain_waits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
