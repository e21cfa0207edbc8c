/*
 * The one place that names every backend: URI schemes to operations
 * tables.  A new backend is one folder and one line here; the set of
 * option names follows from this table.
 */
#include <string.h>

#include "core.h"
#include "file/file.h"
#include "redis/redis.h"
#include "zk/zk.h"

static const struct {
	const char *scheme;
	const dlock__backend_ops *ops;
} schemes[] = {
	{ "redis", &dlock__redis_ops },
	{ "redis+unix", &dlock__redis_ops },
	{ "file", &dlock__file_ops },
	{ "zk", &dlock__zk_ops },
};

const char *dlock__backend_schemes(void)
{
	return "redis, redis+unix, file, zk";
}

const dlock__backend_ops *dlock__backend_for_scheme(const char *scheme)
{
	for (size_t i = 0; i < G_N_ELEMENTS(schemes); i++)
		if (strcmp(schemes[i].scheme, scheme) == 0)
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
