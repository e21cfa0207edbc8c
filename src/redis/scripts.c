/*
 * Running the Lua scripts of the lease protocol and its wait queue, and
 * Redlock's, by EVALSHA.  Each is one atomic step on the server, so no
 * other client can slip between the comparison and the change, and a
 * release hands the lock to the next waiter with no moment at which it is
 * free.  The scripts themselves are the files of lua/, each saying what
 * it takes and answers; embed.py makes them C at build time.
 */
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"

void dlock__redis_release_words(const redis_names *names, const char *token, const char *ticket,
                                const char *id, const char *mode, const char **words)
{
	words[0] = names->key;
	words[1] = names->fence;
	words[2] = names->queue;
	words[3] = names->permits;
	words[4] = token;
	words[5] = names->released;
	words[6] = names->wait;
	words[7] = ticket;
	words[8] = *ticket ? id : "";
	words[9] = mode;
}

bool dlock__redis_is_noscript(const redisReply *reply)
{
	return reply->type == REDIS_REPLY_ERROR && reply->len >= 8 &&
	       strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

int dlock__redis_eval(dlock__backend *b, redis_conn *conn, redis_script script, int nkeys,
                      int nargs, const char **words, redisReply **ret)
{
	const char *argv[3 + 11];
	char nkeys_text[8];
	redisReply *reply;
	int argc = 3 + nkeys + nargs;
	int rc;

	g_assert(nkeys + nargs <= 11);
	g_snprintf(nkeys_text, sizeof(nkeys_text), "%d", nkeys);
	argv[0] = "EVALSHA";
	argv[1] = dlock__redis_script_sha1[script];
	argv[2] = nkeys_text;
	memcpy(&argv[3], words, sizeof(*words) * (size_t)(nkeys + nargs));

	rc = dlock__redis_command(b, conn, argc, argv, NULL, &reply);
	if (rc == DLOCK_OK && dlock__redis_is_noscript(reply)) {
		const char *load[3] = { "SCRIPT", "LOAD", dlock__redis_script_text[script] };

		freeReplyObject(reply);
		rc = dlock__redis_command(b, conn, 3, load, NULL, &reply);
		if (rc != DLOCK_OK)
			return rc;
		rc = dlock__redis_reply_error(b, reply, "SCRIPT LOAD");
		freeReplyObject(reply);
		if (rc != DLOCK_OK)
			return rc;
		rc = dlock__redis_command(b, conn, argc, argv, NULL, &reply);
	}
	if (rc != DLOCK_OK)
		return rc;
	rc = dlock__redis_reply_error(b, reply, "script");
	if (rc != DLOCK_OK) {
		freeReplyObject(reply);
		return rc;
	}
	*ret = reply;
	return DLOCK_OK;
}

int dlock__redis_eval_pooled(dlock__backend *b, dlock__waiter *waiter, int64_t deadline_us,
                             redis_script script, int nkeys, int nargs, const char **words,
                             redisReply **ret, bool *ret_uncertain, GArray *kept)
{
	int rc = DLOCK_EUNAVAILABLE;

	for (int attempt = 0; attempt < 2; attempt++) {
		redis_conn *conn;
		bool reused, timed_out, canceled, unanswered;

		rc = dlock__redis_conn_get(b, waiter, deadline_us, &conn);
		if (rc != DLOCK_OK)
			return rc;
		reused = conn->reused;
		/* Unchanged on the common path, so no system call is spent on it. */
		dlock__redis_conn_timeout(conn, MIN(dlock__remaining_us(deadline_us),
		                                    b->command_timeout_ms * 1000));
		/* The cancel path shuts this socket down to end the wait. */
		if (!dlock__waiter_io_begin(waiter, conn->ctx->fd)) {
			dlock__redis_conn_put(b, conn, true);
			return dlock__error(DLOCK_ECANCELED, "%s: canceled", b->label);
		}
		rc = dlock__redis_eval(b, conn, script, nkeys, nargs, words, ret);
		timed_out = conn->timed_out;
		canceled = dlock__waiter_io_end(waiter);
		unanswered = rc == DLOCK_EUNAVAILABLE || rc == DLOCK_ETIMEDOUT;
		if (unanswered && kept) {
			int fd = dlock__redis_conn_keep(conn);

			if (fd >= 0)
				g_array_append_val(kept, fd);
		}
		/* A canceled connection may have been shut down, and an
		 * unanswered one may still get its answer: never pool either. */
		dlock__redis_conn_put(b, conn, !unanswered && !canceled);
		if (!unanswered)
			return rc;
		*ret_uncertain = true;
		if (canceled)
			return dlock__error(DLOCK_ECANCELED, "%s: canceled while waiting for an answer",
			                    b->label);
		/* A timeout means a silent server, not a stale connection: a
		 * new connection would only wait out a second timeout. */
		if (!reused || timed_out || dlock__remaining_us(deadline_us) == 0)
			break;
		/* The pooled connections are likely all stale: start afresh. */
		dlock__redis_pool_clear(b);
	}
	return rc;
}
