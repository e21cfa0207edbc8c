/* SPDX-License-Identifier: MIT */
/*
 * Options, as URI query parameters and as keys of a configuration file's
 * backend groups.  Each backend lists its own in rows (parse.h); this file
 * parses a value by its row's kind and stores it where the row says, so
 * every backend's options are refused with the same words.  Every refusal
 * happens when the client is built and names the source, the key, the
 * value and the rule.
 */
#include <string.h>

#include "error.h"
#include "parse.h"

static int bad(const char *where, const char *key, const char *value, const char *why)
{
	/* A password's value is never shown. */
	if (g_str_has_suffix(key, "password"))
		value = "***";
	return dlock__error(DLOCK_ECONFIG, "%s: option '%s': '%s' %s", where, key, value, why);
}

static int out_of_range(const char *where, const char *key, const char *value, const char *bound,
                        int64_t limit_ms)
{
	char *why = g_strdup_printf("is %s of %" G_GINT64_FORMAT "ms", bound, limit_ms);
	int rc = bad(where, key, value, why);

	g_free(why);
	return rc;
}

static bool parse_onoff(const char *value, bool *ret)
{
	static const char *const yes[] = { "on", "true", "yes", "1" };
	static const char *const no[] = { "off", "false", "no", "0" };

	for (size_t i = 0; i < G_N_ELEMENTS(yes); i++) {
		if (g_ascii_strcasecmp(value, yes[i]) == 0) {
			*ret = true;
			return true;
		}
		if (g_ascii_strcasecmp(value, no[i]) == 0) {
			*ret = false;
			return true;
		}
	}
	return false;
}

/* "is neither braced nor plain", or for more words "is none of a, b or c". */
static char *choices_refusal(const char *const *choices)
{
	guint n = g_strv_length((gchar **)choices);
	GString *s = g_string_new(n == 2 ? "is neither " : "is none of ");

	for (guint i = 0; i < n; i++) {
		if (i > 0)
			g_string_append(s, n == 2 ? " nor " : i + 1 == n ? " or " : ", ");
		g_string_append(s, choices[i]);
	}
	return g_string_free(s, FALSE);
}

static void set_string(char **field, const char *value)
{
	g_free(*field);
	*field = g_strdup(value);
}

/* Parse value by the row's kind into the settings struct values. */
static int set_row(const dlock__option *row, void *values, const char *key, const char *value,
                   const char *where)
{
	void *field = (char *)values + row->offset;
	int64_t ms;
	char *why;
	int rc;

	switch (row->kind) {
	case DLOCK__OPTION_DURATION:
		if (!dlock__duration_parse(value, &ms))
			return bad(where, key, value, "is not a duration (" DLOCK__DURATION_FORMS ")");
		if (ms < row->min_ms)
			return out_of_range(where, key, value, "below the minimum", row->min_ms);
		if (ms > row->max_ms)
			return out_of_range(where, key, value, "above the maximum", row->max_ms);
		*(int64_t *)field = ms;
		return DLOCK_OK;
	case DLOCK__OPTION_ONOFF:
		if (!parse_onoff(value, field))
			return bad(where, key, value, "is neither on nor off");
		return DLOCK_OK;
	case DLOCK__OPTION_CHOICE:
		for (int i = 0; row->choices[i]; i++) {
			if (strcmp(row->choices[i], value) == 0) {
				*(int *)field = i;
				return DLOCK_OK;
			}
		}
		why = choices_refusal(row->choices);
		rc = bad(where, key, value, why);
		g_free(why);
		return rc;
	case DLOCK__OPTION_STRING:
		/* No check: any text. */
		if (row->check && !row->check(value))
			return bad(where, key, value, row->why);
		set_string(field, value);
		return DLOCK_OK;
	case DLOCK__OPTION_PATH:
		if (value[0] != '/')
			return bad(where, key, value, "is not an absolute path");
		set_string(field, value);
		return DLOCK_OK;
	case DLOCK__OPTION_COUNT: {
		guint64 n;

		if (!g_ascii_isdigit(value[0]) || !g_ascii_string_to_unsigned(value, 10, 0, G_MAXINT, &n, NULL))
			return bad(where, key, value, "is not a number");
		if (n > (guint64)row->count_max) {
			why = g_strdup_printf("is above the maximum of %d", row->count_max);
			rc = bad(where, key, value, why);
			g_free(why);
			return rc;
		}
		*(int *)field = (int)n;
		return DLOCK_OK;
	}
	}
	g_assert_not_reached();
}

static int find_row(const dlock__option *rows, const char *name)
{
	for (int i = 0; rows && rows[i].name; i++)
		if (strcmp(rows[i].name, name) == 0)
			return i;
	return -1;
}

void dlock__options_init(dlock__options *opts, const dlock__option *rows, size_t size,
                         dlock__option_known_fn known)
{
	opts->rows = rows;
	opts->values = g_malloc0(size);
	opts->given = 0;
	opts->known = known;
	/* The defaults are text read by the same rules as a user's value; the
	 * unit suite checks that every backend's defaults are accepted. */
	for (int i = 0; rows && rows[i].name; i++) {
		g_assert(i < 64);
		if (rows[i].fallback)
			(void)set_row(&rows[i], opts->values, rows[i].name, rows[i].fallback, "default");
	}
}

void dlock__options_clear(dlock__options *opts)
{
	for (int i = 0; opts->values && opts->rows && opts->rows[i].name; i++) {
		const dlock__option *row = &opts->rows[i];

		char *value;

		if (row->kind != DLOCK__OPTION_STRING && row->kind != DLOCK__OPTION_PATH)
			continue;
		value = *(char **)((char *)opts->values + row->offset);
		/* sentinel-password: not left behind in freed memory */
		if (g_str_has_suffix(row->name, "password"))
			dlock__secret_free(value);
		else
			g_free(value);
	}
	g_free(opts->values);
	opts->values = NULL;
}

int dlock__options_set(dlock__options *opts, const char *key, const char *value, const char *where)
{
	int i = find_row(opts->rows, key);
	int rc;

	if (i < 0 && !(opts->known && opts->known(key)))
		return dlock__error(DLOCK_ECONFIG, "%s: unknown option '%s'", where, key);
	if (i < 0)
		return dlock__error(DLOCK_ECONFIG, "%s: option '%s' does not apply to this backend", where, key);
	if (opts->given & (UINT64_C(1) << i))
		return dlock__error(DLOCK_ECONFIG, "%s: option '%s' given twice", where, key);
	rc = set_row(&opts->rows[i], opts->values, key, value, where);
	if (rc == DLOCK_OK)
		opts->given |= UINT64_C(1) << i;
	return rc;
}

bool dlock__options_given(const dlock__options *opts, const char *name)
{
	int i = find_row(opts->rows, name);

	return i >= 0 && (opts->given & (UINT64_C(1) << i));
}

const void *dlock__options_value(const dlock__options *opts, const char *name)
{
	int i = find_row(opts->rows, name);

	return i >= 0 ? (const char *)opts->values + opts->rows[i].offset : NULL;
}
