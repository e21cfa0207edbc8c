/* SPDX-License-Identifier: MIT */
/*
 * The file backend's lock file names (src/file/backend.c): "r-" and the
 * resource name with every byte outside [A-Za-z0-9._-] escaped as %XX, or
 * "h-" and the SHA-256 of the name when that would pass NAME_MAX.  Two
 * resources never share a file, and no name leaves the directory.  Other
 * processes (older or newer dlock builds) find a lock by this name, so the
 * form itself is part of the contract.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "file/internal.h"

#define DIR "/locks"

/* The file name (the path less DIR "/") of resource; g_free. */
static char *file_name(const char *resource)
{
	file_backend b = { .dir = (char *)DIR };
	char *path = dlock__file_path(&b, resource);
	char *name;

	assert_true(g_str_has_prefix(path, DIR "/"));
	name = g_strdup(path + strlen(DIR "/"));
	g_free(path);
	if (strchr(name, '/') || strlen(name) > NAME_MAX || strlen(name) < 3)
		fail_msg("'%s' maps to '%s', not one entry of the directory", resource, name);
	return name;
}

static void maps_to(const char *resource, const char *expected)
{
	char *name = file_name(resource);

	assert_string_equal(name, expected);
	g_free(name);
}

static char *repeat(char c, size_t n)
{
	char *s = g_malloc(n + 1);

	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static void test_plain_names_keep_their_letters(void **state)
{
	maps_to("a", "r-a");
	maps_to("Ledger.2026_11-eu", "r-Ledger.2026_11-eu");
	maps_to(".a", "r-.a");
}

static void test_other_bytes_are_escaped_slash_included(void **state)
{
	maps_to("a/b", "r-a%2Fb");
	maps_to("a/b/c", "r-a%2Fb%2Fc");
	maps_to("a%2Fb", "r-a%252Fb");
	maps_to("a b:c", "r-a%20b%3Ac");
	maps_to("caf\xc3\xa9", "r-caf%C3%A9");
}

static void test_names_that_would_pass_name_max_are_hashed(void **state)
{
	char *fits = repeat('x', NAME_MAX - 2);
	char *hashed = repeat('x', NAME_MAX - 1);
	char *expected = g_strconcat("r-", fits, NULL);

	maps_to(fits, expected);
	/* sha256sum of 254 'x' bytes: a change of hash strands held locks. */
	maps_to(hashed, "h-af97a1a6ca66df0bc0d0ae024383edea1ea899f3715b4e016f6898296c5cade6");
	g_free(fits);
	g_free(hashed);
	g_free(expected);
}

static void test_escapes_count_towards_name_max(void **state)
{
	char *x249 = repeat('x', NAME_MAX - 6);
	char *fits = g_strconcat(x249, "/y", NULL);      /* r- + 249 + %2F + y = 255 */
	char *over = g_strconcat(x249, "x/y", NULL);     /* 256 */
	char *expected = g_strconcat("r-", x249, "%2Fy", NULL);
	char *name;

	maps_to(fits, expected);
	name = file_name(over);
	assert_true(g_str_has_prefix(name, "h-"));
	assert_int_equal(strlen(name), 2 + 64);
	g_free(name);
	g_free(x249);
	g_free(fits);
	g_free(over);
	g_free(expected);
}

static void test_no_two_resources_share_a_file(void **state)
{
	GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
	GHashTable *files = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	GString *euros = g_string_new(NULL);

	/* 85 three-byte characters: 255 bytes, 765 once escaped. */
	for (int i = 0; i < 85; i++)
		g_string_append(euros, "\xe2\x82\xac");
	g_ptr_array_add(names, g_strdup(euros->str));
	g_string_truncate(euros, euros->len - 3);
	g_string_append(euros, "\xe2\x82\xad"); /* the last character differs */
	g_ptr_array_add(names, g_string_free(euros, FALSE));
	for (const char *const *s = (const char *const[]){ "a", "a/b", "a/b/c", "a%2Fb", "a%2fb", "a_2Fb",
	                                                    "a%252Fb", "ab", "a.b", "A", "r-a", "h-a",
	                                                    "a/b%2Fc", "a%2Fb/c", NULL };
	     *s; s++)
		g_ptr_array_add(names, g_strdup(*s));
	g_ptr_array_add(names, repeat('x', NAME_MAX - 1));
	g_ptr_array_add(names, repeat('x', NAME_MAX));
	g_ptr_array_add(names, repeat('y', NAME_MAX - 1));

	for (guint i = 0; i < names->len; i++) {
		const char *resource = names->pdata[i];
		char *name = file_name(resource);

		if (!g_hash_table_add(files, name))
			fail_msg("'%s' maps to '%s', which another resource has", resource, name);
	}
	g_hash_table_unref(files);
	g_ptr_array_unref(names);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_names_keep_their_letters),
		cmocka_unit_test(test_other_bytes_are_escaped_slash_included),
		cmocka_unit_test(test_names_that_would_pass_name_max_are_hashed),
		cmocka_unit_test(test_escapes_count_towards_name_max),
		cmocka_unit_test(test_no_two_resources_share_a_file),
	};

	return cmocka_run_group_tests_name("file-names", tests, NULL, NULL);
}
