/* SPDX-License-Identifier: MIT */
/*
 * Leader election checks shared by the backend suites, run against the
 * backend a URI names.
 */
#ifndef DLOCK_TEST_ELECTION_H
#define DLOCK_TEST_ELECTION_H

#include <stdbool.h>
#include <stdint.h>

/*
 * The worker, run in a process started with the arguments
 * "elect URI NAME ID" (argv points at URI): campaigns without limit,
 * prints "leader TOKEN", then stays leader until its stdin closes, when
 * it resigns and exits 0.  Exit 2 if the client cannot be built, 3 if a
 * call fails.
 */
int test_election_worker(char **argv);

/* The worker side of an election suite's main: "PROGRAM --worker KIND
 * ARGS..." with KIND elect (test_election_worker) or counter (the
 * exclusion check's, test-exclusion.h); 64 for anything else. */
int test_election_worker_main(int argc, char **argv);

/*
 * Three participants, each with a client of its own, and an observer:
 * the first leads, the others wait (a try is DLOCK_EBUSY); each
 * resignation hands over to the next in line within hand_bound_ms;
 * tokens increase; dlock_election_leader() names each leader; the
 * participants' callbacks get ELECTED and RESIGNED; the observer sees
 * every leader in turn and, at the end, nobody.
 */
void test_election_handover(const char *uri, const char *name, int64_t hand_bound_ms);

/*
 * A leader in another process is killed with SIGKILL while a participant
 * here waits: the participant leads within bound_ms of the kill, with a
 * larger token, and an observer sees it.  Returns the time it took, ms.
 */
int64_t test_election_failover(const char *uri, const char *name, int64_t bound_ms);

/*
 * The leader's server is frozen (freeze(arg)) for freeze_ms, then thawed
 * (thaw(arg)).  The leader's callback hears SUSPENDED, and then, if the
 * hold outlived the freeze, ELECTED again (still leading), else LOST (not
 * leading; a campaign after the thaw leads afresh with a larger token).
 * expect_lost says which the caller's timing makes certain.
 */
void test_election_freeze(const char *uri, const char *name, void (*freeze)(void *),
                          void (*thaw)(void *), void *arg, int64_t freeze_ms, bool expect_lost);

/*
 * A resignation from another thread that lands as a campaign finishes:
 * rounds times, a campaign runs while a second thread spins on
 * dlock_election_is_leader() and resigns the moment it leads.  Every
 * round the participant's callback must get ELECTED and then RESIGNED,
 * and the participant must not lead afterwards: never ELECTED after
 * RESIGNED, never a campaign's DLOCK_OK with ELECTED as the last event
 * while nothing is held.  before(arg), if not NULL, runs before each
 * round (a fault that slows the campaign's tail).  Fails the test with
 * the number of rounds that broke it.
 */
void test_election_resign_racing_campaign(const char *uri, const char *name, int rounds,
                                          void (*before)(void *), void *arg);

/*
 * dlock_election_free() right after dlock_election_resign(): the
 * resignation's DLOCK_OK comes with DLOCK_ELECTION_RESIGNED, which the
 * callback gets before the free returns (ELECTED before it), in every
 * one of rounds rounds, and no event of a freed election comes later.
 * Fails the test with the number of rounds whose RESIGNED was missing.
 */
void test_election_resign_then_free_delivers_resigned(const char *uri, const char *name, int rounds);

#endif
