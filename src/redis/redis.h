/* SPDX-License-Identifier: MIT */
/* The Redis lease backend, as the rest of the library sees it. */
#ifndef DLOCK_REDIS_REDIS_H
#define DLOCK_REDIS_REDIS_H

#include "backend.h"

extern const dlock__backend_ops dlock__redis_ops;
/* Several masters in one redis:// URI: locked by quorum (docs/redis.md,
 * "Redlock"). */
extern const dlock__backend_ops dlock__redlock_ops;

#endif
