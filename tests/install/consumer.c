/* SPDX-License-Identifier: MIT */
/*
 * A program built against an installed dlock (tests/install): takes and
 * releases a lock on the file backend in the directory argv[1], and
 * prints the library's version.
 */
#include <stdio.h>

#include <dlock.h>

int main(int argc, char **argv)
{
	char uri[4096];
	dlock_client *client;
	dlock_lock *lock = NULL;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: consumer DIR\n");
		return 64;
	}
	snprintf(uri, sizeof(uri), "file://%s", argv[1]);
	if ((rc = dlock_client_new(uri, &client)) != DLOCK_OK) {
		fprintf(stderr, "consumer: %s: %s\n", dlock_strerror(rc), dlock_last_error_message());
		return 1;
	}
	if ((rc = dlock_lock_new(client, "install/check", &lock)) == DLOCK_OK &&
	    (rc = dlock_acquire(lock, 1000)) == DLOCK_OK)
		rc = dlock_release(lock);
	if (rc != DLOCK_OK)
		fprintf(stderr, "consumer: %s: %s\n", dlock_strerror(rc), dlock_last_error_message());
	else
		printf("dlock %s: held and released\n", dlock_version());
	dlock_lock_free(lock);
	dlock_client_free(client);
	return rc == DLOCK_OK ? 0 : 1;
}
