/* SPDX-License-Identifier: MIT */
/*
 * A downgrade on ZooKeeper: the READ acquire of an owner that holds the
 * resource in EXCLUSIVE or WRITE mode.
 *
 * The read node is created beside the write node: ephemeral on the write
 * node's session, not sequential, and named with the write node's
 * sequence number, "_c_<uuid>-__READ__<seq>", as Curator 5.5's
 * InterProcessReadWriteLock does.  Contenders with one number are ordered
 * write class first, so the write node keeps holding; once it goes, the
 * read node stands first, where the write node stood, ahead of every
 * writer that queued behind it.
 *
 * That holds only if the write node is still there when the read node is
 * made: the write hold may end meanwhile (its handle freed by another
 * thread, the release's delete sent while the downgrade waited for a
 * reconnection), and a writer queued behind it may then have been
 * granted.  So the create is one transaction with a check that the write
 * node exists: it makes the read node beside a write node that still
 * holds, or nothing.  Without the write node the downgrade is no longer
 * one, and the acquire queues as any reader's.
 *
 * Its fencing token is the write hold's, not the read node's czxid: a
 * writer that queued behind the write node holds a node made before the
 * read node, and is granted only after the read hold ends; with the read
 * node's czxid it would get the smaller token of the two.  The read hold
 * continues the write hold (it begins while that one holds), and every
 * hold granted after the write hold ended was queued after it, so with
 * the write's token every later grant still gets a larger one.
 */
#include "error.h"
#include "internal.h"

/*
 * Create the read node at path beside the write node at beside, on s.
 * A create whose answer was lost may have made it: a second one then
 * finds it there (ZNODEEXISTS; the uuid is new to this hold, so it is
 * ours, made while the write node was there).  DLOCK_OK, DLOCK_ELOST when
 * the write node is gone (released, or its session ended), or the
 * failed wait (DLOCK_ETIMEDOUT, DLOCK_ECANCELED) or another failure.
 */
static int create_beside(zk_backend *b, zk_session *s, dlock__waiter *waiter,
                         const char *beside, const char *path, const char *data,
                         int64_t deadline_us)
{
	for (;;) {
		zk_call *call;
		int zrc, rc;

		/* DLOCK_ELOST here: the session ended. */
		if ((rc = dlock__zk_session_wait_connected(s, waiter, deadline_us)) != DLOCK_OK)
			return rc;
		call = dlock__zk_call_new(s, CALL_CREATE, waiter);
		dlock__zk_create_beside(call, beside, path, data, ZOO_EPHEMERAL, &b->lock_acl);
		if ((rc = dlock__zk_call_wait(call, deadline_us)) != DLOCK_OK) {
			dlock__zk_call_abandon(call);
			return rc;
		}
		zrc = call->rc;
		dlock__zk_call_unref(call);
		/* Made, by an answer that may have come too late to hold on
		 * (dlock__zk_session_fresh()): then ask again, and find it
		 * there (ZNODEEXISTS) if the session and the write node are. */
		if ((zrc == ZOK || zrc == ZNODEEXISTS) && dlock__zk_session_fresh(s))
			return DLOCK_OK;
		if (zrc == ZOK || zrc == ZNODEEXISTS)
			continue;
		if (zrc == ZNONODE || dlock__zk_rc_session_ended(zrc))
			return DLOCK_ELOST;
		if (!dlock__zk_rc_connection(zrc))
			return dlock__zk_rc_error(b, zrc, "create", path);
	}
}

int dlock__zk_downgrade(zk_backend *b, dlock__hold *hold, dlock__waiter *waiter,
                        const char *data, int64_t deadline_us)
{
	/* Referenced: another thread may release the write hold meanwhile. */
	zk_node *write = dlock__zk_node_of(b, dlock__hold_downgrade_of(hold));
	zk_session *s;
	char *uuid, *path;
	int rc;

	if (!write)
		return DLOCK_ELOST;
	s = write->session;
	uuid = dlock__zk_uuid_new();
	path = dlock__zk_downgrade_path(write->path, uuid);
	dlock__zk_session_add_waiter(s, waiter);
	rc = create_beside(b, s, waiter, write->path, path, data, deadline_us);
	dlock__zk_session_remove_waiter(s, waiter);
	if (rc == DLOCK_OK && !dlock__zk_grant(hold, s, path, write->czxid))
		rc = DLOCK_ELOST;
	/* A create whose answer was lost may have made the node, also when
	 * a later one then found the write node gone: left there, it would
	 * stand where the write node stood, ahead of every writer queued
	 * behind it.  (Nothing to do once the session has ended.) */
	if (rc != DLOCK_OK)
		dlock__zk_delete_later(s, path);
	if (rc == DLOCK_ELOST)
		dlock__log(b->logger, DLOCK_LOG_INFO,
		           "%s: the write hold of '%s' ended before its downgrade; queueing as a reader",
		           b->label, dlock__hold_resource(hold));
	dlock__zk_node_unref(write);
	g_free(path);
	g_free(uuid);
	return rc;
}
