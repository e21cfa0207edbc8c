/* SPDX-License-Identifier: MIT */
/*
 * What test-cluster.c and test-cluster-slots.c share: reading the slot
 * map and the roles, and polling.  Not for tests: they use
 * test-cluster.h.
 */
#ifndef DLOCK_TEST_CLUSTER_MAP_H
#define DLOCK_TEST_CLUSTER_MAP_H

#include <glib.h>

#include "test-cluster.h"

/* How often conditions are polled: each poll is a few commands on every
 * node, so not at test_wait_until()'s 5 ms. */
#define TEST_CLUSTER_POLL_MS 20

/* Node i runs and is not frozen, so it answers at once. */
bool test_cluster__askable(const test_cluster *tc, int i);

/*
 * Node i's CLUSTER SLOTS as the client port serving each slot (0: none),
 * into ports[TEST_CLUSTER_SLOTS].  False, with why, if it does not
 * answer or names an address other than 127.0.0.1.
 */
bool test_cluster__slot_map(test_cluster *tc, int i, uint16_t *ports, GString *why);

/*
 * The map every askable node gives, into ports, if they all give the same
 * one and at least one answers; else false, with why.  A slot served by
 * no node is not checked here.
 */
bool test_cluster__agreed_map(test_cluster *tc, uint16_t *ports, GString *why);

/* Node i's ROLE: true if it answers; *ret_master is whether it says
 * master; for a replica, *ret_master_port is its master's port and
 * *ret_linked whether its link to it is "connected". */
bool test_cluster__role(test_cluster *tc, int i, bool *ret_master, int *ret_master_port, bool *ret_linked);

/* reply (freed here) to what, run on node i, must be +OK; else fail the
 * test, saying what and the answer. */
void test_cluster__expect_ok(test_cluster *tc, int i, const char *what, redisReply *reply);

/* Poll cond(arg) every TEST_CLUSTER_POLL_MS for up to timeout_ms, scaled. */
bool test_cluster__poll(bool (*cond)(void *), void *arg, int64_t timeout_ms);

#endif
