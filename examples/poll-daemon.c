/* SPDX-License-Identifier: MIT */
/*
 * poll-daemon: a single-threaded daemon that holds several locks from a
 * plain poll() loop, with dlock's calls that do not block.
 *
 *   poll-daemon [--uri URI] [--for SECONDS] NAME...
 *
 * It asks for every NAME at once and keeps asking until it holds each;
 * a hold reported lost is cleared and asked for again.  After SECONDS
 * (default: until SIGINT or SIGTERM) it releases what it holds, cancels
 * what it still waits for, and exits 0 once every call has ended; 64 for
 * bad arguments or a NAME the backend refuses, 1 when the client cannot
 * be made.  It says what happens on stdout, one line each.
 *
 * Everything runs on the loop's thread: the client delivers its callbacks
 * (the dones of the calls, the holds' states) through one descriptor,
 * which poll() watches beside a signalfd, and dlock_client_dispatch()
 * runs them here.  No lock needs a thread of the program's.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <dlock.h>

/* How long one acquire waits before it is asked again (ms). */
#define ASK_MS 2000

typedef struct lock_entry {
	const char *name;
	dlock_lock *lock;
	bool busy;      /* a call of the handle is in flight */
	bool held;
} lock_entry;

static bool stopping;

static void ask(lock_entry *e);

static void on_released(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	lock_entry *e = data;

	(void)lock;
	(void)token;
	e->busy = false;
	e->held = false;
	/* DLOCK_ELOST: the hold had been lost; releasing it cleared it. */
	if (rc == DLOCK_OK)
		printf("poll-daemon: released %s\n", e->name);
	if (!stopping)
		ask(e);
}

static void on_acquired(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	lock_entry *e = data;

	e->busy = false;
	if (rc == DLOCK_OK) {
		e->held = true;
		printf("poll-daemon: holding %s (fencing token %" PRIu64 ")\n", e->name, token);
		/* Granted as the stop canceled it: give it back. */
		if (stopping && dlock_release_async(lock, on_released, e) == DLOCK_OK)
			e->busy = true;
		return;
	}
	if (stopping)
		return;
	printf("poll-daemon: %s not acquired: %s; trying again\n", e->name, dlock_last_error_message());
	ask(e);
}

/* Ask for the lock; the answer comes to on_acquired(). */
static void ask(lock_entry *e)
{
	int rc = dlock_acquire_async(e->lock, ASK_MS, on_acquired, e);

	/* Refused at once only for a program's mistake (this handle's
	 * owner, a call already in flight). */
	if (rc != DLOCK_OK) {
		fprintf(stderr, "poll-daemon: %s: %s\n", e->name, dlock_last_error_message());
		abort();
	}
	e->busy = true;
}

/* A hold's state.  LOST: someone else may hold the lock now; clear the
 * lost hold (its release says DLOCK_ELOST) and ask again. */
static void on_state(dlock_lock *lock, dlock_state state, void *data)
{
	lock_entry *e = data;

	if (state == DLOCK_STATE_SUSPENDED)
		printf("poll-daemon: %s is uncertain: pausing its work\n", e->name);
	else if (state == DLOCK_STATE_RECONNECTED)
		printf("poll-daemon: %s is confirmed again\n", e->name);
	if (state != DLOCK_STATE_LOST)
		return;
	printf("poll-daemon: lost %s: taking it again\n", e->name);
	e->held = false;
	if (!e->busy && dlock_release_async(lock, on_released, e) == DLOCK_OK)
		e->busy = true;
}

/* Stop: release what is held, cancel what is waited for. */
static void stop(lock_entry *locks, int n)
{
	printf("poll-daemon: stopping\n");
	stopping = true;
	for (int i = 0; i < n; i++) {
		if (locks[i].busy)
			dlock_lock_cancel(locks[i].lock);
		else if (locks[i].held && dlock_release_async(locks[i].lock, on_released, &locks[i]) == DLOCK_OK)
			locks[i].busy = true;
	}
}

static bool any_busy(const lock_entry *locks, int n)
{
	for (int i = 0; i < n; i++)
		if (locks[i].busy)
			return true;
	return false;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "--NAME VALUE" or "--NAME=VALUE" at argv[*i]: its value, or NULL. */
static const char *option(char **argv, int argc, int *i, const char *name)
{
	size_t len = strlen(name);

	if (strncmp(argv[*i], name, len) != 0)
		return NULL;
	if (argv[*i][len] == '=')
		return argv[*i] + len + 1;
	if (argv[*i][len] == '\0' && *i + 1 < argc)
		return argv[++*i];
	return NULL;
}

static int usage(const char *why)
{
	fprintf(stderr, "poll-daemon: %s\nusage: poll-daemon [--uri URI] [--for SECONDS] NAME...\n", why);
	return 64;
}

int main(int argc, char **argv)
{
	const char *uri = NULL, *value;
	int64_t end_ms = -1;
	dlock_client *client = NULL;
	lock_entry *locks;
	struct pollfd fds[2];
	sigset_t signals;
	int first = 1, n, rc, status = 0;

	for (; first < argc && strncmp(argv[first], "--", 2) == 0; first++) {
		char *end;
		long seconds;

		if ((value = option(argv, argc, &first, "--uri"))) {
			uri = value;
		} else if ((value = option(argv, argc, &first, "--for"))) {
			seconds = strtol(value, &end, 10);
			if (*value == '\0' || *end != '\0' || seconds < 0)
				return usage("--for: not a number of seconds");
			end_ms = now_ms() + seconds * 1000;
		} else {
			return usage("unknown option or a missing value");
		}
	}
	n = argc - first;
	if (n < 1)
		return usage("no lock NAME given");
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* SIGINT and SIGTERM come through a descriptor too. */
	sigemptyset(&signals);
	sigaddset(&signals, SIGINT);
	sigaddset(&signals, SIGTERM);
	sigprocmask(SIG_BLOCK, &signals, NULL);
	fds[1] = (struct pollfd){ .fd = signalfd(-1, &signals, SFD_CLOEXEC), .events = POLLIN };

	/* Dispatch delivery: set before the first lock handle. */
	if (dlock_client_new(uri, &client) != DLOCK_OK ||
	    dlock_client_set_delivery(client, DLOCK_DELIVER_DISPATCH) != DLOCK_OK) {
		fprintf(stderr, "poll-daemon: %s\n", dlock_last_error_message());
		dlock_client_free(client);
		return 1;
	}
	fds[0] = (struct pollfd){ .fd = dlock_client_event_fd(client), .events = POLLIN };

	/* Calls without a waiting thread need a handle that owns its hold. */
	locks = calloc((size_t)n, sizeof *locks);
	for (int i = 0; i < n; i++) {
		locks[i].name = argv[first + i];
		if (dlock_lock_new(client, locks[i].name, &locks[i].lock) != DLOCK_OK ||
		    dlock_lock_set_owner(locks[i].lock, DLOCK_OWNER_HANDLE) != DLOCK_OK ||
		    dlock_lock_set_state_callback(locks[i].lock, on_state, &locks[i]) != DLOCK_OK) {
			/* A name the backend refuses: stop what started. */
			fprintf(stderr, "poll-daemon: %s: %s\n", locks[i].name, dlock_last_error_message());
			status = 64;
			stop(locks, i);
			break;
		}
		ask(&locks[i]);
	}

	/* The loop: until stopped and every call has ended. */
	while (!stopping || any_busy(locks, n)) {
		int timeout = -1;

		if (!stopping && end_ms >= 0)
			timeout = (int)(end_ms > now_ms() ? end_ms - now_ms() : 0);
		rc = poll(fds, 2, timeout);
		if (rc < 0 && errno != EINTR) {
			perror("poll-daemon: poll");
			return 1;
		}
		if (fds[1].revents & POLLIN) {
			struct signalfd_siginfo info;

			if (read(fds[1].fd, &info, sizeof info) == (ssize_t)sizeof info && !stopping)
				stop(locks, n);
		}
		if (fds[0].revents & POLLIN)
			dlock_client_dispatch(client, 0);
		if (!stopping && end_ms >= 0 && now_ms() >= end_ms)
			stop(locks, n);
	}

	/* Every call has ended and nothing is held. */
	for (int i = 0; i < n; i++)
		dlock_lock_free(locks[i].lock);
	dlock_client_free(client);
	free(locks);
	close(fds[1].fd);
	printf("poll-daemon: done\n");
	return status;
}
