/* SPDX-License-Identifier: MIT */
/*
 * dlock status: ask the backend who holds RESOURCE and print it, as text
 * for people or as one JSON object for programs: how it is held (free,
 * exclusive, shared) and every holder the backend records; for a Redlock,
 * the quorum's verdict and then each master's own view.  Exit 0 free,
 * 1 held.
 */
#include <inttypes.h>
#include <stdbool.h>
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

static const char *mode_name(dlock_held_as mode)
{
	switch (mode) {
	case DLOCK_HELD_EXCLUSIVE:
		return "exclusive";
	case DLOCK_HELD_SHARED:
		return "shared";
	default:
		return "free";
	}
}

/* A string, or null for NULL. */
static void json_string_or_null(const char *s)
{
	if (s)
		json_string(s);
	else
		printf("null");
}

/* A number, or null when it is not known. */
static void json_int_or_null(int64_t value, bool known)
{
	if (known)
		printf("%" PRId64, value);
	else
		printf("null");
}

/*
 * "<prefix>host":...,"<prefix>pid":...,"<prefix>tid":...,"<prefix>since_ms":...
 * of holder i: a dlock holder's record, or null for each where the holder
 * is a peer's (or an election node holding the bare participant id) or
 * there is none, so that every backend prints the same keys.
 */
static void json_holder_fields(const dlock_info *info, size_t i, const char *prefix)
{
	bool known = dlock_info_holder_pid_at(info, i) > 0;
	int64_t since = dlock_info_holder_since_ms_at(info, i);

	printf("\"%shost\":", prefix);
	json_string_or_null(dlock_info_holder_host_at(info, i));
	printf(",\"%spid\":", prefix);
	json_int_or_null(dlock_info_holder_pid_at(info, i), known);
	printf(",\"%stid\":", prefix);
	json_int_or_null(dlock_info_holder_tid_at(info, i), known);
	printf(",\"%ssince_ms\":", prefix);
	json_int_or_null(since, known && since > 0);
}

/* ,"masters":[...]: a Redlock's masters, each as it answered; [] on any
 * other backend. */
static void json_masters(const dlock_info *info)
{
	printf(",\"masters\":[");
	for (size_t i = 0; i < dlock_info_masters(info); i++) {
		const char *holder = dlock_info_master_holder_at(info, i);

		printf("%s{\"address\":", i ? "," : "");
		json_string(dlock_info_master_at(info, i));
		printf(",\"reachable\":%s,\"holder\":",
		       dlock_info_master_reachable_at(info, i) ? "true" : "false");
		json_string_or_null(*holder ? holder : NULL);
		printf(",\"expires_in_ms\":%" PRId64 ",\"fencing_token\":%" PRIu64 "}",
		       dlock_info_master_expires_in_ms_at(info, i),
		       dlock_info_master_fencing_token_at(info, i));
	}
	printf("]");
}

/*
 * The status as one JSON object, with the same keys on every backend and
 * null where a value does not exist or the backend does not know it (no
 * holder, a peer's holder, not a semaphore, no leader), so that a script
 * reading .leader or .holder_pid works whichever backend a route picks.
 */
static void print_json(const char *resource, const dlock_info *info)
{
	bool locked = dlock_info_locked(info);

	printf("{\"resource\":");
	json_string(resource);
	printf(",\"held\":%s,\"mode\":\"%s\",\"holder\":", locked ? "true" : "false",
	       mode_name(dlock_info_mode(info)));
	json_string_or_null(locked ? dlock_info_holder(info) : NULL);
	printf(",");
	json_holder_fields(info, 0, "holder_");
	printf(",\"holders\":[");
	for (size_t i = 0; i < dlock_info_holders(info); i++) {
		printf("%s{\"holder\":", i ? "," : "");
		json_string(dlock_info_holder_at(info, i));
		printf(",");
		json_holder_fields(info, i, "");
		printf("}");
	}
	printf("],\"leader\":");
	json_string_or_null(dlock_info_leader(info));
	printf(",\"permits\":");
	json_int_or_null(dlock_info_permits(info), dlock_info_permits(info) > 0);
	printf(",\"expires_in_ms\":%" PRId64 ",\"fencing_token\":%" PRIu64 ",\"backend\":",
	       dlock_info_expires_in_ms(info), dlock_info_fencing_token(info));
	json_string(dlock_info_backend(info));
	printf(",\"master\":");
	json_string_or_null(dlock_info_master(info));
	printf(",\"service\":");
	json_string_or_null(dlock_info_service(info));
	json_masters(info);
	printf("}\n");
}

/* One line per master of a Redlock: what it holds, or that it did not answer. */
static void text_masters(const dlock_info *info)
{
	for (size_t i = 0; i < dlock_info_masters(info); i++) {
		printf("master %s: ", dlock_info_master_at(info, i));
		if (!dlock_info_master_reachable_at(info, i))
			printf("unreachable\n");
		else if (!*dlock_info_master_holder_at(info, i))
			printf("free, fencing %" PRIu64 "\n", dlock_info_master_fencing_token_at(info, i));
		else
			printf("%s, expires in %" PRId64 " ms, fencing %" PRIu64 "\n",
			       dlock_info_master_holder_at(info, i),
			       dlock_info_master_expires_in_ms_at(info, i),
			       dlock_info_master_fencing_token_at(info, i));
	}
}

/* The status for people, one "name: value" line each. */
static void print_text(const char *resource, const dlock_info *info)
{
	bool locked = dlock_info_locked(info);
	const char *leader = dlock_info_leader(info);
	size_t n = dlock_info_holders(info);

	printf("resource: %s\n", resource);
	printf("held:     %s\n", locked ? (dlock_info_mode(info) == DLOCK_HELD_SHARED ? "yes, shared"
	                                                                              : "yes, exclusive")
	                              : "no");
	if (dlock_info_permits(info) > 0)
		printf("permits:  %zu of %" PRIu32 " taken\n", n, dlock_info_permits(info));
	if (leader)
		printf("leader:   %s\n", leader);
	if (locked && n == 1)
		printf("holder:   %s\n", dlock_info_holder(info));
	for (size_t i = 0; locked && n > 1 && i < n; i++)
		printf("holder %zu: %s\n", i + 1, dlock_info_holder_at(info, i));
	if (locked && dlock_info_expires_in_ms(info) >= 0)
		printf("expires:  in %" PRId64 " ms\n", dlock_info_expires_in_ms(info));
	if (dlock_info_fencing_token(info))
		printf("fencing:  %" PRIu64 " (latest token)\n", dlock_info_fencing_token(info));
	printf("backend:  %s\n", dlock_info_backend(info));
	if (dlock_info_service(info))
		printf("service:  %s\n", dlock_info_service(info));
	if (dlock_info_master(info))
		printf("master:   %s\n", dlock_info_master(info));
	text_masters(info);
}

int cli_status(const cli_options *o)
{
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;
	int rc, locked;

	if ((rc = cli_open(o, &client, &lock, NULL)) != 0)
		return rc;
	rc = dlock_lock_query(lock, &info);
	if (rc != DLOCK_OK) {
		rc = cli_fail(rc, o->resource, o);
		dlock_lock_free(lock);
		dlock_client_free(client);
		return rc;
	}
	locked = dlock_info_locked(info);
	if (o->json)
		print_json(o->resource, info);
	else
		print_text(o->resource, info);
	dlock_info_free(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
	return locked ? 1 : 0;
}
