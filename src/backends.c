/* SPDX-License-Identifier: MIT */
/*
 * The one place that names every backend: URI schemes to operations
 * tables.  A new backend is one folder and one line here; the list of
 * schemes in messages, the default specification and the set of option
 * names all follow from this table.
 */
#include <string.h>

#include "backend.h"
#include "file/file.h"
#include "redis/redis.h"
#include "zk/zk.h"

static const struct {
	const char *scheme;
	const dlock__backend_ops *ops;
	bool is_default; /* "scheme://" when no specification is given */
	bool several;    /* chosen, before the row of the same scheme without it,
	                  * when the URI names several hosts */
} schemes[] = {
	{ "redis", &dlock__redlock_ops, false, true },
	{ "redis", &dlock__redis_ops, false, false },
	{ "redis+unix", &dlock__redis_ops, false, false },
	{ "redis+sentinel", &dlock__redis_ops, false, false },
	{ "redis+cluster", &dlock__redis_ops, false, false },
	{ "file", &dlock__file_ops, true, false },
	{ "zk", &dlock__zk_ops, false, false },
};

char *dlock__backend_schemes(void)
{
	GString *s = g_string_new(NULL);

	for (size_t i = 0; i < G_N_ELEMENTS(schemes); i++)
		if (!schemes[i].several)
			g_string_append_printf(s, "%s%s", s->len ? ", " : "", schemes[i].scheme);
	return g_string_free(s, FALSE);
}

const char *dlock__backend_default_scheme(void)
{
	for (size_t i = 0; i < G_N_ELEMENTS(schemes); i++)
		if (schemes[i].is_default)
			return schemes[i].scheme;
	g_assert_not_reached();
}

const dlock__backend_ops *dlock__backend_for_scheme(const char *scheme)
{
	for (size_t i = 0; i < G_N_ELEMENTS(schemes); i++)
		if (strcmp(schemes[i].scheme, scheme) == 0 && !schemes[i].several)
			return schemes[i].ops;
	return NULL;
}

const dlock__backend_ops *dlock__backend_for_uri(const dlock__uri *uri)
{
	for (size_t i = 0; i < G_N_ELEMENTS(schemes); i++)
		if (strcmp(schemes[i].scheme, uri->scheme) == 0 &&
		    (!schemes[i].several || uri->hosts->len > 1))
			return schemes[i].ops;
	return NULL;
}

bool dlock__backend_option_known(const char *name)
{
	for (size_t i = 0; i < G_N_ELEMENTS(schemes); i++)
		for (const dlock__option *row = schemes[i].ops->options; row && row->name; row++)
			if (strcmp(row->name, name) == 0)
				return true;
	return false;
}
