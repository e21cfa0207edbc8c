/* SPDX-License-Identifier: MIT */
/*
 * Connections made without blocking, for Redlock rounds: one thread makes
 * a new connection to each master at once, its socket polled together
 * with the other masters' answers (redlock-round.c).  The TCP connect, then AUTH,
 * SELECT and INFO server pipelined in one write; a step runs each time
 * poll() finds the socket ready.  INFO tells the server's run_id, which a
 * round compares across masters: one server named twice would count
 * twice toward the quorum.  The connection then joins the master's pool
 * like any other (conn.c): blocking, with the command timeout on its
 * socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "mutex.h"

enum { SETUP_AUTH, SETUP_SELECT, SETUP_INFO };

struct redis_dial {
	redis_backend *b;
	char **addrs;             /* numeric addresses, tried in turn */
	int next;                 /* the next of them */
	int fd;                   /* connecting (ctx NULL), or ctx's */
	int err;                  /* errno of the last address that failed */
	redisContext *ctx;        /* once connected */
	redis_conn *conn;         /* a pooled connection being identified, or NULL */
	int setup[3];             /* SETUP_*, the replies still to come, in order */
	int n_setup, got;
	int64_t started_us;       /* monotonic */
};

/* Start a non-blocking connect to addr; 0, or the errno. */
static int dial_begin(const char *addr, int port, int *ret_fd)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
	                          .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	char service[16];
	int fd, err = 0;

	g_snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(addr, service, &hints, &ai) != 0)
		return EINVAL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		err = errno;
	else if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS)
		err = errno;
	freeaddrinfo(ai);
	if (err != 0 && fd >= 0)
		close(fd);
	*ret_fd = err != 0 ? -1 : fd;
	return err;
}

/* Send the setup commands (and INFO server) in one write. */
static int setup_send(redis_dial *d)
{
	redis_backend *b = d->b;

	d->n_setup = d->got = 0;
	if (!d->conn && b->password) {
		const char *argv[3] = { "AUTH", b->user ? b->user : b->password, b->password };

		redisAppendCommandArgv(d->ctx, b->user ? 3 : 2, argv, NULL);
		d->setup[d->n_setup++] = SETUP_AUTH;
	}
	if (!d->conn && b->db != 0) {
		redisAppendCommand(d->ctx, "SELECT %d", b->db);
		d->setup[d->n_setup++] = SETUP_SELECT;
	}
	redisAppendCommand(d->ctx, "INFO server");
	d->setup[d->n_setup++] = SETUP_INFO;
	if (dlock__redis_flush(d->ctx) != REDIS_OK)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot send: %s", b->label, d->ctx->errstr);
	return 1;
}

/* The socket is connected: hand it to hiredis, blocking again as the
 * pool's users read it, and send the setup. */
static int dial_connected(redis_dial *d)
{
	int one = 1;

	if (fcntl(d->fd, F_SETFL, fcntl(d->fd, F_GETFL) & ~O_NONBLOCK) != 0)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot connect: %s", d->b->label,
		                    g_strerror(errno));
	setsockopt(d->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	d->ctx = redisConnectFd(d->fd);
	if (!d->ctx)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot allocate a connection", d->b->label);
	d->fd = d->ctx->fd;
	redisSetTimeout(d->ctx, (struct timeval){ .tv_sec = d->b->command_timeout_ms / 1000,
	                                          .tv_usec = d->b->command_timeout_ms % 1000 * 1000 });
	return setup_send(d);
}

/* Connect to the next address that does not fail at once: 1 while in
 * progress, or the failure once none is left. */
static int dial_next(redis_dial *d)
{
	while (d->addrs[d->next]) {
		d->err = dial_begin(d->addrs[d->next++], d->b->port, &d->fd);
		if (d->err == 0)
			return 1;
	}
	return dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot connect: %s", d->b->label,
	                    g_strerror(d->err));
}

int dlock__redis_dial_start(redis_backend *b, char **addrs, redis_dial **ret)
{
	redis_dial *d = g_new0(redis_dial, 1);
	int rc;

	d->b = b;
	d->addrs = addrs;
	d->fd = -1;
	d->err = ENOENT;
	d->started_us = dlock__mono_us();
	rc = dial_next(d);
	if (rc < 0) {
		dlock__redis_dial_free(d);
		return rc;
	}
	*ret = d;
	return DLOCK_OK;
}

int dlock__redis_dial_identify(redis_backend *b, redis_conn *conn, redis_dial **ret)
{
	redis_dial *d = g_new0(redis_dial, 1);
	int rc;

	d->b = b;
	d->conn = conn;
	d->ctx = conn->ctx;
	d->fd = conn->ctx->fd;
	d->started_us = dlock__mono_us();
	rc = setup_send(d);
	if (rc < 0) {
		dlock__redis_dial_free(d);
		return rc;
	}
	*ret = d;
	return DLOCK_OK;
}

int dlock__redis_dial_fd(const redis_dial *d)
{
	return d->fd;
}

short dlock__redis_dial_events(const redis_dial *d)
{
	return d->ctx ? POLLIN : POLLOUT;
}

/* The run_id line of an INFO reply, into b->run_id ("?" if it has none). */
static void note_run_id(redis_backend *b, const redisReply *reply)
{
	char id[sizeof(b->run_id)] = "?";
	const char *line = NULL;

	if (reply->type == REDIS_REPLY_STRING) {
		line = g_str_has_prefix(reply->str, "run_id:") ? reply->str
		                                                : strstr(reply->str, "\nrun_id:");
		if (line && *line == '\n')
			line++;
	}
	if (line) {
		size_t len = strspn(line + 7, "0123456789abcdefABCDEF");

		if (len > 0 && len < sizeof(id))
			g_strlcpy(id, line + 7, len + 1);
	}
	dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
	g_strlcpy(b->run_id, id, sizeof(b->run_id));
	dlock__mutex_unlock(&b->pool_mu);
}

/* Read the setup replies that have come: 1 while some are missing, 0 once
 * all are in, or a failure. */
static int setup_read(redis_dial *d)
{
	redis_backend *b = d->b;

	if (redisBufferRead(d->ctx) != REDIS_OK)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: connection lost: %s", b->label,
		                    d->ctx->errstr[0] ? d->ctx->errstr : "closed");
	while (d->got < d->n_setup) {
		redisReply *reply = NULL;
		int rc = DLOCK_OK;

		if (redisGetReplyFromReader(d->ctx, (void **)&reply) != REDIS_OK)
			return dlock__error(DLOCK_EBACKEND, "%s: unreadable reply", b->label);
		if (!reply)
			return 1;
		switch (d->setup[d->got++]) {
		case SETUP_AUTH:
			rc = dlock__redis_reply_error(b, reply, "authentication failed");
			break;
		case SETUP_SELECT:
			rc = dlock__redis_reply_error(b, reply, "SELECT failed");
			break;
		default:
			/* A server that refuses INFO (an ACL without it, a renamed
			 * command) cannot be told apart from the others. */
			note_run_id(b, reply);
			break;
		}
		freeReplyObject(reply);
		if (rc != DLOCK_OK)
			return rc;
	}
	return 0;
}

static int dial_step(redis_dial *d, redis_conn **ret)
{
	int rc;

	if (!d->ctx) {
		socklen_t len = sizeof(d->err);

		if (getsockopt(d->fd, SOL_SOCKET, SO_ERROR, &d->err, &len) != 0)
			d->err = errno;
		if (d->err != 0) {
			close(d->fd);
			d->fd = -1;
			return dial_next(d);
		}
		return dial_connected(d);
	}
	rc = setup_read(d);
	if (rc != 0)
		return rc;
	if (d->conn) {
		*ret = d->conn;
	} else {
		*ret = g_new0(redis_conn, 1);
		(*ret)->ctx = d->ctx;
		(*ret)->timeout_us = d->b->command_timeout_ms * 1000;
	}
	d->ctx = NULL;
	d->conn = NULL;
	d->fd = -1;
	return DLOCK_OK;
}

int dlock__redis_dial_step(redis_dial *d, redis_conn **ret)
{
	int rc = dial_step(d, ret);

	if (rc != 1)
		dlock__redis_dial_free(d);
	return rc;
}

void dlock__redis_dial_free(redis_dial *d)
{
	if (!d)
		return;
	if (d->conn) {
		redisFree(d->conn->ctx);
		g_free(d->conn);
	} else if (d->ctx) {
		redisFree(d->ctx);
	} else if (d->fd >= 0) {
		close(d->fd);
	}
	g_strfreev(d->addrs);
	g_free(d);
}

void dlock__redis_dial_park(redis_backend *b, redis_dial *d)
{
	dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
	if (!b->parked_dial) {
		b->parked_dial = d;
		d = NULL;
	}
	dlock__mutex_unlock(&b->pool_mu);
	dlock__redis_dial_free(d);
}

/*
 * The parked connection, if it is still worth waiting for: younger than
 * the connect timeout, and neither refused nor closed meanwhile.
 */
redis_dial *dlock__redis_dial_unpark(redis_backend *b)
{
	struct pollfd pfd = { .events = POLLIN | POLLOUT };
	redis_dial *d;

	dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
	d = b->parked_dial;
	b->parked_dial = NULL;
	dlock__mutex_unlock(&b->pool_mu);
	if (!d)
		return NULL;
	pfd.fd = d->fd;
	if (dlock__mono_us() - d->started_us > b->connect_timeout_ms * 1000 ||
	    (poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLERR | POLLHUP)))) {
		dlock__redis_dial_free(d);
		return NULL;
	}
	return d;
}

redis_conn *dlock__redis_conn_pooled(redis_backend *b)
{
	redis_conn *conn;

	dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
	conn = g_queue_pop_head(&b->pool);
	dlock__mutex_unlock(&b->pool_mu);
	if (conn)
		conn->reused = true;
	return conn;
}

void dlock__redis_run_id(redis_backend *b, char *buf, size_t size)
{
	dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
	g_strlcpy(buf, b->run_id, size);
	dlock__mutex_unlock(&b->pool_mu);
}
