/* SPDX-License-Identifier: MIT */
/*
 * dlock-example — take a lock, show its fencing token, do some work, release.
 *
 *   dlock-example [SPEC [RESOURCE]]
 *
 * SPEC defaults to redis://127.0.0.1:6379 and RESOURCE to "example/report".
 * Exit status (as the dlock command's): 0 done, 75 not acquired within
 * 10 s, 69 backend unreachable, 78 configuration error, 64 usage error,
 * 1 anything else.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlock.h>

#include <inttypes.h>
#include <stdio.h>
#include <time.h>

enum {
	EXIT_DONE = 0,
	EXIT_OTHER = 1,
	EXIT_USAGE = 64,
	EXIT_UNAVAILABLE = 69,
	EXIT_NOT_ACQUIRED = 75,
	EXIT_CONFIG = 78
};

static const char *const level_names[] = { "error", "warning", "info", "debug" };
static const char *const state_names[] = { "?", "SUSPENDED", "RECONNECTED", "LOST" };

/* The library's log messages.  Runs on any thread: one fprintf per message
 * keeps lines whole. */
static void on_log(dlock_log_level level, const char *message, void *user_data)
{
	(void)user_data;
	fprintf(stderr, "dlock-example: [%s] %s\n",
	        level >= DLOCK_LOG_ERROR && level <= DLOCK_LOG_DEBUG ? level_names[level] : "?",
	        message);
}

/* What the library noticed about our hold.  Runs on the client's callback
 * thread. */
static void on_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	(void)user_data;
	fprintf(stderr, "dlock-example: %s: hold is now %s\n", dlock_lock_resource(lock),
	        state >= DLOCK_STATE_SUSPENDED && state <= DLOCK_STATE_LOST ? state_names[state] : "?");
}

/* Report a failed call and map its code to an exit status.  Must be called
 * right after the failing call: the detail message is this thread's and is
 * replaced by its next failure. */
static int fail(const char *what, int rc)
{
	const char *detail = dlock_last_error_message();

	fprintf(stderr, "dlock-example: %s: %s (%s)%s%s\n", what, dlock_strerror(rc),
	        dlock_code_name(rc), detail[0] != '\0' ? ": " : "", detail);
	switch (rc) {
	case DLOCK_ETIMEDOUT:
	case DLOCK_EBUSY:
		return EXIT_NOT_ACQUIRED;
	case DLOCK_EUNAVAILABLE:
		return EXIT_UNAVAILABLE;
	case DLOCK_ECONFIG:
		return EXIT_CONFIG;
	default:
		return EXIT_OTHER;
	}
}

/* Stands for the work done under the lock. */
static void do_work(void)
{
	struct timespec one_second = { .tv_sec = 1, .tv_nsec = 0 };

	while (nanosleep(&one_second, &one_second) != 0) {
		/* interrupted: sleep the rest */
	}
}

int main(int argc, char **argv)
{
	const char *spec = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
	const char *resource = argc > 2 ? argv[2] : "example/report";
	dlock_client *client = NULL;
	dlock_lock *lock = NULL;
	int status = EXIT_OTHER;
	int rc;

	if (argc > 3) {
		fprintf(stderr, "usage: %s [SPEC [RESOURCE]]\n", argv[0]);
		return EXIT_USAGE;
	}

	rc = dlock_client_new(spec, &client);
	if (rc != DLOCK_OK) {
		status = fail("dlock_client_new", rc);
		goto out;
	}
	rc = dlock_client_set_log_callback(client, DLOCK_LOG_INFO, on_log, NULL);
	if (rc != DLOCK_OK) {
		status = fail("dlock_client_set_log_callback", rc);
		goto out;
	}
	rc = dlock_lock_new(client, resource, &lock);
	if (rc != DLOCK_OK) {
		status = fail("dlock_lock_new", rc);
		goto out;
	}
	rc = dlock_lock_set_state_callback(lock, on_state, NULL);
	if (rc != DLOCK_OK) {
		status = fail("dlock_lock_set_state_callback", rc);
		goto out;
	}

	rc = dlock_acquire(lock, 10000);
	if (rc != DLOCK_OK) {
		status = fail("dlock_acquire", rc);
		goto out;
	}
	/* Pass the token with every write the lock protects, so that storage
	 * which remembers the largest token it has seen can refuse a holder
	 * whose lock expired while it was paused. */
	printf("acquired %s, fencing token %" PRIu64 "\n", resource, dlock_fencing_token(lock));
	fflush(stdout);

	do_work();

	rc = dlock_release(lock);
	if (rc != DLOCK_OK) {
		/* DLOCK_ELOST: the lock was lost during the work, which may have
		 * overlapped with another holder's. */
		status = fail("dlock_release", rc);
		goto out;
	}
	printf("released %s\n", resource);
	status = EXIT_DONE;

out:
	dlock_lock_free(lock);     /* NULL is a no-op; releases a hold still held */
	dlock_client_free(client); /* NULL is a no-op */
	return status;
}
