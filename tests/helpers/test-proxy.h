/* SPDX-License-Identifier: MIT */
/*
 * A fault-injection TCP proxy for the integration tests: it sits between
 * the library and a real server on loopback and, on request, stalls
 * either direction (keeping the bytes), discards or holds back the replies
 * to chosen requests, resets connections, or refuses, slams or swallows
 * new ones.
 *
 * Each proxy is served by one thread of the test process, polling every
 * socket; the functions below hand it a command and return only once
 * that thread has applied it, so a test can rely on the fault being in
 * place.  They may be called from any thread of the test.  Every
 * descriptor is close-on-exec.
 *
 * Replies are recognised per protocol:
 *  - TEST_PROXY_REDIS reads the client's RESP command arrays (inline
 *    commands too) to learn each request's name, and the server's RESP
 *    values (RESP2 and RESP3 types, nested aggregates) to find where each
 *    reply ends; replies are matched to requests in order, so pipelined
 *    requests are handled.  Pub/sub: once a connection sends SUBSCRIBE,
 *    PSUBSCRIBE or SSUBSCRIBE, the server may push messages that answer
 *    no request, so from then on only the confirmations of subscribe
 *    commands (arrays whose first element is the command's name, one per
 *    channel) are attributed; every other value on that connection, and
 *    the replies to every later request of another kind on it, are
 *    forwarded untouched and those requests never consume a drop.
 *  - TEST_PROXY_ZK reads the 4-byte big-endian length frames.  The first
 *    frame each way is the session handshake; later request frames carry
 *    an xid and an opcode, reply frames the xid (watch events, xid -1, are
 *    forwarded).  A reply is matched to the oldest request with its xid.
 *  - TEST_PROXY_RAW forwards bytes only.
 * A connection whose bytes do not parse in its protocol falls back to raw
 * forwarding.
 *
 * Nothing here skips a test: a proxy that cannot do its job fails the
 * calling test through cmocka.
 */
#ifndef DLOCK_TEST_PROXY_H
#define DLOCK_TEST_PROXY_H

#include <stdbool.h>

typedef struct test_proxy test_proxy;

typedef enum test_proxy_protocol {
	TEST_PROXY_RAW,   /* bytes only: stall, reset, refuse work; drop_replies does not */
	TEST_PROXY_REDIS, /* understands RESP: requests are command arrays, replies are RESP values */
	TEST_PROXY_ZK,    /* understands ZooKeeper framing: 4-byte length frames, xid + opcode */
} test_proxy_protocol;

enum {
	TEST_PROXY_UP = 1,   /* client -> server */
	TEST_PROXY_DOWN = 2, /* server -> client */
	TEST_PROXY_BOTH = 3
};

typedef enum test_proxy_admit {
	TEST_PROXY_ADMIT,    /* accept and forward (the default) */
	TEST_PROXY_REFUSE,   /* connection refused (nothing listens on the port meanwhile) */
	TEST_PROXY_SLAM,     /* accept, then close at once with a TCP reset */
	TEST_PROXY_BLACKHOLE /* accept, never read or answer */
} test_proxy_admit;

/*
 * Listen on a free 127.0.0.1 port and forward every accepted connection
 * to 127.0.0.1:target_port, served by one thread of the test process.
 * test_proxy_start(port) == test_proxy_start_proto(TEST_PROXY_RAW, port).
 * A connection the target refuses is reset.
 */
test_proxy *test_proxy_start(int target_port);
test_proxy *test_proxy_start_proto(test_proxy_protocol proto, int target_port);
int test_proxy_port(const test_proxy *p);

/*
 * Stop forwarding in these directions, on every connection, open and
 * future; bytes are read and kept (up to 64 MiB per direction and
 * connection), not lost, as over a stalled link or a partition.  An end
 * closed meanwhile is passed on after the kept bytes.
 */
void test_proxy_stall(test_proxy *p, int dirs);
/* Forward what was kept and go on. */
void test_proxy_unstall(test_proxy *p, int dirs);

/*
 * The next `count` requests of this kind still reach the server, but
 * their replies are discarded.  Redis: the command name, case-insensitive
 * ("EVALSHA", "PING", "SUBSCRIBE"...; a SUBSCRIBE's confirmations, one per
 * channel, are all discarded).  ZooKeeper: the opcode's name ("create",
 * "create2", "createContainer", "createTTL", "delete", "exists",
 * "getData", "setData", "getChildren", "getChildren2", "ping", "multi",
 * "sync", "check", "closeSession", "setWatches", "auth"...; an unknown
 * name fails the test).  Calls for the same kind add up; reset_after is
 * the last call's.  A request counts when the proxy reads it.
 * With reset_after, the connection is reset right after the reply is
 * discarded (once the replies before it have been delivered): the usual
 * "answer lost with the connection" fault.
 */
void test_proxy_drop_replies(test_proxy *p, const char *kind, int count, bool reset_after);
/*
 * The same, once `skip` more requests of this kind have passed with their
 * replies (a wait's queueing try comes after its first try, with the same
 * command).  A rule of the kind still counting down keeps its own skip.
 */
void test_proxy_drop_replies_after(test_proxy *p, const char *kind, int skip, int count,
                                   bool reset_after);
/*
 * Hold the reply to the next request of this kind, once `skip` more have
 * passed with their replies: the request reaches the server, and when its
 * reply comes the server -> client direction is stalled from that reply on
 * (replies read before it are delivered first), as test_proxy_stall(p,
 * TEST_PROXY_DOWN) would, on every connection.  test_proxy_unstall(p,
 * TEST_PROXY_DOWN) delivers it.  For a client that gives up on exactly
 * that request while the server has applied it.
 */
void test_proxy_hold_replies_after(test_proxy *p, const char *kind, int skip);
/* How many replies have been held so far (poll it with test_wait_until). */
int test_proxy_held(test_proxy *p);
/* How many replies have been dropped so far (poll it with test_wait_until). */
int test_proxy_dropped(test_proxy *p);
/*
 * How many requests of this kind (named as for test_proxy_drop_replies)
 * the proxy has read from clients so far, on every connection.  Each is
 * passed on to the server at once unless the client -> server direction
 * is stalled, so with only replies stalled this counts what reached the
 * server while the client had no answer yet.
 */
int test_proxy_requests(test_proxy *p, const char *kind);

/*
 * End every open connection with a TCP reset, now (the server's side is
 * closed too).  New connections are still admitted per
 * test_proxy_admit_mode (by default forwarded).  Returns once sent.
 */
void test_proxy_reset_all(test_proxy *p);

/* How new connections are treated from now on (open ones are left alone). */
void test_proxy_admit_mode(test_proxy *p, test_proxy_admit mode);

/*
 * End every proxied connection with a FIN followed 20 ms later by a TCP
 * reset (SO_LINGER 0), which leaves the client's socket in the state
 * where its next write fails with EPIPE and raises SIGPIPE (unless
 * suppressed), as after a server that shut down and vanished; from then
 * on every new connection is slammed (TEST_PROXY_SLAM).  Returns once the
 * resets have been sent.
 */
void test_proxy_reset(test_proxy *p);

/* Connections accepted so far (slammed and blackholed ones included). */
int test_proxy_accepted(test_proxy *p);
/* Connections open now.  Blackholed ones count until test_proxy_reset_all()
 * or test_proxy_stop(), since the proxy never reads them to see them close. */
int test_proxy_open(test_proxy *p);

/* Close everything and join the thread.  NULL is a no-op. */
void test_proxy_stop(test_proxy *p);

#endif
