/* SPDX-License-Identifier: MIT */
/*
 * Acquire and release on ZooKeeper.
 *
 * Acquire creates an ephemeral sequential node "_c_<uuid>-lock-" (or
 * "-__READ__", "-__WRIT__" by mode) under the resource's node, lists the
 * children (no watch) in the same round trip, the listing sent right
 * behind the create, and holds the lock if its node comes first among the
 * lock nodes (a reader: if no write-class node comes before it; see
 * nodes.h).  Otherwise it sets a data watch on the node it waits for (the
 * one just before its own; a reader's, the nearest writer before it) and
 * sleeps until that watch fires, the connection changes, or the deadline
 * passes; then it lists again.  Each contender watches one node, so a
 * release wakes exactly the waiters it lets in (a writer, or the readers
 * behind it up to the next writer).  A downgrade takes another way
 * (downgrade.c).
 *
 * If the connection drops while a create is in flight, the create may
 * have happened: after reconnecting, acquire looks for its uuid among the
 * children before creating again.  An acquire that gives up (deadline,
 * cancel) before it knows leaves the lookup to the session, which does it
 * after the next reconnect and deletes what it finds (sweep.c).  If the
 * session ends, the node went with it, and acquire starts over on a new
 * session with a new uuid.
 */
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "mutex.h"

void dlock__zk_attempt_forget(zk_attempt *a)
{
	g_free(a->path);
	a->path = NULL;
	a->name = NULL;
	g_free(a->uuid);
	a->uuid = dlock__zk_uuid_new();
	a->unsure = false;
}

/* Give up on a node that a create may have made under the current uuid
 * without our learning its name: the session finds and deletes it (after
 * the next reconnect if need be), and we go on with a new uuid. */
void dlock__zk_attempt_sweep(zk_attempt *a, zk_session *s)
{
	if (a->unsure && !a->path)
		dlock__zk_sweep_later(s, a->dir, a->uuid);
	dlock__zk_attempt_forget(a);
}

static void attempt_set_node(zk_attempt *a, const char *path, int64_t czxid)
{
	g_free(a->path);
	a->path = g_strdup(path);
	a->name = strrchr(a->path, '/') + 1;
	a->czxid = czxid;
	a->unsure = false;
}

/* Map a failed wait (not a ZooKeeper answer) to the acquire's result. */
int dlock__zk_attempt_failed(zk_attempt *a, int rc)
{
	if (rc == DLOCK_ELOST)
		return AGAIN;
	if (rc == DLOCK_ECANCELED)
		return dlock__error_canceled(a->resource);
	return dlock__error_timeout(a->resource, a->wait_ms);
}

/* Send call, wait for its answer.  DLOCK_OK with call->rc set, or the
 * failed wait mapped (the call is abandoned then). */
int dlock__zk_attempt_await(zk_attempt *a, zk_call *call)
{
	int rc = dlock__zk_call_wait(call, a->deadline_us);

	if (rc != DLOCK_OK) {
		dlock__zk_call_abandon(call);
		return dlock__zk_attempt_failed(a, rc);
	}
	return DLOCK_OK;
}

/* After a connection loss: wait for the session to come back. */
int dlock__zk_attempt_reconnect(zk_attempt *a, zk_session *s)
{
	int rc = dlock__zk_session_wait_connected(s, a->waiter, a->deadline_us);

	return rc == DLOCK_OK ? DLOCK_OK : dlock__zk_attempt_failed(a, rc);
}

int dlock__zk_attempt_unexpected(zk_attempt *a, int zrc, const char *what, const char *path)
{
	return dlock__zk_rc_error(a->b, zrc, what, path);
}

/* Create the resource's node and its parents as containers. */
int dlock__zk_attempt_make_parents(zk_attempt *a, zk_session *s)
{
	char **parts = g_strsplit(a->dir + 1, "/", -1);
	GString *path = g_string_new(NULL);
	int rc = DLOCK_OK;

	for (size_t i = 0; parts[i] && rc == DLOCK_OK; i++) {
		zk_call *call = dlock__zk_call_new(s, CALL_CREATE, a->waiter);
		int zrc;

		g_string_append_c(path, '/');
		g_string_append(path, parts[i]);
		/* In ZooKeeper the parent's ACL decides who may delete a node:
		 * with credentials the resource's own node admits only their
		 * identity (and lets everyone read); the nodes above stay open. */
		dlock__zk_create(call, path->str, NULL, ZOO_CONTAINER,
		                 parts[i + 1] ? &ZOO_OPEN_ACL_UNSAFE : &a->b->lock_acl);
		if ((rc = dlock__zk_attempt_await(a, call)) != DLOCK_OK)
			break;
		zrc = call->rc;
		dlock__zk_call_unref(call);
		if (zrc == ZOK || zrc == ZNODEEXISTS)
			continue;
		if (dlock__zk_rc_connection(zrc))
			rc = dlock__zk_attempt_reconnect(a, s);
		else if (dlock__zk_rc_session_ended(zrc))
			rc = AGAIN;
		else if (zrc == ZNONODE && i == 0)
			rc = dlock__error(DLOCK_ECONFIG, "%s: the chroot '%s' does not exist on the servers",
			                  a->b->label, a->b->chroot);
		else if (zrc == ZNONODE)
			i = (size_t)-1, g_string_truncate(path, 0); /* reaped meanwhile: from the top */
		else
			rc = dlock__zk_attempt_unexpected(a, zrc, "create", path->str);
	}
	g_string_free(path, TRUE);
	g_strfreev(parts);
	return rc;
}

/*
 * Take the answer to a listing of the resource's children (call is
 * unreferenced): DLOCK_OK with the children in *ret -- ZNONODE gives an
 * empty list, the node was reaped and ours is gone too -- or with *ret
 * NULL after a connection loss (list again once reconnected); AGAIN if
 * the session ended.
 */
static int listing_answer(zk_attempt *a, zk_call *call, char ***ret)
{
	int zrc = call->rc;
	int rc = DLOCK_OK;

	*ret = NULL;
	if (zrc == ZOK || zrc == ZNONODE) {
		*ret = zrc == ZOK && call->children ? call->children : g_new0(char *, 1);
		call->children = NULL;
	} else if (dlock__zk_rc_session_ended(zrc)) {
		rc = AGAIN;
	} else if (!dlock__zk_rc_connection(zrc)) {
		rc = dlock__zk_attempt_unexpected(a, zrc, "list", a->dir);
	}
	dlock__zk_call_unref(call);
	return rc;
}

/* List the resource's children, retrying across connection losses. */
static int list_children(zk_attempt *a, zk_session *s, char ***ret)
{
	for (;;) {
		zk_call *call = dlock__zk_call_new(s, CALL_CHILDREN, a->waiter);
		int rc;

		dlock__zk_get_children(call, a->dir);
		if ((rc = dlock__zk_attempt_await(a, call)) != DLOCK_OK)
			return rc;
		if ((rc = listing_answer(a, call, ret)) != DLOCK_OK || *ret)
			return rc;
		if ((rc = dlock__zk_attempt_reconnect(a, s)) != DLOCK_OK)
			return rc;
	}
}

/*
 * After a lost answer to a create: find the node it made, if it did.  The
 * listing comes after the create on the session, so a uuid missing from it
 * was never created; a node seen but not confirmed leaves a->unsure set.
 */
static int find_own_node(zk_attempt *a, zk_session *s, bool *ret_found)
{
	char **children = NULL;
	int rc = list_children(a, s, &children);

	*ret_found = false;
	if (rc == DLOCK_OK)
		a->unsure = false;
	for (size_t i = 0; rc == DLOCK_OK && children[i]; i++) {
		char *path;
		zk_call *call;

		if (!dlock__zk_node_is_ours(children[i], a->uuid))
			continue;
		path = g_strconcat(a->dir, "/", children[i], NULL);
		call = dlock__zk_call_new(s, CALL_EXISTS, a->waiter);
		dlock__zk_exists(call, path);
		if ((rc = dlock__zk_attempt_await(a, call)) == DLOCK_OK) {
			if (call->rc == ZOK) {
				attempt_set_node(a, path, call->stat.czxid);
				*ret_found = true;
			} else if (dlock__zk_rc_session_ended(call->rc)) {
				rc = AGAIN;
			} else if (call->rc != ZNONODE) {
				a->unsure = true; /* no answer: it may be there still */
			}
			/* gone again, or no answer: create anew */
			dlock__zk_call_unref(call);
		} else {
			a->unsure = true;
		}
		g_free(path);
		break;
	}
	g_strfreev(children);
	return rc;
}

/*
 * Create our node, protected: after a lost answer we look for our uuid
 * before creating again.  The listing of the children goes out right
 * behind the create, without waiting for its answer; the session applies
 * the two in order, so when the create made our node the listing shows
 * it, and an uncontended acquire takes one round trip.  DLOCK_OK with
 * a->path set and *ret_children that listing, or NULL when the children
 * are to be listed again.
 */
int dlock__zk_attempt_create(zk_attempt *a, zk_session *s, char ***ret_children)
{
	char *prefix = NULL;
	int rc;

	*ret_children = NULL;
	for (;;) {
		/* Only the listing wakes us: its answer comes after the
		 * create's (the client completes calls in the order sent, a
		 * connection loss or a session's end included), so one wake-up
		 * brings both. */
		zk_call *create = dlock__zk_call_new(s, CALL_CREATE, NULL);
		zk_call *list = dlock__zk_call_new(s, CALL_CHILDREN, a->waiter);
		bool found;
		int zrc;

		/* A node we may have made but could not find again: never two
		 * nodes under one uuid, or one of them would be left behind. */
		if (a->unsure)
			dlock__zk_attempt_sweep(a, s);
		g_free(prefix);
		prefix = a->lease ? dlock__zk_lease_prefix(a->dir, a->uuid)
		                  : dlock__zk_node_prefix(a->dir, a->uuid, dlock__hold_mode(a->hold));
		a->unsure = true;
		dlock__zk_create(create, prefix, a->data, ZOO_EPHEMERAL_SEQUENTIAL, &a->b->lock_acl);
		dlock__zk_get_children(list, a->dir);
		if ((rc = dlock__zk_attempt_await(a, list)) != DLOCK_OK) {
			dlock__zk_call_abandon(create);
			break;
		}
		/* Done by the client's ordering; were it not, it is waited for
		 * as if sent alone. */
		if (!dlock__zk_call_attach(create, a->waiter) && (rc = dlock__zk_attempt_await(a, create)) != DLOCK_OK) {
			dlock__zk_call_unref(list);
			break;
		}
		zrc = create->rc;
		if (!dlock__zk_rc_connection(zrc))
			a->unsure = false; /* made (path known) or refused */
		if (zrc == ZOK) {
			attempt_set_node(a, create->path, create->stat.czxid);
			dlock__zk_call_unref(create);
			rc = listing_answer(a, list, ret_children);
			break;
		}
		dlock__zk_call_unref(create);
		/* Without our node the listing tells nothing: after a connection
		 * loss its answer is lost too, and the lookup lists anew; after
		 * ZNONODE it may show a resource node someone else created
		 * meanwhile. */
		dlock__zk_call_unref(list);
		if (zrc == ZNONODE) {
			rc = dlock__zk_attempt_make_parents(a, s);
		} else if (dlock__zk_rc_connection(zrc)) {
			if ((rc = dlock__zk_attempt_reconnect(a, s)) == DLOCK_OK && (rc = find_own_node(a, s, &found)) == DLOCK_OK &&
			    found)
				break;
		} else if (dlock__zk_rc_session_ended(zrc)) {
			rc = AGAIN;
		} else {
			rc = dlock__zk_attempt_unexpected(a, zrc, "create a lock node under", a->dir);
		}
		if (rc != DLOCK_OK)
			break;
	}
	g_free(prefix);
	return rc;
}

/* After a wait that the connection may have ended: go on (DLOCK_OK),
 * once reconnected, or start over (AGAIN) if the session ended. */
static int session_where(zk_attempt *a, zk_session *s)
{
	switch (dlock__zk_session_phase(s)) {
	case ZK_CONNECTED:
		return DLOCK_OK;
	case ZK_CONNECTING:
		return dlock__zk_attempt_reconnect(a, s);
	case ZK_ENDED:
	default:
		return AGAIN;
	}
}

/*
 * With the watch on path armed: wait until it fires or the connection
 * changes, then see where the session stands.  DLOCK_OK means "look
 * again".  An attempt no thread waits in does not sleep: it says YIELD
 * (keeping the watch), and is called again after its turn.
 */
int dlock__zk_attempt_watch_wait(zk_attempt *a, zk_session *s, const char *path)
{
	for (;;) {
		uint64_t seen = dlock__waiter_seq(a->waiter);
		int rc;

		if (dlock__zk_watch_fired(s, path, a->waiter) || dlock__zk_session_phase(s) != ZK_CONNECTED)
			break;
		if (a->async) {
			/* What a sleep would have ended with, as it ends it. */
			if (dlock__waiter_canceled(a->waiter))
				return dlock__zk_attempt_failed(a, DLOCK_ECANCELED);
			if (dlock__remaining_us(a->deadline_us) == 0)
				return dlock__zk_attempt_failed(a, DLOCK_ETIMEDOUT);
			a->yield_seen = seen;
			a->yield_until = a->deadline_us;
			return YIELD;
		}
		rc = dlock__waiter_sleep(a->waiter, seen, a->deadline_us);
		if (rc != DLOCK_OK)
			return dlock__zk_attempt_failed(a, rc);
	}
	/* Woken as the wait ended (canceled, or at the deadline): the next
	 * look at the children could only be abandoned, so none is sent --
	 * and an asynchronous call's step is then urgent, on the timer
	 * thread, where nothing may wait for a server. */
	if (dlock__waiter_canceled(a->waiter))
		return dlock__zk_attempt_failed(a, DLOCK_ECANCELED);
	if (dlock__remaining_us(a->deadline_us) == 0)
		return dlock__zk_attempt_failed(a, DLOCK_ETIMEDOUT);
	return session_where(a, s);
}

/* Stop watching a->watching (an attempt that yielded in its wait). */
static void watch_done(zk_attempt *a, zk_session *s)
{
	dlock__zk_watch_remove(s, a->watching, a->waiter);
	g_clear_pointer(&a->watching, g_free);
}

/*
 * Wait for the predecessor's node to go: set a data watch on it and sleep
 * until the watch fires, the connection changes, or the deadline passes.
 * DLOCK_OK means "look again"; YIELD that a->watching is being waited on.
 */
static int wait_predecessor(zk_attempt *a, zk_session *s, const char *name)
{
	char *path = g_strconcat(a->dir, "/", name, NULL);
	zk_call *call = dlock__zk_call_new(s, CALL_GET, a->waiter);
	int rc, zrc;

	dlock__zk_watch_add(s, path, a->waiter);
	dlock__zk_get(call, path, true);
	rc = dlock__zk_attempt_await(a, call);
	if (rc != DLOCK_OK)
		goto out;
	zrc = call->rc;
	dlock__zk_call_unref(call);
	if (zrc == ZNONODE)
		goto out; /* already gone: look again */
	if (dlock__zk_rc_session_ended(zrc)) {
		rc = AGAIN;
		goto out;
	}
	if (zrc != ZOK && !dlock__zk_rc_connection(zrc)) {
		rc = dlock__zk_attempt_unexpected(a, zrc, "watch", path);
		goto out;
	}
	if (zrc == ZOK) {
		rc = dlock__zk_attempt_watch_wait(a, s, path);
		if (rc == YIELD) {
			a->watching = path;
			return YIELD;
		}
	} else {
		rc = session_where(a, s); /* the connection went: its answer with it */
	}
out:
	dlock__zk_watch_remove(s, path, a->waiter);
	g_free(path);
	return rc;
}

/* One attempt on one session: DLOCK_OK when our node comes first. */
int dlock__zk_attempt_run(zk_attempt *a, zk_session *s)
{
	char **children = NULL;
	int rc;

	/* Called again after a turn: the wait for the predecessor goes on. */
	if (a->watching) {
		rc = dlock__zk_attempt_watch_wait(a, s, a->watching);
		if (rc == YIELD)
			return YIELD;
		watch_done(a, s);
		if (rc != DLOCK_OK)
			return rc;
	}
	if (!a->path && (rc = dlock__zk_attempt_create(a, s, &children)) != DLOCK_OK)
		return rc;
	for (;;) {
		GArray *contenders;
		const char *before = NULL;
		char *predecessor;
		bool present;

		if (!children && (rc = list_children(a, s, &children)) != DLOCK_OK)
			return rc;
		contenders = dlock__zk_contenders(children);
		present = dlock__zk_predecessor(contenders, a->name, &before);
		predecessor = g_strdup(before);
		g_array_unref(contenders);
		g_strfreev(children);
		children = NULL;

		if (!present) {
			g_free(predecessor);
			if (dlock__zk_session_phase(s) == ZK_ENDED)
				return AGAIN;
			/* Deleted by someone else while we waited: queue again. */
			dlock__log(a->b->logger, DLOCK_LOG_WARNING, "%s: lock node %s vanished; queueing again",
			           a->b->label, a->path);
			dlock__zk_attempt_forget(a);
			if ((rc = dlock__zk_attempt_create(a, s, &children)) != DLOCK_OK)
				return rc;
			continue;
		}
		/* First, by an answer that may have come too late to hold on
		 * (dlock__zk_session_fresh()): then list again, which also
		 * finds out whether the session still lives. */
		if (!predecessor && dlock__zk_session_fresh(s))
			return DLOCK_OK;
		if (!predecessor)
			continue;
		if (a->wait_ms == 0 && (!a->turn || (rc = a->turn(a, s)) != DLOCK_OK)) {
			g_free(predecessor);
			return a->turn ? rc : dlock__error_busy(a->resource);
		}
		rc = wait_predecessor(a, s, predecessor);
		g_free(predecessor);
		if (rc != DLOCK_OK)
			return rc;
	}
}

/* Delete a node we will not use: waiting for the answer until until_us
 * (monotonic), so that a try leaves nothing behind when it returns, or,
 * with until_us 0, in the background. */
void dlock__zk_delete_node(zk_session *s, const char *path, int64_t until_us)
{
	dlock__waiter *w;
	zk_call *call;

	if (until_us == 0) {
		dlock__zk_delete_later(s, path);
		return;
	}
	w = dlock__waiter_new();
	call = dlock__zk_call_new(s, CALL_DELETE, w);
	dlock__zk_delete(call, path);
	if (dlock__zk_call_wait(call, until_us) == DLOCK_OK &&
	    (call->rc == ZOK || call->rc == ZNONODE || dlock__zk_rc_session_ended(call->rc))) {
		dlock__zk_call_unref(call);
	} else {
		dlock__zk_call_abandon(call);
		dlock__zk_delete_later(s, path);
	}
	dlock__waiter_free(w);
}

/*
 * How long an acquire that ends with rc waits for the deletes of its
 * nodes: a try that found the lock busy (or a refused permit count)
 * waits, so that nothing of it is left when it returns, bounded by the
 * connect timeout and its own deadline; a wait that ended by its deadline
 * or a cancel returns at once and leaves the deletes to the background.
 */
int64_t dlock__zk_cleanup_until(const zk_attempt *a, int rc)
{
	if (rc != DLOCK_EBUSY && rc != DLOCK_EINVAL)
		return 0;
	return MIN(a->deadline_us, dlock__mono_us() + a->b->connect_timeout_ms * 1000);
}

int dlock__zk_attempt_session(zk_attempt *a, bool first, zk_session **ret)
{
	zk_backend *b = a->b;
	int64_t bound = dlock__mono_us() + b->connect_timeout_ms * 1000;
	int64_t until = first ? MIN(a->deadline_us, bound) : a->deadline_us;
	int rc;

	if (dlock__waiter_canceled(a->waiter))
		return dlock__zk_attempt_failed(a, DLOCK_ECANCELED);
	rc = dlock__zk_session_get(b, a->waiter, until, ret);
	if (rc == DLOCK_ECANCELED)
		return dlock__zk_attempt_failed(a, rc); /* worded as every backend words it */
	if (rc != DLOCK_EUNAVAILABLE || a->wait_ms == 0)
		return rc;
	/* No session in time.  Unreachable means the connect timeout passed
	 * on a first try, or a server refused us; a wait that ends sooner on
	 * servers that are only slow to answer (a few milliseconds on a
	 * healthy one) ran out of the caller's time, and one that queued
	 * already and lost its session waits on until its deadline. */
	if (first && (until == bound || dlock__zk_session_refused(b)))
		return rc;
	return dlock__zk_attempt_failed(a, DLOCK_ETIMEDOUT);
}

/* An acquire's machine (backend.h). */
typedef struct zk_acquire {
	zk_attempt a;
	enum { STAGE_START, STAGE_QUEUED, STAGE_SEMAPHORE } stage;
	zk_session *s;          /* the session of the pass under way, or NULL */
	bool first;             /* no pass yet */
	zk_semaphore_acquire *sem; /* a permit's (semaphore.c) */
} zk_acquire;

/* A pass on m->s has ended with rc: the grant, or the node given up. */
static int pass_end(zk_acquire *m, int rc)
{
	zk_attempt *a = &m->a;
	zk_session *s = m->s;

	dlock__zk_session_remove_waiter(s, a->waiter);
	/* The session may have ended between the answer and the grant:
	 * the node goes with it, and so does the grant. */
	if (rc == DLOCK_OK && !dlock__zk_grant(a->hold, s, a->path, a->czxid))
		rc = AGAIN;
	if (a->path && rc != AGAIN && rc != DLOCK_OK)
		dlock__zk_delete_node(s, a->path, dlock__zk_cleanup_until(a, rc));
	else if (a->unsure && rc != AGAIN && rc != DLOCK_OK)
		dlock__zk_attempt_sweep(a, s);
	dlock__zk_session_unref(s);
	m->s = NULL;
	return rc;
}

/* Queue for the lock, on a new session whenever the one in use ends;
 * YIELD while the attempt waits for a turn. */
static int queued_step(zk_acquire *m)
{
	zk_attempt *a = &m->a;
	zk_backend *b = a->b;
	int rc;

	for (;;) {
		if (!m->s) {
			zk_session *s;

			if ((rc = dlock__zk_attempt_session(a, m->first, &s)) != DLOCK_OK)
				return rc;
			/* A lock among a semaphore's leases would count as one. */
			if (m->first && g_str_has_suffix(a->resource, "/leases") &&
			    (rc = dlock__zk_semaphore_guard(b, a, s)) != DLOCK_OK) {
				dlock__zk_session_unref(s);
				if (rc == AGAIN)
					continue; /* the session ended: look again on the next */
				return rc;
			}
			m->first = false;
			m->s = s;
			dlock__zk_session_add_waiter(s, a->waiter);
		}
		rc = dlock__zk_attempt_run(a, m->s);
		if (rc == YIELD)
			return YIELD;
		if ((rc = pass_end(m, rc)) != AGAIN)
			return rc;
		dlock__log(b->logger, DLOCK_LOG_INFO, "%s: session ended while acquiring '%s'; retrying",
		           b->label, a->resource);
		dlock__zk_attempt_forget(a);
	}
}

int dlock__zk_acquire_begin(dlock__backend *backend, dlock__hold *hold, dlock__waiter *waiter,
                            int64_t wait_ms, int64_t deadline_us, unsigned flags,
                            void **ret_machine)
{
	zk_backend *b = zk_of(backend);
	zk_acquire *m = g_new0(zk_acquire, 1);
	zk_attempt *a = &m->a;

	a->b = b;
	a->hold = hold;
	a->waiter = waiter;
	a->wait_ms = wait_ms;
	a->resource = dlock__hold_resource(hold);
	/* A try is bounded by the backend's own timeouts. */
	a->deadline_us = wait_ms == 0
	                     ? dlock__mono_us() + (b->connect_timeout_ms + b->session_timeout_ms) * 1000
	                     : deadline_us;
	a->dir = dlock__zk_dir(b, a->resource);
	/* An election's node holds the participant id alone, as Curator's
	 * LeaderSelector and kazoo's Election write and read it. */
	a->data = dlock__hold_participant(hold) ? g_strdup(dlock__hold_participant(hold))
	                                        : dlock__token_new(dlock__hold_holder(hold));
	a->uuid = dlock__zk_uuid_new();
	a->async = flags & DLOCK__ACQUIRE_ASYNC;
	m->first = true;
	*ret_machine = m;
	return DLOCK_OK;
}

int dlock__zk_acquire_step(dlock__backend *backend, void *machine, dlock__turn *ret_turn)
{
	zk_backend *b = zk_of(backend);
	zk_acquire *m = machine;
	zk_attempt *a = &m->a;
	int rc = DLOCK_ELOST;

	if (m->stage == STAGE_START) {
		/* A downgrade is granted beside the owner's write node, or, if
		 * that node's session has ended, queues as any reader. */
		if (dlock__hold_downgrade_of(a->hold))
			rc = dlock__zk_downgrade(b, a->hold, a->waiter, a->data, a->deadline_us);
		if (rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECANCELED)
			rc = dlock__zk_attempt_failed(a, rc);
		m->stage = dlock__hold_permits(a->hold) > 1 ? STAGE_SEMAPHORE : STAGE_QUEUED;
	}
	if (rc == DLOCK_ELOST)
		rc = m->stage == STAGE_SEMAPHORE ? dlock__zk_semaphore_step(b, a, &m->sem) : queued_step(m);
	if (rc == YIELD) {
		ret_turn->seen = a->yield_seen;
		ret_turn->until_us = a->yield_until;
		return DLOCK__STEP_WAIT;
	}
	if (rc == DLOCK_ETIMEDOUT && a->wait_ms == 0)
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: no answer in time for a try of '%s'", b->label,
		                  a->resource);
	return rc;
}

void dlock__zk_acquire_end(dlock__backend *backend, void *machine)
{
	zk_acquire *m = machine;

	(void)backend;
	dlock__zk_semaphore_step_free(m->sem);
	g_free(m->a.dir);
	g_free(m->a.data);
	g_free(m->a.uuid);
	g_free(m->a.path);
	g_free(m->a.watching);
	g_free(m);
}

bool dlock__zk_grant(dlock__hold *hold, zk_session *s, const char *path, int64_t czxid)
{
	zk_node *node = g_new0(zk_node, 1);

	g_atomic_ref_count_init(&node->ref);
	node->hold = dlock__hold_ref(hold);
	node->session = dlock__zk_session_ref(s);
	node->path = g_strdup(path);
	node->czxid = czxid;
	if (!dlock__zk_session_track(s, node)) {
		dlock__zk_node_unref(node);
		return false;
	}
	dlock__hold_set_token(hold, (uint64_t)czxid);
	dlock__hold_set_backend_data(hold, node);
	return true;
}

zk_node *dlock__zk_node_of(zk_backend *b, dlock__hold *hold)
{
	zk_node *node;

	dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
	node = dlock__hold_backend_data(hold);
	if (node)
		g_atomic_ref_count_inc(&node->ref);
	dlock__mutex_unlock(&b->mu);
	return node;
}

void dlock__zk_node_unref(zk_node *node)
{
	if (!node || !g_atomic_ref_count_dec(&node->ref))
		return;
	dlock__hold_unref(node->hold);
	dlock__zk_session_unref(node->session);
	g_free(node->path);
	g_free(node);
}

/*
 * The core found the hold past its session's last contact plus the
 * timeout, before the session thread did: our node may still be there
 * (the session lived on; a request answered since proves it), and would
 * keep the lock from everyone while the owner does not release.  Delete
 * it in the background, as a release without a connection does; the
 * release then has nothing left to do.  No I/O here: the delete is only
 * queued.
 */
void dlock__zk_abandon(dlock__backend *backend, dlock__hold *hold)
{
	zk_node *node = dlock__hold_backend_data(hold);

	if (!node)
		return;
	node->abandoned = true;
	if (dlock__zk_session_untrack(node->session, node))
		dlock__zk_delete_later(node->session, node->path);
}

/*
 * End a hold: delete our node.  If the connection is down, or the server
 * does not answer within the connect timeout, the delete goes on in the
 * background until it succeeds or the session ends (which deletes the
 * node too).
 */
int dlock__zk_release(dlock__backend *backend, dlock__hold *hold)
{
	zk_backend *b = zk_of(backend);
	zk_node *node;
	zk_session *s;
	int rc = DLOCK_OK;

	/* Under b->mu: a downgrade on another thread may be taking a
	 * reference to the node (dlock__zk_node_of()). */
	dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
	node = dlock__hold_backend_data(hold);
	dlock__hold_set_backend_data(hold, NULL);
	dlock__mutex_unlock(&b->mu);
	if (!node)
		return DLOCK_OK;
	s = node->session;
	if (node->abandoned) {
		rc = DLOCK_ELOST; /* its delete is under way already */
	} else if (!dlock__zk_session_untrack(s, node)) {
		rc = DLOCK_ELOST; /* the session ended: the node went with it */
	} else if (dlock__zk_session_phase(s) != ZK_CONNECTED) {
		dlock__zk_delete_later(s, node->path);
	} else {
		dlock__waiter *w = dlock__waiter_new();
		zk_call *call = dlock__zk_call_new(s, CALL_DELETE, w);

		dlock__zk_delete(call, node->path);
		if (dlock__zk_call_wait(call, dlock__mono_us() + b->connect_timeout_ms * 1000) != DLOCK_OK) {
			dlock__zk_call_abandon(call);
			if (dlock__zk_session_phase(s) == ZK_ENDED)
				rc = DLOCK_ELOST;
			else
				dlock__zk_delete_later(s, node->path);
		} else {
			if (call->rc == ZNONODE || dlock__zk_rc_session_ended(call->rc))
				rc = DLOCK_ELOST;
			else if (call->rc != ZOK)
				dlock__zk_delete_later(s, node->path);
			dlock__zk_call_unref(call);
		}
		dlock__waiter_free(w);
	}
	if (rc == DLOCK_ELOST)
		dlock__error(DLOCK_ELOST, "%s: lock node %s was gone before the release", b->label, node->path);
	dlock__zk_node_unref(node);
	return rc;
}
