/*
 * Key names for resource R: "<prefix>{R}" (default prefix "dlock:"), the
 * fencing counter "<prefix>{R}:fence" and the release channel
 * "<prefix>{R}:released"; the braces keep all three in one cluster slot.
 * With key-format=plain the lock key is R itself, as redis-py's Lock and
 * similar peers name it, so dlock and those peers exclude each other.
 */
#include "internal.h"

/* The key names are built on every acquire: concatenation, not printf. */
static char *key_with(const dlock__backend *b, const char *resource, const char *suffix)
{
	if (b->plain_keys)
		return g_strconcat(resource, suffix, NULL);
	return g_strconcat(b->prefix, "{", resource, "}", suffix, NULL);
}

char *dlock__redis_key(const dlock__backend *b, const char *resource)
{
	return key_with(b, resource, "");
}

char *dlock__redis_fence_key(const dlock__backend *b, const char *resource)
{
	return key_with(b, resource, ":fence");
}

char *dlock__redis_channel(const dlock__backend *b, const char *resource)
{
	return key_with(b, resource, ":released");
}
