/* SPDX-License-Identifier: MIT */
/*
 * Result codes: every code of enum dlock_code, as the public header
 * declares it, has its own name and its own message; anything else is
 * unknown.  The codes are read from the header itself (DLOCK_HEADER), so
 * a code added there without a name and a text fails here.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"

typedef struct declared_code {
	char *name;
	int value;
} declared_code;

/* The enumerators of enum dlock_code, in header order. */
static GArray *declared_codes(void)
{
	GArray *codes = g_array_new(FALSE, FALSE, sizeof(declared_code));
	GError *error = NULL;
	char *text = NULL;
	const char *start, *end;
	char *body;
	GRegex *re;
	GMatchInfo *match;

	if (!g_file_get_contents(DLOCK_HEADER, &text, NULL, &error))
		fail_msg("%s: %s", DLOCK_HEADER, error->message);
	start = strstr(text, "typedef enum dlock_code {");
	assert_non_null(start);
	end = strstr(start, "} dlock_code;");
	assert_non_null(end);
	body = g_strndup(start, (size_t)(end - start));
	re = g_regex_new("\\b(DLOCK_[A-Z_]+)\\s*=\\s*(-?[0-9]+)", 0, 0, NULL);
	g_regex_match(re, body, 0, &match);
	while (g_match_info_matches(match)) {
		char *value = g_match_info_fetch(match, 2);
		declared_code code = { g_match_info_fetch(match, 1), atoi(value) };

		g_array_append_val(codes, code);
		g_free(value);
		g_match_info_next(match, NULL);
	}
	g_match_info_free(match);
	g_regex_unref(re);
	g_free(body);
	g_free(text);
	return codes;
}

static void free_codes(GArray *codes)
{
	for (guint i = 0; i < codes->len; i++)
		g_free(g_array_index(codes, declared_code, i).name);
	g_array_free(codes, TRUE);
}

static void test_every_declared_code_has_its_own_name_and_message(void **state)
{
	GArray *codes = declared_codes();
	GHashTable *messages = g_hash_table_new(g_str_hash, g_str_equal);

	/* DLOCK_OK to DLOCK_ECANCELED at least; more only ever at the end. */
	assert_true(codes->len >= 10);
	for (guint i = 0; i < codes->len; i++) {
		const declared_code *c = &g_array_index(codes, declared_code, i);
		const char *message = dlock_strerror(c->value);

		assert_string_equal(dlock_code_name(c->value), c->name);
		assert_non_null(message);
		if (message[0] == '\0' || strcmp(message, "unknown error") == 0)
			fail_msg("%s (%d) has no message of its own: '%s'", c->name, c->value, message);
		if (!g_hash_table_add(messages, (gpointer)message))
			fail_msg("%s (%d) shares its message '%s' with another code", c->name, c->value,
			         message);
	}
	g_hash_table_unref(messages);
	free_codes(codes);
}

static void test_declared_codes_are_zero_then_one_step_down_each(void **state)
{
	GArray *codes = declared_codes();

	for (guint i = 0; i < codes->len; i++)
		assert_int_equal(g_array_index(codes, declared_code, i).value, -(int)i);
	assert_int_equal(g_array_index(codes, declared_code, 0).value, DLOCK_OK);
	free_codes(codes);
}

static void unknown(int code)
{
	assert_string_equal(dlock_strerror(code), "unknown error");
	assert_string_equal(dlock_code_name(code), "DLOCK_E?");
}

static void test_codes_outside_the_enum_are_unknown(void **state)
{
	GArray *codes = declared_codes();
	int past_last = g_array_index(codes, declared_code, codes->len - 1).value - 1;

	unknown(past_last);
	unknown(1);
	unknown(5);
	unknown(-1000);
	unknown(INT_MIN);
	unknown(INT_MAX);
	free_codes(codes);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_declared_code_has_its_own_name_and_message),
		cmocka_unit_test(test_declared_codes_are_zero_then_one_step_down_each),
		cmocka_unit_test(test_codes_outside_the_enum_are_unknown),
	};

	return cmocka_run_group_tests_name("error", tests, NULL, NULL);
}
