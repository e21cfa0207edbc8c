/* SPDX-License-Identifier: MIT */
/*
 * Owner tokens and holder records: dlock__token_parse on any text (a
 * peer's value read from a server), then the holder described as status
 * shows it.  A token dlock makes from a parsed holder parses back to the
 * same holder.
 */
#include <string.h>

#include "fuzz.h"
#include "parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *token = fuzz_string(data, size);
	dlock__holder holder;

	if (dlock__token_parse(token, &holder)) {
		char *text = dlock__holder_describe(&holder);
		char *again = dlock__token_new(&holder);
		dlock__holder back;

		FUZZ_CHECK(text && strstr(text, "host="), "'%s'", token);
		FUZZ_CHECK(dlock__token_parse(again, &back), "'%s' made '%s'", token, again);
		FUZZ_CHECK(back.pid == holder.pid && back.tid == holder.tid && back.since_ms == holder.since_ms &&
		                   strcmp(back.host, holder.host) == 0,
		           "'%s' made '%s'", token, again);
		dlock__holder_clear(&back);
		g_free(again);
		g_free(text);
		dlock__holder_clear(&holder);
	}
	g_free(token);
	return 0;
}
