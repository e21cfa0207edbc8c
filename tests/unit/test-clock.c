/* SPDX-License-Identifier: MIT */
/* Clock helpers: deadlines from waits, time left until them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "clock.h"

static void test_deadline_of_negative_wait_is_forever(void **state)
{
	assert_true(dlock__deadline_after_ms(-1) == INT64_MAX);
	assert_true(dlock__deadline_after_ms(INT64_MIN) == INT64_MAX);
	assert_true(dlock__remaining_us(INT64_MAX) == INT64_MAX);
}

/* A wait too long to count in microseconds saturates to "forever" rather
 * than wrapping to a deadline in the past (a busy loop, or an instant
 * DLOCK_ETIMEDOUT). */
static void test_deadline_of_huge_wait_saturates_without_overflow(void **state)
{
	const int64_t huge[] = { INT64_MAX, INT64_MAX - 1, INT64_MAX / 1000 + 1, INT64_MAX / 1000,
	                         INT64_MAX / 1000 - 1, INT64_C(9300000000000000), INT64_MAX / 2000 };
	int64_t now = dlock__mono_us();

	for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		int64_t deadline = dlock__deadline_after_ms(huge[i]);

		if (deadline <= now)
			fail_msg("wait %lld ms gave deadline %lld, not after now %lld", (long long)huge[i],
			         (long long)deadline, (long long)now);
		assert_true(dlock__remaining_us(deadline) > INT64_C(1000) * 1000 * 3600 * 24 * 365);
	}
}

static void test_deadline_of_ordinary_wait_is_that_far_ahead(void **state)
{
	int64_t before = dlock__mono_us();
	int64_t deadline = dlock__deadline_after_ms(1500);
	int64_t after = dlock__mono_us();

	assert_true(deadline >= before + 1500 * 1000);
	assert_true(deadline <= after + 1500 * 1000);
	assert_true(dlock__remaining_us(dlock__mono_us() - 1) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_deadline_of_negative_wait_is_forever),
		cmocka_unit_test(test_deadline_of_huge_wait_saturates_without_overflow),
		cmocka_unit_test(test_deadline_of_ordinary_wait_is_that_far_ahead),
	};

	return cmocka_run_group_tests_name("clock", tests, NULL, NULL);
}
