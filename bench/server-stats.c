/* SPDX-License-Identifier: MIT */
/*
 * Server work, read from the servers' own counters before and after a
 * measured phase.
 *
 * Redis: INFO commandstats, summing calls= and usec= over every
 * cmdstat_ line except INFO itself (which is how we ask).  Redis counts
 * the commands a script runs as calls too, so one EVALSHA of dlock's
 * acquire script counts as EVALSHA + SET + INCR.
 *
 * ZooKeeper: the "mntr" four-letter word over a plain TCP connection to
 * every server of the connect string (summed: each server counts its own
 * clients), with a poll timeout because a frozen JVM still accepts
 * connections.  Names verified on a 3.8.0 server:
 *   zk_packets_received, zk_packets_sent      client packets
 *   zk_sum_node_{deleted,changed,children,created}_watch_count
 *                                             watches fired, by event
 * A watch set by getData or exists fires as "deleted" when its node goes;
 * a getChildren watch on the parent fires as "children" — the herd.  Each
 * mntr request counts itself as one packet received; the later one's is
 * taken off the difference.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"

#define FOUR_LETTER_TIMEOUT_MS 5000

static void redis_stats(const bench_target *t, bench_server_stats *st)
{
	struct timeval timeout = { .tv_sec = 5 };
	redisContext *c = redisConnectWithTimeout(t->host[0], t->port[0], timeout);
	redisReply *r;
	const char *p;

	if (!c || c->err)
		bench_fail("server stats: cannot connect to Redis at %s:%d", t->host[0], t->port[0]);
	redisSetTimeout(c, timeout);
	r = redisCommand(c, "INFO commandstats");
	if (!r || r->type != REDIS_REPLY_STRING)
		bench_fail("server stats: INFO commandstats failed");
	/* Lines: cmdstat_set:calls=12,usec=34,usec_per_call=2.83,... */
	for (p = r->str; (p = strstr(p, "cmdstat_")); p++) {
		const char *calls = strstr(p, "calls=");
		const char *usec = strstr(p, "usec=");
		const char *eol = strchr(p, '\n');

		if (strncmp(p, "cmdstat_info:", 13) == 0 || !calls || !usec || (eol && calls > eol))
			continue;
		st->redis_calls += strtod(calls + 6, NULL);
		st->redis_usec += strtod(usec + 5, NULL);
	}
	freeReplyObject(r);
	redisFree(c);
	st->valid = true;
}

/* Send a four-letter word to host:port and return the whole answer
 * (caller frees), or NULL after timeout_ms. */
static char *four_letters(const char *host, int port, const char *word, int timeout_ms)
{
	int64_t until = bench_now_ns() + (int64_t)timeout_ms * 1000000;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;
	char service[16];
	char *out = NULL;
	size_t len = 0, cap = 0;
	int fd = -1;

	snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(host, service, &hints, &ai) != 0 || !ai)
		return NULL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS))
		goto fail;
	for (size_t sent = 0; sent < strlen(word);) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		ssize_t n;

		if (poll(&p, 1, (int)((until - bench_now_ns()) / 1000000)) <= 0)
			goto fail;
		n = send(fd, word + sent, strlen(word) - sent, MSG_NOSIGNAL);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			goto fail;
		if (n > 0)
			sent += (size_t)n;
	}
	/* The server closes the connection after its answer. */
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left_ms = (until - bench_now_ns()) / 1000000;
		ssize_t n;

		if (left_ms <= 0 || poll(&p, 1, (int)left_ms) <= 0)
			goto fail;
		if (cap - len < 4096) {
			char *bigger = realloc(out, cap + 65536);

			if (!bigger)
				goto fail;
			out = bigger;
			cap += 65536;
		}
		n = read(fd, out + len, cap - len - 1);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			break;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			goto fail;
		if (n > 0)
			len += (size_t)n;
	}
	close(fd);
	freeaddrinfo(ai);
	if (!out)
		return NULL;
	out[len] = '\0';
	return out;
fail:
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	free(out);
	return NULL;
}

/* The value of "key\tvalue" in an mntr answer; the program fails if the
 * key is missing (a renamed metric must not read as zero work). */
static double mntr_value(const char *text, const char *key, const char *where)
{
	size_t key_len = strlen(key);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, key, key_len) == 0 && p[key_len] == '\t')
			return strtod(p + key_len + 1, NULL);
	bench_fail("server stats: %s: mntr has no %s", where, key);
}

static void zk_stats(const bench_target *t, bench_server_stats *st)
{
	memset(st, 0, sizeof(*st));
	for (int i = 0; i < t->n_hosts; i++) {
		char where[128];
		char *text = four_letters(t->host[i], t->port[i], "mntr", FOUR_LETTER_TIMEOUT_MS);

		snprintf(where, sizeof(where), "%s:%d", t->host[i], t->port[i]);
		if (!text)
			bench_fail("server stats: %s did not answer mntr within %d ms (is 4lw.commands.whitelist "
			           "set?)",
			           where, FOUR_LETTER_TIMEOUT_MS);
		st->zk_packets_received += mntr_value(text, "zk_packets_received", where);
		st->zk_packets_sent += mntr_value(text, "zk_packets_sent", where);
		st->zk_watch_deleted += mntr_value(text, "zk_sum_node_deleted_watch_count", where);
		st->zk_watch_changed += mntr_value(text, "zk_sum_node_changed_watch_count", where);
		st->zk_watch_children += mntr_value(text, "zk_sum_node_children_watch_count", where);
		st->zk_watch_created += mntr_value(text, "zk_sum_node_created_watch_count", where);
		st->zk_watches += mntr_value(text, "zk_watch_count", where);
		free(text);
	}
	st->valid = true;
}

int bench_server_waiters(const bench_target *t, const char *resource)
{
	bench_server_stats st;

	if (t->kind == BENCH_ZK) {
		zk_stats(t, &st);
		return (int)st.zk_watches;
	}
	if (t->kind == BENCH_REDIS) {
		struct timeval timeout = { .tv_sec = 5 };
		redisContext *c = redisConnectWithTimeout(t->host[0], t->port[0], timeout);
		const char *how;
		int n;

		if (!c || c->err)
			bench_fail("server stats: cannot connect to Redis at %s:%d", t->host[0], t->port[0]);
		redisSetTimeout(c, timeout);
		n = bench_redis_queued(c, resource, &how);
		redisFree(c);
		return n;
	}
	return -1;
}

void bench_server_stats_read(const bench_target *t, bench_server_stats *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (t->kind == BENCH_REDIS)
		redis_stats(t, ret);
	else if (t->kind == BENCH_ZK)
		zk_stats(t, ret);
}

void bench_server_stats_report(const bench_target *t, const bench_server_stats *a,
                               const bench_server_stats *b, double n, const char *unit, bench_result *r)
{
	char key[64];

	if (!a->valid || !b->valid || n <= 0) {
		printf("  server work: not measured for this backend\n");
		return;
	}
	if (t->kind == BENCH_REDIS) {
		double calls = (b->redis_calls - a->redis_calls) / n;
		double usec = (b->redis_usec - a->redis_usec) / n;

		snprintf(key, sizeof(key), "redis_calls_per_%s", unit);
		bench_result_num(r, key, calls);
		snprintf(key, sizeof(key), "redis_usec_per_%s", unit);
		bench_result_num(r, key, usec);
		printf("  server work per %s: %.2f Redis command calls, %.1f us of command time\n", unit,
		       calls, usec);
	} else {
		/* The later mntr counted itself on each server. */
		double recv = (b->zk_packets_received - a->zk_packets_received - t->n_hosts) / n;
		double sent = (b->zk_packets_sent - a->zk_packets_sent) / n;
		double deleted = (b->zk_watch_deleted - a->zk_watch_deleted) / n;
		double changed = (b->zk_watch_changed - a->zk_watch_changed) / n;
		double children = (b->zk_watch_children - a->zk_watch_children) / n;
		double created = (b->zk_watch_created - a->zk_watch_created) / n;

		snprintf(key, sizeof(key), "zk_packets_received_per_%s", unit);
		bench_result_num(r, key, recv);
		snprintf(key, sizeof(key), "zk_packets_sent_per_%s", unit);
		bench_result_num(r, key, sent);
		snprintf(key, sizeof(key), "zk_watch_notifications_per_%s", unit);
		bench_result_num(r, key, deleted + changed + children + created);
		snprintf(key, sizeof(key), "zk_watch_deleted_per_%s", unit);
		bench_result_num(r, key, deleted);
		snprintf(key, sizeof(key), "zk_watch_children_per_%s", unit);
		bench_result_num(r, key, children);
		printf("  server work per %s: %.2f packets received, %.2f sent, %.2f watch notifications "
		       "(%.2f node-deleted, %.2f children)\n",
		       unit, recv, sent, deleted + changed + children + created, deleted, children);
	}
}
