/* SPDX-License-Identifier: MIT */
/*
 * The stepper (stepper.h): tasks that go in steps, run by a timer thread
 * and a few workers.
 *
 * A task is in one of five states, changed only under the stepper's
 * mutex:
 *
 *   NEW      not started yet: a poke does nothing, a cancel is kept
 *   IDLE     waiting: for a poke, and for its timer if it has one
 *   QUEUED   on the run queue (workers) or the urgent queue (the timer
 *            thread); a task on the run queue with a deadline also keeps
 *            a timer, which moves it to the urgent queue if the deadline
 *            passes before a worker takes it
 *   RUNNING  one thread is running its step; a poke or cancel meanwhile
 *            sets rerun, and the task is queued again when the step returns
 *   ENDED    its step returned true; pokes are ignored
 *
 * Workers are started as tasks come ready and every worker is busy, up
 * to max_workers, and those beyond the few kept end after a while idle.
 * The timer thread runs urgent tasks, and turns due timers into queued
 * tasks.  It runs nothing else, so an urgent step waits at most for the
 * urgent steps before it, which do no I/O.
 */
#include <stdio.h>
#include <stdlib.h>

#include <glib.h>

#include "clock.h"
#include "mutex.h"
#include "stepper.h"
#include "thread.h"

typedef enum task_state {
	TASK_NEW,
	TASK_IDLE,
	TASK_QUEUED,
	TASK_RUNNING,
	TASK_ENDED,
} task_state;

struct dlock__task {
	gatomicrefcount ref;        /* the caller's, and the stepper's until the task ends */
	dlock__stepper *stepper;
	dlock__task_step_fn step;
	void *data;
	int64_t deadline_us;
	/* Guarded by stepper->mu; state is also read without it, atomically,
	 * by dlock__task_poke() to ignore an ended task. */
	int state;                  /* task_state */
	bool rerun;                 /* poked or canceled while RUNNING */
	gint canceled;              /* atomic: set before the start too */
	bool on_urgent;             /* QUEUED on the urgent queue */
	GList link;                 /* in its queue while QUEUED; data is the task */
	GSequenceIter *timer;       /* in stepper->timers, or NULL */
	int64_t wake_us;            /* the timer's time */
	uint64_t order;             /* ties between equal times, first come first */
};

struct dlock__stepper {
	GMutex mu;                  /* guards all below, and the tasks' states (rank STEPPER) */
	GCond timer_cond;           /* the timer thread's: an urgent task, an earlier timer, stop */
	GCond work_cond;            /* idle workers' */
	GQueue ready;               /* QUEUED for a worker */
	GQueue urgent;              /* QUEUED for the timer thread */
	GSequence *timers;          /* tasks with a timer, by wake_us then order */
	uint64_t next_order;
	GThread *timer_thread;
	GPtrArray *workers;         /* GThread *, running */
	GPtrArray *retired;         /* GThread *, ended and not yet joined */
	unsigned max_workers;
	unsigned n_workers;
	unsigned idle_workers;
	bool stopping;
};

static int by_time(gconstpointer a, gconstpointer b, gpointer unused)
{
	const dlock__task *x = a, *y = b;

	(void)unused;
	if (x->wake_us != y->wake_us)
		return x->wake_us < y->wake_us ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static bool urgent_now(const dlock__task *task, int64_t now_us)
{
	return g_atomic_int_get(&task->canceled) || now_us >= task->deadline_us;
}

static void timer_clear_locked(dlock__stepper *s, dlock__task *task)
{
	if (task->timer) {
		g_sequence_remove(task->timer);
		task->timer = NULL;
	}
}

static void timer_set_locked(dlock__stepper *s, dlock__task *task, int64_t wake_us)
{
	timer_clear_locked(s, task);
	if (wake_us == INT64_MAX)
		return;
	task->wake_us = wake_us;
	task->order = s->next_order++;
	task->timer = g_sequence_insert_sorted(s->timers, task, by_time, NULL);
	/* The timer thread sleeps until the earliest timer: wake it if this
	 * one is now the earliest. */
	if (g_sequence_iter_is_begin(task->timer))
		g_cond_signal(&s->timer_cond);
}

static gpointer worker_main(gpointer data);
static void start_worker_locked(dlock__stepper *s);

static void queue_urgent_locked(dlock__stepper *s, dlock__task *task)
{
	timer_clear_locked(s, task);
	task->on_urgent = true;
	g_queue_push_tail_link(&s->urgent, &task->link);
	g_cond_signal(&s->timer_cond);
}

/* Set while this thread runs an urgent step on a timer thread. */
static _Thread_local bool in_urgent_step;

/* Queue an IDLE task (or one whose step just returned) to run.  spare: 1
 * when the caller is a worker that looks at the run queue next, and may
 * take it itself. */
static void queue_locked(dlock__stepper *s, dlock__task *task, unsigned spare)
{
	int64_t now = dlock__mono_us();

	g_atomic_int_set(&task->state, TASK_QUEUED);
	/* A poked task's wait is over: its timer goes, or, due while the
	 * task waits for a worker, it would send it to the timer thread. */
	timer_clear_locked(s, task);
	if (urgent_now(task, now)) {
		queue_urgent_locked(s, task);
		return;
	}
	task->on_urgent = false;
	g_queue_push_tail_link(&s->ready, &task->link);
	if (s->ready.length <= spare) {
		/* The calling worker takes it next. */
	} else if (s->ready.length <= s->idle_workers + spare) {
		g_cond_signal(&s->work_cond);
	} else if (s->n_workers < s->max_workers) {
		start_worker_locked(s);
	} else {
		/* Every worker is busy: its deadline still counts while it
		 * waits for one.  (A task a worker takes at once needs no
		 * timer, and the timer thread is not woken for it.) */
		timer_set_locked(s, task, task->deadline_us);
		g_cond_signal(&s->work_cond);
	}
}

/* The task has ended: drop the stepper's reference (not the last one
 * while its caller keeps its own, but it may be). */
static void end_locked(dlock__stepper *s, dlock__task *task)
{
	timer_clear_locked(s, task);
	g_atomic_int_set(&task->state, TASK_ENDED);
	dlock__task_unref(task);
}

/* Run one step of a task just taken off a queue; s->mu is held on entry
 * and on return, not during the step. */
static void run_locked(dlock__stepper *s, dlock__task *task)
{
	int64_t until_us = INT64_MAX, now;
	bool urgent, ended;

	timer_clear_locked(s, task);
	g_atomic_int_set(&task->state, TASK_RUNNING);
	task->rerun = false;
	urgent = urgent_now(task, dlock__mono_us());
	dlock__mutex_unlock(&s->mu);
	ended = task->step(task->data, urgent, &until_us);
	dlock__mutex_lock(&s->mu, DLOCK__RANK_STEPPER);
	if (ended) {
		end_locked(s, task);
		return;
	}
	now = dlock__mono_us();
	/* A step that ran past the deadline is followed by an urgent one at
	 * once, whatever it waits for. */
	if (task->rerun || until_us <= now || (!urgent && urgent_now(task, now))) {
		queue_locked(s, task, in_urgent_step ? 0 : 1);
		return;
	}
	g_atomic_int_set(&task->state, TASK_IDLE);
	/* An urgent task's deadline is behind it: only its own time counts,
	 * or it would be run again at once, over and over. */
	timer_set_locked(s, task, urgent_now(task, now) ? until_us : MIN(until_us, task->deadline_us));
}

void dlock__assert_may_block_checked(const char *what, const char *file, int line)
{
	if (!in_urgent_step)
		return;
	fprintf(stderr, "dlock: %s:%d: %s in an urgent step, on the stepper's timer thread, which "
	        "must not block\n", file, line, what);
	abort();
}

static gpointer timer_main(gpointer data)
{
	dlock__stepper *s = data;

	dlock__mutex_lock(&s->mu, DLOCK__RANK_STEPPER);
	for (;;) {
		GList *link = g_queue_pop_head_link(&s->urgent);
		GSequenceIter *first;
		dlock__task *task;

		if (link) {
			in_urgent_step = true;
			run_locked(s, link->data);
			in_urgent_step = false;
			continue;
		}
		if (s->stopping)
			break;
		first = g_sequence_get_begin_iter(s->timers);
		if (g_sequence_iter_is_end(first)) {
			g_cond_wait(&s->timer_cond, &s->mu);
			continue;
		}
		task = g_sequence_get(first);
		if (task->wake_us > dlock__mono_us()) {
			g_cond_wait_until(&s->timer_cond, &s->mu, task->wake_us);
			continue;
		}
		timer_clear_locked(s, task);
		if (task->state == TASK_IDLE) {
			queue_locked(s, task, 0);
		} else if (task->state == TASK_QUEUED && !task->on_urgent &&
		           urgent_now(task, dlock__mono_us())) {
			/* Its deadline passed while it waited for a worker. */
			g_queue_unlink(&s->ready, &task->link);
			queue_urgent_locked(s, task);
		}
	}
	dlock__mutex_unlock(&s->mu);
	return NULL;
}

static gpointer worker_main(gpointer data)
{
	dlock__stepper *s = data;

	dlock__mutex_lock(&s->mu, DLOCK__RANK_STEPPER);
	for (;;) {
		GList *link = g_queue_pop_head_link(&s->ready);
		bool woken = true;

		if (link) {
			run_locked(s, link->data);
			continue;
		}
		if (s->stopping)
			break;
		s->idle_workers++;
		if (s->n_workers > DLOCK__STEPPER_KEEP_WORKERS)
			woken = g_cond_wait_until(&s->work_cond, &s->mu,
			                          g_get_monotonic_time() + DLOCK__STEPPER_RETIRE_US);
		else
			g_cond_wait(&s->work_cond, &s->mu);
		s->idle_workers--;
		if (!woken && !s->stopping && s->ready.length == 0 &&
		    s->n_workers > DLOCK__STEPPER_KEEP_WORKERS) {
			/* Joined by the next start of a worker, or the free: it
			 * touches nothing of the stepper after this unlock. */
			GThread *self = g_thread_self();

			g_ptr_array_remove_fast(s->workers, self);
			g_ptr_array_add(s->retired, self);
			s->n_workers--;
			break;
		}
	}
	dlock__mutex_unlock(&s->mu);
	return NULL;
}

/* Join the workers that ended (they have let go of the mutex this
 * thread holds), then start one. */
static void start_worker_locked(dlock__stepper *s)
{
	dlock__mutex_assert_held(&s->mu);
	while (s->retired->len > 0)
		g_thread_join(g_ptr_array_steal_index_fast(s->retired, s->retired->len - 1));
	g_ptr_array_add(s->workers, dlock__thread_new("dlock-step", worker_main, s));
	s->n_workers++;
}

dlock__stepper *dlock__stepper_new(unsigned max_workers)
{
	dlock__stepper *s = g_new0(dlock__stepper, 1);

	g_mutex_init(&s->mu);
	g_cond_init(&s->timer_cond);
	g_cond_init(&s->work_cond);
	g_queue_init(&s->ready);
	g_queue_init(&s->urgent);
	s->timers = g_sequence_new(NULL);
	s->workers = g_ptr_array_new();
	s->retired = g_ptr_array_new();
	s->max_workers = CLAMP(max_workers, 1, DLOCK__STEPPER_MAX_WORKERS);
	return s;
}

void dlock__stepper_free(dlock__stepper *s)
{
	if (!s)
		return;
	dlock__mutex_lock(&s->mu, DLOCK__RANK_STEPPER);
	s->stopping = true;
	g_cond_broadcast(&s->timer_cond);
	g_cond_broadcast(&s->work_cond);
	dlock__mutex_unlock(&s->mu);
	if (s->timer_thread)
		g_thread_join(s->timer_thread);
	/* Stopping: no worker retires now, and the arrays are the free's. */
	for (guint i = 0; i < s->workers->len; i++)
		g_thread_join(s->workers->pdata[i]);
	for (guint i = 0; i < s->retired->len; i++)
		g_thread_join(s->retired->pdata[i]);
	g_ptr_array_unref(s->workers);
	g_ptr_array_unref(s->retired);
	g_sequence_free(s->timers);
	g_cond_clear(&s->work_cond);
	g_cond_clear(&s->timer_cond);
	g_mutex_clear(&s->mu);
	g_free(s);
}

dlock__task *dlock__task_new(dlock__task_step_fn step, void *data, int64_t deadline_us)
{
	dlock__task *task = g_new0(dlock__task, 1);

	g_atomic_ref_count_init(&task->ref);
	task->step = step;
	task->data = data;
	task->deadline_us = deadline_us;
	task->link.data = task;
	task->state = TASK_NEW;
	return task;
}

void dlock__task_start(dlock__stepper *s, dlock__task *task)
{
	g_atomic_ref_count_inc(&task->ref); /* the stepper's, until the task ends */
	dlock__mutex_lock(&s->mu, DLOCK__RANK_STEPPER);
	if (!s->timer_thread)
		s->timer_thread = dlock__thread_new("dlock-async", timer_main, s);
	g_atomic_pointer_set(&task->stepper, s);
	queue_locked(s, task, 0);
	dlock__mutex_unlock(&s->mu);
}

/* A poke or a cancel: run the task again soon. */
static void again_locked(dlock__stepper *s, dlock__task *task)
{
	switch (task->state) {
	case TASK_IDLE:
		queue_locked(s, task, 0);
		break;
	case TASK_QUEUED:
		/* Canceled while waiting for a worker: the timer thread takes it. */
		if (g_atomic_int_get(&task->canceled) && !task->on_urgent) {
			g_queue_unlink(&s->ready, &task->link);
			queue_urgent_locked(s, task);
		}
		break;
	case TASK_RUNNING:
		task->rerun = true;
		break;
	default:
		break;
	}
}

/* The task's stepper, or NULL before the start (or after the end, when
 * the stepper may be gone already and the mutex must not be touched). */
static dlock__stepper *stepper_of(dlock__task *task)
{
	dlock__stepper *s = g_atomic_pointer_get(&task->stepper);

	return s && g_atomic_int_get(&task->state) != TASK_ENDED ? s : NULL;
}

void dlock__task_poke(dlock__task *task)
{
	dlock__stepper *s = stepper_of(task);

	if (!s)
		return;
	dlock__mutex_lock(&s->mu, DLOCK__RANK_STEPPER);
	again_locked(s, task);
	dlock__mutex_unlock(&s->mu);
}

void dlock__task_cancel(dlock__task *task)
{
	dlock__stepper *s;

	/* Before the start too: the first step is then urgent. */
	g_atomic_int_set(&task->canceled, 1);
	s = stepper_of(task);
	if (!s)
		return;
	dlock__mutex_lock(&s->mu, DLOCK__RANK_STEPPER);
	again_locked(s, task);
	dlock__mutex_unlock(&s->mu);
}

void dlock__task_notify(void *task, bool canceled)
{
	if (canceled)
		dlock__task_cancel(task);
	else
		dlock__task_poke(task);
}

bool dlock__task_ended(dlock__task *task)
{
	return g_atomic_int_get(&task->state) == TASK_ENDED;
}

void dlock__task_unref(dlock__task *task)
{
	if (task && g_atomic_ref_count_dec(&task->ref))
		g_free(task);
}
