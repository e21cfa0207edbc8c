/* SPDX-License-Identifier: MIT */
/*
 * Shared by the libFuzzer harnesses: each defines LLVMFuzzerTestOneInput
 * over one parser of src/kit or src/common and checks what must hold for
 * every input, beyond "no crash, no leak, no hang" (the sanitizers and
 * libFuzzer's -timeout see to those).
 */
#ifndef DLOCK_TESTS_FUZZ_H
#define DLOCK_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <glib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a C string: cut at its first NUL, as every parser here
 * takes C strings.  Caller frees with g_free(). */
static inline char *fuzz_string(const uint8_t *data, size_t size)
{
	return g_strndup((const char *)data, size);
}

/* Split the input at its first n - 1 '\n' bytes into n C strings (the
 * missing ones empty).  Caller frees with g_strfreev(). */
static inline char **fuzz_split(const uint8_t *data, size_t size, int n)
{
	char *text = fuzz_string(data, size);
	char **parts = g_strsplit(text, "\n", n);
	char **out = g_new0(char *, n + 1);

	bool ended = false;

	for (int i = 0; i < n; i++) {
		ended = ended || !parts[i];
		out[i] = g_strdup(ended ? "" : parts[i]);
	}
	g_strfreev(parts);
	g_free(text);
	return out;
}

/* A property that failed: say which and on what, then abort so that
 * libFuzzer saves the input. */
#define FUZZ_CHECK(cond, ...)                                                    \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "fuzz check failed: %s: ", #cond);       \
			fprintf(stderr, __VA_ARGS__);                            \
			fputc('\n', stderr);                                     \
			abort();                                                 \
		}                                                                \
	} while (0)

#endif
