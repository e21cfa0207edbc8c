/*
 * dlock status: ask the backend who holds RESOURCE and print it, as text
 * for people or as one JSON object for programs.  Exit 0 free, 1 held.
 */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"

static void json_string(const char *s)
{
	putchar('"');
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

int cli_status(const cli_options *o)
{
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;
	int rc, locked;

	if ((rc = cli_open_lock(o, &client, &lock)) != 0)
		return rc;
	rc = dlock_lock_query(lock, &info);
	if (rc != DLOCK_OK) {
		rc = cli_fail(rc, o->resource, o);
		dlock_lock_free(lock);
		dlock_client_free(client);
		return rc;
	}
	locked = dlock_info_locked(info);
	if (o->json) {
		printf("{\"resource\":");
		json_string(o->resource);
		printf(",\"held\":%s,\"holder\":", locked ? "true" : "false");
		json_string(dlock_info_holder(info));
		if (dlock_info_holder_pid(info) > 0) {
			printf(",\"holder_host\":");
			json_string(dlock_info_holder_host(info));
			printf(",\"holder_pid\":%" PRId64 ",\"holder_tid\":%" PRId64 ",\"holder_since_ms\":%" PRId64,
			       dlock_info_holder_pid(info), dlock_info_holder_tid(info),
			       dlock_info_holder_since_ms(info));
		}
		printf(",\"expires_in_ms\":%" PRId64 ",\"fencing_token\":%" PRIu64 ",\"backend\":",
		       dlock_info_expires_in_ms(info), dlock_info_fencing_token(info));
		json_string(dlock_info_backend(info));
		printf("}\n");
	} else {
		printf("resource: %s\n", o->resource);
		printf("held:     %s\n", locked ? "yes" : "no");
		if (locked)
			printf("holder:   %s\n", dlock_info_holder(info));
		if (locked && dlock_info_expires_in_ms(info) >= 0)
			printf("expires:  in %" PRId64 " ms\n", dlock_info_expires_in_ms(info));
		if (dlock_info_fencing_token(info))
			printf("fencing:  %" PRIu64 " (latest token)\n", dlock_info_fencing_token(info));
		printf("backend:  %s\n", dlock_info_backend(info));
	}
	dlock_info_free(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
	return locked ? 1 : 0;
}
