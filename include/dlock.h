/*
 * dlock.h — distributed locks across machines, behind one API.
 *
 * This header is the whole public contract of libdlock.  It includes only
 * standard headers and has no configuration-dependent content.
 *
 * Conventions used throughout:
 *  - Functions return DLOCK_OK (0) or a negative code from enum dlock_code.
 *    On failure, dlock_last_error_message() gives this thread's detail.
 *  - Out-parameters named ret_* are written only on success.
 *  - Every string argument is copied before the call returns.
 *  - Destructors accept NULL and then do nothing.
 *  - Memory allocation failure aborts the process (the library is built on
 *    GLib, whose policy this is); no function returns an out-of-memory code.
 *  - The library never writes to stdout or stderr; it reports through the
 *    log callback a program installs with dlock_client_set_log_callback().
 *
 * Threads.  Each function's comment says which threads may call it, in
 * fixed words:
 *  - "Safe from any thread.": any thread may call it, at the same time as
 *    other threads make calls on other objects.
 *  - "Safe from any thread, also concurrently on the same handle." (or
 *    client, or info): and at the same time as other threads make calls on
 *    that same object.
 *  - "Not while ...": the calls it must not overlap; the program orders
 *    them (a dlock_client or dlock_lock is freed by one thread, after the
 *    others are done with it).
 *  - "From the callback thread: ...": what a state callback may do with it.
 * The library starts its own threads when first needed, with every signal
 * blocked, and dlock_client_free() joins them.  State callbacks
 * (dlock_state_fn) run on one of them, the client's "dlock-callback"
 * thread; log callbacks (dlock_log_fn) on whichever thread logs.  The
 * library's internal locks are never held while a state callback runs.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLOCK_BUILDING_LIBRARY) && defined(__GNUC__)
#define DLOCK_API __attribute__((visibility("default")))
#else
#define DLOCK_API
#endif

/* ------------------------------------------------------------------------
 * Versions
 * ------------------------------------------------------------------------ */

#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 1
#define DLOCK_VERSION_PATCH 0
#define DLOCK_VERSION_STRING "0.1.0"
/* One number that compares in release order: 0xMMmmpp. */
#define DLOCK_VERSION_NUMBER \
	((DLOCK_VERSION_MAJOR << 16) | (DLOCK_VERSION_MINOR << 8) | DLOCK_VERSION_PATCH)

/* The version of the library actually loaded, as "MAJOR.MINOR.PATCH".
 * Static text.  Safe from any thread. */
DLOCK_API const char *dlock_version(void);

/* ------------------------------------------------------------------------
 * Result codes.  New codes are only ever added at the end; none is removed
 * or renumbered.
 * ------------------------------------------------------------------------ */

typedef enum dlock_code {
	DLOCK_OK = 0,
	DLOCK_EINVAL = -1,       /* an argument is invalid (resource name, option, NULL) */
	DLOCK_EBUSY = -2,        /* try-lock (wait 0) found the lock held by another owner */
	DLOCK_ETIMEDOUT = -3,    /* the wait deadline passed before the lock was granted */
	DLOCK_ENOTHELD = -4,     /* release by an owner that does not hold the lock */
	DLOCK_ELOST = -5,        /* the hold ended without a release (lease expired, session lost) */
	DLOCK_EUNAVAILABLE = -6, /* the backend could not be reached within its timeouts */
	DLOCK_EBACKEND = -7,     /* the backend answered with an error */
	DLOCK_ECONFIG = -8,      /* the client specification or configuration is invalid */
	DLOCK_ECANCELED = -9     /* the wait was canceled, the client is being freed, or
	                          * the call was made in a child process after fork() */
} dlock_code;

/* Short static description of a code, e.g. "lock held by another owner".
 * Never NULL; an unknown code gives "unknown error".  Safe from any thread. */
DLOCK_API const char *dlock_strerror(int code);

/* The symbolic name of a code, e.g. "DLOCK_EBUSY".  Never NULL; an unknown
 * code gives "DLOCK_E?".  Safe from any thread. */
DLOCK_API const char *dlock_code_name(int code);

/* Detail of the calling thread's most recent failing dlock call, naming what
 * was wrong (for example "resource name: segment 2 is '..'").  "" if none.
 * Borrowed: valid until this thread's next failing dlock call.  Safe from
 * any thread: each thread has its own message. */
DLOCK_API const char *dlock_last_error_message(void);

/* ------------------------------------------------------------------------
 * Clients
 * ------------------------------------------------------------------------ */

typedef struct dlock_client dlock_client;
typedef struct dlock_lock dlock_lock;

/*
 * Build a client from a specification: a URI
 *   redis://[user:password@]host[:port][/db][?option=value&...]
 *   redis+unix:///path/to/socket[?option=value&...]
 *   zk://[user:password@]host[:port][,host[:port]...][/chroot][?option=value&...]
 *   file:///path/to/dir   (locks between processes of one host)
 * or the path of a configuration file (INI) with [defaults], [backend NAME]
 * and [route NAME] groups, which routes each resource name to one of
 * several backends (see the README).
 *
 * redis: one server (port 6379 unless given) and database db (0 unless
 * given); user:password authenticates (AUTH; a user without a password is
 * refused).
 * zk: the servers of one ensemble (port 2181 unless given), any of which
 * may serve the client's session.  /chroot, an absolute path that must
 * exist on the ensemble, becomes the root of every path the client uses.
 * user:password authenticates with ZooKeeper's digest scheme (the user
 * name may not contain ':'); the resource nodes and lock nodes the client
 * creates then get all rights for that identity and read rights for
 * everyone (peers and dlock status read a holder's data), so that other
 * identities can neither delete such a lock nor queue behind it; the nodes
 * above stay open.  Without credentials every node is open to everyone.
 * file: the lock directory, which must exist.
 * '/', '?' and '@' in a user name or password, and '@' in a path or an
 * option value, are percent-encoded (%2F, %3F, %40); an '@' after the
 * host list is refused.  No message shows a password.
 *
 * Options, as URI query parameters or as keys of a [backend NAME] group,
 * each given at most once.  Durations read "250ms", "10s", "2m", "1h"; a
 * bare number is seconds.  An option the backend does not take is refused.
 *   ttl              redis: the lease of each hold, renewed while held (see
 *                    watchdog).  Default 30s, from 100ms to 7 days ("168h").
 *                    A handle may set its own: dlock_lock_set_ttl().
 *   watchdog         redis: on (the default) renews the lease every ttl/3
 *                    while held; off lets it run out after ttl, which is
 *                    then reported as DLOCK_STATE_LOST.  Also true/false,
 *                    yes/no, 1/0.  A handle may set its own:
 *                    dlock_lock_set_watchdog().
 *   connect-timeout  redis, zk: how long connecting to a server may take
 *                    (zk: also how long a release or a status query waits
 *                    for its answer).  Default 5s, from 1ms to 1h.
 *   command-timeout  redis: how long one command may wait for its answer.
 *                    Default 3s, from 1ms to 1h.
 *   key-format       redis: braced (the default): the keys of resource R
 *                    are PREFIX{R}, PREFIX{R}:fence and PREFIX{R}:released;
 *                    plain: the lock key is R itself (R:fence,
 *                    R:released), so that dlock and the peers using a
 *                    SET NX PX lock on that key (redis-py's Lock and the
 *                    like) exclude each other; names ending in ":fence" or
 *                    ":released" are then refused.
 *   prefix           redis, key-format braced only: the PREFIX above,
 *                    without '{' or '}'.  Default "dlock:".
 *   session-timeout  zk: the session timeout asked of the ensemble, which
 *                    may grant another within its own bounds; a hold is
 *                    reported lost when the granted timeout passes without
 *                    contact.  Default 10s, from 1ms to 1h.
 *   root             zk: the node under which resource R's lock node
 *                    ROOT/R is kept.  Default "/dlock"; an absolute path
 *                    without a trailing '/' or an empty, "." or ".."
 *                    segment.
 *   dir              file: the lock directory, an absolute path (the same
 *                    as file:///path/to/dir; giving both is refused).
 *
 * spec NULL means the value of $DLOCK_CONFIG (an empty spec is refused);
 * without it, the file backend
 * in its default directory ($DLOCK_DIR, else /tmp/dlock-<uid>; created
 * mode 0700 if missing, refused unless it is the user's own and writable
 * by no one else), which needs no server.
 * No connection is made here: servers are contacted on first use, so a
 * client can be built before its servers are up.
 *
 * Returns DLOCK_OK and *ret_client (caller frees with dlock_client_free()),
 * DLOCK_EINVAL if ret_client is NULL, DLOCK_ECONFIG if the specification is
 * malformed, names an unknown scheme or option, or repeats an option, an
 * option's value is malformed or out of range, the lock directory is
 * unusable, or the configuration file cannot be read or has an unknown or
 * repeated group or key, a route naming no configured backend or one an
 * earlier route shadows (the message names the file, the group and the
 * key).
 * Safe from any thread.
 */
DLOCK_API int dlock_client_new(const char *spec, dlock_client **ret_client);

/*
 * Free a client: cancel every waiter (their dlock_acquire() returns
 * DLOCK_ECANCELED), release what is still held (each release bounded by
 * the command timeout), stop and join the library's threads, free memory.
 * Lock handles of this client must not be used afterwards, but must still
 * be freed with dlock_lock_free(), which then only frees memory.
 * State callbacks already queued run before it returns.
 * In a child process after fork() it touches nothing the parent owns (no
 * connection, key or thread; the parent's threads may have held its
 * mutexes): the memory is left to the child's exit or exec.  NULL is a no-op.
 * Safe from any thread.  Not while another call on the client or on one
 * of its handles is under way, except dlock_acquire(), dlock_release(),
 * dlock_lock_query() and dlock_lock_new(), which it cancels or waits for;
 * no call on the client or its handles may start once it has begun.  Not
 * from a log callback, and not from the callback thread, whose end it
 * waits for.
 */
DLOCK_API void dlock_client_free(dlock_client *client);

typedef enum dlock_log_level {
	DLOCK_LOG_ERROR = 0,
	DLOCK_LOG_WARNING = 1,
	DLOCK_LOG_INFO = 2,
	DLOCK_LOG_DEBUG = 3
} dlock_log_level;

/* Receives the library's log messages.  message is borrowed for the call.
 * Runs on whichever thread logs (a caller's thread or a library thread),
 * one call at a time per client, under a lock of the library's, so it must
 * be quick and must not call dlock functions. */
typedef void (*dlock_log_fn)(dlock_log_level level, const char *message, void *user_data);

/*
 * Route the client's log messages at max_level and below to fn; fn NULL
 * silences them (the default, with max_level DLOCK_LOG_WARNING).  Once it
 * returns, the previous function is not called again.  Returns DLOCK_OK,
 * DLOCK_EINVAL if client is NULL, DLOCK_ECANCELED after fork().
 * Safe from any thread, also concurrently on the same client.  Not from a
 * log callback (it would wait for itself).
 */
DLOCK_API int dlock_client_set_log_callback(dlock_client *client, dlock_log_level max_level,
                                            dlock_log_fn fn, void *user_data);

/* ------------------------------------------------------------------------
 * Locks
 * ------------------------------------------------------------------------ */

/*
 * Create a handle on a resource name.  A name is 1-255 bytes of UTF-8
 * without control characters, '{' or '}', or code points ZooKeeper refuses
 * (U+D800-F8FF, U+FFF0-FFFF, above U+FFFF); '/' separates segments, none of
 * which may be empty, "." or "..".  No I/O.
 *
 * Returns DLOCK_OK and *ret_lock (caller frees with dlock_lock_free()),
 * DLOCK_EINVAL for a NULL argument or an invalid name (the message says
 * which rule; a backend may refuse more: with key-format=plain a name
 * ending in ":fence" or ":released", on zk a segment that would read as a
 * lock node of its parent), DLOCK_ECANCELED after fork().
 * Safe from any thread, also concurrently on the same client.
 */
DLOCK_API int dlock_lock_new(dlock_client *client, const char *resource, dlock_lock **ret_lock);

/*
 * Free a handle.  Wakes its waiters with DLOCK_ECANCELED, waits for every
 * call on the handle already in flight in other threads to return, releases
 * every hold made through it (as dlock_release() would, whatever the
 * count), then frees it.  An acquire in flight returns either DLOCK_OK
 * (granted before the free began: that hold is then released by the free)
 * or DLOCK_ECANCELED with nothing held, a grant that lands during the free
 * being released at once.  Calls that reach the handle while the free is
 * under way fail with DLOCK_ECANCELED (dlock_held() and
 * dlock_fencing_token() give 0, dlock_lock_cancel() DLOCK_OK; the calls
 * named below must not overlap it); starting one after it has returned is
 * a use of freed memory, as with any freed object.  A state callback for
 * the handle that had already begun may still be running when it returns
 * (the handle stays valid for that call); none begins afterwards.  NULL is
 * a no-op.
 * Safe from any thread, once per handle.  Not while an option setter,
 * dlock_lock_set_state_callback(), dlock_lock_resource(),
 * dlock_lock_backend_name() or dlock_lock_backend_uri() is under way on
 * the handle (only the other calls are waited for), nor while
 * dlock_client_free() runs on its client.
 * From the callback thread: allowed, also for the handle whose callback is
 * running.
 */
DLOCK_API void dlock_lock_free(dlock_lock *lock);

/* Who owns a hold made through a handle. */
typedef enum dlock_owner {
	/* The calling thread (the default): a thread holding the resource
	 * through one handle holds it through every handle of the same client,
	 * and only that thread may release it.  A thread that exits holding
	 * it has it released by the library. */
	DLOCK_OWNER_THREAD = 0,
	/* The handle: any thread may acquire again or release through this
	 * handle.  For event loops and thread pools.  Threads that start a
	 * first acquire through the handle at the same time, while it holds
	 * nothing, contend on the server like separate owners. */
	DLOCK_OWNER_HANDLE = 1
} dlock_owner;

/*
 * Per-lock options.  Each must be set before the handle's first acquire
 * starts; afterwards it returns DLOCK_EINVAL and changes nothing.  Each
 * returns DLOCK_OK, DLOCK_EINVAL (NULL handle, bad value, too late) or
 * DLOCK_ECANCELED (after fork(), or the client has been freed).
 *
 * ttl_ms: the lease of lease backends (Redis), from 100 ms to 7 days
 *   (604800000 ms); the default is the backend's ttl option (30 s unless
 *   configured).  The other backends have no lease and ignore it.
 * enabled: 1 keeps the lease renewed while held, 0 lets it run out after
 *   the TTL, which is then reported as DLOCK_STATE_LOST; the default is
 *   the backend's watchdog option (on unless configured).  The other
 *   backends ignore it.
 * owner: see dlock_owner.
 * backend: the name of one of the client's configured backends, used for
 *   this handle instead of the routed one (DLOCK_EINVAL if there is none
 *   of that name, or it refuses the resource name).  A client built from a
 *   URI has one backend, named "default".
 *
 * Safe from any thread, also concurrently on the same handle: a setter and
 * a first acquire that overlap either both take effect or the setter
 * returns DLOCK_EINVAL.  dlock_lock_set_backend() alone changes what the
 * other calls read: not while another call on the handle is under way
 * (set it before the handle is shared).
 */
DLOCK_API int dlock_lock_set_ttl(dlock_lock *lock, int64_t ttl_ms);
DLOCK_API int dlock_lock_set_watchdog(dlock_lock *lock, int enabled);
DLOCK_API int dlock_lock_set_owner(dlock_lock *lock, dlock_owner owner);
DLOCK_API int dlock_lock_set_backend(dlock_lock *lock, const char *backend);

/* What the library noticed about a hold, without the owner releasing it. */
typedef enum dlock_state {
	/* The hold is uncertain: the backend cannot confirm it right now
	 * (connection lost, renewal unanswered).  dlock_held() returns 0. */
	DLOCK_STATE_SUSPENDED = 1,
	/* The hold is confirmed again after DLOCK_STATE_SUSPENDED. */
	DLOCK_STATE_RECONNECTED = 2,
	/* The hold is gone: another owner may hold the lock now.  The next
	 * release returns DLOCK_ELOST. */
	DLOCK_STATE_LOST = 3
} dlock_state;

/*
 * Called when a hold made through the handle changes state.  Runs on the
 * client's callback thread ("dlock-callback"), one call at a time, in the
 * order the changes happened; never on a backend's I/O thread or the
 * watchdog.  The thread starts with the first change to report and
 * dlock_client_free() joins it.  It may call any dlock function except
 * dlock_client_free(), and should return quickly: a call that blocks (an
 * acquire that waits) delays every other state callback of the client.
 */
typedef void (*dlock_state_fn)(dlock_lock *lock, dlock_state state, void *user_data);

/* Install (fn) or remove (fn NULL) the handle's state callback.  May be
 * changed at any time; a call of the previous function that had already
 * begun may still be running when it returns.  Returns DLOCK_OK,
 * DLOCK_EINVAL, DLOCK_ECANCELED.  Safe from any thread, also concurrently
 * on the same handle.  From the callback thread: allowed (a callback may
 * remove itself). */
DLOCK_API int dlock_lock_set_state_callback(dlock_lock *lock, dlock_state_fn fn, void *user_data);

/*
 * Acquire the lock for the caller's owner.
 *
 * wait_ms < 0 waits without limit, 0 tries once, > 0 is a deadline on the
 * monotonic clock that bounds everything the call does, reconnects
 * included.  A waiter is woken by the backend's notification of a release.
 * An owner that already holds the lock acquires again without contacting
 * the server (the count is kept locally) and keeps its fencing token.
 * Re-entry into a suspended hold waits, within the deadline, for it to be
 * confirmed (DLOCK_OK) or lost (DLOCK_ELOST); if the hold is released
 * meanwhile (by another thread through a handle-owned lock, or by freeing
 * the handle its counts came through), the call goes on at once as a fresh
 * acquire of the now free lock, as if it had started after that release.
 *
 * Returns DLOCK_OK (held), DLOCK_EBUSY (wait 0 and held elsewhere),
 * DLOCK_ETIMEDOUT, DLOCK_ECANCELED (dlock_lock_cancel(), handle or client
 * being freed, or after fork()), DLOCK_ELOST (re-entry into a hold that was
 * lost: the hold is cleared), DLOCK_EUNAVAILABLE, DLOCK_EBACKEND,
 * DLOCK_EINVAL.  A failed wait leaves nothing behind on the server.
 * Safe from any thread, also concurrently on the same handle; blocks the
 * caller up to the deadline.  From the callback thread: allowed, but the
 * client's other state callbacks wait until it returns (prefer wait 0
 * there).
 */
DLOCK_API int dlock_acquire(dlock_lock *lock, int64_t wait_ms);

/*
 * Release one count of the caller's owner's hold; the last count releases
 * the lock on the server.  If the server cannot be reached, the hold is
 * cleared locally at once, DLOCK_OK is returned, and the library keeps
 * trying in the background (the lease or session ends it otherwise).
 *
 * Returns DLOCK_OK, DLOCK_ENOTHELD (the caller's owner does not hold it:
 * nothing changes), DLOCK_ELOST (the hold had been lost: it is cleared
 * whatever its count; on a DLOCK_OWNER_HANDLE handle whose lost hold was
 * replaced by a fresh acquisition another thread was already waiting for
 * through the handle, the first release reports the loss and the fresh
 * hold keeps its count), DLOCK_EINVAL, DLOCK_ECANCELED (after fork(), or
 * the handle is being freed).
 * Safe from any thread, also concurrently on the same handle: each thread
 * releases its own owner's hold (on a DLOCK_OWNER_THREAD handle, a thread
 * that does not hold the lock gets DLOCK_ENOTHELD).
 */
DLOCK_API int dlock_release(dlock_lock *lock);

/* 1 if the caller's owner holds the lock and the hold is not suspended or
 * lost, else 0 (also for NULL).  No I/O.  Safe from any thread, also
 * concurrently on the same handle. */
DLOCK_API int dlock_held(const dlock_lock *lock);

/* The fencing token of the caller's owner's hold, 0 if it holds none.  For
 * one resource on one backend a later holder always gets a larger token.
 * No I/O.  Safe from any thread, also concurrently on the same handle. */
DLOCK_API uint64_t dlock_fencing_token(const dlock_lock *lock);

/*
 * Wake every thread waiting in dlock_acquire() on this handle; they return
 * DLOCK_ECANCELED.  Acquires started afterwards wait normally.  Holds are
 * not affected.  Returns DLOCK_OK, DLOCK_EINVAL, DLOCK_ECANCELED (after
 * fork()).  Safe from any thread, also concurrently on the same handle.
 * From the callback thread: allowed.
 */
DLOCK_API int dlock_lock_cancel(dlock_lock *lock);

/* The resource name of the handle.  Borrowed, valid until the handle is
 * freed.  NULL for NULL.  Safe from any thread, also concurrently on the
 * same handle. */
DLOCK_API const char *dlock_lock_resource(const dlock_lock *lock);

/* The name ("default" for a URI client) and the URI, without any password,
 * of the backend the handle uses.  Borrowed, valid until the client is
 * freed.  NULL for NULL, and once the client has been freed.  Safe from any
 * thread, also concurrently on the same handle.  Not while
 * dlock_lock_set_backend() is under way on the handle. */
DLOCK_API const char *dlock_lock_backend_name(const dlock_lock *lock);
DLOCK_API const char *dlock_lock_backend_uri(const dlock_lock *lock);

/* The [defaults] wait of the client's configuration file in ms, or -1
 * (wait without limit) when none is configured, or for NULL.  For programs
 * such as the dlock command that take their default wait from the
 * configuration.  Safe from any thread, also concurrently on the same
 * client. */
DLOCK_API int64_t dlock_client_default_wait_ms(const dlock_client *client);

/* ------------------------------------------------------------------------
 * Status
 * ------------------------------------------------------------------------ */

typedef struct dlock_info dlock_info;

/* The caller's own relation to the lock, as seen locally. */
typedef enum dlock_hold {
	DLOCK_HOLD_NONE = 0,      /* the caller's owner does not hold it */
	DLOCK_HOLD_HELD = 1,      /* held and confirmed */
	DLOCK_HOLD_SUSPENDED = 2, /* held but uncertain */
	DLOCK_HOLD_LOST = 3       /* was held, lost, not yet released */
} dlock_hold;

/*
 * Ask the backend who holds the resource now.  One round trip, bounded by
 * the backend's timeouts (dlock_lock_cancel() does not end it).
 * Returns DLOCK_OK and *ret_info (caller frees with dlock_info_free()),
 * DLOCK_EUNAVAILABLE, DLOCK_EBACKEND, DLOCK_EINVAL, DLOCK_ECANCELED.
 * Safe from any thread, also concurrently on the same handle.
 */
DLOCK_API int dlock_lock_query(dlock_lock *lock, dlock_info **ret_info);

/* Free what dlock_lock_query() returned.  NULL is a no-op.  Safe from any
 * thread.  Not while another thread reads the same info. */
DLOCK_API void dlock_info_free(dlock_info *info);

/*
 * What the query found, read from info alone (no I/O).  Strings are
 * borrowed from info, valid until dlock_info_free().
 *   dlock_info_locked      1 if someone (any owner, dlock or a peer) holds
 *                          the resource
 *   dlock_info_hold        the caller's owner's hold when the query was made
 *   dlock_info_holder      the holder as recorded by dlock ("host=...
 *                          pid=... tid=... since=..."), or a foreign
 *                          holder's raw value; "" when free
 *   dlock_info_holder_host, _pid, _tid
 *                          parts of a dlock holder's record; NULL or 0 when
 *                          free or foreign
 *   dlock_info_holder_since_ms
 *                          when the holder acquired, milliseconds since the
 *                          Unix epoch (0 unknown)
 *   dlock_info_expires_in_ms
 *                          time left on the lease in ms; -1 no expiry or not
 *                          a lease backend
 *   dlock_info_fencing_token
 *                          the latest fencing token the backend has handed
 *                          out, 0 if none kept
 *   dlock_info_backend     the backend's URI with any password removed
 * For NULL they give 0, DLOCK_HOLD_NONE, "", NULL or -1 as for a free
 * resource ("" for the backend).
 * Safe from any thread, also concurrently on the same info.
 */
DLOCK_API int dlock_info_locked(const dlock_info *info);
DLOCK_API dlock_hold dlock_info_hold(const dlock_info *info);
DLOCK_API const char *dlock_info_holder(const dlock_info *info);
DLOCK_API const char *dlock_info_holder_host(const dlock_info *info);
DLOCK_API int64_t dlock_info_holder_pid(const dlock_info *info);
DLOCK_API int64_t dlock_info_holder_tid(const dlock_info *info);
DLOCK_API int64_t dlock_info_holder_since_ms(const dlock_info *info);
DLOCK_API int64_t dlock_info_expires_in_ms(const dlock_info *info);
DLOCK_API uint64_t dlock_info_fencing_token(const dlock_info *info);
DLOCK_API const char *dlock_info_backend(const dlock_info *info);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
