/* SPDX-License-Identifier: MIT */
/*
 * The seam between the backend-agnostic core and each backend.
 *
 * A backend (src/redis, src/zk, src/file) is one folder that fills in one
 * dlock__backend_ops table; src/backends.c maps URI schemes to those
 * tables, and that line is the only place outside the folder that names
 * it.
 *
 * What a backend must provide (the table below):
 *   - its type name and capabilities (DLOCK__CAP_*: lease, shared holds,
 *     permits) -- the core refuses, before any I/O, a mode or permit
 *     count the backend did not declare;
 *   - its option rows (parse.h): name, kind, default, where the value is
 *     stored in its own settings struct; the core parses and checks URI
 *     query parameters and configuration keys against them;
 *   - open and close, acquire and release of one hold, a query of who
 *     holds a resource; optionally abandon (a hold lost by the core's
 *     clock), check_resource and describe.
 *
 * What the core does for it: clients, handles, owners (threads or
 * handles), reentrancy counted locally, the hold state machine (held,
 * suspended, lost, released) with the user callbacks on their own thread,
 * deadlines and cancel (waiters), teardown, fork detection, and the
 * holder record that goes with every hold.  A backend owns its
 * connections, its threads and the server-side state of each hold, and
 * tells the core about state changes with dlock__hold_report().
 *
 * What it gets for free from src/kit (the kit, listed at the end of
 * this file): the lease deadline, the wake table, the deferred-cleanup
 * queue, lazily started library threads, name resolution within a
 * deadline, the clocks, and the common wording of busy, timed-out and
 * canceled acquires.
 */
#ifndef DLOCK_COMMON_BACKEND_H
#define DLOCK_COMMON_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "dlock.h"
#include "log.h"
#include "parse.h"
#include "waiter.h"

/* A backend's state as the core holds it: opaque, never defined.  Each
 * backend's own struct (redis_backend, redlock_backend, zk_backend,
 * file_backend) is handed out as one by open, and its ops convert it
 * back. */
typedef struct dlock__backend dlock__backend;
typedef struct dlock__hold dlock__hold;

/* What a backend learns about the server-side state of a resource, for
 * dlock_lock_query().  Strings are owned by the struct (g_free). */
typedef struct dlock__server_info {
	bool locked;
	char *holder_raw;       /* the value as stored (a dlock token or a peer's value) */
	int64_t expires_in_ms;  /* -1 when the backend has no lease or the key has no expiry */
	uint64_t fencing_token; /* the counter's value; 0 when none */
	bool shared;            /* held by READ holds: readers lists them, holder_raw is unused */
	GPtrArray *readers;     /* char *, each reader's record as stored; NULL when none */
	GArray *masters;        /* dlock__master_view, a Redlock's masters; NULL otherwise */
	uint32_t permits;       /* a semaphore's N as stored, 0 when none: its permits'
	                         * holders are then listed as readers, shared
	                         * (docs/recipes.md, "Semaphores") */
	char *master;           /* "host:port" of the master that answered, where the
	                         * backend finds it (Sentinel); else NULL */
	char *service;          /* Sentinel's name of the master; else NULL */
} dlock__server_info;

/* One master of a Redlock as it answered a query (strings g_free'd with
 * the array's clear function, dlock__master_view_clear). */
typedef struct dlock__master_view {
	char *address;          /* "host:port" */
	bool reachable;
	char *holder_raw;       /* the key's value; NULL when missing or unreachable */
	int64_t expires_in_ms;  /* -1 none */
	uint64_t fencing_token; /* 0 none */
} dlock__master_view;

void dlock__master_view_clear(gpointer view);

/* What the core hands a backend when opening it. */
typedef struct dlock__backend_env {
	const dlock__logger *logger; /* for dlock__log(); lives as long as the client */
	const char *name;            /* the backend's name in the client ("default") */
} dlock__backend_env;

/*
 * What a backend is, as flags on its operations table (caps).  The core
 * reads them instead of asking the backend to fake what it does not have.
 */
enum {
	/* Holds are leases with a TTL that the backend renews (the watchdog):
	 * the core gives each hold a TTL and a watchdog setting, by default
	 * the backend's "ttl" and "watchdog" options.  Without it a hold has
	 * neither (dlock__hold_ttl_ms() 0, dlock__hold_watchdog() false). */
	DLOCK__CAP_LEASE = 1u << 0,
	/* READ (shared) holds, besides EXCLUSIVE ones (docs/recipes.md,
	 * "Read-write locks"). */
	DLOCK__CAP_SHARED = 1u << 1,
	/* Holds of a resource with more than one permit (docs/recipes.md,
	 * "Semaphores"). */
	DLOCK__CAP_PERMITS = 1u << 2,
	/* An election's hold stores the participant id alone, as peers'
	 * participants do (ZooKeeper: Curator's LeaderSelector), so a holder
	 * that is not a dlock record names a leader by its raw value.
	 * Without it, such a holder is a peer's lock and names no leader. */
	DLOCK__CAP_BARE_IDS = 1u << 3,
};

/*
 * The functions a backend provides, as types, so that a backend declares
 * its own with them ("dlock__backend_acquire_fn dlock__redis_acquire;")
 * and the compiler holds every definition to the seam.
 */

/*
 * Check the URI parts and options and build the backend.  No I/O:
 * servers are contacted on first use.  opts->values is the settings
 * struct, filled in from the defaults, the URI and the configuration
 * file (dlock__options_given() tells which were explicit); it is
 * freed after open returns.  DLOCK_ECONFIG with a message for
 * anything the backend cannot use.
 */
typedef int dlock__backend_open_fn(const dlock__backend_env *env, const dlock__uri *uri,
                                   const dlock__options *opts, dlock__backend **ret);

/*
 * Stop the backend's threads and free it.  The core has already
 * released every hold (release) and canceled every waiter.  Pending
 * background cleanup gets a bounded last attempt.
 */
typedef void dlock__backend_close_fn(dlock__backend *backend);

/*
 * Take the lock on the server for a new hold.  hold gives the resource,
 * mode and permit count (dlock__hold_mode(), dlock__hold_permits()),
 * TTL and watchdog setting (a mode or permit count that caps does not
 * cover has been refused by the core); on success the backend stores its
 * server-side state with dlock__hold_set_backend_data(), sets the fencing
 * token with dlock__hold_set_token(), and starts whatever keeps the hold
 * alive.  wait_ms follows dlock_acquire(); deadline_us is the absolute
 * monotonic deadline (INT64_MAX for none, and for wait_ms 0: one try
 * bounded by the backend's own timeouts).  The backend sleeps only
 * through dlock__waiter_sleep(), so cancel wakes it.  On any failure it
 * leaves nothing on the server (or arranges its removal).
 * Returns DLOCK_OK, EBUSY, ETIMEDOUT, ECANCELED, EUNAVAILABLE, EBACKEND,
 * and for a downgrade ELOST when the write hold has ended on the server.
 */
typedef int dlock__backend_acquire_fn(dlock__backend *backend, dlock__hold *hold,
                                      dlock__waiter *waiter, int64_t wait_ms,
                                      int64_t deadline_us);

/*
 * The same acquire as a machine that goes in steps, which the core drives
 * either by sleeping on the waiter between steps (dlock_acquire()) or by
 * running the steps from the stepper (kit/stepper.h), with no thread
 * sleeping between them (the asynchronous acquire).  A backend provides
 * these three or acquire above.
 *
 * begin checks and builds the machine (no I/O): DLOCK_OK with
 * *ret_machine set, or a final result with *ret_machine NULL.  Each step
 * reads dlock__waiter_seq() before it tries, as the loop in waiter.h does,
 * and returns a final result (DLOCK_OK, or a failure as acquire returns
 * it), or DLOCK__STEP_WAIT with *ret_turn saying until when to sleep
 * unless woken (dlock__waiter_turn_begin()); the next step then begins
 * with dlock__waiter_turn_end() (dlock__wait in waiter.h keeps both
 * halves for a machine).  A step does I/O only bounded by the
 * deadline and the backend's timeouts, with its socket registered on the
 * waiter (a cancel ends it at once); a step that finds the waiter canceled
 * or the deadline passed does none: it gives up, and leaves what must be
 * removed on the server to a background cleanup.  end frees the machine,
 * after a final result only.
 *
 * flags: DLOCK__ACQUIRE_ASYNC -- no thread sleeps between the steps, so a
 * step may not sleep in a wait of its own (the file backend's futex) and
 * waits only by returning DLOCK__STEP_WAIT.  Without it, the caller's
 * thread runs every step, and a step may sleep in such a wait itself.
 */
enum {
	DLOCK__ACQUIRE_ASYNC = 1u << 0,
};

typedef int dlock__backend_acquire_begin_fn(dlock__backend *backend, dlock__hold *hold,
                                            dlock__waiter *waiter, int64_t wait_ms,
                                            int64_t deadline_us, unsigned flags,
                                            void **ret_machine);
typedef int dlock__backend_acquire_step_fn(dlock__backend *backend, void *machine,
                                           dlock__turn *ret_turn);
typedef void dlock__backend_acquire_end_fn(dlock__backend *backend, void *machine);

/*
 * End a hold on the server: stop keeping it alive and remove it.
 * Called once per successful acquire, whatever the hold's state.  If
 * the server cannot be reached it returns DLOCK_OK and keeps trying in
 * the background; DLOCK_ELOST if the server shows another owner (the
 * hold had already ended there).  Never blocks past the command
 * timeout.  Frees the backend data of the hold.
 */
typedef int dlock__backend_release_fn(dlock__backend *backend, dlock__hold *hold);

/*
 * The core has declared a hold LOST by the clock: past the bound the
 * backend gave it (dlock__hold_set_valid_until()), before the backend's
 * own timer said so -- a process resumed after a pause runs the caller's
 * thread first.  The backend may not have seen any failure: its renewal or
 * keep-alive may still succeed, and would keep the lock for a holder told
 * it lost it, and from everyone else until that holder releases.  So it
 * stops keeping the hold alive and removes what may be left of it on the
 * server in the background, as a release that cannot reach the server
 * does (and as it does itself for a loss it declares, if something of the
 * hold may outlive it there: a renewal that ran without its answer).
 * Called at most once per hold, before its release (which then has
 * nothing left to remove and returns DLOCK_ELOST), never at the same time
 * as it, with no lock of the core held, on whatever thread looked at the
 * hold: no I/O, no waiting on the server.  NULL: the backend sets no
 * bound, or nothing of a hold outlives the loss.
 */
typedef void dlock__backend_abandon_fn(dlock__backend *backend, dlock__hold *hold);

/* Refuse, with DLOCK_EINVAL and a message, a resource name this
 * backend cannot represent (beyond the common rules). */
typedef int dlock__backend_check_resource_fn(const dlock__backend *backend,
                                             const char *resource);

/* Ask the server who holds resource.  One round trip. */
typedef int dlock__backend_query_fn(dlock__backend *backend, const char *resource,
                                    int64_t deadline_us, dlock__server_info *ret);

/* The backend's URI as users should see it, when it differs from the
 * one given (a default filled in); g_free. */
typedef char *dlock__backend_describe_fn(const dlock__backend *backend);

/*
 * Watching who holds a resource, for leader elections' observers
 * (docs/recipes.md, "Leader election").  watch arms the backend's
 * notification -- a ZooKeeper watch, a channel subscription, an inotify
 * watch -- so that a change of the resource's holder after it returns wakes
 * waiter (dlock__waiter_wake()); the caller then queries and sleeps on the
 * waiter, and calls watch again with the same *watch before its next query,
 * to re-arm what a wake used up (a one-shot ZooKeeper watch; a session that
 * ended).  *watch is NULL the first time; unwatch ends it.  A spurious wake
 * is harmless; a missed change is not.  DLOCK_OK, or a failure code: the
 * core then looks again after a backoff (and passes *watch as it was).  The
 * core also looks again when a lease it saw ends, so a leader that dies
 * without a word is noticed.
 */
typedef int dlock__backend_watch_fn(dlock__backend *backend, const char *resource,
                                    dlock__waiter *waiter, void **watch);
typedef void dlock__backend_unwatch_fn(dlock__backend *backend, void *watch);

/* Tell observers that participant id leads resource with token, under a
 * hold of ttl_ms (0 without a lease) -- or, with id NULL, that the leader
 * resigned -- where they would not notice otherwise (Redis: the elected
 * channel; a release that nobody waits for publishes nothing).  Best
 * effort, bounded by the backend's timeouts. */
typedef void dlock__backend_announce_fn(dlock__backend *backend, const char *resource,
                                        const char *id, uint64_t token, int64_t ttl_ms);

typedef struct dlock__backend_ops {
	const char *type;   /* "redis" */
	unsigned caps;      /* DLOCK__CAP_* bits */

	/*
	 * The options this backend takes, one row each (parse.h), ended by a
	 * row without a name, and the size of the settings struct the rows
	 * store into.  A lease backend has the rows DLOCK__OPTION_TTL and
	 * DLOCK__OPTION_WATCHDOG: the defaults of its holds.
	 */
	const dlock__option *options;
	size_t options_size;

	dlock__backend_open_fn *open;
	dlock__backend_close_fn *close;
	dlock__backend_acquire_fn *acquire;               /* NULL with the three below */
	dlock__backend_acquire_begin_fn *acquire_begin;   /* NULL with acquire */
	dlock__backend_acquire_step_fn *acquire_step;
	dlock__backend_acquire_end_fn *acquire_end;
	dlock__backend_release_fn *release;
	dlock__backend_abandon_fn *abandon;               /* may be NULL */
	dlock__backend_check_resource_fn *check_resource; /* may be NULL */
	dlock__backend_query_fn *query;
	dlock__backend_describe_fn *describe;             /* may be NULL */
	dlock__backend_watch_fn *watch;                   /* NULL: observers poll the lease */
	dlock__backend_unwatch_fn *unwatch;
	dlock__backend_announce_fn *announce;             /* may be NULL */
} dlock__backend_ops;

void dlock__server_info_clear(dlock__server_info *info);

/* ---- holds, as seen by a backend ------------------------------------- */

/* A hold's mode (docs/recipes.md, "Read-write locks"), numbered as the
 * public dlock_mode is.  READ and WRITE reach only a backend with
 * DLOCK__CAP_SHARED. */
typedef enum dlock__mode {
	DLOCK__MODE_EXCLUSIVE = 0,
	DLOCK__MODE_READ = 1,
	DLOCK__MODE_WRITE = 2,
} dlock__mode;

const char *dlock__hold_resource(const dlock__hold *hold);
dlock__mode dlock__hold_mode(const dlock__hold *hold);
/*
 * During the acquire of a READ hold: the same owner's EXCLUSIVE or WRITE
 * hold on the resource when this acquire is a downgrade (docs/recipes.md,
 * "Read-write locks"), else NULL.  The backend grants the read hold at
 * once, without queueing, and arranges that releasing the write hold keeps
 * it and lets no queued writer in between.  Borrowed, valid until the
 * acquire returns, and so is its backend data: the write hold was live when
 * the acquire began, and its release (another thread freeing its handle)
 * waits until the acquire returns.  It may still end on the server
 * meanwhile.
 */
dlock__hold *dlock__hold_downgrade_of(const dlock__hold *hold);
/* The resource's number of permits (docs/recipes.md, "Semaphores"): 1 for
 * a lock; more only on a backend with DLOCK__CAP_PERMITS. */
uint32_t dlock__hold_permits(const dlock__hold *hold);
int64_t dlock__hold_ttl_ms(const dlock__hold *hold);
bool dlock__hold_watchdog(const dlock__hold *hold);
/* The record of who acquires (this thread, now), for tokens and node data. */
const dlock__holder *dlock__hold_holder(const dlock__hold *hold);
/* A leader election's hold (docs/recipes.md, "Leader election"): the
 * participant's id, which the holder record carries (dlock__token_new()
 * writes it); NULL for a lock.
 * A backend whose peers expect the id alone (ZooKeeper's LeaderSelector
 * nodes) stores just that. */
const char *dlock__hold_participant(const dlock__hold *hold);

/* Store the backend's per-hold state (owned by the backend, which frees it
 * in release).  Set during acquire, read afterwards. */
void dlock__hold_set_backend_data(dlock__hold *hold, void *data);
void *dlock__hold_backend_data(const dlock__hold *hold);
void dlock__hold_set_token(dlock__hold *hold, uint64_t token);

/*
 * The latest time (CLOCK_BOOTTIME, microseconds) the backend can vouch for
 * the hold: a lease's end, a session's last contact plus its timeout, each
 * less the backend's safety margin.  Past it the core treats the hold as
 * LOST at once -- in dlock_held(), dlock_release() and a re-entry -- without
 * waiting for the backend's own timer, whose thread may run late (a process
 * resumed after a pause runs the caller's thread first), and tells the
 * backend through its abandon.  The backend moves it on every renewal or
 * contact; INT64_MAX (the default) means no bound.
 * An atomic store: safe from any thread, with any backend mutex held.
 */
void dlock__hold_set_valid_until(dlock__hold *hold, int64_t boot_us);

/* Keep a hold alive while a backend thread refers to it. */
dlock__hold *dlock__hold_ref(dlock__hold *hold);
void dlock__hold_unref(dlock__hold *hold);

/*
 * Report a state change noticed by the backend: DLOCK_STATE_SUSPENDED,
 * DLOCK_STATE_RECONNECTED or DLOCK_STATE_LOST.  Safe from any thread and
 * never blocks on I/O; the user callbacks run later on the callback thread.
 * A report that does not change anything (RECONNECTED when not suspended,
 * anything after LOST or after release) is ignored.
 */
void dlock__hold_report(dlock__hold *hold, dlock_state state);


/* ---- the table of backends (src/backends.c) --------------------------- */

/* The ops table for a URI scheme naming one server, or NULL. */
const dlock__backend_ops *dlock__backend_for_scheme(const char *scheme);
/* The ops table for a URI, by its scheme (and, for redis, how many hosts
 * it names), or NULL. */
const dlock__backend_ops *dlock__backend_for_uri(const dlock__uri *uri);
/* The known schemes, for messages: "redis, redis+unix, ...".  Caller
 * frees with g_free(). */
char *dlock__backend_schemes(void);
/* Whether any backend has an option of that name (a dlock__option_known_fn). */
bool dlock__backend_option_known(const char *name);
/* The scheme of the backend used when no specification is given and
 * $DLOCK_CONFIG is unset ("file": the specification "file://"). */
const char *dlock__backend_default_scheme(void);

/* ---- the kit: what a backend gets for free ---------------------------- */

/*
 * Written once in src/kit, for every backend that needs it:
 *   waiter.h     the sleep and wake of a thread inside acquire, with
 *                cancel and deadlines (included by this header).
 *   log.h        dlock__log(), to the client's log callback (included).
 *   lease.h      the deadline of a hold the server keeps only for a time:
 *                "last answered send + TTL - margin" on CLOCK_BOOTTIME,
 *                with the one safety margin (1% + 5 ms); pass it to
 *                dlock__hold_set_valid_until().
 *   waketable.h  key -> waiters (a file, a channel, a node path), with a
 *                per-key pointer for the backend's own state, under the
 *                backend's mutex: add and remove around a wait, wake a key
 *                when its event comes, wake all after a reconnect; the
 *                table says when a key is gone, so the backend can drop
 *                what it stood for.
 *   cleanup.h    a queue of deletes that could not be done at once,
 *                retried with backoff until done or until the lease or
 *                session that would end them has ended, with a last
 *                bounded try at close; the backend gives one attempt per
 *                kind of item and runs the queue on a thread it has.
 *   thread.h     dlock__lazy_thread: a named library thread (signals
 *                blocked, name length checked at compile time) started on
 *                first use under the backend's mutex, stopped and joined
 *                at close.
 *   resolve.h    host names to addresses within a deadline, cancelable.
 *   clock.h      the monotonic clock (deadlines), CLOCK_BOOTTIME (leases,
 *                sessions), the wall clock (holder records only).
 *   error.h      dlock__error() for a code with its message, and
 *                dlock__error_busy(), _timeout(), _canceled(), so every
 *                backend words those alike (dlock__waiter_turn() uses
 *                them for a wait loop's sleep).
 *   parse.h      option rows (DLOCK__OPTION_TTL, _WATCHDOG,
 *                _CONNECT_TIMEOUT for the rows backends share), URIs,
 *                holder records and owner tokens, dlock__secret_free().
 */

#endif
