/* SPDX-License-Identifier: MIT */
/*
 * Durations as written in URIs, configuration files and on the command
 * line: a bare number of seconds ("30", "0.5"), or terms of a number and
 * a unit, largest unit first, each unit once ("250ms", "1.5s", "1m30s",
 * "1h2m3s"), adding up to a whole number of milliseconds.
 */
#include <string.h>

#include "error.h"
#include "parse.h"

/* Largest first: a term's unit must be smaller than the one before. */
static const struct {
	const char *suffix;
	int64_t ms;
} units[] = { { "h", 3600 * 1000 }, { "m", 60 * 1000 }, { "s", 1000 }, { "ms", 1 } };

/* At most this many digits after a point: 10^9 * 3.6e6 fits in int64. */
#define FRACTION_DIGITS 9

/* The unit at p, the longest that matches ("ms", not "m"), or -1. */
static int unit_at(const char *p)
{
	int found = -1;

	for (int i = 0; i < (int)G_N_ELEMENTS(units); i++)
		if (strncmp(p, units[i].suffix, strlen(units[i].suffix)) == 0 &&
		    (found < 0 || strlen(units[i].suffix) > strlen(units[found].suffix)))
			found = i;
	return found;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* A number and its unit's milliseconds, when the product is whole. */
typedef struct term {
	int64_t whole;
	int64_t frac;  /* the digits after the point, over scale */
	int64_t scale; /* 10^(number of those digits) */
} term;

/* The number at *p, which it passes; false if there is none, a point
 * lacks digits on either side, or it is out of range. */
static bool number_at(const char **p, term *t)
{
	const char *s = *p;

	*t = (term){ 0, 0, 1 };
	if (!is_digit(*s))
		return false;
	for (; is_digit(*s); s++) {
		if (t->whole > (INT64_MAX - (*s - '0')) / 10)
			return false;
		t->whole = t->whole * 10 + (*s - '0');
	}
	if (*s == '.') {
		if (!is_digit(s[1]))
			return false;
		for (s++; is_digit(*s); s++) {
			if (t->scale == INT64_C(1000000000))
				return false; /* more than FRACTION_DIGITS */
			t->frac = t->frac * 10 + (*s - '0');
			t->scale *= 10;
		}
	}
	*p = s;
	return true;
}

/* The term in milliseconds of unit_ms each, if that is whole. */
static bool term_ms(const term *t, int64_t unit_ms, int64_t *ret)
{
	int64_t part;

	if (t->whole > INT64_MAX / unit_ms || (t->frac * unit_ms) % t->scale != 0)
		return false;
	part = t->frac * unit_ms / t->scale;
	if (t->whole * unit_ms > INT64_MAX - part)
		return false;
	*ret = t->whole * unit_ms + part;
	return true;
}

bool dlock__duration_parse(const char *text, int64_t *ret_ms)
{
	const char *p = text;
	int64_t total = 0;
	int last = -1; /* the previous term's unit */

	if (!text || !*text)
		return false;
	while (*p) {
		int64_t ms;
		term t;
		int unit;

		if (!number_at(&p, &t))
			return false;
		unit = unit_at(p);
		if (unit < 0) {
			/* A bare number is seconds, and only alone. */
			if (*p || last >= 0 || !term_ms(&t, 1000, &total))
				return false;
			break;
		}
		if (unit <= last)
			return false;
		last = unit;
		p += strlen(units[unit].suffix);
		if (!term_ms(&t, units[unit].ms, &ms) || total > INT64_MAX - ms)
			return false;
		total += ms;
	}
	*ret_ms = total;
	return true;
}

DLOCK_API int dlock_parse_duration(const char *text, int64_t *ret_ms)
{
	int64_t ms;

	if (!ret_ms)
		return dlock__error(DLOCK_EINVAL, "duration: ret_ms is NULL");
	if (!text)
		return dlock__error(DLOCK_EINVAL, "duration: text is NULL");
	if (!dlock__duration_parse(text, &ms))
		return dlock__error(DLOCK_EINVAL, "'%.64s%s' is not a duration (%s)", text,
		                    strlen(text) > 64 ? "..." : "", DLOCK__DURATION_FORMS);
	*ret_ms = ms;
	return DLOCK_OK;
}
