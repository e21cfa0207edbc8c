/* Holder records and owner tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "parse.h"

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
	dlock__holder h = { (char *)"web-1", 42, 43, 1700000000123 };
	char *text = dlock__holder_describe(&h);

	assert_string_equal(text, "host=web-1 pid=42 tid=43 since=2023-11-14T22:13:20.123Z");
	g_free(text);
}

static void test_random_bytes_fill_the_buffer(void **state)
{
	unsigned char a[32] = { 0 }, b[32] = { 0 }, zero[32] = { 0 };

	dlock__random_bytes(a, sizeof(a));
	dlock__random_bytes(b, sizeof(b));
	assert_memory_not_equal(a, zero, sizeof(a));
	assert_memory_not_equal(a, b, sizeof(a));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_token_has_documented_form_and_round_trips),
		cmocka_unit_test(test_two_tokens_differ_in_their_random_part),
		cmocka_unit_test(test_token_parse_rejects_peer_values_and_malformed_tokens),
		cmocka_unit_test(test_holder_description_is_readable_utc),
		cmocka_unit_test(test_random_bytes_fill_the_buffer),
	};

	return cmocka_run_group_tests_name("holder", tests, NULL, NULL);
}
