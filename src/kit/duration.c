/* SPDX-License-Identifier: MIT */
/*
 * Durations as written in URIs and configuration: "250ms", "10s", "2m",
 * "1h", or a bare number of seconds.
 */
#include <string.h>

#include "parse.h"

bool dlock__duration_parse(const char *text, int64_t *ret_ms)
{
	static const struct {
		const char *suffix;
		int64_t ms;
	} units[] = { { "ms", 1 }, { "s", 1000 }, { "m", 60 * 1000 }, { "h", 3600 * 1000 }, { "", 1000 } };
	const char *p = text;
	int64_t value = 0;

	if (!text || !g_ascii_isdigit(*p))
		return false;
	for (; g_ascii_isdigit(*p); p++) {
		int digit = *p - '0';

		if (value > (INT64_MAX - digit) / 10)
			return false;
		value = value * 10 + digit;
	}
	for (size_t i = 0; i < G_N_ELEMENTS(units); i++) {
		if (strcmp(p, units[i].suffix) != 0)
			continue;
		if (value > INT64_MAX / units[i].ms)
			return false;
		*ret_ms = value * units[i].ms;
		return true;
	}
	return false;
}
