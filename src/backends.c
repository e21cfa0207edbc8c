/*
 * The one place that names every backend: URI schemes to operations
 * tables.  A new backend is one folder and one line here.
 */
#include <string.h>

#include "backend.h"
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
