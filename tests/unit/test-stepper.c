/* SPDX-License-Identifier: MIT */
/* The stepper: tasks run in steps on its threads, woken by pokes and
 * timers, one step at a time, with urgent steps on the timer thread; and
 * the waiter's notify, which pokes a task. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "clock.h"
#include "stepper.h"
#include "waiter.h"

/* What a test's step does, and what it saw. */
typedef struct probe {
	GMutex mu;
	GCond cond;
	int steps;                 /* steps run */
	int end_after;             /* the step that ends the task (1-based) */
	int64_t wait_us;           /* each non-final step waits this long; INT64_MAX: until poked */
	bool urgent[8];            /* per step */
	char thread[8][16];        /* per step: the running thread's name */
	int64_t at_us[8];          /* per step: when it began */
	bool hold;                 /* block inside the step until released */
	bool held;                 /* a step is blocked on hold */
	dlock__task *self;         /* poked from inside the first step, if set */
	int in_step;               /* steps running now */
	bool overlapped;
	bool off_worker;           /* a step ran on a thread other than a worker */
} probe;

static void probe_init(probe *p, int end_after, int64_t wait_us)
{
	memset(p, 0, sizeof *p);
	g_mutex_init(&p->mu);
	g_cond_init(&p->cond);
	p->end_after = end_after;
	p->wait_us = wait_us;
}

static void probe_clear(probe *p)
{
	g_mutex_clear(&p->mu);
	g_cond_clear(&p->cond);
}

static bool probe_step(void *data, bool urgent, int64_t *until_us)
{
	probe *p = data;
	bool ended;
	int i;

	g_mutex_lock(&p->mu);
	if (p->in_step++)
		p->overlapped = true;
	i = p->steps++;
	if (i < 8) {
		p->urgent[i] = urgent;
		pthread_getname_np(pthread_self(), p->thread[i], sizeof p->thread[i]);
		p->at_us[i] = dlock__mono_us();
	}
	if (i == 0 && p->self)
		dlock__task_poke(p->self);
	while (p->hold && !urgent) {
		p->held = true;
		g_cond_broadcast(&p->cond);
		g_cond_wait(&p->cond, &p->mu);
	}
	ended = p->steps >= p->end_after;
	if (!ended)
		*until_us = p->wait_us == INT64_MAX ? INT64_MAX : dlock__mono_us() + p->wait_us;
	p->in_step--;
	g_cond_broadcast(&p->cond);
	g_mutex_unlock(&p->mu);
	return ended;
}

static dlock__task *start(dlock__stepper *s, probe *p, int64_t deadline_us)
{
	dlock__task *task = dlock__task_new(probe_step, p, deadline_us);

	dlock__task_start(s, task);
	return task;
}

/* Wait (up to 5 s) until the probe's step is blocked on its hold;
 * whether it is. */
static bool wait_held(probe *p)
{
	int64_t until = dlock__mono_us() + 5 * G_USEC_PER_SEC;
	bool held;

	g_mutex_lock(&p->mu);
	while (!p->held && g_cond_wait_until(&p->cond, &p->mu, until))
		;
	held = p->held;
	g_mutex_unlock(&p->mu);
	return held;
}

static void release_hold(probe *p)
{
	g_mutex_lock(&p->mu);
	p->hold = false;
	g_cond_broadcast(&p->cond);
	g_mutex_unlock(&p->mu);
}

/* Wait (up to 5 s) until the probe has run n steps; whether it did. */
static bool wait_steps(probe *p, int n)
{
	int64_t until = dlock__mono_us() + 5 * G_USEC_PER_SEC;
	bool ok;

	g_mutex_lock(&p->mu);
	while (p->steps < n && g_cond_wait_until(&p->cond, &p->mu, until))
		;
	ok = p->steps >= n;
	g_mutex_unlock(&p->mu);
	return ok;
}

/* Wait (up to 5 s) until the task has ended. */
static bool wait_ended(dlock__task *task)
{
	for (int i = 0; i < 5000 && !dlock__task_ended(task); i++)
		g_usleep(1000);
	return dlock__task_ended(task);
}

static void test_first_step_runs_on_a_stepper_thread_not_the_callers(void **state)
{
	dlock__stepper *s = dlock__stepper_new(2);
	probe p;
	dlock__task *task;

	(void)state;
	probe_init(&p, 1, 0);
	g_mutex_lock(&p.mu);
	/* The step cannot run inside the start: it would block on p.mu. */
	task = start(s, &p, INT64_MAX);
	assert_int_equal(p.steps, 0);
	g_mutex_unlock(&p.mu);
	assert_true(wait_ended(task));
	assert_int_equal(p.steps, 1);
	assert_string_equal(p.thread[0], "dlock-step");
	assert_false(p.urgent[0]);
	dlock__task_unref(task);
	dlock__stepper_free(s);
	probe_clear(&p);
}

static void test_waiting_task_steps_again_when_its_time_comes(void **state)
{
	dlock__stepper *s = dlock__stepper_new(1);
	probe p;
	dlock__task *task;

	(void)state;
	probe_init(&p, 3, 50 * 1000);
	task = start(s, &p, INT64_MAX);
	assert_true(wait_ended(task));
	assert_int_equal(p.steps, 3);
	assert_true(p.at_us[1] - p.at_us[0] >= 50 * 1000);
	assert_true(p.at_us[2] - p.at_us[1] >= 50 * 1000);
	dlock__task_unref(task);
	dlock__stepper_free(s);
	probe_clear(&p);
}

static void test_poke_steps_a_waiting_task_before_its_time(void **state)
{
	dlock__stepper *s = dlock__stepper_new(1);
	probe p;
	dlock__task *task;

	(void)state;
	/* Without the poke, the second step would come after an hour. */
	probe_init(&p, 2, INT64_C(3600) * G_USEC_PER_SEC);
	task = start(s, &p, INT64_MAX);
	assert_true(wait_steps(&p, 1));
	g_usleep(20 * 1000);
	assert_int_equal(p.steps, 1);
	dlock__task_poke(task);
	assert_true(wait_ended(task));
	assert_int_equal(p.steps, 2);
	/* A poke of an ended task does nothing. */
	dlock__task_poke(task);
	g_usleep(20 * 1000);
	assert_int_equal(p.steps, 2);
	dlock__task_unref(task);
	dlock__stepper_free(s);
	probe_clear(&p);
}

static void test_poke_during_a_step_runs_it_again(void **state)
{
	dlock__stepper *s = dlock__stepper_new(1);
	probe p;
	dlock__task *task;

	(void)state;
	/* The first step pokes its own task and then waits with no timer:
	 * only the poke, landed while the step ran, can bring the second. */
	probe_init(&p, 2, INT64_MAX);
	g_mutex_lock(&p.mu);
	task = start(s, &p, INT64_MAX);
	p.self = task;
	g_mutex_unlock(&p.mu);
	assert_true(wait_ended(task));
	assert_int_equal(p.steps, 2);
	dlock__task_unref(task);
	dlock__stepper_free(s);
	probe_clear(&p);
}

/* This process's threads named name. */
static int threads_named(const char *name)
{
	GDir *dir = g_dir_open("/proc/self/task", 0, NULL);
	const char *tid;
	int n = 0;

	assert_non_null(dir);
	while ((tid = g_dir_read_name(dir))) {
		char *path = g_strdup_printf("/proc/self/task/%s/comm", tid), *comm = NULL;

		if (g_file_get_contents(path, &comm, NULL, NULL))
			n += strcmp(g_strstrip(comm), name) == 0;
		g_free(comm);
		g_free(path);
	}
	g_dir_close(dir);
	return n;
}

static void test_a_step_run_again_at_once_starts_no_worker(void **state)
{
	dlock__stepper *s = dlock__stepper_new(DLOCK__STEPPER_MAX_WORKERS);
	int before = threads_named("dlock-step");
	probe p;
	dlock__task *task;

	(void)state;
	/* Each step asks to run again at once: the worker that ran it takes
	 * it back, and no other is started for it. */
	probe_init(&p, 40, 0);
	task = start(s, &p, INT64_MAX);
	assert_true(wait_ended(task));
	assert_int_equal(p.steps, 40);
	assert_int_equal(threads_named("dlock-step") - before, 1);
	dlock__task_unref(task);
	dlock__stepper_free(s);
	probe_clear(&p);
}

static void test_deadline_steps_run_on_the_timer_thread_while_workers_are_busy(void **state)
{
	dlock__stepper *s = dlock__stepper_new(1);
	probe busy, late;
	dlock__task *a, *b;
	int64_t started;

	(void)state;
	/* The one worker is held inside a's step, as by a slow round trip. */
	probe_init(&busy, 1, 0);
	busy.hold = true;
	a = start(s, &busy, INT64_MAX);
	assert_true(wait_held(&busy));
	/* b waits behind it, with a deadline 100 ms away. */
	started = dlock__mono_us();
	probe_init(&late, 1, 0);
	b = start(s, &late, started + 100 * 1000);
	assert_true(wait_ended(b));
	assert_false(dlock__task_ended(a));
	assert_true(late.urgent[0]);
	assert_string_equal(late.thread[0], "dlock-async");
	assert_true(late.at_us[0] >= started + 100 * 1000);
	assert_true(late.at_us[0] < started + 2 * G_USEC_PER_SEC);
	release_hold(&busy);
	assert_true(wait_ended(a));
	dlock__task_unref(a);
	dlock__task_unref(b);
	dlock__stepper_free(s);
	probe_clear(&busy);
	probe_clear(&late);
}

/* More steps inside slow round trips than the workers kept: a new task
 * gets a worker of its own at once, not its deadline's urgent step. */
#define SLOW 8

static void test_a_task_does_not_queue_behind_busy_workers(void **state)
{
	dlock__stepper *s = dlock__stepper_new(DLOCK__STEPPER_MAX_WORKERS);
	probe busy[SLOW], quick;
	dlock__task *slow[SLOW], *b;
	int64_t started;
	int all_held = 0;
	bool ended;

	(void)state;
	for (int i = 0; i < SLOW; i++) {
		probe_init(&busy[i], 1, 0);
		busy[i].hold = true;
		slow[i] = start(s, &busy[i], INT64_MAX);
	}
	/* Each slow step has a worker: none waits behind the others. */
	for (int i = 0; i < SLOW; i++)
		all_held += wait_held(&busy[i]);
	started = dlock__mono_us();
	probe_init(&quick, 1, 0);
	b = start(s, &quick, started + 2 * G_USEC_PER_SEC);
	ended = wait_ended(b);
	/* The slow steps end before anything is asserted. */
	for (int i = 0; i < SLOW; i++)
		release_hold(&busy[i]);
	for (int i = 0; i < SLOW; i++) {
		assert_true(wait_ended(slow[i]));
		dlock__task_unref(slow[i]);
		probe_clear(&busy[i]);
	}
	assert_int_equal(all_held, SLOW);
	assert_true(ended);
	assert_false(quick.urgent[0]);
	assert_string_equal(quick.thread[0], "dlock-step");
	assert_true(quick.at_us[0] < started + G_USEC_PER_SEC);
	dlock__task_unref(b);
	dlock__stepper_free(s);
	probe_clear(&quick);
}

/* The task ends with its second step, urgent, on the timer thread; the
 * task and stepper go. */
static void end_urgent(dlock__stepper *s, dlock__task *task, const probe *p)
{
	assert_true(wait_ended(task));
	assert_false(p->urgent[0]);
	assert_true(p->urgent[1]);
	assert_string_equal(p->thread[1], "dlock-async");
	dlock__task_unref(task);
	dlock__stepper_free(s);
}

static void test_waiting_task_is_stepped_at_its_deadline(void **state)
{
	dlock__stepper *s = dlock__stepper_new(1);
	probe p;
	dlock__task *task;
	int64_t started = dlock__mono_us();

	(void)state;
	/* It waits for a poke that never comes; the deadline steps it. */
	probe_init(&p, 2, INT64_MAX);
	task = start(s, &p, started + 80 * 1000);
	end_urgent(s, task, &p);
	assert_true(p.at_us[1] >= started + 80 * 1000);
	probe_clear(&p);
}

/* A step that runs past the deadline and then waits for a poke is
 * stepped again at once, urgent: its deadline passed while it ran. */
static void test_a_step_that_overruns_its_deadline_is_stepped_urgent_at_once(void **state)
{
	dlock__stepper *s = dlock__stepper_new(1);
	probe p;
	dlock__task *task;
	int64_t started = dlock__mono_us();

	(void)state;
	probe_init(&p, 2, INT64_MAX);
	p.hold = true;
	task = start(s, &p, started + 20 * 1000);
	assert_true(wait_held(&p));
	g_usleep(60 * 1000);
	release_hold(&p);
	end_urgent(s, task, &p);
	probe_clear(&p);
}

static void test_cancel_makes_the_next_step_urgent(void **state)
{
	dlock__stepper *s = dlock__stepper_new(1);
	probe p;
	dlock__task *task;

	(void)state;
	probe_init(&p, 2, INT64_MAX);
	task = start(s, &p, INT64_MAX);
	assert_true(wait_steps(&p, 1));
	assert_false(p.urgent[0]);
	dlock__task_cancel(task);
	assert_true(wait_ended(task));
	assert_true(p.urgent[1]);
	dlock__task_unref(task);
	dlock__stepper_free(s);
	probe_clear(&p);
}

static void test_cancel_before_the_start_counts(void **state)
{
	dlock__stepper *s = dlock__stepper_new(1);
	dlock__task *task;
	probe p;

	(void)state;
	probe_init(&p, 1, 0);
	task = dlock__task_new(probe_step, &p, INT64_MAX);
	/* A poke before the start does nothing; a cancel is kept. */
	dlock__task_poke(task);
	dlock__task_cancel(task);
	dlock__task_start(s, task);
	assert_true(wait_ended(task));
	assert_int_equal(p.steps, 1);
	assert_true(p.urgent[0]);
	assert_string_equal(p.thread[0], "dlock-async");
	dlock__task_unref(task);
	dlock__stepper_free(s);
	probe_clear(&p);
}

static void count_notify(void *data, bool canceled)
{
	g_atomic_int_add((int *)data, canceled ? 10 : 1);
}

static void test_waiter_notify_runs_on_wake_and_cancel_until_cleared(void **state)
{
	dlock__waiter *w = dlock__waiter_new();
	int calls = 0;

	(void)state;
	dlock__waiter_wake(w);
	assert_int_equal(calls, 0);
	dlock__waiter_set_notify(w, count_notify, &calls);
	dlock__waiter_wake(w);
	assert_int_equal(calls, 1);
	dlock__waiter_set_notify(w, NULL, NULL);
	dlock__waiter_wake(w);
	assert_int_equal(calls, 1);
	dlock__waiter_set_notify(w, count_notify, &calls);
	dlock__waiter_cancel(w);
	assert_int_equal(calls, 11);
	assert_true(dlock__waiter_canceled(w));
	dlock__waiter_free(w);
}

static void test_waiter_wake_pokes_its_task(void **state)
{
	dlock__stepper *s = dlock__stepper_new(1);
	dlock__waiter *w = dlock__waiter_new();
	probe p;
	dlock__task *task;

	(void)state;
	probe_init(&p, 3, INT64_MAX);
	task = start(s, &p, INT64_MAX);
	dlock__waiter_set_notify(w, dlock__task_notify, task);
	assert_true(wait_steps(&p, 1));
	dlock__waiter_wake(w);
	assert_true(wait_steps(&p, 2));
	assert_false(p.urgent[1]);
	/* A cancel of the waiter cancels the task: its next step is urgent. */
	dlock__waiter_cancel(w);
	assert_true(wait_ended(task));
	assert_int_equal(p.steps, 3);
	assert_true(p.urgent[2]);
	dlock__waiter_set_notify(w, NULL, NULL);
	dlock__waiter_free(w);
	dlock__task_unref(task);
	dlock__stepper_free(s);
	probe_clear(&p);
}

/* Many tasks, poked at random from several threads: each step of a task
 * runs alone, every task takes exactly its steps and ends once. */
#define MANY 200
#define MANY_STEPS 20

typedef struct crowd {
	probe probes[MANY];
	dlock__task *tasks[MANY];
	int stop;
} crowd;

static gpointer poker_main(gpointer data)
{
	crowd *c = data;
	GRand *r = g_rand_new_with_seed(GPOINTER_TO_UINT(g_thread_self()));

	while (!g_atomic_int_get(&c->stop)) {
		dlock__task *t = c->tasks[g_rand_int_range(r, 0, MANY)];

		if (g_rand_boolean(r))
			dlock__task_poke(t);
		else
			g_thread_yield();
	}
	g_rand_free(r);
	return NULL;
}

static bool crowd_step(void *data, bool urgent, int64_t *until_us)
{
	probe *p = data;
	char name[16];
	bool ended;

	(void)urgent;
	g_mutex_lock(&p->mu);
	if (p->in_step++)
		p->overlapped = true;
	g_mutex_unlock(&p->mu);
	g_thread_yield();
	pthread_getname_np(pthread_self(), name, sizeof name);
	g_mutex_lock(&p->mu);
	p->steps++;
	ended = p->steps == p->end_after;
	/* Every other step waits for a poke alone; the rest for 0-2 ms. */
	if (!ended)
		*until_us = p->steps % 2 ? INT64_MAX : dlock__mono_us() + g_random_int_range(0, 2000);
	p->in_step--;
	if (strcmp(name, "dlock-step") != 0)
		p->off_worker = true;
	g_mutex_unlock(&p->mu);
	return ended;
}

static void test_steps_never_overlap_and_every_task_ends_once(void **state)
{
	dlock__stepper *s = dlock__stepper_new(DLOCK__STEPPER_MAX_WORKERS);
	crowd *c = g_new0(crowd, 1);
	GThread *pokers[3];
	int ended = 0;

	(void)state;
	for (int i = 0; i < MANY; i++)
		probe_init(&c->probes[i], MANY_STEPS, INT64_MAX);
	for (int i = 0; i < MANY; i++) {
		c->tasks[i] = dlock__task_new(crowd_step, &c->probes[i], INT64_MAX);
		dlock__task_start(s, c->tasks[i]);
	}
	for (int i = 0; i < 3; i++)
		pokers[i] = g_thread_new("poker", poker_main, c);
	for (int i = 0; i < MANY; i++)
		ended += wait_ended(c->tasks[i]);
	g_atomic_int_set(&c->stop, 1);
	for (int i = 0; i < 3; i++)
		g_thread_join(pokers[i]);
	assert_int_equal(ended, MANY);
	for (int i = 0; i < MANY; i++) {
		assert_int_equal(c->probes[i].steps, MANY_STEPS);
		assert_false(c->probes[i].overlapped);
		/* Only the workers ran these steps: none was urgent, and a
		 * timer that comes due as a poke queues the task does not
		 * send it to the timer thread. */
		assert_false(c->probes[i].off_worker);
	}
	for (int i = 0; i < MANY; i++) {
		dlock__task_unref(c->tasks[i]);
		probe_clear(&c->probes[i]);
	}
	dlock__stepper_free(s);
	g_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_step_runs_on_a_stepper_thread_not_the_callers),
		cmocka_unit_test(test_waiting_task_steps_again_when_its_time_comes),
		cmocka_unit_test(test_poke_steps_a_waiting_task_before_its_time),
		cmocka_unit_test(test_poke_during_a_step_runs_it_again),
		cmocka_unit_test(test_a_step_run_again_at_once_starts_no_worker),
		cmocka_unit_test(test_deadline_steps_run_on_the_timer_thread_while_workers_are_busy),
		cmocka_unit_test(test_a_task_does_not_queue_behind_busy_workers),
		cmocka_unit_test(test_waiting_task_is_stepped_at_its_deadline),
		cmocka_unit_test(test_a_step_that_overruns_its_deadline_is_stepped_urgent_at_once),
		cmocka_unit_test(test_cancel_makes_the_next_step_urgent),
		cmocka_unit_test(test_cancel_before_the_start_counts),
		cmocka_unit_test(test_waiter_notify_runs_on_wake_and_cancel_until_cleared),
		cmocka_unit_test(test_waiter_wake_pokes_its_task),
		cmocka_unit_test(test_steps_never_overlap_and_every_task_ends_once),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
