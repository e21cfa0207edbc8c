/* SPDX-License-Identifier: MIT */
/*
 * What the subscriber's files share (subscriber.c: the table, the waits'
 * calls and one server's connection; subscriber-cluster.c: a cluster's
 * connections, one per master).  The rest of the backend sees
 * internal.h's functions only.
 */
#ifndef DLOCK_REDIS_SUBSCRIBER_H
#define DLOCK_REDIS_SUBSCRIBER_H

#include "internal.h"
#include "waketable.h"

#define RECONNECT_FIRST_US (100 * 1000)
#define RECONNECT_CAP_US (5 * 1000 * 1000)
#define PING_IDLE_US (15 * 1000 * 1000)
/* A connection this old that got answers resets the reconnect backoff. */
#define CONNECTION_PROVEN_US (1000 * 1000)

/*
 * A channel's state on the server, kept as its data in the wake table (in
 * the pointer itself: 0 is "nothing on the server", so a channel without
 * waiters leaves the table once the server has forgotten it too).
 */
enum {
	SUBSCRIBED = 1u << 0, /* confirmed by the server on this connection */
	PENDING = 1u << 1,    /* a SUBSCRIBE or UNSUBSCRIBE is on its way */
	REFUSED = 1u << 2,    /* the server's ACL refused the SUBSCRIBE (NOPERM) on
	                       * this connection: not asked again on it */
};

struct redis_sub {
	redis_backend *b;
	GMutex mu;                /* guards channels, boxes and stop (rank REDIS_SUB) */
	dlock__waketable *channels; /* name -> waiters, and the channel's state */
	GHashTable *boxes;        /* a wait's channel -> its redis_grant * */
	bool stop;
	bool reconnect;           /* drop the connection: the master may have moved */
	int wake_fd;
	dlock__waiter *waiter;    /* canceled to stop the thread mid-connect */
};

/* Poke the thread: the table changed. */
void dlock__redis_sub_poke(redis_sub *sub);
/* Whether the subscriber has been told to stop; whether the connection
 * is to be dropped (dlock__redis_sub_reconnect), which this answers once. */
bool dlock__redis_sub_stopping(redis_sub *sub);
bool dlock__redis_sub_stopping_arg(void *sub);
bool dlock__redis_sub_reconnecting(redis_sub *sub);
/* The server refused the SUBSCRIBE of name (sub->mu held). */
void dlock__redis_sub_refuse_locked(redis_sub *sub, const char *name, const char *why);
/* The server confirmed the subscription of name; a message came on it
 * (its grant, if any, posted; its waiters woken).  sub->mu held. */
void dlock__redis_sub_confirmed_locked(redis_sub *sub, const char *name);
void dlock__redis_sub_message_locked(redis_sub *sub, const char *name, const redisReply *reply);
/* A cluster's subscriber thread (subscriber-cluster.c). */
gpointer dlock__redis_sub_cluster_main(gpointer data);

#endif
