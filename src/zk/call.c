/* SPDX-License-Identifier: MIT */
/*
 * Asynchronous ZooKeeper requests that a thread with a deadline waits on.
 *
 * The ZooKeeper client runs completions on its own thread.  A completion
 * here only records the result and wakes the thread that waits; it never
 * blocks.  The waiting thread may give up (deadline, cancel) before the
 * answer comes; the call then stays alive until its completion runs, and a
 * create that succeeded after all has its node deleted, so nothing is left
 * behind.
 */
#include <string.h>

#include "clock.h"
#include "internal.h"
#include "mutex.h"

zk_call *dlock__zk_call_new(zk_session *s, zk_call_kind kind, dlock__waiter *waiter)
{
	zk_call *call = g_new0(zk_call, 1);

	g_atomic_ref_count_init(&call->ref);
	call->session = dlock__zk_session_ref(s);
	call->kind = kind;
	call->waiter = waiter;
	g_mutex_init(&call->mu);
	return call;
}

static zk_call *call_ref(zk_call *call)
{
	g_atomic_ref_count_inc(&call->ref);
	return call;
}

/* A transaction's operations and results, which the client fills in
 * until the completion runs: they live as long as the call. */
typedef struct zk_multi {
	zoo_op_t ops[2];
	zoo_op_result_t results[2];
	char *created;   /* the create's path buffer */
} zk_multi;

static void multi_free(zk_multi *m)
{
	if (!m)
		return;
	g_free(m->created);
	g_free(m);
}

void dlock__zk_call_unref(zk_call *call)
{
	if (!call || !g_atomic_ref_count_dec(&call->ref))
		return;
	dlock__zk_session_unref(call->session);
	g_mutex_clear(&call->mu);
	g_free(call->path);
	g_strfreev(call->children);
	g_free(call->data);
	multi_free(call->multi);
	g_free(call);
}

/*
 * Record the end of a call (from the completion thread, or at once when
 * the client refused the request) and drop the completion's reference.
 */
static void finish(zk_call *call, int rc)
{
	char *orphan = NULL;
	dlock__waiter *waiter;

	/* Before the waiter wakes: it may make a hold of this answer, and the
	 * session timer must then count from this request.  Only a write's
	 * answer counts: a follower answers reads from what it knows, also
	 * after it lost its leader, which meanwhile expires our session; a
	 * write is answered only once the leader has it. */
	if (call->quorum && (rc == ZOK || rc == ZNONODE || rc == ZNODEEXISTS || rc == ZNOTEMPTY))
		dlock__zk_session_contact(call->session, call->sent_us);
	dlock__mutex_lock(&call->mu, DLOCK__RANK_ZK_CALL);
	call->done = true;
	call->rc = rc;
	/* Alive while set here (abandon clears it under this mutex); woken
	 * after the unlock, so that the woken thread does not block on it. */
	waiter = call->waiter ? dlock__waiter_ref(call->waiter) : NULL;
	if (call->abandoned && call->kind == CALL_CREATE && rc == ZOK && call->path)
		orphan = g_strdup(call->path);
	dlock__mutex_unlock(&call->mu);
	if (waiter) {
		dlock__waiter_wake(waiter);
		dlock__waiter_free(waiter);
	}

	if (orphan) {
		/* Created after its waiter gave up: nobody will use it. */
		dlock__zk_delete_later(call->session, orphan);
		g_free(orphan);
	}
	dlock__zk_request_done(call->session);
	dlock__zk_call_unref(call);
}

static void string_stat_done(int rc, const char *value, const struct Stat *stat, const void *data)
{
	zk_call *call = (zk_call *)data;

	if (rc == ZOK) {
		dlock__mutex_lock(&call->mu, DLOCK__RANK_ZK_CALL);
		call->path = g_strdup(value);
		if (stat)
			call->stat = *stat;
		dlock__mutex_unlock(&call->mu);
	}
	finish(call, rc);
}

static void strings_done(int rc, const struct String_vector *strings, const void *data)
{
	zk_call *call = (zk_call *)data;

	if (rc == ZOK && strings) {
		char **list = g_new0(char *, strings->count + 1);

		for (int i = 0; i < strings->count; i++)
			list[i] = g_strdup(strings->data[i]);
		dlock__mutex_lock(&call->mu, DLOCK__RANK_ZK_CALL);
		call->children = list;
		dlock__mutex_unlock(&call->mu);
	}
	finish(call, rc);
}

static void data_done(int rc, const char *value, int len, const struct Stat *stat, const void *data)
{
	zk_call *call = (zk_call *)data;

	if (rc == ZOK) {
		dlock__mutex_lock(&call->mu, DLOCK__RANK_ZK_CALL);
		call->data = value && len > 0 ? g_strndup(value, (gsize)len) : g_strdup("");
		if (stat)
			call->stat = *stat;
		dlock__mutex_unlock(&call->mu);
	}
	finish(call, rc);
}

static void stat_done(int rc, const struct Stat *stat, const void *data)
{
	zk_call *call = (zk_call *)data;

	if (rc == ZOK && stat) {
		dlock__mutex_lock(&call->mu, DLOCK__RANK_ZK_CALL);
		call->stat = *stat;
		dlock__mutex_unlock(&call->mu);
	}
	finish(call, rc);
}

static void void_done(int rc, const void *data)
{
	finish((zk_call *)data, rc);
}

/*
 * Requests are sent with the session's mutex held, so that the session
 * thread cannot close the handle in between; a session that has ended
 * refuses them.  A request the client refuses is not queued and gets no
 * completion, so it is finished here with the client's code (finish()
 * also counts it done on the session).
 */
#define SEND(call, expr)                                                     \
	do {                                                                 \
		zk_session *s_ = (call)->session;                            \
		zk_call *ref_ = call_ref(call);                              \
		int rc_;                                                     \
		dlock__mutex_lock(&s_->mu, DLOCK__RANK_ZK_SESSION);                                       \
		(call)->sent_us = dlock__boot_us();                          \
		dlock__zk_request_sent_locked(s_);                           \
		rc_ = s_->phase == ZK_ENDED ? ZSESSIONEXPIRED : (expr);      \
		dlock__mutex_unlock(&s_->mu);                                     \
		if (rc_ != ZOK)                                              \
			finish(ref_, rc_);                                   \
	} while (0)

void dlock__zk_create(zk_call *call, const char *path, const char *data, int flags,
                      const struct ACL_vector *acl)
{
	call->quorum = true;
	SEND(call, zoo_acreate2(s_->zh, path, data, data ? (int)strlen(data) : -1, acl, flags,
	                        string_stat_done, ref_));
}

void dlock__zk_create_beside(zk_call *call, const char *beside, const char *path, const char *data,
                             int flags, const struct ACL_vector *acl)
{
	zk_multi *m = g_new0(zk_multi, 1);
	size_t len = strlen(path) + 1;

	m->created = g_malloc0(len);
	zoo_check_op_init(&m->ops[0], beside, -1);
	zoo_create_op_init(&m->ops[1], path, data, data ? (int)strlen(data) : -1, acl, flags, m->created,
	                   (int)len);
	call->multi = m;
	/* The node it makes if it succeeds (not sequential: known now), so
	 * that one made after its waiter gave up is deleted (finish()). */
	call->path = g_strdup(path);
	call->quorum = true;
	SEND(call, zoo_amulti(s_->zh, 2, m->ops, m->results, void_done, ref_));
}

void dlock__zk_get_children(zk_call *call, const char *path)
{
	SEND(call, zoo_aget_children(s_->zh, path, 0, strings_done, ref_));
}

void dlock__zk_get(zk_call *call, const char *path, bool watch)
{
	if (watch)
		SEND(call, zoo_awget(s_->zh, path, dlock__zk_watcher, s_, data_done, ref_));
	else
		SEND(call, zoo_aget(s_->zh, path, 0, data_done, ref_));
}

void dlock__zk_exists(zk_call *call, const char *path)
{
	SEND(call, zoo_aexists(s_->zh, path, 0, stat_done, ref_));
}

void dlock__zk_get_children_watch(zk_call *call, const char *path)
{
	SEND(call, zoo_awget_children(s_->zh, path, dlock__zk_watcher, s_, strings_done, ref_));
}

void dlock__zk_exists_watch(zk_call *call, const char *path)
{
	SEND(call, zoo_awexists(s_->zh, path, dlock__zk_watcher, s_, stat_done, ref_));
}

void dlock__zk_set(zk_call *call, const char *path, const char *data, int version)
{
	call->quorum = true;
	SEND(call, zoo_aset(s_->zh, path, data, (int)strlen(data), version, stat_done, ref_));
}

void dlock__zk_delete(zk_call *call, const char *path)
{
	call->quorum = true;
	SEND(call, zoo_adelete(s_->zh, path, -1, void_done, ref_));
}

int dlock__zk_call_wait(zk_call *call, int64_t until_us)
{
	dlock__waiter *waiter = call->waiter;

	for (;;) {
		uint64_t seen = dlock__waiter_seq(waiter);
		bool done;
		int rc;

		dlock__mutex_lock(&call->mu, DLOCK__RANK_ZK_CALL);
		done = call->done;
		dlock__mutex_unlock(&call->mu);
		if (done)
			return DLOCK_OK;
		if (dlock__zk_session_phase(call->session) == ZK_ENDED)
			return DLOCK_ELOST;
		rc = dlock__waiter_sleep(waiter, seen, until_us);
		if (rc != DLOCK_OK)
			return rc;
	}
}

bool dlock__zk_call_attach(zk_call *call, dlock__waiter *waiter)
{
	bool done;

	dlock__mutex_lock(&call->mu, DLOCK__RANK_ZK_CALL);
	done = call->done;
	if (!done)
		call->waiter = waiter;
	dlock__mutex_unlock(&call->mu);
	return done;
}

void dlock__zk_call_abandon(zk_call *call)
{
	char *orphan = NULL;

	dlock__mutex_lock(&call->mu, DLOCK__RANK_ZK_CALL);
	call->waiter = NULL;
	call->abandoned = true;
	if (call->done && call->kind == CALL_CREATE && call->rc == ZOK && call->path)
		orphan = g_strdup(call->path);
	dlock__mutex_unlock(&call->mu);
	if (orphan) {
		dlock__zk_delete_later(call->session, orphan);
		g_free(orphan);
	}
	dlock__zk_call_unref(call);
}
