/* SPDX-License-Identifier: MIT */
/*
 * Durations: dlock__duration_parse on any text, and the duration options
 * built on it.  An accepted duration is non-negative and the same number
 * written back in milliseconds parses to the same value; an accepted ttl
 * or timeout is within its documented bounds.
 */
#include <inttypes.h>

#include "dlock.h"
#include "fuzz-options.h"
#include "fuzz.h"
#include "parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const keys[] = { "ttl", "connect-timeout", "command-timeout", "session-timeout" };
	char *text = fuzz_string(data, size);
	dlock__options opts;
	int64_t ms = -1;

	if (dlock__duration_parse(text, &ms)) {
		char *again = g_strdup_printf("%" PRId64 "ms", ms);
		int64_t ms2 = -1;

		FUZZ_CHECK(ms >= 0, "'%s' gave %" PRId64, text, ms);
		FUZZ_CHECK(dlock__duration_parse(again, &ms2) && ms2 == ms, "'%s' then '%s'", text, again);
		g_free(again);
	}
	dlock__options_init(&opts, fuzz_option_rows, sizeof(fuzz_options), NULL);
	for (size_t i = 0; i < G_N_ELEMENTS(keys); i++)
		dlock__options_set(&opts, keys[i], text, "fuzz");
	FUZZ_CHECK(fuzz_options_in_bounds(&opts), "'%s'", text);
	dlock__options_clear(&opts);
	g_free(text);
	return 0;
}
