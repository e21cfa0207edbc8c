/* SPDX-License-Identifier: MIT */
/*
 * Waiters: one thread inside acquire (or a backend's own wait for an
 * answer), and what wakes it.  Part of the kit: the core and every
 * backend wait through it, and it knows nothing of either.
 */
#ifndef DLOCK_KIT_WAITER_H
#define DLOCK_KIT_WAITER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct dlock__waiter dlock__waiter;

/*
 * A waiter is one thread inside acquire.  Anything that may let it succeed
 * (a release notification, a reconnect) calls dlock__waiter_wake(); cancel
 * and teardown also wake it.  To never miss a wake-up, a backend reads the
 * sequence number before it tries, and sleeps only if it is unchanged:
 *
 *   for (;;) {
 *       uint64_t seen = dlock__waiter_seq(w);
 *       if (try() == OK) break;
 *       rc = dlock__waiter_sleep(w, seen, MIN(deadline, now + backoff));
 *   }
 */
uint64_t dlock__waiter_seq(dlock__waiter *waiter);

/* A waiter of the backend's own, for a wait outside acquire (a release or
 * a query waiting for an answer). */
dlock__waiter *dlock__waiter_new(void);
void dlock__waiter_free(dlock__waiter *waiter);
/* Another reference, dropped by dlock__waiter_free(): a waker that found
 * the waiter under a lock keeps it alive to wake it after that lock. */
dlock__waiter *dlock__waiter_ref(dlock__waiter *waiter);

/* Sleep until the sequence number differs from seen (returns DLOCK_OK),
 * until_us on the monotonic clock passes (DLOCK_ETIMEDOUT), or the waiter is
 * canceled (DLOCK_ECANCELED, also returned at once if already canceled). */
int dlock__waiter_sleep(dlock__waiter *waiter, uint64_t seen, int64_t until_us);
bool dlock__waiter_canceled(dlock__waiter *waiter);

/*
 * A backend about to block in I/O on a socket (a command waiting for its
 * answer) registers it, so that a cancel shuts the socket down and the
 * blocked read or write fails at once; fd -1 unregisters it, which must be
 * done before the socket is closed.  Returns false, registering nothing,
 * if the waiter is already canceled.
 */
bool dlock__waiter_set_io_fd(dlock__waiter *waiter, int fd);

/*
 * The same around one blocking step on fd, for a waiter that may be NULL
 * (a wait no cancel can reach): dlock__waiter_io_begin() registers fd,
 * false when the waiter is canceled already; dlock__waiter_io_end()
 * unregisters it and tells whether a cancel came meanwhile -- the socket
 * may then have been shut down and must not be used again.
 */
bool dlock__waiter_io_begin(dlock__waiter *waiter, int fd);
bool dlock__waiter_io_end(dlock__waiter *waiter);

/*
 * A backend that sleeps in a futex wait of its own (the file backend)
 * includes this word, expecting 0: cancel sets it to 1 and wakes it, so the
 * wait ends at once, and a wait begun after the cancel does not sleep.
 */
const uint32_t *dlock__waiter_cancel_word(dlock__waiter *waiter);

/*
 * One sleep of an acquire's wait loop: until woken, until deadline_us, or
 * for at most nap_us.  DLOCK_OK means "try again" (woken; or the nap ended,
 * and then *backoff_us doubles, up to cap_us).  DLOCK_ECANCELED and
 * DLOCK_ETIMEDOUT come with the common message naming resource (error.h).
 */
int dlock__waiter_turn(dlock__waiter *waiter, uint64_t seen, const char *resource,
                       int64_t wait_ms, int64_t deadline_us, int64_t nap_us,
                       int64_t *backoff_us, int64_t cap_us);

/*
 * The same turn in two halves, for a wait that a step of a machine asks
 * for and someone else sleeps (or, for a call the stepper drives, nobody
 * does): the step fills a turn -- sleep while the sequence number is
 * still seen, until until_us -- and returns; the next step begins with
 * dlock__waiter_turn_end(), which tells what the wait ended with, as
 * dlock__waiter_turn() would have.
 */
typedef struct dlock__turn {
	uint64_t seen;     /* dlock__waiter_seq() read before the try */
	int64_t until_us;  /* monotonic; INT64_MAX: until woken */
} dlock__turn;

void dlock__waiter_turn_begin(dlock__turn *turn, uint64_t seen, int64_t deadline_us,
                              int64_t nap_us);
int dlock__waiter_turn_end(dlock__waiter *waiter, const dlock__turn *turn, const char *resource,
                           int64_t wait_ms, int64_t deadline_us, int64_t *backoff_us,
                           int64_t cap_us);

/* A step's answer that it waits for a turn (backend.h). */
#define DLOCK__STEP_WAIT 1

/*
 * What a machine of steps keeps of its wait: whose waiter, the deadline,
 * the backoff, and the turn its last step asked for.
 */
typedef struct dlock__wait {
	dlock__waiter *waiter;
	const char *resource;   /* for the common messages */
	int64_t wait_ms;
	int64_t deadline_us;
	int64_t backoff_us;
	bool turned;            /* the last step asked for turn */
	dlock__turn turn;
} dlock__wait;

void dlock__wait_init(dlock__wait *wait, dlock__waiter *waiter, const char *resource,
                      int64_t wait_ms, int64_t deadline_us, int64_t backoff_us);
/* Ask for a turn (until woken, the deadline, or nap_us) into *ret_turn;
 * returns DLOCK__STEP_WAIT, for the step to return. */
int dlock__wait_turn(dlock__wait *wait, uint64_t seen, int64_t nap_us, dlock__turn *ret_turn);
/* At a step's start, after a turn: what ended it, as dlock__waiter_turn()
 * tells it (the backoff doubles after a nap, up to cap_us); DLOCK_OK
 * also for a first step. */
int dlock__wait_resume(dlock__wait *wait, int64_t cap_us);
void dlock__waiter_wake(dlock__waiter *waiter);

/* Cancel the wait: the sleeper wakes with DLOCK_ECANCELED, a registered
 * socket is shut down, the cancel word is set.  The core's alone (a
 * dlock_lock_cancel(), a handle's or client's free): backends never
 * cancel a waiter. */
void dlock__waiter_cancel(dlock__waiter *waiter);

/*
 * A waiter that is not a sleeping thread: a call the stepper drives
 * (stepper.h) sleeps nowhere, so a wake or a cancel must also reach it
 * another way.  After set_notify, every dlock__waiter_wake() calls
 * fn(data, false) and dlock__waiter_cancel() fn(data, true) -- under the
 * waiter's mutex, so that once set_notify(waiter, NULL, NULL) has returned
 * no call of the old fn runs any more, and data may be freed.  fn takes no
 * mutex but one ranked after DLOCK__RANK_WAITER, never blocks and does no
 * I/O: it runs on the wakers' threads, under their mutexes.  A sleeper is
 * woken as before.
 */
void dlock__waiter_set_notify(dlock__waiter *waiter, void (*fn)(void *data, bool canceled),
                              void *data);

#endif
