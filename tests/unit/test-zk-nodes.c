/* SPDX-License-Identifier: MIT */
/* ZooKeeper lock node names: building, recognising and ordering them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "zk/nodes.h"

static void test_uuid_is_random_version_4_text(void **state)
{
	GRegex *re = g_regex_new("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
	                         0, 0, NULL);
	char *a = dlock__zk_uuid_new(), *b = dlock__zk_uuid_new();

	assert_true(g_regex_match(re, a, 0, NULL));
	assert_true(g_regex_match(re, b, 0, NULL));
	assert_string_not_equal(a, b);
	g_free(a);
	g_free(b);
	g_regex_unref(re);
}

static void test_node_prefix_is_curators_format(void **state)
{
	const char *uuid = "0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10";
	char *p = dlock__zk_node_prefix("/dlock/jobs", uuid, DLOCK__MODE_EXCLUSIVE);

	assert_string_equal(p, "/dlock/jobs/_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-lock-");
	g_free(p);
	/* InterProcessReadWriteLock's names */
	p = dlock__zk_node_prefix("/dlock/jobs", uuid, DLOCK__MODE_READ);
	assert_string_equal(p, "/dlock/jobs/_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-__READ__");
	g_free(p);
	p = dlock__zk_node_prefix("/dlock/jobs", uuid, DLOCK__MODE_WRITE);
	assert_string_equal(p, "/dlock/jobs/_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-__WRIT__");
	g_free(p);
}

static void test_downgrade_node_takes_the_write_nodes_number(void **state)
{
	const char *uuid = "1b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10";
	char *p;

	p = dlock__zk_downgrade_path("/dlock/a/b/_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-__WRIT__0000000042",
	                             uuid);
	assert_string_equal(p, "/dlock/a/b/_c_1b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-__READ__0000000042");
	g_free(p);
	p = dlock__zk_downgrade_path("/dlock/j/_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-lock--000000007", uuid);
	assert_string_equal(p, "/dlock/j/_c_1b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-__READ__-000000007");
	g_free(p);
}

static void test_own_node_is_recognised_by_uuid_only(void **state)
{
	const char *uuid = "0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10";

	assert_true(dlock__zk_node_is_ours("_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-lock-0000000007", uuid));
	assert_false(dlock__zk_node_is_ours("_c_1b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-lock-0000000007", uuid));
	assert_false(dlock__zk_node_is_ours("_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b1-lock-0000000007", uuid));
	assert_false(dlock__zk_node_is_ours("0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10__lock__0000000007", uuid));
	assert_true(dlock__zk_node_is_ours("_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-__READ__0000000007", uuid));
	assert_true(dlock__zk_node_is_ours("_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-__WRIT__0000000007", uuid));
}

static void test_every_sequential_child_is_a_contender(void **state)
{
	int32_t seq;

	/* Curator's and kazoo's read-write locks */
	assert_true(dlock__zk_node_seq("_c_x-__WRIT__0000000044", &seq));
	assert_int_equal(seq, 44);
	assert_true(dlock__zk_node_seq("_c_x-__READ__0000000045", &seq));
	assert_int_equal(seq, 45);
	assert_true(dlock__zk_node_seq("abc__rlock__0000000046", &seq));
	assert_int_equal(seq, 46);
	assert_true(dlock__zk_node_seq("_c_x-__READ__-000000005", &seq));
	assert_int_equal(seq, -5);
	/* a recipe dlock does not know still takes its turn */
	assert_true(dlock__zk_node_seq("latch-0000000047", &seq));
	assert_int_equal(seq, 47);
}

static void test_contenders_are_of_the_read_or_the_write_class(void **state)
{
	assert_true(dlock__zk_node_is_reader("_c_x-__READ__0000000001"));
	assert_true(dlock__zk_node_is_reader("abc__rlock__0000000001"));
	assert_true(dlock__zk_node_is_reader("_c_x-__READ__-000000005"));
	assert_false(dlock__zk_node_is_reader("_c_x-__WRIT__0000000001"));
	assert_false(dlock__zk_node_is_reader("_c_x-lock-0000000001"));
	assert_false(dlock__zk_node_is_reader("abc__lock__0000000001"));
	assert_false(dlock__zk_node_is_reader("abc__lock__-000000005"));
	assert_false(dlock__zk_node_is_reader("latch-0000000001"));
	/* a write mark wins over a read mark anywhere in the name */
	assert_false(dlock__zk_node_is_reader("__READ__x__WRIT__0000000001"));
	assert_false(dlock__zk_node_is_reader("__rlock__x-lock-0000000001"));
}

/* What ours waits for among children: that node's name, or NULL (it holds). */
static void assert_waits(char **children, const char *ours, const char *expected)
{
	GArray *list = dlock__zk_contenders(children);
	const char *before = "unset";

	assert_true(dlock__zk_predecessor(list, ours, &before));
	if (expected)
		assert_string_equal(before, expected);
	else
		assert_null(before);
	g_array_unref(list);
}

static void test_readers_wait_for_the_nearest_writer_before_them(void **state)
{
	char *children[] = {
		"_c_r1-__READ__0000000001",
		"k__rlock__0000000002",
		"_c_w1-__WRIT__0000000003",
		"_c_r2-__READ__0000000004",
		"_c_r3-__READ__0000000005",
		"k__lock__0000000006",
		"_c_r4-__READ__0000000007",
		NULL,
	};
	GArray *list = dlock__zk_contenders(children);

	assert_waits(children, "_c_r1-__READ__0000000001", NULL);
	assert_waits(children, "k__rlock__0000000002", NULL);
	/* a writer waits for the one just before it, reader or not */
	assert_waits(children, "_c_w1-__WRIT__0000000003", "k__rlock__0000000002");
	assert_waits(children, "_c_r2-__READ__0000000004", "_c_w1-__WRIT__0000000003");
	assert_waits(children, "_c_r3-__READ__0000000005", "_c_w1-__WRIT__0000000003");
	assert_waits(children, "k__lock__0000000006", "_c_r3-__READ__0000000005");
	assert_waits(children, "_c_r4-__READ__0000000007", "k__lock__0000000006");
	/* the two readers at the head hold */
	assert_int_equal(dlock__zk_holders(list), 2);
	g_array_unref(list);
}

static void test_one_writer_or_the_leading_readers_hold(void **state)
{
	char *writer_first[] = { "_c_r-__READ__0000000002", "_c_w-lock-0000000001", NULL };
	char *none[] = { "sub", NULL };
	GArray *list = dlock__zk_contenders(writer_first);

	assert_int_equal(dlock__zk_holders(list), 1);
	g_array_unref(list);
	list = dlock__zk_contenders(none);
	assert_int_equal(dlock__zk_holders(list), 0);
	g_array_unref(list);
}

static void test_downgrade_node_stands_behind_its_write_node(void **state)
{
	/* The read node shares the write node's number; the write node
	 * still holds, and a writer queued behind it waits for both. */
	char *children[] = {
		"_c_w2-__WRIT__0000000009",
		"_c_a-__READ__0000000008",
		"_c_z-__WRIT__0000000008",
		"_c_r-__READ__0000000010",
		NULL,
	};
	char *after_release[] = { "_c_w2-__WRIT__0000000009", "_c_a-__READ__0000000008", NULL };
	GArray *list = dlock__zk_contenders(children);

	assert_string_equal(g_array_index(list, dlock__zk_contender, 0).name, "_c_z-__WRIT__0000000008");
	assert_string_equal(g_array_index(list, dlock__zk_contender, 1).name, "_c_a-__READ__0000000008");
	assert_int_equal(dlock__zk_holders(list), 1);
	g_array_unref(list);
	assert_waits(children, "_c_w2-__WRIT__0000000009", "_c_a-__READ__0000000008");
	assert_waits(children, "_c_r-__READ__0000000010", "_c_w2-__WRIT__0000000009");
	/* the write node goes: the read node holds, the writer still waits */
	assert_waits(after_release, "_c_a-__READ__0000000008", NULL);
	assert_waits(after_release, "_c_w2-__WRIT__0000000009", "_c_a-__READ__0000000008");
}

static void test_sequence_numbers_of_curator_and_kazoo_nodes(void **state)
{
	int32_t seq;

	assert_true(dlock__zk_node_seq("_c_x-lock-0000000042", &seq));
	assert_int_equal(seq, 42);
	assert_true(dlock__zk_node_seq("abcdef__lock__0000000043", &seq));
	assert_int_equal(seq, 43);
	assert_true(dlock__zk_node_seq("_c_x-lock-2147483647", &seq));
	assert_int_equal(seq, INT32_MAX);
	/* after the counter wrapped, ZooKeeper's %010d writes a sign */
	assert_true(dlock__zk_node_seq("_c_x-lock--2147483648", &seq));
	assert_int_equal(seq, INT32_MIN);
	assert_true(dlock__zk_node_seq("_c_x-lock--000000005", &seq));
	assert_int_equal(seq, -5);
	assert_true(dlock__zk_node_seq("k__lock__-000000005", &seq));
	assert_int_equal(seq, -5);
}

static void test_children_that_are_not_lock_nodes_are_ignored(void **state)
{
	int32_t seq;

	assert_false(dlock__zk_node_seq("b", &seq));                   /* a sub-resource */
	assert_false(dlock__zk_node_seq("2024010112", &seq));          /* digits, no mark */
	assert_false(dlock__zk_node_seq("12024010112", &seq));         /* digits alone */
	assert_false(dlock__zk_node_seq("_c_x-lock-000000004", &seq)); /* nine digits */
	assert_false(dlock__zk_node_seq("_c_x-lock-2147483648", &seq)); /* past int32 */
	assert_false(dlock__zk_node_seq("_c_x-lock--000000000", &seq)); /* "-0" is not written */
	assert_false(dlock__zk_node_seq("-lock-", &seq));
	assert_false(dlock__zk_node_seq("", &seq));
}

static void test_serial_order_survives_the_counter_wrapping(void **state)
{
	assert_true(dlock__zk_seq_cmp(1, 2) < 0);
	assert_true(dlock__zk_seq_cmp(2, 1) > 0);
	assert_int_equal(dlock__zk_seq_cmp(7, 7), 0);
	/* 2147483647 was created before the wrapped -2147483648 */
	assert_true(dlock__zk_seq_cmp(INT32_MAX, INT32_MIN) < 0);
	assert_true(dlock__zk_seq_cmp(INT32_MAX - 3, INT32_MIN + 3) < 0);
	assert_true(dlock__zk_seq_cmp(-1, 0) < 0);
}

static void test_contenders_sorted_and_predecessor_found(void **state)
{
	char *children[] = {
		"_c_c-lock-2147483647",
		"sub",
		"_c_a-lock--2147483648",
		"k__lock__2147483646",
		"_c_b-lock--2147483647",
		NULL,
	};
	GArray *list = dlock__zk_contenders(children);
	const char *before = "unset";

	assert_int_equal(list->len, 4);
	assert_string_equal(g_array_index(list, dlock__zk_contender, 0).name, "k__lock__2147483646");
	assert_string_equal(g_array_index(list, dlock__zk_contender, 1).name, "_c_c-lock-2147483647");
	assert_string_equal(g_array_index(list, dlock__zk_contender, 2).name, "_c_a-lock--2147483648");
	assert_string_equal(g_array_index(list, dlock__zk_contender, 3).name, "_c_b-lock--2147483647");

	assert_true(dlock__zk_predecessor(list, "k__lock__2147483646", &before));
	assert_null(before);
	assert_true(dlock__zk_predecessor(list, "_c_a-lock--2147483648", &before));
	assert_string_equal(before, "_c_c-lock-2147483647");
	assert_false(dlock__zk_predecessor(list, "_c_z-lock-0000000001", &before));
	assert_false(dlock__zk_predecessor(list, "sub", &before));
	g_array_unref(list);
}

static void test_resource_segments_that_read_as_lock_nodes_are_found(void **state)
{
	char *seg;

	assert_null(dlock__zk_ambiguous_segment("jobs"));
	assert_null(dlock__zk_ambiguous_segment("jobs/2024010112"));
	/* the first segment is a child of the root, not of a lock */
	assert_null(dlock__zk_ambiguous_segment("x-lock-0000000001"));
	seg = dlock__zk_ambiguous_segment("jobs/x-lock-0000000001/y");
	assert_string_equal(seg, "x-lock-0000000001");
	g_free(seg);
	seg = dlock__zk_ambiguous_segment("a/b/k__lock__0000000009");
	assert_string_equal(seg, "k__lock__0000000009");
	g_free(seg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uuid_is_random_version_4_text),
		cmocka_unit_test(test_node_prefix_is_curators_format),
		cmocka_unit_test(test_downgrade_node_takes_the_write_nodes_number),
		cmocka_unit_test(test_own_node_is_recognised_by_uuid_only),
		cmocka_unit_test(test_every_sequential_child_is_a_contender),
		cmocka_unit_test(test_contenders_are_of_the_read_or_the_write_class),
		cmocka_unit_test(test_readers_wait_for_the_nearest_writer_before_them),
		cmocka_unit_test(test_one_writer_or_the_leading_readers_hold),
		cmocka_unit_test(test_downgrade_node_stands_behind_its_write_node),
		cmocka_unit_test(test_sequence_numbers_of_curator_and_kazoo_nodes),
		cmocka_unit_test(test_children_that_are_not_lock_nodes_are_ignored),
		cmocka_unit_test(test_serial_order_survives_the_counter_wrapping),
		cmocka_unit_test(test_contenders_sorted_and_predecessor_found),
		cmocka_unit_test(test_resource_segments_that_read_as_lock_nodes_are_found),
	};

	return cmocka_run_group_tests_name("zk-nodes", tests, NULL, NULL);
}
