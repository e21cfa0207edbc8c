/*
 * dlock-bench: what a lock costs, measured side by side with the floor in
 * one run, so that the ratios hold on a noisy shared machine.
 *
 *   dlock-bench latency URI [ROUNDS] [ITERATIONS]
 *       Uncontended acquire+release pairs through dlock, interleaved round
 *       by round with the floor: bare hiredis sending SET key token NX PX
 *       and then a compare-and-delete script by EVALSHA, on its own
 *       connection.  Prints mean, p50, p99, p99.9 of each and the ratios.
 *
 *   dlock-bench handoff URI [COUNT]
 *       Time from a holder's release to the acquisition by a waiter in
 *       another process (the waiter is this program re-executed).
 *
 * Only Redis URIs of the form redis://host:port are supported by the floor.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "dlock.h"

static const char release_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

typedef struct stats {
	double mean_us, p50_us, p99_us, p999_us;
} stats;

static stats summarize(int64_t *samples, size_t n)
{
	stats s;
	double sum = 0;

	qsort(samples, n, sizeof(*samples), cmp_i64);
	for (size_t i = 0; i < n; i++)
		sum += (double)samples[i];
	s.mean_us = sum / (double)n / 1000.0;
	s.p50_us = (double)samples[n / 2] / 1000.0;
	s.p99_us = (double)samples[(size_t)((double)n * 0.99)] / 1000.0;
	s.p999_us = (double)samples[(size_t)((double)n * 0.999)] / 1000.0;
	return s;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "dlock-bench: %s: %s (%s)\n", what, dlock_strerror(rc), dlock_last_error_message());
	exit(1);
}

static int parse_host_port(const char *uri, char *host, size_t host_len, int *port)
{
	const char *p = strstr(uri, "://");
	const char *colon;

	if (!p || strncmp(uri, "redis://", 8) != 0)
		return -1;
	p += 3;
	if (strchr(p, '@'))
		p = strchr(p, '@') + 1;
	colon = strchr(p, ':');
	if (!colon || (size_t)(colon - p) >= host_len)
		return -1;
	memcpy(host, p, (size_t)(colon - p));
	host[colon - p] = '\0';
	*port = atoi(colon + 1);
	return 0;
}

/* One floor pair: SET NX PX, then compare-and-delete by EVALSHA. */
static void floor_pair(redisContext *c, const char *sha, const char *key, const char *token)
{
	redisReply *r = redisCommand(c, "SET %s %s NX PX 30000", key, token);

	if (!r || r->type != REDIS_REPLY_STATUS) {
		fprintf(stderr, "dlock-bench: floor SET failed\n");
		exit(1);
	}
	freeReplyObject(r);
	r = redisCommand(c, "EVALSHA %s 1 %s %s", sha, key, token);
	if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
		fprintf(stderr, "dlock-bench: floor release failed\n");
		exit(1);
	}
	freeReplyObject(r);
}

static int latency(const char *uri, int rounds, int iterations)
{
	char host[256], sha[64];
	int port;
	redisContext *c;
	redisReply *r;
	dlock_client *client;
	dlock_lock *lock;
	int64_t *floor_ns = calloc((size_t)(rounds * iterations), sizeof(int64_t));
	int64_t *dlock_ns = calloc((size_t)(rounds * iterations), sizeof(int64_t));
	size_t nf = 0, nd = 0;
	stats f, d;
	int rc;

	if (parse_host_port(uri, host, sizeof(host), &port) != 0) {
		fprintf(stderr, "dlock-bench: latency needs redis://host:port\n");
		return 64;
	}
	c = redisConnect(host, port);
	if (!c || c->err) {
		fprintf(stderr, "dlock-bench: cannot connect to %s:%d\n", host, port);
		return 69;
	}
	r = redisCommand(c, "SCRIPT LOAD %s", release_lua);
	snprintf(sha, sizeof(sha), "%s", r->str);
	freeReplyObject(r);

	if ((rc = dlock_client_new(uri, &client)) != DLOCK_OK)
		die("client", rc);
	if ((rc = dlock_lock_new(client, "bench/latency", &lock)) != DLOCK_OK)
		die("lock", rc);

	/* Warm-up: connections, script cache, the server's allocator. */
	for (int i = 0; i < iterations; i++) {
		floor_pair(c, sha, "bench-floor", "warm-up-token-0123456789abcdef");
		if ((rc = dlock_acquire(lock, -1)) != DLOCK_OK || (rc = dlock_release(lock)) != DLOCK_OK)
			die("warm-up", rc);
	}
	for (int round = 0; round < rounds; round++) {
		/* Alternate which side goes first, so drift hits both alike. */
		for (int side = 0; side < 2; side++) {
			bool do_floor = (side == 0) == (round % 2 == 0);

			for (int i = 0; i < iterations; i++) {
				int64_t t0 = now_ns();

				if (do_floor) {
					floor_pair(c, sha, "bench-floor", "dlock1:0123456789abcdef0123456789abcdef:1:1:1:host");
					floor_ns[nf++] = now_ns() - t0;
				} else {
					if ((rc = dlock_acquire(lock, -1)) != DLOCK_OK)
						die("acquire", rc);
					if ((rc = dlock_release(lock)) != DLOCK_OK)
						die("release", rc);
					dlock_ns[nd++] = now_ns() - t0;
				}
			}
		}
	}
	f = summarize(floor_ns, nf);
	d = summarize(dlock_ns, nd);
	printf("latency: %d rounds x %d pairs, interleaved\n", rounds, iterations);
	printf("%-8s %10s %10s %10s %10s\n", "", "mean_us", "p50_us", "p99_us", "p99.9_us");
	printf("%-8s %10.1f %10.1f %10.1f %10.1f\n", "floor", f.mean_us, f.p50_us, f.p99_us, f.p999_us);
	printf("%-8s %10.1f %10.1f %10.1f %10.1f\n", "dlock", d.mean_us, d.p50_us, d.p99_us, d.p999_us);
	printf("ratio dlock/floor: mean %.2f, p50 %.2f\n", d.mean_us / f.mean_us, d.p50_us / f.p50_us);

	dlock_lock_free(lock);
	dlock_client_free(client);
	redisFree(c);
	free(floor_ns);
	free(dlock_ns);
	return 0;
}

/* The waiter process: acquire, report the time, release; COUNT times. */
static int handoff_waiter(const char *uri, int count, int out_fd)
{
	dlock_client *client;
	dlock_lock *lock;
	int rc;

	if ((rc = dlock_client_new(uri, &client)) != DLOCK_OK)
		die("client", rc);
	if ((rc = dlock_lock_new(client, "bench/handoff", &lock)) != DLOCK_OK)
		die("lock", rc);
	for (int i = 0; i < count; i++) {
		int64_t t;

		if ((rc = dlock_acquire(lock, 30000)) != DLOCK_OK)
			die("waiter acquire", rc);
		t = now_ns();
		if (write(out_fd, &t, sizeof(t)) != sizeof(t))
			exit(1);
		if ((rc = dlock_release(lock)) != DLOCK_OK)
			die("waiter release", rc);
		usleep(2000); /* let the holder take it back */
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	return 0;
}

static int handoff(const char *self, const char *uri, int count)
{
	dlock_client *client;
	dlock_lock *lock;
	int64_t *samples = calloc((size_t)count, sizeof(int64_t));
	int fds[2];
	char count_text[16], fd_text[16];
	pid_t pid;
	stats s;
	int rc, status;

	if ((rc = dlock_client_new(uri, &client)) != DLOCK_OK)
		die("client", rc);
	if ((rc = dlock_lock_new(client, "bench/handoff", &lock)) != DLOCK_OK)
		die("lock", rc);
	if (pipe(fds) != 0)
		return 1;
	if ((rc = dlock_acquire(lock, -1)) != DLOCK_OK)
		die("acquire", rc);
	snprintf(count_text, sizeof(count_text), "%d", count);
	snprintf(fd_text, sizeof(fd_text), "%d", fds[1]);
	pid = fork();
	if (pid == 0) {
		execl(self, self, "handoff-waiter", uri, count_text, fd_text, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	for (int i = 0; i < count; i++) {
		int64_t released, acquired;

		usleep(20000); /* the waiter is subscribed and asleep by now */
		released = now_ns();
		if ((rc = dlock_release(lock)) != DLOCK_OK)
			die("release", rc);
		if (read(fds[0], &acquired, sizeof(acquired)) != sizeof(acquired))
			return 1;
		samples[i] = acquired - released;
		if ((rc = dlock_acquire(lock, 30000)) != DLOCK_OK)
			die("re-acquire", rc);
	}
	dlock_release(lock);
	waitpid(pid, &status, 0);
	s = summarize(samples, (size_t)count);
	printf("handoff to another process: %d samples: mean %.1f us, p50 %.1f us, p99 %.1f us\n", count,
	       s.mean_us, s.p50_us, s.p99_us);
	dlock_lock_free(lock);
	dlock_client_free(client);
	free(samples);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 3 && strcmp(argv[1], "latency") == 0)
		return latency(argv[2], argc > 3 ? atoi(argv[3]) : 10, argc > 4 ? atoi(argv[4]) : 2000);
	if (argc >= 3 && strcmp(argv[1], "handoff") == 0)
		return handoff("/proc/self/exe", argv[2], argc > 3 ? atoi(argv[3]) : 50);
	if (argc == 5 && strcmp(argv[1], "handoff-waiter") == 0)
		return handoff_waiter(argv[2], atoi(argv[3]), atoi(argv[4]));
	fprintf(stderr, "usage: dlock-bench latency URI [ROUNDS] [ITERATIONS]\n"
	                "       dlock-bench handoff URI [COUNT]\n");
	return 64;
}
