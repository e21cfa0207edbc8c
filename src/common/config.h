/* SPDX-License-Identifier: MIT */
/*
 * Configuration files (INI, read with GKeyFile):
 *
 *   [defaults]        backend = NAME, wait = DURATION
 *   [backend NAME]    url = URI, plus any fixed option as a key
 *   [route NAME]      match = GLOB, backend = NAME   (file order, first match wins)
 *
 * Loading checks everything that does not depend on a backend: unknown
 * groups and keys, duplicates (GKeyFile would merge them silently), a route
 * naming an unknown backend, a route an earlier one shadows, a malformed
 * wait.  Options are checked when the client opens each backend.
 */
#ifndef DLOCK_COMMON_CONFIG_H
#define DLOCK_COMMON_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

typedef struct dlock__config_backend {
	char *name;
	char *url;
	GPtrArray *options; /* dlock__kv *: the group's other keys, in file order */
} dlock__config_backend;

typedef struct dlock__config_route {
	char *name;
	char *match;
	char *backend;
} dlock__config_route;

typedef struct dlock__config {
	char *path;             /* as messages show it (dlock__uri_redact) */
	char *default_backend;  /* NULL when not given */
	int64_t wait_ms;        /* -1 when not given */
	GPtrArray *backends;    /* dlock__config_backend *, file order */
	GPtrArray *routes;      /* dlock__config_route *, file order */
} dlock__config;

/* DLOCK_OK and *ret, or DLOCK_ECONFIG naming the file, group and key. */
int dlock__config_load(const char *path, dlock__config **ret);
void dlock__config_free(dlock__config *config);

/* Glob match: '*' any run of characters ('/' included), '?' one character. */
bool dlock__glob_match(const char *pattern, const char *text);
/* Whether every name that later matches is also matched by earlier. */
bool dlock__glob_covers(const char *earlier, const char *later);

#endif
