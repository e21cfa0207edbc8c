/* SPDX-License-Identifier: MIT */
/*
 * A holder paused past the end of its hold and resumed (see test-resume.h).
 *
 * After SIGCONT every thread of the worker becomes runnable at once, and
 * which runs first is the scheduler's choice.  The worker runs on one CPU
 * with the library's threads at the lowest priority, so that its own
 * thread usually looks at the lock before a backend thread has noticed
 * anything -- the case to test -- and the pause is repeated.
 */
#include <inttypes.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-resume.h"
#include "test-util.h"

typedef struct lost_count {
	GMutex mu;
	int lost;
} lost_count;

static void count_lost(dlock_lock *lock, dlock_state state, void *user_data)
{
	lost_count *c = user_data;

	g_mutex_lock(&c->mu);
	c->lost += state == DLOCK_STATE_LOST;
	g_mutex_unlock(&c->mu);
}

static int lost_now(lost_count *c)
{
	int lost;

	g_mutex_lock(&c->mu);
	lost = c->lost;
	g_mutex_unlock(&c->mu);
	return lost;
}

static bool any_lost(void *arg)
{
	return lost_now(arg) > 0;
}

/*
 * Run this process on the CPU it is on, with every thread but this one at
 * nice 19.  Called once the library's threads exist; a thread started
 * later inherits from the one that starts it.
 */
static void favour_this_thread(void)
{
	pid_t self = gettid();
	cpu_set_t one;
	const char *name;
	GDir *dir;

	CPU_ZERO(&one);
	CPU_SET(sched_getcpu(), &one);
	dir = g_dir_open("/proc/self/task", 0, NULL);
	if (!dir)
		return;
	while ((name = g_dir_read_name(dir))) {
		pid_t tid = (pid_t)atoi(name);

		sched_setaffinity(tid, sizeof(one), &one);
		if (tid != self)
			setpriority(PRIO_PROCESS, (id_t)tid, 19);
	}
	g_dir_close(dir);
}

int test_resume_worker(const char *uri, const char *resource, int64_t ttl_ms, int rounds)
{
	lost_count c = { 0 };
	dlock_client *client;
	dlock_lock *lock;

	g_mutex_init(&c.mu);
	if (dlock_client_new(uri, &client) != DLOCK_OK || dlock_lock_new(client, resource, &lock) != DLOCK_OK ||
	    (ttl_ms > 0 && dlock_lock_set_ttl(lock, ttl_ms) != DLOCK_OK) ||
	    dlock_lock_set_state_callback(lock, count_lost, &c) != DLOCK_OK)
		return 2;
	for (int round = 0; round < rounds; round++) {
		int64_t before, after;
		int held, rc, lost;

		g_mutex_lock(&c.mu);
		c.lost = 0;
		g_mutex_unlock(&c.mu);
		if (dlock_acquire(lock, 20000) != DLOCK_OK)
			return 2;
		favour_this_thread();
		/* Timed before the line goes out, and after each check: a pause
		 * anywhere from then on shows as a jump across one check. */
		after = test_now_us();
		printf("held %" PRIu64 "\n", dlock_fencing_token(lock));
		fflush(stdout);
		for (;;) {
			before = after;
			g_usleep(1000);
			held = dlock_held(lock);
			after = test_now_us();
			if (after - before > 500 * 1000)
				break;
			if (!held) {
				printf("dropped\n");
				fflush(stdout);
				return 3;
			}
		}
		rc = dlock_release(lock);
		test_wait_until(any_lost, &c, 10000);
		g_usleep(1000 * 1000);
		lost = lost_now(&c);
		printf("resumed held=%d release=%d lost=%d\n", held, rc, lost);
		fflush(stdout);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_mutex_clear(&c.mu);
	return 0;
}

void test_resume_rounds(const char *uri, const char *resource, int64_t ttl_ms, int rounds)
{
	char ttl[32], count[16];
	const char *args[] = { "resume", uri, resource, ttl, count, NULL };
	dlock_client *client;
	dlock_lock *lock;
	char line[128];
	int fd_out;
	pid_t pid;

	g_snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_ms);
	g_snprintf(count, sizeof(count), "%d", rounds);
	pid = test_spawn_worker(args, &fd_out);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	for (int round = 0; round < rounds; round++) {
		assert_true(test_read_line(fd_out, line, sizeof(line), 30000));
		assert_true(g_str_has_prefix(line, "held "));
		kill(pid, SIGSTOP);
		assert_int_equal(dlock_acquire(lock, 20000), DLOCK_OK);
		kill(pid, SIGCONT);
		assert_true(test_read_line(fd_out, line, sizeof(line), 30000));
		print_message("round %d: %s\n", round, line);
		assert_string_equal(line, "resumed held=0 release=-5 lost=1"); /* -5: DLOCK_ELOST */
		assert_int_equal(dlock_release(lock), DLOCK_OK);
	}
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd_out);
	dlock_lock_free(lock);
	dlock_client_free(client);
}
