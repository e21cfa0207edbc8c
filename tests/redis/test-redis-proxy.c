/* SPDX-License-Identifier: MIT */
/*
 * The fault-injection proxy (tests/helpers/test-proxy.h) does what it
 * says, against a real redis-server: stalls keep bytes and deliver them
 * late, dropped replies are exactly those of the matching requests in a
 * pipeline, resets end connections, and each admission mode treats new
 * connections as documented.  Other suites rely on these faults.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <hiredis/hiredis.h>

#include "test-proxy.h"
#include "test-redis.h"

static test_redis *server;

#define PING "*1\r\n$4\r\nPING\r\n"
#define PONG "+PONG\r\n"

/* A plain TCP connection to port, or -1 with errno. */
static int raw_connect(int port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
		                    .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		int saved = errno;

		close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

static void send_str(int fd, const char *text)
{
	assert_int_equal(send(fd, text, strlen(text), MSG_NOSIGNAL), (ssize_t)strlen(text));
}

/* Up to len bytes that arrive within timeout_ms; the count, or -1 on a
 * reset before anything arrived.  Stops early at end of stream. */
static ssize_t recv_for(int fd, char *buf, size_t len, int64_t timeout_ms)
{
	int64_t end = test_now_ms() + timeout_ms;
	size_t got = 0;

	while (got < len) {
		int64_t left = end - test_now_ms();
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			break;
		n = recv(fd, buf + got, len - got, 0);
		if (n < 0 && got == 0)
			return -1;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Exactly `text` arrives (bounded), and nothing more right after it. */
static void assert_receives(int fd, const char *text)
{
	char buf[256];
	size_t len = strlen(text);
	ssize_t n = recv_for(fd, buf, len, test_slack(5000));

	assert_int_equal(n, (ssize_t)len);
	assert_memory_equal(buf, text, len);
	assert_int_equal(recv_for(fd, buf, sizeof(buf), 100), 0);
}

static void assert_nothing_arrives(int fd, int64_t ms)
{
	char buf[64];

	assert_int_equal(recv_for(fd, buf, sizeof(buf), ms), 0);
}

static redisContext *connect_through(test_proxy *proxy)
{
	struct timeval tv = { 5, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", test_proxy_port(proxy), tv);

	assert_non_null(c);
	assert_int_equal(c->err, 0);
	redisSetTimeout(c, tv);
	return c;
}

static void assert_reply_str(redisContext *c, int type, const char *text)
{
	redisReply *reply = NULL;

	assert_int_equal(redisGetReply(c, (void **)&reply), REDIS_OK);
	assert_non_null(reply);
	assert_int_equal(reply->type, type);
	assert_string_equal(reply->str, text);
	freeReplyObject(reply);
}

static bool key_exists(void *key)
{
	return test_redis_int(server, "EXISTS %s", (const char *)key) == 1;
}

static bool proxy_has_none_open(void *proxy)
{
	return test_proxy_open(proxy) == 0;
}

/* ---- stall ---------------------------------------------------------------- */

static void test_stalled_replies_are_kept_and_delivered_on_unstall(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	int fd = raw_connect(test_proxy_port(proxy));

	send_str(fd, PING);
	assert_receives(fd, PONG);
	test_proxy_stall(proxy, TEST_PROXY_DOWN);
	send_str(fd, PING);
	assert_nothing_arrives(fd, 300);
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
	assert_receives(fd, PONG);
	close(fd);
	test_proxy_stop(proxy);
}

static void test_stalled_requests_reach_the_server_only_on_unstall(void **state)
{
	test_proxy *proxy = test_proxy_start(server->port);
	int fd = raw_connect(test_proxy_port(proxy));

	test_redis_int(server, "DEL proxy:stall-up");
	test_proxy_stall(proxy, TEST_PROXY_UP);
	send_str(fd, "*3\r\n$3\r\nSET\r\n$14\r\nproxy:stall-up\r\n$1\r\nv\r\n");
	g_usleep(300 * 1000);
	assert_false(key_exists("proxy:stall-up"));
	assert_nothing_arrives(fd, 10);
	test_proxy_unstall(proxy, TEST_PROXY_UP);
	assert_receives(fd, "+OK\r\n");
	assert_true(key_exists("proxy:stall-up"));
	test_redis_int(server, "DEL proxy:stall-up");
	close(fd);
	test_proxy_stop(proxy);
}

static void test_stall_applies_to_connections_opened_while_stalled(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	int fd;

	test_proxy_stall(proxy, TEST_PROXY_BOTH);
	fd = raw_connect(test_proxy_port(proxy));
	assert_true(fd >= 0);
	send_str(fd, PING PING);
	assert_nothing_arrives(fd, 300);
	test_proxy_unstall(proxy, TEST_PROXY_BOTH);
	assert_receives(fd, PONG PONG);
	close(fd);
	test_proxy_stop(proxy);
}

/* ---- dropped replies ------------------------------------------------------ */

static void test_drop_replies_discards_exactly_the_matching_reply_in_a_pipeline(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	redisContext *c = connect_through(proxy);
	struct timeval short_tv = { 0, 300 * 1000 };
	void *reply = NULL;

	test_proxy_drop_replies(proxy, "get", 1, false);
	redisAppendCommand(c, "SET proxy:pipe hello");
	redisAppendCommand(c, "GET proxy:pipe");  /* its reply is dropped */
	redisAppendCommand(c, "ECHO %s", "*2\r\n$3\r\nGET\r\n"); /* looks like RESP inside a bulk */
	redisAppendCommand(c, "GET proxy:pipe");  /* the count is spent: arrives */
	redisAppendCommand(c, "PING");
	assert_reply_str(c, REDIS_REPLY_STATUS, "OK");
	assert_reply_str(c, REDIS_REPLY_STRING, "*2\r\n$3\r\nGET\r\n");
	assert_reply_str(c, REDIS_REPLY_STRING, "hello");
	assert_reply_str(c, REDIS_REPLY_STATUS, "PONG");
	assert_int_equal(test_proxy_dropped(proxy), 1);
	assert_int_equal(test_proxy_requests(proxy, "GET"), 2);
	assert_int_equal(test_proxy_requests(proxy, "echo"), 1);
	/* Nothing else is on its way. */
	redisSetTimeout(c, short_tv);
	assert_int_equal(redisGetReply(c, &reply), REDIS_ERR);
	assert_null(reply);
	/* The server did answer every request. */
	assert_int_equal(test_redis_calls(server, "get") >= 2, 1);
	redisFree(c);
	test_redis_int(server, "DEL proxy:pipe");
	test_proxy_stop(proxy);
}

static void test_drop_replies_after_lets_the_first_requests_through(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	redisContext *c = connect_through(proxy);

	test_proxy_drop_replies_after(proxy, "echo", 2, 1, false);
	redisAppendCommand(c, "ECHO one");
	redisAppendCommand(c, "ECHO two");
	redisAppendCommand(c, "ECHO three"); /* its reply is dropped */
	redisAppendCommand(c, "ECHO four");
	assert_reply_str(c, REDIS_REPLY_STRING, "one");
	assert_reply_str(c, REDIS_REPLY_STRING, "two");
	assert_reply_str(c, REDIS_REPLY_STRING, "four");
	assert_int_equal(test_proxy_dropped(proxy), 1);
	assert_int_equal(test_proxy_requests(proxy, "echo"), 4);
	redisFree(c);
	test_proxy_stop(proxy);
}

static void test_drop_replies_with_reset_after_resets_once_the_request_was_applied(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	redisContext *c = connect_through(proxy);
	void *reply = NULL;

	test_redis_int(server, "DEL proxy:lost");
	test_proxy_drop_replies(proxy, "SET", 1, true);
	redisAppendCommand(c, "PING");
	redisAppendCommand(c, "SET proxy:lost v");
	assert_reply_str(c, REDIS_REPLY_STATUS, "PONG");
	assert_int_equal(redisGetReply(c, &reply), REDIS_ERR);
	assert_null(reply);
	assert_true(c->err == REDIS_ERR_EOF || c->err == REDIS_ERR_IO);
	assert_true(key_exists("proxy:lost"));
	assert_int_equal(test_proxy_dropped(proxy), 1);
	assert_true(test_wait_until(proxy_has_none_open, proxy, 5000));
	redisFree(c);
	test_redis_int(server, "DEL proxy:lost");
	test_proxy_stop(proxy);
}

static void test_dropped_subscribe_confirmations_leave_pushes_intact(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	int fd = raw_connect(test_proxy_port(proxy));

	test_proxy_drop_replies(proxy, "SUBSCRIBE", 1, false);
	send_str(fd, "*3\r\n$9\r\nSUBSCRIBE\r\n$7\r\nproxy:a\r\n$7\r\nproxy:b\r\n");
	for (int i = 0; i < 500 && test_redis_numsub(server, "proxy:b") < 1; i++)
		g_usleep(10 * 1000);
	assert_int_equal(test_redis_numsub(server, "proxy:b"), 1);
	assert_int_equal(test_redis_int(server, "PUBLISH proxy:a hi"), 1);
	/* Both confirmations are gone, counted as one dropped reply; the
	 * message is not a reply and arrives whole. */
	assert_receives(fd, "*3\r\n$7\r\nmessage\r\n$7\r\nproxy:a\r\n$2\r\nhi\r\n");
	assert_int_equal(test_proxy_dropped(proxy), 1);
	/* A later subscribe on the connection is confirmed normally. */
	send_str(fd, "*2\r\n$9\r\nSUBSCRIBE\r\n$7\r\nproxy:c\r\n");
	assert_receives(fd, "*3\r\n$9\r\nsubscribe\r\n$7\r\nproxy:c\r\n:3\r\n");
	close(fd);
	test_proxy_stop(proxy);
}

/* ---- resets and admission ------------------------------------------------- */

static void test_reset_all_ends_open_connections_and_admits_new_ones(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	int fd = raw_connect(test_proxy_port(proxy));
	char buf[16];
	int fd2;

	send_str(fd, PING);
	assert_receives(fd, PONG);
	assert_int_equal(test_proxy_open(proxy), 1);
	test_proxy_reset_all(proxy);
	assert_int_equal(test_proxy_open(proxy), 0);
	assert_int_equal(recv(fd, buf, sizeof(buf), 0), -1);
	assert_int_equal(errno, ECONNRESET);
	close(fd);
	fd2 = raw_connect(test_proxy_port(proxy));
	send_str(fd2, PING);
	assert_receives(fd2, PONG);
	assert_int_equal(test_proxy_accepted(proxy), 2);
	close(fd2);
	test_proxy_stop(proxy);
}

static void test_refuse_mode_refuses_connections_until_admitting_again(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	int fd;

	test_proxy_admit_mode(proxy, TEST_PROXY_REFUSE);
	assert_int_equal(raw_connect(test_proxy_port(proxy)), -1);
	assert_int_equal(errno, ECONNREFUSED);
	assert_int_equal(test_proxy_accepted(proxy), 0);
	test_proxy_admit_mode(proxy, TEST_PROXY_ADMIT);
	fd = raw_connect(test_proxy_port(proxy));
	assert_true(fd >= 0);
	send_str(fd, PING);
	assert_receives(fd, PONG);
	close(fd);
	test_proxy_stop(proxy);
}

static void test_slam_mode_accepts_and_resets_at_once(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	long long before = test_redis_info_int(server, "total_connections_received");
	char buf[16];
	int fd;

	test_proxy_admit_mode(proxy, TEST_PROXY_SLAM);
	fd = raw_connect(test_proxy_port(proxy));
	assert_true(fd >= 0);
	assert_int_equal(recv_for(fd, buf, sizeof(buf), test_slack(5000)), -1);
	assert_int_equal(errno, ECONNRESET);
	assert_int_equal(test_proxy_accepted(proxy), 1);
	assert_int_equal(test_proxy_open(proxy), 0);
	assert_int_equal(test_redis_info_int(server, "total_connections_received"), before);
	close(fd);
	test_proxy_stop(proxy);
}

static bool proxy_accepted_one(void *proxy)
{
	return test_proxy_accepted(proxy) == 1;
}

static void test_blackhole_mode_accepts_and_never_answers(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	long long before = test_redis_info_int(server, "total_connections_received");
	int fd;

	test_proxy_admit_mode(proxy, TEST_PROXY_BLACKHOLE);
	fd = raw_connect(test_proxy_port(proxy));
	assert_true(fd >= 0);
	send_str(fd, PING);
	assert_nothing_arrives(fd, 300);
	assert_true(test_wait_until(proxy_accepted_one, proxy, 5000));
	assert_int_equal(test_proxy_open(proxy), 1);
	assert_int_equal(test_redis_info_int(server, "total_connections_received"), before);
	/* Open ones stay as they are when the mode changes. */
	test_proxy_admit_mode(proxy, TEST_PROXY_ADMIT);
	assert_nothing_arrives(fd, 100);
	test_proxy_reset_all(proxy);
	assert_int_equal(test_proxy_open(proxy), 0);
	close(fd);
	test_proxy_stop(proxy);
}

static bool proxy_accepted_three(void *proxy)
{
	return test_proxy_accepted(proxy) == 3;
}

/*
 * A server whose listen backlog is full (as when it is stopped and
 * clients keep connecting) drops new SYNs, so a connect() to it blocks
 * for minutes: the proxy must go on accepting and answering control calls
 * meanwhile.
 */
static void test_proxy_keeps_serving_while_the_server_backlog_is_full(void **state)
{
	int target_fd;
	int target = test_closed_port(&target_fd);
	test_proxy *proxy;
	int fds[3];

	/* Backlog 0: one pending connection fills it; nothing accepts. */
	assert_int_equal(listen(target_fd, 0), 0);
	proxy = test_proxy_start(target);
	for (int i = 0; i < 3; i++) {
		fds[i] = raw_connect(test_proxy_port(proxy));
		assert_true(fds[i] >= 0);
	}
	if (!test_wait_until(proxy_accepted_three, proxy, 5000))
		fail_msg("the proxy accepted %d of 3 connections within 5 s", test_proxy_accepted(proxy));
	test_proxy_stall(proxy, TEST_PROXY_BOTH);
	assert_int_equal(test_proxy_open(proxy), 3);
	test_proxy_stop(proxy);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	close(target_fd);
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
		cmocka_unit_test(test_stalled_replies_are_kept_and_delivered_on_unstall),
		cmocka_unit_test(test_stalled_requests_reach_the_server_only_on_unstall),
		cmocka_unit_test(test_stall_applies_to_connections_opened_while_stalled),
		cmocka_unit_test(test_drop_replies_discards_exactly_the_matching_reply_in_a_pipeline),
		cmocka_unit_test(test_drop_replies_after_lets_the_first_requests_through),
		cmocka_unit_test(test_drop_replies_with_reset_after_resets_once_the_request_was_applied),
		cmocka_unit_test(test_dropped_subscribe_confirmations_leave_pushes_intact),
		cmocka_unit_test(test_reset_all_ends_open_connections_and_admits_new_ones),
		cmocka_unit_test(test_refuse_mode_refuses_connections_until_admitting_again),
		cmocka_unit_test(test_slam_mode_accepts_and_resets_at_once),
		cmocka_unit_test(test_blackhole_mode_accepts_and_never_answers),
		cmocka_unit_test(test_proxy_keeps_serving_while_the_server_backlog_is_full),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-proxy", tests, setup, teardown));
}
