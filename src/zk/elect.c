/* SPDX-License-Identifier: MIT */
/*
 * What leader elections need of the ZooKeeper backend (docs/zookeeper.md,
 * "Elections"): an observer's watch is a child watch on the election's
 * node -- any contender coming or going, the leader's node among them --
 * plus an exists watch for a node not created yet (a child watch needs
 * the node), and a wake on every change of the session's state.  Each
 * re-arm sets the watches again once they fired, on whatever session is
 * current.  The requests go out before the core's query on the same
 * session, so the server answers the query after setting the watches: a
 * change the query does not show fires them.
 */
#include "clock.h"
#include "internal.h"

typedef struct zk_observer {
	zk_session *session;
	dlock__waiter *waiter;
	char *dir;
} zk_observer;

/* Leave the session o watched on (it ended, or the observer ends). */
static void leave_session(zk_observer *o)
{
	dlock__zk_watch_remove(o->session, o->dir, o->waiter);
	dlock__zk_session_remove_waiter(o->session, o->waiter);
	dlock__zk_session_unref(o->session);
	o->session = NULL;
}

int dlock__zk_observe(dlock__backend *backend, const char *resource, dlock__waiter *waiter,
                      void **watch)
{
	zk_backend *b = zk_of(backend);
	int64_t until_us = dlock__mono_us() + b->connect_timeout_ms * 1000;
	zk_observer *o = *watch;
	zk_session *s;
	zk_call *call;
	int rc;

	rc = dlock__zk_session_get(b, waiter, until_us, &s);
	if (rc != DLOCK_OK)
		return rc;
	if (!o) {
		o = g_new0(zk_observer, 1);
		o->waiter = dlock__waiter_ref(waiter);
		o->dir = dlock__zk_dir(b, resource);
		*watch = o;
	}
	if (o->session != s) {
		if (o->session)
			leave_session(o);
		o->session = s;
		dlock__zk_session_add_waiter(s, waiter);
	} else {
		dlock__zk_session_unref(s);
		/* Unfired: the server's watches are still set. */
		if (!dlock__zk_watch_fired(s, o->dir, waiter))
			return DLOCK_OK;
	}
	dlock__zk_watch_add(s, o->dir, waiter);
	/* No waiter on the calls themselves: their answers are not changes. */
	call = dlock__zk_call_new(s, CALL_CHILDREN, NULL);
	dlock__zk_get_children_watch(call, o->dir);
	dlock__zk_call_unref(call);
	call = dlock__zk_call_new(s, CALL_EXISTS, NULL);
	dlock__zk_exists_watch(call, o->dir);
	dlock__zk_call_unref(call);
	return DLOCK_OK;
}

void dlock__zk_unobserve(dlock__backend *backend, void *watch)
{
	zk_observer *o = watch;

	if (o->session)
		leave_session(o);
	dlock__waiter_free(o->waiter);
	g_free(o->dir);
	g_free(o);
}
