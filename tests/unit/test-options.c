/* The fixed option names: values checked, refusals naming source and key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "parse.h"

#define ALL 0x1ffu
#define WHERE "URI redis://h:1"

static void set_ok(dlock__options *o, const char *key, const char *value)
{
	if (dlock__options_set(o, ALL, key, value, WHERE) != DLOCK_OK)
		fail_msg("%s=%s refused: %s", key, value, dlock_last_error_message());
}

static void set_bad(const char *key, const char *value, const char *why)
{
	dlock__options o;
	const char *m;

	dlock__options_init(&o);
	if (dlock__options_set(&o, ALL, key, value, WHERE) != DLOCK_ECONFIG)
		fail_msg("%s=%s accepted", key, value);
	m = dlock_last_error_message();
	if (!strstr(m, WHERE) || !strstr(m, key) || (why && !strstr(m, why)))
		fail_msg("%s=%s: message '%s' lacks the source, the key or '%s'", key, value, m, why);
	dlock__options_clear(&o);
}

static void test_options_defaults(void **state)
{
	dlock__options o;

	dlock__options_init(&o);
	assert_int_equal(o.given, 0);
	assert_int_equal(o.ttl_ms, 30000);
	assert_true(o.watchdog);
	assert_int_equal(o.connect_timeout_ms, 5000);
	assert_int_equal(o.command_timeout_ms, 3000);
	assert_false(o.plain_keys);
	assert_string_equal(o.prefix, "dlock:");
	assert_int_equal(o.session_timeout_ms, 10000);
	assert_string_equal(o.root, "/dlock");
	assert_null(o.dir);
	dlock__options_clear(&o);
}

static void test_options_every_name_sets_its_field(void **state)
{
	dlock__options o;

	dlock__options_init(&o);
	set_ok(&o, "ttl", "100ms");
	set_ok(&o, "watchdog", "off");
	set_ok(&o, "connect-timeout", "2s");
	set_ok(&o, "command-timeout", "750ms");
	set_ok(&o, "key-format", "plain");
	set_ok(&o, "prefix", "app:");
	set_ok(&o, "session-timeout", "1m");
	set_ok(&o, "root", "/locks/prod");
	set_ok(&o, "dir", "/var/lock/app");
	assert_int_equal(o.given, ALL);
	assert_int_equal(o.ttl_ms, 100);
	assert_false(o.watchdog);
	assert_int_equal(o.connect_timeout_ms, 2000);
	assert_int_equal(o.command_timeout_ms, 750);
	assert_true(o.plain_keys);
	assert_string_equal(o.prefix, "app:");
	assert_int_equal(o.session_timeout_ms, 60000);
	assert_string_equal(o.root, "/locks/prod");
	assert_string_equal(o.dir, "/var/lock/app");
	dlock__options_clear(&o);
}

static void test_options_watchdog_spellings(void **state)
{
	const char *on[] = { "on", "true", "yes", "1", "ON" }, *off[] = { "off", "false", "no", "0" };

	for (size_t i = 0; i < G_N_ELEMENTS(on); i++) {
		dlock__options o;

		dlock__options_init(&o);
		o.watchdog = false;
		set_ok(&o, "watchdog", on[i]);
		assert_true(o.watchdog);
		dlock__options_clear(&o);
	}
	for (size_t i = 0; i < G_N_ELEMENTS(off); i++) {
		dlock__options o;

		dlock__options_init(&o);
		set_ok(&o, "watchdog", off[i]);
		assert_false(o.watchdog);
		dlock__options_clear(&o);
	}
	set_bad("watchdog", "maybe", "neither on nor off");
}

static void test_options_bad_values_are_refused_with_the_reason(void **state)
{
	set_bad("ttl", "99ms", "minimum of 100ms");
	set_bad("ttl", "soon", "not a duration");
	set_bad("connect-timeout", "0", "minimum");
	set_bad("key-format", "curly", "neither braced nor plain");
	set_bad("prefix", "a{b", "'{'");
	set_bad("root", "locks", "absolute");
	set_bad("root", "/locks/", NULL);
	set_bad("root", "/a//b", NULL);
	set_bad("root", "/a/../b", NULL);
	set_bad("dir", "relative", "absolute");
}

static void test_options_unknown_inapplicable_and_repeated_are_refused(void **state)
{
	dlock__options o;

	dlock__options_init(&o);
	assert_int_equal(dlock__options_set(&o, ALL, "tll", "1s", WHERE), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "unknown option 'tll'"));
	assert_int_equal(dlock__options_set(&o, DLOCK__OPT_TTL, "root", "/x", WHERE), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "does not apply"));
	assert_int_equal(dlock__options_set(&o, ALL, "ttl", "1s", WHERE), DLOCK_OK);
	assert_int_equal(dlock__options_set(&o, ALL, "ttl", "2s", WHERE), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "given twice"));
	assert_int_equal(o.ttl_ms, 1000);
	dlock__options_clear(&o);
}

/*
 * Durations past these bounds are mistakes (a unit slip, a value in
 * microseconds), and their microsecond arithmetic would overflow in the
 * backends: a lease that never ends, a timeout that is negative.
 */
static void test_options_absurd_durations_are_refused_with_the_maximum(void **state)
{
	dlock__options o;

	set_bad("ttl", "9300000000000000ms", "maximum");
	set_bad("ttl", "169h", "maximum");
	set_bad("connect-timeout", "9223372036854775807ms", "maximum");
	set_bad("connect-timeout", "61m", "maximum");
	set_bad("command-timeout", "2h", "maximum");
	set_bad("session-timeout", "100000h", "maximum");
	dlock__options_init(&o);
	set_ok(&o, "ttl", "168h");
	set_ok(&o, "connect-timeout", "1h");
	set_ok(&o, "command-timeout", "60m");
	set_ok(&o, "session-timeout", "3600");
	assert_int_equal(o.ttl_ms, INT64_C(168) * 3600 * 1000);
	assert_int_equal(o.connect_timeout_ms, 3600 * 1000);
	dlock__options_clear(&o);
}

static void test_lock_set_ttl_refuses_absurd_values(void **state)
{
	char *dir = g_dir_make_tmp("dlock-options-XXXXXX", NULL);
	char *spec = g_strconcat("file://", dir, NULL);
	dlock_client *client = NULL;
	dlock_lock *lock = NULL;

	assert_int_equal(dlock_client_new(spec, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "r", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(lock, INT64_C(9300000000000000)), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "maximum"));
	assert_int_equal(dlock_lock_set_ttl(lock, INT64_MAX), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_ttl(lock, INT64_C(168) * 3600 * 1000 + 1), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_ttl(lock, INT64_C(168) * 3600 * 1000), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(lock, 99), DLOCK_EINVAL);
	dlock_lock_free(lock);
	dlock_client_free(client);
	rmdir(dir);
	g_free(spec);
	g_free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options_defaults),
		cmocka_unit_test(test_options_every_name_sets_its_field),
		cmocka_unit_test(test_options_watchdog_spellings),
		cmocka_unit_test(test_options_bad_values_are_refused_with_the_reason),
		cmocka_unit_test(test_options_unknown_inapplicable_and_repeated_are_refused),
		cmocka_unit_test(test_options_absurd_durations_are_refused_with_the_maximum),
		cmocka_unit_test(test_lock_set_ttl_refuses_absurd_values),
	};

	return cmocka_run_group_tests_name("options", tests, NULL, NULL);
}
