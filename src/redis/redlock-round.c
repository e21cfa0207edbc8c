/* SPDX-License-Identifier: MIT */
/*
 * A Redlock round: one script sent to every master at once, the answers
 * read as they come, on one thread.  A master with a pooled connection
 * gets the script at once; one without gets a new connection made without
 * blocking (redlock-dial.c: the TCP connect, then AUTH, SELECT and INFO server in
 * one write) and the script once that is done.  One poll() waits on every
 * socket -- connecting, setting up or waiting for an answer -- so a round
 * costs the slowest master, not the sum, and a master that stalls at any
 * step costs at most the round's bound, never another master's time.
 *
 * Once the outcome is settled (as many masters said yes as the round
 * needs, or too few are left to), the masters still out get a short
 * grace; a round that waits for its scripts (req->wait_sent) cuts only the
 * connections still being made, so a master that stalls costs it the
 * bound once, on the connection it stalled on, and no more after that.
 *
 * A reused connection that fails at once (the master restarted, or
 * dropped it while idle) is replaced and the command sent again, once;
 * a master that does not have the script cached gets it by EVAL.  At the
 * round's end what has arrived is read before anything is given up.  A
 * master silent until then gets DLOCK_EUNAVAILABLE: if its script was
 * sent, the connection is kept (dlock__redis_conn_keep()) for the cleanup
 * to wait on, since the script may still run there; if it was still being
 * connected, the connection is parked for the next round, so a master that
 * needs longer than one round to connect still gets there.
 *
 * A round that counts masters toward a quorum (req->distinct) refuses two
 * masters that are one server, told by the run_id each new connection
 * asks for: one server named twice would count twice.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "redlock.h"

/* Once the outcome is settled, the masters still out get as long again as
 * the round took so far, and at least this long. */
#define GRACE_MIN_US 2000

typedef struct round {
	redlock_backend *rl;
	const rl_request *req;
	dlock__waiter *waiter;
	rl_call *calls;
	int64_t start_us;
	int64_t until_us;
	bool final;               /* the last look: nothing more is sent */
	bool conflict;            /* two masters turned out to be one server */
} round;

/* Append the request's script (EVALSHA, or EVAL with its body) and send
 * it. */
static bool send_script(redis_backend *m, redis_conn *conn, const rl_request *req, bool by_body)
{
	int keys = req->keys > 0 ? req->keys : dlock__redis_script_keys[req->script];
	const char *fixed[SCRIPT_ARGV_MAX], **argv = fixed;
	char nkeys_text[8];
	bool sent;
	int argc;

	if (req->keys > 0)
		argv = g_new(const char *, 3 + dlock__redis_script_words_for(req->script, keys));
	argc = dlock__redis_script_argv_keys(req->script, by_body, req->words, keys, argv, nkeys_text);
	sent = redisAppendCommandArgv(conn->ctx, argc, argv, NULL) == REDIS_OK &&
	       dlock__redis_flush(conn->ctx) == REDIS_OK;
	if (argv != fixed)
		g_free(argv);
	return sent;
}

/* The call ends without an answer: rc, with the message just recorded. */
static void fail_call(rl_call *call, int rc)
{
	call->rc = rc;
	g_strlcpy(call->why, dlock_last_error_message(), sizeof(call->why));
	call->pending = false;
}

/* The round's end came first: DLOCK_EUNAVAILABLE, "no answer" (what)
 * within the time the round took. */
static void fail_late(const round *r, rl_call *call, const char *what)
{
	call->late = true;
	fail_call(call, dlock__error(DLOCK_EUNAVAILABLE, "%s: %s within %" PRId64 " ms",
	                             call->master->label, what,
	                             (dlock__mono_us() - r->start_us) / 1000));
}

/* Begin a new connection to call's master over addrs (taken). */
static void dial(rl_call *call, char **addrs)
{
	int rc = dlock__redis_dial_start(call->master, addrs, &call->dial);

	if (rc == DLOCK_OK)
		call->pending = true;
	else
		fail_call(call, rc);
}

/* Resolve call's master (at once for an address) and begin connecting. */
static void dial_anew(round *r, rl_call *call)
{
	char **addrs;
	int rc = dlock__resolve(call->master->resolver, call->master->host, r->waiter, r->until_us,
	                        &addrs);

	if (rc == DLOCK_OK)
		dial(call, addrs);
	else
		fail_call(call, dlock__error(rc, "%s: %s", call->master->label,
		                             dlock_last_error_message()));
}

/* Another master known to be the same server as master i, or -1. */
static int twin_of(const round *r, int i, char *id, size_t size)
{
	char other[sizeof(r->rl->masters[0]->run_id)];

	dlock__redis_run_id(r->rl->masters[i], id, size);
	if (!id[0] || strcmp(id, "?") == 0)
		return -1;
	for (int k = 0; k < r->rl->n_masters; k++) {
		if (k == i)
			continue;
		dlock__redis_run_id(r->rl->masters[k], other, sizeof(other));
		if (strcmp(id, other) == 0)
			return k;
	}
	return -1;
}

/* The master's server must be known to be none of the others'. */
static bool distinct(round *r, rl_call *call, int i, redis_conn *conn)
{
	char id[sizeof(call->master->run_id)];
	int twin = twin_of(r, i, id, sizeof(id));

	if (twin < 0)
		return true;
	dlock__redis_conn_put(call->master, conn, true);
	r->conflict = true;
	fail_call(call, dlock__error(DLOCK_ECONFIG, "%s: masters %s and %s are one server (run_id "
	                             "%.12s...): a Redlock needs independent masters", r->rl->label,
	                             r->rl->masters[MIN(i, twin)]->label,
	                             r->rl->masters[MAX(i, twin)]->label, id));
	return false;
}

/* A connection of call's master is ready: send the script on it. */
static void use_conn(round *r, rl_call *call, redis_conn *conn)
{
	redis_backend *m = call->master;
	int i = (int)(call - r->calls);
	char id[sizeof(m->run_id)];
	bool reused;

	if (r->req->distinct) {
		dlock__redis_run_id(m, id, sizeof(id));
		if (!id[0]) {
			int rc;

			call->resumed = conn->reused;
			rc = dlock__redis_dial_identify(m, conn, &call->dial);
			if (rc == DLOCK_OK)
				call->pending = true;
			else
				fail_call(call, rc);
			return;
		}
		if (!distinct(r, call, i, conn))
			return;
	}
	if (r->final) {
		dlock__redis_conn_put(m, conn, true);
		fail_late(r, call, "no answer");
		return;
	}
	if (send_script(m, conn, r->req, call->by_body)) {
		call->conn = conn;
		call->pending = true;
		return;
	}
	reused = conn->reused;
	dlock__redis_conn_put(m, conn, false);
	if (!reused || call->retried) {
		fail_call(call, dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot send", m->label));
		return;
	}
	/* A pooled connection the server had closed: once more, anew. */
	call->retried = true;
	dlock__redis_pool_clear(m);
	dial_anew(r, call);
}

/* Read what arrived on call's socket: the call ends with an answer or a
 * failure, or stays pending for the rest of a partial reply. */
static void read_call(round *r, rl_call *call)
{
	redis_backend *m = call->master;
	redis_conn *conn = call->conn;
	redisReply *reply = NULL;
	int rc;

	if (redisBufferRead(conn->ctx) != REDIS_OK) {
		bool reused = conn->reused;

		call->conn = NULL;
		call->pending = false;
		dlock__redis_conn_put(m, conn, false);
		if (reused && !call->retried && !r->final &&
		    !(r->waiter && dlock__waiter_canceled(r->waiter))) {
			call->retried = true;
			call->resent = true;
			dlock__redis_pool_clear(m);
			dial_anew(r, call);
			return;
		}
		fail_call(call, dlock__error(DLOCK_EUNAVAILABLE, "%s: connection lost", m->label));
		return;
	}
	if (redisGetReplyFromReader(conn->ctx, (void **)&reply) != REDIS_OK) {
		fail_call(call, dlock__error(DLOCK_EBACKEND, "%s: unreadable reply", m->label));
		dlock__redis_conn_put(m, conn, false);
		call->conn = NULL;
		return;
	}
	if (!reply)
		return; /* more to come */
	call->conn = NULL;
	call->pending = false;
	if (dlock__redis_is_noscript(reply) && !call->by_body) {
		freeReplyObject(reply);
		call->by_body = true;
		conn->reused = false;
		use_conn(r, call, conn); /* the script did not run: by its body */
		return;
	}
	rc = dlock__redis_reply_error(m, reply, "script");
	if (rc == DLOCK_OK) {
		call->reply = reply;
		if (r->req->answered)
			r->req->answered(r->req->data, reply);
	} else {
		/* DLOCK_ECONFIG for a cluster's node, which no Redlock is. */
		fail_call(call, rc);
		freeReplyObject(reply);
	}
	dlock__redis_conn_put(m, conn, true);
}

/* A new or identified connection's step, when its socket is ready. */
static void step_dial(round *r, rl_call *call)
{
	redis_conn *conn = NULL;
	int rc = dlock__redis_dial_step(call->dial, &conn);

	if (rc == 1)
		return;
	call->dial = NULL;
	call->pending = false;
	if (rc == DLOCK_OK) {
		use_conn(r, call, conn);
	} else if (call->resumed && !call->retried && !r->final) {
		/* Pooled or left by an earlier round, and stale: once anew. */
		call->retried = true;
		dial_anew(r, call);
	} else {
		fail_call(call, rc);
	}
}

/* Every master that has no connection to reuse or resume: their host
 * names resolved together, then a connection begun to each. */
static void dial_needed(round *r, const bool *need)
{
	redlock_backend *rl = r->rl;
	const char *hosts[RL_MASTERS_MAX];
	char **addrs[RL_MASTERS_MAX];
	int map[RL_MASTERS_MAX];
	unsigned n = 0;
	int rc;

	for (int i = 0; i < rl->n_masters; i++)
		if (need[i]) {
			map[n] = i;
			hosts[n++] = rl->masters[i]->host;
		}
	if (n == 0)
		return;
	rc = dlock__resolve_each(rl->masters[map[0]]->resolver, hosts, n, r->waiter, r->until_us,
	                         addrs);
	for (unsigned k = 0; k < n; k++) {
		rl_call *call = &r->calls[map[k]];

		if (addrs[k])
			dial(call, addrs[k]);
		else if (rc == DLOCK_OK)
			fail_call(call, dlock__error(DLOCK_EUNAVAILABLE, "%s: host name '%s' did not "
			                             "resolve in time", call->master->label, hosts[k]));
		else
			fail_call(call, dlock__error(rc, "%s: %s", call->master->label,
			                             dlock_last_error_message()));
	}
}

/* Whether a master said yes: 1, or an array whose first element is 1. */
static bool says_yes(const redisReply *reply)
{
	return reply && ((reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) ||
	                 (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
	                  reply->element[0]->type == REDIS_REPLY_INTEGER &&
	                  reply->element[0]->integer == 1));
}

/* Whether a master said yes for key k of a request with keys in any
 * number: an array with 1 at k + 1 (its element 0 is for all of them). */
static bool says_yes_for(const redisReply *reply, int keys, int k)
{
	return reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == (size_t)keys + 1 &&
	       reply->element[k + 1]->type == REDIS_REPLY_INTEGER && reply->element[k + 1]->integer == 1;
}

/* The same for each key: enough masters said yes for it, or too few are
 * left to.  One key still open keeps the round open, for its sake: a
 * request that takes keys in any number has what each key's answers
 * decide done as they come (rl_request.answered). */
static bool decided_each(const round *r)
{
	int keys = r->req->keys, enough = r->req->enough_ones;

	for (int k = 0; k < keys; k++) {
		int yes = 0, open = 0;

		for (int i = 0; i < r->rl->n_masters; i++) {
			if (r->calls[i].pending)
				open++;
			else if (says_yes_for(r->calls[i].reply, keys, k))
				yes++;
		}
		if (yes < enough && yes + open >= enough)
			return false;
	}
	return true;
}

/* Whether the round's outcome is settled: enough masters said yes, or too
 * few are left to. */
static bool decided(const round *r)
{
	int yes = 0, open = 0;

	if (r->req->enough_ones <= 0)
		return false;
	if (r->req->keys > 0)
		return decided_each(r);
	for (int i = 0; i < r->rl->n_masters; i++) {
		if (r->calls[i].pending)
			open++;
		else if (says_yes(r->calls[i].reply))
			yes++;
	}
	return yes >= r->req->enough_ones || yes + open < r->req->enough_ones;
}

/* Start every call: on a pooled connection, on the one an earlier round
 * parked, or on a new one. */
static bool start(round *r)
{
	redlock_backend *rl = r->rl;
	bool need[RL_MASTERS_MAX] = { false };

	for (int i = 0; i < rl->n_masters; i++) {
		rl_call *call = &r->calls[i];
		redis_conn *conn;

		*call = (rl_call){ .master = rl->masters[i], .rc = DLOCK_OK };
		if (r->req->only && !r->req->only[i]) {
			call->skipped = true;
		} else if (r->waiter && dlock__waiter_canceled(r->waiter)) {
			fail_call(call, dlock__error_canceled(r->req->what));
		} else if ((conn = dlock__redis_conn_pooled(call->master))) {
			use_conn(r, call, conn);
		} else if ((call->dial = dlock__redis_dial_unpark(call->master))) {
			call->resumed = true;
			call->pending = true;
		} else {
			need[i] = true;
		}
	}
	if (r->waiter && dlock__waiter_canceled(r->waiter))
		return false;
	dial_needed(r, need);
	return !(r->waiter && dlock__waiter_canceled(r->waiter));
}

/* The socket a call waits on, and for what. */
static struct pollfd call_pollfd(const rl_call *call)
{
	if (call->dial)
		return (struct pollfd){ .fd = dlock__redis_dial_fd(call->dial),
		                        .events = dlock__redis_dial_events(call->dial) };
	return (struct pollfd){ .fd = call->conn->ctx->fd, .events = POLLIN };
}

/* Whether a script is in flight on any call. */
static bool script_pending(const round *r)
{
	for (int i = 0; i < r->rl->n_masters; i++)
		if (r->calls[i].pending && r->calls[i].conn)
			return true;
	return false;
}

/* Wait for and handle what comes, until every call has ended, the round's
 * bound or a cancel.  Returns whether the waiter was canceled; *ret_fd,
 * the socket a cancel shut down. */
static bool run(round *r, int *ret_fd)
{
	struct pollfd fds[RL_MASTERS_MAX];
	int map[RL_MASTERS_MAX];
	int64_t grace_until = INT64_MAX;
	bool canceled = false;

	*ret_fd = -1;
	for (;;) {
		int nfds = 0, ready;
		int64_t left_us;

		if (grace_until == INT64_MAX && decided(r)) {
			int64_t now = dlock__mono_us();

			grace_until = now + MAX(now - r->start_us, GRACE_MIN_US);
		}
		if (grace_until != INT64_MAX && !(r->req->wait_sent && script_pending(r)))
			r->until_us = MIN(r->until_us, grace_until);
		for (int i = 0; i < r->rl->n_masters; i++)
			if (r->calls[i].pending) {
				fds[nfds] = call_pollfd(&r->calls[i]);
				map[nfds++] = i;
			}
		if (nfds == 0)
			return false;
		/* At the bound, one last look at what has arrived. */
		left_us = dlock__remaining_us(r->until_us);
		r->final = left_us == 0;
		*ret_fd = fds[0].fd;
		if (!dlock__waiter_io_begin(r->waiter, *ret_fd))
			return true;
		ready = poll(fds, (nfds_t)nfds, (int)MIN((left_us + 999) / 1000, INT_MAX));
		canceled = dlock__waiter_io_end(r->waiter);
		if (ready < 0 && errno != EINTR)
			return canceled;
		for (int k = 0; ready > 0 && k < nfds; k++) {
			rl_call *call = &r->calls[map[k]];

			if (!fds[k].revents || (canceled && fds[k].fd == *ret_fd))
				continue;
			if (call->dial)
				step_dial(r, call);
			else
				read_call(r, call);
		}
		if (canceled || r->final)
			return canceled;
	}
}

/* End the calls still out when the round ends. */
static void finish(round *r, bool canceled, int shut_fd, GArray **kept)
{
	for (int i = 0; i < r->rl->n_masters; i++) {
		rl_call *call = &r->calls[i];

		if (!call->pending)
			continue;
		if (call->conn) {
			/* The script may still run there: the cleanup waits for it. */
			int kept_fd = dlock__redis_conn_keep(call->conn);

			if (kept_fd >= 0 && kept && kept[i])
				g_array_append_val(kept[i], kept_fd);
			else if (kept_fd >= 0)
				close(kept_fd);
			dlock__redis_conn_put(call->master, call->conn, false);
			call->conn = NULL;
			call->unanswered = true;
		} else if (canceled && dlock__redis_dial_fd(call->dial) == shut_fd) {
			dlock__redis_dial_free(call->dial);
		} else {
			/* Nothing was sent on it: the next round goes on with it. */
			dlock__redis_dial_park(call->master, call->dial);
		}
		call->dial = NULL;
		if (canceled)
			fail_call(call, dlock__error_canceled(r->req->what));
		else
			fail_late(r, call, call->unanswered ? "no answer" : "not connected");
	}
}

int dlock__redlock_round(redlock_backend *rl, const rl_request *req, dlock__waiter *waiter,
                         int64_t until_us, rl_call *calls, GArray **kept)
{
	round r = { rl, req, waiter, calls, dlock__mono_us(), until_us, false, false };
	bool canceled;
	int answered = 0, shut_fd = -1;

	g_assert(rl->n_masters <= RL_MASTERS_MAX);
	canceled = !start(&r) || run(&r, &shut_fd);
	finish(&r, canceled, shut_fd, kept);
	for (int i = 0; i < rl->n_masters; i++)
		if (calls[i].reply)
			answered++;
	if (canceled)
		return DLOCK_ECANCELED;
	return r.conflict ? DLOCK_ECONFIG : answered;
}

/* The message of the call that found two masters to be one server. */
int dlock__redlock_conflict_error(const rl_call *calls, int n)
{
	for (int i = 0; i < n; i++)
		if (calls[i].rc == DLOCK_ECONFIG)
			return dlock__error(DLOCK_ECONFIG, "%s", calls[i].why);
	return dlock__error(DLOCK_ECONFIG, "two masters are one server");
}

void dlock__redlock_calls_clear(rl_call *calls, int n)
{
	for (int i = 0; i < n; i++)
		if (calls[i].reply)
			freeReplyObject(calls[i].reply);
}

/* How telling a master's failure is: a refusal that waiting cannot heal
 * (credentials, settings) before an error answer before silence. */
static int failure_rank(int rc)
{
	switch (rc) {
	case DLOCK_EACCES:
		return 3;
	case DLOCK_ECONFIG:
		return 2;
	case DLOCK_EBACKEND:
		return 1;
	default:
		return 0;
	}
}

char *dlock__redlock_failure(const rl_call *calls, int n, int *ret_rc)
{
	int best = -1;

	for (int i = 0; i < n; i++)
		if (!calls[i].skipped && !calls[i].reply &&
		    (best < 0 || failure_rank(calls[i].rc) > failure_rank(calls[best].rc)))
			best = i;
	if (best < 0)
		return g_strdup("no failure");
	*ret_rc = failure_rank(calls[best].rc) > 0 ? calls[best].rc : DLOCK_EUNAVAILABLE;
	return g_strdup(calls[best].why);
}
