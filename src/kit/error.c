/* SPDX-License-Identifier: MIT */
/*
 * Result code texts and the per-thread detail of the last failure.
 *
 * The detail is thread-local rather than per handle: a handle may be shared
 * by threads, and a per-handle "last error" would race between them.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

#define MESSAGE_MAX 1024

static _Thread_local char last_message[MESSAGE_MAX];

static const struct {
	int code;
	const char *name;
	const char *text;
} codes[] = {
	{ DLOCK_OK, "DLOCK_OK", "success" },
	{ DLOCK_EINVAL, "DLOCK_EINVAL", "invalid argument" },
	{ DLOCK_EBUSY, "DLOCK_EBUSY", "lock held by another owner" },
	{ DLOCK_ETIMEDOUT, "DLOCK_ETIMEDOUT", "timed out waiting for the lock" },
	{ DLOCK_ENOTHELD, "DLOCK_ENOTHELD", "lock not held by the caller" },
	{ DLOCK_ELOST, "DLOCK_ELOST", "lock was lost" },
	{ DLOCK_EUNAVAILABLE, "DLOCK_EUNAVAILABLE", "backend unavailable" },
	{ DLOCK_EBACKEND, "DLOCK_EBACKEND", "backend returned an error" },
	{ DLOCK_ECONFIG, "DLOCK_ECONFIG", "invalid configuration" },
	{ DLOCK_ECANCELED, "DLOCK_ECANCELED", "operation canceled" },
	{ DLOCK_EDEADLK, "DLOCK_EDEADLK", "upgrade from a read hold would deadlock" },
	{ DLOCK_EACCES, "DLOCK_EACCES", "backend refused the credentials or the operation" },
};

DLOCK_API const char *dlock_strerror(int code)
{
	for (size_t i = 0; i < G_N_ELEMENTS(codes); i++)
		if (codes[i].code == code)
			return codes[i].text;
	return "unknown error";
}

DLOCK_API const char *dlock_code_name(int code)
{
	for (size_t i = 0; i < G_N_ELEMENTS(codes); i++)
		if (codes[i].code == code)
			return codes[i].name;
	return "DLOCK_E?";
}

DLOCK_API const char *dlock_last_error_message(void)
{
	return last_message;
}

int dlock__error(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_message, sizeof(last_message), fmt, ap);
	va_end(ap);
	return code;
}

int dlock__error_busy(const char *resource)
{
	return dlock__error(DLOCK_EBUSY, "lock '%s' is held by another owner", resource);
}

int dlock__error_timeout(const char *resource, int64_t wait_ms)
{
	return dlock__error(DLOCK_ETIMEDOUT, "lock '%s' was not granted within %" PRId64 " ms", resource,
	                    wait_ms);
}

int dlock__error_canceled(const char *resource)
{
	return dlock__error(DLOCK_ECANCELED, "wait for lock '%s' was canceled", resource);
}

int dlock__error_prefix(int code, const char *prefix)
{
	char tmp[MESSAGE_MAX];

	g_strlcpy(tmp, last_message, sizeof(tmp));
	snprintf(last_message, sizeof(last_message), "%s%s", prefix, tmp);
	return code;
}

int dlock__error_permits(const char *resource, uint32_t asked, uint32_t stored)
{
	return dlock__error(DLOCK_EINVAL, "semaphore '%s' is in use with %" PRIu32 " permits; this "
	                    "handle asks for %" PRIu32 " (every holder and waiter must agree; a new "
	                    "number takes effect once nobody holds or waits)", resource, stored, asked);
}
