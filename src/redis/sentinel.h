/* SPDX-License-Identifier: MIT */
/*
 * What the Redis backend's Sentinel files share (sentinel.c: the
 * sentinels, asked; sentinel-watch.c: the watcher thread).  The rest of
 * the backend sees internal.h's functions only.
 */
#ifndef DLOCK_REDIS_SENTINEL_H
#define DLOCK_REDIS_SENTINEL_H

#include "internal.h"

struct redis_sentinel {
	char *service;
	char *user;               /* sentinel-user, or NULL */
	char *password;           /* sentinel-password, or NULL */
	GMutex mu;                /* guards the fields below (rank REDIS_SENTINEL) */
	GPtrArray *sentinels;     /* dlock__host *, in the order to ask them */
	char *master;             /* "host:port" of the last master connected to, or NULL */
	bool stop;                /* the watcher thread is to end */
	int wake_fd;              /* pokes the watcher thread */
	dlock__waiter *waiter;    /* the watcher's: canceled to stop it mid-connect */
};

/* The sentinels in the order to ask them: a copy (dlock__host *), asking
 * takes no lock. */
GPtrArray *dlock__redis_sentinel_list(redis_sentinel *s);
/* "host:port" ("[v6]:port"), g_free. */
char *dlock__redis_sentinel_host_text(const dlock__host *h);
/* One command to a sentinel, its reply whatever it is; a cancel of
 * waiter (may be NULL) ends the wait for it at once. */
int dlock__redis_sentinel_command(redis_backend *b, const char *label, redisContext *ctx,
                                  dlock__waiter *waiter, int64_t deadline_us, const char *what, int argc,
                                  const char **argv, redisReply **ret_reply);
/* Connect to sentinel h and authenticate, by deadline_us; label for
 * messages.  NULL with the message recorded on failure. */
redisContext *dlock__redis_sentinel_connect(redis_backend *b, const dlock__host *h, const char *label,
                                            dlock__waiter *waiter, int64_t deadline_us, int *ret_rc);
/* Ask sentinel h for the master: DLOCK_OK and its address, or a failure
 * recorded as the message (*ret_unknown: it does not know the service). */
int dlock__redis_sentinel_ask_one(redis_backend *b, const dlock__host *h, dlock__waiter *waiter,
                                  int64_t deadline_us, char **ret_host, int *ret_port, bool *ret_unknown);
/* Stop the watcher thread (sentinel-watch.c), for good. */
void dlock__redis_sentinel_unwatch(redis_backend *b);

#endif
