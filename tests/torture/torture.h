/*
 * The torture run: worker processes loop acquire -> write to a storage
 * service with the fencing token -> release, while a seeded nemesis
 * injects faults; a checker then reads everything that happened.
 *
 * Shared between the orchestrator (torture.c, torture-nemesis.c), the
 * workers (torture-worker.c) and the checker (torture-check.c).
 *
 * Every time is CLOCK_MONOTONIC in microseconds (g_get_monotonic_time),
 * which is one clock for every process on the host, so the workers stamp
 * their own events and the orchestrator can order them.
 */
#ifndef DLOCK_TORTURE_H
#define DLOCK_TORTURE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <glib.h>

#define TORTURE_MAX_WORKERS 8
#define TORTURE_MAX_RESOURCES 8

/* What a worker reports, one line each on its stdout (see torture-worker.c). */
typedef enum torture_event_kind {
	EV_TRY = 'T',     /* acquire started */
	EV_ACQUIRED = 'A',/* acquire returned DLOCK_OK; token */
	EV_FAILED = 'F',  /* acquire returned code */
	EV_STATE = 'S',   /* state callback: code is the dlock_state */
	EV_WRITE = 'W',   /* write sent to the storage: token, code = accepted */
	EV_RELEASE = 'R', /* release started (time) and its result (code) */
	EV_EXIT = 'X'     /* the worker is leaving normally */
} torture_event_kind;

typedef struct torture_event {
	char kind;
	int slot;        /* worker slot */
	int life;        /* incarnation of the slot (a killed worker is replaced) */
	int res;         /* resource index, -1 if none */
	int64_t t;       /* when it happened, µs */
	uint64_t token;
	int code;
} torture_event;

typedef enum torture_fault_kind {
	FAULT_KILL,          /* kill -9 of a worker (a holder if there is one) */
	FAULT_PAUSE,         /* SIGSTOP of a worker past its lease, then SIGCONT */
	FAULT_STALL,         /* the worker's proxies stall both directions */
	FAULT_RESET,         /* the worker's connections are reset */
	FAULT_REFUSE,        /* reset, then reconnects refused for a while */
	FAULT_SERVER_RESTART,/* Redis halted and started again, empty */
	FAULT_SERVER_FREEZE, /* SIGSTOP of the (a ZooKeeper) server, then SIGCONT */
	FAULT_LEADER_KILL,   /* kill -9 of the ZooKeeper leader, restarted later */
	FAULT_DROP,          /* a worker's next request of a kind is applied, its
	                      * answer lost with the connection */
	FAULT_KINDS
} torture_fault_kind;

typedef struct torture_fault {
	torture_fault_kind kind;
	int slot;        /* worker slot, -1 for a server fault */
	int life;        /* the worker's incarnation at the time */
	int64_t start;   /* µs */
	int64_t end;     /* µs; healed (or the process replaced) */
} torture_fault;

const char *torture_fault_name(torture_fault_kind kind);
/* FAULT_* of a name, or -1. */
int torture_fault_from_name(const char *name);

/* What the checker needs to know about the run beyond its events. */
typedef struct torture_limits {
	int64_t lease_us;      /* Redis TTL, ZooKeeper session timeout, 0 for files */
	int64_t slack_us;      /* scheduling margin */
	int64_t run_start;
	int64_t run_end;       /* the workers were told to stop */
	bool strict;           /* partitions excuse no overlap */
} torture_limits;

typedef struct torture_findings {
	int64_t holds;
	int64_t writes_accepted;
	int64_t writes_refused;
	int64_t overlaps_explained;
	int64_t explained_by[FAULT_KINDS];
	int64_t overlaps;          /* unexplained */
	int64_t order_violations;  /* accepted write with a lower token */
	int64_t stale_accepted;    /* accepted write from a superseded hold, unexplained */
	int64_t silent_losses;     /* superseded hold never told LOST */
	int64_t silent_losses_explained; /* ... right after a Redis restart */
	int64_t tokenless_grants;  /* DLOCK_OK with fencing token 0 */
	int64_t liveness_gaps;
	int64_t longest_wait_us;
	int longest_wait_res;
	int64_t longest_wait_from;    /* µs since the run's start */
	int64_t longest_wait_allowed;
	int64_t suspended;
	int64_t reconnected;
	int64_t lost;
} torture_findings;

/*
 * Check the run: events (torture_event, in any order), faults
 * (torture_fault) and the worker deaths the nemesis caused.  Prints every
 * finding with its details; fills *f.
 */
void torture_check(GArray *events, GArray *faults, const torture_limits *limits, torture_findings *f);

/* The worker: argv after "--worker". Returns its exit status. */
int torture_worker_main(int argc, char **argv);

#endif
