/* SPDX-License-Identifier: MIT */
/*
 * Lease deadlines: until when a backend can vouch for a hold that the
 * server keeps only for a time -- a Redis key's TTL, a ZooKeeper session's
 * timeout -- counted from the last send the server answered.
 *
 * Both count on CLOCK_BOOTTIME (dlock__boot_us()), which keeps counting
 * through a suspended machine as the server's clock does, and both take
 * the same safety margin off, so that the loss is declared before the
 * server could give the lock to anyone else.
 */
#ifndef DLOCK_KIT_LEASE_H
#define DLOCK_KIT_LEASE_H

#include <stdint.h>

/*
 * The margin taken off a lease of ttl_ms before it is declared lost:
 * 1% of the TTL for the difference in clock rates between us and the
 * server, plus 5 ms for the server's expiry resolution and our own
 * scheduling.  Microseconds.
 */
int64_t dlock__lease_margin_us(int64_t ttl_ms);

/*
 * When a lease of ttl_ms, counted from from_us (CLOCK_BOOTTIME: the send
 * time of the last request the server answered), must be taken as ended:
 * from_us + TTL - margin.  Counting from the send is safe: the server
 * starts its count when it receives, which is later.  A sum past INT64_MAX
 * saturates there ("no end in sight") instead of wrapping into the past.
 */
int64_t dlock__lease_end_us(int64_t from_us, int64_t ttl_ms);

#endif
