/* SPDX-License-Identifier: MIT */
/*
 * The torture run: worker processes loop acquire -> write to a storage
 * service with the fencing token -> release, over every recipe (mutex,
 * read-write lock with downgrades, semaphore, election), while a seeded
 * nemesis injects faults; a checker then reads everything that happened.
 *
 * Shared between the orchestrator (torture.c, torture-nemesis.c), the
 * workers (torture-worker*.c) and the checker (torture-check*.c).
 *
 * Every time is CLOCK_MONOTONIC in microseconds (g_get_monotonic_time),
 * which is one clock for every process on the host, so the workers stamp
 * their own events and the orchestrator can order them.
 */
#ifndef DLOCK_TORTURE_H
#define DLOCK_TORTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <glib.h>

#define TORTURE_MAX_WORKERS 8
#define TORTURE_MAX_RESOURCES 8
/* Owners inside one worker process: each a client of its own (the
 * honest worker is owner 0; the rogue plays several). */
#define TORTURE_MAX_OWNERS 8

/* What a resource is used as, one letter each in a layout ("mrse"). */
typedef enum torture_recipe {
	RECIPE_MUTEX = 'm',     /* EXCLUSIVE locks */
	RECIPE_RW = 'r',        /* READ and WRITE holds, some WRITE downgraded to READ */
	RECIPE_SEMAPHORE = 's', /* permits of a semaphore of N */
	RECIPE_ELECTION = 'e'   /* campaigns and resigns, some resigns racing campaigns */
} torture_recipe;

/* The kind of a hold, in each event that concerns one. */
enum {
	MODE_NONE = '-',
	MODE_EXCLUSIVE = 'x',
	MODE_WRITE = 'w',
	MODE_READ = 'r',
	MODE_PERMIT = 's',
	MODE_LEADER = 'e'
};

/* What a worker reports, one line each on its stdout (see torture-worker.c). */
typedef enum torture_event_kind {
	EV_TRY = 'T',     /* acquire (campaign) started; aux = its wait, ms */
	EV_ACQUIRED = 'A',/* acquire returned DLOCK_OK; token; code 1: a campaign
	                   * won but already resigned by the racing thread */
	EV_FAILED = 'F',  /* acquire returned code */
	EV_STATE = 'S',   /* state callback: code is the dlock_state */
	EV_WRITE = 'W',   /* write sent to the storage: token, code = accepted */
	EV_RELEASE = 'R', /* release started (time) and its result (code); aux =
	                   * when the call returned */
	EV_ELECTION = 'E',/* an election's callback: code is the dlock_election_event */
	EV_NOTE = 'N',    /* the worker saw a promise broken: code is a torture_note */
	EV_CANCEL = 'C',  /* the worker canceled its acquire (campaign) in flight */
	EV_EXIT = 'X'     /* the worker is leaving normally */
} torture_event_kind;

/* What a worker can see for itself (EV_NOTE). */
typedef enum torture_note {
	/* The election's callbacks end with ELECTED although the participant
	 * does not lead (a resign or loss not followed by its event). */
	NOTE_ELECTED_NOT_LEADING = 1,
	/* Leading, and no ELECTED came. */
	NOTE_LEADING_NOT_ELECTED = 2,
	/* A call without a waiting thread whose done did not run once: not
	 * within a generous bound of its deadline, or more than once. */
	NOTE_DONE_NOT_ONCE = 3
} torture_note;

typedef struct torture_event {
	char kind;
	char mode;       /* MODE_* */
	int slot;        /* worker slot */
	int life;        /* incarnation of the slot (a killed worker is replaced) */
	int owner;       /* owner inside the worker process */
	int res;         /* resource index, -1 if none */
	int64_t t;       /* when it happened, µs */
	int64_t aux;     /* see the kinds */
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
	FAULT_MASTER_FREEZE, /* Redlock: SIGSTOP of one master, then SIGCONT */
	FAULT_MASTER_KILL,   /* Redlock: kill -9 of one master, restarted empty
	                      * once a lease has passed */
	FAULT_MASTER_BLACKHOLE, /* Redlock: one master's connections reset and
	                      * new ones accepted and never answered */
	FAULT_FAILOVER,      /* Sentinel, Cluster: kill -9 of a master, a replica
	                      * promoted, the old one back later as a replica */
	FAULT_SWITCHOVER,    /* Sentinel: SENTINEL FAILOVER, the old master alive
	                      * (a master of its own until reconfigured);
	                      * Cluster: CLUSTER FAILOVER, the old master a
	                      * replica of its successor */
	FAULT_MIGRATE,       /* Cluster: a resource's slot moved to another
	                      * master in steps (begin, keys, end) */
	FAULT_KINDS
} torture_fault_kind;

typedef struct torture_fault {
	torture_fault_kind kind;
	int slot;        /* worker slot, -1 for a server fault */
	int life;        /* the worker's incarnation at the time */
	int server;      /* the server or master, -1 if none or every one */
	int64_t start;   /* µs */
	int64_t end;     /* µs; healed (or the process replaced) */
} torture_fault;

const char *torture_fault_name(torture_fault_kind kind);
/* FAULT_* of a name, or -1. */
int torture_fault_from_name(const char *name);
/* Whether a fault hits one Redlock master only (a quorum stays up). */
bool torture_fault_is_master(torture_fault_kind kind);
/* Whether a fault hits the servers rather than one worker. */
bool torture_fault_is_server(torture_fault_kind kind);
/*
 * The name of resource res, into buf: "torture/r<res>"; on a Redis
 * Cluster of `masters` masters (0: none), "torture/r<res>.<n>" for the
 * first n whose key's slot lies among those master res % masters serves
 * when the cluster starts, so that every master serves some resource.
 */
void torture_resource_name(int res, int masters, char *buf, size_t size);
/* "mutex", "read-write", "semaphore", "election". */
const char *torture_recipe_name(torture_recipe recipe);
/* "exclusive", "write", "read", "permit", "leader". */
const char *torture_mode_name(char mode);

/* What the checker needs to know about the run beyond its events. */
typedef struct torture_limits {
	int64_t lease_us;      /* Redis TTL, ZooKeeper session timeout, 0 for files */
	int64_t slack_us;      /* scheduling margin */
	int64_t run_start;
	int64_t run_end;       /* the workers were told to stop */
	bool strict;           /* partitions excuse no overlap */
	bool quorum;           /* Redlock: a fault of one master excuses nothing */
	int nres;
	char recipes[TORTURE_MAX_RESOURCES]; /* torture_recipe of each resource */
	uint32_t permits;      /* N of every semaphore */
} torture_limits;

typedef struct torture_findings {
	int64_t holds;
	int64_t writes_accepted;
	int64_t writes_refused;
	int64_t overlaps_explained;
	int64_t explained_by[FAULT_KINDS];
	int64_t overlaps;          /* unexplained, every recipe's: the sum of */
	int64_t two_holders;       /*   mutex */
	int64_t two_writers;       /*   read-write */
	int64_t reader_beside_writer;
	int64_t permits_exceeded;  /*   semaphore: more than N at once */
	int64_t two_leaders;       /*   election */
	int64_t order_violations;  /* accepted write with a lower token */
	int64_t token_order;       /* a later hold with a token not larger */
	int64_t token_order_explained;
	int64_t stale_accepted;    /* accepted write from a superseded hold, unexplained */
	int64_t silent_losses;     /* superseded hold never told LOST */
	int64_t silent_losses_explained; /* ... right after a Redis restart */
	int64_t tokenless_grants;  /* DLOCK_OK with fencing token 0 */
	int64_t liveness_gaps;
	int64_t upkeep_after_lost; /* a LOST hold still kept others out */
	int64_t busy_free_permit;  /* a try refused while a permit was free */
	int64_t bad_results;       /* a result the wait does not allow, or
	                            * unavailable on a healthy backend */
	int64_t lost_quorum_up;    /* Redlock: LOST while a quorum was up */
	int64_t election_events;   /* NOTE_*: callbacks out of step */
	int64_t dones_not_once;    /* NOTE_DONE_NOT_ONCE */
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
 * finding with its details, naming the recipe and the invariant; fills *f.
 */
void torture_check(GArray *events, GArray *faults, const torture_limits *limits, torture_findings *f);

/* Whether any count of f that must be zero is not. */
bool torture_findings_failed(const torture_findings *f);

/* The worker: argv after "--worker". Returns its exit status. */
int torture_worker_main(int argc, char **argv);

#endif
