/* SPDX-License-Identifier: MIT */
/*
 * Lock file names: "r-" and the resource name with every byte outside
 * [A-Za-z0-9._-] escaped as %XX ('/' included, so "a" and "a/b" never meet
 * and nothing leaves the directory); when that would pass NAME_MAX, "h-"
 * and the SHA-256 of the name.  The prefixes keep the two forms apart.
 * Every process locking the directory, whatever its dlock version, must
 * find a resource under the same name.
 */
#include <limits.h>

#include "internal.h"

char *dlock__file_path(const file_backend *b, const char *resource)
{
	GString *name = g_string_new("r-");
	char *path;

	for (const unsigned char *p = (const unsigned char *)resource; *p; p++) {
		if (g_ascii_isalnum(*p) || *p == '.' || *p == '_' || *p == '-')
			g_string_append_c(name, (char)*p);
		else
			g_string_append_printf(name, "%%%02X", *p);
	}
	if (name->len > NAME_MAX) {
		char *hash = g_compute_checksum_for_string(G_CHECKSUM_SHA256, resource, -1);

		g_string_printf(name, "h-%s", hash);
		g_free(hash);
	}
	path = g_build_filename(b->dir, name->str, NULL);
	g_string_free(name, TRUE);
	return path;
}
