/*
 * The Redis backend's key names (src/redis/backend.c): "<prefix>{R}", its
 * fencing counter "<prefix>{R}:fence" and release channel
 * "<prefix>{R}:released"; with key-format=plain, R, "R:fence" and
 * "R:released".  Peers and older dlock builds find a lock by these names.
 * tests/redis/test-keys.c checks them on a server; these need none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "redis/internal.h"

typedef char *(*name_fn)(const dlock__backend *b, const char *resource);

static void names(const char *prefix, bool plain, const char *resource, const char *key,
                  const char *fence, const char *channel)
{
	dlock__backend b = { .prefix = (char *)prefix, .plain_keys = plain };
	const struct {
		name_fn fn;
		const char *expected;
	} cases[] = {
		{ dlock__redis_key, key },
		{ dlock__redis_fence_key, fence },
		{ dlock__redis_channel, channel },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		char *name = cases[i].fn(&b, resource);

		assert_string_equal(name, cases[i].expected);
		g_free(name);
	}
}

/* The part of a key Redis Cluster hashes to pick its slot: the text
 * between the first '{' and the next '}', when not empty; g_free. */
static char *hash_tag(const char *key)
{
	const char *open = strchr(key, '{');
	const char *close = open ? strchr(open + 1, '}') : NULL;

	if (!close || close == open + 1)
		return g_strdup(key);
	return g_strndup(open + 1, (size_t)(close - open - 1));
}

static void test_default_keys_are_braced_after_the_prefix(void **state)
{
	names("dlock:", false, "jobs/nightly", "dlock:{jobs/nightly}", "dlock:{jobs/nightly}:fence",
	      "dlock:{jobs/nightly}:released");
}

static void test_prefix_replaces_dlock_before_the_braces(void **state)
{
	names("app:", false, "a", "app:{a}", "app:{a}:fence", "app:{a}:released");
	names("", false, "a", "{a}", "{a}:fence", "{a}:released");
}

static void test_plain_keys_are_the_bare_name_whatever_the_prefix(void **state)
{
	names("dlock:", true, "jobs/nightly", "jobs/nightly", "jobs/nightly:fence",
	      "jobs/nightly:released");
	names("app:", true, "a", "a", "a:fence", "a:released");
}

static void test_braced_keys_of_a_resource_share_one_cluster_slot(void **state)
{
	const char *resources[] = { "a", "a/b", "a:fence", "caf\xc3\xa9", "x y" };
	const char *prefixes[] = { "dlock:", "", "app:" };

	for (size_t p = 0; p < G_N_ELEMENTS(prefixes); p++) {
		dlock__backend b = { .prefix = (char *)prefixes[p] };

		for (size_t r = 0; r < G_N_ELEMENTS(resources); r++) {
			char *key = dlock__redis_key(&b, resources[r]);
			char *fence = dlock__redis_fence_key(&b, resources[r]);
			char *channel = dlock__redis_channel(&b, resources[r]);
			char *tag = hash_tag(key);
			char *fence_tag = hash_tag(fence);
			char *channel_tag = hash_tag(channel);

			assert_string_equal(tag, fence_tag);
			assert_string_equal(tag, channel_tag);
			g_free(key);
			g_free(fence);
			g_free(channel);
			g_free(tag);
			g_free(fence_tag);
			g_free(channel_tag);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_keys_are_braced_after_the_prefix),
		cmocka_unit_test(test_prefix_replaces_dlock_before_the_braces),
		cmocka_unit_test(test_plain_keys_are_the_bare_name_whatever_the_prefix),
		cmocka_unit_test(test_braced_keys_of_a_resource_share_one_cluster_slot),
	};

	return cmocka_run_group_tests_name("redis-keys", tests, NULL, NULL);
}
