/* SPDX-License-Identifier: MIT */
/*
 * Lock node names on ZooKeeper, as pure functions (no ZooKeeper client
 * here, so the unit suite covers all of it).
 *
 * A lock on resource R is a set of ephemeral sequential nodes under
 * <root>/R.  dlock names its nodes as Apache Curator does: a mutex hold
 * (EXCLUSIVE) as InterProcessMutex, "_c_<uuid>-lock-<seq>", and READ and
 * WRITE holds as InterProcessReadWriteLock, "_c_<uuid>-__READ__<seq>" and
 * "_c_<uuid>-__WRIT__<seq>".  kazoo names its nodes "<hex>__lock__<seq>"
 * (Lock, WriteLock) and "<hex>__rlock__<seq>" (ReadLock).  The sequence
 * number is the parent's child version, which ZooKeeper formats with
 * "%010d": ten digits, or a minus sign and nine or ten digits once the
 * 32-bit counter has wrapped.
 *
 * Every child whose name ends in a sequence number is a contender,
 * whatever its prefix: a peer's recipe dlock does not know still takes
 * its turn.  Contenders are of the read class (names containing
 * "__READ__" or "__rlock__", unless they are of the write class) or the
 * write class (everything else: "__WRIT__", "-lock-", "__lock__", and
 * names dlock does not know).  A reader holds when no write-class node
 * comes before it; a writer when it comes first of all.
 */
#ifndef DLOCK_ZK_NODES_H
#define DLOCK_ZK_NODES_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "backend.h"

/* A lock node among the children of a resource's node. */
typedef struct dlock__zk_contender {
	const char *name; /* borrowed from the children list */
	int32_t seq;
	bool reader;      /* of the read class */
} dlock__zk_contender;

/* A new random (version 4) UUID in its 36-character text form; g_free. */
char *dlock__zk_uuid_new(void);

/* The path given to the sequential create of a hold in mode:
 * "<dir>/_c_<uuid>-lock-", "-__READ__" or "-__WRIT__"; g_free. */
char *dlock__zk_node_prefix(const char *dir, const char *uuid, dlock__mode mode);
/* A semaphore's lease node to create: "<dir>/_c_<uuid>-lease-", as
 * Curator's InterProcessSemaphoreV2 names its leases. */
char *dlock__zk_lease_prefix(const char *dir, const char *uuid);

/*
 * The path of the read node of a downgrade from the write hold whose node
 * is write_path (one of ours): "<dir>/_c_<uuid>-__READ__<seq>" with the
 * write node's own sequence number, created non-sequential (as Curator
 * 5.5 does), so that it stands where the write node stands and no writer
 * queued behind that gets in between.  g_free.
 */
char *dlock__zk_downgrade_path(const char *write_path, const char *uuid);

/* Whether child (a name, not a path) is the node created with uuid. */
bool dlock__zk_node_is_ours(const char *child, const char *uuid);

/*
 * Whether name is a contender, and its sequence number: the name ends in
 * ten digits after a prefix that is not digits alone, or in a wrapped
 * (negative) number right after a mark dlock knows.  Other children (the
 * nodes of sub-resources such as "a/b" under "a", a name of digits only)
 * are not contenders.
 */
bool dlock__zk_node_seq(const char *name, int32_t *ret_seq);

/* Whether the contender name is of the read class. */
bool dlock__zk_node_is_reader(const char *name);

/*
 * Serial-number order of two sequence numbers (RFC 1982 on 32 bits):
 * negative when a comes before b.  Correct as long as the live contenders
 * span less than 2^31 creates, so the counter wrapping past 2^31 cannot
 * put a newcomer first.
 */
int dlock__zk_seq_cmp(int32_t a, int32_t b);

/*
 * The contenders among children (a NULL-terminated list of names), sorted
 * by sequence number, first (the holder) first; at one number (a
 * downgrade's read node beside its write node) the write class first.
 * The names are borrowed from children.  Free with g_array_unref().
 */
GArray *dlock__zk_contenders(char *const *children);

/*
 * Where ours stands among contenders: returns false if ours is not among
 * them (its node is gone); otherwise true, with *ret_predecessor set to
 * the node ours waits for, or NULL when ours holds.  A writer waits for
 * the contender just before it; a reader for the nearest write-class
 * contender before it, so that readers after readers share.
 */
bool dlock__zk_predecessor(const GArray *contenders, const char *ours, const char **ret_predecessor);

/* How many contenders hold, from the first: none, one writer, or every
 * reader before the first write-class contender. */
guint dlock__zk_holders(const GArray *contenders);

/* The first segment after the first of a resource name that would read
 * as a lock node of its parent (g_free), or NULL.  Such names are refused:
 * their node would be taken for a contender of the parent resource. */
char *dlock__zk_ambiguous_segment(const char *resource);

#endif
