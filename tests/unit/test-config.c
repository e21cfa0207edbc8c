/* SPDX-License-Identifier: MIT */
/*
 * Configuration files and routing: every error is found when the client
 * is built and named by file, group and key; routes pick backends in file
 * order.  No server is contacted: building a client does no I/O.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "config.h"
#include "dlock.h"

static char *dir;

static char *write_config(const char *name, const char *text)
{
	char *path = g_build_filename(dir, name, NULL);

	assert_true(g_file_set_contents(path, text, -1, NULL));
	return path;
}

/* Build a client from text; return its code, keep the message. */
static int client_from(const char *text, dlock_client **ret)
{
	char *path = write_config("dlock.conf", text);
	dlock_client *client = NULL;
	int rc = dlock_client_new(path, &client);

	g_free(path);
	if (ret)
		*ret = client;
	else
		dlock_client_free(client);
	return rc;
}

static void assert_message_has(const char *a, const char *b, const char *c)
{
	const char *m = dlock_last_error_message();

	if (a && !strstr(m, a))
		fail_msg("message '%s' lacks '%s'", m, a);
	if (b && !strstr(m, b))
		fail_msg("message '%s' lacks '%s'", m, b);
	if (c && !strstr(m, c))
		fail_msg("message '%s' lacks '%s'", m, c);
}

static const char good[] =
	"[defaults]\n"
	"backend = cache\n"
	"wait = 30s\n"
	"\n"
	"[backend cache]\n"
	"url = redis://127.0.0.1:6379/0?ttl=10s\n"
	"\n"
	"[backend strong]\n"
	"url = redis://127.0.0.1:6380\n"
	"command-timeout = 2s\n"
	"\n"
	"[route payments]\n"
	"match = payments/*\n"
	"backend = strong\n";

static void test_glob_star_crosses_slashes_and_question_is_one_char(void **state)
{
	assert_true(dlock__glob_match("payments/*", "payments/eu/ledger"));
	assert_true(dlock__glob_match("*", "a/b/c"));
	assert_true(dlock__glob_match("a?c", "abc"));
	assert_false(dlock__glob_match("a?c", "ac"));
	assert_false(dlock__glob_match("payments/*", "payment/x"));
	assert_true(dlock__glob_match("*/ledger", "eu/x/ledger"));
	assert_false(dlock__glob_match("*/ledger", "eu/x/ledgers"));
	assert_true(dlock__glob_match("a*b*c", "a-b-b-c"));
}

static void test_glob_covers_detects_only_real_shadowing(void **state)
{
	assert_true(dlock__glob_covers("*", "payments/*"));
	assert_true(dlock__glob_covers("payments/*", "payments/eu/*"));
	assert_true(dlock__glob_covers("payments/*", "payments/ledger"));
	assert_true(dlock__glob_covers("a?c", "abc"));
	assert_true(dlock__glob_covers("x", "x"));
	assert_false(dlock__glob_covers("payments/eu/*", "payments/*"));
	assert_false(dlock__glob_covers("abc", "a?c"));
	assert_false(dlock__glob_covers("a*", "*a"));
	assert_false(dlock__glob_covers("fast/*", "strong/*"));
}

/* Every name of up to max_len characters over "ab/" that later matches. */
static bool later_names_all_match_earlier(const char *earlier, const char *later, GString *name, int max_len)
{
	static const char alphabet[] = "ab/";

	if (dlock__glob_match(later, name->str) && !dlock__glob_match(earlier, name->str))
		return false;
	if ((int)name->len == max_len)
		return true;
	for (int i = 0; alphabet[i]; i++) {
		bool ok;

		g_string_append_c(name, alphabet[i]);
		ok = later_names_all_match_earlier(earlier, later, name, max_len);
		g_string_truncate(name, name->len - 1);
		if (!ok)
			return false;
	}
	return true;
}

/*
 * Soundness: whenever covers says yes, no name up to 6 characters is
 * matched by the later pattern and missed by the earlier one.  Also
 * checked: every pattern covers itself, and '*' covers everything.
 */
static void test_glob_covers_is_sound_on_many_small_patterns(void **state)
{
	static const char symbols[] = "ab/*?";
	GRand *rand = g_rand_new_with_seed(20261123);
	GString *name = g_string_new(NULL);
	int yes = 0;

	for (int n = 0; n < 4000; n++) {
		char a[6] = { 0 }, b[6] = { 0 };
		int la = g_rand_int_range(rand, 0, 5), lb = g_rand_int_range(rand, 0, 5);

		for (int i = 0; i < la; i++)
			a[i] = symbols[g_rand_int_range(rand, 0, 5)];
		for (int i = 0; i < lb; i++)
			b[i] = symbols[g_rand_int_range(rand, 0, 5)];
		assert_true(dlock__glob_covers(a, a));
		assert_true(dlock__glob_covers("*", b));
		if (!dlock__glob_covers(a, b))
			continue;
		yes++;
		g_string_truncate(name, 0);
		if (!later_names_all_match_earlier(a, b, name, 6))
			fail_msg("covers('%s', '%s') is true, but a name matches '%s' and not '%s'", a, b, b, a);
	}
	assert_true(yes > 200); /* the check above ran on enough inclusions */
	g_string_free(name, TRUE);
	g_rand_free(rand);
}

/*
 * Deciding whether an earlier route shadows a later one must not take
 * time exponential in the number of '*': building a client from a small
 * configuration used to take seconds with seven stars.
 */
static void test_glob_covers_with_many_stars_is_fast(void **state)
{
	char *name = g_strnfill(60, 'a');
	char *later = g_strconcat("x", name, "*", name, "?", NULL);
	int64_t t0 = g_get_monotonic_time();

	assert_false(dlock__glob_covers("*a*a*a*a*a*a*a*x", name));
	assert_false(dlock__glob_covers("*a*a*a*a*a*a*a*a*a*a*a*a*x", name));
	assert_true(dlock__glob_covers("*a*a*a*a*a*a*a*a*a*a*a*a*", name));
	assert_false(dlock__glob_covers("x*a*a*a*a*a*a*a*a*a*a*a*a*b*?", later));
	assert_true(dlock__glob_covers("x*a*a*a*a*a*a*a*a*a*a*a*a*?", later));
	assert_true(g_get_monotonic_time() - t0 < 200 * 1000);
	g_free(later);
	g_free(name);
}

static void test_config_with_many_star_routes_builds_quickly(void **state)
{
	char *name = g_strnfill(60, 'a');
	char *text = g_strdup_printf("[defaults]\nbackend = a\n"
	                             "[backend a]\nurl = redis://h:1\n[backend b]\nurl = redis://h:2\n"
	                             "[route stars]\nmatch = *a*a*a*a*a*a*a*a*a*x\nbackend = a\n"
	                             "[route long]\nmatch = %s\nbackend = b\n"
	                             "[route both]\nmatch = a*a*a*a*a*a*a*a*a*%s*y\nbackend = b\n",
	                             name, name);
	int64_t t0 = g_get_monotonic_time();

	assert_int_equal(client_from(text, NULL), DLOCK_OK);
	assert_true(g_get_monotonic_time() - t0 < 500 * 1000);
	g_free(text);
	g_free(name);
}

static void test_config_routes_resources_to_their_backends(void **state)
{
	dlock_client *client;
	dlock_lock *a, *b;

	assert_int_equal(client_from(good, &client), DLOCK_OK);
	assert_int_equal(dlock_client_default_wait_ms(client), 30000);
	assert_int_equal(dlock_lock_new(client, "payments/eu/ledger", &a), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "reports/nightly", &b), DLOCK_OK);
	assert_string_equal(dlock_lock_backend_name(a), "strong");
	assert_string_equal(dlock_lock_backend_name(b), "cache");
	assert_string_equal(dlock_lock_backend_uri(a), "redis://127.0.0.1:6380");
	/* The override picks among the configured backends only. */
	assert_int_equal(dlock_lock_set_backend(b, "strong"), DLOCK_OK);
	assert_string_equal(dlock_lock_backend_name(b), "strong");
	assert_int_equal(dlock_lock_set_backend(b, "nonesuch"), DLOCK_EINVAL);
	dlock_lock_free(a);
	dlock_lock_free(b);
	dlock_client_free(client);
}

static void test_config_inline_comments_are_not_part_of_values(void **state)
{
	dlock_client *client;

	assert_int_equal(client_from("[defaults]\n"
	                             "backend = cache          ; used when no route matches\n"
	                             "wait = 30s               ; default wait of the dlock command\n"
	                             "[backend cache]\n"
	                             "url = redis://127.0.0.1:6379/0?ttl=10s   # the lease backend\n",
	                             &client), DLOCK_OK);
	assert_int_equal(dlock_client_default_wait_ms(client), 30000);
	dlock_client_free(client);
}

static void test_config_via_environment_when_spec_is_null(void **state)
{
	char *path = write_config("env.conf", good);
	dlock_client *client;
	dlock_lock *lock;

	g_setenv("DLOCK_CONFIG", path, TRUE);
	assert_int_equal(dlock_client_new(NULL, &client), DLOCK_OK);
	g_unsetenv("DLOCK_CONFIG");
	assert_int_equal(dlock_lock_new(client, "payments/x", &lock), DLOCK_OK);
	assert_string_equal(dlock_lock_backend_name(lock), "strong");
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(path);
}

/* No specification and no $DLOCK_CONFIG: the file backend, in $DLOCK_DIR. */
static void test_config_default_is_the_file_backend(void **state)
{
	char *locks = g_build_filename(dir, "default-locks", NULL);
	char *expected = g_strconcat("file://", locks, NULL);
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;

	g_unsetenv("DLOCK_CONFIG");
	g_setenv("DLOCK_DIR", locks, TRUE);
	assert_int_equal(dlock_client_new(NULL, &client), DLOCK_OK);
	g_unsetenv("DLOCK_DIR");
	assert_int_equal(dlock_lock_new(client, "r", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_string_equal(dlock_info_backend(info), expected);
	dlock_info_free(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
	assert_int_equal(rmdir(locks), 0);
	g_free(expected);
	g_free(locks);
}

/* An unknown scheme is refused with the list of every known one. */
static void test_config_unknown_scheme_lists_the_known_ones(void **state)
{
	dlock_client *client = NULL;

	assert_int_equal(dlock_client_new("nosuch://h:1", &client), DLOCK_ECONFIG);
	assert_null(client);
	assert_string_equal(dlock_last_error_message(),
	                    "URI nosuch://h:1: unknown scheme 'nosuch' (known: redis, redis+unix, redis+sentinel, redis+cluster, file, zk)");
}

static void test_config_duplicate_group_is_refused(void **state)
{
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1\n[backend a]\nurl = redis://h:2\n", NULL),
	                 DLOCK_ECONFIG);
	assert_message_has("dlock.conf", "[backend a]", "twice");
}

static void test_config_duplicate_key_is_refused(void **state)
{
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1\nttl = 1s\nttl = 2s\n", NULL), DLOCK_ECONFIG);
	assert_message_has("[backend a]", "ttl", "twice");
}

static void test_config_option_in_url_and_key_is_refused(void **state)
{
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1?ttl=1s\nttl = 2s\n", NULL), DLOCK_ECONFIG);
	assert_message_has("[backend a]", "ttl", "twice");
}

static void test_config_unknown_group_and_keys_are_refused(void **state)
{
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1\n[rout x]\nmatch = *\n", NULL), DLOCK_ECONFIG);
	assert_message_has("dlock.conf", "[rout x]", "unknown group");
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1\nttll = 1s\n", NULL), DLOCK_ECONFIG);
	assert_message_has("dlock.conf", "[backend a]", "ttll");
	assert_int_equal(client_from("[defaults]\nbackend = a\nwiat = 1s\n[backend a]\nurl = redis://h:1\n", NULL),
	                 DLOCK_ECONFIG);
	assert_message_has("[defaults]", "wiat", NULL);
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1\n[route r]\nmatch = *\nbackend = a\nextra = 1\n",
	                             NULL), DLOCK_ECONFIG);
	assert_message_has("[route r]", "extra", NULL);
}

static void test_config_bad_values_name_group_and_key(void **state)
{
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1\nttl = 50ms\n", NULL), DLOCK_ECONFIG);
	assert_message_has("[backend a]", "ttl", "50ms");
	assert_int_equal(client_from("[defaults]\nwait = soon\n[backend a]\nurl = redis://h:1\n", NULL), DLOCK_ECONFIG);
	assert_message_has("[defaults]", "wait", "soon");
	assert_int_equal(client_from("[backend a]\nurl = nosuch://h:1\n", NULL), DLOCK_ECONFIG);
	assert_message_has("[backend a]", "url", "nosuch");
	assert_int_equal(client_from("[backend a]\nttl = 1s\n", NULL), DLOCK_ECONFIG);
	assert_message_has("[backend a]", "url", "missing");
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1\nroot = /x\n", NULL), DLOCK_ECONFIG);
	assert_message_has("[backend a]", "root", "does not apply");
}

static void test_config_route_to_unknown_backend_is_refused(void **state)
{
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1\n[route r]\nmatch = x/*\nbackend = b\n", NULL),
	                 DLOCK_ECONFIG);
	assert_message_has("[route r]", "backend", "[backend b]");
}

static void test_config_shadowed_route_is_refused(void **state)
{
	assert_int_equal(client_from("[defaults]\nbackend = a\n"
	                             "[backend a]\nurl = redis://h:1\n[backend b]\nurl = redis://h:2\n"
	                             "[route all]\nmatch = pay*\nbackend = a\n"
	                             "[route eu]\nmatch = payments/eu/*\nbackend = b\n", NULL),
	                 DLOCK_ECONFIG);
	assert_message_has("[route eu]", "match", "[route all]");
}

static void test_config_several_backends_need_a_default(void **state)
{
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1\n[backend b]\nurl = redis://h:2\n", NULL),
	                 DLOCK_ECONFIG);
	assert_message_has("[defaults]", "backend", NULL);
	assert_int_equal(client_from("[defaults]\nbackend = c\n[backend a]\nurl = redis://h:1\n", NULL), DLOCK_ECONFIG);
	assert_message_has("[defaults]", "[backend c]", NULL);
}

static void test_config_unreadable_or_malformed_file_is_refused(void **state)
{
	dlock_client *client = NULL;
	char *missing = g_build_filename(dir, "missing.conf", NULL);

	assert_int_equal(dlock_client_new(missing, &client), DLOCK_ECONFIG);
	assert_null(client);
	assert_message_has("missing.conf", NULL, NULL);
	g_free(missing);
	assert_int_equal(dlock_client_new("", &client), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "empty specification"));
	assert_null(client);
	assert_int_equal(client_from("this is not ini\n", NULL), DLOCK_ECONFIG);
	assert_int_equal(client_from("", NULL), DLOCK_ECONFIG);
	assert_message_has("no [backend NAME] group", NULL, NULL);
	assert_int_equal(client_from("[backend a]\nurl = redis://h:1\n\xff\xfe = 1\n", NULL), DLOCK_ECONFIG);
}

static void assert_message_lacks(const char *a, const char *b)
{
	const char *m = dlock_last_error_message();

	if ((a && strstr(m, a)) || (b && strstr(m, b)))
		fail_msg("message '%s' shows the password", m);
}

/* A password in a backend's url never reaches a message, however the url
 * or the line holding it is malformed. */
static void test_config_messages_never_show_a_password(void **state)
{
	dlock_client *client = NULL;

	assert_int_equal(client_from("[backend a]\nurl = redis://u:pa55/w0rd@h:1\n", NULL), DLOCK_ECONFIG);
	assert_message_has("[backend a]", "url", NULL);
	assert_message_lacks("pa55", "w0rd");
	assert_int_equal(client_from("[backend a]\nurl = zk://u:s3c/r3t@h:2181\n", NULL), DLOCK_ECONFIG);
	assert_message_lacks("s3c", "r3t");
	assert_int_equal(client_from("[backend a]\nurl redis://u:s3cr3t@h:1\n", NULL), DLOCK_ECONFIG);
	assert_message_lacks("s3cr3t", NULL);
	assert_int_equal(client_from("[backend a]\nurl = redis://u:s3cr3t@h:1?ttl=forever\n", NULL), DLOCK_ECONFIG);
	assert_message_has("ttl", "forever", NULL);
	assert_message_lacks("s3cr3t", NULL);
	assert_int_equal(client_from("[backend a]\nurl = redis://u:s3cr3t@h:1\nttl = 9999999h\n", NULL),
	                 DLOCK_ECONFIG);
	assert_message_lacks("s3cr3t", NULL);
	/* Without "://" a spec is read as a file name. */
	assert_int_equal(dlock_client_new("redis:/u:s3cr3t@h:1", &client), DLOCK_ECONFIG);
	assert_null(client);
	assert_message_lacks("s3cr3t", NULL);
	assert_int_equal(dlock_client_new("redis:u:s3cr3t@h:1", &client), DLOCK_ECONFIG);
	assert_message_lacks("s3cr3t", NULL);
}

static int setup(void **state)
{
	dir = g_dir_make_tmp("dlock-config-XXXXXX", NULL);
	return dir ? 0 : -1;
}

static int teardown(void **state)
{
	const char *names[] = { "dlock.conf", "env.conf" };

	for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
		char *path = g_build_filename(dir, names[i], NULL);

		unlink(path);
		g_free(path);
	}
	rmdir(dir);
	g_free(dir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_glob_star_crosses_slashes_and_question_is_one_char),
		cmocka_unit_test(test_glob_covers_detects_only_real_shadowing),
		cmocka_unit_test(test_glob_covers_is_sound_on_many_small_patterns),
		cmocka_unit_test(test_glob_covers_with_many_stars_is_fast),
		cmocka_unit_test(test_config_with_many_star_routes_builds_quickly),
		cmocka_unit_test(test_config_routes_resources_to_their_backends),
		cmocka_unit_test(test_config_inline_comments_are_not_part_of_values),
		cmocka_unit_test(test_config_via_environment_when_spec_is_null),
		cmocka_unit_test(test_config_default_is_the_file_backend),
		cmocka_unit_test(test_config_unknown_scheme_lists_the_known_ones),
		cmocka_unit_test(test_config_duplicate_group_is_refused),
		cmocka_unit_test(test_config_duplicate_key_is_refused),
		cmocka_unit_test(test_config_option_in_url_and_key_is_refused),
		cmocka_unit_test(test_config_unknown_group_and_keys_are_refused),
		cmocka_unit_test(test_config_bad_values_name_group_and_key),
		cmocka_unit_test(test_config_route_to_unknown_backend_is_refused),
		cmocka_unit_test(test_config_shadowed_route_is_refused),
		cmocka_unit_test(test_config_several_backends_need_a_default),
		cmocka_unit_test(test_config_unreadable_or_malformed_file_is_refused),
		cmocka_unit_test(test_config_messages_never_show_a_password),
	};

	return cmocka_run_group_tests_name("config", tests, setup, teardown);
}
