/* SPDX-License-Identifier: MIT */
/*
 * Waiters: how a thread inside acquire sleeps until something may let it
 * succeed.  A sequence number, bumped by every wake-up, lets a backend read
 * it before trying and sleep only if nothing happened since, so a release
 * that lands between a failed try and the sleep is never missed.
 */
#include <limits.h>
#include <linux/futex.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <glib.h>

#include "clock.h"
#include "error.h"
#include "mutex.h"
#include "stepper.h"
#include "waiter.h"

struct dlock__waiter {
	gatomicrefcount ref; /* the owner's, and a waker's while it wakes */
	GMutex mu;    /* guards seq, canceled, io_fd, notify (rank WAITER) */
	GCond cond;
	uint64_t seq;
	bool canceled;
	int io_fd;    /* the socket a blocking command waits on, or -1 */
	void (*notify)(void *data, bool canceled); /* on wake and cancel, or NULL */
	void *notify_data;
	uint32_t cancel_word; /* 1 once canceled: a futex (dlock__waiter_cancel_word) */
};

dlock__waiter *dlock__waiter_new(void)
{
	dlock__waiter *w = g_new0(dlock__waiter, 1);

	g_atomic_ref_count_init(&w->ref);
	g_mutex_init(&w->mu);
	g_cond_init(&w->cond);
	w->io_fd = -1;
	return w;
}

dlock__waiter *dlock__waiter_ref(dlock__waiter *waiter)
{
	g_atomic_ref_count_inc(&waiter->ref);
	return waiter;
}

void dlock__waiter_free(dlock__waiter *waiter)
{
	if (!waiter || !g_atomic_ref_count_dec(&waiter->ref))
		return;
	g_mutex_clear(&waiter->mu);
	g_cond_clear(&waiter->cond);
	g_free(waiter);
}

uint64_t dlock__waiter_seq(dlock__waiter *waiter)
{
	uint64_t seq;

	dlock__mutex_lock(&waiter->mu, DLOCK__RANK_WAITER);
	seq = waiter->seq;
	dlock__mutex_unlock(&waiter->mu);
	return seq;
}

int dlock__waiter_sleep(dlock__waiter *waiter, uint64_t seen, int64_t until_us)
{
	int rc = DLOCK_OK;

	dlock__assert_may_block("a sleep on a waiter");
	dlock__mutex_lock(&waiter->mu, DLOCK__RANK_WAITER);
	while (!waiter->canceled && waiter->seq == seen) {
		if (until_us == INT64_MAX) {
			g_cond_wait(&waiter->cond, &waiter->mu);
		} else if (!g_cond_wait_until(&waiter->cond, &waiter->mu, until_us)) {
			if (waiter->seq == seen && !waiter->canceled)
				rc = DLOCK_ETIMEDOUT;
			break;
		}
	}
	if (waiter->canceled)
		rc = DLOCK_ECANCELED;
	dlock__mutex_unlock(&waiter->mu);
	return rc;
}

bool dlock__waiter_canceled(dlock__waiter *waiter)
{
	bool canceled;

	dlock__mutex_lock(&waiter->mu, DLOCK__RANK_WAITER);
	canceled = waiter->canceled;
	dlock__mutex_unlock(&waiter->mu);
	return canceled;
}

void dlock__waiter_wake(dlock__waiter *waiter)
{
	dlock__mutex_lock(&waiter->mu, DLOCK__RANK_WAITER);
	waiter->seq++;
	if (waiter->notify)
		waiter->notify(waiter->notify_data, false);
	dlock__mutex_unlock(&waiter->mu);
	/* After the unlock: the woken thread does not find the mutex still
	 * held and block on it again.  A sleeper that read the old seq is in
	 * the wait already (it checks seq and sleeps under the mutex). */
	g_cond_broadcast(&waiter->cond);
}

void dlock__waiter_cancel(dlock__waiter *waiter)
{
	dlock__mutex_lock(&waiter->mu, DLOCK__RANK_WAITER);
	waiter->canceled = true;
	g_cond_broadcast(&waiter->cond);
	/* shutdown() does not block: it ends the read or write the waiting
	 * thread is blocked in, which then fails at once. */
	if (waiter->io_fd >= 0)
		shutdown(waiter->io_fd, SHUT_RDWR);
	/* A thread asleep in a futex wait that includes this word wakes; one
	 * about to sleep finds the word changed and does not. */
	__atomic_store_n(&waiter->cancel_word, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &waiter->cancel_word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	if (waiter->notify)
		waiter->notify(waiter->notify_data, true);
	dlock__mutex_unlock(&waiter->mu);
}

void dlock__waiter_set_notify(dlock__waiter *waiter, void (*fn)(void *data, bool canceled),
                              void *data)
{
	dlock__mutex_lock(&waiter->mu, DLOCK__RANK_WAITER);
	waiter->notify = fn;
	waiter->notify_data = fn ? data : NULL;
	dlock__mutex_unlock(&waiter->mu);
}

const uint32_t *dlock__waiter_cancel_word(dlock__waiter *waiter)
{
	return &waiter->cancel_word;
}

bool dlock__waiter_set_io_fd(dlock__waiter *waiter, int fd)
{
	bool ok;

	dlock__mutex_lock(&waiter->mu, DLOCK__RANK_WAITER);
	ok = fd < 0 || !waiter->canceled;
	waiter->io_fd = ok ? fd : -1;
	dlock__mutex_unlock(&waiter->mu);
	return ok;
}

bool dlock__waiter_io_begin(dlock__waiter *waiter, int fd)
{
	dlock__assert_may_block("a wait for a server's answer");
	return !waiter || dlock__waiter_set_io_fd(waiter, fd);
}

bool dlock__waiter_io_end(dlock__waiter *waiter)
{
	bool canceled;

	if (!waiter)
		return false;
	dlock__mutex_lock(&waiter->mu, DLOCK__RANK_WAITER);
	waiter->io_fd = -1;
	canceled = waiter->canceled;
	dlock__mutex_unlock(&waiter->mu);
	return canceled;
}

void dlock__waiter_turn_begin(dlock__turn *turn, uint64_t seen, int64_t deadline_us,
                              int64_t nap_us)
{
	turn->seen = seen;
	turn->until_us = nap_us == INT64_MAX ? deadline_us : MIN(deadline_us, dlock__mono_us() + nap_us);
}

int dlock__waiter_turn_end(dlock__waiter *waiter, const dlock__turn *turn, const char *resource,
                           int64_t wait_ms, int64_t deadline_us, int64_t *backoff_us,
                           int64_t cap_us)
{
	bool canceled, woken;

	dlock__mutex_lock(&waiter->mu, DLOCK__RANK_WAITER);
	canceled = waiter->canceled;
	woken = waiter->seq != turn->seen;
	dlock__mutex_unlock(&waiter->mu);
	if (canceled)
		return dlock__error_canceled(resource);
	if (woken)
		return DLOCK_OK;
	if (dlock__remaining_us(deadline_us) == 0)
		return dlock__error_timeout(resource, wait_ms);
	/* The nap ran out (or the wait ended early, which counts the same). */
	*backoff_us = MIN(*backoff_us * 2, cap_us);
	return DLOCK_OK;
}

void dlock__wait_init(dlock__wait *wait, dlock__waiter *waiter, const char *resource,
                      int64_t wait_ms, int64_t deadline_us, int64_t backoff_us)
{
	wait->waiter = waiter;
	wait->resource = resource;
	wait->wait_ms = wait_ms;
	wait->deadline_us = deadline_us;
	wait->backoff_us = backoff_us;
	wait->turned = false;
}

int dlock__wait_turn(dlock__wait *wait, uint64_t seen, int64_t nap_us, dlock__turn *ret_turn)
{
	dlock__waiter_turn_begin(&wait->turn, seen, wait->deadline_us, nap_us);
	wait->turned = true;
	*ret_turn = wait->turn;
	return DLOCK__STEP_WAIT;
}

int dlock__wait_resume(dlock__wait *wait, int64_t cap_us)
{
	if (!wait->turned)
		return DLOCK_OK;
	wait->turned = false;
	return dlock__waiter_turn_end(wait->waiter, &wait->turn, wait->resource, wait->wait_ms,
	                              wait->deadline_us, &wait->backoff_us, cap_us);
}

int dlock__waiter_turn(dlock__waiter *waiter, uint64_t seen, const char *resource,
                       int64_t wait_ms, int64_t deadline_us, int64_t nap_us,
                       int64_t *backoff_us, int64_t cap_us)
{
	dlock__turn turn;

	dlock__waiter_turn_begin(&turn, seen, deadline_us, nap_us);
	dlock__waiter_sleep(waiter, seen, turn.until_us);
	return dlock__waiter_turn_end(waiter, &turn, resource, wait_ms, deadline_us, backoff_us,
	                              cap_us);
}
