/*
 * Command connections: connect with a bounded timeout, authenticate,
 * select the database, and keep idle connections in a small pool.
 *
 * hiredis 0.14 writes with write(2), which raises SIGPIPE when the server
 * has closed the socket and kills a host program that does not ignore it.
 * So dlock never lets hiredis write: commands are appended to its buffer
 * and sent here with send(MSG_NOSIGNAL), which reports EPIPE instead;
 * with the buffer empty, redisGetReply only reads.  This costs no system
 * call beyond the send itself (blocking the signal around each command
 * would cost two).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "thread.h"

#define POOL_IDLE_MAX 8

static struct timeval timeval_of(int64_t us)
{
	struct timeval tv;

	if (us < 1000)
		us = 1000;
	tv.tv_sec = us / 1000000;
	tv.tv_usec = us % 1000000;
	return tv;
}

void dlock__redis_conn_timeout(redis_conn *conn, int64_t timeout_us)
{
	if (timeout_us < 1000)
		timeout_us = 1000;
	if (conn->timeout_us != timeout_us) {
		redisSetTimeout(conn->ctx, timeval_of(timeout_us));
		conn->timeout_us = timeout_us;
	}
}

int dlock__redis_reply_error(dlock__backend *b, const redisReply *reply, const char *what)
{
	if (reply->type != REDIS_REPLY_ERROR)
		return DLOCK_OK;
	return dlock__error(DLOCK_EBACKEND, "%s: %s: %.*s", b->label, what, (int)reply->len, reply->str);
}

int dlock__redis_flush(redisContext *ctx)
{
	size_t len = sdslen(ctx->obuf);
	size_t off = 0;

	while (off < len) {
		ssize_t n = send(ctx->fd, ctx->obuf + off, len - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ctx->err = REDIS_ERR_IO;
			g_strlcpy(ctx->errstr, errno == EAGAIN ? "timed out sending" : g_strerror(errno),
			          sizeof(ctx->errstr));
			return REDIS_ERR;
		}
		off += (size_t)n;
	}
	sdsclear(ctx->obuf);
	return REDIS_OK;
}

redisReply *dlock__redis_call(redisContext *ctx, int argc, const char **argv, const size_t *lens)
{
	redisReply *reply = NULL;

	if (redisAppendCommandArgv(ctx, argc, argv, lens) != REDIS_OK ||
	    dlock__redis_flush(ctx) != REDIS_OK || redisGetReply(ctx, (void **)&reply) != REDIS_OK)
		return NULL;
	return reply;
}

/*
 * Run one command on a bare context (used while connecting), waiting at
 * most a command timeout and never past deadline_us: each setup command
 * gets what is left of the connect's time, not a fresh timeout of its own.
 */
static int setup_command(dlock__backend *b, redisContext *ctx, int64_t deadline_us,
                         const char *what, int argc, const char **argv)
{
	int64_t left = dlock__remaining_us(deadline_us);
	redisReply *reply;
	int rc;

	if (left <= 0)
		return dlock__error(DLOCK_ETIMEDOUT, "%s: %s: no time left", b->label, what);
	redisSetTimeout(ctx, timeval_of(MIN(left, b->command_timeout_ms * 1000)));
	/* hiredis leaves errno as the failed read or send set it. */
	errno = 0;
	reply = dlock__redis_call(ctx, argc, argv, NULL);
	if (!reply && (errno == EAGAIN || errno == EWOULDBLOCK))
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: %s: no answer within %" G_GINT64_FORMAT " ms",
		                    b->label, what, MIN(left, b->command_timeout_ms * 1000) / 1000);
	if (!reply)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: %s: %s", b->label, what,
		                    ctx->errstr[0] ? ctx->errstr : "no reply");
	rc = dlock__redis_reply_error(b, reply, what);
	freeReplyObject(reply);
	return rc;
}

/*
 * Connect to the host's addresses in turn by deadline_us.  The name is
 * resolved here, bounded by the same deadline (hiredis would resolve it
 * with a getaddrinfo() no deadline can stop), and hiredis gets IP
 * literals; messages keep the name.
 */
static redisContext *connect_tcp(dlock__backend *b, int64_t deadline_us, int *ret_rc)
{
	redisContext *ctx = NULL;
	char **addrs;
	int rc;

	rc = dlock__resolve(b->resolver, b->host, deadline_us, &addrs);
	if (rc != DLOCK_OK) {
		char *why = g_strdup(dlock_last_error_message());

		*ret_rc = dlock__error(rc, "%s: %s", b->label, why);
		g_free(why);
		return NULL;
	}
	for (int i = 0; addrs[i]; i++) {
		int64_t left = dlock__remaining_us(deadline_us);

		if (ctx)
			redisFree(ctx);
		if (left <= 0) {
			ctx = NULL;
			break;
		}
		ctx = redisConnectWithTimeout(addrs[i], b->port, timeval_of(left));
		if (!ctx || !ctx->err)
			break;
	}
	g_strfreev(addrs);
	if (!ctx) {
		*ret_rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot connect in the time left", b->label);
		return NULL;
	}
	return ctx;
}

static int canceled_error(dlock__backend *b)
{
	return dlock__error(DLOCK_ECANCELED, "%s: canceled while waiting for the server", b->label);
}

/*
 * Connect, AUTH and SELECT, all of it within timeout_us: the resolve, the
 * TCP connect and each setup command get what is left of one deadline, so
 * a slow server cannot make a connect take a timeout per step.  A cancel
 * of waiter (may be NULL) interrupts the AUTH and SELECT, which can wait
 * out a whole command timeout.
 */
static redisContext *connect_for(dlock__backend *b, dlock__waiter *waiter, int64_t timeout_us,
                                 bool select, int *ret_rc)
{
	int64_t deadline_us = dlock__mono_us() + timeout_us;
	redisContext *ctx;
	int rc = DLOCK_OK;

	if (timeout_us <= 0) {
		*ret_rc = dlock__error(DLOCK_ETIMEDOUT, "%s: no time left to connect", b->label);
		return NULL;
	}
	if (b->unix_path) {
		ctx = redisConnectUnixWithTimeout(b->unix_path, timeval_of(timeout_us));
	} else {
		ctx = connect_tcp(b, deadline_us, ret_rc);
		if (!ctx)
			return NULL;
	}
	if (!ctx) {
		*ret_rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot allocate a connection", b->label);
		return NULL;
	}
	dlock__set_cloexec(ctx->fd);
	if (ctx->err) {
		*ret_rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot connect: %s", b->label, ctx->errstr);
		redisFree(ctx);
		return NULL;
	}
	if (waiter && !dlock__waiter_set_io_fd(waiter, ctx->fd))
		rc = canceled_error(b);
	if (rc == DLOCK_OK && b->password) {
		const char *argv[3] = { "AUTH", b->user ? b->user : b->password, b->password };

		rc = setup_command(b, ctx, deadline_us, "authentication failed", b->user ? 3 : 2, argv);
	}
	if (rc == DLOCK_OK && select && b->db != 0) {
		char db[16];
		const char *argv[2] = { "SELECT", db };

		g_snprintf(db, sizeof(db), "%d", b->db);
		rc = setup_command(b, ctx, deadline_us, "SELECT failed", 2, argv);
	}
	if (waiter) {
		dlock__waiter_set_io_fd(waiter, -1);
		if (dlock__waiter_canceled(waiter))
			rc = canceled_error(b); /* the socket may have been shut down */
	}
	if (rc != DLOCK_OK) {
		redisFree(ctx);
		*ret_rc = rc;
		return NULL;
	}
	/* The timeout a caller that sets none of its own reads with. */
	redisSetTimeout(ctx, timeval_of(MIN(timeout_us, b->command_timeout_ms * 1000)));
	return ctx;
}

redisContext *dlock__redis_connect(dlock__backend *b, int64_t timeout_us, bool select, int *ret_rc)
{
	return connect_for(b, NULL, timeout_us, select, ret_rc);
}

int dlock__redis_conn_get(dlock__backend *b, dlock__waiter *waiter, int64_t deadline_us,
                          redis_conn **ret)
{
	redis_conn *conn;
	redisContext *ctx;
	int64_t timeout_us;
	int rc;

	g_mutex_lock(&b->pool_mu);
	conn = g_queue_pop_head(&b->pool);
	g_mutex_unlock(&b->pool_mu);
	if (conn) {
		conn->reused = true;
		*ret = conn;
		return DLOCK_OK;
	}
	timeout_us = MIN(dlock__remaining_us(deadline_us), b->connect_timeout_ms * 1000);
	ctx = connect_for(b, waiter, timeout_us, true, &rc);
	if (!ctx)
		return rc;
	conn = g_new0(redis_conn, 1);
	conn->ctx = ctx;
	conn->timeout_us = -1;
	*ret = conn;
	return DLOCK_OK;
}

static void conn_free(redis_conn *conn)
{
	redisFree(conn->ctx);
	g_free(conn);
}

void dlock__redis_conn_put(dlock__backend *b, redis_conn *conn, bool ok)
{
	if (!conn)
		return;
	if (ok && !conn->ctx->err) {
		g_mutex_lock(&b->pool_mu);
		if (g_queue_get_length(&b->pool) < POOL_IDLE_MAX) {
			g_queue_push_head(&b->pool, conn);
			conn = NULL;
		}
		g_mutex_unlock(&b->pool_mu);
	}
	if (conn)
		conn_free(conn);
}

void dlock__redis_pool_clear(dlock__backend *b)
{
	redis_conn *conn;

	g_mutex_lock(&b->pool_mu);
	while ((conn = g_queue_pop_head(&b->pool)))
		conn_free(conn);
	g_mutex_unlock(&b->pool_mu);
}

int dlock__redis_command(dlock__backend *b, redis_conn *conn, int argc, const char **argv,
                         const size_t *lens, redisReply **ret)
{
	redisReply *reply;

	/* hiredis leaves errno as the failed read or send set it. */
	errno = 0;
	reply = dlock__redis_call(conn->ctx, argc, argv, lens);
	conn->timed_out = !reply && (errno == EAGAIN || errno == EWOULDBLOCK);
	if (!reply)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: %s", b->label,
		                    conn->ctx->errstr[0] ? conn->ctx->errstr : "no reply");
	*ret = reply;
	return DLOCK_OK;
}
