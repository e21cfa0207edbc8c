/* SPDX-License-Identifier: MIT */
/*
 * Option rows of every kind, for the harnesses that feed values through
 * dlock__options_set.  The backends' own tables are not linked into the
 * harnesses (they bring the vendor clients), so these rows are written
 * as a backend writes its own, with the same shared row macros for the
 * durations.
 */
#ifndef DLOCK_TESTS_FUZZ_OPTIONS_H
#define DLOCK_TESTS_FUZZ_OPTIONS_H

#include <stddef.h>
#include <string.h>

#include "fuzz.h"
#include "parse.h"

typedef struct fuzz_options {
	int64_t ttl_ms;
	bool watchdog;
	int64_t connect_timeout_ms;
	int64_t command_timeout_ms;
	int64_t session_timeout_ms;
	int key_format;
	char *prefix;
	char *dir;
} fuzz_options;

static inline bool fuzz_prefix_ok(const char *value)
{
	return !strpbrk(value, "{}");
}

static const char *const fuzz_key_formats[] = { "braced", "plain", NULL };

static const dlock__option fuzz_option_rows[] = {
	DLOCK__OPTION_TTL(fuzz_options, ttl_ms),
	DLOCK__OPTION_WATCHDOG(fuzz_options, watchdog),
	DLOCK__OPTION_CONNECT_TIMEOUT(fuzz_options, connect_timeout_ms),
	DLOCK__OPTION_TIMEOUT("command-timeout", "3s", fuzz_options, command_timeout_ms),
	DLOCK__OPTION_TIMEOUT("session-timeout", "10s", fuzz_options, session_timeout_ms),
	{ .name = "key-format", .kind = DLOCK__OPTION_CHOICE, .fallback = "braced",
	  .offset = offsetof(fuzz_options, key_format), .choices = fuzz_key_formats },
	{ .name = "prefix", .kind = DLOCK__OPTION_STRING, .fallback = "dlock:",
	  .offset = offsetof(fuzz_options, prefix), .check = fuzz_prefix_ok, .why = "has a brace" },
	{ .name = "dir", .kind = DLOCK__OPTION_PATH, .offset = offsetof(fuzz_options, dir) },
	{ .name = NULL },
};

/* Every duration row's value within its bounds, and the choice an index
 * of its words: what an accepted value (or a default) must be. */
static inline bool fuzz_options_in_bounds(const dlock__options *opts)
{
	const fuzz_options *o = opts->values;

	for (const dlock__option *row = opts->rows; row->name; row++) {
		const int64_t *ms = dlock__options_value(opts, row->name);

		if (row->kind == DLOCK__OPTION_DURATION && (*ms < row->min_ms || *ms > row->max_ms))
			return false;
	}
	return o->key_format == 0 || o->key_format == 1;
}

#endif
