/*
 * The core's own structures: clients, lock handles, holds, the per-thread
 * reentrancy tables and the callback thread.  Private to src/common;
 * backends see holds only through backend.h.
 *
 * Lock order, outermost first:  an election's turn, then its mu
 * (src/recipes/election.c), then hold->mu, then client->mu, then lock->mu, then a
 * waiter's mutex; the announcing thread's queue mutex (announce.c) is
 * taken under any of them and nothing under it.  No I/O is done while
 * holding any of them but the turn, which a resignation keeps across its
 * release.
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
typedef struct dlock__announcer dlock__announcer;
typedef struct dlock__recipe_ops dlock__recipe_ops;

struct dlock_client {
	pid_t pid;               /* the process that built it; calls elsewhere are refused */
	dlock__logger logger;
	GPtrArray *slots;        /* of dlock__slot *, in configuration order */
	GPtrArray *routes;       /* of dlock__route *, tried in order */
	dlock__slot *default_slot;
	int64_t default_wait_ms; /* [defaults] wait, -1 when not configured */

	GMutex mu;
	GCond idle;              /* signalled when active drops to 0 */
	bool closing;            /* dlock_client_free() has begun */
	unsigned active;         /* calls in flight (dlock__client_enter) */
	GHashTable *holds;       /* set of live dlock__hold * (one reference each) */
	GHashTable *locks;       /* set of dlock_lock * not yet freed */
	dlock__lazy_thread callbacks; /* dlock__callbacks *; later events are dropped once stopped */
	dlock__lazy_thread announcer; /* dlock__announcer *: leaders' announcements */
};

struct dlock_lock {
	gatomicrefcount ref;     /* the user's, plus one per queued callback event */
	dlock_client *client;    /* NULL once the client has been freed */
	char *resource;
	dlock__slot *slot;
	char *thread_key;        /* key of this lock's EXCLUSIVE and WRITE holds in
	                          * per-thread tables */
	char *read_key;          /* and of its READ holds */

	GMutex mu;               /* guards everything below */
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
	GCond idle;              /* signalled when calls drops to 0 while freed */
	dlock__hold *hold;       /* DLOCK_OWNER_HANDLE: the handle's hold, referenced */
	bool lost_pending;       /* DLOCK_OWNER_HANDLE: a lost hold was replaced by a fresh
	                          * grant; the next release returns DLOCK_ELOST for it */
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

/* Refuse calls in a forked child (DLOCK_ECANCELED) and count calls in
 * flight so that dlock_client_free() can wait for them. */
int dlock__client_enter(dlock_client *client);
/* The slot of a configured backend by name, or NULL. */
dlock__slot *dlock__client_slot(const dlock_client *client, const char *name);
/* The slot a resource is routed to (first matching route, else the default). */
dlock__slot *dlock__client_route(const dlock_client *client, const char *resource);
void dlock__client_leave(dlock_client *client);
bool dlock__client_forked(const dlock_client *client);

/* ---- holds (hold.c, which alone knows a hold's phases and counts) ---- */

/* A hold for the caller of an acquire through lock, ACQUIRING, count 0. */
dlock__hold *dlock__hold_new(dlock_client *client, dlock_lock *lock);
/* The hold the caller's owner has through lock, referenced, or NULL. */
dlock__hold *dlock__hold_find(const dlock_lock *lock);
/*
 * For a thread-owned handle, the caller's live (held or suspended) hold of
 * the other class on the same resource -- READ for an EXCLUSIVE or WRITE
 * handle, EXCLUSIVE or WRITE for a READ handle -- referenced, or NULL: an
 * upgrade to refuse or a downgrade to make.
 */
dlock__hold *dlock__hold_find_other(const dlock_lock *lock);
/* Mark hold, a READ hold about to be acquired, as a downgrade of write (a
 * write-class hold of the same owner and resource), for the backend
 * (dlock__hold_downgrade_of()), and pin write: its release waits until
 * the mark is cleared (write NULL) once the acquire returns.  False,
 * marking nothing, if write is no longer live: no downgrade then. */
bool dlock__hold_set_downgrade(dlock__hold *hold, dlock__hold *write);
/* Record a granted hold, counted once through lock, in the client and in
 * its owner's table (or on its handle, replacing a lost one). */
void dlock__hold_install(dlock__hold *hold, dlock_lock *lock);
/* A grant that is not installed: end it and release it on the server. */
void dlock__hold_discard(dlock__hold *hold);
/*
 * The owner already has the hold: count it again through lock without
 * I/O, wait out a suspension within deadline_us (the waiter registered on
 * lock, so cancel reaches it), or clear a lost hold and return DLOCK_ELOST.
 * Returns 1 when the hold turned out to have ended meanwhile (released by
 * teardown): the caller then takes a fresh one.
 */
int dlock__hold_reenter(dlock__hold *hold, dlock_lock *lock, int64_t deadline_us);
/* The same without counting the hold again: DLOCK_OK once it is HELD (at
 * once, or after a suspension), DLOCK_ELOST (cleared), 1 if it ended. */
int dlock__hold_confirm(dlock__hold *hold, dlock_lock *lock, int64_t deadline_us);
/*
 * dlock_release() on the owner's hold: one count less through lock; the
 * last count, or any release of a lost hold (DLOCK_ELOST, whatever its
 * count), ends it and releases it on the server.  DLOCK_ENOTHELD when it
 * has ended already.
 */
int dlock__hold_count_down(dlock__hold *hold, dlock_lock *lock);
/* Remove every count lock contributed; release the hold if none remain
 * (or if lock is its owning handle). */
void dlock__hold_drop_lock(dlock__hold *hold, dlock_lock *lock);
/* The caller's relation to the hold, for the local queries; the fencing
 * token into *ret_token (may be NULL) only while HELD or SUSPENDED. */
dlock_hold dlock__hold_state(dlock__hold *hold, uint64_t *ret_token);
/* Client teardown: release a hold whatever its count and detach it. */
void dlock__hold_teardown(dlock__hold *hold);

/* ---- locks ------------------------------------------------------------ */

dlock_lock *dlock__lock_ref(dlock_lock *lock);
/* Register a waiter of a thread inside acquire on the handle, so that
 * cancel and free reach it (canceled at once if the free has begun). */
void dlock__lock_add_waiter(dlock_lock *lock, dlock__waiter *waiter);
void dlock__lock_remove_waiter(dlock_lock *lock, dlock__waiter *waiter);
/* Cancel the handle's waiters, and every waiter registered from now on,
 * while its calls are still let in: an election about to be freed. */
void dlock__lock_cancel_all(dlock_lock *lock);
/* Check a public call's lock argument, count the call on the handle (which
 * dlock_lock_free() waits for; DLOCK_ECANCELED once the free has begun)
 * and enter its client.  Then leave with dlock__lock_leave(). */
int dlock__lock_enter(dlock_lock *lock, const char *what);
void dlock__lock_leave(dlock_lock *lock);
/* The caller's owner's relation to the lock, from its hold alone. */
dlock_hold dlock__lock_caller_hold(const dlock_lock *lock);
void dlock__lock_unref(dlock_lock *lock);

/* ---- recipes on a lock handle (src/recipes) --------------------------- */

/* What happened to a recipe's handle, as the callback thread tells it. */
typedef enum dlock__event_kind {
	DLOCK__EVENT_STATE,  /* a state of its hold: code is a dlock_state */
	DLOCK__EVENT_GRANT,  /* a grant of its hold: posted by hold.c once the grant
	                      * is installed, or earlier if a state of the hold or
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
/* The same for any event of a recipe's handle, with a text that is
 * copied (NULL: none). */
void dlock__callbacks_post_event(dlock_client *client, dlock_lock *lock, dlock__event_kind kind,
                                 int code, const char *text);
void dlock__callbacks_stop(dlock_client *client);
/* Whether the calling thread is the client's callback thread (running one
 * of its callbacks): what would wait for that thread must not run there. */
bool dlock__callbacks_on_thread(dlock_client *client);
/* Wait until every event queued so far has been run (or dropped) by the
 * callback thread; at once if nothing was ever queued or when called on
 * that thread itself. */
void dlock__callbacks_flush(dlock_client *client);

#endif
