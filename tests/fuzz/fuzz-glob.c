/* SPDX-License-Identifier: MIT */
/*
 * Route patterns: the input is "a\nb\nname".  Checked for every input:
 * dlock__glob_match agrees with a plain dynamic-programming matcher, and
 * dlock__glob_covers is sound: if a covers b, every name b matches a
 * matches too (here: name, and name with b's wildcards filled in).
 */
#include <string.h>

#include "config.h"
#include "fuzz.h"

/* The reference: m[i][j] = pattern from i matches text from j. */
static bool reference_match(const char *p, const char *t)
{
	size_t lp = strlen(p), lt = strlen(t);
	bool *m = g_new0(bool, (lp + 1) * (lt + 1));
	bool result;

#define M(i, j) m[(i) * (lt + 1) + (j)]
	M(lp, lt) = true;
	for (size_t i = lp + 1; i-- > 0;) {
		for (size_t j = lt + 1; j-- > 0;) {
			if (i == lp)
				continue;
			if (p[i] == '*')
				M(i, j) = M(i + 1, j) || (j < lt && M(i, j + 1));
			else if (j < lt && (p[i] == '?' || p[i] == t[j]))
				M(i, j) = M(i + 1, j + 1);
		}
	}
	result = M(0, 0);
#undef M
	g_free(m);
	return result;
}

/* b with each '*' replaced by fill and each '?' by its first character. */
static char *instance(const char *b, const char *fill)
{
	GString *out = g_string_new(NULL);

	for (const char *p = b; *p; p++) {
		if (*p == '*')
			g_string_append(out, fill);
		else if (*p == '?')
			g_string_append_c(out, *fill ? *fill : 'x');
		else
			g_string_append_c(out, *p);
	}
	return g_string_free(out, FALSE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char **in = fuzz_split(data, size, 3);
	const char *a = in[0], *b = in[1], *name = in[2];
	bool m = dlock__glob_match(b, name);

	FUZZ_CHECK(m == reference_match(b, name), "match('%s', '%s') = %d", b, name, m);
	if (dlock__glob_covers(a, b)) {
		char *filled = instance(b, name);

		FUZZ_CHECK(!m || dlock__glob_match(a, name), "covers('%s', '%s') but '%s'", a, b, name);
		FUZZ_CHECK(dlock__glob_match(a, filled), "covers('%s', '%s') but '%s'", a, b, filled);
		g_free(filled);
	}
	FUZZ_CHECK(dlock__glob_covers(a, a), "'%s' does not cover itself", a);
	g_strfreev(in);
	return 0;
}
