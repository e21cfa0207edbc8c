/* SPDX-License-Identifier: MIT */
/*
 * Redlock's internals, shared by redlock.c, redlock-round.c and
 * redlock-watch.c: a round (one script on every master at once) and the
 * lease of a hold.
 */
#ifndef DLOCK_REDIS_REDLOCK_H
#define DLOCK_REDIS_REDLOCK_H

#include "internal.h"

/* More masters than this in one URI are refused. */
#define RL_MASTERS_MAX 15

/*
 * A Redlock: N independent masters, each a single server's backend of its
 * own (host, pool, subscriber, deferred cleanup, all sharing one set of
 * options), and what deciding by quorum needs.
 */
typedef struct redlock_backend {
	const dlock__logger *logger;
	char *label;              /* "redlock redis://h1,h2,h3", for messages */
	redis_backend **masters;
	int n_masters;
	int quorum;               /* n_masters / 2 + 1 */
	int64_t connect_timeout_ms;
	int64_t command_timeout_ms;
	int64_t master_timeout_ms; /* 0: the smaller of the command timeout and TTL/20 */
	GMutex mu;                /* guards release_defer_until_us (rank REDLOCK) */
	/* Monotonic time until which releases defer at once: the last release
	 * found too few masters answering.  Bounds teardown with many holds. */
	int64_t release_defer_until_us;
	GMutex lazy_mu;           /* guards starting the watch thread (rank THREAD_START) */
	dlock__lazy_thread watch_thread; /* redlock_watch * */
} redlock_backend;

/* The seam's handle of a Redlock is its redlock_backend. */
static inline redlock_backend *redlock_of(dlock__backend *backend)
{
	return (redlock_backend *)(void *)backend;
}

/* What a round sends: the same script and words to each master. */
typedef struct rl_request {
	redis_script script;
	const char *const *words;  /* its keys, then its arguments (scripts-lua.h) */
	const bool *only;         /* per master: send there; NULL for every master */
	int enough_ones;          /* once this many masters answered 1 (or an array
	                           * starting with 1; with keys, 1 for each key), or
	                           * too few are left to, the others get only a short
	                           * grace (0: wait for every answer until the
	                           * round's end); then they count as unanswered */
	const char *what;         /* the resource, for messages */
	int64_t timeout_ms;       /* the round's bound, for messages */
	bool distinct;            /* refuse masters that are one server (the round
	                           * then returns DLOCK_ECONFIG): the answers count
	                           * toward a quorum */
	bool wait_sent;           /* the grace cuts only connections still being
	                           * made: a script already sent is waited for until
	                           * the round's end */
	int keys;                 /* a script that takes keys in any number (the
	                           * Redlock renewal): how many words has, each with
	                           * its arguments after all the keys, in turn; 0:
	                           * the script's own count */
	void (*answered)(void *data, const redisReply *reply); /* each master's
	                           * answer as it comes, on the round's thread, under
	                           * no lock of the round's; or NULL */
	void *data;
} rl_request;

/* One master's part of a round. */
typedef struct rl_call {
	redis_backend *master;
	redis_conn *conn;         /* while its script is in flight */
	redis_dial *dial;         /* while a connection is being made or identified */
	redisReply *reply;        /* the answer (not an error reply), or NULL */
	int rc;                   /* DLOCK_OK with reply, else why there is none */
	char why[200];            /* and its message */
	bool pending;
	bool skipped;             /* not sent (rl_request.only) */
	bool unanswered;          /* sent, and no answer by the round's end */
	bool late;                /* no answer by the round's end, sent or not */
	bool resumed;             /* its connection came from the pool or an earlier
	                           * round, and may have gone stale meanwhile */
	bool retried;             /* a stale connection was replaced */
	bool resent;              /* and the script sent again, after the first send's
	                           * answer was lost with its connection: the first
	                           * may have run, so the answer may show its effect */
	bool by_body;             /* resent as EVAL after NOSCRIPT */
} rl_call;

/*
 * Run req on every master (or those req->only picks) at once, until
 * until_us on the monotonic clock.  calls: rl->n_masters entries, filled
 * in.  kept (NULL, or one GArray * or NULL per master): where the
 * connection of each call left unanswered is kept.  Returns the number
 * of answers, DLOCK_ECANCELED when waiter was canceled meanwhile, or
 * DLOCK_ECONFIG when req->distinct found two masters to be one server
 * (the call of the second has the message).  Free the replies with
 * dlock__redlock_calls_clear().
 */
int dlock__redlock_round(redlock_backend *rl, const rl_request *req, dlock__waiter *waiter,
                         int64_t until_us, rl_call *calls, GArray **kept);
void dlock__redlock_calls_clear(rl_call *calls, int n);
/* After a round returned DLOCK_ECONFIG: that, with the message of the
 * call that found two masters to be one server. */
int dlock__redlock_conflict_error(const rl_call *calls, int n);
/* The most telling failure among the masters without an answer -- a
 * refusal that waiting cannot heal (DLOCK_EACCES, then DLOCK_ECONFIG),
 * then an error answer (DLOCK_EBACKEND), else DLOCK_EUNAVAILABLE -- into
 * *ret_rc (untouched when every master answered), and its message
 * ("label: why"); g_free. */
char *dlock__redlock_failure(const rl_call *calls, int n, int *ret_rc);

/* The server-side state of one Redlock hold.  A g_atomic_rc_box. */
typedef struct rl_lease {
	dlock__hold *hold;        /* referenced */
	redis_lease key;          /* names, token, id and mode, as a master's deferred
	                           * cleanup reads them; nothing else of it is used */
	int64_t ttl_ms;
	int64_t master_timeout_ms;
	bool renew;               /* watchdog on */
	GArray *kept[RL_MASTERS_MAX]; /* int: per master, connections left unanswered */
	/* guarded by the watch's mutex */
	int64_t confirmed_us;     /* CLOCK_BOOTTIME send of the last round a quorum confirmed */
	int64_t next_renew_us;
	bool suspended;
	bool lost;
	bool released;
	bool cleaned;             /* lost, and every master's background release queued */
} rl_lease;

/* Each master's bound in a round for a hold of ttl_ms: the option
 * master-timeout, else the smaller of the command timeout and TTL/20. */
int64_t dlock__redlock_master_timeout_ms(const redlock_backend *rl, int64_t ttl_ms);

/* The drift a Redlock allows for (docs/redis.md, "Redlock's acquire"): 1%
 * of the TTL plus 2 ms.  Microseconds. */
int64_t dlock__redlock_drift_us(int64_t ttl_ms);

rl_lease *dlock__redlock_lease_ref(rl_lease *lease);
void dlock__redlock_lease_unref(rl_lease *lease);

/* ---- redlock-watch.c ---- */
/* Start renewing the lease (watchdog on) and watching its validity. */
void dlock__redlock_watch(redlock_backend *rl, rl_lease *lease);
/* Stop; returns whether it had been lost (*ret_lost) or suspended.
 * Afterwards lease->cleaned tells whether its release is under way in the
 * background already. */
bool dlock__redlock_unwatch(redlock_backend *rl, rl_lease *lease, bool *ret_lost);
/* The core declared the hold lost (dlock__backend_abandon_fn). */
dlock__backend_abandon_fn dlock__redlock_abandon;
void dlock__redlock_watch_stop(redlock_backend *rl);

/* ---- redlock.c ---- */
/* DLOCK_ECONFIG, naming it, if uri names one master twice (the same
 * address or host name, whatever its case, and port). */
int dlock__redlock_check_masters(const redlock_backend *rl, const char *redacted_uri);
void dlock__redlock_close(redlock_backend *rl);
dlock__backend_acquire_begin_fn dlock__redlock_acquire_begin;
dlock__backend_acquire_step_fn dlock__redlock_acquire_step;
dlock__backend_acquire_end_fn dlock__redlock_acquire_end;
dlock__backend_release_fn dlock__redlock_release;
/* Release lease on every master at once; those that do not answer get
 * the background retry.  The number of masters that said it was ours,
 * and in *ret_not_ours the number that showed it was not. */
int dlock__redlock_release_all(redlock_backend *rl, rl_lease *lease, int *ret_not_ours);
/* Release lease on every master in the background (each master's deferred
 * release, which waits until it is done with the connections left
 * unanswered there). */
void dlock__redlock_release_later(redlock_backend *rl, rl_lease *lease);

/* ---- redlock-query.c ---- */
dlock__backend_query_fn dlock__redlock_query;

#endif
