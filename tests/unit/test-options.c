/* SPDX-License-Identifier: MIT */
/*
 * The option rows of each backend: defaults, values checked, refusals
 * naming source and key.  Each backend's rows are reached as the core
 * reaches them, through the scheme table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "core.h"
#include "dlock.h"
#include "parse.h"

#define WHERE "URI redis://h:1"

static void init(dlock__options *o, const char *scheme)
{
	const dlock__backend_ops *ops = dlock__backend_for_scheme(scheme);

	assert_non_null(ops);
	dlock__options_init(o, ops->options, ops->options_size, dlock__backend_option_known);
}

static const void *value(const dlock__options *o, const char *name)
{
	const void *v = dlock__options_value(o, name);

	if (!v)
		fail_msg("no option '%s' in this backend", name);
	return v;
}

static int64_t ms(const dlock__options *o, const char *name)
{
	return *(const int64_t *)value(o, name);
}

static bool onoff(const dlock__options *o, const char *name)
{
	return *(const bool *)value(o, name);
}

/* A choice option's value as its word. */
static const char *choice(const dlock__options *o, const char *name)
{
	for (const dlock__option *row = o->rows; row->name; row++)
		if (strcmp(row->name, name) == 0)
			return row->choices[*(const int *)value(o, name)];
	return NULL;
}

static const char *text(const dlock__options *o, const char *name)
{
	return *(char *const *)value(o, name);
}

static void set_ok(dlock__options *o, const char *key, const char *v)
{
	if (dlock__options_set(o, key, v, WHERE) != DLOCK_OK)
		fail_msg("%s=%s refused: %s", key, v, dlock_last_error_message());
}

static void set_bad(const char *scheme, const char *key, const char *v, const char *why)
{
	dlock__options o;
	const char *m;

	init(&o, scheme);
	if (dlock__options_set(&o, key, v, WHERE) != DLOCK_ECONFIG)
		fail_msg("%s=%s accepted", key, v);
	m = dlock_last_error_message();
	if (!strstr(m, WHERE) || !strstr(m, key) || (why && !strstr(m, why)))
		fail_msg("%s=%s: message '%s' lacks the source, the key or '%s'", key, v, m, why);
	dlock__options_clear(&o);
}

static void assert_none_given(const dlock__options *o)
{
	assert_int_equal(o->given, 0);
	for (const dlock__option *row = o->rows; row && row->name; row++)
		assert_false(dlock__options_given(o, row->name));
}

static void assert_all_given(const dlock__options *o)
{
	for (const dlock__option *row = o->rows; row && row->name; row++)
		if (!dlock__options_given(o, row->name))
			fail_msg("option '%s' not recorded as given", row->name);
}

/*
 * Every option of every backend: its default, a value to set, and what
 * it then holds, each as shown() writes it.  The table lists all the rows
 * a backend has (checked), so a row added without a test here fails.
 */
static const struct {
	const char *scheme, *name, *fallback, *value, *stored;
} every[] = {
	{ "redis", "ttl", "30000ms", "100ms", "100ms" },
	{ "redis", "watchdog", "on", "off", "off" },
	{ "redis", "connect-timeout", "5000ms", "2s", "2000ms" },
	{ "redis", "command-timeout", "3000ms", "750ms", "750ms" },
	{ "redis", "key-format", "braced", "plain", "plain" },
	{ "redis", "prefix", "dlock:", "app:", "app:" },
	{ "redis", "sentinel-user", "(none)", "watcher", "watcher" },
	{ "redis", "sentinel-password", "(none)", "pw", "pw" },
	{ "redis", "min-replicas", "0", "2", "2" },
	{ "redis", "replica-timeout", "0ms", "250ms", "250ms" },
	{ "zk", "session-timeout", "10000ms", "1m", "60000ms" },
	{ "zk", "connect-timeout", "5000ms", "2s", "2000ms" },
	{ "zk", "root", "/dlock", "/locks/prod", "/locks/prod" },
	{ "file", "dir", "(none)", "/var/lock/app", "/var/lock/app" },
};

static const char *const every_scheme[] = { "redis", "zk", "file" };

/* An option's value as text, whatever its kind.  Caller frees. */
static char *shown(const dlock__options *o, const char *name)
{
	for (const dlock__option *row = o->rows; row->name; row++) {
		if (strcmp(row->name, name) != 0)
			continue;
		switch (row->kind) {
		case DLOCK__OPTION_DURATION:
			return g_strdup_printf("%" G_GINT64_FORMAT "ms", ms(o, name));
		case DLOCK__OPTION_ONOFF:
			return g_strdup(onoff(o, name) ? "on" : "off");
		case DLOCK__OPTION_CHOICE:
			return g_strdup(choice(o, name));
		case DLOCK__OPTION_COUNT:
			return g_strdup_printf("%d", *(const int *)value(o, name));
		case DLOCK__OPTION_STRING:
		case DLOCK__OPTION_PATH:
			return g_strdup(text(o, name) ? text(o, name) : "(none)");
		}
	}
	fail_msg("no option '%s' in this backend", name);
	return NULL;
}

static void assert_shown(const dlock__options *o, const char *scheme, const char *name,
                         const char *expected)
{
	char *got = shown(o, name);

	if (strcmp(got, expected) != 0)
		fail_msg("%s option %s is %s, not %s", scheme, name, got, expected);
	g_free(got);
}

static void test_options_defaults(void **state)
{
	for (size_t i = 0; i < G_N_ELEMENTS(every_scheme); i++) {
		dlock__options o;
		size_t rows = 0;

		init(&o, every_scheme[i]);
		assert_none_given(&o);
		for (size_t j = 0; j < G_N_ELEMENTS(every); j++) {
			if (strcmp(every[j].scheme, every_scheme[i]) != 0)
				continue;
			assert_shown(&o, every_scheme[i], every[j].name, every[j].fallback);
			rows++;
		}
		if (o.rows[rows].name)
			fail_msg("%s option %s is not in the table", every_scheme[i], o.rows[rows].name);
		dlock__options_clear(&o);
	}
}

/* A default is text read by the same rules as a user's value: each must
 * pass them, or a backend would open with a zeroed setting. */
static void test_options_every_default_is_accepted(void **state)
{
	static const char *const schemes[] = { "redis", "redis+unix", "zk", "file" };

	for (size_t i = 0; i < G_N_ELEMENTS(schemes); i++) {
		const dlock__backend_ops *ops = dlock__backend_for_scheme(schemes[i]);

		for (const dlock__option *row = ops->options; row->name; row++) {
			dlock__options o;

			if (!row->fallback)
				continue;
			dlock__options_init(&o, ops->options, ops->options_size, dlock__backend_option_known);
			if (dlock__options_set(&o, row->name, row->fallback, WHERE) != DLOCK_OK)
				fail_msg("%s: default %s=%s refused: %s", schemes[i], row->name, row->fallback,
				         dlock_last_error_message());
			dlock__options_clear(&o);
		}
	}
}

static void test_options_every_name_sets_its_field(void **state)
{
	for (size_t i = 0; i < G_N_ELEMENTS(every_scheme); i++) {
		dlock__options o;

		init(&o, every_scheme[i]);
		for (size_t j = 0; j < G_N_ELEMENTS(every); j++)
			if (strcmp(every[j].scheme, every_scheme[i]) == 0)
				set_ok(&o, every[j].name, every[j].value);
		assert_all_given(&o);
		for (size_t j = 0; j < G_N_ELEMENTS(every); j++)
			if (strcmp(every[j].scheme, every_scheme[i]) == 0)
				assert_shown(&o, every_scheme[i], every[j].name, every[j].stored);
		dlock__options_clear(&o);
	}
}

static void test_options_watchdog_spellings(void **state)
{
	const char *on[] = { "on", "true", "yes", "1", "ON" }, *off[] = { "off", "false", "no", "0" };

	for (size_t i = 0; i < G_N_ELEMENTS(on); i++) {
		dlock__options o;

		init(&o, "redis");
		*(bool *)(uintptr_t)value(&o, "watchdog") = false;
		set_ok(&o, "watchdog", on[i]);
		assert_true(onoff(&o, "watchdog"));
		dlock__options_clear(&o);
	}
	for (size_t i = 0; i < G_N_ELEMENTS(off); i++) {
		dlock__options o;

		init(&o, "redis");
		set_ok(&o, "watchdog", off[i]);
		assert_false(onoff(&o, "watchdog"));
		dlock__options_clear(&o);
	}
	set_bad("redis", "watchdog", "maybe", "neither on nor off");
}

static void test_options_bad_values_are_refused_with_the_reason(void **state)
{
	set_bad("redis", "ttl", "99ms", "minimum of 100ms");
	set_bad("redis", "ttl", "soon", "not a duration");
	set_bad("redis", "connect-timeout", "0", "minimum");
	set_bad("zk", "connect-timeout", "0", "minimum");
	set_bad("redis", "key-format", "curly", "neither braced nor plain");
	set_bad("redis", "prefix", "a{b", "'{'");
	set_bad("redis", "min-replicas", "-1", "not a number");
	set_bad("redis", "min-replicas", "two", "not a number");
	set_bad("redis", "min-replicas", " 2", "not a number");
	set_bad("redis", "min-replicas", "101", "maximum of 100");
	set_bad("redis", "min-replicas", "99999999999", "not a number");
	set_bad("redis", "replica-timeout", "0", "minimum");
	set_bad("zk", "root", "locks", "absolute");
	set_bad("zk", "root", "/locks/", NULL);
	set_bad("zk", "root", "/a//b", NULL);
	set_bad("zk", "root", "/a/../b", NULL);
	set_bad("file", "dir", "relative", "absolute");
}

static void test_options_unknown_inapplicable_and_repeated_are_refused(void **state)
{
	dlock__options o;

	init(&o, "redis");
	assert_int_equal(dlock__options_set(&o, "tll", "1s", WHERE), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "unknown option 'tll'"));
	assert_int_equal(dlock__options_set(&o, "root", "/x", WHERE), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "option 'root' does not apply to this backend"));
	assert_int_equal(dlock__options_set(&o, "ttl", "1s", WHERE), DLOCK_OK);
	assert_int_equal(dlock__options_set(&o, "ttl", "2s", WHERE), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "given twice"));
	assert_int_equal(ms(&o, "ttl"), 1000);
	dlock__options_clear(&o);

	init(&o, "file");
	assert_int_equal(dlock__options_set(&o, "ttl", "1s", WHERE), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "option 'ttl' does not apply to this backend"));
	assert_int_equal(dlock__options_set(&o, "tll", "1s", WHERE), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "unknown option 'tll'"));
	dlock__options_clear(&o);
}

/* Every name docs/configuration.md ("Options") fixes is some backend's;
 * others are unknown. */
static void test_options_known_names_come_from_every_backend(void **state)
{
	static const char *const names[] = { "ttl", "watchdog", "connect-timeout", "command-timeout",
	                                     "key-format", "prefix", "session-timeout", "root", "dir" };

	for (size_t i = 0; i < G_N_ELEMENTS(names); i++)
		if (!dlock__backend_option_known(names[i]))
			fail_msg("option '%s' is in no backend's rows", names[i]);
	assert_false(dlock__backend_option_known("tll"));
	assert_false(dlock__backend_option_known(""));
}

/*
 * Durations past these bounds are mistakes (a unit slip, a value in
 * microseconds), and their microsecond arithmetic would overflow in the
 * backends: a lease that never ends, a timeout that is negative.
 */
static void test_options_absurd_durations_are_refused_with_the_maximum(void **state)
{
	dlock__options o;

	set_bad("redis", "ttl", "9300000000000000ms", "maximum");
	set_bad("redis", "ttl", "169h", "maximum");
	set_bad("redis", "connect-timeout", "9223372036854775807ms", "maximum");
	set_bad("redis", "connect-timeout", "61m", "maximum");
	set_bad("zk", "connect-timeout", "61m", "maximum");
	set_bad("redis", "command-timeout", "2h", "maximum");
	set_bad("zk", "session-timeout", "100000h", "maximum");
	init(&o, "redis");
	set_ok(&o, "ttl", "168h");
	set_ok(&o, "connect-timeout", "1h");
	set_ok(&o, "command-timeout", "60m");
	assert_int_equal(ms(&o, "ttl"), INT64_C(168) * 3600 * 1000);
	assert_int_equal(ms(&o, "connect-timeout"), 3600 * 1000);
	assert_int_equal(ms(&o, "command-timeout"), 3600 * 1000);
	dlock__options_clear(&o);
	init(&o, "zk");
	set_ok(&o, "session-timeout", "3600");
	set_ok(&o, "connect-timeout", "1h");
	assert_int_equal(ms(&o, "session-timeout"), 3600 * 1000);
	assert_int_equal(ms(&o, "connect-timeout"), 3600 * 1000);
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

/* ---- a lease backend's "ttl" and "watchdog" rows as its holds' defaults */

typedef struct lease_settings {
	int64_t ttl_ms;
	bool watchdog;
} lease_settings;

static const dlock__option lease_rows[] = {
	DLOCK__OPTION_TTL(lease_settings, ttl_ms),
	DLOCK__OPTION_WATCHDOG(lease_settings, watchdog),
	{ .name = NULL },
};

/* What the last acquire was given. */
struct dlock__backend {
	int64_t ttl_ms;
	bool watchdog;
};

static int seen_open(const dlock__backend_env *env, const dlock__uri *uri,
                     const dlock__options *opts, dlock__backend **ret)
{
	*ret = g_new0(dlock__backend, 1);
	return DLOCK_OK;
}

static void seen_close(dlock__backend *b)
{
	g_free(b);
}

static int seen_acquire(dlock__backend *b, dlock__hold *hold, dlock__waiter *waiter, int64_t wait_ms,
                        int64_t deadline_us)
{
	b->ttl_ms = dlock__hold_ttl_ms(hold);
	b->watchdog = dlock__hold_watchdog(hold);
	return DLOCK_OK;
}

static int seen_release(dlock__backend *b, dlock__hold *hold)
{
	return DLOCK_OK;
}

static int seen_query(dlock__backend *b, const char *resource, int64_t deadline_us,
                      dlock__server_info *ret)
{
	return DLOCK_OK;
}

static const dlock__backend_ops lease_ops = {
	.type = "lease",
	.caps = DLOCK__CAP_LEASE,
	.options = lease_rows,
	.options_size = sizeof(lease_settings),
	.open = seen_open,
	.close = seen_close,
	.acquire = seen_acquire,
	.release = seen_release,
	.query = seen_query,
};

static const dlock__backend_ops no_lease_ops = {
	.type = "no-lease",
	.open = seen_open,
	.close = seen_close,
	.acquire = seen_acquire,
	.release = seen_release,
	.query = seen_query,
};

/*
 * Build a client on ops from spec, acquire resource r once with the handle
 * told ttl_ms (0: nothing) and watchdog (-1: nothing), and check what the
 * backend was given for the hold.
 */
static void assert_hold_gets(const dlock__backend_ops *ops, const char *spec, int64_t ttl_ms,
                             int watchdog, int64_t want_ttl_ms, bool want_watchdog)
{
	dlock_client *client;
	dlock_lock *lock;
	const dlock__backend *seen;

	assert_int_equal(dlock__client_new_with_ops(spec, ops, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "r", &lock), DLOCK_OK);
	if (ttl_ms)
		assert_int_equal(dlock_lock_set_ttl(lock, ttl_ms), DLOCK_OK);
	if (watchdog >= 0)
		assert_int_equal(dlock_lock_set_watchdog(lock, watchdog), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	seen = dlock__client_slot(client, "default")->impl;
	if (seen->ttl_ms != want_ttl_ms || seen->watchdog != want_watchdog)
		fail_msg("%s (handle: ttl %" G_GINT64_FORMAT ", watchdog %d): hold got ttl %" G_GINT64_FORMAT
		         " watchdog %d", spec, ttl_ms, watchdog, seen->ttl_ms, seen->watchdog);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static void test_options_lease_rows_are_the_holds_defaults(void **state)
{
	assert_hold_gets(&lease_ops, "lease://", 0, -1, 30000, true);
	assert_hold_gets(&lease_ops, "lease://?ttl=5s&watchdog=off", 0, -1, 5000, false);
	assert_hold_gets(&lease_ops, "lease://?ttl=5s&watchdog=off", 2000, 1, 2000, true);
}

/* Without a lease a hold has no TTL and no watchdog, whatever the handle
 * was told (dlock_lock_set_ttl still checks its range). */
static void test_options_holds_without_a_lease_have_no_ttl(void **state)
{
	assert_hold_gets(&no_lease_ops, "nolease://", 0, -1, 0, false);
	assert_hold_gets(&no_lease_ops, "nolease://", 2000, 1, 0, false);
}

/* Several hosts in a redis:// URI make a Redlock, with its own option. */
static void test_several_redis_hosts_choose_the_redlock_table(void **state)
{
	static const struct {
		const char *spec;
		bool redlock;
	} cases[] = {
		{ "redis://a:1", false },
		{ "redis://a:1,b:2", true },
		{ "redis://a:1,b:2,c:3/2?ttl=5s", true },
		{ "redis+unix:///tmp/r.sock", false },
	};

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		const dlock__backend_ops *ops;
		bool has_master_timeout = false;
		dlock__uri *uri;

		assert_int_equal(dlock__uri_parse(cases[i].spec, &uri), DLOCK_OK);
		ops = dlock__backend_for_uri(uri);
		assert_non_null(ops);
		assert_true(g_str_has_prefix(ops->type, "redis"));
		for (const dlock__option *row = ops->options; row->name; row++)
			has_master_timeout = has_master_timeout || strcmp(row->name, "master-timeout") == 0;
		if (has_master_timeout != cases[i].redlock)
			fail_msg("%s: master-timeout %s", cases[i].spec,
			         has_master_timeout ? "offered" : "missing");
		assert_int_equal(!(ops->caps & DLOCK__CAP_SHARED), cases[i].redlock);
		dlock__uri_free(uri);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options_defaults),
		cmocka_unit_test(test_options_every_default_is_accepted),
		cmocka_unit_test(test_options_every_name_sets_its_field),
		cmocka_unit_test(test_options_watchdog_spellings),
		cmocka_unit_test(test_options_bad_values_are_refused_with_the_reason),
		cmocka_unit_test(test_options_unknown_inapplicable_and_repeated_are_refused),
		cmocka_unit_test(test_options_known_names_come_from_every_backend),
		cmocka_unit_test(test_options_absurd_durations_are_refused_with_the_maximum),
		cmocka_unit_test(test_lock_set_ttl_refuses_absurd_values),
		cmocka_unit_test(test_options_lease_rows_are_the_holds_defaults),
		cmocka_unit_test(test_options_holds_without_a_lease_have_no_ttl),
		cmocka_unit_test(test_several_redis_hosts_choose_the_redlock_table),
	};

	return cmocka_run_group_tests_name("options", tests, NULL, NULL);
}
