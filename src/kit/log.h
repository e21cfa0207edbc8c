/* SPDX-License-Identifier: MIT */
/*
 * The client's logger: where the library's messages go (never stdout or
 * stderr).  A client embeds one; backends reach it only through
 * dlock__log().
 */
#ifndef DLOCK_KIT_LOG_H
#define DLOCK_KIT_LOG_H

#include <glib.h>

#include "dlock.h"

typedef struct dlock__logger dlock__logger;

struct dlock__logger {
	GMutex mu;          /* guards the fields below (rank LOG, taken under any other) */
	dlock_log_fn fn;
	void *user_data;
	dlock_log_level max_level;
};

/* A message to the logger's callback, if it wants this level. */
void dlock__log(const dlock__logger *logger, dlock_log_level level, const char *fmt, ...)
	G_GNUC_PRINTF(3, 4);

void dlock__logger_init(dlock__logger *logger);
void dlock__logger_clear(dlock__logger *logger);
/* Install fn (NULL: drop every message) for messages up to max_level. */
void dlock__logger_set(dlock__logger *logger, dlock_log_level max_level, dlock_log_fn fn,
                       void *user_data);

#endif
