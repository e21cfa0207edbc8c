/* SPDX-License-Identifier: MIT */
/*
 * Deletes in the background: a node whose delete could not be sent (no
 * connection) is kept on the session's cleanup queue and sent again after
 * the next reconnect; a node of an ended session needs none, as it ends
 * with its session.
 */
#include <zookeeper/zookeeper.h>

#include "cleanup.h"
#include "clock.h"
#include "internal.h"
#include "mutex.h"

typedef struct delete_ctx {
	zk_session *session;
	char *path;
} delete_ctx;

static void delete_ctx_free(delete_ctx *ctx)
{
	dlock__zk_session_unref(ctx->session);
	g_free(ctx->path);
	g_free(ctx);
}

static dlock__cleanup_result delete_try(gpointer data, gpointer ctx);

static const dlock__cleanup_ops delete_ops = { delete_try, g_free };

/* Keep path's delete for the next reconnect; s->mu held. */
static void delete_keep_locked(zk_session *s, char *path)
{
	dlock__mutex_assert_held(&s->mu);
	dlock__cleanups_add(s->cleanups, &delete_ops, path, INT64_MAX, dlock__boot_us());
}

static void delete_done(int rc, const void *data)
{
	delete_ctx *ctx = (delete_ctx *)data;
	zk_session *s = ctx->session;

	if (dlock__zk_rc_connection(rc)) {
		/* Sent again by the session thread after the next reconnect. */
		dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
		if (s->phase != ZK_ENDED) {
			delete_keep_locked(s, ctx->path);
			ctx->path = NULL;
		}
		dlock__mutex_unlock(&s->mu);
	} else if (rc != ZOK && rc != ZNONODE && !dlock__zk_rc_session_ended(rc)) {
		dlock__log(s->b->logger, DLOCK_LOG_WARNING, "%s: cannot delete %s: %s", s->b->label,
		           ctx->path, dlock__zk_strerror(rc));
	}
	dlock__zk_request_done(s);
	delete_ctx_free(ctx);
}

/*
 * Send the delete of path (the completion takes it from there): done, or
 * to retry if the client refused it for want of a connection, else given
 * up.  s->mu held, which keeps the handle open meanwhile.
 */
static dlock__cleanup_result delete_try(gpointer data, gpointer session)
{
	zk_session *s = session;
	const char *path = data;
	delete_ctx *ctx = g_new0(delete_ctx, 1);
	int rc;

	ctx->session = dlock__zk_session_ref(s);
	ctx->path = g_strdup(path);
	dlock__zk_request_sent_locked(s);
	rc = zoo_adelete(s->zh, path, -1, delete_done, ctx);
	if (rc == ZOK)
		return DLOCK__CLEANUP_DONE;
	s->outstanding--;
	/* Not queued: no completion will run.  The caller holds another
	 * reference, so this unref cannot free s under its own mutex. */
	delete_ctx_free(ctx);
	return dlock__zk_rc_connection(rc) ? DLOCK__CLEANUP_RETRY : DLOCK__CLEANUP_GIVE_UP;
}

void dlock__zk_delete_send_locked(zk_session *s, const char *path)
{
	dlock__mutex_assert_held(&s->mu);
	if (s->phase == ZK_ENDED)
		return; /* the node ends with its session */
	if (delete_try((gpointer)path, s) == DLOCK__CLEANUP_RETRY)
		delete_keep_locked(s, g_strdup(path));
}

void dlock__zk_delete_later(zk_session *s, const char *path)
{
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	dlock__zk_delete_send_locked(s, path);
	dlock__mutex_unlock(&s->mu);
}
