/* SPDX-License-Identifier: MIT */
/*
 * The worker's side of a torture run, shared by its files:
 * torture-worker.c (the process, its output and the lock recipes),
 * torture-elect.c (election rounds with a racing resign) and
 * torture-rogue.c (the self-check's rogue).
 *
 * Output lines, one per event (torture.h names the kinds):
 *   KIND TIME_US RESOURCE TOKEN CODE MODE OWNER AUX
 * A write is a 'W' line answered by the storage service on stdin with
 * "1" (accepted) or "0" (refused by the fencing check).
 */
#ifndef DLOCK_TORTURE_WORKER_H
#define DLOCK_TORTURE_WORKER_H

#include <signal.h>

#include <dlock.h>

#include "torture.h"

/* Set by SIGUSR1: finish the round, release and exit. */
extern volatile sig_atomic_t tw_stopping;
/* The masters of a Redis Cluster run (the URI's seeds), 0 on others. */
extern int tw_masters;

/* One event line, stamped at (now if 0).  Lines from several threads
 * never interleave. */
void tw_emit_at(int64_t at, char kind, char mode, int owner, int res, uint64_t token, int code, int64_t aux);
void tw_emit(char kind, char mode, int owner, int res, uint64_t token, int code, int64_t aux);
/* Report an acquire's failure; with a code other than a busy, timed out
 * or canceled one, also its message (a line the orchestrator prints as
 * is). */
void tw_failed(char mode, int owner, int res, int code);
/* Send one write to the storage service; whether it was accepted. */
bool tw_store_write(char mode, int owner, int res, uint64_t token);
/* The name of resource res (torture_resource_name). */
void tw_resource_name(int res, char *buf, size_t size);
/* Sleep ms in small steps, returning early once asked to stop. */
void tw_hold_for(int64_t ms);

/* An election of the honest worker: the participant, what its callbacks
 * said last, and the round's state shared with the racing resign. */
typedef struct tw_election {
	dlock_election *e;
	int res;
	int view;          /* atomic: the last event (DLOCK_ELECTION_*), 0 none */
	bool suspended;    /* the callback thread's alone */
	uint64_t token;    /* atomic: the leadership's token, for the events */
} tw_election;

/* Create the participant "w<slot>.<life>" with its callback. */
bool tw_election_open(tw_election *te, dlock_client *client, int res, const char *id);
void tw_election_close(tw_election *te);
/* One round: campaign within wait_ms, sometimes with a resign racing it
 * from another thread; lead a while writing; resign; then check the
 * callbacks settled on what is true. */
void tw_election_round(GRand *rand, tw_election *te, int64_t wait_ms);

/* How the worker makes its calls (torture-async.c): blocking only, or
 * mostly without a waiting thread, dones on the callback thread or every
 * callback dispatched by a loop thread of the worker's. */
enum { TW_ASYNC_NONE, TW_ASYNC_THREAD, TW_ASYNC_DISPATCH };
extern int tw_async;
/* Pick the worker's way by its slot, before its first handle; a
 * dispatching worker's loop thread starts. */
bool tw_async_start(dlock_client *client, int slot);
/* Stop the loop thread, before the worker's handles are freed (their
 * frees then run what is queued themselves). */
void tw_async_stop(void);
/* Whether the next call goes without a waiting thread. */
bool tw_async_pick(GRand *rand);
/* The calls, waited for on the calling thread (sometimes canceled
 * first): what their done got. */
int tw_acquire_async(dlock_lock *lock, char mode, int res, int64_t wait_ms, GRand *rand);
int tw_release_async(dlock_lock *lock, char mode, int res, GRand *rand);
int tw_campaign_async(dlock_election *election, int res, int64_t wait_ms, GRand *rand);

/* The rogue of --self-check: never returns (it aborts). */
G_GNUC_NORETURN void tw_rogue_main(const char *uri, const char *layout, uint32_t permits);

#endif
