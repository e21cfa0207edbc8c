/* SPDX-License-Identifier: MIT */
/*
 * Request and reply boundaries on the wire.  See test-proxy-wire.h.
 */
#include <stdbool.h>
#include <string.h>

#include <glib.h>

#include "test-proxy-wire.h"

/* Deeper nesting than any real reply; bounds the recursion. */
#define MAX_DEPTH 64
/* Larger than Redis's own proto-max-bulk-len default (512 MiB). */
#define MAX_BULK ((int64_t)1 << 30)
#define MAX_ZK_FRAME (64 * 1024 * 1024)

/* The line starting at pos: 1 with *ret_end just past its "\r\n", 0 if
 * incomplete. */
static int line_end(const uint8_t *b, size_t n, size_t pos, size_t *ret_end)
{
	for (size_t i = pos; i + 1 < n; i++) {
		if (b[i] == '\r' && b[i + 1] == '\n') {
			*ret_end = i + 2;
			return 1;
		}
	}
	return 0;
}

/* A decimal integer filling b[from, to), sign allowed. */
static bool parse_int(const uint8_t *b, size_t from, size_t to, int64_t *ret)
{
	bool neg = false;
	int64_t v = 0;

	if (from < to && b[from] == '-') {
		neg = true;
		from++;
	}
	if (from == to || to - from > 18)
		return false;
	for (size_t i = from; i < to; i++) {
		if (b[i] < '0' || b[i] > '9')
			return false;
		v = v * 10 + (b[i] - '0');
	}
	*ret = neg ? -v : v;
	return true;
}

/* A header line "<type><int>\r\n" at pos: its integer and where it ends. */
static int header(const uint8_t *b, size_t n, size_t pos, int64_t *ret_v, size_t *ret_end)
{
	size_t end;

	if (!line_end(b, n, pos, &end))
		return 0;
	if (!parse_int(b, pos + 1, end - 2, ret_v))
		return -1;
	*ret_end = end;
	return 1;
}

/* A bulk body of len bytes plus "\r\n" starting at pos. */
static int bulk_body(const uint8_t *b, size_t n, size_t pos, int64_t len, size_t *ret_end)
{
	if (len < 0 || len > MAX_BULK)
		return -1;
	if (n - pos < (size_t)len + 2)
		return 0;
	if (b[pos + len] != '\r' || b[pos + len + 1] != '\n')
		return -1;
	*ret_end = pos + (size_t)len + 2;
	return 1;
}

static int value_at(const uint8_t *b, size_t n, size_t pos, int depth, size_t *ret_end)
{
	int64_t v;
	size_t end;
	int r;

	if (pos >= n)
		return 0;
	if (depth > MAX_DEPTH)
		return -1;
	switch (b[pos]) {
	case '+': case '-': case ':': case '_': case ',': case '#': case '(':
		return line_end(b, n, pos, ret_end);
	case '$': case '!': case '=':
		if ((r = header(b, n, pos, &v, &end)) != 1)
			return r;
		if (v == -1 && b[pos] == '$') {
			*ret_end = end;
			return 1;
		}
		return bulk_body(b, n, end, v, ret_end);
	case '*': case '~': case '>': case '%': case '|':
		if ((r = header(b, n, pos, &v, &end)) != 1)
			return r;
		if (v == -1 && b[pos] == '*') {
			*ret_end = end;
			return 1;
		}
		if (v < 0 || v > MAX_BULK)
			return -1;
		if (b[pos] == '%' || b[pos] == '|')
			v *= 2;
		for (int64_t i = 0; i < v; i++)
			if ((r = value_at(b, n, end, depth + 1, &end)) != 1)
				return r;
		/* An attribute annotates the value that follows it. */
		if (b[pos] == '|')
			return value_at(b, n, end, depth + 1, ret_end);
		*ret_end = end;
		return 1;
	default:
		return -1;
	}
}

int test_proxy_wire_resp_value(const uint8_t *b, size_t n, size_t *ret_len)
{
	return value_at(b, n, 0, 0, ret_len);
}

static void copy_lower(const uint8_t *s, size_t len, char *name, size_t name_size)
{
	size_t k = MIN(len, name_size - 1);

	for (size_t i = 0; i < k; i++)
		name[i] = g_ascii_tolower((char)s[i]);
	name[k] = '\0';
}

int test_proxy_wire_resp_request(const uint8_t *b, size_t n, size_t *ret_len, char *name, size_t name_size,
                                 int *ret_args)
{
	int64_t count, len;
	size_t pos, end;
	int r;

	if (n == 0)
		return 0;
	if (b[0] != '*') {
		/* An inline command: words on one line. */
		size_t w = 0;

		if (!line_end(b, n, 0, &end))
			return n > 65536 ? -1 : 0;
		while (w < end - 2 && b[w] != ' ')
			w++;
		copy_lower(b, w, name, name_size);
		*ret_args = 0;
		for (size_t i = w; i < end - 2; i++)
			if (b[i] == ' ' && i + 1 < end - 2 && b[i + 1] != ' ')
				(*ret_args)++;
		*ret_len = end;
		return 1;
	}
	if ((r = header(b, n, 0, &count, &pos)) != 1)
		return r;
	if (count < 1 || count > 1024 * 1024)
		return -1;
	for (int64_t i = 0; i < count; i++) {
		if (pos >= n)
			return 0;
		if (b[pos] != '$')
			return -1;
		if ((r = header(b, n, pos, &len, &end)) != 1)
			return r;
		if ((r = bulk_body(b, n, end, len, &pos)) != 1)
			return r;
		if (i == 0)
			copy_lower(b + end, (size_t)len, name, name_size);
	}
	*ret_args = (int)(count - 1);
	*ret_len = pos;
	return 1;
}

void test_proxy_wire_resp_head(const uint8_t *b, size_t len, char *name, size_t name_size)
{
	int64_t v;
	size_t pos, end;

	name[0] = '\0';
	if (len == 0 || (b[0] != '*' && b[0] != '>'))
		return;
	if (header(b, len, 0, &v, &pos) != 1 || v < 1 || pos >= len)
		return;
	if (b[pos] == '+') {
		if (line_end(b, len, pos, &end))
			copy_lower(b + pos + 1, end - pos - 3, name, name_size);
	} else if (b[pos] == '$') {
		if (header(b, len, pos, &v, &end) == 1 && v >= 0 && len - end >= (size_t)v)
			copy_lower(b + end, (size_t)v, name, name_size);
	}
}

int32_t test_proxy_wire_be32(const uint8_t *b)
{
	return (int32_t)((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3]);
}

int test_proxy_wire_zk_frame(const uint8_t *b, size_t n, size_t *ret_len)
{
	int32_t len;

	if (n < 4)
		return 0;
	len = test_proxy_wire_be32(b);
	if (len < 0 || len > MAX_ZK_FRAME)
		return -1;
	if (n - 4 < (size_t)len)
		return 0;
	*ret_len = 4 + (size_t)len;
	return 1;
}

static const struct {
	const char *name;
	int32_t opcode;
} zk_opcodes[] = {
	{ "create", 1 },        { "delete", 2 },          { "exists", 3 },        { "getData", 4 },
	{ "setData", 5 },       { "getACL", 6 },          { "setACL", 7 },        { "getChildren", 8 },
	{ "sync", 9 },          { "ping", 11 },           { "getChildren2", 12 }, { "check", 13 },
	{ "multi", 14 },        { "create2", 15 },        { "reconfig", 16 },     { "checkWatches", 17 },
	{ "removeWatches", 18 }, { "createContainer", 19 }, { "createTTL", 21 },  { "multiRead", 22 },
	{ "auth", 100 },        { "setWatches", 101 },    { "setWatches2", 105 }, { "addWatch", 106 },
	{ "closeSession", -11 },
};

int32_t test_proxy_wire_zk_opcode(const char *name)
{
	for (size_t i = 0; i < G_N_ELEMENTS(zk_opcodes); i++)
		if (g_ascii_strcasecmp(zk_opcodes[i].name, name) == 0)
			return zk_opcodes[i].opcode;
	return INT32_MIN;
}
