/* SPDX-License-Identifier: MIT */
/*
 * Clocks.  The caller's deadlines use the monotonic clock; leases and
 * session timers use CLOCK_BOOTTIME, which keeps counting while the machine
 * is suspended (a lease on the server runs on through a suspend); wall-clock
 * time appears only in holder records shown to people.
 */
#ifndef DLOCK_KIT_CLOCK_H
#define DLOCK_KIT_CLOCK_H

#include <stdint.h>

/* Microseconds on the monotonic clock (g_get_monotonic_time). */
int64_t dlock__mono_us(void);
/* Microseconds on CLOCK_BOOTTIME. */
int64_t dlock__boot_us(void);
/* Milliseconds since the Unix epoch. */
int64_t dlock__wall_ms(void);

/* The absolute monotonic deadline for a wait in ms: INT64_MAX for < 0. */
int64_t dlock__deadline_after_ms(int64_t wait_ms);
/* Microseconds left until deadline_us, never negative; INT64_MAX stays. */
int64_t dlock__remaining_us(int64_t deadline_us);

#endif
