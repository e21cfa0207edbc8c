/*
 * A downgrade on ZooKeeper: the READ acquire of an owner that holds the
 * resource in EXCLUSIVE or WRITE mode.
 *
 * The read node is created beside the write node: ephemeral on the write
 * node's session, not sequential, and named with the write node's
 * sequence number, "_c_<uuid>-__READ__<seq>", as Curator 5.5's
 * InterProcessReadWriteLock does.  It is granted at once, since the
 * owner's write hold keeps everyone else out meanwhile.  Contenders with
 * one number are ordered write class first, so the write node keeps
 * holding; once it goes, the read node stands first, where the write
 * node stood, ahead of every writer that queued behind it.
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

/* Wait for call's answer: DLOCK_OK with its code and stat, or the failed
 * wait (the call is abandoned then). */
static int answer(zk_call *call, int64_t deadline_us, int *ret_zrc, int64_t *ret_czxid)
{
	int rc = dlock__zk_call_wait(call, deadline_us);

	if (rc != DLOCK_OK) {
		dlock__zk_call_abandon(call);
		return rc;
	}
	*ret_zrc = call->rc;
	*ret_czxid = call->stat.czxid;
	dlock__zk_call_unref(call);
	return DLOCK_OK;
}

/*
 * Create the node at path, protected: a create whose answer was lost may
 * have made it, and then a second create finds it there (the uuid is new
 * to this hold, so it is ours) and asks for its czxid instead.
 */
static int create_at(dlock__backend *b, zk_session *s, dlock__waiter *waiter, const char *path,
                     const char *data, int64_t deadline_us, int64_t *ret_czxid)
{
	bool look = false;

	for (;;) {
		zk_call *call;
		int zrc, rc;

		/* DLOCK_ELOST here: the session ended. */
		if ((rc = dlock__zk_session_wait_connected(s, waiter, deadline_us)) != DLOCK_OK)
			return rc;
		call = dlock__zk_call_new(s, look ? CALL_EXISTS : CALL_CREATE, waiter);
		if (look)
			dlock__zk_exists(call, path);
		else
			dlock__zk_create(call, path, data, ZOO_EPHEMERAL, &b->lock_acl);
		if ((rc = answer(call, deadline_us, &zrc, ret_czxid)) != DLOCK_OK)
			return rc;
		if (zrc == ZOK)
			return DLOCK_OK;
		if (dlock__zk_rc_session_ended(zrc))
			return DLOCK_ELOST;
		if (zrc == ZNODEEXISTS)
			look = true;  /* ours, made by a create whose answer was lost */
		else if (zrc == ZNONODE && look)
			look = false; /* gone again: create anew */
		else if (zrc == ZNONODE)
			return DLOCK_ELOST; /* the resource's node went, and the write node with it */
		else if (!dlock__zk_rc_connection(zrc))
			return dlock__error(DLOCK_EBACKEND, "%s: create %s: %s", b->label, path,
			                    dlock__zk_strerror(zrc));
	}
}

int dlock__zk_downgrade(dlock__backend *b, dlock__hold *hold, dlock__waiter *waiter,
                        const char *data, int64_t deadline_us)
{
	zk_node *write = dlock__hold_backend_data(dlock__hold_downgrade_of(hold));
	zk_session *s;
	char *uuid, *path;
	int64_t czxid = 0;
	int rc;

	if (!write)
		return DLOCK_ELOST;
	/* Ours for the whole acquire, whatever becomes of the write hold. */
	s = dlock__zk_session_ref(write->session);
	uuid = dlock__zk_uuid_new();
	path = dlock__zk_downgrade_path(write->path, uuid);
	dlock__zk_session_add_waiter(s, waiter);
	rc = create_at(b, s, waiter, path, data, deadline_us, &czxid);
	dlock__zk_session_remove_waiter(s, waiter);
	/* The write hold's token, not the read node's czxid (see above). */
	if (rc == DLOCK_OK && !dlock__zk_grant(hold, s, path, write->czxid))
		rc = DLOCK_ELOST;
	else if (rc != DLOCK_OK && rc != DLOCK_ELOST)
		dlock__zk_delete_later(s, path); /* the create may have landed */
	if (rc == DLOCK_ELOST)
		dlock__log(b->logger, DLOCK_LOG_INFO,
		           "%s: the write hold of '%s' ended before its downgrade; queueing as a reader",
		           b->label, dlock__hold_resource(hold));
	dlock__zk_session_unref(s);
	g_free(path);
	g_free(uuid);
	return rc;
}
