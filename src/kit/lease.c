/* SPDX-License-Identifier: MIT */
#include <glib.h>

#include "lease.h"

/* The longest TTL counted exactly; a longer one counts as this long
 * (about 292 000 years, so its margin and end cannot overflow). */
#define TTL_MAX_MS (INT64_MAX / 1000)

int64_t dlock__lease_margin_us(int64_t ttl_ms)
{
	return MIN(ttl_ms, TTL_MAX_MS) * 10 + 5000;
}

int64_t dlock__lease_end_us(int64_t from_us, int64_t ttl_ms)
{
	int64_t ttl = MIN(ttl_ms, TTL_MAX_MS);
	int64_t left = ttl * 1000 - dlock__lease_margin_us(ttl);

	if (left > 0 && from_us > INT64_MAX - left)
		return INT64_MAX;
	return from_us + left;
}
