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
	char *p = dlock__zk_node_prefix("/dlock/jobs", "0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10");

	assert_string_equal(p, "/dlock/jobs/_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-lock-");
	g_free(p);
}

static void test_own_node_is_recognised_by_uuid_only(void **state)
{
	const char *uuid = "0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10";

	assert_true(dlock__zk_node_is_ours("_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-lock-0000000007", uuid));
	assert_false(dlock__zk_node_is_ours("_c_1b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10-lock-0000000007", uuid));
	assert_false(dlock__zk_node_is_ours("_c_0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b1-lock-0000000007", uuid));
	assert_false(dlock__zk_node_is_ours("0b6f9f56-3c1e-4c8a-9d53-1f1d0e2a7b10__lock__0000000007", uuid));
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
		cmocka_unit_test(test_own_node_is_recognised_by_uuid_only),
		cmocka_unit_test(test_sequence_numbers_of_curator_and_kazoo_nodes),
		cmocka_unit_test(test_children_that_are_not_lock_nodes_are_ignored),
		cmocka_unit_test(test_serial_order_survives_the_counter_wrapping),
		cmocka_unit_test(test_contenders_sorted_and_predecessor_found),
		cmocka_unit_test(test_resource_segments_that_read_as_lock_nodes_are_found),
	};

	return cmocka_run_group_tests_name("zk-nodes", tests, NULL, NULL);
}
