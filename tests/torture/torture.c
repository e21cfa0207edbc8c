/* SPDX-License-Identifier: MIT */
/*
 * dlock torture run (Jepsen-style).
 *
 *   test-torture --backend redis|zk|file|redlock|sentinel|cluster [--seed N] [--duration 60s]
 *                [--long 2h] [--workers N] [--resources N] [--permits N]
 *                [--faults a,b]
 *   test-torture --self-check
 *   test-torture --recheck FILE
 *
 * $DLOCK_TORTURE_DURATION, when set, replaces --duration (CI's sanitizer
 * pass runs the suite shorter).
 * Starts the servers (Redis; a 3-node ZooKeeper ensemble; a directory;
 * three Redis masters for Redlock; a master, a replica and three
 * sentinels for Sentinel; a Redis Cluster of three masters with a replica
 * each), one fault-injection proxy per worker and server (none for
 * Sentinel and Cluster: the workers follow the master the sentinels or
 * the slot map name, which no proxy can stand in front of), and worker
 * processes (this program re-executed) that loop
 * acquire -> write -> release over every recipe: resource i is used as
 * the i-th letter of the backend's layout says (mutex, read-write,
 * semaphore, election; Redlock has mutexes and an election).  The storage
 * service is here: it answers each write, refusing one whose fencing token
 * is lower than the largest it has seen for the resource.  The nemesis
 * (torture-nemesis.c) injects one fault at a time, chosen by a seeded
 * generator; the checker (torture-check*.c) reads every event and fault
 * afterwards.  Exit status 0 only if every count that must be zero is.
 *
 * --self-check runs a rogue worker (torture-rogue.c) that breaks every
 * rule beside an honest one, with the storage's fencing check off, and
 * passes only if the checker reports each broken rule by name.
 */
#include "torture-run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test-proxy.h"
#include "test-redis.h"
#include "test-util.h"
#include "test-zk.h"

/* ---- options ------------------------------------------------------------ */

static int64_t parse_duration_s(const char *text)
{
	char *end;
	double v = g_ascii_strtod(text, &end);

	if (end == text || v < 0)
		return -1;
	if (*end == '\0' || g_str_equal(end, "s"))
		return (int64_t)v;
	if (g_str_equal(end, "m"))
		return (int64_t)(v * 60);
	if (g_str_equal(end, "h"))
		return (int64_t)(v * 3600);
	return -1;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: test-torture --backend redis|zk|file|redlock|sentinel|cluster [--seed N] [--duration D | --long D]\n"
	        "                    [--workers N] [--resources N] [--permits N] [--faults KIND,...] [--strict]\n"
	        "       test-torture --self-check\n"
	        "       test-torture --recheck FILE   (check the events a run wrote to $DLOCK_TORTURE_EVENTS again)\n"
	        "D reads 90, 90s, 10m or 2h.  Fault kinds: kill pause stall reset refuse\n"
	        "server-restart server-freeze leader-kill drop-reply master-freeze master-kill\n"
	        "master-blackhole failover switchover migrate, or none (default: every kind the backend has).\n"
	        "Resources take turns as mutex, read-write lock, semaphore of --permits (default 2)\n"
	        "and election (Redlock: mutex, mutex, election).\n"
	        "--strict: a partition does not excuse an overlap (only a pause or a Redis restart does).\n");
}

/*
 * Resource i is used as letter i of the backend's cycle: a mutex, a
 * read-write lock, a semaphore and an election (Redlock serves only
 * EXCLUSIVE holds: two mutexes and an election).  The default is one
 * cycle.
 */
static void set_layout(torture_run *run)
{
	const char *cycle = run->backend == BACKEND_REDLOCK ? "mme" : "mrse";
	int n = (int)strlen(cycle);

	if (run->resources == 0)
		run->resources = n;
	for (int i = 0; i < run->resources; i++)
		run->layout[i] = run->limits.recipes[i] = cycle[i % n];
	run->layout[run->resources] = '\0';
	run->limits.nres = run->resources;
	run->limits.quorum = run->backend == BACKEND_REDLOCK;
}

static bool parse_options(int argc, char **argv, torture_run *run)
{
	run->seed = (uint64_t)g_get_real_time() % 1000000;
	run->duration_s = 60;
	run->workers = 4;
	run->resources = 0;
	run->limits.permits = 2;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (g_str_equal(a, "--self-check")) {
			run->self_check = true;
			continue;
		}
		if (g_str_equal(a, "--strict")) {
			run->limits.strict = true;
			continue;
		}
		if (g_str_equal(a, "-h") || g_str_equal(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (!v) {
			fprintf(stderr, "test-torture: %s needs a value\n", a);
			return false;
		}
		i++;
		if (g_str_equal(a, "--backend")) {
			run->backend = g_str_equal(v, "redis")   ? BACKEND_REDIS :
			               g_str_equal(v, "zk")      ? BACKEND_ZK :
			               g_str_equal(v, "file")    ? BACKEND_FILE :
			               g_str_equal(v, "redlock") ? BACKEND_REDLOCK :
			               g_str_equal(v, "sentinel") ? BACKEND_SENTINEL :
			               g_str_equal(v, "cluster") ? BACKEND_CLUSTER : -1;
			if ((int)run->backend < 0) {
				fprintf(stderr, "test-torture: unknown backend '%s' (redis, zk, file, redlock, sentinel or "
				        "cluster)\n", v);
				return false;
			}
			run->backend_set = true;
		} else if (g_str_equal(a, "--seed")) {
			run->seed = g_ascii_strtoull(v, NULL, 10);
		} else if (g_str_equal(a, "--duration") || g_str_equal(a, "--long")) {
			run->duration_s = parse_duration_s(v);
			if (run->duration_s <= 0) {
				fprintf(stderr, "test-torture: bad duration '%s' (e.g. 90s, 10m, 2h)\n", v);
				return false;
			}
		} else if (g_str_equal(a, "--workers")) {
			run->workers = atoi(v);
			if (run->workers < 2 || run->workers > TORTURE_MAX_WORKERS) {
				fprintf(stderr, "test-torture: --workers must be 2..%d\n", TORTURE_MAX_WORKERS);
				return false;
			}
		} else if (g_str_equal(a, "--resources")) {
			run->resources = atoi(v);
			if (run->resources < 1 || run->resources > TORTURE_MAX_RESOURCES) {
				fprintf(stderr, "test-torture: --resources must be 1..%d\n", TORTURE_MAX_RESOURCES);
				return false;
			}
		} else if (g_str_equal(a, "--permits")) {
			run->limits.permits = (uint32_t)atoi(v);
			if (run->limits.permits < 2 || run->limits.permits > TORTURE_MAX_WORKERS) {
				fprintf(stderr, "test-torture: --permits must be 2..%d\n", TORTURE_MAX_WORKERS);
				return false;
			}
		} else if (g_str_equal(a, "--faults")) {
			char **kinds = g_strsplit(v, ",", -1);

			run->faults_set = true;
			/* "none": the workers' own races alone. */
			for (int k = 0; kinds[k] && !g_str_equal(kinds[k], "none"); k++) {
				int kind = torture_fault_from_name(kinds[k]);

				if (kind < 0) {
					fprintf(stderr, "test-torture: unknown fault kind '%s'\n", kinds[k]);
					g_strfreev(kinds);
					return false;
				}
				run->enabled[kind] = true;
			}
			g_strfreev(kinds);
		} else {
			fprintf(stderr, "test-torture: unknown option '%s'\n", a);
			usage(stderr);
			return false;
		}
	}
	/* CI's sanitizer pass shortens the suite's runs without new tests. */
	if (!run->self_check && g_getenv("DLOCK_TORTURE_DURATION")) {
		run->duration_s = parse_duration_s(g_getenv("DLOCK_TORTURE_DURATION"));
		if (run->duration_s <= 0) {
			fprintf(stderr, "test-torture: bad $DLOCK_TORTURE_DURATION (e.g. 20s)\n");
			return false;
		}
	}
	if (run->self_check) {
		run->backend = BACKEND_REDIS;
		run->backend_set = true;
		run->workers = 2;
		run->resources = 4;
		run->limits.permits = 2;
		run->duration_s = 14;
		memset(run->enabled, 0, sizeof(run->enabled));
		run->faults_set = true;
	}
	if (!run->backend_set) {
		usage(stderr);
		return false;
	}
	set_layout(run);
	return true;
}

/* ---- servers and proxies -------------------------------------------------- */

/* Which master serves each resource at the start (torture_resource_name
 * spreads them over every master). */
static void print_cluster_layout(torture_run *run)
{
	for (int res = 0; res < run->resources; res++) {
		char name[32], key[48];
		int slot;

		torture_resource_name(res, TORTURE_CLUSTER_MASTERS, name, sizeof(name));
		g_snprintf(key, sizeof(key), "dlock:{%s}", name);
		slot = test_cluster_keyslot(key);
		printf("torture: r%d (%s) is %s, slot %d, on node %d\n", res, torture_recipe_name(run->layout[res]),
		       name, slot, test_cluster_owner(run->cluster, slot));
	}
}

static void start_servers(torture_run *run)
{
	switch (run->backend) {
	case BACKEND_REDIS:
		run->redis = test_redis_start(NULL, NULL, false);
		run->server_ports[0] = run->redis->port;
		run->nservers = 1;
		/* The longest of the workers' TTLs (700 ms, 1 s, 1.5 s). */
		run->limits.lease_us = 1500 * 1000;
		break;
	case BACKEND_ZK:
		run->zk = test_zk_start(3, 200, 20000);
		for (int i = 0; i < 3; i++)
			run->server_ports[i] = run->zk->servers[i].port;
		run->nservers = 3;
		run->limits.lease_us = 2000 * 1000;
		break;
	case BACKEND_FILE:
		run->dir = g_dir_make_tmp("dlock-torture-XXXXXX", NULL);
		run->nservers = 0;
		run->limits.lease_us = 0;
		break;
	case BACKEND_REDLOCK:
		run->redlock = test_redlock_start(TORTURE_MASTERS);
		for (int i = 0; i < TORTURE_MASTERS; i++)
			run->server_ports[i] = run->redlock->masters[i]->port;
		run->nservers = TORTURE_MASTERS;
		run->limits.lease_us = 2000 * 1000;
		break;
	case BACKEND_SENTINEL:
		/* One replica: with min-replicas=1 the promoted one has every
		 * grant and renewal the workers counted. */
		run->sentinel = test_sentinel_start("torture", 1, NULL, NULL);
		run->nservers = 0;
		/* The workers' TTLs are the redis backend's. */
		run->limits.lease_us = 1500 * 1000;
		break;
	case BACKEND_CLUSTER:
		/* A replica each: with min-replicas=1 a promoted one has every
		 * grant and renewal the workers counted on its slots. */
		run->cluster = test_cluster_start(TORTURE_CLUSTER_MASTERS, 1, NULL);
		run->nservers = 0;
		run->limits.lease_us = 1500 * 1000;
		print_cluster_layout(run);
		break;
	}
	run->limits.slack_us = test_slack(2000) * 1000;
}

/* The URI a worker slot's client uses: through that slot's proxies. */
static char *slot_uri(torture_run *run, torture_slot *s)
{
	GString *u;

	switch (run->backend) {
	case BACKEND_REDIS:
		return g_strdup_printf("redis://127.0.0.1:%d?ttl=1s&command-timeout=500ms&connect-timeout=500ms",
		                       test_proxy_port(s->proxies[0]));
	case BACKEND_ZK:
		u = g_string_new("zk://");
		for (int i = 0; i < run->nservers; i++)
			g_string_append_printf(u, "%s127.0.0.1:%d", i ? "," : "", test_proxy_port(s->proxies[i]));
		g_string_append(u, "?session-timeout=2s");
		return g_string_free(u, FALSE);
	case BACKEND_FILE:
		return g_strdup_printf("file://%s", run->dir);
	case BACKEND_REDLOCK:
		u = g_string_new("redis://");
		for (int i = 0; i < run->nservers; i++)
			g_string_append_printf(u, "%s127.0.0.1:%d", i ? "," : "", test_proxy_port(s->proxies[i]));
		g_string_append(u, "?ttl=2s&master-timeout=200ms&command-timeout=500ms&connect-timeout=500ms");
		return g_string_free(u, FALSE);
	case BACKEND_SENTINEL:
		/* A grant or renewal counts once the one replica has it. */
		return test_sentinel_uri(run->sentinel, "?ttl=1s&command-timeout=500ms&connect-timeout=500ms"
		                                        "&min-replicas=1&replica-timeout=250ms");
	case BACKEND_CLUSTER:
		/* Every master a seed; a grant or renewal counts once the
		 * slot master's replica has it. */
		return test_cluster_uri(run->cluster, "?ttl=1s&command-timeout=500ms&connect-timeout=500ms"
		                                      "&min-replicas=1&replica-timeout=250ms");
	}
	return NULL;
}

/* ---- leftovers -------------------------------------------------------------- */

static bool redis_clean(void *arg)
{
	torture_run *run = arg;

	if (run->redlock) {
		for (int i = 0; i < run->redlock->n; i++)
			if (test_redis_leftover_count(run->redlock->masters[i], "dlock:") != 0)
				return false;
		return true;
	}
	if (run->sentinel)
		return test_redis_leftover_count(test_sentinel_master(run->sentinel), "dlock:") == 0;
	if (run->cluster) {
		for (int i = 0; i < run->cluster->n_nodes; i++)
			if (test_cluster_is_master(run->cluster, i) &&
			    test_redis_leftover_count(test_cluster_node(run->cluster, i), "dlock:") != 0)
				return false;
		return true;
	}
	return test_redis_leftover_count(run->redis, "dlock:") == 0;
}

/* Lock files still locked by someone (every worker has exited). */
static long long locked_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	long long n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char *path;
		int fd;
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

		if (e->d_name[0] == '.')
			continue;
		path = g_build_filename(dir, e->d_name, NULL);
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd >= 0 && fcntl(fd, F_OFD_SETLK, &fl) != 0) {
			printf("torture: LEFTOVER lock file still locked: %s\n", path);
			n++;
		}
		if (fd >= 0)
			close(fd);
		g_free(path);
	}
	closedir(d);
	return n;
}

/*
 * How long a queue entry of the Redis backend lives once its waiter stops
 * renewing it (docs/redis.md, "Entries die with their waiters"): 5 s,
 * plus the replica timeout of the URIs with min-replicas.  A waiter that
 * timed out leaves its entry to a cleanup, which its client's free tries
 * once; if that try fails (a server slow under load), the entry goes by
 * itself.  The queue key ("...:q") goes with its latest entry.
 */
#define QUEUE_ENTRY_LEASE_MS (5000 + 250)

static long long count_leftovers(torture_run *run)
{
	int64_t lease_ms = run->limits.lease_us / 1000;
	int64_t wait_ms;
	long long n;

	if (run->backend == BACKEND_REDIS || run->backend == BACKEND_SENTINEL || run->backend == BACKEND_CLUSTER)
		lease_ms = MAX(lease_ms, QUEUE_ENTRY_LEASE_MS);
	wait_ms = lease_ms + test_slack(3000);

	switch (run->backend) {
	case BACKEND_REDIS:
		test_wait_until(redis_clean, run, wait_ms);
		return test_redis_leftover_keys(run->redis, "dlock:");
	case BACKEND_ZK:
		/* Sessions of killed workers end within their timeout. */
		g_usleep((gulong)wait_ms * 1000);
		return test_zk_leftover_nodes(run->zk, "/dlock");
	case BACKEND_FILE:
		return locked_files(run->dir);
	case BACKEND_REDLOCK:
		/* A master the nemesis left down or frozen is brought back. */
		for (int i = 0; i < run->redlock->n; i++) {
			if (run->redlock->stopped[i])
				test_redlock_thaw(run->redlock, i);
			if (!run->redlock->masters[i]->pid)
				test_redis_resume(run->redlock->masters[i]);
		}
		test_wait_until(redis_clean, run, wait_ms);
		return test_redlock_leftover_keys(run->redlock, "dlock:");
	case BACKEND_SENTINEL:
		/* The keys are counted on the master the sentinels name, once
		 * the setup is whole again. */
		if (!test_sentinel_wait_ready(run->sentinel, 30000)) {
			printf("torture: SETUP: the Sentinel setup is not ready at the end of the run\n");
			return 1;
		}
		test_wait_until(redis_clean, run, wait_ms);
		return test_redis_leftover_keys(test_sentinel_master(run->sentinel), "dlock:");
	case BACKEND_CLUSTER:
		/* Counted on every master, once the cluster is whole again. */
		if (!test_cluster_wait_ok(run->cluster, 30000)) {
			printf("torture: SETUP: the Redis Cluster is not whole at the end of the run\n");
			return 1;
		}
		test_wait_until(redis_clean, run, wait_ms);
		n = 0;
		for (int i = 0; i < run->cluster->n_nodes; i++)
			if (test_cluster_is_master(run->cluster, i))
				n += test_redis_leftover_keys(test_cluster_node(run->cluster, i), "dlock:");
		return n;
	}
	return 0;
}

static void stop_servers(torture_run *run)
{
	for (int s = 0; s < run->workers; s++)
		for (int i = 0; i < run->nservers; i++)
			test_proxy_stop(run->slots[s].proxies[i]);
	if (run->redis)
		test_redis_stop(run->redis);
	if (run->zk)
		test_zk_stop(run->zk);
	if (run->redlock)
		test_redlock_stop(run->redlock);
	if (run->sentinel)
		test_sentinel_stop(run->sentinel);
	if (run->cluster)
		test_cluster_stop(run->cluster);
	if (run->dir) {
		test_remove_tree(run->dir);
		g_free(run->dir);
	}
}

/* ---- the run ---------------------------------------------------------------- */

/* Whether the backend has what a fault kind acts on. */
static bool fault_applies(const torture_run *run, torture_fault_kind kind)
{
	switch (kind) {
	case FAULT_KILL:
	case FAULT_PAUSE:
		return true;
	case FAULT_SERVER_RESTART:
		return run->backend == BACKEND_REDIS;
	case FAULT_SERVER_FREEZE:
		return run->backend == BACKEND_REDIS || run->backend == BACKEND_ZK;
	case FAULT_LEADER_KILL:
		return run->backend == BACKEND_ZK;
	case FAULT_MASTER_FREEZE:
	case FAULT_MASTER_KILL:
	case FAULT_MASTER_BLACKHOLE:
		return run->backend == BACKEND_REDLOCK;
	case FAULT_FAILOVER:
	case FAULT_SWITCHOVER:
		return run->backend == BACKEND_SENTINEL || run->backend == BACKEND_CLUSTER;
	case FAULT_MIGRATE:
		return run->backend == BACKEND_CLUSTER;
	default:
		/* Sentinel, Cluster: the workers' faults that need no proxy. */
		return run->backend != BACKEND_FILE && run->backend != BACKEND_SENTINEL &&
		       run->backend != BACKEND_CLUSTER;
	}
}

static bool enable_default_faults(torture_run *run)
{
	if (run->faults_set) {
		for (int k = 0; k < FAULT_KINDS; k++)
			if (run->enabled[k] && !fault_applies(run, k)) {
				fprintf(stderr, "test-torture: fault kind '%s' does not apply to this backend\n",
				        torture_fault_name(k));
				return false;
			}
		return true;
	}
	run->enabled[FAULT_KILL] = true;
	run->enabled[FAULT_PAUSE] = true;
	if (run->backend == BACKEND_SENTINEL || run->backend == BACKEND_CLUSTER) {
		run->enabled[FAULT_FAILOVER] = true;
		run->enabled[FAULT_SWITCHOVER] = true;
		run->enabled[FAULT_MIGRATE] = run->backend == BACKEND_CLUSTER;
		return true;
	}
	if (run->backend != BACKEND_FILE) {
		run->enabled[FAULT_STALL] = true;
		run->enabled[FAULT_RESET] = true;
		run->enabled[FAULT_REFUSE] = true;
		run->enabled[FAULT_SERVER_FREEZE] = true;
		run->enabled[FAULT_DROP] = true;
	}
	if (run->backend == BACKEND_REDIS)
		run->enabled[FAULT_SERVER_RESTART] = true;
	if (run->backend == BACKEND_ZK)
		run->enabled[FAULT_LEADER_KILL] = true;
	if (run->backend == BACKEND_REDLOCK) {
		/* The servers' faults hit one master at a time: a quorum
		 * stays up, which is what Redlock is for. */
		run->enabled[FAULT_SERVER_FREEZE] = false;
		run->enabled[FAULT_MASTER_FREEZE] = true;
		run->enabled[FAULT_MASTER_KILL] = true;
		run->enabled[FAULT_MASTER_BLACKHOLE] = true;
	}
	return true;
}

const char *torture_backend_name(torture_backend b)
{
	return b == BACKEND_REDIS ? "redis" : b == BACKEND_ZK ? "zk" : b == BACKEND_FILE ? "file" :
	       b == BACKEND_REDLOCK ? "redlock" : b == BACKEND_SENTINEL ? "sentinel" : "cluster";
}

static int run_torture(torture_run *run)
{
	torture_findings f;
	long long leftovers;
	int64_t t0 = test_now_ms();
	bool failed;

	run->events = g_array_new(FALSE, FALSE, sizeof(torture_event));
	run->faults = g_array_new(FALSE, FALSE, sizeof(torture_fault));
	run->rand = g_rand_new_with_seed((guint32)run->seed);
	run->fencing_off = run->self_check;
	if (!enable_default_faults(run))
		return 64;
	printf("torture: backend=%s seed=%" PRIu64 " duration=%" PRId64 "s (replay with --seed %" PRIu64 ")\n",
	       torture_backend_name(run->backend), run->seed, run->duration_s, run->seed);
	fflush(stdout);
	start_servers(run);
	for (int s = 0; s < run->workers; s++) {
		torture_slot *slot = &run->slots[s];

		slot->index = s;
		for (int i = 0; i < run->nservers; i++)
			slot->proxies[i] = test_proxy_start_proto(
				run->backend == BACKEND_ZK ? TEST_PROXY_ZK : TEST_PROXY_REDIS, run->server_ports[i]);
		slot->uri = slot_uri(run, slot);
	}
	run->limits.run_start = g_get_monotonic_time();
	for (int s = 0; s < run->workers; s++)
		torture_spawn(run, &run->slots[s], run->self_check && s == 0 ? "rogue" : "honest");
	torture_nemesis(run, run->limits.run_start + run->duration_s * G_USEC_PER_SEC);
	run->limits.run_end = g_get_monotonic_time();
	torture_stop_workers(run);
	leftovers = count_leftovers(run);
	torture_check(run->events, run->faults, &run->limits, &f);
	torture_print_summary(run, &f, leftovers, test_now_ms() - t0);
	torture_dump(run);
	stop_servers(run);
	for (int s = 0; s < run->workers; s++)
		g_free(run->slots[s].uri);
	g_array_unref(run->events);
	g_array_unref(run->faults);
	g_rand_free(run->rand);
	if (run->self_check)
		return torture_self_check_verdict(run, &f);
	failed = torture_findings_failed(&f) || leftovers || run->crashes;
	printf("torture: %s (seed %" PRIu64 ")\n", failed ? "FAILED" : "passed", run->seed);
	return failed;
}

int main(int argc, char **argv)
{
	torture_run run = { 0 };

	test_init(argv[0]);
	if (argc > 1 && g_str_equal(argv[1], "--worker"))
		return torture_worker_main(argc - 2, argv + 2);
	if (argc == 3 && g_str_equal(argv[1], "--recheck"))
		return torture_recheck(argv[2]);
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!parse_options(argc, argv, &run))
		return 64;
	return run_torture(&run);
}
