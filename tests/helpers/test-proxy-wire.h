/* SPDX-License-Identifier: MIT */
/*
 * Where requests and replies begin and end on the wire, for the
 * fault-injection proxy (test-proxy.c): RESP for Redis, length frames for
 * ZooKeeper.  Pure functions over a byte buffer.
 *
 * The scanners return 1 when a whole unit lies at the start of the buffer
 * (its length in *ret_len), 0 when more bytes are needed, and -1 when the
 * bytes are not of that protocol.
 */
#ifndef DLOCK_TEST_PROXY_WIRE_H
#define DLOCK_TEST_PROXY_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* A Redis request: a command array of bulk strings or an inline command.
 * name gets the command name in lower case (truncated to name_size - 1),
 * *ret_args the number of arguments after it. */
int test_proxy_wire_resp_request(const uint8_t *b, size_t n, size_t *ret_len, char *name, size_t name_size,
                                 int *ret_args);

/* One RESP2 or RESP3 value, aggregates with everything nested in them. */
int test_proxy_wire_resp_value(const uint8_t *b, size_t n, size_t *ret_len);

/* For a whole value (from test_proxy_wire_resp_value) that is an array or
 * push whose first element is a string: that string in lower case; else
 * an empty string. */
void test_proxy_wire_resp_head(const uint8_t *b, size_t len, char *name, size_t name_size);

/* A ZooKeeper frame: 4-byte big-endian length, then that many bytes. */
int test_proxy_wire_zk_frame(const uint8_t *b, size_t n, size_t *ret_len);

/* A big-endian int32 at b. */
int32_t test_proxy_wire_be32(const uint8_t *b);

/* The opcode of a ZooKeeper request type named as in the Java client
 * ("create", "getChildren2", "closeSession"...), or INT32_MIN if unknown. */
int32_t test_proxy_wire_zk_opcode(const char *name);

#endif
