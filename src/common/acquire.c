/* SPDX-License-Identifier: MIT */
/*
 * A backend's acquire, driven on the calling thread: the machine's steps
 * (backend.h), with a sleep on the waiter between them, or the backend's
 * one-call acquire.
 */
#include "core.h"

int dlock__slot_acquire(dlock__slot *slot, dlock__hold *hold, dlock__waiter *waiter,
                        int64_t wait_ms, int64_t deadline_us)
{
	const dlock__backend_ops *ops = slot->ops;
	void *machine = NULL;
	dlock__turn turn;
	int rc;

	if (ops->acquire)
		return ops->acquire(slot->impl, hold, waiter, wait_ms, deadline_us);
	rc = ops->acquire_begin(slot->impl, hold, waiter, wait_ms, deadline_us, 0, &machine);
	if (!machine)
		return rc;
	/* The sleep's own result does not count: the next step begins with
	 * dlock__waiter_turn_end(), which tells a wake, a nap, the deadline
	 * and a cancel apart as the backend needs them told. */
	while ((rc = ops->acquire_step(slot->impl, machine, &turn)) == DLOCK__STEP_WAIT)
		dlock__waiter_sleep(waiter, turn.seen, turn.until_us);
	ops->acquire_end(slot->impl, machine);
	return rc;
}
