/* SPDX-License-Identifier: MIT */
/*
 * What each ZooKeeper result code means to dlock, in one table.  A code
 * is of one of four kinds, and every file of the backend decides by kind:
 *
 *   connection     the request may not have reached the server, or its
 *                  answer was lost, on a session that may still live: a
 *                  create may have been made (sweep.c finds it); wait for
 *                  the session to reconnect and ask again
 *   session ended  the session is over, and with it every ephemeral node
 *                  it made: a hold is LOST, an acquire starts afresh
 *   denied         the node's ACL does not admit these credentials
 *                  (DLOCK_EACCES: another user or password made it)
 *   other          the server refused the request as it was asked: a
 *                  defect, or a tree not laid out as dlock lays it out
 *                  (DLOCK_EBACKEND with the client library's text)
 *
 * ZOK and the codes a caller expects as answers (ZNONODE, ZNODEEXISTS,
 * ZNOTEMPTY, ZBADVERSION) are read by the caller where it asked; they are
 * "other" here only when nobody expected them.
 */
#include <zookeeper/zookeeper.h>

#include "error.h"
#include "internal.h"

typedef enum zk_rc_kind {
	ZK_RC_OTHER = 0,
	ZK_RC_CONNECTION,
	ZK_RC_SESSION_ENDED,
	ZK_RC_DENIED,
} zk_rc_kind;

static const struct {
	int zrc;
	zk_rc_kind kind;
} kinds[] = {
	{ ZCONNECTIONLOSS, ZK_RC_CONNECTION },
	{ ZOPERATIONTIMEOUT, ZK_RC_CONNECTION },
	/* Re-established on another server while the request was on its way:
	 * the server that got it refused it and drops the connection, but
	 * the session lives on, with whatever nodes it has. */
	{ ZSESSIONMOVED, ZK_RC_CONNECTION },
	{ ZSESSIONEXPIRED, ZK_RC_SESSION_ENDED },
	/* The handle is closed or expired: no request of it will run. */
	{ ZINVALIDSTATE, ZK_RC_SESSION_ENDED },
	{ ZCLOSING, ZK_RC_SESSION_ENDED },
	{ ZAUTHFAILED, ZK_RC_SESSION_ENDED },
	{ ZNOAUTH, ZK_RC_DENIED },
};

static zk_rc_kind kind_of(int zrc)
{
	for (size_t i = 0; i < G_N_ELEMENTS(kinds); i++)
		if (kinds[i].zrc == zrc)
			return kinds[i].kind;
	return ZK_RC_OTHER;
}

bool dlock__zk_rc_connection(int zrc)
{
	return kind_of(zrc) == ZK_RC_CONNECTION;
}

bool dlock__zk_rc_session_ended(int zrc)
{
	return kind_of(zrc) == ZK_RC_SESSION_ENDED;
}

const char *dlock__zk_strerror(int zrc)
{
	return zerror(zrc);
}

int dlock__zk_rc_error(const zk_backend *b, int zrc, const char *what, const char *path)
{
	if (kind_of(zrc) == ZK_RC_DENIED)
		return dlock__error(DLOCK_EACCES, "%s: not allowed to %s %s: its ACL does not admit these "
		                    "credentials (another user or password made it)", b->label,
		                    what, path);
	return dlock__error(DLOCK_EBACKEND, "%s: %s %s: %s", b->label, what, path, zerror(zrc));
}
