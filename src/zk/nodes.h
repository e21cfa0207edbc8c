/*
 * Lock node names on ZooKeeper, as pure functions (no ZooKeeper client
 * here, so the unit suite covers all of it).
 *
 * A lock on resource R is a set of ephemeral sequential nodes under
 * <root>/R.  dlock names its nodes as Apache Curator's InterProcessMutex
 * does, "_c_<uuid>-lock-<seq>"; kazoo's Lock names them "<hex>__lock__<seq>".
 * The sequence number is the parent's child version, which ZooKeeper
 * formats with "%010d": ten digits, or a minus sign and nine or ten
 * digits once the 32-bit counter has wrapped.
 */
#ifndef DLOCK_ZK_NODES_H
#define DLOCK_ZK_NODES_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

/* A lock node among the children of a resource's node. */
typedef struct dlock__zk_contender {
	const char *name; /* borrowed from the children list */
	int32_t seq;
} dlock__zk_contender;

/* A new random (version 4) UUID in its 36-character text form; g_free. */
char *dlock__zk_uuid_new(void);

/* The path given to a sequential create: "<dir>/_c_<uuid>-lock-"; g_free. */
char *dlock__zk_node_prefix(const char *dir, const char *uuid);

/* Whether child (a name, not a path) is the node created with uuid. */
bool dlock__zk_node_is_ours(const char *child, const char *uuid);

/*
 * Whether name is a lock node, and its sequence number: the name ends in
 * a sequence number right after a lock mark ("-lock-" as Curator and
 * dlock write it, "__lock__" as kazoo does).  Children that are not lock
 * nodes (the nodes of sub-resources such as "a/b" under "a") are not
 * contenders.
 */
bool dlock__zk_node_seq(const char *name, int32_t *ret_seq);

/*
 * Serial-number order of two sequence numbers (RFC 1982 on 32 bits):
 * negative when a comes before b.  Correct as long as the live contenders
 * span less than 2^31 creates, so the counter wrapping past 2^31 cannot
 * put a newcomer first.
 */
int dlock__zk_seq_cmp(int32_t a, int32_t b);

/*
 * The contenders among children (a NULL-terminated list of names), sorted
 * by sequence number, first (the holder) first.  The names are borrowed
 * from children.  Free with g_array_unref().
 */
GArray *dlock__zk_contenders(char *const *children);

/*
 * Where ours stands among contenders: returns false if ours is not among
 * them (its node is gone); otherwise true, with *ret_predecessor set to
 * the name of the contender just before it, or NULL when ours is first.
 */
bool dlock__zk_predecessor(const GArray *contenders, const char *ours, const char **ret_predecessor);

/* The first segment after the first of a resource name that would read
 * as a lock node of its parent (g_free), or NULL.  Such names are refused:
 * their node would be taken for a contender of the parent resource. */
char *dlock__zk_ambiguous_segment(const char *resource);

#endif
