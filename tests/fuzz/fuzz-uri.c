/* SPDX-License-Identifier: MIT */
/*
 * Client specifications: dlock__uri_parse and the redaction that every
 * message uses.  Besides no crash: no message and no redacted form holds
 * what may be a password, and the options a parsed URI carries go
 * through the option checks (what dlock_client_new does next).
 */
#include <string.h>

#include "dlock.h"
#include "fuzz-options.h"
#include "fuzz.h"
#include "parse.h"

/* The raw ":password@" text of spec's authority, or NULL. */
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

/* Whether a query item's key names a secret: it ends in "password". */
static bool secret_key(const char *key, size_t len)
{
	return len >= 8 && g_ascii_strncasecmp(key + len - 8, "password", 8) == 0;
}

/* text with the value of each secret query item -- after the first '?',
 * items split at '&' -- replaced by "***". */
static char *hide_secret_values(char *text)
{
	const char *query = strchr(text, '?');
	GString *out;

	if (!query)
		return text;
	out = g_string_new_len(text, query + 1 - text);
	for (const char *item = query + 1;;) {
		const char *end = item + strcspn(item, "&");
		const char *eq = memchr(item, '=', (size_t)(end - item));

		if (eq && secret_key(item, (size_t)(eq - item)))
			g_string_append_printf(out, "%.*s***", (int)(eq + 1 - item), item);
		else
			g_string_append_len(out, item, end - item);
		if (!*end)
			break;
		g_string_append_c(out, '&');
		item = end + 1;
	}
	g_free(text);
	return g_string_free(out, FALSE);
}

/*
 * The redacted form of a spec with "scheme://", built independently of
 * dlock__uri_redact: everything between "://" and the last '@' removed
 * but the text before its first ':' (the user), and the value of every
 * query item whose key ends in "password" hidden.  NULL for other specs.
 */
static char *expected_redaction(const char *spec, bool secrets)
{
	const char *auth = strstr(spec, "://"), *at, *colon, *user_end;
	char *text;

	if (!auth || !(at = strrchr(auth + 3, '@')))
		return NULL;
	colon = memchr(auth + 3, ':', (size_t)(at - auth - 3));
	user_end = colon ? colon : at;
	if (user_end == auth + 3)
		text = g_strdup_printf("%.*s%s", (int)(auth + 3 - spec), spec, at + 1);
	else
		text = g_strdup_printf("%.*s@%s", (int)(user_end - spec), spec, at + 1);
	return secrets ? hide_secret_values(text) : text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *spec = fuzz_string(data, size);
	char *redacted = dlock__uri_redact(spec);
	char *text = dlock__uri_redact_text(spec);
	char *expected = expected_redaction(spec, true);
	/* Whether the user information hides anything: what a message about a
	 * spec that does not parse must not quote raw. */
	char *expected_user = expected_redaction(spec, false);
	dlock__uri *uri = NULL;
	int rc;

	FUZZ_CHECK(!expected || strcmp(redacted, expected) == 0, "'%s' vs '%s'", redacted, expected);
	/* dlock__uri_redact_text goes word by word: on one word it must do
	 * what dlock__uri_redact does. */
	FUZZ_CHECK(strpbrk(spec, " \t\n\v\f\r'\"\xe2") || strcmp(text, redacted) == 0, "'%s' vs '%s'", text,
	           redacted);
	rc = dlock__uri_parse(spec, &uri);
	if (rc != 0) {
		/* Messages quote the spec only in its redacted form. */
		const char *m = dlock_last_error_message();

		FUZZ_CHECK(!expected_user || strcmp(expected_user, spec) == 0 || !strstr(m, spec), "'%s' quotes '%s'",
		           m, spec);
	} else {
		char *raw = raw_password(spec);
		dlock__options opts;

		FUZZ_CHECK(strcmp(uri->redacted, redacted) == 0, "'%s' vs '%s'", uri->redacted, redacted);
		FUZZ_CHECK(!raw || !strstr(uri->redacted, raw), "'%s' shows '%s'", uri->redacted, raw);
		dlock__options_init(&opts, fuzz_option_rows, sizeof(fuzz_options), NULL);
		for (guint i = 0; i < uri->options->len; i++) {
			const dlock__kv *kv = uri->options->pdata[i];

			dlock__options_set(&opts, kv->key, kv->value, uri->redacted);
		}
		FUZZ_CHECK(fuzz_options_in_bounds(&opts), "%s", spec);
		dlock__options_clear(&opts);
		g_free(raw);
		dlock__uri_free(uri);
	}
	g_free(expected);
	g_free(expected_user);
	g_free(text);
	g_free(redacted);
	g_free(spec);
	return 0;
}
