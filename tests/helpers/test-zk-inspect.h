/* SPDX-License-Identifier: MIT */
/*
 * Test helper: an inspection session (the ZooKeeper C client) on the
 * servers of test-zk-server.h, for looking at what the library left on
 * them.  Each call reconnects as needed and fails the test if the
 * servers do not answer within a bound.
 */
#ifndef DLOCK_TEST_ZK_INSPECT_H
#define DLOCK_TEST_ZK_INSPECT_H

#include <stdbool.h>
#include <stdint.h>

#include "test-zk-server.h"

/* ---- inspection session (reconnected as needed; open ACLs only) ---- */

/* Children of path, sorted, NULL-terminated (g_strfreev); NULL if the
 * node does not exist.  Fails the test if the ensemble does not answer. */
char **test_zk_children(test_zk *z, const char *path);
/* How many children path has (0 if it does not exist). */
int test_zk_count_children(test_zk *z, const char *path);
/* Whether path comes to have n children within timeout_ms (polled). */
bool test_zk_wait_children(test_zk *z, const char *path, int n, int64_t timeout_ms);
/* Whether path exists. */
bool test_zk_exists(test_zk *z, const char *path);
/* The data of path (g_free) or NULL if it does not exist; *ret_czxid gets
 * its czxid if not NULL. */
char *test_zk_get(test_zk *z, const char *path, int64_t *ret_czxid);
/* Delete path (any version) as the inspection session; the ZooKeeper
 * return code (0 = ZOK, ZNONODE, ZNOAUTH, ...). */
int test_zk_delete(test_zk *z, const char *path);
/* Create path (persistent, open ACL; parents must exist); the ZooKeeper
 * return code. */
int test_zk_create(test_zk *z, const char *path, const char *data);
/*
 * Nodes anywhere under path (inclusive) whose names end in a 10-digit
 * sequence number (lock nodes, which should never outlive their holders).
 * Prints each one found.  0 if path does not exist.
 */
long long test_zk_leftover_nodes(test_zk *z, const char *path);

/* Close the inspection session, if open: before the servers stop, or
 * when the one it uses goes away (the next call reconnects). */
void test_zk_inspect_close(test_zk *z);

#endif
