/* SPDX-License-Identifier: MIT */
/* Waiter processes and a look at a Redis wait queue: see test-waiters.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
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
#include "test-waiters.h"

/* ---- worker side ---- */

static void say(const char *what, const char *detail)
{
	printf("%s %s\n", what, detail);
	fflush(stdout);
}

/* Hold for hold_ms, or until a line or the end of stdin. */
static void hold_for(int64_t hold_ms)
{
	char line[64];

	if (hold_ms == TEST_WAITER_HOLD_UNTIL_TOLD) {
		if (!fgets(line, sizeof(line), stdin))
			line[0] = '\0';
	} else if (hold_ms > 0) {
		g_usleep((gulong)hold_ms * 1000);
	}
}

int test_waiter_worker(char **argv)
{
	const char *marker = argv[4];
	bool marked = strcmp(marker, "-") != 0;
	dlock_client *client;
	dlock_lock *lock;
	char token[32];
	int rc;

	if (dlock_client_new(argv[0], &client) != DLOCK_OK ||
	    dlock_lock_new(client, argv[1], &lock) != DLOCK_OK)
		return 2;
	rc = dlock_acquire(lock, g_ascii_strtoll(argv[2], NULL, 10));
	if (rc != DLOCK_OK) {
		say("failed", dlock_code_name(rc));
	} else {
		int fd = marked ? open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
		bool overlap = marked && fd < 0 && errno == EEXIST;

		g_snprintf(token, sizeof(token), "%" PRIu64, dlock_fencing_token(lock));
		say(overlap ? "overlap" : "granted", token);
		if (fd >= 0)
			close(fd);
		hold_for(g_ascii_strtoll(argv[3], NULL, 10));
		/* Gone before the release, which may hand the lock on at once. */
		if (marked && !overlap)
			unlink(marker);
		say("released", dlock_code_name(dlock_release(lock)));
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	return 0;
}

bool test_waiter_worker_main(int argc, char **argv, int *ret_status)
{
	if (argc < 8 || strcmp(argv[1], "--worker") != 0 || strcmp(argv[2], "waiter") != 0)
		return false;
	*ret_status = test_waiter_worker(argv + 3);
	return true;
}

/* ---- test side ---- */

/* Waiters started and not yet ended, for test_waiters_kill_all(). */
static GArray *running;

static void forget(pid_t pid)
{
	for (guint i = 0; running && i < running->len; i++) {
		if (g_array_index(running, pid_t, i) == pid) {
			g_array_remove_index_fast(running, i);
			return;
		}
	}
}

void test_waiters_kill_all(void)
{
	while (running && running->len) {
		pid_t pid = g_array_index(running, pid_t, 0);

		kill(pid, SIGKILL);
		test_wait_child(pid, NULL);
		forget(pid);
	}
}

void test_waiter_start(test_waiter *w, const char *uri, const char *resource, int64_t wait_ms,
                       int64_t hold_ms, const char *marker)
{
	char wait_text[24], hold_text[24];
	const char *args[] = { "waiter", uri, resource, wait_text, hold_text, marker ? marker : "-",
		               NULL };

	g_snprintf(wait_text, sizeof(wait_text), "%" PRId64, wait_ms);
	g_snprintf(hold_text, sizeof(hold_text), "%" PRId64, hold_ms);
	memset(w, 0, sizeof(*w));
	w->pid = test_spawn_worker_io(args, &w->in_fd, &w->out_fd);
	if (!running)
		running = g_array_new(FALSE, FALSE, sizeof(pid_t));
	g_array_append_val(running, w->pid);
}

void test_waiter_line(test_waiter *w, char *buf, size_t len, int64_t timeout_ms)
{
	if (!test_read_line(w->out_fd, buf, len, timeout_ms))
		fail_msg("waiter %d said nothing within %" PRId64 " ms", (int)w->pid, timeout_ms);
	w->at_ms = test_now_ms();
}

uint64_t test_waiter_granted(test_waiter *w, int64_t timeout_ms)
{
	char line[64];

	test_waiter_line(w, line, sizeof(line), timeout_ms);
	if (!g_str_has_prefix(line, "granted "))
		fail_msg("waiter %d: \"%s\", not granted", (int)w->pid, line);
	w->token = g_ascii_strtoull(line + 8, NULL, 10);
	return w->token;
}

bool test_waiter_spoke(const test_waiter *w)
{
	struct pollfd p = { .fd = w->out_fd, .events = POLLIN };

	return poll(&p, 1, 0) > 0;
}

void test_waiter_release(test_waiter *w)
{
	char line[64];

	assert_true(test_write_str(w->in_fd, "release\n"));
	test_waiter_line(w, line, sizeof(line), 10000);
	if (strcmp(line, "released DLOCK_OK") != 0)
		fail_msg("waiter %d: \"%s\" on release", (int)w->pid, line);
}

int test_waiters_next(test_waiter *ws, int n, char *buf, size_t len, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + timeout_ms * test_slack_factor();
	struct pollfd *p = g_new0(struct pollfd, n);

	/* A waiter that has ended and said everything is left out. */
	for (int i = 0; i < n; i++) {
		p[i].fd = ws[i].pid ? ws[i].out_fd : -1;
		p[i].events = POLLIN;
	}
	for (;;) {
		int64_t left = until - test_now_ms();

		if (left <= 0 || poll(p, (nfds_t)n, (int)left) < 0)
			break;
		for (int i = 0; i < n; i++) {
			if (p[i].revents & POLLIN) {
				g_free(p);
				test_waiter_line(&ws[i], buf, len, 1000);
				return i;
			}
			if (p[i].revents)
				p[i].fd = -1;
		}
	}
	g_free(p);
	fail_msg("none of %d waiters said anything within %" PRId64 " ms", n, timeout_ms);
	return -1;
}

void test_waiter_finish(test_waiter *w)
{
	close(w->in_fd);
	forget(w->pid);
	assert_int_equal(test_wait_worker(w->pid), 0);
	close(w->out_fd);
	w->pid = 0;
}

void test_waiter_kill(test_waiter *w)
{
	kill(w->pid, SIGKILL);
	test_wait_child(w->pid, NULL);
	forget(w->pid);
	close(w->in_fd);
	close(w->out_fd);
	w->pid = 0;
}

char *test_marker_new(void)
{
	char *dir = g_dir_make_tmp("dlock-marker-XXXXXX", NULL);
	char *marker;

	assert_non_null(dir);
	marker = g_build_filename(dir, "holder", NULL);
	g_free(dir);
	return marker;
}

void test_marker_free(char *marker)
{
	char *dir = g_path_get_dirname(marker);

	unlink(marker);
	rmdir(dir);
	g_free(dir);
	g_free(marker);
}

static char *queue_marker;

int test_queue_main(int argc, char **argv, const char *name, const struct CMUnitTest *tests,
                    size_t count, test_redis **ret_server, char **ret_uri, char **ret_marker)
{
	int status;

	test_init(argv[0]);
	if (test_waiter_worker_main(argc, argv, &status))
		return status;
	*ret_server = test_redis_start(NULL, NULL, false);
	*ret_uri = test_redis_uri(*ret_server, NULL);
	*ret_marker = queue_marker = test_marker_new();
	status = _cmocka_run_group_tests(name, tests, count, NULL, NULL);
	test_marker_free(queue_marker);
	queue_marker = NULL;
	g_free(*ret_uri);
	test_redis_stop(*ret_server);
	return test_finish(status);
}

int test_queue_reset(void **state)
{
	test_waiters_kill_all();
	if (queue_marker)
		unlink(queue_marker);
	return 0;
}

/* ---- a waiter thread of this process ---- */

struct test_acquire_thread {
	dlock_lock *lock;
	int64_t wait_ms;
	int rc;
	gint done;
	GThread *thread;
};

static gpointer acquire_main(gpointer data)
{
	test_acquire_thread *t = data;

	t->rc = dlock_acquire(t->lock, t->wait_ms);
	g_atomic_int_set(&t->done, 1);
	return NULL;
}

test_acquire_thread *test_acquire_thread_start(dlock_lock *lock, int64_t wait_ms)
{
	test_acquire_thread *t = g_new0(test_acquire_thread, 1);

	t->lock = lock;
	t->wait_ms = wait_ms;
	t->thread = g_thread_new("waiter", acquire_main, t);
	return t;
}

bool test_acquire_thread_done(test_acquire_thread *t)
{
	return g_atomic_int_get(&t->done) != 0;
}

static bool thread_done(void *arg)
{
	return test_acquire_thread_done(arg);
}

int test_acquire_thread_join(test_acquire_thread *t, int64_t timeout_ms)
{
	int rc;

	if (!test_wait_until(thread_done, t, timeout_ms))
		fail_msg("the waiter thread is still in dlock_acquire after %" PRId64 " ms", timeout_ms);
	g_thread_join(t->thread);
	rc = t->rc;
	g_free(t);
	return rc;
}

/* ---- this process as a holder ---- */

void test_holder_open(test_holder *h, const char *uri, const char *resource, const char *marker)
{
	h->marker = marker;
	assert_int_equal(dlock_client_new(uri, &h->client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(h->client, resource, &h->lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(h->lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
}

void test_holder_take(test_holder *h)
{
	int fd;

	assert_int_equal(dlock_acquire(h->lock, 0), DLOCK_OK);
	if (!h->marker)
		return;
	fd = open(h->marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		fail_msg("marker %s: %s: another holder has the lock", h->marker, g_strerror(errno));
	close(fd);
}

void test_holder_release(test_holder *h, int expect_rc)
{
	int rc;

	if (h->marker)
		unlink(h->marker);
	rc = dlock_release(h->lock);
	if (rc != expect_rc)
		fail_msg("release: %s, not %s", dlock_code_name(rc), dlock_code_name(expect_rc));
}

void test_holder_close(test_holder *h)
{
	dlock_lock_free(h->lock);
	dlock_client_free(h->client);
}

/* ---- the queue ---- */

long long test_queue_len(test_redis *r, const char *key)
{
	return test_redis_int(r, "ZCARD %s:q", key);
}

typedef struct queue_len_check {
	test_redis *r;
	const char *key;
	long long n;
} queue_len_check;

static bool queue_has_len(void *arg)
{
	queue_len_check *c = arg;

	return test_queue_len(c->r, c->key) == c->n;
}

void test_queue_wait_len(test_redis *r, const char *key, long long n, int64_t timeout_ms)
{
	queue_len_check c = { r, key, n };

	if (!test_wait_until(queue_has_len, &c, timeout_ms))
		fail_msg("the queue %s:q has %lld entries after %" PRId64 " ms, not %lld", key,
		         test_queue_len(r, key), timeout_ms, n);
}

pid_t test_token_pid(const char *token)
{
	/* "dlock1:" + 32 hex digits + ':' */
	const size_t pid_at = 7 + 32 + 1;

	if (!token || !g_str_has_prefix(token, "dlock1:") || strlen(token) <= pid_at)
		return -1;
	return (pid_t)g_ascii_strtoll(token + pid_at, NULL, 10);
}

char *test_queue_entry_id(test_redis *r, const char *key, pid_t pid)
{
	redisReply *reply = test_redis_cmd(r, "ZRANGE %s:q 0 -1", key);
	char *id = NULL;

	assert_non_null(reply);
	for (size_t i = 0; reply->type == REDIS_REPLY_ARRAY && i < reply->elements && !id; i++) {
		gchar **fields = g_strsplit(reply->element[i]->str, "|", 4);

		if (g_strv_length(fields) == 4 && test_token_pid(fields[3]) == pid)
			id = g_strdup(fields[2]);
		g_strfreev(fields);
	}
	freeReplyObject(reply);
	return id;
}

pid_t test_lock_holder_pid(test_redis *r, const char *key)
{
	char *value = test_redis_str(r, "GET %s", key);
	pid_t pid = test_token_pid(value);

	g_free(value);
	return pid;
}

void test_queue_waiter_start(test_redis *r, test_waiter *w, const char *key, const char *uri,
                             const char *resource, int64_t wait_ms, long long n, const char *marker)
{
	test_waiter_start(w, uri, resource, wait_ms, TEST_WAITER_HOLD_UNTIL_TOLD, marker);
	test_queue_wait_len(r, key, n, 5000);
}

void test_queue_release_to(test_redis *r, test_holder *h, test_waiter *w, const char *key,
                           int64_t bound_ms)
{
	int64_t t0 = test_now_ms();

	test_holder_release(h, DLOCK_OK);
	test_waiter_granted(w, 10000);
	print_message("the next waiter got the lock %" PRId64 " ms after the release\n", w->at_ms - t0);
	assert_true(w->at_ms - t0 < bound_ms);
	assert_int_equal(test_queue_len(r, key), 0);
	test_waiter_release(w);
	test_waiter_finish(w);
}

static bool lock_and_queue_gone(void *arg)
{
	queue_len_check *c = arg;

	return test_redis_int(c->r, "EXISTS %s %s:q", c->key, c->key) == 0;
}

void test_queue_assert_only_fence(test_redis *r, const char *key)
{
	queue_len_check c = { r, key, 0 };

	if (!test_wait_until(lock_and_queue_gone, &c, 2000))
		fail_msg("left over: %s %s, %s:q %s (%lld entries)", key,
		         test_redis_int(r, "EXISTS %s", key) ? "exists" : "gone", key,
		         test_redis_int(r, "EXISTS %s:q", key) ? "exists" : "gone", test_queue_len(r, key));
	assert_int_equal(test_redis_int(r, "EXISTS %s:fence", key), 1);
}
