/* SPDX-License-Identifier: MIT */
/*
 * The version: dlock.h is generated from project(version:) in
 * meson.build, which the build passes here as PROJECT_VERSION; the macros,
 * dlock_version() and the project must all say the same.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "dlock.h"

static void test_version_string_is_the_project_version(void **state)
{
	assert_string_equal(DLOCK_VERSION_STRING, PROJECT_VERSION);
	assert_string_equal(dlock_version(), DLOCK_VERSION_STRING);
}

static void test_version_numbers_spell_the_string(void **state)
{
	char text[64];

	snprintf(text, sizeof(text), "%d.%d.%d", DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR,
	         DLOCK_VERSION_PATCH);
	assert_string_equal(text, DLOCK_VERSION_STRING);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version_string_is_the_project_version),
		cmocka_unit_test(test_version_numbers_spell_the_string),
	};

	return cmocka_run_group_tests_name("version", tests, NULL, NULL);
}
