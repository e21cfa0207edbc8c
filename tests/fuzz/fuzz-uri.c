/*
 * Client specifications: dlock__uri_parse and the redaction that every
 * message uses.  Besides no crash: a parsed URI's redacted form never
 * holds its password, and the options it carries go through the option
 * checks (what dlock_client_new does next).
 */
#include <string.h>

#include "fuzz.h"
#include "parse.h"

/* The raw "user:password" text of spec's authority, or NULL. */
static char *raw_password(const char *spec)
{
	const char *auth = strstr(spec, "://");
	const char *end, *at = NULL, *colon;

	if (!auth)
		return NULL;
	auth += 3;
	end = auth + strcspn(auth, "/?");
	for (const char *q = auth; q < end; q++)
		if (*q == '@')
			at = q;
	if (!at || !(colon = memchr(auth, ':', (size_t)(at - auth))))
		return NULL;
	return g_strndup(colon, (gsize)(at - colon + 1)); /* ":password@" */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *spec = fuzz_string(data, size);
	char *redacted = dlock__uri_redact(spec);
	char *text = dlock__uri_redact_text(spec);
	dlock__uri *uri = NULL;

	if (dlock__uri_parse(spec, &uri) == 0) {
		char *raw = raw_password(spec);
		dlock__options opts;

		FUZZ_CHECK(strcmp(uri->redacted, redacted) == 0, "'%s' vs '%s'", uri->redacted, redacted);
		FUZZ_CHECK(!raw || !strstr(uri->redacted, raw), "'%s' shows '%s'", uri->redacted, raw);
		dlock__options_init(&opts);
		for (guint i = 0; i < uri->options->len; i++) {
			const dlock__kv *kv = uri->options->pdata[i];

			dlock__options_set(&opts, 0x1ffu, kv->key, kv->value, uri->redacted);
		}
		FUZZ_CHECK(opts.ttl_ms >= DLOCK__TTL_MIN_MS && opts.ttl_ms <= DLOCK__TTL_MAX_MS, "%s", spec);
		FUZZ_CHECK(opts.connect_timeout_ms > 0 && opts.connect_timeout_ms <= DLOCK__TIMEOUT_MAX_MS, "%s",
		           spec);
		dlock__options_clear(&opts);
		g_free(raw);
		dlock__uri_free(uri);
	}
	g_free(text);
	g_free(redacted);
	g_free(spec);
	return 0;
}
