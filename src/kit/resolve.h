/* SPDX-License-Identifier: MIT */
/*
 * Host name resolution bounded by a deadline.  getaddrinfo() cannot be
 * interrupted and, with a DNS server that never answers, blocks for the
 * resolver's own timeouts (resolv.conf "timeout" x "attempts", per name
 * and address family): far past any caller's deadline.  Backends resolve
 * through here and hand their client libraries IP literals.
 */
#ifndef DLOCK_KIT_RESOLVE_H
#define DLOCK_KIT_RESOLVE_H

#include <stdint.h>

#include "waiter.h"

typedef struct dlock__resolver dlock__resolver;

/* One per backend; no thread, no I/O. */
dlock__resolver *dlock__resolver_new(void);
/* Lookups still running in the C library when this is called (abandoned
 * by callers whose deadline passed) keep their small request record: the
 * C library writes into it when it finishes.  NULL is a no-op. */
void dlock__resolver_free(dlock__resolver *resolver);

/*
 * The numeric addresses of host (IPv4 ones first, as hiredis tries them),
 * within deadline_us on the monotonic clock (INT64_MAX: no limit).  An IP
 * literal is returned as it is, with no lookup.  Safe from any thread, no
 * lock held while waiting.
 *
 * Returns DLOCK_OK and *ret_addrs (NULL-terminated, g_strfreev), or
 * DLOCK_EUNAVAILABLE with a message naming host (the name does not
 * resolve, or no answer before the deadline: the lookup is then abandoned).
 * A cancel of waiter (may be NULL) abandons the lookup as the deadline
 * does, at once: DLOCK_ECANCELED.
 */
int dlock__resolve(dlock__resolver *resolver, const char *host, dlock__waiter *waiter,
                   int64_t deadline_us, char ***ret_addrs);

/*
 * Several names at once (the servers of an ensemble), all looked up in
 * parallel within deadline_us; once one host has addresses the others get
 * at most 100 ms more, so a name that never resolves delays the rest only
 * that long.  ret_addrs has n entries: the
 * addresses of hosts[i] (g_strfreev), or NULL when it did not resolve.
 * Returns DLOCK_OK when at least one resolved, else DLOCK_EUNAVAILABLE
 * with the first failure's message (and every entry NULL), or
 * DLOCK_ECANCELED (every entry NULL) on a cancel of waiter (may be NULL).
 */
int dlock__resolve_each(dlock__resolver *resolver, const char *const *hosts, unsigned n,
                        dlock__waiter *waiter, int64_t deadline_us, char ***ret_addrs);

#endif
