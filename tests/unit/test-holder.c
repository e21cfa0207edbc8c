/* SPDX-License-Identifier: MIT */
/* Holder records and owner tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "parse.h"
#include "thread.h"

static void test_token_has_documented_form_and_round_trips(void **state)
{
	dlock__holder self, back;
	char *token;
	GRegex *re = g_regex_new("^dlock1:[0-9a-f]{32}:[0-9]+:[0-9]+:[0-9]+:.+$", 0, 0, NULL);

	dlock__holder_init_self(&self);
	g_free(self.host);
	self.host = g_strdup("db:7"); /* the host comes last and may hold ':' */
	token = dlock__token_new(&self);
	assert_true(g_regex_match(re, token, 0, NULL));
	assert_true(dlock__token_parse(token, &back));
	assert_int_equal(back.pid, getpid());
	assert_int_equal(back.tid, self.tid);
	assert_int_equal(back.since_ms, self.since_ms);
	assert_string_equal(back.host, "db:7");
	dlock__holder_clear(&back);
	dlock__holder_clear(&self);
	g_regex_unref(re);
	g_free(token);
}

static void test_two_tokens_differ_in_their_random_part(void **state)
{
	dlock__holder self;
	char *a, *b;

	dlock__holder_init_self(&self);
	a = dlock__token_new(&self);
	b = dlock__token_new(&self);
	assert_string_not_equal(a, b);
	assert_memory_not_equal(a + 7, b + 7, 32);
	g_free(a);
	g_free(b);
	dlock__holder_clear(&self);
}

static void test_token_parse_rejects_peer_values_and_malformed_tokens(void **state)
{
	const char *bad[] = {
		"5f0cbd1c0ba54dcdb5b4f1d3e3a1e0b2", /* a redis-py token */
		"dlock2:0123456789abcdef0123456789abcdef:1:2:3:h",
		"dlock1:0123456789ABCDEF0123456789abcdef:1:2:3:h",
		"dlock1:0123456789abcdef0123456789abcde:1:2:3:h",
		"dlock1:0123456789abcdef0123456789abcdeg:1:2:3:h",
		"dlock1:0123456789abcdef0123456789abcdef:x:2:3:h",
		"dlock1:0123456789abcdef0123456789abcdef:-1:2:3:h",
		"dlock1:0123456789abcdef0123456789abcdef::2:3:h",
		"dlock1:0123456789abcdef0123456789abcdef:1:2:3:",
		"dlock1:0123456789abcdef0123456789abcdef:1:2:3",
		"dlock1:0123456789abcdef0123456789abcdef:99999999999999999999:2:3:h",
		"",
	};
	dlock__holder h;

	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++)
		if (dlock__token_parse(bad[i], &h))
			fail_msg("'%s' parsed", bad[i]);
	assert_false(dlock__token_parse(NULL, &h));
}

static void test_holder_description_is_readable_utc(void **state)
{
	dlock__holder h = { (char *)"web-1", 42, 43, 1700000000123, NULL };
	char *text = dlock__holder_describe(&h);

	assert_string_equal(text, "host=web-1 pid=42 tid=43 since=2023-11-14T22:13:20.123Z");
	g_free(text);
}

/* An election participant's id rides after the host, spaces and all, and
 * comes back from the token and in the description. */
static void test_participant_id_round_trips_through_the_token(void **state)
{
	dlock__holder self, back;
	char *token, *text;

	dlock__holder_init_self(&self);
	self.id = g_strdup("web 1 id=x");
	g_free(self.host);
	self.host = g_strdup("db:7");
	token = dlock__token_new(&self);
	assert_true(g_str_has_suffix(token, ":db:7 id=web 1 id=x"));
	assert_true(dlock__token_parse(token, &back));
	assert_string_equal(back.host, "db:7");
	assert_string_equal(back.id, "web 1 id=x");
	text = dlock__holder_describe(&back);
	assert_true(g_str_has_suffix(text, "Z id=web 1 id=x"));
	g_free(text);
	dlock__holder_clear(&back);
	g_free(token);
	/* A lock's token has no id, and a host cannot be empty before one. */
	g_free(self.id);
	self.id = NULL;
	token = dlock__token_new(&self);
	assert_true(dlock__token_parse(token, &back));
	assert_null(back.id);
	dlock__holder_clear(&back);
	g_free(token);
	assert_false(dlock__token_parse("dlock1:0123456789abcdef0123456789abcdef:1:2:3: id=x", &back));
	dlock__holder_clear(&self);
}

static void test_random_bytes_fill_the_buffer(void **state)
{
	unsigned char a[32] = { 0 }, b[32] = { 0 }, zero[32] = { 0 };

	dlock__random_bytes(a, sizeof(a));
	dlock__random_bytes(b, sizeof(b));
	assert_memory_not_equal(a, zero, sizeof(a));
	assert_memory_not_equal(a, b, sizeof(a));
}

/* Draws that span the per-thread pool's refills, of odd sizes, never
 * repeat a block: no byte of the pool is handed out twice. */
static void test_random_draws_across_refills_do_not_repeat(void **state)
{
	enum { DRAWS = 200, SIZE = 23 };
	static unsigned char draws[DRAWS][SIZE];
	unsigned char big[1000];

	for (int i = 0; i < DRAWS; i++)
		dlock__random_bytes(draws[i], SIZE);
	for (int i = 0; i < DRAWS; i++)
		for (int j = i + 1; j < DRAWS; j++)
			assert_memory_not_equal(draws[i], draws[j], SIZE);
	/* Larger than the pool: filled whole. */
	memset(big, 0, sizeof(big));
	dlock__random_bytes(big, sizeof(big));
	for (size_t k = 0; k + 16 <= sizeof(big); k += 16) {
		static const unsigned char zero[16];

		assert_memory_not_equal(big + k, zero, 16);
	}
}

/*
 * A forked child has its own pid and thread id and does not draw the
 * random bytes its parent has left in the pool: the parent's next draw
 * and the child's first differ (without the fork handler they would be
 * the same bytes, and the tokens would differ only by pid).
 */
static void test_forked_child_gets_its_own_ids_and_random_bytes(void **state)
{
	unsigned char first[16], mine[16], childs[16];
	/* "y|n HEX\n" and a NUL the read leaves alone, so sscanf() stops. */
	char report[3 + 2 * 16 + 1] = "";
	int fds[2];
	pid_t pid;

	assert_int_equal(dlock__self_pid(), getpid());
	assert_int_equal(dlock__self_tid(), gettid());
	dlock__random_bytes(first, sizeof(first)); /* the pool now has bytes left */
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		bool ok = dlock__self_pid() == getpid() && dlock__self_tid() == gettid() &&
		          dlock__self_pid() != getppid();
		char line[sizeof(report) - 1];

		dlock__random_bytes(childs, sizeof(childs));
		line[0] = ok ? 'y' : 'n';
		line[1] = ' ';
		for (size_t i = 0; i < sizeof(childs); i++)
			g_snprintf(line + 2 + 2 * i, 3, "%02x", childs[i]);
		line[sizeof(line) - 1] = '\n';
		_exit(write(fds[1], line, sizeof(line)) == (ssize_t)sizeof(line) ? 0 : 1);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], report, sizeof(report) - 1), (ssize_t)sizeof(report) - 1);
	close(fds[0]);
	waitpid(pid, NULL, 0);
	assert_int_equal(report[0], 'y');
	dlock__random_bytes(mine, sizeof(mine));
	for (size_t i = 0; i < sizeof(childs); i++) {
		unsigned int v;

		assert_int_equal(sscanf(report + 2 + 2 * i, "%2x", &v), 1);
		childs[i] = (unsigned char)v;
	}
	assert_memory_not_equal(mine, childs, sizeof(mine));
	assert_int_equal(dlock__self_pid(), getpid());
}

static gpointer tid_of_thread(gpointer data)
{
	pid_t *ids = data;

	ids[0] = dlock__self_tid();
	ids[1] = gettid();
	return NULL;
}

static void test_each_thread_has_its_own_tid(void **state)
{
	pid_t ids[2];
	GThread *t = g_thread_new("tid", tid_of_thread, ids);

	g_thread_join(t);
	assert_int_equal(ids[0], ids[1]);
	assert_int_not_equal(ids[0], dlock__self_tid());
	assert_int_equal(dlock__self_tid(), gettid());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_token_has_documented_form_and_round_trips),
		cmocka_unit_test(test_two_tokens_differ_in_their_random_part),
		cmocka_unit_test(test_token_parse_rejects_peer_values_and_malformed_tokens),
		cmocka_unit_test(test_holder_description_is_readable_utc),
		cmocka_unit_test(test_participant_id_round_trips_through_the_token),
		cmocka_unit_test(test_random_bytes_fill_the_buffer),
		cmocka_unit_test(test_random_draws_across_refills_do_not_repeat),
		cmocka_unit_test(test_forked_child_gets_its_own_ids_and_random_bytes),
		cmocka_unit_test(test_each_thread_has_its_own_tid),
	};

	return cmocka_run_group_tests_name("holder", tests, NULL, NULL);
}
