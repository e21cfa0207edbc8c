/* SPDX-License-Identifier: MIT */
/*
 * The fault-injection TCP proxy.  See test-proxy.h.
 *
 * One thread per proxy polls the listening socket, a control pipe and
 * both ends of every connection.  Bytes read from one end go to that
 * direction's `in` buffer, are cut there into requests or replies by the
 * protocol's scanner (test-proxy-wire.c), and move to its `out` buffer,
 * or are discarded when they are a reply to drop (a reply to hold stalls
 * the server -> client direction from itself on); `out` is written to the
 * other end unless the direction is stalled.  Reading goes on while
 * stalled, so the bytes are kept here and an end closed meanwhile is
 * noticed; it is passed on after the kept bytes.
 *
 * Control calls fill in one command under a mutex, wake the thread
 * through the pipe and wait for its sequence number to be done.
 *
 * To refuse connections the listening socket is closed, while a second
 * socket bound to the same port (both with SO_REUSEADDR, the second never
 * listening) keeps the port ours until it listens again.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "test-proxy-wire.h"
#include "test-proxy.h"

/* What one direction may hold here before the proxy stops reading it. */
#define FLOW_CAP (64 * 1024 * 1024)

typedef struct flow {
	GByteArray *in;  /* read, not yet cut into requests or replies */
	GByteArray *out; /* to be written to the other end */
	bool eof;        /* the reading end has closed */
	bool started;    /* ZooKeeper: the handshake frame has passed */
} flow;

/* A request whose reply the server side waits for.  Redis queues every
 * request whose reply is attributed; ZooKeeper only those to drop. */
typedef struct pending {
	int32_t xid;     /* ZooKeeper */
	char sub[16];    /* Redis: "subscribe", "psubscribe", "ssubscribe" or "" */
	int remaining;   /* Redis subscribe: confirmations still to come */
	bool drop;
	bool hold;       /* instead of dropping it, stall replies from this one on */
	bool reset_after;
} pending;

typedef struct conn {
	int client;
	int server;
	flow up;   /* client -> server */
	flow down; /* server -> client */
	bool connecting; /* the connection to the server is not up yet */
	bool raw;  /* the bytes did not parse: forwarded as they are */
	bool subscribed; /* Redis: a subscribe command was read from the client */
	bool reset_pending; /* reset once `down.out` is delivered */
	GQueue pending;
} conn;

typedef struct drop_rule {
	char kind[64];  /* Redis command in lower case */
	int32_t opcode; /* ZooKeeper */
	int skip;       /* requests of this kind let through first */
	int count;
	bool hold;      /* hold the reply (test_proxy_hold_replies_after), not drop it */
	bool reset_after;
} drop_rule;

enum command {
	CMD_NONE,
	CMD_STALL,
	CMD_UNSTALL,
	CMD_DROP,
	CMD_RESET_ALL,
	CMD_RESET_LEGACY,
	CMD_ADMIT,
	CMD_QUIT,
};

struct test_proxy {
	test_proxy_protocol proto;
	int port;
	int target_port;
	int holder_fd; /* bound to the port, never listening */
	int listen_fd; /* -1 while refusing */
	int control[2];
	GThread *thread;

	/* Owned by the proxy thread. */
	GPtrArray *conns;
	GArray *holes; /* blackholed descriptors */
	GArray *rules;
	int stalled;
	test_proxy_admit admit;

	/* Serialises control calls. */
	GMutex call_mu;
	/* Guards what follows. */
	GMutex mu;
	GCond cond;
	enum command cmd;
	int arg;
	drop_rule rule;
	guint64 requested;
	guint64 done;
	bool ok;
	int accepted;
	int open;
	int dropped;
	int held;
	GHashTable *requests; /* request_key() -> count read so far */
};

/* ---- sockets ------------------------------------------------------------ */

static int reusable_socket(int port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
		                    .sin_port = htons((uint16_t)port) };
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int listening_socket(int port)
{
	int fd = reusable_socket(port);

	if (fd >= 0 && listen(fd, 128) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int connect_target(int port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
		                    .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -1;
	/* Not blocking: a stopped server whose backlog is full would hold
	 * the proxy thread, and every control call with it, for minutes. */
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Whether the connect() started on fd succeeded. */
static bool connected(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);

	return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
}

/* Close with a TCP reset instead of an orderly FIN. */
static void close_with_reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

/* ---- connections -------------------------------------------------------- */

static conn *conn_new(int client, int server)
{
	conn *c = g_new0(conn, 1);

	c->client = client;
	c->server = server;
	c->connecting = true;
	c->up.in = g_byte_array_new();
	c->up.out = g_byte_array_new();
	c->down.in = g_byte_array_new();
	c->down.out = g_byte_array_new();
	g_queue_init(&c->pending);
	return c;
}

static void conn_free(conn *c, bool reset)
{
	if (reset)
		close_with_reset(c->client);
	else
		close(c->client);
	close(c->server);
	g_byte_array_unref(c->up.in);
	g_byte_array_unref(c->up.out);
	g_byte_array_unref(c->down.in);
	g_byte_array_unref(c->down.out);
	g_queue_clear_full(&c->pending, g_free);
	g_free(c);
}

static void move_bytes(GByteArray *from, GByteArray *to, size_t len)
{
	if (to)
		g_byte_array_append(to, from->data, (guint)len);
	g_byte_array_remove_range(from, 0, (guint)len);
}

/* Give up understanding this connection: forward whatever comes. */
static void go_raw(conn *c)
{
	c->raw = true;
	move_bytes(c->up.in, c->up.out, c->up.in->len);
	move_bytes(c->down.in, c->down.out, c->down.in->len);
}

/* The rule that claims the next request of this kind, if any. */
static drop_rule *claim_rule(test_proxy *p, const char *kind, int32_t opcode)
{
	for (guint i = 0; i < p->rules->len; i++) {
		drop_rule *r = &g_array_index(p->rules, drop_rule, i);

		if (r->count <= 0)
			continue;
		if (p->proto == TEST_PROXY_REDIS ? strcmp(r->kind, kind) == 0 : r->opcode == opcode) {
			if (r->skip > 0) {
				r->skip--;
				return NULL;
			}
			r->count--;
			return r;
		}
	}
	return NULL;
}

static void count_drop(test_proxy *p)
{
	g_mutex_lock(&p->mu);
	p->dropped++;
	g_mutex_unlock(&p->mu);
}

/*
 * The reply being parsed on c is one to hold: deliver what came before it
 * (as far as the client takes it now), then stall the server -> client
 * direction, so that this reply and every later one wait here.
 */
static void hold_from_here(test_proxy *p, conn *c)
{
	if (!(p->stalled & TEST_PROXY_DOWN)) {
		while (c->down.out->len) {
			ssize_t n = send(c->client, c->down.out->data, c->down.out->len, MSG_NOSIGNAL | MSG_DONTWAIT);

			if (n <= 0)
				break;
			g_byte_array_remove_range(c->down.out, 0, (guint)n);
		}
	}
	p->stalled |= TEST_PROXY_DOWN;
	g_mutex_lock(&p->mu);
	p->held++;
	g_mutex_unlock(&p->mu);
}

/* The key of a request kind in p->requests: a Redis command's name in
 * lower case, a ZooKeeper opcode in decimal (g_free). */
static char *request_key(const test_proxy *p, const char *name, int32_t opcode)
{
	return p->proto == TEST_PROXY_REDIS ? g_ascii_strdown(name, -1) : g_strdup_printf("%d", (int)opcode);
}

static void count_request(test_proxy *p, const char *name, int32_t opcode)
{
	char *key = request_key(p, name, opcode);

	g_mutex_lock(&p->mu);
	g_hash_table_insert(p->requests, key,
	                    GINT_TO_POINTER(GPOINTER_TO_INT(g_hash_table_lookup(p->requests, key)) + 1));
	g_mutex_unlock(&p->mu);
}

static bool is_subscribe(const char *name)
{
	return strcmp(name, "subscribe") == 0 || strcmp(name, "psubscribe") == 0 ||
	       strcmp(name, "ssubscribe") == 0;
}

static void redis_request(test_proxy *p, conn *c, const char *name, int args)
{
	bool sub = args > 0 && is_subscribe(name);
	pending *q;
	drop_rule *r;

	/* On a subscribed connection only subscribe confirmations can be
	 * told from pushes; other replies are not attributed. */
	if (!name[0] || (c->subscribed && !sub))
		return;
	q = g_new0(pending, 1);
	if ((r = claim_rule(p, name, 0))) {
		q->drop = !r->hold;
		q->hold = r->hold;
		q->reset_after = r->reset_after;
	}
	if (sub) {
		c->subscribed = true;
		g_strlcpy(q->sub, name, sizeof(q->sub));
		q->remaining = args;
	}
	g_queue_push_tail(&c->pending, q);
}

/* Whether the server value v (len bytes) is to be discarded; counts and
 * arms the reset when a request's whole reply has been. */
static bool redis_reply(test_proxy *p, conn *c, const uint8_t *v, size_t len)
{
	pending *h = g_queue_peek_head(&c->pending);
	bool drop;
	char head[16];

	if (!h)
		return false; /* unsolicited, or on a subscribed connection */
	if (h->sub[0] && v[0] != '-') {
		test_proxy_wire_resp_head(v, len, head, sizeof(head));
		if (strcmp(head, h->sub) != 0)
			return false; /* a push */
		if (--h->remaining > 0)
			return h->drop;
	}
	g_queue_pop_head(&c->pending);
	drop = h->drop;
	if (drop) {
		count_drop(p);
		c->reset_pending = h->reset_after;
	} else if (h->hold) {
		hold_from_here(p, c);
	}
	g_free(h);
	return drop;
}

static void zk_request(test_proxy *p, conn *c, const uint8_t *f, size_t len)
{
	pending *q;
	drop_rule *r;

	if (len < 12 || !(r = claim_rule(p, NULL, test_proxy_wire_be32(f + 8))))
		return;
	q = g_new0(pending, 1);
	q->xid = test_proxy_wire_be32(f + 4);
	q->drop = !r->hold;
	q->hold = r->hold;
	q->reset_after = r->reset_after;
	g_queue_push_tail(&c->pending, q);
}

static bool zk_reply(test_proxy *p, conn *c, const uint8_t *f, size_t len)
{
	int32_t xid;

	if (len < 8 || (xid = test_proxy_wire_be32(f + 4)) == -1)
		return false; /* watch events answer no request */
	for (GList *l = c->pending.head; l; l = l->next) {
		pending *q = l->data;

		if (q->xid == xid) {
			bool drop = q->drop;

			if (drop) {
				c->reset_pending = q->reset_after;
				count_drop(p);
			} else {
				hold_from_here(p, c);
			}
			g_free(q);
			g_queue_delete_link(&c->pending, l);
			return drop;
		}
	}
	return false;
}

/* Cut what was read from the client into requests and pass them on. */
static void parse_up(test_proxy *p, conn *c)
{
	flow *f = &c->up;

	while (!c->raw && f->in->len) {
		char name[64];
		size_t len = 0;
		int args = 0;
		int r = p->proto == TEST_PROXY_REDIS ?
		                test_proxy_wire_resp_request(f->in->data, f->in->len, &len, name, sizeof(name), &args) :
		                test_proxy_wire_zk_frame(f->in->data, f->in->len, &len);

		if (r == 0)
			break;
		if (r < 0) {
			go_raw(c);
			break;
		}
		if (p->proto == TEST_PROXY_REDIS && name[0])
			count_request(p, name, 0);
		else if (p->proto == TEST_PROXY_ZK && f->started && len >= 12)
			count_request(p, NULL, test_proxy_wire_be32(f->in->data + 8));
		if (p->proto == TEST_PROXY_REDIS)
			redis_request(p, c, name, args);
		else if (f->started)
			zk_request(p, c, f->in->data, len);
		f->started = true;
		move_bytes(f->in, f->out, len);
	}
}

/* Cut what was read from the server into replies; pass them on or drop
 * them. */
static void parse_down(test_proxy *p, conn *c)
{
	flow *f = &c->down;

	while (!c->raw && !c->reset_pending && f->in->len) {
		size_t len = 0;
		bool drop = false;
		int r = p->proto == TEST_PROXY_REDIS ? test_proxy_wire_resp_value(f->in->data, f->in->len, &len) :
		                                       test_proxy_wire_zk_frame(f->in->data, f->in->len, &len);

		if (r == 0)
			break;
		if (r < 0) {
			go_raw(c);
			break;
		}
		if (p->proto == TEST_PROXY_REDIS)
			drop = redis_reply(p, c, f->in->data, len);
		else if (f->started)
			drop = zk_reply(p, c, f->in->data, len);
		f->started = true;
		move_bytes(f->in, drop ? NULL : f->out, len);
	}
}

/* Read what fd has into f->in: false on an error. */
static bool fill(int fd, flow *f)
{
	uint8_t buf[65536];
	ssize_t n = recv(fd, buf, sizeof(buf), 0);

	if (n > 0) {
		g_byte_array_append(f->in, buf, (guint)n);
		return true;
	}
	if (n == 0) {
		f->eof = true;
		return true;
	}
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

/* Write what f->out holds to fd: false on an error. */
static bool drain(int fd, flow *f)
{
	while (f->out->len) {
		ssize_t n = send(fd, f->out->data, f->out->len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n > 0) {
			g_byte_array_remove_range(f->out, 0, (guint)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
	}
	return true;
}

static bool wants_read(const conn *c, const flow *f)
{
	return !f->eof && !c->reset_pending && f->in->len + f->out->len < FLOW_CAP;
}

/*
 * Move one connection's bytes after poll(): read what is readable,
 * parse, write what may be written.  False when the connection is over
 * (it has been freed then).
 */
static bool service(test_proxy *p, conn *c, short crev, short srev)
{
	bool ok = true;

	if (c->connecting && srev) {
		if (!connected(c->server)) {
			conn_free(c, true);
			return false;
		}
		c->connecting = false;
		srev = 0;
	}
	if (crev && wants_read(c, &c->up))
		ok = fill(c->client, &c->up);
	if (ok && srev && !c->connecting && wants_read(c, &c->down))
		ok = fill(c->server, &c->down);
	if (ok && p->proto != TEST_PROXY_RAW) {
		parse_up(p, c);
		parse_down(p, c);
	}
	if (p->proto == TEST_PROXY_RAW || c->raw) {
		move_bytes(c->up.in, c->up.out, c->up.in->len);
		move_bytes(c->down.in, c->down.out, c->down.in->len);
	}
	/* A partial unit left at an end's close goes on as it is. */
	if (c->up.eof)
		move_bytes(c->up.in, c->up.out, c->up.in->len);
	if (c->down.eof && !c->reset_pending)
		move_bytes(c->down.in, c->down.out, c->down.in->len);
	if (ok && !c->connecting && !(p->stalled & TEST_PROXY_UP))
		ok = drain(c->server, &c->up);
	if (ok && !(p->stalled & TEST_PROXY_DOWN))
		ok = drain(c->client, &c->down);
	if (ok && c->reset_pending && c->down.out->len == 0) {
		conn_free(c, true);
		return false;
	}
	if (!ok || (c->up.eof && c->up.out->len == 0) || (c->down.eof && c->down.out->len == 0)) {
		conn_free(c, false);
		return false;
	}
	return true;
}

/* ---- the proxy thread --------------------------------------------------- */

static void reset_all(test_proxy *p)
{
	for (guint i = 0; i < p->conns->len; i++)
		conn_free(g_ptr_array_index(p->conns, i), true);
	g_ptr_array_set_size(p->conns, 0);
	for (guint i = 0; i < p->holes->len; i++)
		close_with_reset(g_array_index(p->holes, int, i));
	g_array_set_size(p->holes, 0);
}

static bool set_admit(test_proxy *p, test_proxy_admit mode)
{
	if (mode == TEST_PROXY_REFUSE && p->listen_fd >= 0) {
		/* Connections still in the backlog are reset by the close. */
		close(p->listen_fd);
		p->listen_fd = -1;
	} else if (mode != TEST_PROXY_REFUSE && p->listen_fd < 0) {
		p->listen_fd = listening_socket(p->port);
		if (p->listen_fd < 0)
			return false;
	}
	p->admit = mode;
	return true;
}

static void add_rule(test_proxy *p, const drop_rule *rule)
{
	for (guint i = 0; i < p->rules->len; i++) {
		drop_rule *r = &g_array_index(p->rules, drop_rule, i);

		if (strcmp(r->kind, rule->kind) == 0 && r->hold == rule->hold) {
			/* A rule still counting down keeps its own skip. */
			if (r->count <= 0)
				r->skip = rule->skip;
			r->count = MAX(r->count, 0) + rule->count;
			r->reset_after = rule->reset_after;
			return;
		}
	}
	g_array_append_val(p->rules, *rule);
}

/* Run the pending command; false to quit. */
static bool run_command(test_proxy *p)
{
	char buf[64];
	enum command cmd;
	int arg;
	drop_rule rule;
	bool ok = true;

	while (read(p->control[0], buf, sizeof(buf)) < 0 && errno == EINTR)
		;
	g_mutex_lock(&p->mu);
	cmd = p->cmd;
	arg = p->arg;
	rule = p->rule;
	p->cmd = CMD_NONE;
	g_mutex_unlock(&p->mu);

	switch (cmd) {
	case CMD_NONE:
		return true;
	case CMD_STALL:
		p->stalled |= arg;
		break;
	case CMD_UNSTALL:
		p->stalled &= ~arg;
		for (guint i = p->conns->len; i-- > 0;)
			if (!service(p, g_ptr_array_index(p->conns, i), 0, 0))
				g_ptr_array_remove_index_fast(p->conns, i);
		break;
	case CMD_DROP:
		add_rule(p, &rule);
		break;
	case CMD_RESET_ALL:
		reset_all(p);
		break;
	case CMD_RESET_LEGACY:
		/* A FIN first puts the client's end in CLOSE_WAIT, where the
		 * reset that follows leaves EPIPE pending: its next write
		 * fails with EPIPE and, unless suppressed, raises SIGPIPE, as
		 * after a server that shut down and then vanished. */
		for (guint i = 0; i < p->conns->len; i++)
			shutdown(((conn *)g_ptr_array_index(p->conns, i))->client, SHUT_WR);
		g_usleep(20000);
		reset_all(p);
		ok = set_admit(p, TEST_PROXY_SLAM);
		break;
	case CMD_ADMIT:
		ok = set_admit(p, (test_proxy_admit)arg);
		break;
	case CMD_QUIT:
		break;
	}
	g_mutex_lock(&p->mu);
	p->ok = ok;
	p->open = (int)(p->conns->len + p->holes->len);
	p->done = p->requested;
	g_cond_broadcast(&p->cond);
	g_mutex_unlock(&p->mu);
	return cmd != CMD_QUIT;
}

static void admit_one(test_proxy *p)
{
	int c = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	int s;

	if (c < 0)
		return;
	g_mutex_lock(&p->mu);
	p->accepted++;
	g_mutex_unlock(&p->mu);
	switch (p->admit) {
	case TEST_PROXY_SLAM:
	case TEST_PROXY_REFUSE:
		close_with_reset(c);
		break;
	case TEST_PROXY_BLACKHOLE:
		g_array_append_val(p->holes, c);
		break;
	case TEST_PROXY_ADMIT:
		s = connect_target(p->target_port);
		if (s < 0)
			close_with_reset(c);
		else
			g_ptr_array_add(p->conns, conn_new(c, s));
		break;
	}
}

static short conn_events(const test_proxy *p, const conn *c, const flow *in, const flow *out, int out_dir)
{
	short ev = 0;

	if (wants_read(c, in))
		ev |= POLLIN;
	if (out->out->len && !(p->stalled & out_dir))
		ev |= POLLOUT;
	return ev;
}

static gpointer proxy_main(gpointer data)
{
	test_proxy *p = data;
	GArray *fds = g_array_new(FALSE, TRUE, sizeof(struct pollfd));

	for (;;) {
		guint n = p->conns->len;
		struct pollfd *pfd;

		g_array_set_size(fds, 2 + 2 * n);
		pfd = (struct pollfd *)(void *)fds->data;
		pfd[0] = (struct pollfd){ .fd = p->control[0], .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = p->listen_fd, .events = POLLIN };
		for (guint i = 0; i < n; i++) {
			conn *c = g_ptr_array_index(p->conns, i);
			short cev = conn_events(p, c, &c->up, &c->down, TEST_PROXY_DOWN);
			short sev = c->connecting ? POLLOUT : conn_events(p, c, &c->down, &c->up, TEST_PROXY_UP);

			/* No events asked: leave the descriptor out, or a
			 * hang-up would be reported again and again. */
			pfd[2 + 2 * i] = (struct pollfd){ .fd = cev ? c->client : -1, .events = cev };
			pfd[3 + 2 * i] = (struct pollfd){ .fd = sev ? c->server : -1, .events = sev };
		}
		if (poll(pfd, 2 + 2 * n, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[0].revents) {
			if (!run_command(p))
				break;
			continue; /* the connections may have changed under pfd */
		}
		/* Backwards: removing one moves the last into its slot,
		 * visited already. */
		for (guint i = n; i-- > 0;) {
			conn *c = g_ptr_array_index(p->conns, i);

			if (!service(p, c, pfd[2 + 2 * i].revents, pfd[3 + 2 * i].revents))
				g_ptr_array_remove_index_fast(p->conns, i);
		}
		if (pfd[1].revents & POLLIN)
			admit_one(p);
		g_mutex_lock(&p->mu);
		p->open = (int)(p->conns->len + p->holes->len);
		g_mutex_unlock(&p->mu);
	}
	g_array_unref(fds);
	return NULL;
}

/* ---- control ------------------------------------------------------------- */

/* Hand the thread a command and wait until it has been applied. */
static bool command(test_proxy *p, enum command cmd, int arg, const drop_rule *rule)
{
	guint64 seq;
	bool ok;

	g_mutex_lock(&p->call_mu);
	g_mutex_lock(&p->mu);
	p->cmd = cmd;
	p->arg = arg;
	if (rule)
		p->rule = *rule;
	seq = ++p->requested;
	g_mutex_unlock(&p->mu);
	while (write(p->control[1], "c", 1) != 1)
		if (errno != EINTR)
			abort();
	g_mutex_lock(&p->mu);
	while (p->done < seq)
		g_cond_wait(&p->cond, &p->mu);
	ok = p->ok;
	g_mutex_unlock(&p->mu);
	g_mutex_unlock(&p->call_mu);
	return ok;
}

test_proxy *test_proxy_start_proto(test_proxy_protocol proto, int target_port)
{
	test_proxy *p = g_new0(test_proxy, 1);
	struct sockaddr_in addr;
	socklen_t len = sizeof(addr);

	p->proto = proto;
	p->target_port = target_port;
	p->holder_fd = reusable_socket(0);
	assert_true(p->holder_fd >= 0);
	assert_int_equal(getsockname(p->holder_fd, (struct sockaddr *)&addr, &len), 0);
	p->port = ntohs(addr.sin_port);
	p->listen_fd = listening_socket(p->port);
	assert_true(p->listen_fd >= 0);
	assert_int_equal(pipe2(p->control, O_CLOEXEC | O_NONBLOCK), 0);
	g_mutex_init(&p->call_mu);
	g_mutex_init(&p->mu);
	g_cond_init(&p->cond);
	p->conns = g_ptr_array_new();
	p->holes = g_array_new(FALSE, FALSE, sizeof(int));
	p->rules = g_array_new(FALSE, FALSE, sizeof(drop_rule));
	p->requests = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	p->admit = TEST_PROXY_ADMIT;
	p->thread = g_thread_new("test-proxy", proxy_main, p);
	return p;
}

test_proxy *test_proxy_start(int target_port)
{
	return test_proxy_start_proto(TEST_PROXY_RAW, target_port);
}

int test_proxy_port(const test_proxy *p)
{
	return p->port;
}

void test_proxy_stall(test_proxy *p, int dirs)
{
	command(p, CMD_STALL, dirs & TEST_PROXY_BOTH, NULL);
}

void test_proxy_unstall(test_proxy *p, int dirs)
{
	command(p, CMD_UNSTALL, dirs & TEST_PROXY_BOTH, NULL);
}

void test_proxy_drop_replies(test_proxy *p, const char *kind, int count, bool reset_after)
{
	test_proxy_drop_replies_after(p, kind, 0, count, reset_after);
}

void test_proxy_drop_replies_after(test_proxy *p, const char *kind, int skip, int count, bool reset_after)
{
	drop_rule rule = { .skip = skip, .count = count, .reset_after = reset_after };

	assert_true(p->proto != TEST_PROXY_RAW);
	assert_non_null(kind);
	assert_true(strlen(kind) < sizeof(rule.kind));
	if (p->proto == TEST_PROXY_ZK) {
		rule.opcode = test_proxy_wire_zk_opcode(kind);
		if (rule.opcode == INT32_MIN)
			fail_msg("no ZooKeeper request type is named '%s'", kind);
	}
	for (size_t i = 0; kind[i]; i++)
		rule.kind[i] = g_ascii_tolower(kind[i]);
	command(p, CMD_DROP, 0, &rule);
}

void test_proxy_hold_replies_after(test_proxy *p, const char *kind, int skip)
{
	drop_rule rule = { .skip = skip, .count = 1, .hold = true };

	assert_true(p->proto != TEST_PROXY_RAW);
	assert_non_null(kind);
	assert_true(strlen(kind) < sizeof(rule.kind));
	if (p->proto == TEST_PROXY_ZK) {
		rule.opcode = test_proxy_wire_zk_opcode(kind);
		if (rule.opcode == INT32_MIN)
			fail_msg("no ZooKeeper request type is named '%s'", kind);
	}
	for (size_t i = 0; kind[i]; i++)
		rule.kind[i] = g_ascii_tolower(kind[i]);
	command(p, CMD_DROP, 0, &rule);
}

int test_proxy_held(test_proxy *p)
{
	int n;

	g_mutex_lock(&p->mu);
	n = p->held;
	g_mutex_unlock(&p->mu);
	return n;
}

int test_proxy_dropped(test_proxy *p)
{
	int n;

	g_mutex_lock(&p->mu);
	n = p->dropped;
	g_mutex_unlock(&p->mu);
	return n;
}

int test_proxy_requests(test_proxy *p, const char *kind)
{
	int32_t opcode = 0;
	char *key;
	int n;

	assert_true(p->proto != TEST_PROXY_RAW);
	assert_non_null(kind);
	if (p->proto == TEST_PROXY_ZK && (opcode = test_proxy_wire_zk_opcode(kind)) == INT32_MIN)
		fail_msg("no ZooKeeper request type is named '%s'", kind);
	key = request_key(p, kind, opcode);
	g_mutex_lock(&p->mu);
	n = GPOINTER_TO_INT(g_hash_table_lookup(p->requests, key));
	g_mutex_unlock(&p->mu);
	g_free(key);
	return n;
}

void test_proxy_reset_all(test_proxy *p)
{
	command(p, CMD_RESET_ALL, 0, NULL);
}

void test_proxy_admit_mode(test_proxy *p, test_proxy_admit mode)
{
	if (!command(p, CMD_ADMIT, (int)mode, NULL))
		fail_msg("proxy: cannot listen on port %d again", p->port);
}

void test_proxy_reset(test_proxy *p)
{
	if (!command(p, CMD_RESET_LEGACY, 0, NULL))
		fail_msg("proxy: cannot listen on port %d again", p->port);
}

int test_proxy_accepted(test_proxy *p)
{
	int n;

	g_mutex_lock(&p->mu);
	n = p->accepted;
	g_mutex_unlock(&p->mu);
	return n;
}

int test_proxy_open(test_proxy *p)
{
	int n;

	g_mutex_lock(&p->mu);
	n = p->open;
	g_mutex_unlock(&p->mu);
	return n;
}

void test_proxy_stop(test_proxy *p)
{
	if (!p)
		return;
	command(p, CMD_QUIT, 0, NULL);
	g_thread_join(p->thread);
	for (guint i = 0; i < p->conns->len; i++)
		conn_free(g_ptr_array_index(p->conns, i), false);
	g_ptr_array_unref(p->conns);
	for (guint i = 0; i < p->holes->len; i++)
		close(g_array_index(p->holes, int, i));
	g_array_unref(p->holes);
	g_array_unref(p->rules);
	g_hash_table_unref(p->requests);
	if (p->listen_fd >= 0)
		close(p->listen_fd);
	close(p->holder_fd);
	close(p->control[0]);
	close(p->control[1]);
	g_mutex_clear(&p->call_mu);
	g_mutex_clear(&p->mu);
	g_cond_clear(&p->cond);
	g_free(p);
}
