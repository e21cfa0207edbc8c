/*
 * The core's own structures: clients, lock handles, holds, the per-thread
 * reentrancy tables and the callback thread.  Private to src/common;
 * backends see holds only through backend.h.
 *
 * Lock order, outermost first:  hold->mu, then client->mu, then lock->mu,
 * then a waiter's mutex.  No I/O is done while holding any of them.
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
#include "parse.h"
#include "thread.h"

struct dlock__logger {
	GMutex mu;
	dlock_log_fn fn;
	void *user_data;
	dlock_log_level max_level;
};

/* One configured backend of a client. */
typedef struct dlock__slot {
	char *name;       /* "default" for a client built from a URI */
	char *redacted;   /* its URI without the password */
	const dlock__backend_ops *ops;
	dlock__backend *impl;
} dlock__slot;

/* A [route NAME] of a configuration file. */
typedef struct dlock__route {
	char *match;      /* glob */
	dlock__slot *slot;
} dlock__route;

typedef struct dlock__callbacks dlock__callbacks;

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
};

struct dlock_lock {
	gatomicrefcount ref;     /* the user's, plus one per queued callback event */
	dlock_client *client;    /* NULL once the client has been freed */
	char *resource;
	dlock__slot *slot;
	char *thread_key;        /* key of this lock's holds in per-thread tables */

	GMutex mu;               /* guards everything below */
	bool started;            /* an acquire has begun: options are frozen */
	bool freed;
	dlock_owner owner;
	int64_t ttl_ms;          /* 0: the backend's default */
	int watchdog;            /* -1: the backend's default */
	unsigned calls;          /* calls in flight on this handle (dlock__lock_enter) */
	GPtrArray *waiters;      /* dlock__waiter * of threads inside acquire */
	GCond idle;              /* signalled when calls drops to 0 while freed */
	dlock__hold *hold;       /* DLOCK_OWNER_HANDLE: the handle's hold, referenced */
	bool lost_pending;       /* DLOCK_OWNER_HANDLE: a lost hold was replaced by a fresh
	                          * grant; the next release returns DLOCK_ELOST for it */
	dlock_state_fn state_fn;
	void *state_user_data;
};

typedef enum hold_phase {
	HOLD_ACQUIRING,  /* the backend is taking it */
	HOLD_HELD,
	HOLD_SUSPENDED,
	HOLD_LOST,
	HOLD_RELEASED    /* released (or never granted): a stale reference */
} hold_phase;

typedef struct hold_via {
	dlock_lock *lock;
	unsigned count;
} hold_via;

struct dlock__hold {
	gatomicrefcount ref;
	GMutex mu;               /* guards the fields below the line */
	/* fixed at creation */
	dlock__slot *slot;
	char *resource;
	dlock__holder holder;
	int64_t ttl_ms;
	bool watchdog;
	/* ---- */
	dlock_client *client;    /* NULL once the client has been freed */
	hold_phase phase;
	unsigned count;          /* reentrancy count, the sum of via[].count */
	GArray *via;             /* of hold_via: which handles the counts came through */
	GPtrArray *waiters;      /* dlock__waiter * re-entering while suspended */
	uint64_t token;
	_Atomic int64_t valid_until_us; /* not under mu: dlock__hold_set_valid_until() */
	void *backend_data;
	dlock_lock *handle_owner; /* DLOCK_OWNER_HANDLE: the owning handle, else NULL */
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

/* ---- holds ------------------------------------------------------------ */

dlock__hold *dlock__hold_new(dlock_client *client, dlock_lock *lock);
/*
 * End a hold locally: HOLD_RELEASED, no count left, and every re-entrant
 * acquire waiting out its suspension woken (it then sees the hold gone and
 * asks the server afresh).  Every path that ends a hold goes through here:
 * a hold that leaves HELD or SUSPENDED without waking them would leave
 * them asleep until their deadline.  Called with hold->mu held.
 */
void dlock__hold_end_locked(dlock__hold *hold);
/* The hold the caller's owner has through lock, referenced, or NULL. */
dlock__hold *dlock__hold_find(const dlock_lock *lock);
/*
 * A HELD or SUSPENDED hold whose backend bound (valid_until_us) has passed
 * becomes LOST now, reported as the backend's own LOST report would be
 * (once).  Every local look at a hold's phase goes through here first, so
 * that no caller sees a hold as its own past that bound.  Called with
 * hold->mu held.
 */
void dlock__hold_check_expiry_locked(dlock__hold *hold);
/* Record a granted hold in the client and in its owner's table. */
void dlock__hold_install(dlock__hold *hold, dlock_lock *lock);
/* Take the hold out of the client's registry and, if the caller is its
 * owner, out of the owner's table; then end it on the server.  The hold
 * must already be HOLD_RELEASED.  Returns the backend's release result. */
int dlock__hold_finish(dlock__hold *hold, dlock_lock *lock, bool by_owner);
/* Remove every count lock contributed; release the hold if none remain. */
void dlock__hold_drop_lock(dlock__hold *hold, dlock_lock *lock);
/* Client teardown: release a hold whatever its count and detach it. */
void dlock__hold_teardown(dlock__hold *hold);

/* ---- waiters ---------------------------------------------------------- */

void dlock__waiter_cancel(dlock__waiter *waiter);

/* ---- locks ------------------------------------------------------------ */

dlock_lock *dlock__lock_ref(dlock_lock *lock);
/* Check a public call's lock argument, count the call on the handle (which
 * dlock_lock_free() waits for; DLOCK_ECANCELED once the free has begun)
 * and enter its client.  Then leave with dlock__lock_leave(). */
int dlock__lock_enter(dlock_lock *lock, const char *what);
void dlock__lock_leave(dlock_lock *lock);
/* The caller's owner's relation to the lock, from its hold alone. */
dlock_hold dlock__lock_caller_hold(const dlock_lock *lock);
void dlock__lock_unref(dlock_lock *lock);

/* ---- callbacks -------------------------------------------------------- */

/* Queue a state change for lock's callback (if any) on the client's
 * callback thread, starting it if needed.  Called with hold->mu held. */
void dlock__callbacks_post(dlock_client *client, dlock_lock *lock, dlock_state state);
void dlock__callbacks_stop(dlock_client *client);

/* ---- logging ---------------------------------------------------------- */

void dlock__logger_init(dlock__logger *logger);
void dlock__logger_clear(dlock__logger *logger);

/* ---- backends (src/backends.c) ---------------------------------------- */

/* The ops table for a URI scheme, or NULL. */
const dlock__backend_ops *dlock__backend_for_scheme(const char *scheme);
/* The known schemes, for messages: "redis, redis+unix, ...". */
const char *dlock__backend_schemes(void);
/* The specification used when none is given and $DLOCK_CONFIG is unset. */
#define DLOCK__DEFAULT_SPEC "file://"

#endif
