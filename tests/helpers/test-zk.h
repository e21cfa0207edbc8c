/* SPDX-License-Identifier: MIT */
/*
 * Test helper: throwaway ZooKeeper servers (test-zk-server.h) and an
 * inspection session on them (test-zk-inspect.h).  Tests include this
 * one header for both.
 */
#ifndef DLOCK_TEST_ZK_H
#define DLOCK_TEST_ZK_H

#include "test-zk-server.h"
#include "test-zk-inspect.h"

#endif
