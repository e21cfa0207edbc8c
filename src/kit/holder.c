/* SPDX-License-Identifier: MIT */
/*
 * Holder records (who holds a lock: host, pid, thread, since when) and the
 * owner tokens that carry them inside a Redis value.
 */
#include <inttypes.h>
#include <string.h>

#include "clock.h"
#include "parse.h"
#include "thread.h"

#define TOKEN_MAGIC "dlock1:"
#define TOKEN_RANDOM_BYTES 16
#define ID_MARK " id="

void dlock__holder_init_self(dlock__holder *holder)
{
	holder->host = g_strdup(g_get_host_name());
	holder->pid = dlock__self_pid();
	holder->tid = dlock__self_tid();
	holder->since_ms = dlock__wall_ms();
	holder->id = NULL;
}

void dlock__holder_clear(dlock__holder *holder)
{
	g_free(holder->host);
	holder->host = NULL;
	g_free(holder->id);
	holder->id = NULL;
}

char *dlock__holder_describe(const dlock__holder *holder)
{
	GDateTime *dt = g_date_time_new_from_unix_utc(holder->since_ms / 1000);
	char *when = dt ? g_date_time_format(dt, "%Y-%m-%dT%H:%M:%S") : g_strdup("?");
	char *text = g_strdup_printf("host=%s pid=%" PRId64 " tid=%" PRId64 " since=%s.%03dZ%s%s",
	                             holder->host, holder->pid, holder->tid, when,
	                             (int)(holder->since_ms % 1000), holder->id ? " id=" : "",
	                             holder->id ? holder->id : "");

	g_free(when);
	if (dt)
		g_date_time_unref(dt);
	return text;
}

char *dlock__token_new(const dlock__holder *holder)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char random[TOKEN_RANDOM_BYTES];
	char hex[2 * TOKEN_RANDOM_BYTES + 1];

	dlock__random_bytes(random, sizeof(random));
	for (size_t i = 0; i < sizeof(random); i++) {
		hex[2 * i] = digits[random[i] >> 4];
		hex[2 * i + 1] = digits[random[i] & 0xf];
	}
	hex[sizeof(hex) - 1] = '\0';
	return g_strdup_printf(TOKEN_MAGIC "%s:%" PRId64 ":%" PRId64 ":%" PRId64 ":%s%s%s", hex,
	                       holder->pid, holder->tid, holder->since_ms, holder->host,
	                       holder->id ? ID_MARK : "", holder->id ? holder->id : "");
}

/* A decimal field up to the next ':' that fits int64; advances *p past it. */
static bool parse_field(const char **p, int64_t *ret)
{
	const char *s = *p;
	int64_t v = 0;

	if (!g_ascii_isdigit(*s))
		return false;
	for (; g_ascii_isdigit(*s); s++) {
		if (v > (INT64_MAX - (*s - '0')) / 10)
			return false;
		v = v * 10 + (*s - '0');
	}
	if (*s != ':')
		return false;
	*p = s + 1;
	*ret = v;
	return true;
}

bool dlock__token_parse(const char *token, dlock__holder *ret_holder)
{
	const char *p = token, *mark;
	dlock__holder h = { 0 };

	if (!token || strncmp(p, TOKEN_MAGIC, strlen(TOKEN_MAGIC)) != 0)
		return false;
	p += strlen(TOKEN_MAGIC);
	for (int i = 0; i < 2 * TOKEN_RANDOM_BYTES; i++, p++)
		if (!g_ascii_isxdigit(*p) || g_ascii_isupper(*p))
			return false;
	if (*p++ != ':')
		return false;
	if (!parse_field(&p, &h.pid) || !parse_field(&p, &h.tid) || !parse_field(&p, &h.since_ms))
		return false;
	mark = strstr(p, ID_MARK);
	if (!*p || mark == p)
		return false;
	if (mark) {
		h.host = g_strndup(p, (gsize)(mark - p));
		h.id = g_strdup(mark + strlen(ID_MARK));
	} else {
		h.host = g_strdup(p);
	}
	*ret_holder = h;
	return true;
}
