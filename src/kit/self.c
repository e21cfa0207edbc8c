/* SPDX-License-Identifier: MIT */
/*
 * Who is calling: the process's pid, the calling thread's kernel id, and
 * random bytes for owner tokens, each without a system call on the hot
 * path.  Every acquire and release asks for some of them, and a system
 * call costs about a microsecond on a virtual machine: four of them were
 * a tenth of an uncontended Redis acquire+release.
 *
 * The pid is read once; the thread id once per thread; random bytes come
 * from a per-thread pool refilled from getrandom() a block at a time.  A
 * fork handler, registered on first use, reads the pid again in the child
 * and counts a new generation, which makes the one thread there read its
 * id again and drop its pool: it would otherwise carry its parent's ids
 * and the same unused random bytes as the parent.  The handler does only
 * that (getpid() and two stores), since until it execs, the child of a
 * multithreaded process may call only async-signal-safe functions; even
 * the forking thread's thread-local variables are left alone there, as a
 * library's may be allocated on first touch.  A child made by a raw
 * clone() system call, bypassing the C library's fork, is not seen: it
 * would keep its parent's ids.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "parse.h"
#include "thread.h"

#define POOL_BYTES 256

typedef struct random_pool {
	unsigned char bytes[POOL_BYTES];
	size_t left;         /* unused bytes, at the end of bytes[] */
	unsigned generation; /* of the process the bytes were drawn in */
} random_pool;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pid_t self_pid;
/* Bumped in each child of fork(): thread-local values of an older
 * generation are the parent's.  Written only there, where one thread
 * runs, and read by threads started after it. */
static unsigned generation;
static __thread pid_t self_tid;
static __thread unsigned tid_generation;
static __thread random_pool pool;

static void forked_child(void)
{
	self_pid = getpid();
	generation++;
}

static void init_once(void)
{
	self_pid = getpid();
	pthread_atfork(NULL, NULL, forked_child);
}

pid_t dlock__self_pid(void)
{
	pthread_once(&once, init_once);
	return self_pid;
}

pid_t dlock__self_tid(void)
{
	if (!self_tid || tid_generation != generation) {
		pthread_once(&once, init_once);
		self_tid = gettid();
		tid_generation = generation;
	}
	return self_tid;
}

static void kernel_random(void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = getrandom((char *)buf + done, len - done, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			g_error("dlock: getrandom failed: %s", g_strerror(errno));
		done += (size_t)n;
	}
}

void dlock__random_bytes(void *buf, size_t len)
{
	unsigned char *out = buf;

	pthread_once(&once, init_once);
	if (pool.generation != generation) {
		/* The parent's bytes: it hands them out itself. */
		explicit_bzero(pool.bytes, sizeof(pool.bytes));
		pool.left = 0;
		pool.generation = generation;
	}
	while (len > 0) {
		size_t n;

		if (pool.left == 0) {
			kernel_random(pool.bytes, sizeof(pool.bytes));
			pool.left = sizeof(pool.bytes);
		}
		n = MIN(len, pool.left);
		/* Taken from the end and wiped: no byte is handed out twice. */
		memcpy(out, pool.bytes + pool.left - n, n);
		explicit_bzero(pool.bytes + pool.left - n, n);
		pool.left -= n;
		out += n;
		len -= n;
	}
}
