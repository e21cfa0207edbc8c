/* SPDX-License-Identifier: MIT */
/*
 * What a recipe (src/recipes) may use of the core.  A recipe is built on
 * one lock handle: it takes and ends its holds with the public calls
 * (dlock_acquire, dlock_release, dlock_lock_query...), and beyond them uses
 * only what this header declares and the kit's headers -- never core.h or
 * a handle's fields (tests/abi/check-layers.sh).  The core calls a recipe
 * only through the hooks it sets on its handle, and never names one
 * (docs/architecture.md, "Recipes on a handle").
 */
#ifndef DLOCK_COMMON_RECIPE_H
#define DLOCK_COMMON_RECIPE_H

#include <stdbool.h>
#include <stdint.h>

#include "dlock.h"
#include "waiter.h"

/* ---- the hooks -------------------------------------------------------- */

typedef struct dlock__recipe_ops dlock__recipe_ops;

/* What happened to a recipe's handle, as the callback thread tells it. */
typedef enum dlock__event_kind {
	DLOCK__EVENT_STATE,  /* a state of its hold: code is a dlock_state */
	DLOCK__EVENT_GRANT,  /* a grant of its hold: posted once the grant is
	                      * installed, or earlier if a state of the hold or
	                      * its end comes first -- always before them, so an
	                      * event the recipe posts after its grant (a
	                      * resignation's) cannot overtake it */
	DLOCK__EVENT_RECIPE  /* one the recipe posted itself: code and text are its own */
} dlock__event_kind;

/*
 * A recipe built on one lock handle (the leader election, in
 * src/recipes): the handle's events go to it instead of a state callback,
 * its holds carry the recipe's holder id, and the handle's end ends it.
 * The core calls these hooks and never names a recipe.
 */
struct dlock__recipe_ops {
	const char *kind;    /* "election", for messages */
	/* The id the handle's holds record in their holder record. */
	const char *(*holder_id)(const void *recipe);
	/* An event of the handle, on the callback thread, in the order the
	 * events were posted (text: a recipe event's, or NULL). */
	void (*event)(void *recipe, dlock__event_kind kind, int code, const char *text);
	/* The client is closing: stop and join the recipe's own threads. */
	void (*stop)(void *recipe);
	/* The handle's last reference is going: free the recipe. */
	void (*destroy)(void *recipe);
};

/* Build recipe on lock, an exclusive handle of one permit for as long as
 * it lives; before the handle is shared (the callback thread reads it
 * without the handle's mutex). */
void dlock__lock_set_recipe(dlock_lock *lock, const dlock__recipe_ops *ops, void *recipe);

/* ---- the handle ------------------------------------------------------- */

/* Its client; NULL once the client has been freed. */
dlock_client *dlock__lock_client(const dlock_lock *lock);
/* Its resource name. */
const char *dlock__lock_resource(const dlock_lock *lock);
/* Whether dlock_lock_free() has begun on it. */
bool dlock__lock_freed(dlock_lock *lock);
/* Check a public call's lock argument, count the call on the handle (which
 * dlock_lock_free() waits for; DLOCK_ECANCELED once the free has begun)
 * and enter its client.  Then leave with dlock__lock_leave(). */
int dlock__lock_enter(dlock_lock *lock, const char *what);
void dlock__lock_leave(dlock_lock *lock);
/* Register a waiter of a thread waiting on the handle's behalf, so that
 * cancel and free reach it (canceled at once if the free has begun). */
void dlock__lock_add_waiter(dlock_lock *lock, dlock__waiter *waiter);
void dlock__lock_remove_waiter(dlock_lock *lock, dlock__waiter *waiter);
/* Cancel the handle's waiters, and every waiter registered from now on,
 * while its calls are still let in: a recipe about to be freed. */
void dlock__lock_cancel_all(dlock_lock *lock);

/* The handle's hold (it is DLOCK_OWNER_HANDLE), without counting it again:
 * DLOCK_OK once it is HELD (at once, or after a suspension waited out
 * within deadline_us), DLOCK_ELOST (cleared), or DLOCK__HOLD_ENDED when
 * there is none. */
#define DLOCK__HOLD_ENDED 1
int dlock__owner_confirm(dlock_lock *lock, int64_t deadline_us);

/* Have the handle's backend tell observers, in the background and in the
 * order asked, that id leads the resource by the handle's hold (with its
 * token and TTL) -- only while that hold is HELD; id NULL: nobody leads
 * (a resignation).  No-op for a backend without announcements. */
void dlock__lock_announce(dlock_lock *lock, const char *id);
/* Arm the backend's watch of the resource, which wakes waiter when its
 * holder changes (*watch, reused by the next call: arm it again after each
 * wake).  DLOCK_OK when armed; DLOCK_EBACKEND, recording no message, for
 * a backend without one, whose resource the caller then looks at now and
 * then. */
int dlock__lock_watch(dlock_lock *lock, dlock__waiter *waiter, void **watch);
/* Drop a watch armed by dlock__lock_watch(). */
void dlock__lock_unwatch(dlock_lock *lock, void *watch);

/*
 * An acquire of the handle without a waiting thread, for a recipe
 * (dlock_acquire_async()'s rules, with done getting the handle): a hold
 * the handle has already is confirmed -- a suspension waited out -- and
 * not counted again; one found lost is cleared and the call asks the
 * backend afresh.  The recipe's hooks run around the backend's part:
 */
typedef struct dlock__recipe_call {
	/* Stepped once no hold is found, before the backend is asked, until
	 * it returns something other than DLOCK__STEP_WAIT: DLOCK_OK to go
	 * on, or the call's result.  DLOCK__STEP_WAIT fills *ret_turn; the
	 * hook is stepped again when waiter (on the handle, so that cancel
	 * and free reach it) is woken or the turn ends.  May run on the
	 * stepper's timer thread at the deadline: no I/O. */
	int (*prepare)(void *data, dlock__waiter *waiter, int64_t wait_ms, int64_t deadline_us,
	               dlock__turn *ret_turn);
	/* The result, just before done gets it (rc; fresh: a new grant, now
	 * installed), on the thread that runs done: once, also for a call a
	 * free ends.  It may set the error message done will read. */
	void (*delivered)(void *data, int rc, bool fresh);
} dlock__recipe_call;

/* Start such a call: DLOCK_OK, or dlock_acquire_async()'s refusals
 * (then no hook runs).  what names the public call in messages. */
int dlock__lock_acquire_async(dlock_lock *lock, int64_t wait_ms, const dlock__recipe_call *call,
                              void *data, dlock_done_fn done, void *user_data, const char *what);

/* ---- the client ------------------------------------------------------- */

/* Refuse calls in a forked child (DLOCK_ECANCELED) and count calls in
 * flight so that dlock_client_free() can wait for them. */
int dlock__client_enter(dlock_client *client);
void dlock__client_leave(dlock_client *client);
bool dlock__client_forked(const dlock_client *client);
/* Queue an event of a recipe's handle for its event hook on the client's
 * callback thread, with a text that is copied (NULL: none). */
void dlock__callbacks_post_event(dlock_client *client, dlock_lock *lock, dlock__event_kind kind,
                                 int code, const char *text);
/* Wait until every event queued so far has been run (or dropped) by the
 * callback thread; at once if nothing was ever queued or when called on
 * that thread itself. */
void dlock__callbacks_flush(dlock_client *client);

#endif
