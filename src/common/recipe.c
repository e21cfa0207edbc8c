/* SPDX-License-Identifier: MIT */
/*
 * The core's side of what a recipe may use (recipe.h): a recipe's handle
 * as it may see it, and its backend's announcements and watch, reached
 * through the handle's slot.
 */
#include "core.h"
#include "mutex.h"

void dlock__lock_set_recipe(dlock_lock *lock, const dlock__recipe_ops *ops, void *recipe)
{
	lock->recipe_ops = ops;
	lock->recipe = recipe;
}

dlock_client *dlock__lock_client(const dlock_lock *lock)
{
	return lock->client;
}

const char *dlock__lock_resource(const dlock_lock *lock)
{
	return lock->resource;
}

bool dlock__lock_freed(dlock_lock *lock)
{
	bool freed;

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	freed = lock->freed;
	dlock__mutex_unlock(&lock->mu);
	return freed;
}

void dlock__lock_announce(dlock_lock *lock, const char *id)
{
	uint64_t token = 0;
	int64_t ttl_ms = 0;

	if (!lock->slot->ops->announce)
		return;
	if (id) {
		dlock__hold *hold = dlock__owner_find(lock);
		dlock_hold state = hold ? dlock__hold_state(hold, &token) : DLOCK_HOLD_NONE;

		if (hold)
			ttl_ms = dlock__hold_ttl_ms(hold);
		dlock__hold_unref(hold);
		if (state != DLOCK_HOLD_HELD)
			return; /* resigned or lost already: nothing to announce */
	}
	dlock__announce_later(lock->client, lock->slot, lock->resource, id, token, ttl_ms);
}

int dlock__lock_watch(dlock_lock *lock, dlock__waiter *waiter, void **watch)
{
	const dlock__backend_ops *ops = lock->slot->ops;

	if (!ops->watch)
		return DLOCK_EBACKEND; /* no watch: not an error the caller reports */
	return ops->watch(lock->slot->impl, lock->resource, waiter, watch);
}

void dlock__lock_unwatch(dlock_lock *lock, void *watch)
{
	if (watch)
		lock->slot->ops->unwatch(lock->slot->impl, watch);
}
