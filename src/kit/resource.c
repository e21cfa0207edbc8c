/* SPDX-License-Identifier: MIT */
/*
 * Resource names: the same rules on every backend, so that a route can
 * move a resource from one backend to another.  1-255 bytes of valid UTF-8;
 * no control characters, no '{' or '}' (Redis hash tags), none of the code
 * points ZooKeeper refuses in node names; '/' separates segments, none
 * empty, "." or "..".
 */
#include <string.h>

#include "error.h"
#include "parse.h"

#define NAME_MAX_BYTES 255

/* Decode one UTF-8 sequence at s (n bytes left); 0 if malformed, overlong,
 * a surrogate or beyond U+10FFFF.  Sets *ret_len. */
static gunichar decode(const unsigned char *s, size_t n, size_t *ret_len, bool *ok)
{
	gunichar c;
	size_t len;

	*ok = false;
	if (s[0] < 0x80) {
		*ret_len = 1;
		*ok = true;
		return s[0];
	}
	if ((s[0] & 0xe0) == 0xc0) {
		len = 2;
		c = s[0] & 0x1f;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3;
		c = s[0] & 0x0f;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4;
		c = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000) ||
	    c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*ret_len = len;
	*ok = true;
	return c;
}

int dlock__resource_check(const char *name)
{
	const unsigned char *s = (const unsigned char *)name;
	size_t n, i = 0, segment = 0;

	if (!name)
		return dlock__error(DLOCK_EINVAL, "resource name is NULL");
	n = strlen(name);
	if (n == 0)
		return dlock__error(DLOCK_EINVAL, "resource name is empty");
	if (n > NAME_MAX_BYTES)
		return dlock__error(DLOCK_EINVAL, "resource name is %zu bytes long; at most %d are allowed",
		                    n, NAME_MAX_BYTES);
	while (i < n) {
		size_t len;
		bool ok;
		gunichar c = decode(s + i, n - i, &len, &ok);

		if (!ok)
			return dlock__error(DLOCK_EINVAL, "resource name: byte %zu: invalid UTF-8", i);
		if (c < 0x20 || (c >= 0x7f && c <= 0x9f))
			return dlock__error(DLOCK_EINVAL, "resource name: byte %zu: control character U+%04X",
			                    i, (unsigned)c);
		if (c == '{' || c == '}')
			return dlock__error(DLOCK_EINVAL, "resource name: byte %zu: '%c' is not allowed", i, (int)c);
		if ((c >= 0xd800 && c <= 0xf8ff) || (c >= 0xfff0 && c <= 0xffff) || c > 0xffff)
			return dlock__error(DLOCK_EINVAL,
			                    "resource name: byte %zu: code point U+%04X is not allowed "
			                    "(ZooKeeper refuses it in node names)", i, (unsigned)c);
		if (c == '/') {
			if (i == segment)
				return dlock__error(DLOCK_EINVAL, "resource name: byte %zu: empty segment", i);
			segment = i + 1;
		} else if (c == '.' && (i + 1 == n || s[i + 1] == '/') && i == segment) {
			return dlock__error(DLOCK_EINVAL, "resource name: byte %zu: segment '.' is not allowed", i);
		} else if (c == '.' && i == segment + 1 && s[segment] == '.' && (i + 1 == n || s[i + 1] == '/')) {
			return dlock__error(DLOCK_EINVAL, "resource name: byte %zu: segment '..' is not allowed",
			                    segment);
		}
		i += len;
	}
	if (segment == n)
		return dlock__error(DLOCK_EINVAL, "resource name: byte %zu: empty segment at the end", n);
	return DLOCK_OK;
}
