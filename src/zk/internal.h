/* SPDX-License-Identifier: MIT */
/*
 * The ZooKeeper backend's internals, shared by its files:
 *   backend.c  options, paths, open/close, the ops table
 *   errors.c   what each ZooKeeper result code means to dlock (one table)
 *   nodes.c    lock node names and their order (pure; see nodes.h)
 *   session.c  sessions: state, contact, holds' reports, watches, waiting
 *   session-thread.c  the session thread: probes, expiry by dlock's clock,
 *              closing ended sessions, lookups of missing servers again
 *   deletes.c  deletes in the background, again after a reconnect
 *   servers.c  the servers' names resolved, and again while some are missing
 *   sweep.c    finding and deleting nodes whose create went unanswered
 *   cloexec.c  close-on-exec for the client library's descriptors
 *   call.c     asynchronous calls that a deadline-bound thread waits on
 *   acquire.c  acquire (create and list, watch the predecessor), release
 *   downgrade.c  a READ acquire beside the owner's own write node
 *   query.c    who holds a resource
 *
 * Threads: each session's zhandle has the client library's I/O and
 * completion threads; the backend adds one "dlock-zksession" thread for
 * the client-side session timer, keep-alive probes, background deletes
 * and closing ended sessions.  Nothing blocks on the completion thread:
 * completions and watchers only record results, wake waiters and queue
 * asynchronous deletes.
 *
 * Lock order (the rank table of src/kit/mutex.h): backend->mu, then
 * session->mu, then the core's hold->mu, then call->mu, then a waiter's
 * mutex.  zookeeper_close() runs with none of them held, since it waits
 * for the completion thread.
 */
#ifndef DLOCK_ZK_INTERNAL_H
#define DLOCK_ZK_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <zookeeper/zookeeper.h>

#include "backend.h"
#include "cleanup.h"
#include "resolve.h"
#include "thread.h"
#include "nodes.h"
#include "waketable.h"

typedef struct zk_session zk_session;
typedef struct zk_backend zk_backend;

/* The seam's handle of a ZooKeeper backend is its zk_backend: the ops
 * receive it as a dlock__backend, and see it again as what it is. */
static inline zk_backend *zk_of(dlock__backend *backend)
{
	return (zk_backend *)(void *)backend;
}

struct zk_backend {
	const dlock__logger *logger;
	char *label;               /* "zk 127.0.0.1:2181,127.0.0.1:2182/chroot", for messages */
	char *hosts;               /* the connect string as given (names), chroot included */
	char **server_hosts;       /* each server's host name or address (NULL-terminated) */
	int *server_ports;         /* and its port */
	char *chroot;              /* "/chroot", or "" */
	dlock__resolver *resolver; /* names are resolved before each session, within a deadline */
	char *credentials;         /* "user:password" for digest auth, or NULL */
	char *root;                /* "/dlock" */
	int64_t session_timeout_ms;
	int64_t connect_timeout_ms;
	struct ACL acl_entries[2];
	struct ACL_vector lock_acl;  /* for lock nodes: open, or creator-all plus world-read */

	GMutex mu;                 /* guards everything below (rank ZK_BACKEND) */
	GCond cond;                /* wakes the session thread */
	zk_session *current;       /* the session new calls use; NULL before the first or after it ended */
	GPtrArray *sessions;       /* every session not yet closed (one reference each) */
	dlock__lazy_thread thread; /* "dlock-zksession", started with the first session */
	int64_t thread_wake_us;    /* CLOCK_BOOTTIME the thread sleeps until; 0 awake */
	bool stopping;
};

typedef enum zk_phase {
	ZK_CONNECTING,   /* not connected yet, or connection lost within the session */
	ZK_CONNECTED,
	ZK_ENDED         /* expired, declared lost by our timer, refused auth, or closed */
} zk_phase;

struct zk_session {
	gatomicrefcount ref;
	zk_backend *b;
	zhandle_t *zh;             /* closed by the session thread or backend close */
	GMutex mu;
	/* guarded by mu (rank ZK_SESSION) */
	zk_phase phase;
	bool ever_connected;
	const char *end_reason;    /* static text, set when ENDED */
	int64_t timeout_ms;        /* negotiated, once connected */
	int64_t contact_us;        /* CLOCK_BOOTTIME: send time of the last write or sync answered */
	int64_t probe_due_us;      /* CLOCK_BOOTTIME: next keep-alive probe */
	bool probing;              /* a probe is in flight */
	GPtrArray *holds;          /* zk_node * granted on this session (referenced) */
	/* node path -> the waiters of its data watch, and ZK_SESSION_WAITERS ->
	 * the waiters to wake on every state change (woken too) */
	dlock__waketable *waiters;
	dlock__cleanups *cleanups; /* deletes and sweeps waiting for a connection: tried
	                            * again at each pass while connected, dropped when
	                            * the session ends (the nodes end with it) */
	unsigned outstanding;      /* requests sent whose completion has not run */
	GCond settled;             /* signaled when outstanding drops to 0 */
	char *servers;             /* the client's server list, "ip:port,..." */
	unsigned missing;          /* servers left out of it: their names did not resolve */
	int64_t resolve_due_us;    /* CLOCK_BOOTTIME: when to look them up again */
	int64_t resolve_pause_us;  /* and the pause after that */
};

/* The session's waiters' key in its wake table: no node path is empty. */
#define ZK_SESSION_WAITERS ""

/* A granted lock node: the server-side state of one hold. */
typedef struct zk_node {
	gatomicrefcount ref;
	dlock__hold *hold;         /* referenced */
	zk_session *session;       /* referenced */
	char *path;
	int64_t czxid;
	bool abandoned;            /* the core declared it lost; its delete is under way */
} zk_node;

typedef enum zk_call_kind {
	CALL_CREATE,
	CALL_CHILDREN,
	CALL_GET,
	CALL_EXISTS,
	CALL_DELETE
} zk_call_kind;

/*
 * One asynchronous request.  The completion fills it in and wakes whoever
 * waits; a thread that gives up
 * abandons it, and a create that lands after that has its node deleted by
 * the completion.
 */
typedef struct zk_call {
	gatomicrefcount ref;
	zk_session *session;       /* referenced */
	zk_call_kind kind;
	bool quorum;               /* a write: its answer comes through the leader */
	int64_t sent_us;           /* CLOCK_BOOTTIME */
	GMutex mu;
	/* guarded by mu (rank ZK_CALL) */
	dlock__waiter *waiter;     /* woken on completion; NULL once abandoned */
	bool done;
	bool abandoned;
	int rc;                    /* ZOK or a ZooKeeper error */
	char *path;                /* create: the node created */
	struct Stat stat;          /* create, get, exists */
	char **children;           /* get_children */
	char *data;                /* get: NUL-terminated copy */
	void *multi;               /* a transaction's buffers (call.c), until freed */
} zk_call;

/* ---- backend.c ---- */
/* "<root>/<resource>" */
char *dlock__zk_dir(const zk_backend *b, const char *resource);

/* ---- errors.c: what each result code means (its table) ---- */
/* The ZooKeeper error as text, for messages. */
const char *dlock__zk_strerror(int zrc);
/* Whether zrc means the request may not have reached the server or its
 * answer was lost, on a session that may still live. */
bool dlock__zk_rc_connection(int zrc);
/* Whether zrc means the session is over. */
bool dlock__zk_rc_session_ended(int zrc);
/* The status and message for an answer the caller did not expect to
 * "what path" ("create /dlock/x"): DLOCK_EACCES for an ACL's refusal,
 * else DLOCK_EBACKEND. */
int dlock__zk_rc_error(const zk_backend *b, int zrc, const char *what, const char *path);

/* ---- session.c ---- */
zk_session *dlock__zk_session_ref(zk_session *s);
void dlock__zk_session_unref(zk_session *s);
/*
 * The current session, opened if there is none, once it is connected.
 * Waits until until_us (monotonic), waking on cancel of waiter (which may
 * be NULL).  DLOCK_OK and a reference, or DLOCK_EUNAVAILABLE (no
 * connection in time), DLOCK_ECANCELED, DLOCK_EBACKEND (auth refused).
 */
int dlock__zk_session_get(zk_backend *b, dlock__waiter *waiter, int64_t until_us,
                          zk_session **ret);
/*
 * Whether the servers are known to refuse us: the current session's last
 * connection attempt failed (refused, reset) and the next has not begun.
 * A wait for a session that ends before the connect timeout is then
 * DLOCK_EUNAVAILABLE; without it, it only ran out of time.
 */
bool dlock__zk_session_refused(zk_backend *b);
/* Wait until s is connected: DLOCK_OK, DLOCK_ETIMEDOUT (until_us passed),
 * DLOCK_ECANCELED, or DLOCK_ELOST (the session ended). */
int dlock__zk_session_wait_connected(zk_session *s, dlock__waiter *waiter, int64_t until_us);
zk_phase dlock__zk_session_phase(zk_session *s);
/* Register a waiter for wake-ups on every state change of s. */
void dlock__zk_session_add_waiter(zk_session *s, dlock__waiter *waiter);
void dlock__zk_session_remove_waiter(zk_session *s, dlock__waiter *waiter);
/* Register waiter for the data watch on path (before setting it).  The
 * watch fires once: after that waiter is no longer registered. */
void dlock__zk_watch_add(zk_session *s, const char *path, dlock__waiter *waiter);
void dlock__zk_watch_remove(zk_session *s, const char *path, dlock__waiter *waiter);
bool dlock__zk_watch_fired(zk_session *s, const char *path, dlock__waiter *waiter);
/* The watcher of every session and data watch (context: the session). */
void dlock__zk_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);
/* A write or sync sent at sent_us was answered (by way of the leader):
 * the session lived then. */
void dlock__zk_session_contact(zk_session *s, int64_t sent_us);
/*
 * Whether a hold made now on s would outlive the caller's return: the
 * session's bound (its last contact plus the timeout, less the margin) is
 * more than one margin away.  An answer that showed a node first but came
 * long after it was asked for -- the process paused, or starved, in
 * between -- leaves a bound that has passed or nearly: the server may
 * have expired the session meanwhile and given the lock to another, so
 * the answer is asked for again before a grant is made of it.
 */
bool dlock__zk_session_fresh(zk_session *s);
/* Track a granted node (SUSPENDED/RECONNECTED/LOST reports); untrack it.
 * Track returns false, tracking nothing, if s has ended (the node goes
 * with it: the grant is void); a node granted while s is disconnected is
 * reported SUSPENDED at once.  Untrack returns false if the node was not
 * tracked (the session ended). */
bool dlock__zk_session_track(zk_session *s, zk_node *node);
bool dlock__zk_session_untrack(zk_session *s, zk_node *node);
/* A request is about to be sent on s (s->mu held): its completion must
 * call dlock__zk_request_done(), or, if the client refuses it (no
 * completion will run), the sender must.  Closing a connected session
 * waits (briefly) for every completion first: the client library loses
 * those whose answers arrive while its handle is closed. */
void dlock__zk_request_sent_locked(zk_session *s);
void dlock__zk_request_done(zk_session *s);
/* When s may have expired on the server, by dlock's count: its last
 * contact plus the negotiated timeout, less the lease margin.  s->mu
 * held. */
int64_t dlock__zk_session_expiry_locked(const zk_session *s);
/* dlock__zk_session_contact() with s->mu held. */
void dlock__zk_session_contact_locked(zk_session *s, int64_t sent_us);
/*
 * End s (expired, auth refused, or dlock's timer ran out): every hold on
 * it is lost, waiters move on, and the session thread will close it.
 * b->mu and s->mu held; returns the holds to report LOST
 * (dlock__zk_holds_report()), and adds to notes what to log after.
 */
GPtrArray *dlock__zk_session_end_locked(zk_backend *b, zk_session *s, const char *reason,
                                        GPtrArray *notes);
/* Report state to each hold of holds (referenced; may be NULL), and
 * unreference the array. */
void dlock__zk_holds_report(GPtrArray *holds, dlock_state state);
/*
 * What the session code has to say while it holds b->mu or s->mu is
 * noted and logged once they are released (the user's log callback may
 * block): a list of notes, and its flush, with no lock held, which logs
 * and empties it.
 */
GPtrArray *dlock__zk_notes_new(void);
void dlock__zk_notes_flush(zk_backend *b, GPtrArray *notes);

/* ---- session-thread.c ---- */
/* The session thread's body (data: the backend), started lazily by the
 * first session. */
gpointer dlock__zk_session_thread(gpointer data);
/* Stop the session thread and close every session (backend close). */
void dlock__zk_sessions_stop(zk_backend *b);

/* ---- deletes.c ---- */
/* Delete path in the background: now if possible, and again after each
 * reconnect, until it is gone or the session ends.  Any thread. */
void dlock__zk_delete_later(zk_session *s, const char *path);
/* Send the delete of path now; s->mu held.  Kept for the next reconnect
 * if there is no connection; nothing if s has ended. */
void dlock__zk_delete_send_locked(zk_session *s, const char *path);

/* ---- servers.c ---- */
/*
 * Every server's name resolved within until_us (monotonic), a cancel of
 * waiter (may be NULL) ending the lookups: DLOCK_OK with *ret_servers
 * "ip:port,[ip6]:port,..." (g_free), servers whose names did not resolve
 * left out and their names added to missing (borrowed from b); or
 * DLOCK_EUNAVAILABLE when none resolved, DLOCK_ECANCELED.  No lock held.
 */
int dlock__zk_servers_resolve(zk_backend *b, dlock__waiter *waiter, int64_t until_us,
                              char **ret_servers, GPtrArray *missing);
/* Look up the names left out of s again, until until_us, and give the
 * client the longer list if s is still not connected.  No lock held. */
void dlock__zk_servers_refresh(zk_backend *b, zk_session *s, int64_t until_us);

/* ---- sweep.c ---- */
/*
 * A create under dir with uuid may have made a node nobody will use (its
 * answer was lost, or its acquire gave up): find it among dir's children
 * and delete it, now if s is connected, else after the next reconnect.
 * Nothing if s has ended (the node went with it).  Any thread.
 */
void dlock__zk_sweep_later(zk_session *s, const char *dir, const char *uuid);

/* ---- cloexec.c ---- */
/* The open descriptors (sorted ints; g_array_unref). */
GArray *dlock__zk_fds(void);
/* Mark close-on-exec the pipes opened since before was taken. */
void dlock__zk_cloexec_new_pipes(GArray *before);
/* Mark close-on-exec the sockets connected to zh's current server. */
void dlock__zk_cloexec_socket(zhandle_t *zh);

/* ---- call.c ---- */
zk_call *dlock__zk_call_new(zk_session *s, zk_call_kind kind, dlock__waiter *waiter);
void dlock__zk_call_unref(zk_call *call);
/* Send the request; a request the client refuses at once completes at
 * once with its code.  flags: ZOO_EPHEMERAL_SEQUENTIAL (a hold's node),
 * ZOO_EPHEMERAL (a downgrade's) or ZOO_CONTAINER (a resource's). */
void dlock__zk_create(zk_call *call, const char *path, const char *data, int flags,
                      const struct ACL_vector *acl);
/* Create path (as dlock__zk_create(), not sequential) only if beside
 * exists, in one transaction: ZNONODE when beside is gone, ZNODEEXISTS
 * when path is there already (and beside too). */
void dlock__zk_create_beside(zk_call *call, const char *beside, const char *path, const char *data,
                             int flags, const struct ACL_vector *acl);
void dlock__zk_get_children(zk_call *call, const char *path);
void dlock__zk_get(zk_call *call, const char *path, bool watch);
void dlock__zk_exists(zk_call *call, const char *path);
/* The same, leaving a child watch, an exists watch on path, which wakes
 * the waiters registered for path (dlock__zk_watch_add()). */
void dlock__zk_get_children_watch(zk_call *call, const char *path);
/* Set path's data if its version is still version (ZBADVERSION if not). */
void dlock__zk_set(zk_call *call, const char *path, const char *data, int version);
void dlock__zk_exists_watch(zk_call *call, const char *path);

/* ---- elect.c: leader elections' observers ---- */
dlock__backend_watch_fn dlock__zk_observe;
dlock__backend_unwatch_fn dlock__zk_unobserve;
void dlock__zk_delete(zk_call *call, const char *path);
/* Wait for completion through the call's waiter: DLOCK_OK (done: see
 * call->rc), DLOCK_ETIMEDOUT, DLOCK_ECANCELED, or DLOCK_ELOST if the
 * session ended first. */
int dlock__zk_call_wait(zk_call *call, int64_t until_us);
/* Give a call made without a waiter this one, to wait for it: true if it
 * is done already (then the waiter is not set). */
bool dlock__zk_call_attach(zk_call *call, dlock__waiter *waiter);
/* Stop waiting: a create that succeeds later has its node deleted. */
void dlock__zk_call_abandon(zk_call *call);

/* ---- acquire.c ---- */
dlock__backend_acquire_begin_fn dlock__zk_acquire_begin;
dlock__backend_acquire_step_fn dlock__zk_acquire_step;
dlock__backend_acquire_end_fn dlock__zk_acquire_end;
dlock__backend_release_fn dlock__zk_release;
dlock__backend_abandon_fn dlock__zk_abandon;

/* Internal result: the session ended under the attempt; start over. */
#define AGAIN 1
/* Internal result, of an attempt no thread waits in (zk_attempt.async):
 * it waits for a turn on its waiter -- while the sequence number is still
 * a->yield_seen, until its deadline -- and goes on when called again. */
#define YIELD 2

/*
 * One acquire's queueing in one node's children (a->dir), shared by a
 * lock's acquire and a semaphore's, whose internal mutex and lease are
 * each such a queue (semaphore.c).
 */
typedef struct zk_attempt {
	zk_backend *b;
	dlock__hold *hold;
	dlock__waiter *waiter;
	int64_t wait_ms;
	int64_t deadline_us;
	const char *resource;
	char *dir;          /* <root>/<resource>, or a semaphore's locks or leases */
	char *data;         /* holder record stored in the node */
	char *uuid;
	char *path;         /* our node, once created */
	const char *name;   /* its last segment */
	int64_t czxid;
	bool unsure;        /* a create with uuid may have made a node whose name we do not know */
	bool lease;         /* the node is a semaphore's lease ("-lease-"), not a lock's */
	/* For a try (wait_ms 0) queued behind another contender: DLOCK_OK to
	 * wait for its turn all the same (until deadline_us), else the try's
	 * failure; NULL: DLOCK_EBUSY at once.  A semaphore's internal mutex
	 * (semaphore.c), which its holder keeps only briefly while a permit
	 * is free. */
	int (*turn)(struct zk_attempt *a, zk_session *s);
	void *turn_data;
	/* In a call no thread waits in (async): where it waits instead of
	 * sleeping -- YIELD with the sequence number it read, and the path
	 * whose watch it keeps meanwhile (the node it waits for, or a
	 * semaphore's leases), or NULL. */
	bool async;
	uint64_t yield_seen;
	int64_t yield_until;   /* the attempt's own deadline (a try's mutex has a shorter one) */
	char *watching;
} zk_attempt;

/*
 * The session for a pass of the attempt (first: its first), once
 * connected: DLOCK_OK and a reference, or the acquire's failure.  A first
 * pass waits at most the connect timeout (DLOCK_EUNAVAILABLE, as when a
 * server refused us); a wait that ends sooner, or a later pass that finds
 * no session by the deadline, is DLOCK_ETIMEDOUT.  A try's failure is
 * left as it is (DLOCK_EUNAVAILABLE).
 */
int dlock__zk_attempt_session(zk_attempt *a, bool first, zk_session **ret);
/* A failed wait (not a ZooKeeper answer) as the acquire's result. */
int dlock__zk_attempt_failed(zk_attempt *a, int rc);
/* Wait for call's answer: DLOCK_OK with call->rc set, or the failed
 * wait (the call is abandoned). */
int dlock__zk_attempt_await(zk_attempt *a, zk_call *call);
/* After a connection loss: wait for the session to come back. */
int dlock__zk_attempt_reconnect(zk_attempt *a, zk_session *s);
int dlock__zk_attempt_unexpected(zk_attempt *a, int zrc, const char *what, const char *path);
/* Create a->dir and its parents as containers. */
int dlock__zk_attempt_make_parents(zk_attempt *a, zk_session *s);
/* Create our node in a->dir, protected, with the children listed behind
 * it (*ret_children, or NULL when they are to be listed again). */
int dlock__zk_attempt_create(zk_attempt *a, zk_session *s, char ***ret_children);
/* Queue in a->dir until our node comes first: DLOCK_OK, DLOCK_EBUSY for
 * a try, AGAIN, YIELD (async: called again after the turn), or a failure. */
int dlock__zk_attempt_run(zk_attempt *a, zk_session *s);
/* With a watch on path armed: wait until it fires or the connection
 * changes (async: YIELD instead of sleeping), then see where the session
 * stands: DLOCK_OK ("look again"), AGAIN, or a failure. */
int dlock__zk_attempt_watch_wait(zk_attempt *a, zk_session *s, const char *path);
/* Forget our node (a new uuid next); with sweep, have the session find
 * and delete a node a lost create may have made. */
void dlock__zk_attempt_forget(zk_attempt *a);
void dlock__zk_attempt_sweep(zk_attempt *a, zk_session *s);
/* Delete a node we will not use: waiting for the answer until until_us
 * (monotonic), or, with until_us 0, in the background. */
void dlock__zk_delete_node(zk_session *s, const char *path, int64_t until_us);
/* Until when an attempt that ends with rc waits for its nodes' deletes:
 * 0 (not at all) unless it is a try that found no room (DLOCK_EBUSY) or
 * a refused permit count, which wait, bounded, so as to leave nothing
 * behind when they return. */
int64_t dlock__zk_cleanup_until(const zk_attempt *a, int rc);
/* Grant hold the node at path of session s: track it, set the hold's
 * token (its czxid) and backend data.  False, granting nothing, if s has
 * ended (the node went with it). */
bool dlock__zk_grant(dlock__hold *hold, zk_session *s, const char *path, int64_t czxid);
/* The node of hold, referenced, or NULL once it was released: safe while
 * another thread releases hold (release takes it off under b->mu). */
zk_node *dlock__zk_node_of(zk_backend *b, dlock__hold *hold);
void dlock__zk_node_unref(zk_node *node);

/* ---- downgrade.c ---- */
/*
 * The READ acquire of hold, a downgrade (dlock__hold_downgrade_of() is
 * set), its node holding data: DLOCK_OK (granted), DLOCK_ETIMEDOUT,
 * DLOCK_ECANCELED, another error, or DLOCK_ELOST when the write node's
 * session has ended: then the hold is to queue as any reader's.
 */
int dlock__zk_downgrade(zk_backend *b, dlock__hold *hold, dlock__waiter *waiter,
                        const char *data, int64_t deadline_us);

/* ---- semaphore.c ---- */
/* The acquire of a semaphore's permit (dlock__hold_permits() > 1), a
 * step at a time: *sem keeps its state (made by the first step), freed
 * by dlock__zk_semaphore_step_free().  YIELD while it waits for a turn
 * (a->yield_seen), as dlock__zk_attempt_run(). */
typedef struct zk_semaphore_acquire zk_semaphore_acquire;
int dlock__zk_semaphore_step(zk_backend *b, zk_attempt *a, zk_semaphore_acquire **sem);
void dlock__zk_semaphore_step_free(zk_semaphore_acquire *sem);
/* A lock on a resource named "<R>/leases" while a semaphore on R keeps
 * its leases there: DLOCK_EINVAL (its nodes would count as leases). */
int dlock__zk_semaphore_guard(zk_backend *b, zk_attempt *a, zk_session *s);
/* The query of a semaphore on the resource at dir: DLOCK_OK with ret
 * filled in when its leases node has leases or dir holds an N, else
 * DLOCK_OK with ret untouched. */
int dlock__zk_semaphore_query(zk_backend *b, zk_session *s, dlock__waiter *w, const char *dir,
                              int64_t deadline_us, dlock__server_info *ret);

/* ---- query.c ---- */
dlock__backend_query_fn dlock__zk_query;

#endif
