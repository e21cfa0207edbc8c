/* SPDX-License-Identifier: MIT */
/*
 * Name resolution within a deadline (src/kit/resolve.c): lookups that
 * finish just as the caller's deadline passes, over and over.  A wait that
 * gives up must leave nothing of itself behind for the C library's helper
 * thread to touch when the lookup then finishes -- the race a waiting
 * caller's timed gai_suspend() has with a lookup ending at that moment
 * (its entry on the caller's stack is still listed when the helper thread
 * notifies), which crashed a process now and then.  Resolves "localhost"
 * only: from the hosts file, no DNS.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <glib.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif

#include "backend.h"
#include "clock.h"
#include "resolve.h"

/* How late past its deadline a lookup may return: the scheduling of its
 * threads.  Under valgrind, which runs one thread at a time and switches
 * between them seldom, and beside the fuzzers in the test command's run,
 * a wait's wake has come 307 ms late. */
static int64_t slack_us(void)
{
#ifdef RUNNING_ON_VALGRIND
	if (RUNNING_ON_VALGRIND)
		return 1000 * 1000;
#endif
	return 200 * 1000;
}

/* How long a lookup of localhost takes here: the median of a few. */
static int64_t lookup_us(dlock__resolver *r)
{
	int64_t took[9];

	for (int i = 0; i < 9; i++) {
		char **addrs = NULL;
		int64_t t0 = dlock__mono_us();

		assert_int_equal(dlock__resolve(r, "localhost", NULL, INT64_MAX, &addrs), DLOCK_OK);
		took[i] = dlock__mono_us() - t0;
		g_strfreev(addrs);
	}
	for (int i = 1; i < 9; i++)
		for (int k = i; k > 0 && took[k] < took[k - 1]; k--) {
			int64_t t = took[k];

			took[k] = took[k - 1];
			took[k - 1] = t;
		}
	return took[4];
}

/*
 * Thousands of lookups, each with a deadline drawn around the time a
 * lookup takes, with and without a waiter, one and two names at a time:
 * each ends DLOCK_OK with addresses or DLOCK_EUNAVAILABLE without, never
 * after its deadline by more than a scheduling slack, and the process
 * survives the lookups it abandoned finishing later.
 */
static void test_lookups_ending_at_their_deadline_leave_nothing_behind(void **state)
{
	dlock__resolver *r = dlock__resolver_new();
	dlock__waiter *waiter = dlock__waiter_new();
	const char *two[2] = { "localhost", "localhost" };
	int64_t typical = lookup_us(r), until = dlock__mono_us() + 4 * G_USEC_PER_SEC;
	int ok = 0, abandoned = 0;

	(void)state;
	while (dlock__mono_us() < until) {
		int64_t budget = g_random_int_range(0, (gint32)MAX(2 * typical, 2));
		int64_t deadline = dlock__mono_us() + budget;
		char **addrs[2] = { NULL, NULL };
		bool pair = g_random_boolean();
		int rc = dlock__resolve_each(r, two, pair ? 2 : 1, g_random_boolean() ? waiter : NULL,
		                             deadline, addrs);

		if (rc == DLOCK_OK) {
			assert_true(addrs[0] || addrs[1]);
			ok++;
		} else {
			assert_int_equal(rc, DLOCK_EUNAVAILABLE);
			assert_null(addrs[0]);
			assert_null(addrs[1]);
			abandoned++;
		}
		if (dlock__mono_us() > deadline + slack_us())
			fail_msg("a lookup with %" G_GINT64_FORMAT " us left returned %" G_GINT64_FORMAT
			         " us late", budget, dlock__mono_us() - deadline);
		g_strfreev(addrs[0]);
		g_strfreev(addrs[1]);
	}
	print_message("a lookup takes %" G_GINT64_FORMAT " us; %d resolved, %d given up\n", typical,
	              ok, abandoned);
	/* Let what was abandoned finish before the resolver goes. */
	g_usleep(100 * 1000);
	dlock__waiter_free(waiter);
	dlock__resolver_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lookups_ending_at_their_deadline_leave_nothing_behind),
	};

	return cmocka_run_group_tests_name("resolve", tests, NULL, NULL);
}
