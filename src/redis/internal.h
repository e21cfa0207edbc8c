/* SPDX-License-Identifier: MIT */
/*
 * The Redis backend's internals, shared by its files:
 *   backend.c     options, open/close, the ops table
 *   keys.c        key and channel names
 *   conn.c        connections: connect, AUTH/SELECT, the pool, commands
 *   sentinel.c    Sentinel: the master of a service, asked of the sentinels
 *   sentinel-watch.c  Sentinel: failovers heard early (a thread)
 *   cluster.c     Redis Cluster: slots, the slot map, redirections
 *   scripts.c     EVALSHA of the scripts of lua/, with the NOSCRIPT fallback
 *   acquire.c     acquire (try, subscribe, wait, downgrade), release
 *   query.c       query: the holder, or every reader
 *   subscriber.c  the one pub/sub connection that wakes waiters
 *   watchdog.c    lease renewal, loss detection, background cleanup (threads)
 *   renew.c       the watchdog's I/O: renewal batches, deferred releases
 *   redlock.c        Redlock: N independent masters, quorum, fencing round
 *   redlock-round.c  Redlock: one script on every master at once
 *   redlock-dial.c   Redlock: connections made without blocking
 *   redlock-watch.c  Redlock: renewal by quorum, loss detection
 *   redlock-query.c  Redlock: the quorum's holder and each master's view
 */
#ifndef DLOCK_REDIS_INTERNAL_H
#define DLOCK_REDIS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <hiredis/hiredis.h>

#include "backend.h"
#include "thread.h"
#include "resolve.h"

typedef struct redis_backend redis_backend;
typedef struct redis_sub redis_sub;
typedef struct redis_watchdog redis_watchdog;
typedef struct redis_sentinel redis_sentinel;
typedef struct redis_cluster redis_cluster;

/* A node of a Redis Cluster (cluster.c): known until the backend closes. */
typedef struct redis_node {
	char *host;               /* without brackets */
	int port;
	char *addr;               /* "host:port" ("[v6]:port"), for messages */
	GQueue pool;              /* idle redis_conn *, guarded by the backend's pool_mu */
} redis_node;

/* The keys and channels of one resource (keys.c). */
typedef struct redis_names {
	char *key;                /* the lock */
	char *fence;              /* the fencing counter */
	char *queue;              /* the wait queue */
	char *permits;            /* a semaphore's number of permits */
	char *released;           /* the release channel */
	char *wait;               /* a wait's own channel, less the wait's id */
} redis_names;

typedef enum redis_script {
	SCRIPT_ACQUIRE,
	SCRIPT_RELEASE,
	SCRIPT_RENEW,
	SCRIPT_RENEW_WRITE,
	SCRIPT_RENEW_READ,
	SCRIPT_RENEW_PERMIT,
	SCRIPT_DOWNGRADE,
	SCRIPT_RL_ACQUIRE,        /* Redlock (lua/redlock-*.lua) */
	SCRIPT_RL_FENCE,
	SCRIPT_RL_RELEASE,
	SCRIPT_RL_RENEW,
	SCRIPT_RL_QUERY,
	SCRIPT_COUNT
} redis_script;

/* A cluster node's answer that sends a command elsewhere (cluster.c). */
typedef enum redis_redirect_kind {
	REDIRECT_NONE,
	REDIRECT_MOVED,           /* the slot is served by addr now */
	REDIRECT_ASK,             /* this command only: to addr, after ASKING */
	REDIRECT_TRYAGAIN,        /* the slot's keys are split by a migration */
	REDIRECT_DOWN,            /* CLUSTERDOWN */
} redis_redirect_kind;

typedef struct redis_redirect {
	redis_redirect_kind kind;
	int slot;
	char addr[96];
} redis_redirect;

/* A command connection and the timeout currently set on its socket. */
typedef struct redis_conn {
	redisContext *ctx;
	int64_t timeout_us;
	bool reused;              /* came from the pool (may have gone stale) */
	bool timed_out;           /* the last command failed for want of an answer */
	bool not_master;          /* the last script was answered READONLY or LOADING */
	bool asking;              /* send ASKING before the next script (cluster) */
	int epoch;                /* the backend's master_epoch when it was made */
	redis_node *node;         /* a cluster's node it leads to; else NULL */
	redis_redirect redirect;  /* where the last script's answer sent it (cluster) */
} redis_conn;

/*
 * One command's way through the cluster: the slot of its key, the node an
 * ASK sent it to for its next try, the redirections followed so far.
 * _follow() takes a redirection (the map updated, a pause taken as the
 * kind asks), _lost() a master that could not be reached or lost the
 * connection (a growing pause, then the map asked again); either returns
 * DLOCK_OK to send the command again, or the error that ends it (too many
 * redirections, the deadline, a cancel of waiter).
 */
typedef struct redis_route {
	int slot;                 /* -1: not routed */
	redis_node *ask;          /* the next try goes here, after ASKING */
	int redirects;
	int64_t lost_pause_us;
} redis_route;

/* The seam's handle of a Redis backend (a single server's, or a
 * Redlock's) is its redis_backend: the ops receive it as a
 * dlock__backend, and see it again as what it is. */
static inline redis_backend *redis_of(dlock__backend *backend)
{
	return (redis_backend *)(void *)backend;
}

static inline const redis_backend *redis_of_const(const dlock__backend *backend)
{
	return (const redis_backend *)(const void *)backend;
}

struct redis_backend {
	const dlock__logger *logger;
	char *label;              /* "redis 127.0.0.1:6379" / "redis unix:/path", for messages */

	/* where and how to connect */
	char *host;               /* NULL for a unix socket or Sentinel; resolved on each connect */
	int port;
	char *unix_path;
	char *user;               /* ACL user, or NULL */
	char *password;           /* or NULL */
	int db;
	dlock__resolver *resolver;
	redis_sentinel *sentinel; /* Sentinel: where the master is found; else NULL */
	redis_cluster *cluster;   /* Cluster: the slot map and the nodes; else NULL */
	/* Counts the times the master was doubted (dlock__redis_master_doubt):
	 * a connection made before the last doubt may lead to a server that is
	 * no master now, and is neither pooled again nor renewed on.  Atomic. */
	gint master_epoch;

	/* options (the TTL and watchdog are the core's, per hold) */
	int64_t connect_timeout_ms;
	int64_t command_timeout_ms;
	int min_replicas;         /* replicas that must acknowledge a grant or renewal */
	int64_t replica_timeout_ms; /* their WAIT's bound; 0: min(command timeout, TTL/10) */
	bool plain_keys;
	char *prefix;

	GMutex pool_mu;           /* guards pool and the fields so marked (rank REDIS_POOL) */
	GQueue pool;              /* idle redis_conn * */

	/* Monotonic time until which releases defer at once: the last release
	 * found the server unreachable.  Bounds teardown with many holds.
	 * Guarded by pool_mu. */
	int64_t release_defer_until_us;

	GMutex lazy_mu;           /* guards starting the threads below (rank THREAD_START) */
	dlock__lazy_thread sub;      /* redis_sub * */
	dlock__lazy_thread watchdog_thread; /* redis_watchdog * */
	dlock__lazy_thread sentinel_watcher; /* the backend itself, under Sentinel */

	/* A Redlock master's (redlock.h): its server's run_id, from INFO at its last new
	 * connection ("" not known yet, "?" not told), and a connection a
	 * round left unfinished, for the next one.  Guarded by pool_mu. */
	char run_id[48];
	struct redis_dial *parked_dial;
};

/* Server-side state of one hold: the lease. */
typedef struct redis_lease { /* a g_atomic_rc_box */
	dlock__hold *hold;        /* referenced */
	redis_names names;
	char *token;
	char *id;                 /* names this hold's wait: its channel, its queue entry */
	char mode[16];            /* "r" for a READ hold, "s<N>" for a permit of a semaphore
	                           * of N, "w" for the others (lua/acquire.lua) */
	char *under;              /* a READ hold made by a downgrade: the write hold's
	                           * token, which it renews through until the write's
	                           * release makes it a reader; else NULL */
	int64_t ttl_ms;
	bool renew;               /* watchdog on */
	GArray *kept;             /* int: connections of tries left unanswered, or NULL */
	/* guarded by the watchdog's mutex */
	int64_t confirmed_us;     /* CLOCK_BOOTTIME when the last good SET/PEXPIRE was sent */
	int64_t next_renew_us;
	bool suspended;
	bool lost;
	bool released;
	bool cleaned;             /* lost, and its deferred release queued already */
} redis_lease;

/* ---- backend.c ---- */
/* Open the backend of one server of uri (a master of a Redlock). */
int dlock__redis_open_host(const dlock__backend_env *env, const dlock__uri *uri,
                           const dlock__host *host, const dlock__options *opts,
                           redis_backend **ret);
void dlock__redis_close_host(redis_backend *b);

/* ---- elect.c: leader elections' observers and announcements ---- */
dlock__backend_watch_fn dlock__redis_observe;
dlock__backend_unwatch_fn dlock__redis_unobserve;
dlock__backend_announce_fn dlock__redis_announce;
dlock__backend_watch_fn dlock__redlock_observe;
dlock__backend_unwatch_fn dlock__redlock_unobserve;
dlock__backend_announce_fn dlock__redlock_announce;

/* ---- keys.c ---- */
/* PUBLISH, or SPUBLISH on a cluster (whose PUBLISH reports only the
 * node's own subscribers). */
const char *dlock__redis_publish_command(const redis_backend *b);
char *dlock__redis_key(const redis_backend *b, const char *resource);
char *dlock__redis_fence_key(const redis_backend *b, const char *resource);
void dlock__redis_names_init(redis_names *names, const redis_backend *b, const char *resource);
void dlock__redis_names_copy(redis_names *to, const redis_names *from);
void dlock__redis_names_clear(redis_names *names);

/* ---- conn.c ---- */
/* Connect, with AUTH and SELECT as configured (select: false for pub/sub).
 * Bounded by timeout_us.  NULL with the message recorded on failure. */
redisContext *dlock__redis_connect(redis_backend *b, int64_t timeout_us, bool select, int *ret_rc);
/* The same, ended at once (DLOCK_ECANCELED) by a cancel of waiter: a
 * thread's connect that its stop must not wait out (under Sentinel, a
 * round of silent sentinels can take a command timeout each). */
redisContext *dlock__redis_connect_cancelable(redis_backend *b, dlock__waiter *waiter,
                                              int64_t timeout_us, bool select, int *ret_rc);
/* A pooled connection (or a new one), bounded by deadline_us; on a
 * cluster, to the node route leads to (route may be NULL elsewhere).  A cancel of
 * waiter (may be NULL) interrupts the setup of a new one: DLOCK_ECANCELED.
 * DLOCK_ETIMEDOUT when the connect or its setup ran out of time (see
 * dlock__redis_command). */
int dlock__redis_conn_get(redis_backend *b, redis_route *route, dlock__waiter *waiter,
                          int64_t deadline_us, redis_conn **ret);
/* Return a connection; broken ones (ok false or ctx->err) are closed. */
void dlock__redis_conn_put(redis_backend *b, redis_conn *conn, bool ok);
void dlock__redis_pool_clear(redis_backend *b);
void dlock__redis_node_pool_clear(redis_backend *b, redis_node *node);
/* A connection to a cluster's node, authenticated, by timeout_us (pub/sub
 * and the watchdog's). */
redisContext *dlock__redis_connect_node(redis_backend *b, const redis_node *node, dlock__waiter *waiter,
                                        int64_t timeout_us, int *ret_rc);
/*
 * Commands on two connections have no order on the server: a command
 * left unanswered on one (canceled, timed out, the connection broken) may
 * still run after a command sent later on another, for as long as the
 * server has not read it (a fresh connection it has not accepted yet, a
 * stalled link, a paused server).  So the connection of an acquire try
 * left unanswered is kept, shut down, until the server is done with it,
 * and only then is a "not ours" answer to the cleanup's compare-and-delete
 * final.  _keep() shuts conn's socket down and returns a descriptor that
 * keeps it (-1 if none could be had; the caller still puts conn back);
 * _settled() tells whether nothing sent on it can run any more;
 * _kept_settled() closes those of an array of kept descriptors (int, may
 * be NULL) that are settled and tells whether none is left;
 * _kept_close() closes and frees such an array (NULL: no-op).
 */
int dlock__redis_conn_keep(redis_conn *conn);
bool dlock__redis_conn_settled(int fd);
bool dlock__redis_kept_settled(GArray *fds);
void dlock__redis_kept_close(GArray *fds);
/* Set the socket timeout for the next command if it differs (when shorter,
 * by a millisecond or more). */
void dlock__redis_conn_timeout(redis_conn *conn, int64_t timeout_us);
/* Send what hiredis buffered with MSG_NOSIGNAL (never SIGPIPE).  REDIS_OK,
 * or REDIS_ERR with ctx->err set.  Every write of the backend goes here. */
int dlock__redis_flush(redisContext *ctx);
/* Append, flush, read one reply.  NULL on I/O failure (ctx->err set). */
redisReply *dlock__redis_call(redisContext *ctx, int argc, const char **argv, const size_t *lens);
/*
 * Send one command and read its reply.  Returns DLOCK_OK and the reply
 * (freeReplyObject), DLOCK_ETIMEDOUT when no answer came within the
 * socket's timeout, or DLOCK_EUNAVAILABLE (the connection failed).
 *
 * Connections and commands say DLOCK_ETIMEDOUT when a step ran out of
 * time -- whichever bound it had, the caller's deadline or the backend's
 * own connect or command timeout -- and DLOCK_EUNAVAILABLE for a definite
 * failure (refused, reset, closed).  The caller decides what running out
 * of time means for it: an acquire whose deadline has passed timed out;
 * anything else found the server unavailable.
 */
int dlock__redis_command(redis_backend *b, redis_conn *conn, int argc, const char **argv,
                         const size_t *lens, redisReply **ret);
/* The failure of I/O on ctx, worded: DLOCK_ETIMEDOUT "no answer within N
 * ms" when timed_out (timeout_us: the bound it had, or <= 0 if unknown),
 * else DLOCK_EUNAVAILABLE with hiredis's reason. */
int dlock__redis_io_error(redis_backend *b, redisContext *ctx, bool timed_out, int64_t timeout_us);
/* DLOCK_EBACKEND with the server's message if reply is an error reply. */
int dlock__redis_reply_error(redis_backend *b, const redisReply *reply, const char *what);

/*
 * Connect to host:port by deadline_us (resolved here, bounded by it; a
 * cancel of waiter, may be NULL, ends it at once), without AUTH or
 * SELECT; messages start with label.  NULL with the message recorded.
 */
redisContext *dlock__redis_dial_host(redis_backend *b, const char *label, const char *host, int port,
                                     dlock__waiter *waiter, int64_t deadline_us, int *ret_rc);
/*
 * One command on a bare context (a connect's setup), bounded by a command
 * timeout and by deadline_us, failures worded after label.  With
 * ret_reply the reply is returned whatever it is; without, an error reply
 * is the code and message of dlock__redis_reply_error().
 */
int dlock__redis_setup_command(redis_backend *b, const char *label, redisContext *ctx,
                               int64_t deadline_us, const char *what, int argc, const char **argv,
                               redisReply **ret_reply);
/*
 * The server answered as no master does (READONLY: a replica now;
 * LOADING: restarting), or the sentinels switched the master: count a new
 * master epoch, drop the idle connections, which lead to the old one, and
 * have the subscriber reconnect, so that the next connection looks for
 * the master again (under Sentinel, asks the sentinels).  Connections in
 * use are dropped when put back, and the watchdog's before its next
 * renewal (dlock__redis_conn_current()).
 */
void dlock__redis_master_doubt(redis_backend *b);
/* The backend's master epoch, to stamp a connection about to be made. */
int dlock__redis_master_epoch(redis_backend *b);
/* Whether a connection stamped epoch was made since the last doubt. */
bool dlock__redis_conn_current(redis_backend *b, int epoch);
/* Whether reply is such an answer. */
bool dlock__redis_not_master(const redisReply *reply);

/* AUTH with the URI's credentials, if it gives any, by deadline_us. */
int dlock__redis_authenticate(redis_backend *b, redisContext *ctx, int64_t deadline_us);

/* ---- cluster.c ---- */
/* The most redirections (MOVED, ASK, CLUSTERDOWN, a lost master) one
 * command follows. */
#define ROUTE_REDIRECTS_MAX 16
/* CRC16-XMODEM, and the slot of key (its hash tag's, if it has one). */
uint16_t dlock__redis_crc16(const char *data, size_t len);
int dlock__redis_slot(const char *key);
/* From the URI's seeds (default port 6379); no I/O. */
redis_cluster *dlock__redis_cluster_new(const dlock__uri *uri);
void dlock__redis_cluster_free(redis_cluster *c);
/* fn on every node seen (a copy of the list: fn may take locks). */
void dlock__redis_cluster_each_node(redis_cluster *c, void (*fn)(redis_node *n, void *arg), void *arg);
/* The master of slot in the map in use, or NULL; and the map's
 * generation, which counts its changes (may be NULL). */
redis_node *dlock__redis_cluster_owner(redis_cluster *c, int slot, guint *ret_generation);
guint dlock__redis_cluster_generation(redis_cluster *c);
/* A MOVED: slot is served by addr now.  The node, or NULL for a bad address. */
redis_node *dlock__redis_cluster_moved(redis_cluster *c, int slot, const char *addr);
/* The node at addr ("host:port"), added if new; NULL for a bad address. */
redis_node *dlock__redis_cluster_node(redis_cluster *c, const char *addr);
/* Ask the known masters, then the seeds, for the slot map, by deadline_us.
 * DLOCK_EUNAVAILABLE naming each node tried, DLOCK_ECONFIG for a server
 * not in cluster mode, DLOCK_EACCES, DLOCK_ECANCELED. */
int dlock__redis_cluster_refresh(redis_backend *b, dlock__waiter *waiter, int64_t deadline_us);
/* The master of slot, the map asked for first if it names none. */
int dlock__redis_cluster_route(redis_backend *b, int slot, dlock__waiter *waiter, int64_t deadline_us,
                               redis_node **ret);
/* What reply says, if it is a redirection. */
redis_redirect dlock__redis_redirect_of(const redisReply *reply);
void dlock__redis_route_init(redis_route *route, const char *key);
int dlock__redis_route_follow(redis_backend *b, redis_route *route, const redis_redirect *r,
                              dlock__waiter *waiter, int64_t deadline_us);
int dlock__redis_route_lost(redis_backend *b, redis_route *route, dlock__waiter *waiter,
                            int64_t deadline_us, const char *what);

/* ---- sentinel.c, sentinel-watch.c ---- */
/* From the URI's sentinels (default port 26379), the service's name and
 * the sentinel-user and sentinel-password options (NULL when not given). */
redis_sentinel *dlock__redis_sentinel_new(const dlock__uri *uri, const char *service,
                                          const char *user, const char *password);
/* Stop the watcher thread and free b->sentinel (NULL: no-op). */
void dlock__redis_sentinel_free(redis_backend *b);
const char *dlock__redis_sentinel_service(const redis_sentinel *s);
/* "host:port" of the master last connected to (g_free), or NULL. */
char *dlock__redis_sentinel_master(redis_sentinel *s);
void dlock__redis_sentinel_set_master(redis_sentinel *s, const char *host, int port);
guint dlock__redis_sentinel_count(const redis_sentinel *s);
/* Ask the first sentinel last: the master it named refused us. */
void dlock__redis_sentinel_rotate(redis_sentinel *s);
/*
 * Ask the sentinels in order for the master's address, by deadline_us
 * (each gets a share of it, so a silent one leaves time for the rest);
 * the first that answers moves to the front.  DLOCK_EUNAVAILABLE naming
 * each sentinel tried and what it said, or DLOCK_ECANCELED.
 */
int dlock__redis_sentinel_ask(redis_backend *b, dlock__waiter *waiter, int64_t deadline_us,
                              char **ret_host, int *ret_port);
/*
 * A connection to the master of the service, authenticated, by
 * deadline_us: ask the sentinels, connect, AUTH, check ROLE; asked again
 * while the master named cannot be used (a failover under way), within
 * the deadline.  NULL with the code and message of the last failure.
 */
redisContext *dlock__redis_sentinel_connect_master(redis_backend *b, dlock__waiter *waiter,
                                                   int64_t deadline_us, int *ret_rc);
/* Start listening for +switch-master, once (a thread of its own). */
void dlock__redis_sentinel_watch(redis_backend *b);

/* ---- redlock-dial.c ---- */
/*
 * Connections made without blocking (Redlock rounds).  _start() begins a
 * TCP connect to the first of addrs (taken: numeric addresses, tried in
 * turn) that does not fail at once; _identify() asks a pooled connection
 * (taken) for the server's identity alone.  Poll _fd() for _events() and
 * call _step() when it is ready: 1 while in progress, DLOCK_OK with *ret
 * once connected, authenticated, in the database and identified
 * (b->run_id; see dlock__redis_run_id()), or a failure with its message;
 * either way but 1, d is spent and freed.  _park() keeps an unfinished
 * one for the next round (one per backend; it is freed if the slot is
 * taken), _unpark() takes it back if it is still worth waiting for;
 * _free() abandons one (NULL: no-op).
 */
typedef struct redis_dial redis_dial;
int dlock__redis_dial_start(redis_backend *b, char **addrs, redis_dial **ret);
int dlock__redis_dial_identify(redis_backend *b, redis_conn *conn, redis_dial **ret);
int dlock__redis_dial_fd(const redis_dial *d);
short dlock__redis_dial_events(const redis_dial *d);
int dlock__redis_dial_step(redis_dial *d, redis_conn **ret);
void dlock__redis_dial_free(redis_dial *d);
void dlock__redis_dial_park(redis_backend *b, redis_dial *d);
redis_dial *dlock__redis_dial_unpark(redis_backend *b);
/* A pooled connection, or NULL: never connects. */
redis_conn *dlock__redis_conn_pooled(redis_backend *b);
/* The server's run_id as last seen (see redis_backend.run_id). */
void dlock__redis_run_id(redis_backend *b, char *buf, size_t size);

/* ---- scripts.c ---- */
/*
 * The scripts as the server runs them, their SHA1s for EVALSHA, and how
 * many keys and words (keys and arguments) each takes: made at build time
 * from the files of lua/ (lua/embed.py), whose header scripts-lua.h names
 * each script's words (ACQUIRE_KEY_LOCK, ..., ACQUIRE_ARG_TOKEN, ...).
 * A script's words are one array: its keys, then its arguments.
 */
extern const char *const dlock__redis_script_text[SCRIPT_COUNT];
extern const char *const dlock__redis_script_sha1[SCRIPT_COUNT];
extern const int dlock__redis_script_keys[SCRIPT_COUNT];
extern const int dlock__redis_script_words[SCRIPT_COUNT];
/* The most words a script takes, and room for a script's command. */
#define SCRIPT_WORDS_MAX 11
#define SCRIPT_ARGV_MAX (3 + SCRIPT_WORDS_MAX)
/* The words of script with keys keys, each with its own arguments (after
 * all the keys, in the keys' order), for a script that takes any number. */
int dlock__redis_script_words_for(redis_script script, int keys);
/*
 * The command running script with words: EVALSHA, or EVAL with the
 * script's text (by_body), into argv (SCRIPT_ARGV_MAX entries), the count
 * of keys written into nkeys_text.  Returns the command's word count.
 * dlock__redis_script_argv_keys(): the same with keys keys (argv: 3 +
 * dlock__redis_script_words_for() entries).
 */
int dlock__redis_script_argv(redis_script script, bool by_body, const char *const *words,
                             const char **argv, char nkeys_text[8]);
int dlock__redis_script_argv_keys(redis_script script, bool by_body, const char *const *words,
                                  int keys, const char **argv, char nkeys_text[8]);
/*
 * Replica acknowledgement of a script's writes (min-replicas): with n > 0
 * the script is followed on its connection by WAIT n timeout_ms, sent
 * with it (one round trip), and acked is set to WAIT's answer, the
 * replicas that have everything the connection wrote (-1: no number).
 */
typedef struct redis_ack {
	int n;
	int64_t timeout_ms;
	int acked;
} redis_ack;
/* The acknowledgement b asks for a hold of ttl_ms (n 0: none). */
redis_ack dlock__redis_ack_for(const redis_backend *b, int64_t ttl_ms);
/* ack's WAIT timeout cut to what leaves its answer time to come back
 * within left_us. */
void dlock__redis_ack_within(redis_ack *ack, int64_t left_us);
/* Run a script by EVALSHA (loading it on NOSCRIPT, once), then WAIT if
 * ack asks for it (may be NULL).  Same returns as dlock__redis_command,
 * plus DLOCK_EBACKEND for an error reply. */
int dlock__redis_eval(redis_backend *b, redis_conn *conn, redis_script script,
                      const char *const *words, redis_ack *ack, redisReply **ret);
/* The words of the release script, into words (RELEASE_WORDS of them). */
void dlock__redis_release_words(const redis_names *names, const char *token, const char *ticket,
                                const char *id, const char *mode, const char *publish,
                                const char **words);
/* The server does not have the script cached (flushed, or restarted). */
bool dlock__redis_is_noscript(const redisReply *reply);
/*
 * Run a script on a pooled connection, bounded by the command timeout and
 * deadline_us.  If a pooled connection turns out dead (the server
 * restarted, or dropped it while idle: the failure comes at once), the
 * pool is emptied and the script runs once more on a new connection; a
 * server that is there but silent (a timeout) is not tried twice.
 * *ret_uncertain is set when an attempt got no answer, so the script may
 * have run.  A cancel of waiter (may be NULL) ends the wait for an answer
 * at once (the connection is then closed): DLOCK_ECANCELED.  With kept
 * (may be NULL), the connection of each attempt left without an answer
 * is kept there (dlock__redis_conn_keep()) for the cleanup to wait on.
 * DLOCK_ETIMEDOUT when the connect or the answer ran out of time (see
 * dlock__redis_command).  With ack, the WAIT's time is added to the bound
 * of the answer, and its timeout cut to what is left of deadline_us.
 */
int dlock__redis_eval_pooled(redis_backend *b, dlock__waiter *waiter, int64_t deadline_us,
                             redis_script script, const char *const *words, redis_ack *ack,
                             redisReply **ret, bool *ret_uncertain, GArray *kept);

/* ---- acquire.c: the ops table's acquire and release ---- */
dlock__backend_acquire_begin_fn dlock__redis_acquire_begin;
dlock__backend_acquire_step_fn dlock__redis_acquire_step;
dlock__backend_acquire_end_fn dlock__redis_acquire_end;
dlock__backend_release_fn dlock__redis_release;
dlock__backend_abandon_fn dlock__redis_abandon;

/* ---- query.c ---- */
dlock__backend_query_fn dlock__redis_query;

/* ---- subscriber.c ---- */
/* A wait's mailbox: the grant a release sent it, ticket 0 for none.
 * Guarded by the subscriber's mutex. */
typedef struct redis_grant {
	int64_t ticket;           /* the queue entry it was granted to */
	uint64_t token;           /* its fencing token */
} redis_grant;
/* Register a queueing waiter on its own channel, with its mailbox, and on
 * the release channel (starting the subscriber thread on first use); it is
 * woken when its own channel is confirmed, on every message on either, and
 * after every reconnect.  Remove it. */
void dlock__redis_sub_add_wait(redis_backend *b, const char *released, const char *channel,
                               dlock__waiter *waiter, redis_grant *box);
void dlock__redis_sub_remove_wait(redis_backend *b, const char *released, const char *channel,
                                  dlock__waiter *waiter);
/* Register a waiter on channel alone (a Redlock's release channel): woken
 * on every message and after every reconnect.  Remove it. */
void dlock__redis_sub_listen(redis_backend *b, const char *channel, dlock__waiter *waiter);
void dlock__redis_sub_unlisten(redis_backend *b, const char *channel, dlock__waiter *waiter);
/* Whether the server has confirmed the subscription to channel. */
bool dlock__redis_sub_confirmed(redis_backend *b, const char *channel);
/* Whether the server's ACL refused it on the current connection (the
 * user has no rights on that channel, or may not SUBSCRIBE at all). */
bool dlock__redis_sub_refused(redis_backend *b, const char *channel);
/* Take the grant left in box if it is for ticket (an older one is dropped). */
bool dlock__redis_sub_take_grant(redis_backend *b, redis_grant *box, int64_t ticket,
                                 uint64_t *ret_token);
void dlock__redis_sub_stop(redis_backend *b);
/* Have the subscriber drop its connection and connect again. */
void dlock__redis_sub_reconnect(redis_backend *b);

/* ---- watchdog.c ---- */
redis_lease *dlock__redis_lease_ref(redis_lease *lease);
void dlock__redis_lease_unref(redis_lease *lease);
/* Start tracking a granted lease (renewal and/or expiry). */
void dlock__redis_watch(redis_backend *b, redis_lease *lease);
/* Stop tracking it.  Returns true if the watchdog had seen it fail to
 * renew (suspended) or lost, so release need not wait on a dead server.
 * Afterwards lease->cleaned tells whether its deferred release is queued
 * already. */
bool dlock__redis_unwatch(redis_backend *b, redis_lease *lease, bool *ret_lost);
/* The core declared the lease's hold lost: no more renewals, and the key
 * deleted in the background (dlock__backend_abandon_fn). */
void dlock__redis_lease_abandon(redis_backend *b, redis_lease *lease);
/* Release lease's lock if it still holds lease's token (and leave the
 * queue, when ticket is not ""), in the background, until done or until
 * expires_us (CLOCK_BOOTTIME), after which the lease has ended it.
 * kept (taken, may be NULL): connections of tries with this token left
 * unanswered; the delete waits until the server is done with them. */
void dlock__redis_cleanup_later(redis_backend *b, const redis_lease *lease, const char *ticket,
                                int64_t expires_us, GArray *kept);
/* The same for a Redlock master's share of a hold (b: the master): by
 * Redlock's release script, whose message on the release channel wakes
 * the Redlock's waiters as a release round's does. */
void dlock__redis_cleanup_later_redlock(redis_backend *b, const redis_lease *lease,
                                        int64_t expires_us, GArray *kept);
void dlock__redis_watchdog_stop(redis_backend *b);

#endif
