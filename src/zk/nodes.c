/* SPDX-License-Identifier: MIT */
/*
 * Lock node names: building, recognising and ordering them.  See nodes.h.
 */
#include <stdlib.h>
#include <string.h>

#include "nodes.h"
#include "parse.h"

#define NODE_PREFIX "_c_"
#define NODE_MARK "-lock-"
#define KAZOO_MARK "__lock__"
#define READ_MARK "__READ__"
#define WRITE_MARK "__WRIT__"
#define KAZOO_READ_MARK "__rlock__"
#define LEASE_MARK "-lease-"

/* The marks a wrapped (negative) sequence number may follow. */
static const char *const marks[] = { NODE_MARK, KAZOO_MARK, READ_MARK, WRITE_MARK, KAZOO_READ_MARK };

char *dlock__zk_uuid_new(void)
{
	guint8 b[16];

	dlock__random_bytes(b, sizeof(b));
	b[6] = (b[6] & 0x0f) | 0x40; /* version 4 */
	b[8] = (b[8] & 0x3f) | 0x80; /* RFC 4122 variant */
	return g_strdup_printf("%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
	                       b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
	                       b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

char *dlock__zk_node_prefix(const char *dir, const char *uuid, dlock__mode mode)
{
	const char *mark = mode == DLOCK__MODE_READ    ? "-" READ_MARK
	                   : mode == DLOCK__MODE_WRITE ? "-" WRITE_MARK
	                                               : NODE_MARK;

	return g_strconcat(dir, "/" NODE_PREFIX, uuid, mark, NULL);
}

char *dlock__zk_lease_prefix(const char *dir, const char *uuid)
{
	return g_strconcat(dir, "/" NODE_PREFIX, uuid, LEASE_MARK, NULL);
}

char *dlock__zk_downgrade_path(const char *write_path, const char *uuid)
{
	const char *name = strrchr(write_path, '/') + 1;
	/* past "_c_<uuid>-": "lock-<seq>" or "__WRIT__<seq>" */
	const char *mark = name + strlen(NODE_PREFIX) + strlen(uuid) + 1;
	const char *seq = mark + (g_str_has_prefix(mark, WRITE_MARK) ? strlen(WRITE_MARK)
	                                                             : strlen(NODE_MARK) - 1);

	return g_strdup_printf("%.*s/" NODE_PREFIX "%s-" READ_MARK "%s", (int)(name - 1 - write_path),
	                       write_path, uuid, seq);
}

bool dlock__zk_node_is_ours(const char *child, const char *uuid)
{
	size_t ulen = strlen(uuid);

	return g_str_has_prefix(child, NODE_PREFIX) &&
	       strncmp(child + strlen(NODE_PREFIX), uuid, ulen) == 0 &&
	       child[strlen(NODE_PREFIX) + ulen] == '-';
}

static bool all_digits(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* Whether name[0..end) ends in mark. */
static bool ends_in(const char *name, size_t end, const char *mark)
{
	size_t m = strlen(mark);

	return end >= m && strncmp(name + end - m, mark, m) == 0;
}

/* Whether name[0..end) ends in a lock mark dlock knows. */
static bool mark_before(const char *name, size_t end)
{
	for (size_t i = 0; i < G_N_ELEMENTS(marks); i++)
		if (ends_in(name, end, marks[i]))
			return true;
	return false;
}

/*
 * "%010d" gives ten digits for 0..2147483647, "-" and nine digits for
 * -999999999..-1, and "-" and ten digits below that.  A mark directly
 * before the number tells which: "-lock--000000005" is -5, while
 * "-lock-0000000005" is 5.  Without a mark dlock knows, only the ten
 * digits are read, after a prefix that is not digits alone: a node named
 * by digits alone is a sub-resource, not a sequential create.
 */
bool dlock__zk_node_seq(const char *name, int32_t *ret_seq)
{
	size_t len = strlen(name);
	int64_t value;

	if (len >= 11 && name[len - 11] == '-' && all_digits(name + len - 10, 10) &&
	    mark_before(name, len - 11)) {
		value = -g_ascii_strtoll(name + len - 10, NULL, 10);
		if (value < INT32_MIN)
			return false;
	} else if (len >= 10 && name[len - 10] == '-' && all_digits(name + len - 9, 9) &&
	           mark_before(name, len - 10)) {
		value = -g_ascii_strtoll(name + len - 9, NULL, 10);
		if (value == 0)
			return false;
	} else if (len >= 11 && all_digits(name + len - 10, 10) && !all_digits(name, len - 10)) {
		value = g_ascii_strtoll(name + len - 10, NULL, 10);
		if (value > INT32_MAX)
			return false;
	} else {
		return false;
	}
	*ret_seq = (int32_t)value;
	return true;
}

/* Whether the mark right before the number of contender name is a mutex's. */
static bool mutex_mark(const char *name)
{
	size_t end = strlen(name);

	while (end > 0 && g_ascii_isdigit(name[end - 1]))
		end--;
	if (ends_in(name, end, NODE_MARK) || ends_in(name, end, KAZOO_MARK))
		return true;
	/* a wrapped number's sign */
	return end > 0 && name[end - 1] == '-' &&
	       (ends_in(name, end - 1, NODE_MARK) || ends_in(name, end - 1, KAZOO_MARK));
}

bool dlock__zk_node_is_reader(const char *name)
{
	if (strstr(name, WRITE_MARK) || mutex_mark(name))
		return false;
	return strstr(name, READ_MARK) || strstr(name, KAZOO_READ_MARK);
}

int dlock__zk_seq_cmp(int32_t a, int32_t b)
{
	int32_t d = (int32_t)((uint32_t)a - (uint32_t)b);

	return d < 0 ? -1 : d > 0 ? 1 : 0;
}

static int contender_cmp(const void *pa, const void *pb)
{
	const dlock__zk_contender *a = pa, *b = pb;
	int c = dlock__zk_seq_cmp(a->seq, b->seq);

	/* Equal numbers: a downgrade's read node beside its write node,
	 * which holds first; otherwise something outside dlock made them,
	 * and the order is kept stable. */
	if (c == 0)
		c = (int)a->reader - (int)b->reader;
	return c ? c : strcmp(a->name, b->name);
}

GArray *dlock__zk_contenders(char *const *children)
{
	GArray *list = g_array_new(FALSE, FALSE, sizeof(dlock__zk_contender));

	for (size_t i = 0; children && children[i]; i++) {
		dlock__zk_contender c = { children[i], 0, dlock__zk_node_is_reader(children[i]) };

		if (dlock__zk_node_seq(children[i], &c.seq))
			g_array_append_val(list, c);
	}
	if (list->len > 1)
		qsort(list->data, list->len, sizeof(dlock__zk_contender), contender_cmp);
	return list;
}

bool dlock__zk_predecessor(const GArray *contenders, const char *ours, const char **ret_predecessor)
{
	for (guint i = 0; i < contenders->len; i++) {
		const dlock__zk_contender *c = &g_array_index(contenders, dlock__zk_contender, i);

		guint j = i;

		if (strcmp(c->name, ours) != 0)
			continue;
		/* A reader looks past the readers before it. */
		while (j > 0 && c->reader && g_array_index(contenders, dlock__zk_contender, j - 1).reader)
			j--;
		*ret_predecessor = j == 0 ? NULL : g_array_index(contenders, dlock__zk_contender, j - 1).name;
		return true;
	}
	return false;
}

guint dlock__zk_holders(const GArray *contenders)
{
	guint n = 0;

	if (contenders->len > 0 && !g_array_index(contenders, dlock__zk_contender, 0).reader)
		return 1;
	while (n < contenders->len && g_array_index(contenders, dlock__zk_contender, n).reader)
		n++;
	return n;
}

char *dlock__zk_ambiguous_segment(const char *resource)
{
	char **segments = g_strsplit(resource, "/", -1);
	char *found = NULL;
	int32_t seq;

	for (size_t i = 1; segments[i] && !found; i++)
		if (dlock__zk_node_seq(segments[i], &seq))
			found = g_strdup(segments[i]);
	g_strfreev(segments);
	return found;
}
