/* SPDX-License-Identifier: MIT */
/*
 * The checker's parts, shared by its files: torture-check.c (holds rebuilt
 * from the events, faults that explain, writes, silent losses),
 * torture-invariants.c (each recipe's exclusion rules and token order)
 * and torture-liveness.c (waits, lost holds kept, refused tries, results).
 */
#ifndef DLOCK_TORTURE_CHECK_H
#define DLOCK_TORTURE_CHECK_H

#include "torture.h"

/* One grant as its owner believed it. */
typedef struct hold {
	int slot, life, owner, res;
	char mode;        /* MODE_* */
	uint64_t token;
	int64_t try_at;   /* its acquire started */
	int64_t acq;      /* its acquire returned */
	int64_t end;      /* release started, process died, or run end */
	int64_t release_end; /* the release returned; else end (+ the lease if it died) */
	int64_t lost_at;  /* first LOST, or G_MAXINT64 */
	bool released;    /* ended by a release call (its process survived) */
	bool told_lost;
	bool suspended_at_release; /* released while SUSPENDED: told "uncertain" */
	GArray *suspended; /* int64_t pairs: [SUSPENDED, RECONNECTED or end) */
} hold;

/* What the parts share: the run's facts, and the holds sorted by acquire. */
typedef struct check {
	GArray *events;   /* sorted by time */
	GArray *faults;
	const torture_limits *lim;
	torture_findings *f;
	GPtrArray *holds;
} check;

/* Print the first findings of each kind: ten say enough. */
bool torture_shown(int64_t count);
/* Seconds since the run's start. */
double torture_rel(const check *c, int64_t t);
/* The recipe of a resource. */
torture_recipe torture_recipe_of(const check *c, int res);

/* The end of what h's process believed: release, death or first LOST. */
int64_t torture_believed_end(const hold *h);
/* Whether h was believed at instant t (not suspended then). */
bool torture_believed_at(const hold *h, int64_t t);
/* Whether two holds are one owner's (one client of one process life). */
bool torture_same_owner(const hold *a, const hold *b);
/* Whether two holds' modes exclude each other (a write class hold --
 * exclusive, write, leader -- excludes any; reads and permits exclude
 * only the write class). */
bool torture_modes_conflict(char a, char b);

/* The kind of a pause or partition of h's life (or a Redis restart) that
 * covers t, or -1. */
int torture_explained(const check *c, const hold *h, int64_t t);
/* Which workers' faults torture_fault_in_force() counts. */
typedef enum fault_scope {
	SCOPE_ALL,    /* every worker's */
	SCOPE_OWN,    /* the given worker life's only */
	SCOPE_OTHERS  /* every worker's but the given life's */
} fault_scope;

/*
 * Whether some fault was in force in [from, to], counting each until the
 * lease and the slack have passed after it healed: a server's, or a
 * worker's within scope (slot, life).  With c->lim->quorum a fault of one
 * Redlock master is not counted: a quorum stays up.
 */
bool torture_fault_in_force(const check *c, int64_t from, int64_t to, fault_scope scope, int slot, int life);

/* torture-invariants.c */
void torture_check_exclusion(check *c);
void torture_check_tokens(check *c);

/* torture-liveness.c */
void torture_check_liveness(check *c);
void torture_check_lost_upkeep(check *c);
void torture_check_tries(check *c);

#endif
