/*
 * A Redlock round: one script sent to every master at once, the answers
 * read as they come, on one thread.  Each master's command goes out on a
 * pooled connection of that master (the blocking connect of a new one is
 * bounded by the round's end); then one poll() waits on all the sockets
 * together, so a round costs the slowest answer, not the sum of them.
 *
 * A reused connection that fails at once (the master restarted, or
 * dropped it while idle) is replaced and the command sent again, once;
 * a master that does not have the script cached gets it by EVAL.  A
 * master silent until the round's end gets DLOCK_EUNAVAILABLE, and the
 * connection is kept (dlock__redis_conn_keep()) for the cleanup to wait
 * on: the script may still run there.
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

/* Append the script (EVALSHA, or EVAL with its body) and send it. */
static bool send_script(dlock__backend *m, redis_conn *conn, redis_script script, bool by_body,
                        int nkeys, int nargs, const char *const *words)
{
	const char *argv[3 + 10];
	char nkeys_text[8];

	g_assert(nkeys + nargs <= 10);
	g_snprintf(nkeys_text, sizeof(nkeys_text), "%d", nkeys);
	argv[0] = by_body ? "EVAL" : "EVALSHA";
	argv[1] = by_body ? dlock__redis_script_body(m, script) : m->script_sha[script];
	argv[2] = nkeys_text;
	memcpy(&argv[3], words, sizeof(*words) * (size_t)(nkeys + nargs));
	return redisAppendCommandArgv(conn->ctx, 3 + nkeys + nargs, argv, NULL) == REDIS_OK &&
	       dlock__redis_flush(conn->ctx) == REDIS_OK;
}

/* The call ends without an answer: rc, with the message just recorded. */
static void fail_call(rl_call *call, int rc)
{
	call->rc = rc;
	g_strlcpy(call->why, dlock_last_error_message(), sizeof(call->why));
	call->pending = false;
}

/* Get a connection and send; a stale pooled one is replaced once. */
static void start_call(rl_call *call, const rl_request *req, dlock__waiter *waiter,
                       int64_t until_us)
{
	dlock__backend *m = call->master;

	for (;;) {
		int rc = dlock__redis_conn_get(m, waiter, until_us, &call->conn);
		bool reused;

		if (rc != DLOCK_OK) {
			call->conn = NULL;
			fail_call(call, rc);
			return;
		}
		if (send_script(m, call->conn, req->script, call->by_body, req->nkeys, req->nargs,
		                req->words)) {
			call->pending = true;
			return;
		}
		reused = call->conn->reused;
		dlock__redis_conn_put(m, call->conn, false);
		call->conn = NULL;
		if (!reused || call->retried) {
			fail_call(call, dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot send", m->label));
			return;
		}
		call->retried = true;
		dlock__redis_pool_clear(m);
	}
}

/* Read what arrived on call's socket: the call ends with an answer or a
 * failure, or stays pending for the rest of a partial reply. */
static void read_call(rl_call *call, const rl_request *req, dlock__waiter *waiter,
                      int64_t until_us)
{
	dlock__backend *m = call->master;
	redisReply *reply = NULL;

	if (redisBufferRead(call->conn->ctx) != REDIS_OK) {
		bool reused = call->conn->reused;

		/* A pooled connection the server had closed: once more, anew. */
		dlock__redis_conn_put(m, call->conn, false);
		call->conn = NULL;
		call->pending = false;
		if (reused && !call->retried && !(waiter && dlock__waiter_canceled(waiter))) {
			call->retried = true;
			dlock__redis_pool_clear(m);
			start_call(call, req, waiter, until_us);
			return;
		}
		fail_call(call, dlock__error(DLOCK_EUNAVAILABLE, "%s: connection lost", m->label));
		return;
	}
	if (redisGetReplyFromReader(call->conn->ctx, (void **)&reply) != REDIS_OK) {
		fail_call(call, dlock__error(DLOCK_EBACKEND, "%s: unreadable reply", m->label));
		dlock__redis_conn_put(m, call->conn, false);
		call->conn = NULL;
		return;
	}
	if (!reply)
		return; /* more to come */
	if (dlock__redis_is_noscript(reply) && !call->by_body) {
		freeReplyObject(reply);
		call->by_body = true;
		if (!send_script(m, call->conn, req->script, true, req->nkeys, req->nargs, req->words)) {
			dlock__redis_conn_put(m, call->conn, false);
			call->conn = NULL;
			fail_call(call, dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot send", m->label));
		}
		return;
	}
	call->pending = false;
	if (dlock__redis_reply_error(m, reply, "script") == DLOCK_OK) {
		call->reply = reply;
	} else {
		fail_call(call, DLOCK_EBACKEND);
		freeReplyObject(reply);
	}
	dlock__redis_conn_put(m, call->conn, true);
	call->conn = NULL;
}

/* Whether enough masters answered 1 for the round to end sooner. */
static bool enough(const rl_request *req, const rl_call *calls, int n)
{
	int ones = 0;

	for (int i = 0; req->enough_ones > 0 && i < n; i++)
		if (calls[i].reply && calls[i].reply->type == REDIS_REPLY_INTEGER &&
		    calls[i].reply->integer == 1)
			ones++;
	return req->enough_ones > 0 && ones >= req->enough_ones;
}

/* The first pending call's socket is the one a cancel shuts down. */
static int watched_fd(const rl_call *calls, int n)
{
	for (int i = 0; i < n; i++)
		if (calls[i].pending)
			return calls[i].conn->ctx->fd;
	return -1;
}

int dlock__redlock_round(dlock__backend *rl, const rl_request *req, dlock__waiter *waiter,
                         int64_t until_us, rl_call *calls, GArray **kept)
{
	struct pollfd fds[RL_MASTERS_MAX];
	int map[RL_MASTERS_MAX];
	int64_t start_us = dlock__mono_us();
	bool canceled = false, early = false;
	int answered = 0;

	g_assert(rl->n_masters <= RL_MASTERS_MAX);
	for (int i = 0; i < rl->n_masters; i++) {
		calls[i] = (rl_call){ .master = rl->masters[i], .rc = DLOCK_OK };
		if (req->only && !req->only[i]) {
			calls[i].skipped = true;
			continue;
		}
		if (waiter && dlock__waiter_canceled(waiter)) {
			canceled = true;
			fail_call(&calls[i], dlock__error_canceled(req->what));
			continue;
		}
		start_call(&calls[i], req, waiter, until_us);
	}
	for (;;) {
		int64_t left_us;
		int nfds = 0, fd, ready;

		/* Enough answers: the others get as long again as those took
		 * (2 ms at least), so a healthy master still answers and a
		 * silent one holds nobody up. */
		if (!early && enough(req, calls, rl->n_masters)) {
			int64_t now = dlock__mono_us();

			early = true;
			until_us = MIN(until_us, now + MAX(now - start_us, 2000));
		}
		left_us = dlock__remaining_us(until_us);

		for (int i = 0; i < rl->n_masters; i++) {
			if (!calls[i].pending)
				continue;
			fds[nfds] = (struct pollfd){ .fd = calls[i].conn->ctx->fd, .events = POLLIN };
			map[nfds++] = i;
		}
		if (nfds == 0 || left_us == 0 || canceled)
			break;
		fd = watched_fd(calls, rl->n_masters);
		if (!dlock__waiter_io_begin(waiter, fd)) {
			canceled = true;
			break;
		}
		ready = poll(fds, (nfds_t)nfds, (int)MIN((left_us + 999) / 1000, INT_MAX));
		canceled = dlock__waiter_io_end(waiter);
		if (ready < 0 && errno != EINTR)
			break;
		for (int k = 0; ready > 0 && k < nfds; k++)
			if (fds[k].revents && !(canceled && fds[k].fd == fd))
				read_call(&calls[map[k]], req, waiter, until_us);
	}
	for (int i = 0; i < rl->n_masters; i++) {
		rl_call *call = &calls[i];

		if (call->pending) {
			/* The script may still run there: the cleanup waits for it. */
			int kept_fd = dlock__redis_conn_keep(call->conn);

			if (kept_fd >= 0 && kept && kept[i])
				g_array_append_val(kept[i], kept_fd);
			else if (kept_fd >= 0)
				close(kept_fd);
			dlock__redis_conn_put(call->master, call->conn, false);
			call->conn = NULL;
			call->unanswered = true;
			fail_call(call, canceled ? dlock__error_canceled(req->what)
			                         : dlock__error(DLOCK_EUNAVAILABLE, "%s: no answer within %"
			                                        PRId64 " ms", call->master->label,
			                                        req->timeout_ms));
		}
		if (call->reply)
			answered++;
	}
	return canceled ? DLOCK_ECANCELED : answered;
}

void dlock__redlock_calls_clear(rl_call *calls, int n)
{
	for (int i = 0; i < n; i++)
		if (calls[i].reply)
			freeReplyObject(calls[i].reply);
}
