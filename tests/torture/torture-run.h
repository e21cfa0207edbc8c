/* SPDX-License-Identifier: MIT */
/*
 * The orchestrator's side of a torture run: the run's state, the worker
 * processes with the storage service that answers their writes
 * (torture-run.c) and the nemesis (torture-nemesis.c).
 */
#ifndef DLOCK_TORTURE_RUN_H
#define DLOCK_TORTURE_RUN_H

#include "torture.h"

#include "test-cluster.h"
#include "test-proxy.h"
#include "test-redis.h"
#include "test-redlock.h"
#include "test-sentinel.h"
#include "test-zk.h"

typedef enum torture_backend {
	BACKEND_REDIS,
	BACKEND_ZK,
	BACKEND_FILE,
	BACKEND_REDLOCK,
	BACKEND_SENTINEL,
	BACKEND_CLUSTER
} torture_backend;

/* Masters of a Redlock run (each worker has a proxy to each). */
#define TORTURE_MASTERS 3
G_STATIC_ASSERT(TORTURE_MASTERS <= TEST_ZK_MAX_SERVERS);
/* Masters of a Redis Cluster run, each with one replica. */
#define TORTURE_CLUSTER_MASTERS 3

typedef struct torture_slot {
	int index;
	int life;            /* incarnation: a killed worker is replaced */
	pid_t pid;
	const char *mode;    /* "honest" or "rogue" */
	char *uri;
	test_proxy *proxies[TEST_ZK_MAX_SERVERS];
	GThread *reader;
	bool nemesis_killed; /* this life was killed by the nemesis */
	bool done;           /* this life's output ended and it was reaped */
	unsigned held;       /* resources held now, as last reported */
} torture_slot;

typedef struct torture_run {
	/* options */
	torture_backend backend;
	bool backend_set;
	uint64_t seed;
	int64_t duration_s;
	int workers;
	int resources;
	char layout[TORTURE_MAX_RESOURCES + 1]; /* the recipe of each resource */
	bool enabled[FAULT_KINDS];
	bool faults_set;
	bool self_check;
	bool fencing_off;    /* the storage accepts every write (self-check) */

	/* servers */
	test_redis *redis;
	test_zk *zk;
	test_redlock *redlock;
	test_sentinel *sentinel;
	test_cluster *cluster;
	char *dir;
	int server_ports[TEST_ZK_MAX_SERVERS];
	int nservers;

	torture_limits limits;
	GRand *rand;         /* the nemesis's, seeded */
	/* Sentinel, Cluster: no server fault before this (µs): the setup is
	 * whole again (and the sentinels can elect a leader for another
	 * failover). */
	int64_t server_fault_after;
	/* Cluster: the server fault kinds (bits) taken since each was last. */
	unsigned server_kinds_done;

	/* everything below under lock */
	GMutex lock;
	GArray *events;      /* torture_event */
	GArray *faults;      /* torture_fault */
	uint64_t max_token[TORTURE_MAX_RESOURCES];
	int crashes;
	torture_slot slots[TORTURE_MAX_WORKERS];
} torture_run;

/* Start the next life of a slot as a worker process, and its reader. */
void torture_spawn(torture_run *run, torture_slot *slot, const char *mode);
/* Wait until the slot's current life has been reaped by its reader. */
void torture_join(torture_run *run, torture_slot *slot);
/* Ask every worker to release and exit (SIGUSR1), and reap them. */
void torture_stop_workers(torture_run *run);
/* Inject faults one at a time until the monotonic time until_us. */
void torture_nemesis(torture_run *run, int64_t until_us);
/* torture-nemesis-cluster.c: a Redis Cluster fault (migrate, switchover
 * or failover); fills f's target and what, a line for the log. */
void torture_inject_cluster(torture_run *run, torture_fault_kind kind, torture_fault *f, char *what, size_t len);

/* "redis", "zk", "file", "redlock", "sentinel" or "cluster" (torture.c). */
const char *torture_backend_name(torture_backend b);

/* torture-report.c: the run's closing lines; the self-check's verdict
 * (its exit status); the event dump and its recheck (an exit status). */
void torture_print_summary(torture_run *run, const torture_findings *f, long long leftovers, int64_t elapsed_ms);
int torture_self_check_verdict(const torture_run *run, const torture_findings *f);
void torture_dump(const torture_run *run);
int torture_recheck(const char *path);

#endif
