/* SPDX-License-Identifier: MIT */
/*
 * Status codes and the thread-local error detail behind
 * dlock_last_error_message().
 */
#ifndef DLOCK_KIT_ERROR_H
#define DLOCK_KIT_ERROR_H

#include <stdint.h>

#include <glib.h>

#include "dlock.h"

/* Record a detail message for this thread's last failure and return code,
 * so that a failing path reads: return dlock__error(DLOCK_EINVAL, "...");
 * The message is formatted with printf rules. */
int dlock__error(int code, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* Like dlock__error, with the message prefixed by context ("redis 127.0.0.1:6379: ").
 * Used where a lower layer already recorded a message. */
int dlock__error_prefix(int code, const char *prefix);

/*
 * The three ways an acquire of resource ends without the lock, worded here
 * once so that every backend says them alike.  Each records its message
 * and returns its code:
 *   DLOCK_EBUSY      "lock 'R' is held by another owner" (a try, wait 0)
 *   DLOCK_ETIMEDOUT  "lock 'R' was not granted within W ms"
 *   DLOCK_ECANCELED  "wait for lock 'R' was canceled"
 */
int dlock__error_busy(const char *resource);
int dlock__error_timeout(const char *resource, int64_t wait_ms);
int dlock__error_canceled(const char *resource);

/*
 * A semaphore's acquire that found the resource in use with another
 * number of permits than it asks for (docs/recipes.md, "Semaphores"),
 * worded once for every backend: DLOCK_EINVAL "semaphore 'R' is in use
 * with S permits; this handle asks for A ...".
 */
int dlock__error_permits(const char *resource, uint32_t asked, uint32_t stored);

#endif
