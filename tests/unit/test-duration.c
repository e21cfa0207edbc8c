/* SPDX-License-Identifier: MIT */
/* Durations: "250ms", "10s", "2m", "1h", a bare number of seconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

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

static void test_duration_malformed_text_is_refused(void **state)
{
	const char *bad[] = { "", "ms", "-1s", "+1s", "1.5s", " 1s", "1s ", "1 s", "1S", "1sec", "1d", "s1", "0x10" };
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
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_duration_units_convert_to_milliseconds),
		cmocka_unit_test(test_duration_bare_number_means_seconds),
		cmocka_unit_test(test_duration_malformed_text_is_refused),
		cmocka_unit_test(test_duration_overflow_is_refused),
	};

	return cmocka_run_group_tests_name("duration", tests, NULL, NULL);
}
