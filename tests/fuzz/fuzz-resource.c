/* SPDX-License-Identifier: MIT */
/*
 * Resource names: dlock__resource_check on any bytes.  An accepted name
 * is 1-255 bytes of valid UTF-8 without '{', '}' or an empty, "." or ".."
 * segment, as dlock.h promises.
 */
#include <string.h>

#include "dlock.h"
#include "fuzz.h"
#include "parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *name = fuzz_string(data, size);

	if (dlock__resource_check(name) == DLOCK_OK) {
		size_t len = strlen(name);
		char **segments = g_strsplit(name, "/", -1);

		FUZZ_CHECK(len >= 1 && len <= 255, "length %zu", len);
		FUZZ_CHECK(g_utf8_validate(name, -1, NULL), "invalid UTF-8 accepted");
		FUZZ_CHECK(!strpbrk(name, "{}"), "'%s'", name);
		for (int i = 0; segments[i]; i++)
			FUZZ_CHECK(*segments[i] && strcmp(segments[i], ".") != 0 && strcmp(segments[i], "..") != 0,
			           "'%s'", name);
		g_strfreev(segments);
	} else {
		FUZZ_CHECK(dlock_last_error_message()[0] != '\0', "refused without a message");
	}
	g_free(name);
	return 0;
}
