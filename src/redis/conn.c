/* SPDX-License-Identifier: MIT */
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
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sockios.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "mutex.h"
#include "stepper.h"
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
	/* A bound that shrank by less than a millisecond (a deadline of one
	 * command timeout, a moment later) is not worth two system calls. */
	if (timeout_us < conn->timeout_us && conn->timeout_us - timeout_us < 1000)
		return;
	/* Only the receive timeout moves: a send of one command never fills
	 * the socket's buffer, so it returns at once whatever its timeout
	 * (the one set at connect).  One system call, not hiredis's two. */
	if (conn->timeout_us != timeout_us) {
		struct timeval tv = timeval_of(timeout_us);

		if (setsockopt(conn->ctx->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0)
			conn->timeout_us = timeout_us;
	}
}

static bool error_starts(const redisReply *reply, const char *prefix)
{
	return strncmp(reply->str, prefix, strlen(prefix)) == 0;
}

/*
 * Error replies that say the credentials or the configuration are wrong,
 * each as its own code and in words a user can act on: a refused
 * password or ACL is a permission error (DLOCK_EACCES), a database the
 * server does not have a configuration error.  Redis 7 answers a client
 * that has not authenticated with NOAUTH, or, for a command of more than
 * ten arguments (every dlock script), with "Protocol error:
 * unauthenticated multibulk length" and closes the connection; older
 * servers word a bad password "invalid password".
 */
int dlock__redis_reply_error(redis_backend *b, const redisReply *reply, const char *what)
{
	const char *user = b->user ? b->user : "default";

	if (reply->type != REDIS_REPLY_ERROR)
		return DLOCK_OK;
	if (error_starts(reply, "NOAUTH") || strstr(reply->str, "Protocol error: unauthenticated"))
		return dlock__error(DLOCK_EACCES, "%s: the server requires a password and the URI gives "
		                    "none (redis://:password@host, or redis://user:password@host for an "
		                    "ACL user)", b->label);
	if (error_starts(reply, "WRONGPASS") || error_starts(reply, "ERR invalid password"))
		return b->user ? dlock__error(DLOCK_EACCES, "%s: the server refused user '%s' with the "
		                              "password given: wrong user name or password, or the "
		                              "user is disabled", b->label, b->user)
		               : dlock__error(DLOCK_EACCES, "%s: the server refused the password given: "
		                              "wrong password", b->label);
	if (strstr(reply->str, "without any password configured") ||
	    strstr(reply->str, "no password is set"))
		return dlock__error(DLOCK_EACCES, "%s: the URI gives a password, but the server has no "
		                    "password set for user '%s'", b->label, user);
	if (error_starts(reply, "NOPERM"))
		return dlock__error(DLOCK_EACCES, "%s: %s: the server's ACL refuses user '%s': %.*s",
		                    b->label, what, user, (int)reply->len, reply->str);
	if (error_starts(reply, "NOREPLICAS"))
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: %s: the server refuses writes: fewer "
		                    "replicas than its min-replicas-to-write are connected", b->label, what);
	if (dlock__redis_not_master(reply)) {
		dlock__redis_master_doubt(b);
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: %s: the server is not the master now: %.*s",
		                    b->label, what, (int)reply->len, reply->str);
	}
	if (!b->cluster && (error_starts(reply, "MOVED ") || error_starts(reply, "ASK ") ||
	                    error_starts(reply, "CLUSTERDOWN")))
		return dlock__error(DLOCK_ECONFIG, "%s: %s: the server is a Redis Cluster node (%.*s): "
		                    "use redis+cluster://", b->label, what, (int)reply->len, reply->str);
	if (strstr(reply->str, "DB index is out of range") || error_starts(reply, "ERR invalid DB index"))
		return dlock__error(DLOCK_ECONFIG, "%s: the server has no database %d (fewer are set by "
		                    "its 'databases' setting)", b->label, b->db);
	return dlock__error(DLOCK_EBACKEND, "%s: %s: %.*s", b->label, what, (int)reply->len, reply->str);
}

bool dlock__redis_not_master(const redisReply *reply)
{
	return reply->type == REDIS_REPLY_ERROR &&
	       (error_starts(reply, "READONLY") || error_starts(reply, "LOADING"));
}

void dlock__redis_master_doubt(redis_backend *b)
{
	/* First: a connection put back from now on is dropped, not pooled. */
	g_atomic_int_inc(&b->master_epoch);
	dlock__redis_pool_clear(b);
	dlock__redis_sub_reconnect(b);
}

int dlock__redis_master_epoch(redis_backend *b)
{
	return g_atomic_int_get(&b->master_epoch);
}

bool dlock__redis_conn_current(redis_backend *b, int epoch)
{
	return epoch == g_atomic_int_get(&b->master_epoch);
}

int dlock__redis_flush(redisContext *ctx)
{
	size_t len = sdslen(ctx->obuf);
	size_t off = 0;

	dlock__assert_may_block("a command sent to Redis");
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

int dlock__redis_setup_command(redis_backend *b, const char *label, redisContext *ctx,
                               int64_t deadline_us, const char *what, int argc, const char **argv,
                               redisReply **ret_reply)
{
	int64_t left = dlock__remaining_us(deadline_us);
	redisReply *reply;
	int rc;

	if (left <= 0)
		return dlock__error(DLOCK_ETIMEDOUT, "%s: %s: no time left", label, what);
	redisSetTimeout(ctx, timeval_of(MIN(left, b->command_timeout_ms * 1000)));
	/* hiredis leaves errno as the failed read or send set it. */
	errno = 0;
	reply = dlock__redis_call(ctx, argc, argv, NULL);
	if (!reply && (errno == EAGAIN || errno == EWOULDBLOCK))
		return dlock__error(DLOCK_ETIMEDOUT, "%s: %s: no answer within %" G_GINT64_FORMAT " ms",
		                    label, what, MIN(left, b->command_timeout_ms * 1000) / 1000);
	if (!reply)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: %s: %s", label, what,
		                    ctx->errstr[0] ? ctx->errstr : "no reply");
	if (ret_reply) {
		*ret_reply = reply;
		return DLOCK_OK;
	}
	rc = dlock__redis_reply_error(b, reply, what);
	freeReplyObject(reply);
	return rc;
}

/*
 * Wait for the connect in progress on fd to end, by deadline_us.  Returns
 * 0 or the errno of the failure (ETIMEDOUT at the deadline).
 */
static int connect_wait(int fd, int64_t deadline_us)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int err = 0;

	dlock__assert_may_block("a connect to Redis");
	for (;;) {
		int64_t left = dlock__remaining_us(deadline_us);
		int n;

		if (left <= 0)
			return ETIMEDOUT;
		n = poll(&pfd, 1, (int)MIN((left + 999) / 1000, INT_MAX));
		if (n > 0)
			break;
		if (n < 0 && errno != EINTR)
			return errno;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		return errno;
	return err;
}

/*
 * One TCP connect to the IP literal addr by deadline_us, which a cancel of
 * waiter (may be NULL) ends at once: the socket connects non-blocking and
 * registered with the waiter, whose cancel shuts it down -- on Linux that
 * aborts a connect in progress and wakes the poll.  Returns the connected
 * socket, blocking again (hiredis reads and writes it blocking, bounded
 * by its timeouts), or -1 and *ret_err the errno (ECANCELED on a cancel).
 */
static int dial(const char *addr, int port, dlock__waiter *waiter, int64_t deadline_us,
                int *ret_err)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
	                          .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	char service[16];
	int fd, err = 0, one = 1;

	/* Numeric only: no lookup, and an IPv6 scope suffix is understood. */
	g_snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(addr, service, &hints, &ai) != 0) {
		*ret_err = EINVAL;
		return -1;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		*ret_err = errno;
		freeaddrinfo(ai);
		return -1;
	}
	if (!dlock__waiter_io_begin(waiter, fd)) {
		err = ECANCELED;
	} else {
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
			err = errno == EINPROGRESS ? connect_wait(fd, deadline_us) : errno;
		if (dlock__waiter_io_end(waiter))
			err = ECANCELED;
	}
	freeaddrinfo(ai);
	if (err == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
		err = errno;
	if (err != 0) {
		close(fd);
		*ret_err = err;
		return -1;
	}
	/* As hiredis sets it on the connections it makes itself. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int canceled_error(redis_backend *b)
{
	return dlock__error(DLOCK_ECANCELED, "%s: canceled while waiting for the server", b->label);
}

/*
 * Connect to the addresses of host in turn by deadline_us.  The name is
 * resolved here, bounded by the same deadline (hiredis would resolve it
 * with a getaddrinfo() no deadline can stop), and the socket is connected
 * here too, so that a cancel of waiter (may be NULL) ends either at once;
 * hiredis gets the connected socket.  Messages start with label.
 */
redisContext *dlock__redis_dial_host(redis_backend *b, const char *label, const char *host, int port,
                                     dlock__waiter *waiter, int64_t deadline_us, int *ret_rc)
{
	int64_t timeout_ms = dlock__remaining_us(deadline_us) / 1000;
	redisContext *ctx;
	char **addrs;
	int rc, fd = -1, err = ETIMEDOUT;

	rc = dlock__resolve(b->resolver, host, waiter, deadline_us, &addrs);
	if (rc != DLOCK_OK) {
		char *why = g_strdup(dlock_last_error_message());

		/* A lookup still unanswered when the time ran out. */
		if (rc == DLOCK_EUNAVAILABLE && dlock__remaining_us(deadline_us) == 0)
			rc = DLOCK_ETIMEDOUT;
		*ret_rc = dlock__error(rc, "%s: %s", label, why);
		g_free(why);
		return NULL;
	}
	for (int i = 0; addrs[i] && fd < 0 && err != ECANCELED; i++) {
		if (dlock__remaining_us(deadline_us) <= 0)
			break;
		fd = dial(addrs[i], port, waiter, deadline_us, &err);
	}
	g_strfreev(addrs);
	if (fd < 0 && err == ECANCELED) {
		*ret_rc = dlock__error(DLOCK_ECANCELED, "%s: canceled while waiting for the server", label);
		return NULL;
	}
	if (fd < 0 && err == ETIMEDOUT) {
		*ret_rc = dlock__error(DLOCK_ETIMEDOUT, "%s: cannot connect: no connection within %"
		                       G_GINT64_FORMAT " ms", label, timeout_ms);
		return NULL;
	}
	if (fd < 0) {
		*ret_rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot connect: %s", label, g_strerror(err));
		return NULL;
	}
	ctx = redisConnectFd(fd);
	if (!ctx) {
		close(fd);
		*ret_rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot allocate a connection", label);
		return NULL;
	}
	dlock__set_cloexec(ctx->fd);
	return ctx;
}

int dlock__redis_authenticate(redis_backend *b, redisContext *ctx, int64_t deadline_us)
{
	const char *argv[3] = { "AUTH", b->user ? b->user : b->password, b->password };

	if (!b->password)
		return DLOCK_OK;
	return dlock__redis_setup_command(b, b->label, ctx, deadline_us, "AUTH", b->user ? 3 : 2, argv, NULL);
}

/*
 * Connect, AUTH and SELECT, all of it within timeout_us: the resolve, the
 * TCP connect and each setup command get what is left of one deadline, so
 * a slow server cannot make a connect take a timeout per step.  A cancel
 * of waiter (may be NULL) interrupts every step: the resolve, the connect,
 * and the AUTH and SELECT, which can wait out a whole command timeout.
 * Under Sentinel the master is looked for first
 * (dlock__redis_sentinel_connect_master()).
 */
static redisContext *connect_for(redis_backend *b, const redis_node *node, dlock__waiter *waiter,
                                 int64_t timeout_us, bool select, int *ret_rc)
{
	int64_t deadline_us = dlock__mono_us() + timeout_us;
	redisContext *ctx;
	int rc = DLOCK_OK;

	if (timeout_us <= 0) {
		*ret_rc = dlock__error(DLOCK_ETIMEDOUT, "%s: no time left to connect", b->label);
		return NULL;
	}
	if (node) {
		char label[300];

		g_snprintf(label, sizeof(label), "%s: node %s", b->label, node->addr);
		ctx = dlock__redis_dial_host(b, label, node->host, node->port, waiter, deadline_us, ret_rc);
		if (!ctx)
			return NULL;
	} else if (b->unix_path) {
		ctx = redisConnectUnixWithTimeout(b->unix_path, timeval_of(timeout_us));
		if (!ctx) {
			*ret_rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot allocate a connection",
			                       b->label);
			return NULL;
		}
		dlock__set_cloexec(ctx->fd);
		if (ctx->err) {
			*ret_rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot connect: %s", b->label,
			                       ctx->errstr);
			redisFree(ctx);
			return NULL;
		}
	} else if (b->sentinel) {
		/* Authenticated already: AUTH comes before the role's check. */
		ctx = dlock__redis_sentinel_connect_master(b, waiter, deadline_us, ret_rc);
		if (!ctx)
			return NULL;
	} else {
		ctx = dlock__redis_dial_host(b, b->label, b->host, b->port, waiter, deadline_us, ret_rc);
		if (!ctx)
			return NULL;
	}
	if (!dlock__waiter_io_begin(waiter, ctx->fd))
		rc = canceled_error(b);
	if (rc == DLOCK_OK && !b->sentinel)
		rc = dlock__redis_authenticate(b, ctx, deadline_us);
	if (rc == DLOCK_OK && select && b->db != 0) {
		char db[16];
		const char *argv[2] = { "SELECT", db };

		g_snprintf(db, sizeof(db), "%d", b->db);
		rc = dlock__redis_setup_command(b, b->label, ctx, deadline_us, "SELECT", 2, argv, NULL);
	}
	if (dlock__waiter_io_end(waiter))
		rc = canceled_error(b); /* the socket may have been shut down */
	if (rc != DLOCK_OK) {
		redisFree(ctx);
		*ret_rc = rc;
		return NULL;
	}
	/* The timeout a caller that sets none of its own reads with. */
	redisSetTimeout(ctx, timeval_of(MIN(timeout_us, b->command_timeout_ms * 1000)));
	return ctx;
}

redisContext *dlock__redis_connect(redis_backend *b, int64_t timeout_us, bool select, int *ret_rc)
{
	return connect_for(b, NULL, NULL, timeout_us, select, ret_rc);
}

redisContext *dlock__redis_connect_cancelable(redis_backend *b, dlock__waiter *waiter,
                                              int64_t timeout_us, bool select, int *ret_rc)
{
	return connect_for(b, NULL, waiter, timeout_us, select, ret_rc);
}

redisContext *dlock__redis_connect_node(redis_backend *b, const redis_node *node, dlock__waiter *waiter,
                                        int64_t timeout_us, int *ret_rc)
{
	return connect_for(b, node, waiter, timeout_us, false, ret_rc);
}

int dlock__redis_conn_get(redis_backend *b, redis_route *route, dlock__waiter *waiter,
                          int64_t deadline_us, redis_conn **ret)
{
	redis_node *node = NULL;
	redis_conn *conn;
	redisContext *ctx;
	int64_t timeout_us;
	int epoch, rc;

	if (b->cluster && route && route->ask) {
		node = route->ask;
	} else if (b->cluster && route && route->slot >= 0) {
		rc = dlock__redis_cluster_route(b, route->slot, waiter, deadline_us, &node);
		if (rc != DLOCK_OK)
			return rc;
	}
	dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
	conn = g_queue_pop_head(node ? &node->pool : &b->pool);
	dlock__mutex_unlock(&b->pool_mu);
	if (conn) {
		conn->reused = true;
		*ret = conn;
		return DLOCK_OK;
	}
	timeout_us = MIN(dlock__remaining_us(deadline_us), b->connect_timeout_ms * 1000);
	/* Read before the master is looked for: a doubt meanwhile makes
	 * the connection suspect at once. */
	epoch = dlock__redis_master_epoch(b);
	ctx = connect_for(b, node, waiter, timeout_us, true, &rc);
	if (!ctx)
		return rc;
	conn = g_new0(redis_conn, 1);
	conn->ctx = ctx;
	conn->epoch = epoch;
	conn->node = node;
	conn->timeout_us = -1;
	*ret = conn;
	return DLOCK_OK;
}

static void conn_free(redis_conn *conn)
{
	redisFree(conn->ctx);
	g_free(conn);
}

void dlock__redis_conn_put(redis_backend *b, redis_conn *conn, bool ok)
{
	if (!conn)
		return;
	/* One made before the master was doubted may lead to the old one,
	 * which can still answer as a master for seconds after a switch. */
	if (ok && !conn->ctx->err && dlock__redis_conn_current(b, conn->epoch)) {
		GQueue *pool = conn->node ? &conn->node->pool : &b->pool;

		conn->asking = false;
		dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
		if (g_queue_get_length(pool) < POOL_IDLE_MAX) {
			g_queue_push_head(pool, conn);
			conn = NULL;
		}
		dlock__mutex_unlock(&b->pool_mu);
	}
	if (conn)
		conn_free(conn);
}

int dlock__redis_conn_keep(redis_conn *conn)
{
	int fd = conn->ctx->fd;

	/* What was sent is delivered before the FIN; nothing more is sent. */
	shutdown(fd, SHUT_RDWR);
	return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

/*
 * TCP: our socket is closed once the server has answered (an answer to a
 * socket shut down for reading is met with a reset) or closed or reset
 * its end; until then our FIN leaves it in FIN_WAIT, also while the
 * server has not even accepted the connection.  A unix socket: the server
 * has read everything we sent (it runs a command in the same step as it
 * reads it), or closed its end, which drops what it had not read.  A
 * socket that can say neither counts as done: the lease bounds the rest.
 */
bool dlock__redis_conn_settled(int fd)
{
	struct tcp_info info;
	socklen_t len = sizeof(info);
	int unread = 0;

	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0)
		return info.tcpi_state == TCP_CLOSE;
	if (ioctl(fd, SIOCOUTQ, &unread) == 0)
		return unread == 0;
	return true;
}

bool dlock__redis_kept_settled(GArray *fds)
{
	for (guint i = fds ? fds->len : 0; i-- > 0;) {
		int fd = g_array_index(fds, int, i);

		if (dlock__redis_conn_settled(fd)) {
			close(fd);
			g_array_remove_index_fast(fds, i);
		}
	}
	return !fds || fds->len == 0;
}

void dlock__redis_kept_close(GArray *fds)
{
	if (!fds)
		return;
	for (guint i = 0; i < fds->len; i++)
		close(g_array_index(fds, int, i));
	g_array_unref(fds);
}

static void node_pool_clear(redis_node *node, void *arg)
{
	redis_backend *b = arg;
	redis_conn *conn;

	dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
	while ((conn = g_queue_pop_head(&node->pool)))
		conn_free(conn);
	dlock__mutex_unlock(&b->pool_mu);
}

void dlock__redis_pool_clear(redis_backend *b)
{
	redis_conn *conn;

	dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
	while ((conn = g_queue_pop_head(&b->pool)))
		conn_free(conn);
	dlock__mutex_unlock(&b->pool_mu);
	if (b->cluster)
		dlock__redis_cluster_each_node(b->cluster, node_pool_clear, b);
}

void dlock__redis_node_pool_clear(redis_backend *b, redis_node *node)
{
	node_pool_clear(node, b);
}

int dlock__redis_io_error(redis_backend *b, redisContext *ctx, bool timed_out, int64_t timeout_us)
{
	if (timed_out && timeout_us > 0)
		return dlock__error(DLOCK_ETIMEDOUT, "%s: no answer within %" G_GINT64_FORMAT " ms",
		                    b->label, MAX(timeout_us / 1000, 1));
	if (timed_out)
		return dlock__error(DLOCK_ETIMEDOUT, "%s: no answer within the command timeout", b->label);
	return dlock__error(DLOCK_EUNAVAILABLE, "%s: %s", b->label,
	                    ctx->errstr[0] ? ctx->errstr : "connection closed without an answer");
}

int dlock__redis_command(redis_backend *b, redis_conn *conn, int argc, const char **argv,
                         const size_t *lens, redisReply **ret)
{
	redisReply *reply;

	/* hiredis leaves errno as the failed read or send set it. */
	errno = 0;
	reply = dlock__redis_call(conn->ctx, argc, argv, lens);
	conn->timed_out = !reply && (errno == EAGAIN || errno == EWOULDBLOCK);
	if (!reply)
		return dlock__redis_io_error(b, conn->ctx, conn->timed_out, conn->timeout_us);
	*ret = reply;
	return DLOCK_OK;
}
