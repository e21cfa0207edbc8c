/* SPDX-License-Identifier: MIT */
/*
 * Client specifications: scheme://[user[:password]@]host[:port][,host[:port]...][/path][?k=v&...]
 *
 * This layer splits and percent-decodes; which schemes, paths and options
 * make sense is for the backends.  The redacted form, without the
 * password, is what messages and status output show.
 */
#include <string.h>

#include "error.h"
#include "parse.h"

static void host_free(gpointer data)
{
	dlock__host *host = data;

	g_free(host->host);
	g_free(host);
}

/* An option whose value is a secret: its name ends in "password"
 * (sentinel-password).  Messages never show such a value. */
static bool secret_key(const char *key, size_t len)
{
	return len >= 8 && g_ascii_strncasecmp(key + len - 8, "password", 8) == 0;
}

static void kv_free(gpointer data)
{
	dlock__kv *kv = data;

	if (kv->key && secret_key(kv->key, strlen(kv->key)))
		dlock__secret_free(kv->value);
	else
		g_free(kv->value);
	g_free(kv->key);
	g_free(kv);
}

/* A query item as messages show it: "key=***" for a secret one. */
static char *item_shown(const char *item)
{
	const char *eq = strchr(item, '=');

	if (eq && secret_key(item, (size_t)(eq - item)))
		return g_strdup_printf("%.*s=***", (int)(eq - item), item);
	return g_strdup(item);
}

/* Replace the value of every secret query item of out (after '?') with
 * "***". */
static void hide_secret_options(GString *out)
{
	char *q = strchr(out->str, '?');

	while (q) {
		char *item = q + 1;
		char *eq = strchr(item, '=');
		char *end = strchr(item, '&');
		size_t at;

		if (eq && (!end || eq < end) && secret_key(item, (size_t)(eq - item))) {
			at = (size_t)(eq + 1 - out->str);
			g_string_erase(out, (gssize)at, end ? (gssize)(end - eq - 1) : -1);
			g_string_insert(out, (gssize)at, "***");
			end = strchr(out->str + at, '&');
		}
		q = end;
	}
}

void dlock__secret_free(char *secret)
{
	if (!secret)
		return;
	/* explicit_bzero: a memset before free may be optimised away. */
	explicit_bzero(secret, strlen(secret));
	g_free(secret);
}

void dlock__uri_free(dlock__uri *uri)
{
	if (!uri)
		return;
	g_free(uri->scheme);
	g_free(uri->user);
	dlock__secret_free(uri->password);
	g_ptr_array_unref(uri->hosts);
	g_free(uri->path);
	g_ptr_array_unref(uri->options);
	g_free(uri->redacted);
	g_free(uri);
}

/* Percent-decode len bytes of s; NULL for a bad escape or an encoded NUL. */
static char *decode(const char *s, size_t len)
{
	GString *out = g_string_sized_new(len);

	for (size_t i = 0; i < len; i++) {
		if (s[i] != '%') {
			g_string_append_c(out, s[i]);
			continue;
		}
		if (i + 2 >= len || !g_ascii_isxdigit(s[i + 1]) || !g_ascii_isxdigit(s[i + 2])) {
			g_string_free(out, TRUE);
			return NULL;
		}
		char c = (char)(g_ascii_xdigit_value(s[i + 1]) * 16 + g_ascii_xdigit_value(s[i + 2]));

		if (c == '\0') {
			g_string_free(out, TRUE);
			return NULL;
		}
		g_string_append_c(out, c);
		i += 2;
	}
	return g_string_free(out, FALSE);
}

static bool is_scheme_char(char c)
{
	return g_ascii_isalnum(c) || c == '+' || c == '.' || c == '-';
}

char *dlock__uri_redact(const char *spec)
{
	const char *p, *start, *at = NULL;
	bool authority;
	GString *out;

	if ((p = strstr(spec, "://"))) {
		/* Even after something that is not a valid scheme. */
		authority = true;
		start = p + 3;
	} else {
		authority = false;
		start = spec;
	}
	/* The last '@' anywhere: a password with an unencoded '/' or '?' runs
	 * past the end of the authority, and must not show there either. */
	for (const char *q = start; *q; q++)
		if (*q == '@')
			at = q;
	if (!at) {
		out = g_string_new(spec);
		hide_secret_options(out);
		return g_string_free(out, FALSE);
	}
	out = g_string_new_len(spec, start - spec);
	if (authority) {
		const char *colon = memchr(start, ':', (size_t)(at - start));
		const char *user_end = colon ? colon : at;

		if (user_end > start) {
			g_string_append_len(out, start, user_end - start);
			g_string_append_c(out, '@');
		}
	} else {
		/* "redis:/user:password@host", mistyped without "//": hide
		 * everything from the first ':' to the '@'.  Without a ':' there
		 * is no password ("/home/me@corp/dlock.conf"). */
		const char *colon = memchr(start, ':', (size_t)(at - start));

		if (!colon) {
			g_string_assign(out, spec);
			hide_secret_options(out);
			return g_string_free(out, FALSE);
		}
		g_string_append_len(out, start, colon + 1 - start);
		g_string_append(out, "***@");
	}
	g_string_append(out, at + 1);
	hide_secret_options(out);
	return g_string_free(out, FALSE);
}

/* The length of the word separator at p, or 0: ASCII space and quotes,
 * and the curly quotes GLib puts around file names and lines (U+2018,
 * U+2019, U+201C, U+201D). */
static size_t separator_len(const char *p)
{
	if (g_ascii_isspace(*p) || *p == '\'' || *p == '"')
		return 1;
	if ((guchar)p[0] == 0xe2 && (guchar)p[1] == 0x80 &&
	    ((guchar)p[2] == 0x98 || (guchar)p[2] == 0x99 || (guchar)p[2] == 0x9c || (guchar)p[2] == 0x9d))
		return 3;
	return 0;
}

char *dlock__uri_redact_text(const char *text)
{
	GString *out = g_string_new(NULL);
	const char *p = text;

	while (*p) {
		size_t sep = separator_len(p);
		const char *end = p;
		char *word, *redacted;

		if (sep) {
			g_string_append_len(out, p, (gssize)sep);
			p += sep;
			continue;
		}
		while (*end && !separator_len(end))
			end++;
		word = g_strndup(p, (gsize)(end - p));
		redacted = dlock__uri_redact(word);
		g_string_append(out, redacted);
		g_free(redacted);
		g_free(word);
		p = end;
	}
	return g_string_free(out, FALSE);
}

static int parse_host(dlock__uri *uri, const char *spec, const char *s, size_t len)
{
	const char *end = s + len;
	const char *port = NULL;
	dlock__host *host;
	size_t host_len;

	if (len == 0)
		return dlock__error(DLOCK_ECONFIG, "'%s': empty host in the host list", spec);
	if (s[0] == '[') {
		const char *close = memchr(s, ']', len);

		if (!close)
			return dlock__error(DLOCK_ECONFIG, "'%s': '[' without ']' in a host", spec);
		if ((size_t)(close - s) + 1 < len) {
			if (close[1] != ':')
				return dlock__error(DLOCK_ECONFIG, "'%s': junk after ']' in a host", spec);
			port = close + 2;
		}
		host_len = (size_t)(close - s) - 1;
		s++;
	} else {
		const char *colon = memchr(s, ':', len);

		host_len = colon ? (size_t)(colon - s) : len;
		if (colon)
			port = colon + 1;
	}
	if (host_len == 0)
		return dlock__error(DLOCK_ECONFIG, "'%s': empty host name", spec);
	host = g_new0(dlock__host, 1);
	host->host = g_strndup(s, host_len);
	if (port) {
		size_t port_len = (size_t)(end - port);
		long value = 0;

		if (port_len == 0 || port_len > 5) {
			host_free(host);
			return dlock__error(DLOCK_ECONFIG, "'%s': bad port '%.*s'", spec, (int)port_len, port);
		}
		for (size_t i = 0; i < port_len; i++) {
			if (!g_ascii_isdigit(port[i])) {
				host_free(host);
				return dlock__error(DLOCK_ECONFIG, "'%s': bad port '%.*s'", spec, (int)port_len, port);
			}
			value = value * 10 + (port[i] - '0');
		}
		if (value < 1 || value > 65535) {
			host_free(host);
			return dlock__error(DLOCK_ECONFIG, "'%s': port %ld is out of range", spec, value);
		}
		host->port = (int)value;
	}
	g_ptr_array_add(uri->hosts, host);
	return DLOCK_OK;
}

static int parse_query(dlock__uri *uri, const char *spec, const char *query)
{
	gchar **items;
	int rc = DLOCK_OK;

	if (!*query)
		return DLOCK_OK;
	items = g_strsplit(query, "&", -1);
	for (int i = 0; items[i] && rc == DLOCK_OK; i++) {
		const char *eq = strchr(items[i], '=');
		dlock__kv *kv;

		if (!eq) {
			rc = dlock__error(DLOCK_ECONFIG, "'%s': query item '%s' has no '='", spec, items[i]);
			break;
		}
		if (eq == items[i]) {
			rc = dlock__error(DLOCK_ECONFIG, "'%s': query item '%s' has an empty key", spec, items[i]);
			break;
		}
		kv = g_new0(dlock__kv, 1);
		kv->key = decode(items[i], (size_t)(eq - items[i]));
		kv->value = decode(eq + 1, strlen(eq + 1));
		if (!kv->key || !kv->value) {
			char *shown = item_shown(items[i]);

			kv_free(kv);
			rc = dlock__error(DLOCK_ECONFIG, "'%s': bad %%-escape in query item '%s'", spec, shown);
			g_free(shown);
			break;
		}
		for (guint j = 0; j < uri->options->len; j++) {
			const dlock__kv *seen = uri->options->pdata[j];

			if (strcmp(seen->key, kv->key) == 0) {
				rc = dlock__error(DLOCK_ECONFIG, "'%s': option '%s' given twice", spec, kv->key);
				break;
			}
		}
		if (rc != DLOCK_OK)
			kv_free(kv);
		else
			g_ptr_array_add(uri->options, kv);
	}
	g_strfreev(items);
	return rc;
}

int dlock__uri_parse(const char *spec, dlock__uri **ret_uri)
{
	const char *p, *auth, *auth_end, *at, *hosts, *path_end;
	dlock__uri *uri;
	char *redacted;
	int rc = DLOCK_OK;

	if (!spec)
		return dlock__error(DLOCK_ECONFIG, "no URI given");
	/* Every message below shows this form, never spec itself. */
	redacted = dlock__uri_redact(spec);
	p = spec;
	if (!g_ascii_isalpha(*p)) {
		rc = dlock__error(DLOCK_ECONFIG, "'%s' is not a URI: it must start with a scheme (redis://...)",
		                  redacted);
		g_free(redacted);
		return rc;
	}
	while (is_scheme_char(*p))
		p++;
	if (strncmp(p, "://", 3) != 0) {
		rc = dlock__error(DLOCK_ECONFIG, "'%s' is not a URI: no '://' after the scheme", redacted);
		g_free(redacted);
		return rc;
	}

	uri = g_new0(dlock__uri, 1);
	uri->scheme = g_ascii_strdown(spec, p - spec);
	uri->hosts = g_ptr_array_new_with_free_func(host_free);
	uri->options = g_ptr_array_new_with_free_func(kv_free);
	auth = p + 3;
	auth_end = auth + strcspn(auth, "/?");

	/*
	 * An '@' past the authority is most likely the end of a password
	 * holding an unencoded '/' or '?'; read as a path or an option it
	 * would put the password where messages and status output show it.
	 * An '@' meant for a path or an option is written %40.
	 */
	if (strchr(auth_end, '@')) {
		rc = dlock__error(DLOCK_ECONFIG, "'%s': '@' after the host list: in a password write '/' as %%2F "
		                  "and '?' as %%3F; in a path or an option write '@' as %%40", redacted);
		goto out;
	}

	/* user[:password]@ — the last '@' of the authority ends it. */
	at = NULL;
	for (const char *q = auth; q < auth_end; q++)
		if (*q == '@')
			at = q;
	hosts = auth;
	if (at) {
		const char *colon = memchr(auth, ':', (size_t)(at - auth));
		const char *user_end = colon ? colon : at;

		uri->user = decode(auth, (size_t)(user_end - auth));
		if (colon)
			uri->password = decode(colon + 1, (size_t)(at - colon - 1));
		if (!uri->user || (colon && !uri->password)) {
			rc = dlock__error(DLOCK_ECONFIG, "URI with scheme '%s': bad %%-escape in the user or password",
			                  uri->scheme);
			goto out;
		}
		if (!*uri->user) {
			g_free(uri->user);
			uri->user = NULL;
		}
		hosts = at + 1;
	}

	if (hosts < auth_end) {
		const char *h = hosts;

		for (;;) {
			const char *comma = memchr(h, ',', (size_t)(auth_end - h));
			const char *end = comma ? comma : auth_end;

			rc = parse_host(uri, redacted, h, (size_t)(end - h));
			if (rc != DLOCK_OK || !comma)
				break;
			h = comma + 1;
		}
		if (rc != DLOCK_OK)
			goto out;
	}

	path_end = auth_end + strcspn(auth_end, "?");
	if (path_end > auth_end) {
		uri->path = decode(auth_end, (size_t)(path_end - auth_end));
		if (!uri->path) {
			rc = dlock__error(DLOCK_ECONFIG, "'%s': bad %%-escape in the path", redacted);
			goto out;
		}
	}
	if (*path_end == '?')
		rc = parse_query(uri, redacted, path_end + 1);
out:
	uri->redacted = redacted;
	if (rc != DLOCK_OK) {
		dlock__uri_free(uri);
		return rc;
	}
	*ret_uri = uri;
	return DLOCK_OK;
}
