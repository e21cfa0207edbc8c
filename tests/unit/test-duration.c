/* SPDX-License-Identifier: MIT */
/* Durations: "250ms", "10s", "2m", "1h", a bare number of seconds, with
 * fractions ("1.5s", "0.5") and compounds ("1m30s"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "parse.h"

static int64_t ms_of(const char *text)
{
	int64_t ms = -42;

	assert_true(dlock__duration_parse(text, &ms));
	return ms;
}

static void test_duration_units_convert_to_milliseconds(void **state)
{
	assert_int_equal(ms_of("250ms"), 250);
	assert_int_equal(ms_of("10s"), 10000);
	assert_int_equal(ms_of("2m"), 120000);
	assert_int_equal(ms_of("1h"), 3600000);
	assert_int_equal(ms_of("0ms"), 0);
}

static void test_duration_bare_number_means_seconds(void **state)
{
	assert_int_equal(ms_of("30"), 30000);
	assert_int_equal(ms_of("0"), 0);
}

static void test_duration_fractions_and_compounds(void **state)
{
	assert_int_equal(ms_of("0.5"), 500);
	assert_int_equal(ms_of("1.5s"), 1500);
	assert_int_equal(ms_of("0.25m"), 15000);
	assert_int_equal(ms_of("1.5h"), 5400000);
	assert_int_equal(ms_of("0.001"), 1);
	assert_int_equal(ms_of("2.000000000s"), 2000);
	assert_int_equal(ms_of("1m30s"), 90000);
	assert_int_equal(ms_of("1h2m3s4ms"), 3723004);
	assert_int_equal(ms_of("1h500ms"), 3600500);
	assert_int_equal(ms_of("1m0.5s"), 60500);
	assert_int_equal(ms_of("0s0ms"), 0);
}

static void test_duration_malformed_text_is_refused(void **state)
{
	const char *bad[] = { "", "ms", "-1s", "+1s", " 1s", "1s ", "1 s", "1S", "1sec", "1d", "s1", "0x10",
		              /* fractions: digits on both sides, whole milliseconds, 9 digits */
		              ".5", "1.", "1.s", "1.5ms", "0.0001", "0.0005s", "1.0000000001s", "1,5s",
		              /* compounds: units largest first, each once, no bare tail */
		              "30s1m", "1s1s", "1m1m", "1ms1s", "1m30", "1h 2m", "1m-30s", "1m.5s" };
	int64_t ms = 7;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (dlock__duration_parse(bad[i], &ms))
			fail_msg("'%s' was accepted", bad[i]);
	}
	assert_false(dlock__duration_parse(NULL, &ms));
	assert_int_equal(ms, 7); /* untouched on failure */
}

static void test_duration_overflow_is_refused(void **state)
{
	int64_t ms;

	assert_true(dlock__duration_parse("9223372036854775807ms", &ms));
	assert_false(dlock__duration_parse("9223372036854775808ms", &ms));
	assert_false(dlock__duration_parse("9223372036854775807s", &ms));
	assert_false(dlock__duration_parse("99999999999999999999", &ms));
	/* Each term fits, their sum does not. */
	assert_true(dlock__duration_parse("2562047788015h12m55s807ms", &ms));
	assert_true(ms == INT64_MAX);
	assert_false(dlock__duration_parse("2562047788015h12m55s808ms", &ms));
	assert_false(dlock__duration_parse("2562047788015h13m", &ms));
}

/* The public form: a code and a message naming the text. */
static void test_duration_public_parse_says_what_was_wrong(void **state)
{
	int64_t ms = 7;

	assert_int_equal(dlock_parse_duration("1m30s", &ms), DLOCK_OK);
	assert_int_equal(ms, 90000);
	ms = 7;
	assert_int_equal(dlock_parse_duration("1m30", &ms), DLOCK_EINVAL);
	assert_int_equal(ms, 7);
	assert_non_null(strstr(dlock_last_error_message(), "'1m30' is not a duration"));
	assert_int_equal(dlock_parse_duration(NULL, &ms), DLOCK_EINVAL);
	assert_int_equal(dlock_parse_duration("1s", NULL), DLOCK_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_duration_units_convert_to_milliseconds),
		cmocka_unit_test(test_duration_bare_number_means_seconds),
		cmocka_unit_test(test_duration_fractions_and_compounds),
		cmocka_unit_test(test_duration_malformed_text_is_refused),
		cmocka_unit_test(test_duration_overflow_is_refused),
		cmocka_unit_test(test_duration_public_parse_says_what_was_wrong),
	};

	return cmocka_run_group_tests_name("duration", tests, NULL, NULL);
}
