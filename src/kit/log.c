/* SPDX-License-Identifier: MIT */
/*
 * The logger behind a client's log callback (set in client.c).  The
 * library never writes to stdout or stderr; without a callback its
 * messages are dropped.
 */
#include <stdarg.h>

#include "log.h"
#include "mutex.h"

void dlock__logger_init(dlock__logger *logger)
{
	g_mutex_init(&logger->mu);
	logger->fn = NULL;
	logger->user_data = NULL;
	logger->max_level = DLOCK_LOG_WARNING;
}

void dlock__logger_clear(dlock__logger *logger)
{
	g_mutex_clear(&logger->mu);
}

void dlock__log(const dlock__logger *clogger, dlock_log_level level, const char *fmt, ...)
{
	/* The logger is shared and its mutex is taken, so it is not const in
	 * fact; backends get it as const to make clear they do not own it. */
	dlock__logger *logger = (dlock__logger *)clogger;
	va_list ap;
	char *message;

	if (!logger)
		return;
	dlock__mutex_lock(&logger->mu, DLOCK__RANK_LOG);
	if (logger->fn && level <= logger->max_level) {
		va_start(ap, fmt);
		message = g_strdup_vprintf(fmt, ap);
		va_end(ap);
		logger->fn(level, message, logger->user_data);
		g_free(message);
	}
	dlock__mutex_unlock(&logger->mu);
}

void dlock__logger_set(dlock__logger *logger, dlock_log_level max_level, dlock_log_fn fn,
                       void *user_data)
{
	dlock__mutex_lock(&logger->mu, DLOCK__RANK_LOG);
	logger->fn = fn;
	logger->user_data = user_data;
	logger->max_level = max_level;
	dlock__mutex_unlock(&logger->mu);
}
