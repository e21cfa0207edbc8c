/* SPDX-License-Identifier: MIT */
/*
 * The stepper: runs calls that no application thread waits in (an
 * asynchronous acquire) as tasks that go in steps, on a few library
 * threads of its own.  Part of the kit: it knows nothing of locks.
 *
 * A task's step does what can be done now -- a try, a round trip bounded
 * by the call's deadline -- and either ends the task or says until when
 * it waits.  Whatever may let it go on pokes it: a waiter's notify
 * (waiter.h), or the stepper's own timer when that time comes.  The
 * stepper runs one step of a task at a time and never loses a poke: one
 * that lands while the step runs makes it run again.  A waiting task
 * occupies no thread.
 *
 * Deadlines are kept even while every worker is inside a slow round trip:
 * from the task's deadline on, or once it is canceled, its steps are
 * urgent, and urgent steps run on the timer thread, which does nothing
 * else.  So an urgent step does no I/O and waits for nothing: it gives
 * up, and leaves whatever must still be removed on a server to a
 * background cleanup.
 *
 * Threads: "dlock-async", the timer, started with the first task; up to
 * max_workers "dlock-step" threads, each started when a task is ready and
 * every worker is busy -- a step inside a slow round trip holds its
 * worker, and the others' steps must not queue behind it -- of which all
 * but DLOCK__STEPPER_KEEP_WORKERS end after DLOCK__STEPPER_RETIRE_US
 * without work.  dlock__stepper_free() joins them all.
 */
#ifndef DLOCK_KIT_STEPPER_H
#define DLOCK_KIT_STEPPER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct dlock__stepper dlock__stepper;
typedef struct dlock__task dlock__task;

/* The most workers a stepper runs at once; how many stay when idle, and
 * how long the others wait for work before they end. */
#define DLOCK__STEPPER_MAX_WORKERS 32
#define DLOCK__STEPPER_KEEP_WORKERS 4
#define DLOCK__STEPPER_RETIRE_US (10 * 1000 * 1000)

/*
 * One step of the task started with data.  urgent: the task is canceled
 * or past its deadline, and the step may be running on the timer thread:
 * no I/O, no waiting.  Returns true when the task has ended (no step of
 * it runs again), or false to wait: until *until_us on the monotonic
 * clock (INT64_MAX: until poked) or until poked, whichever comes first.
 */
typedef bool (*dlock__task_step_fn)(void *data, bool urgent, int64_t *until_us);

/*
 * Where a step may block -- a round trip, a connect, a sleep on a waiter --
 * it says so with dlock__assert_may_block(what): in a build with the
 * lock-order check (sanitizer builds), an urgent step on a timer thread
 * that gets there aborts, naming what and where, as a lock-order breach
 * does.  Elsewhere it costs nothing.
 */
void dlock__assert_may_block_checked(const char *what, const char *file, int line);
#ifdef DLOCK_LOCK_ORDER_CHECK
#define dlock__assert_may_block(what) dlock__assert_may_block_checked(what, __FILE__, __LINE__)
#else
#define dlock__assert_may_block(what) ((void)0)
#endif

/* max_workers is capped at DLOCK__STEPPER_MAX_WORKERS (0 counts as 1). */
dlock__stepper *dlock__stepper_new(unsigned max_workers);

/* Stop and join the threads, and free the stepper.  Every task must have
 * ended.  NULL is a no-op. */
void dlock__stepper_free(dlock__stepper *stepper);

/*
 * A task, not started: its steps will be step(data, ...), urgent from
 * deadline_us on (monotonic; INT64_MAX: never).  Returns it with a
 * reference for the caller, dropped with dlock__task_unref(); the stepper
 * keeps one of its own from the start until the task ends.  Pokes before
 * the start do nothing (the first step looks afresh); a cancel counts.
 */
dlock__task *dlock__task_new(dlock__task_step_fn step, void *data, int64_t deadline_us);

/* Start it: its first step runs soon, on a stepper thread, never inside
 * this call.  Once per task. */
void dlock__task_start(dlock__stepper *stepper, dlock__task *task);

/*
 * Step the task again soon; a no-op once it has ended.  Any thread, under
 * any mutex ranked before DLOCK__RANK_STEPPER; it does not block.  The
 * stepper must outlive the call.
 */
void dlock__task_poke(dlock__task *task);

/* Make every further step of the task urgent, and step it soon. */
void dlock__task_cancel(dlock__task *task);

/* A waiter's notify (dlock__waiter_set_notify()) for the task: a wake
 * pokes it, a cancel cancels it. */
void dlock__task_notify(void *task, bool canceled);

/* Whether the task has ended (its last step has returned true). */
bool dlock__task_ended(dlock__task *task);

void dlock__task_unref(dlock__task *task);

#endif
