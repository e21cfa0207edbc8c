/* SPDX-License-Identifier: MIT */
/*
 * The lock order's check (src/kit/mutex.h), through its checked forms, in
 * any build: mutexes taken in rising rank and let go in any order pass;
 * a mutex taken under one of equal or higher rank, a mutex taken twice,
 * a mutex let go that is not held, and a _locked helper called without
 * its mutex each abort the process with a message naming both places.
 * The breaches run in a forked child, whose end and stderr are checked.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "mutex.h"

static GMutex outer, inner, other;

/* Run fn in a child; its stderr, and whether it died of SIGABRT. */
static char *run_child(void (*fn)(void), bool *ret_aborted)
{
	int fds[2];
	pid_t pid;
	int status;
	GString *text = g_string_new(NULL);
	char buf[512];
	ssize_t n;

	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* No core file for the aborts we expect. */
		signal(SIGABRT, SIG_DFL);
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		fn();
		_exit(0);
	}
	close(fds[1]);
	while ((n = read(fds[0], buf, sizeof buf)) > 0)
		g_string_append_len(text, buf, n);
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	*ret_aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
	if (!*ret_aborted)
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return g_string_free(text, FALSE);
}

static void expect_breach(void (*fn)(void), const char *words)
{
	bool aborted;
	char *text = run_child(fn, &aborted);

	if (!aborted || !strstr(text, words))
		fail_msg("expected an abort saying \"%s\"; got %s: %s", words,
		         aborted ? "an abort" : "a clean exit", text);
	g_free(text);
}

static void test_rising_ranks_pass_and_let_go_in_any_order(void **state)
{
	(void)state;
	dlock__mutex_lock_checked(&outer, DLOCK__RANK_HOLD, __FILE__, __LINE__);
	dlock__mutex_lock_checked(&inner, DLOCK__RANK_LOCK, __FILE__, __LINE__);
	dlock__mutex_lock_checked(&other, DLOCK__RANK_WAITER, __FILE__, __LINE__);
	assert_true(dlock__mutex_held(&outer));
	assert_true(dlock__mutex_held(&inner));
	dlock__mutex_assert_held_checked(&inner, __FILE__, __LINE__);
	/* The outermost first: what is left keeps its order. */
	dlock__mutex_unlock_checked(&outer, __FILE__, __LINE__);
	assert_false(dlock__mutex_held(&outer));
	dlock__mutex_unlock_checked(&other, __FILE__, __LINE__);
	dlock__mutex_unlock_checked(&inner, __FILE__, __LINE__);
	assert_false(dlock__mutex_held(&inner));
	/* Nothing held: any rank again. */
	dlock__mutex_lock_checked(&outer, DLOCK__RANK_LOG, __FILE__, __LINE__);
	dlock__mutex_unlock_checked(&outer, __FILE__, __LINE__);
}

static void take_lower_under_higher(void)
{
	dlock__mutex_lock_checked(&outer, DLOCK__RANK_LOCK, "outer.c", 1);
	dlock__mutex_lock_checked(&inner, DLOCK__RANK_HOLD, "inner.c", 2);
}

static void test_lower_rank_under_higher_aborts(void **state)
{
	(void)state;
	expect_breach(take_lower_under_higher,
	              "hold taken under lock at inner.c:2; this thread holds: lock (outer.c:1)");
}

static void take_equal_ranks(void)
{
	dlock__mutex_lock_checked(&outer, DLOCK__RANK_HOLD, "a.c", 1);
	dlock__mutex_lock_checked(&inner, DLOCK__RANK_HOLD, "b.c", 2);
}

static void test_two_of_one_rank_abort(void **state)
{
	(void)state;
	expect_breach(take_equal_ranks, "hold taken under hold at b.c:2");
}

static void take_twice(void)
{
	dlock__mutex_lock_checked(&outer, DLOCK__RANK_CLIENT, "a.c", 1);
	dlock__mutex_lock_checked(&outer, DLOCK__RANK_CLIENT, "a.c", 3);
}

static void test_taking_a_held_mutex_again_aborts(void **state)
{
	(void)state;
	expect_breach(take_twice, "client taken again by its holder at a.c:3");
}

static void let_go_unheld(void)
{
	dlock__mutex_unlock_checked(&other, "c.c", 4);
}

static void test_letting_go_of_an_unheld_mutex_aborts(void **state)
{
	(void)state;
	expect_breach(let_go_unheld, "a mutex let go that this thread does not hold at c.c:4");
}

static void helper_without_its_mutex(void)
{
	dlock__mutex_lock_checked(&outer, DLOCK__RANK_HOLD, "a.c", 1);
	dlock__mutex_assert_held_checked(&inner, "helper.c", 5);
}

static void test_locked_helper_without_its_mutex_aborts(void **state)
{
	(void)state;
	expect_breach(helper_without_its_mutex,
	              "a _locked helper called without its mutex at helper.c:5; this thread holds: hold");
}

static void take_unranked(void)
{
	dlock__mutex_lock_checked(&outer, DLOCK__RANK_NONE, "d.c", 6);
}

static void test_a_mutex_with_no_rank_aborts(void **state)
{
	(void)state;
	expect_breach(take_unranked, "a mutex taken with no rank (0) at d.c:6");
}

/* Another thread's mutexes are not this thread's. */
static gpointer take_inner(gpointer data)
{
	(void)data;
	dlock__mutex_lock_checked(&inner, DLOCK__RANK_HOLD, __FILE__, __LINE__);
	dlock__mutex_unlock_checked(&inner, __FILE__, __LINE__);
	return NULL;
}

static void test_order_is_per_thread(void **state)
{
	GThread *t;

	(void)state;
	dlock__mutex_lock_checked(&outer, DLOCK__RANK_LOCK, __FILE__, __LINE__);
	t = g_thread_new("order", take_inner, NULL);
	g_thread_join(t);
	assert_false(dlock__mutex_held(&inner));
	dlock__mutex_unlock_checked(&outer, __FILE__, __LINE__);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rising_ranks_pass_and_let_go_in_any_order),
		cmocka_unit_test(test_lower_rank_under_higher_aborts),
		cmocka_unit_test(test_two_of_one_rank_abort),
		cmocka_unit_test(test_taking_a_held_mutex_again_aborts),
		cmocka_unit_test(test_letting_go_of_an_unheld_mutex_aborts),
		cmocka_unit_test(test_locked_helper_without_its_mutex_aborts),
		cmocka_unit_test(test_a_mutex_with_no_rank_aborts),
		cmocka_unit_test(test_order_is_per_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
