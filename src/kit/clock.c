/* SPDX-License-Identifier: MIT */
#include <time.h>

#include <glib.h>

#include "clock.h"

int64_t dlock__mono_us(void)
{
	return g_get_monotonic_time();
}

int64_t dlock__boot_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t dlock__wall_ms(void)
{
	return g_get_real_time() / 1000;
}

int64_t dlock__deadline_after_ms(int64_t wait_ms)
{
	if (wait_ms < 0 || wait_ms > INT64_MAX / 2000)
		return INT64_MAX;
	return dlock__mono_us() + wait_ms * 1000;
}

int64_t dlock__remaining_us(int64_t deadline_us)
{
	int64_t now;

	if (deadline_us == INT64_MAX)
		return INT64_MAX;
	now = dlock__mono_us();
	return deadline_us > now ? deadline_us - now : 0;
}
