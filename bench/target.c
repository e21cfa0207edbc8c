/* SPDX-License-Identifier: MIT */
/*
 * The backend under test, read from the dlock URI given on the command
 * line.  dlock itself gets the URI unchanged; the floors and the server
 * statistics need the host and port list (Redis, ZooKeeper) or the
 * directory (file), which this file extracts.  Credentials are refused:
 * the floors would need them too, and a benchmark runs on throwaway
 * servers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* Parse "host:port[,host:port...]" up to the first '/' or '?'. */
static int parse_hosts(const char *p, bench_target *t)
{
	size_t len = strcspn(p, "/?");
	char list[512];
	char *save = NULL;

	if (len == 0 || len >= sizeof(list))
		return -1;
	memcpy(list, p, len);
	list[len] = '\0';
	if (strchr(list, '@')) {
		fprintf(stderr, "dlock-bench: credentials in the URI are not supported (the floors "
		                "connect without them)\n");
		return -1;
	}
	snprintf(t->hosts, sizeof(t->hosts), "%s", list);
	for (char *h = strtok_r(list, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(h, ':');
		char *end;
		long port;

		if (t->n_hosts == BENCH_MAX_HOSTS || !colon || colon == h ||
		    (size_t)(colon - h) >= sizeof(t->host[0]))
			return -1;
		port = strtol(colon + 1, &end, 10);
		if (*end || port <= 0 || port > 65535)
			return -1;
		memcpy(t->host[t->n_hosts], h, (size_t)(colon - h));
		t->host[t->n_hosts][colon - h] = '\0';
		t->port[t->n_hosts] = (int)port;
		t->n_hosts++;
	}
	return t->n_hosts > 0 ? 0 : -1;
}

/*
 * Fill *ret from uri: redis://h:p[,h:p...][/db][?...] (several hosts:
 * Redlock), redis+cluster://seed:p[,seed:p...][?...], zk://h:p[,h:p...][...]
 * or file:///dir.  label NULL means the scheme's name.  Returns 0, or -1
 * after printing why on stderr.
 */
int bench_target_parse(const char *uri, const char *label, bench_target *ret)
{
	bench_target t;

	memset(&t, 0, sizeof(t));
	t.uri = uri;
	if (strncmp(uri, "redis://", 8) == 0) {
		t.kind = BENCH_REDIS;
		t.label = "redis";
		if (parse_hosts(uri + 8, &t) != 0)
			goto bad;
	} else if (strncmp(uri, "redis+cluster://", 16) == 0) {
		t.kind = BENCH_REDIS;
		t.cluster = true;
		t.label = "redis-cluster";
		if (parse_hosts(uri + 16, &t) != 0)
			goto bad;
	} else if (strncmp(uri, "zk://", 5) == 0) {
		t.kind = BENCH_ZK;
		t.label = "zk";
		if (parse_hosts(uri + 5, &t) != 0)
			goto bad;
	} else if (strncmp(uri, "file://", 7) == 0) {
		const char *dir = uri + 7;
		size_t len = strcspn(dir, "?");

		t.kind = BENCH_FILE;
		t.label = "file";
		if (dir[0] != '/' || len >= sizeof(t.dir))
			goto bad;
		memcpy(t.dir, dir, len);
		t.dir[len] = '\0';
	} else {
		goto bad;
	}
	if (label)
		t.label = label;
	*ret = t;
	return 0;
bad:
	fprintf(stderr,
	        "dlock-bench: '%s': expected redis://HOST:PORT[,HOST:PORT...], "
	        "redis+cluster://HOST:PORT[,HOST:PORT...], zk://HOST:PORT[,HOST:PORT...] or file:///DIR\n",
	        uri);
	return -1;
}
