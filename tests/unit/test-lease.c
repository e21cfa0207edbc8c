/* SPDX-License-Identifier: MIT */
/* Lease deadlines: the margin rule and the end of a lease. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lease.h"

static void test_margin_is_one_percent_plus_five_ms(void **state)
{
	assert_int_equal(dlock__lease_margin_us(0), 5000);
	assert_int_equal(dlock__lease_margin_us(100), 6000);
	assert_int_equal(dlock__lease_margin_us(30000), 305000);
	/* A ZooKeeper session timeout of 4 s. */
	assert_int_equal(dlock__lease_margin_us(4000), 45000);
}

static void test_lease_ends_ttl_less_margin_after_the_send(void **state)
{
	/* 30 s from 1 s: 31 s less 0.305 s. */
	assert_int_equal(dlock__lease_end_us(1000000, 30000), 30695000);
	/* The shortest TTL (100 ms): 94 ms. */
	assert_int_equal(dlock__lease_end_us(0, 100), 94000);
	/* Seven days, the longest TTL a lock takes. */
	assert_int_equal(dlock__lease_end_us(0, INT64_C(604800000)),
	                 INT64_C(604800000000) - INT64_C(6048005000));
}

/* A lease shorter than the margin has ended before it began: the end is
 * before the send, never wrapped to a later time. */
static void test_lease_shorter_than_margin_ends_before_the_send(void **state)
{
	assert_true(dlock__lease_end_us(1000000, 0) == 995000);
	assert_true(dlock__lease_end_us(1000000, 5) < 1000000);
}

/* Sums past INT64_MAX saturate instead of wrapping to the far past, which
 * would declare a lease lost the moment it was granted. */
static void test_lease_end_saturates_without_overflow(void **state)
{
	const int64_t ttls[] = { INT64_MAX, INT64_MAX / 1000, INT64_MAX / 1000 + 1, INT64_MAX / 10,
	                         INT64_C(604800000) };

	for (size_t i = 0; i < sizeof(ttls) / sizeof(ttls[0]); i++) {
		int64_t end = dlock__lease_end_us(INT64_MAX - 1, ttls[i]);

		assert_true(end == INT64_MAX);
		assert_true(dlock__lease_end_us(0, ttls[i]) > 0);
		assert_true(dlock__lease_margin_us(ttls[i]) > 0);
	}
	/* Exactly at the top: no saturation needed, none applied. */
	assert_true(dlock__lease_end_us(INT64_MAX - 94000, 100) == INT64_MAX);
	assert_true(dlock__lease_end_us(INT64_MAX - 94001, 100) == INT64_MAX - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_margin_is_one_percent_plus_five_ms),
		cmocka_unit_test(test_lease_ends_ttl_less_margin_after_the_send),
		cmocka_unit_test(test_lease_shorter_than_margin_ends_before_the_send),
		cmocka_unit_test(test_lease_end_saturates_without_overflow),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
