/* SPDX-License-Identifier: MIT */
/*
 * The Redis backend's key names (src/redis/backend.c): "<prefix>{R}", its
 * fencing counter "<prefix>{R}:fence" and release channel
 * "<prefix>{R}:released"; with key-format=plain, R, "R:fence" and
 * "R:released".  Peers and older dlock builds find a lock by these names.
 * tests/redis/test-redis-keys.c checks them on a server; these need none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "redis/internal.h"


/* Every name of resource: key, fence, queue, release channel, the prefix
 * of the waits' channels and a semaphore's permits key, in that order. */
static void names(const char *prefix, bool plain, const char *resource, const char *const *expected)
{
	redis_backend b = { .prefix = (char *)prefix, .plain_keys = plain };
	redis_names n;
	const char *got[6];

	dlock__redis_names_init(&n, &b, resource);
	got[0] = n.key;
	got[1] = n.fence;
	got[2] = n.queue;
	got[3] = n.released;
	got[4] = n.wait;
	got[5] = n.permits;
	for (size_t i = 0; i < G_N_ELEMENTS(got); i++)
		assert_string_equal(got[i], expected[i]);
	dlock__redis_names_clear(&n);
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
	names("dlock:", false, "jobs/nightly",
	      (const char *const[]){ "dlock:{jobs/nightly}", "dlock:{jobs/nightly}:fence",
	                              "dlock:{jobs/nightly}:q", "dlock:{jobs/nightly}:released",
	                              "dlock:{jobs/nightly}:w:", "dlock:{jobs/nightly}:permits" });
}

static void test_prefix_replaces_dlock_before_the_braces(void **state)
{
	names("app:", false, "a",
	      (const char *const[]){ "app:{a}", "app:{a}:fence", "app:{a}:q", "app:{a}:released",
	                              "app:{a}:w:", "app:{a}:permits" });
	names("", false, "a", (const char *const[]){ "{a}", "{a}:fence", "{a}:q", "{a}:released", "{a}:w:",
	                                            "{a}:permits" });
}

static void test_plain_keys_are_the_bare_name_whatever_the_prefix(void **state)
{
	names("dlock:", true, "jobs/nightly",
	      (const char *const[]){ "jobs/nightly", "jobs/nightly:fence", "jobs/nightly:q",
	                              "jobs/nightly:released", "jobs/nightly:w:", "jobs/nightly:permits" });
	names("app:", true, "a",
	      (const char *const[]){ "a", "a:fence", "a:q", "a:released", "a:w:", "a:permits" });
}

static void test_braced_keys_of_a_resource_share_one_cluster_slot(void **state)
{
	const char *resources[] = { "a", "a/b", "a:fence", "caf\xc3\xa9", "x y" };
	const char *prefixes[] = { "dlock:", "", "app:" };

	for (size_t p = 0; p < G_N_ELEMENTS(prefixes); p++) {
		redis_backend b = { .prefix = (char *)prefixes[p] };

		for (size_t r = 0; r < G_N_ELEMENTS(resources); r++) {
			redis_names n;
			const char *others[] = { NULL, NULL, NULL, NULL, NULL };
			char *tag;

			dlock__redis_names_init(&n, &b, resources[r]);
			others[0] = n.fence;
			others[1] = n.queue;
			others[2] = n.released;
			others[3] = n.wait;
			others[4] = n.permits;
			tag = hash_tag(n.key);
			for (size_t i = 0; i < G_N_ELEMENTS(others); i++) {
				char *other_tag = hash_tag(others[i]);

				assert_string_equal(tag, other_tag);
				g_free(other_tag);
			}
			g_free(tag);
			dlock__redis_names_clear(&n);
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

	return cmocka_run_group_tests_name("redis-key-names", tests, NULL, NULL);
}
