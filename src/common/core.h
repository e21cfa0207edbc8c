/* SPDX-License-Identifier: MIT */
/*
 * The core's own structures: clients, lock handles, holds, the per-thread
 * reentrancy tables (owner.c) and the callback thread.  Private to src/common;
 * backends see holds only through backend.h, recipes their handle only
 * through recipe.h.
 *
 * The lock order is the rank table of src/kit/mutex.h: the core's
 * mutexes rank hold->mu, then client->mu, then lock->mu.
 */
#ifndef DLOCK_COMMON_CORE_H
#define DLOCK_COMMON_CORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <glib.h>

#include "backend.h"
#include "dlock.h"
#include "error.h"
#include "log.h"
#include "parse.h"
#include "recipe.h"
#include "stepper.h"
#include "thread.h"

/* One configured backend of a client. */
typedef struct dlock__slot {
	char *name;       /* "default" for a client built from a URI */
	char *redacted;   /* its URI without the password */
	const dlock__backend_ops *ops;
	dlock__backend *impl;
	/* The default TTL and watchdog of its holds, from the backend's options
	 * when it has DLOCK__CAP_LEASE; 0 and false (no lease) otherwise. */
	int64_t ttl_ms;
	bool watchdog;
} dlock__slot;

/* A [route NAME] of a configuration file. */
typedef struct dlock__route {
	char *match;      /* glob */
	dlock__slot *slot;
} dlock__route;

typedef struct dlock__callbacks dlock__callbacks;
typedef struct dlock__op dlock__op;

typedef struct dlock__announcer dlock__announcer;

struct dlock_client {
	pid_t pid;               /* the process that built it; calls elsewhere are refused */
	dlock__logger logger;
	GPtrArray *slots;        /* of dlock__slot *, in configuration order */
	GPtrArray *routes;       /* of dlock__route *, tried in order */
	dlock__slot *default_slot;
	int64_t default_wait_ms; /* [defaults] wait, -1 when not configured */

	GMutex mu;               /* guards everything below (rank CLIENT) */
	GCond idle;              /* signalled when active drops to 0 */
	bool closing;            /* dlock_client_free() has begun */
	unsigned active;         /* calls in flight (dlock__client_enter) */
	GHashTable *holds;       /* set of live dlock__hold * (one reference each) */
	GHashTable *locks;       /* set of dlock_lock * not yet freed */
	dlock__lazy_thread callbacks; /* dlock__callbacks *; later events are dropped once stopped */
	dlock__lazy_thread announcer; /* dlock__announcer *: leaders' announcements */
	dlock__stepper *stepper; /* runs the calls without a waiting thread (async.c);
	                          * made on the first, freed with the client */
	dlock_delivery delivery; /* set before the first handle, then fixed */
	int event_fd;            /* DLOCK_DELIVER_DISPATCH: readable while callbacks wait */
};

struct dlock_lock {
	gatomicrefcount ref;     /* the user's, plus one per queued callback event */
	dlock_client *client;    /* NULL once the client has been freed */
	char *resource;
	dlock__slot *slot;
	char *thread_key;        /* key of this lock's EXCLUSIVE and WRITE holds in
	                          * per-thread tables */
	char *read_key;          /* and of its READ holds */

	GMutex mu;               /* guards everything below (rank LOCK) */
	bool started;            /* an acquire has begun: options are frozen */
	bool freed;
	dlock_owner owner;
	int64_t ttl_ms;          /* 0: the backend's default */
	int watchdog;            /* -1: the backend's default */
	dlock__mode mode;        /* DLOCK__MODE_EXCLUSIVE unless set */
	uint32_t permits;        /* 1 unless set */
	unsigned calls;          /* calls in flight on this handle (dlock__lock_enter) */
	GPtrArray *waiters;      /* dlock__waiter * of threads inside acquire */
	bool closing;            /* its free is coming (an election's): waiters are
	                          * canceled as they register */
	GCond idle;              /* signalled when calls drops to 0 while freed, and
	                          * when a call's done returns */
	dlock__op *async_op;     /* the call without a waiting thread in flight,
	                          * referenced, until its done returns (async.c) */
	unsigned delivering;     /* dones of the handle running (async.c) */
	dlock__hold *hold;       /* DLOCK_OWNER_HANDLE: the handle's hold, referenced
	                          * (written by owner.c alone) */
	bool lost_pending;       /* DLOCK_OWNER_HANDLE: a lost hold was replaced by a fresh
	                          * grant; the next release returns DLOCK_ELOST for it
	                          * (owner.c) */
	bool placing;            /* DLOCK_OWNER_HANDLE: a grant is being placed on the
	                          * handle; the next waits on placed (owner.c) */
	GCond placed;            /* broadcast when placing ends */
	dlock_state_fn state_fn;
	void *state_user_data;
	/* fixed before the handle is shared */
	const dlock__recipe_ops *recipe_ops; /* a recipe built on the handle, or NULL:
	                          * its events go to the recipe, and its holds
	                          * record the recipe's holder id */
	void *recipe;
};

/* ---- client ---------------------------------------------------------- */

/* dlock_client_new() with the backend given (NULL: chosen by the URI's
 * scheme).  The unit tests use it to run the core on an in-memory backend. */
int dlock__client_new_with_ops(const char *spec, const dlock__backend_ops *ops,
                               dlock_client **ret_client);

/* The slot of a configured backend by name, or NULL. */
dlock__slot *dlock__client_slot(const dlock_client *client, const char *name);
/* The slot a resource is routed to (first matching route, else the default). */
dlock__slot *dlock__client_route(const dlock_client *client, const char *resource);

/* The slot's backend acquires hold for a thread that sleeps on waiter
 * meanwhile, whichever form of acquire the backend has (acquire.c). */
int dlock__slot_acquire(dlock__slot *slot, dlock__hold *hold, dlock__waiter *waiter,
                        int64_t wait_ms, int64_t deadline_us);

/* ---- owners (owner.c: who holds what, and what an acquire comes to) -- */

/* dlock__owner_settle()'s answer when the caller's owner is to take a
 * fresh hold from the backend. */
#define DLOCK__OWNER_FRESH 1
/* dlock__owner_settle_step()'s answer when a suspension is to be waited
 * out first. */
#define DLOCK__OWNER_WAIT 2
/* dlock__owner_settle_step()'s answer, when it may not block, for a hold
 * found lost: clearing it would release it on the server. */
#define DLOCK__OWNER_WOULD_BLOCK 3

/* How many holds the calling thread's table keeps, stale ones included
 * until they are swept: for the tests. */
unsigned dlock__owner_thread_count(void);
/* The hold the caller's owner has through lock, referenced, or NULL (also
 * when the owner's hold has other permits than the handle asks for). */
dlock__hold *dlock__owner_find(const dlock_lock *lock);
/*
 * What an acquire through lock comes to for the caller's owner: a
 * re-entry of its hold (counted again without I/O, after waiting out a
 * suspension within deadline_us: DLOCK_OK, or DLOCK_ELOST for a hold found
 * lost, now cleared), a refusal (DLOCK_EINVAL for a hold with other
 * permits, DLOCK_EDEADLK for an upgrade of its READ hold), or
 * DLOCK__OWNER_FRESH: take a fresh hold, a downgrade of *ret_downgrade
 * (its write-class hold, referenced) when that is not NULL.
 */
int dlock__owner_settle(dlock_lock *lock, int64_t deadline_us, dlock__hold **ret_downgrade);
/* The same for a step that may not sleep: a suspension to wait out is
 * DLOCK__OWNER_WAIT, with *ret_turn to sleep on waiter (registered on
 * lock by the caller) before the next step asks again.  A re-entry is
 * counted only if count; otherwise DLOCK_OK says the hold is HELD.  Unless
 * may_block, a hold found lost is left as it is: DLOCK__OWNER_WOULD_BLOCK. */
int dlock__owner_settle_step(dlock_lock *lock, int64_t deadline_us, dlock__waiter *waiter,
                             bool count, bool may_block, dlock__turn *ret_turn,
                             dlock__hold **ret_downgrade);
/* Record a granted hold, counted once through lock, in the client and
 * where its owner finds it: its thread's table, or its handle (replacing a
 * lost one, whose loss the next release reports). */
void dlock__owner_install(dlock__hold *hold, dlock_lock *lock);
/*
 * dlock_release() for the caller's owner: one count less through lock;
 * the last count, or any release of a lost hold (DLOCK_ELOST, whatever its
 * count), ends it, forgets it and releases it on the server.
 * DLOCK_ENOTHELD when the owner has no hold.
 */
int dlock__owner_release(dlock_lock *lock);
/* Remove every count lock contributed to hold; forget and release the
 * hold if none remain (or if lock is its owning handle). */
void dlock__owner_drop(dlock__hold *hold, dlock_lock *lock);
/* "EXCLUSIVE", "READ" or "WRITE", for messages. */
const char *dlock__mode_name(dlock__mode mode);

/* ---- holds (hold.c, which alone knows a hold's phases and counts) ---- */

/* dlock__hold_reenter()'s answers beyond a status code, besides
 * DLOCK__HOLD_ENDED (recipe.h: it had ended meanwhile, take a fresh one): */
#define DLOCK__HOLD_CLEARED 2 /* it was lost and is ended now: the owner
                               * forgets and releases it, then reports
                               * DLOCK_ELOST */
#define DLOCK__HOLD_WAIT 3    /* it is suspended: wait on a waiter */
#define DLOCK__HOLD_LEFT_LOST 4 /* it was lost, and is left so: clearing
                                 * it would release it on the server */

/* A hold for the caller of an acquire through lock, ACQUIRING, count 0. */
dlock__hold *dlock__hold_new(dlock_client *client, dlock_lock *lock);
/* Whether a reference to the hold is stale: it has ended, or it is not
 * client's (a freed client's, at the same address). */
bool dlock__hold_stale(dlock__hold *hold, const dlock_client *client);
/* Whether it has ended (or its client has been freed): a stale reference
 * whatever the client. */
bool dlock__hold_ended(dlock__hold *hold);
/* Whether it is HELD or SUSPENDED, after the clock's look at its bound. */
bool dlock__hold_live(dlock__hold *hold);
/* Mark hold, a READ hold about to be acquired, as a downgrade of write (a
 * write-class hold of the same owner and resource), for the backend
 * (dlock__hold_downgrade_of()), and pin write: its release waits until
 * the mark is cleared (write NULL) once the acquire returns.  False,
 * marking nothing, if write is no longer live: no downgrade then. */
bool dlock__hold_set_downgrade(dlock__hold *hold, dlock__hold *write);
/* A granted hold: counted once through lock, HELD, and in the client's
 * registry.  Its owner places it, then dlock__hold_tell_grant() tells the
 * handle of the grant and of what the backend reported before it. */
void dlock__hold_grant(dlock__hold *hold, dlock_lock *lock);
void dlock__hold_tell_grant(dlock__hold *hold);
/* One more count of hold through lock if it is HELD (after the clock's
 * look at its bound): a second grant to the same owner joins it.  False,
 * counting nothing, otherwise. */
bool dlock__hold_join(dlock__hold *hold, dlock_lock *lock);
/* One more count of hold through lock if it is HELD or SUSPENDED (a
 * re-entry confirmed earlier, counted when it is delivered).  False,
 * counting nothing, otherwise. */
bool dlock__hold_count_up_live(dlock__hold *hold, dlock_lock *lock);
/* A handle's older hold replaced by a fresh grant: ended here (its loss
 * told, if not yet), no longer the handle's; true if it was still owed a
 * release (the handle owes DLOCK_ELOST for it, and the caller forgets and
 * releases it), false if it had ended already (its ender does that). */
bool dlock__hold_supersede(dlock__hold *old);
/* An ended hold leaves the client's registry; the handle owning it
 * (DLOCK_OWNER_HANDLE), or NULL. */
dlock_lock *dlock__hold_unregister(dlock__hold *hold);
/* End an ended hold on the server (the backend's release), once its
 * abandon and downgrades are settled; the backend's result. */
int dlock__hold_release(dlock__hold *hold);
/* A grant that is not installed: end it and release it on the server. */
void dlock__hold_discard(dlock__hold *hold);
/*
 * The owner already has the hold: count it again through lock (count), or
 * only see it confirmed, without I/O -- or wait out a suspension within
 * deadline_us on waiter, which the caller has registered on lock so that
 * cancel reaches it; with no waiter, DLOCK__HOLD_WAIT asks for one.
 * DLOCK_OK, an error, DLOCK__HOLD_ENDED, DLOCK__HOLD_CLEARED or
 * DLOCK__HOLD_WAIT.
 */
int dlock__hold_reenter(dlock__hold *hold, dlock_lock *lock, dlock__waiter *waiter,
                        int64_t deadline_us, bool count);
/*
 * The same for a step that may not sleep (an asynchronous acquire): with
 * the hold suspended, waiter (registered on lock by the caller) joins the
 * hold's waiters and DLOCK__HOLD_WAIT asks for *ret_turn, after which the
 * caller steps again; any other answer takes the waiter off.  A cancel of
 * the waiter or the deadline ends the wait with DLOCK_ECANCELED or
 * DLOCK_ETIMEDOUT.  Unless may_block, a lost hold is not ended:
 * DLOCK__HOLD_LEFT_LOST.
 */
int dlock__hold_reenter_step(dlock__hold *hold, dlock_lock *lock, dlock__waiter *waiter,
                             int64_t deadline_us, bool count, bool may_block,
                             dlock__turn *ret_turn);
/*
 * dlock_release() on the owner's hold: one count less through lock; the
 * last count, or any release of a lost hold (DLOCK_ELOST, whatever its
 * count), ends it (*ret_last: the owner then forgets it and releases it on
 * the server).  DLOCK_ENOTHELD when it has ended already.
 */
int dlock__hold_count_down(dlock__hold *hold, dlock_lock *lock, bool *ret_last);
/* Remove every count lock contributed; end the hold if none remain (or if
 * lock is its owning handle): true if so, and it is owed a release. */
bool dlock__hold_drop_lock(dlock__hold *hold, dlock_lock *lock);
/* Its owner thread exits: end it if it owes a release and its client
 * still lets calls in; that client, entered (to leave after the release),
 * or NULL. */
dlock_client *dlock__hold_end_at_exit(dlock__hold *hold);
/* The caller's relation to the hold, for the local queries; the fencing
 * token into *ret_token (may be NULL) only while HELD or SUSPENDED. */
dlock_hold dlock__hold_state(dlock__hold *hold, uint64_t *ret_token);
/* Client teardown: release a hold whatever its count and detach it. */
void dlock__hold_teardown(dlock__hold *hold);

/* ---- locks ------------------------------------------------------------ */

dlock_lock *dlock__lock_ref(dlock_lock *lock);
/* The caller's owner's relation to the lock, from its hold alone. */
dlock_hold dlock__lock_caller_hold(const dlock_lock *lock);
void dlock__lock_unref(dlock_lock *lock);

/* Refuse changes of the options once an acquire has begun, after checking
 * them against the backend at the first (DLOCK_EINVAL with a message). */
int dlock__lock_freeze_options(dlock_lock *lock);
/* A failure rc reported by a wait that a cancel reached meanwhile: it is
 * DLOCK_ECANCELED, with rc's message kept after its own. */
int dlock__lock_canceled_failure(const dlock_lock *lock, int rc);

/* ---- calls without a waiting thread (async.c) -------------------------- */

/* Whether the handle has a call without a waiting thread whose done has
 * not started: a blocking acquire is refused meanwhile (DLOCK_EBUSY). */
bool dlock__op_pending(dlock_lock *lock);
/* The callback thread's DONE event: run done, unless a free claimed it. */
void dlock__op_deliver(dlock__op *op);
void dlock__op_unref(dlock__op *op);
/* dlock_lock_cancel(): the handle's call, if its done has not started,
 * gets DLOCK_ECANCELED, and a grant it got is released. */
void dlock__op_revoke(dlock_lock *lock);
/* The frees, once no step of the handle runs any more: wait until no
 * done of the handle runs on the callback thread (not from a callback);
 * then the done of the handle's call, if not started, runs here with
 * DLOCK_ECANCELED (a grant it got is released first).  The callback
 * thread starts no done of a handle being freed. */
void dlock__op_wait_delivered(dlock_lock *lock);
void dlock__op_claim(dlock_lock *lock);

/* ---- announcements (announce.c) -------------------------------------- */

/* Have the slot's backend announce (its optional announce op) that id
 * leads resource with token (id NULL: a resignation), on the client's
 * announcing thread, in the order asked: a campaign does not wait for the
 * server.  No-op for a backend without announcements. */
void dlock__announce_later(dlock_client *client, dlock__slot *slot, const char *resource,
                           const char *id, uint64_t token, int64_t ttl_ms);
/* Make the announcements still queued (each bounded by its backend's
 * timeouts) and join the thread; before the backends close. */
void dlock__announce_stop(dlock_client *client);

/* ---- callbacks -------------------------------------------------------- */

/* Queue a state change for lock's callback (if any) on the client's
 * callback thread, starting it if needed.  Called with hold->mu held. */
void dlock__callbacks_post(dlock_client *client, dlock_lock *lock, dlock_state state);
/* DLOCK_DELIVER_DISPATCH: drop lock's queued state and recipe events
 * (its handle is being freed); a queued done stays for the free to claim. */
void dlock__callbacks_drop(dlock_client *client, dlock_lock *lock);
/* Queue op's DONE event (taking the reference) behind the events queued
 * before it; the callback thread runs dlock__op_deliver(). */
void dlock__callbacks_post_done(dlock_client *client, dlock_lock *lock, dlock__op *op);
void dlock__callbacks_stop(dlock_client *client);
/* Whether the calling thread is the client's callback thread (running one
 * of its callbacks): what would wait for that thread must not run there. */
bool dlock__callbacks_on_thread(dlock_client *client);

#endif
