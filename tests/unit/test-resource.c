/* SPDX-License-Identifier: MIT */
/* Resource names: the same rules on every backend (docs/configuration.md,
 * "Resource names"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "parse.h"

static void accepts(const char *name)
{
	if (dlock__resource_check(name) != DLOCK_OK)
		fail_msg("'%s' refused: %s", name, dlock_last_error_message());
}

static void refuses(const char *name, const char *why)
{
	if (dlock__resource_check(name) != DLOCK_EINVAL)
		fail_msg("'%s' accepted", name);
	if (why && !strstr(dlock_last_error_message(), why))
		fail_msg("'%s': message '%s' lacks '%s'", name, dlock_last_error_message(), why);
}

static void test_resource_ordinary_names_are_accepted(void **state)
{
	accepts("a");
	accepts("a/b");
	accepts("a.b");
	accepts(".a");
	accepts("a..b");
	accepts("payments/eu/ledger-2026_11");
	accepts("caf\xc3\xa9");          /* U+00E9 */
	accepts("\xc2\xa0");             /* U+00A0, first after the C1 controls */
	accepts("\xed\x9f\xbf");         /* U+D7FF */
	accepts("\xef\xa4\x80");         /* U+F900 */
	accepts("\xef\xbf\xaf");         /* U+FFEF */
}

static void test_resource_length_is_one_to_255_bytes(void **state)
{
	char name[257];

	memset(name, 'x', 256);
	name[255] = '\0';
	accepts(name);
	name[255] = 'x';
	name[256] = '\0';
	refuses(name, "256 bytes");
	refuses("", "empty");
}

static void test_resource_segments_must_be_real(void **state)
{
	refuses("/a", "empty segment");
	refuses("a/", "empty segment");
	refuses("a//b", "empty segment");
	refuses(".", "'.'");
	refuses("..", "'..'");
	refuses("a/./b", "'.'");
	refuses("a/../b", "'..'");
	refuses("a/..", "'..'");
}

static void test_resource_rejects_control_characters_and_braces(void **state)
{
	refuses("a\nb", "U+000A");
	refuses("\x01", "U+0001");
	refuses("a\x7f", "U+007F");
	refuses("\xc2\x80", "U+0080");
	refuses("\xc2\x9f", "U+009F");
	refuses("x{y}", "'{'");
	refuses("x}", "'}'");
}

static void test_resource_rejects_code_points_zookeeper_refuses(void **state)
{
	refuses("\xee\x80\x80", "U+E000");      /* private use */
	refuses("\xef\xa3\xbf", "U+F8FF");
	refuses("\xef\xbf\xb0", "U+FFF0");
	refuses("\xef\xbf\xbf", "U+FFFF");
	refuses("\xf0\x9f\x98\x80", "U+1F600"); /* above U+FFFF */
}

static void test_resource_rejects_invalid_utf8(void **state)
{
	refuses("\x80", "UTF-8");         /* lone continuation byte */
	refuses("\xc3", "UTF-8");         /* truncated */
	refuses("\xc0\xaf", "UTF-8");     /* overlong '/' */
	refuses("\xe0\x80\xaf", "UTF-8"); /* overlong */
	refuses("\xed\xa0\x80", "UTF-8"); /* a surrogate, encoded */
	refuses("\xff", "UTF-8");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resource_ordinary_names_are_accepted),
		cmocka_unit_test(test_resource_length_is_one_to_255_bytes),
		cmocka_unit_test(test_resource_segments_must_be_real),
		cmocka_unit_test(test_resource_rejects_control_characters_and_braces),
		cmocka_unit_test(test_resource_rejects_code_points_zookeeper_refuses),
		cmocka_unit_test(test_resource_rejects_invalid_utf8),
	};

	return cmocka_run_group_tests_name("resource", tests, NULL, NULL);
}
