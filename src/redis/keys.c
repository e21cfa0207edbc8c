/* SPDX-License-Identifier: MIT */
/*
 * Names for resource R: the lock "<prefix>{R}" (default prefix "dlock:"),
 * the fencing counter "<prefix>{R}:fence", the wait queue
 * "<prefix>{R}:q", a semaphore's number of permits "<prefix>{R}:permits",
 * the release channel "<prefix>{R}:released" and each
 * wait's own channel "<prefix>{R}:w:<id>"; the braces keep every key in
 * one cluster slot.  With key-format=plain the lock key is R itself, as
 * redis-py's Lock and similar peers name it, so dlock and those peers
 * exclude each other.
 */
#include "internal.h"

/* The names are built on every acquire: concatenation, not printf. */
static char *key_with(const redis_backend *b, const char *resource, const char *suffix)
{
	if (b->plain_keys)
		return g_strconcat(resource, suffix, NULL);
	return g_strconcat(b->prefix, "{", resource, "}", suffix, NULL);
}

char *dlock__redis_key(const redis_backend *b, const char *resource)
{
	return key_with(b, resource, "");
}

char *dlock__redis_fence_key(const redis_backend *b, const char *resource)
{
	return key_with(b, resource, ":fence");
}

const char *dlock__redis_publish_command(const redis_backend *b)
{
	return b->cluster ? "SPUBLISH" : "PUBLISH";
}

void dlock__redis_names_init(redis_names *names, const redis_backend *b, const char *resource)
{
	names->key = dlock__redis_key(b, resource);
	names->fence = dlock__redis_fence_key(b, resource);
	names->queue = key_with(b, resource, ":q");
	names->permits = key_with(b, resource, ":permits");
	names->released = key_with(b, resource, ":released");
	names->wait = key_with(b, resource, ":w:");
}

void dlock__redis_names_copy(redis_names *to, const redis_names *from)
{
	to->key = g_strdup(from->key);
	to->fence = g_strdup(from->fence);
	to->queue = g_strdup(from->queue);
	to->permits = g_strdup(from->permits);
	to->released = g_strdup(from->released);
	to->wait = g_strdup(from->wait);
}

void dlock__redis_names_clear(redis_names *names)
{
	g_free(names->key);
	g_free(names->fence);
	g_free(names->queue);
	g_free(names->permits);
	g_free(names->released);
	g_free(names->wait);
}
