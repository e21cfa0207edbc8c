/* SPDX-License-Identifier: MIT */
/*
 * The session thread ("dlock-zksession"), one per backend: it keeps the
 * sessions in use alive and judges them by dlock's own clock.  Each pass
 * declares LOST the holds of a session with no contact within its
 * timeout (less the lease margin), sends a keep-alive probe (a sync of
 * "/") every third of the timeout to a session with holds or waiters,
 * runs the deletes left for a reconnect (deletes.c), closes the sessions
 * that ended, and looks up again the server names a disconnected session
 * could not resolve (servers.c).  session.c says what counts as contact.
 */
#include <inttypes.h>

#include <zookeeper/zookeeper.h>

#include "cleanup.h"
#include "clock.h"
#include "internal.h"
#include "mutex.h"
#include "thread.h"

/* The session thread looks at each session at least this often. */
#define TICK_US (1000 * 1000)
/* How long closing a connected session waits for answers still due. */
#define CLOSE_SETTLE_US (500 * 1000)
/* The longest pause between lookups of names left out of a session
 * (servers.c), and how long one round of them may take. */
#define RESOLVE_MAX_US (10 * 1000 * 1000)
#define RESOLVE_BUDGET_US (500 * 1000)

/* The send time of a keep-alive probe (a sync: the server we talk to
 * passes it to the leader) travels with it, so that its answer records
 * exactly when the request left. */
typedef struct probe_ctx {
	zk_session *session;
	int64_t sent_us;
} probe_ctx;

static void probe_answered(int rc, const char *value, const void *data)
{
	probe_ctx *ctx = (probe_ctx *)data;
	zk_session *s = ctx->session;

	(void)value;
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	s->probing = false;
	if (rc == ZOK || rc == ZNONODE)
		dlock__zk_session_contact_locked(s, ctx->sent_us);
	dlock__mutex_unlock(&s->mu);
	dlock__zk_request_done(s);
	dlock__zk_session_unref(s);
	g_free(ctx);
}

/* Send a keep-alive probe; s->mu held. */
static void probe_send_locked(zk_session *s, int64_t now)
{
	probe_ctx *ctx = g_new0(probe_ctx, 1);

	dlock__mutex_assert_held(&s->mu);
	ctx->session = dlock__zk_session_ref(s);
	ctx->sent_us = now;
	s->probing = true;
	dlock__zk_request_sent_locked(s);
	if (zoo_async(s->zh, "/", probe_answered, ctx) != ZOK) {
		s->outstanding--;
		s->probing = false;
		g_atomic_ref_count_dec(&s->ref); /* the caller holds another */
		g_free(ctx);
	}
}

/*
 * Whether a session is worth keeping alive: it holds locks, or acquires
 * wait on it with their nodes queued.  A waiter's session that ended
 * would cost it its place in the queue, so it is probed like a holder's:
 * otherwise its last contact is whenever its last request was answered,
 * which may be far longer ago than the session timeout, and a short
 * disconnection would end it at once.  s->mu held.
 */
static bool in_use_locked(const zk_session *s)
{
	dlock__mutex_assert_held(&s->mu);
	return s->holds->len > 0 || dlock__waketable_count(s->waiters, ZK_SESSION_WAITERS) > 0;
}

/*
 * One pass over the sessions, with b->mu held: declare lost the sessions
 * whose timer ran out, send probes and retried deletes, and take ended
 * sessions off the list (into to_close).  Returns when it wants to run
 * next (CLOCK_BOOTTIME), the holds to report LOST in lost, what to log in
 * notes, and the nearest session expiry in *ret_expiry (INT64_MAX: none).
 */
static int64_t pass_locked(zk_backend *b, GPtrArray *to_close, GPtrArray *lost,
                           GPtrArray *notes, int64_t *ret_expiry)
{
	int64_t now = dlock__boot_us();
	int64_t next = now + TICK_US;

	dlock__mutex_assert_held(&b->mu);
	*ret_expiry = INT64_MAX;

	for (guint i = 0; i < b->sessions->len;) {
		zk_session *s = b->sessions->pdata[i];

		dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
		if (s->phase != ZK_ENDED && s->ever_connected &&
		    (s->phase == ZK_CONNECTING || s->holds->len > 0)) {
			int64_t expiry = dlock__zk_session_expiry_locked(s);

			if (now >= expiry) {
				GPtrArray *holds = dlock__zk_session_end_locked(b, s, "no contact with a server "
				                                                  "within the session timeout", notes);

				g_ptr_array_extend_and_steal(lost, holds);
			} else {
				next = MIN(next, expiry);
				*ret_expiry = MIN(*ret_expiry, expiry);
			}
		}
		if (s->phase == ZK_CONNECTED) {
			if (in_use_locked(s) && !s->probing) {
				if (now >= s->probe_due_us) {
					probe_send_locked(s, now);
					s->probe_due_us = now + s->timeout_ms * 1000 / 3;
				}
				next = MIN(next, s->probe_due_us);
			}
			/* The time read under s->mu: everything queued before is due. */
			dlock__cleanups_run(s->cleanups, dlock__boot_us());
		}
		if (s->phase == ZK_ENDED) {
			dlock__mutex_unlock(&s->mu);
			g_ptr_array_add(to_close, g_ptr_array_steal_index(b->sessions, i));
			continue;
		}
		dlock__mutex_unlock(&s->mu);
		i++;
	}
	return next;
}

/*
 * Close a session's handle: with the server's cooperation if it is still
 * reachable (our ephemeral nodes go at once), otherwise locally.  Never on
 * the completion thread, and with no lock held: it waits for that thread.
 */
static void session_close(zk_session *s)
{
	int64_t until = dlock__mono_us() + CLOSE_SETTLE_US;
	zhandle_t *zh;

	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	zh = s->zh;
	/* The client library loses a completion whose answer arrives while
	 * zookeeper_close() takes the handle apart (with what it refers to:
	 * a call, a session reference), so the answers still due on a
	 * connected session are let in first; on a healthy server that is a
	 * round trip. */
	while (s->phase == ZK_CONNECTED && s->outstanding > 0 &&
	       g_cond_wait_until(&s->settled, &s->mu, until))
		;
	s->phase = ZK_ENDED;
	dlock__mutex_unlock(&s->mu);
	if (zh)
		zookeeper_close(zh);
	/* After zookeeper_close no callback runs; s->zh is not used again
	 * (every sender checks the phase first). */
	dlock__cleanups_clear(s->cleanups);
	dlock__zk_session_unref(s);
}

/*
 * A session whose list lacks servers whose names did not resolve, and
 * that is not connected, once its pause has passed: referenced, its next
 * look set a longer pause ahead (servers.c).  NULL if none, and
 * *ret_next the earliest time one will be due (INT64_MAX: none).  b->mu
 * held.
 */
static zk_session *refresh_due_locked(zk_backend *b, int64_t *ret_next)
{
	int64_t now = dlock__boot_us();

	dlock__mutex_assert_held(&b->mu);
	*ret_next = INT64_MAX;
	for (guint i = 0; i < b->sessions->len; i++) {
		zk_session *s = b->sessions->pdata[i];
		bool due = false;

		dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
		if (s->phase == ZK_CONNECTING && s->missing > 0) {
			due = now >= s->resolve_due_us;
			if (due) {
				s->resolve_pause_us = MIN(s->resolve_pause_us * 2, RESOLVE_MAX_US);
				s->resolve_due_us = now + s->resolve_pause_us;
			}
			*ret_next = MIN(*ret_next, s->resolve_due_us);
		}
		dlock__mutex_unlock(&s->mu);
		if (due)
			return dlock__zk_session_ref(s);
	}
	return NULL;
}

gpointer dlock__zk_session_thread(gpointer data)
{
	zk_backend *b = data;

	GPtrArray *notes = dlock__zk_notes_new();
	zk_session *refresh;

	dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
	while (!b->stopping) {
		GPtrArray *to_close = g_ptr_array_new();
		GPtrArray *lost = g_ptr_array_new_with_free_func((GDestroyNotify)dlock__hold_unref);
		int64_t expiry, resolve_next;
		int64_t next = pass_locked(b, to_close, lost, notes, &expiry);

		if (to_close->len > 0 || lost->len > 0 || notes->len > 0) {
			dlock__mutex_unlock(&b->mu);
			dlock__zk_notes_flush(b, notes);
			dlock__zk_holds_report(lost, DLOCK_STATE_LOST);
			for (guint i = 0; i < to_close->len; i++)
				session_close(to_close->pdata[i]);
			g_ptr_array_unref(to_close);
			dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
			continue;
		}
		g_ptr_array_unref(lost);
		g_ptr_array_unref(to_close);
		if ((refresh = refresh_due_locked(b, &resolve_next))) {
			/* The lookups take at most half a second, and never past
			 * a session's expiry, so that no LOST comes late; a
			 * probe may wait for them (no connected session is
			 * refreshed). */
			int64_t budget = MIN(expiry - dlock__boot_us(), RESOLVE_BUDGET_US);

			dlock__mutex_unlock(&b->mu);
			dlock__zk_servers_refresh(b, refresh, dlock__mono_us() + MAX(budget, 0));
			dlock__zk_session_unref(refresh);
			dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
			continue;
		}
		b->thread_wake_us = MAX(MIN(next, resolve_next), dlock__boot_us() + 1000);
		g_cond_wait_until(&b->cond, &b->mu,
		                  dlock__mono_us() + (b->thread_wake_us - dlock__boot_us()));
		b->thread_wake_us = 0;
	}
	dlock__mutex_unlock(&b->mu);
	g_ptr_array_unref(notes);
	return NULL;
}

void dlock__zk_sessions_stop(zk_backend *b)
{
	GPtrArray *sessions;

	dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
	b->stopping = true;
	g_cond_broadcast(&b->cond);
	dlock__mutex_unlock(&b->mu);
	dlock__lazy_thread_stop(&b->thread, &b->mu, DLOCK__RANK_ZK_BACKEND, NULL);

	dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
	sessions = b->sessions;
	b->sessions = g_ptr_array_new();
	if (b->current) {
		g_atomic_ref_count_dec(&b->current->ref); /* the list holds another */
		b->current = NULL;
	}
	dlock__mutex_unlock(&b->mu);
	/* Closing tells the servers: our nodes go at once. */
	for (guint i = 0; i < sessions->len; i++)
		session_close(sessions->pdata[i]);
	g_ptr_array_unref(sessions);
}
