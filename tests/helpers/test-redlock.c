/* SPDX-License-Identifier: MIT */
/* Redlock masters for the tests: see test-redlock.h. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "test-redlock.h"

test_redlock *test_redlock_start(int n)
{
	test_redlock *rl = g_new0(test_redlock, 1);

	assert_true(n > 0 && n <= TEST_REDLOCK_MAX);
	rl->n = n;
	for (int i = 0; i < n; i++)
		rl->masters[i] = test_redis_start(NULL, NULL, false);
	return rl;
}

void test_redlock_stop(test_redlock *rl)
{
	for (int i = 0; i < rl->n; i++) {
		if (rl->stopped[i])
			test_redlock_thaw(rl, i);
		test_redis_stop(rl->masters[i]);
	}
	g_free(rl);
}

test_redlock *test_redlock_suite;

int test_redlock_suite_setup(void **state)
{
	test_redlock_suite = test_redlock_start(TEST_REDLOCK_SUITE_MASTERS);
	return 0;
}

int test_redlock_suite_teardown(void **state)
{
	test_redlock_stop(test_redlock_suite);
	test_redlock_suite = NULL;
	return 0;
}

char *test_redlock_uri(const test_redlock *rl, int n, const char *suffix)
{
	GString *uri = g_string_new("redis://");

	assert_true(n > 0 && n <= rl->n);
	for (int i = 0; i < n; i++)
		g_string_append_printf(uri, "%s127.0.0.1:%d", i ? "," : "", rl->masters[i]->port);
	g_string_append(uri, suffix ? suffix : "");
	return g_string_free(uri, FALSE);
}

void test_redlock_freeze(test_redlock *rl, int i)
{
	test_redis_signal(rl->masters[i], SIGSTOP);
	rl->stopped[i] = true;
}

void test_redlock_thaw(test_redlock *rl, int i)
{
	test_redis_signal(rl->masters[i], SIGCONT);
	rl->stopped[i] = false;
}

int test_redlock_count_key(test_redlock *rl, const char *key, char **ret_value)
{
	char *seen = NULL;
	int count = 0;

	for (int i = 0; i < rl->n; i++) {
		char *value;

		if (rl->stopped[i] || !rl->masters[i]->pid)
			continue;
		if (!(value = test_redis_str(rl->masters[i], "GET %s", key)))
			continue;
		count++;
		if (seen) {
			if (strcmp(seen, value) != 0)
				fail_msg("%s differs between masters: '%s' and '%s'", key, seen, value);
			g_free(value);
		} else {
			seen = value;
		}
	}
	if (ret_value)
		*ret_value = seen;
	else
		g_free(seen);
	return count;
}

void test_redlock_open(const test_redlock *rl, test_redlock_handle *h, int masters, const char *suffix,
                       const char *resource)
{
	char *uri = test_redlock_uri(rl, masters, suffix);

	if (dlock_client_new(uri, &h->client) != DLOCK_OK)
		fail_msg("dlock_client_new(%s): %s", uri, dlock_last_error_message());
	assert_int_equal(dlock_lock_new(h->client, resource, &h->lock), DLOCK_OK);
	g_free(uri);
}

void test_redlock_close(test_redlock_handle *h)
{
	dlock_lock_free(h->lock);
	dlock_client_free(h->client);
}

long long test_redlock_leftover_keys(test_redlock *rl, const char *prefix)
{
	long long found = 0;

	for (int i = 0; i < rl->n; i++) {
		long long here;

		if (rl->stopped[i])
			test_redlock_thaw(rl, i);
		if (!rl->masters[i]->pid)
			test_redis_resume(rl->masters[i]);
		if ((here = test_redis_leftover_keys(rl->masters[i], prefix)) < 0)
			return -1;
		found += here;
	}
	return found;
}

int test_redlock_revive(test_redlock *rl, bool (*gone)(void *), void *arg, const char *prefix)
{
	long long left;

	for (int i = 0; i < rl->n; i++)
		if (rl->stopped[i])
			test_redlock_thaw(rl, i);
	/* A test that failed half-way may leave background releases busy. */
	test_wait_until(gone, arg, 3000);
	left = test_redlock_leftover_keys(rl, prefix);
	if (left != 0)
		print_error("%lld keys of the suite left on the masters\n", left);
	return left == 0 ? 0 : -1;
}

/* A connect to 127.0.0.1:port that has not completed within timeout_ms. */
static bool connect_hangs(int port, int64_t timeout_ms, int *ret_fd)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };

	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		assert_int_equal(errno, EINPROGRESS);
	*ret_fd = fd;
	return poll(&pfd, 1, (int)timeout_ms) == 0;
}

test_dropping_port test_dropping_port_open(void)
{
	test_dropping_port d;
	int probe;

	d.port = test_silent_port(&d.listener);
	/* Backlog 0 admits one connection into the accept queue; with it
	 * there, the queue is full and the kernel drops every later SYN. */
	assert_int_equal(listen(d.listener, 0), 0);
	if (connect_hangs(d.port, 1000, &d.filler))
		fail_msg("the first connection to the dropping port did not complete");
	if (!connect_hangs(d.port, 200, &probe))
		fail_msg("a connect to the dropping port completed: SYNs are not dropped");
	close(probe);
	return d;
}

void test_dropping_port_close(test_dropping_port *d)
{
	close(d->filler);
	close(d->listener);
}
