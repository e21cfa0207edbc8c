/* SPDX-License-Identifier: MIT */
/*
 * ZooKeeper sessions: connection state, hold reports, loss detection (the
 * session thread that acts on it is session-thread.c).
 *
 * A backend uses one session at a time ("current").  The client library
 * reports connection loss and reconnection; dlock turns them into
 * SUSPENDED and RECONNECTED for every hold on the session.  The C client
 * learns that a session expired only once it reaches a server again, so
 * dlock also keeps its own timer: every answered write or sync records when it
 * was sent, and when the negotiated session timeout (less a margin) has
 * passed since then, the server may already have expired the session and
 * deleted our nodes.  The session thread then declares its holds LOST and
 * closes it; the next acquisition opens a new session.  While holds exist
 * or acquires wait on the session, the session thread sends a cheap
 * request (a sync of "/") every third of the timeout, and one right after
 * each reconnect, so the timer measures real contact, not the client's
 * guess.  Only writes and syncs count: the leader expires sessions, and a
 * follower cut off from it goes on answering reads until it notices
 * (ZooKeeper's sync limit, which may be longer than the session timeout),
 * while writes and syncs are answered by way of the leader.  Contact is
 * never stamped with a time the server may not yet have heard from us: a
 * loss must be declared early rather than late.
 * While a session is not connected and some servers' names did not
 * resolve when it opened, the session thread also looks them up again
 * (servers.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "lease.h"
#include "mutex.h"
#include "stepper.h"
#include "thread.h"

/*
 * When the session may have expired on the server, by our count: its last
 * contact plus the negotiated timeout, less the lease margin (lease.h).
 * The server counts its timeout from when it last heard from us, which is
 * after we sent, so counting from the send time is safe.  s->mu held.
 */
int64_t dlock__zk_session_expiry_locked(const zk_session *s)
{
	dlock__mutex_assert_held(&s->mu);
	return dlock__lease_end_us(s->contact_us, s->timeout_ms);
}

/*
 * Give every hold on the session that bound, so that the core judges it by
 * the clock when asked (dlock_held(), dlock_release()) rather than when
 * the session thread next looks -- which, in a process resumed after a
 * pause, can be after the caller's thread has already run.  s->mu held.
 */
static void bounds_push_locked(zk_session *s)
{
	int64_t until = dlock__zk_session_expiry_locked(s);

	dlock__mutex_assert_held(&s->mu);
	for (guint i = 0; i < s->holds->len; i++) {
		zk_node *node = s->holds->pdata[i];

		dlock__hold_set_valid_until(node->hold, until);
	}
}

/* Record the send time of a request the server answered.  s->mu held. */
void dlock__zk_session_contact_locked(zk_session *s, int64_t sent_us)
{
	dlock__mutex_assert_held(&s->mu);
	if (sent_us <= s->contact_us)
		return;
	s->contact_us = sent_us;
	bounds_push_locked(s);
}

zk_session *dlock__zk_session_ref(zk_session *s)
{
	g_atomic_ref_count_inc(&s->ref);
	return s;
}

void dlock__zk_session_unref(zk_session *s)
{
	if (!s || !g_atomic_ref_count_dec(&s->ref))
		return;
	/* The handle was closed before the last reference went. */
	g_ptr_array_unref(s->holds);
	dlock__waketable_free(s->waiters);
	dlock__cleanups_free(s->cleanups);
	g_mutex_clear(&s->mu);
	g_cond_clear(&s->settled);
	g_free(s->servers);
	g_free(s);
}

/* The client library's log: per handle, but without a context pointer,
 * so it cannot reach the client's logger.  dlock logs what matters about
 * sessions itself, and the library never writes to stderr. */
static void discard_log(const char *message)
{
	(void)message;
}

static int64_t session_id(zhandle_t *zh)
{
	const clientid_t *id = zh ? zoo_client_id(zh) : NULL;

	return id ? id->client_id : 0;
}

/* ---- messages logged after the locks ---------------------------------- */

/*
 * What the session code has to say while it holds b->mu or s->mu is
 * noted and logged once they are released: the user's log callback may
 * block, and every caller and the session thread would wait on those
 * mutexes meanwhile.
 */
typedef struct note {
	dlock_log_level level;
	char *text;
} note;

static void note_free(note *n)
{
	g_free(n->text);
	g_free(n);
}

GPtrArray *dlock__zk_notes_new(void)
{
	return g_ptr_array_new_with_free_func((GDestroyNotify)note_free);
}

static void note_add(GPtrArray *notes, dlock_log_level level, const char *fmt, ...)
	G_GNUC_PRINTF(3, 4);

static void note_add(GPtrArray *notes, dlock_log_level level, const char *fmt, ...)
{
	note *n = g_new0(note, 1);
	va_list ap;

	va_start(ap, fmt);
	n->level = level;
	n->text = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	g_ptr_array_add(notes, n);
}

/* Log the notes (with no lock held) and empty the list. */
void dlock__zk_notes_flush(zk_backend *b, GPtrArray *notes)
{
	for (guint i = 0; i < notes->len; i++) {
		note *n = notes->pdata[i];

		dlock__log(b->logger, n->level, "%s", n->text);
	}
	g_ptr_array_set_size(notes, 0);
}

/* ---- state changes ---------------------------------------------------- */

static GPtrArray *holds_copy_locked(zk_session *s)
{
	GPtrArray *copy = g_ptr_array_new_with_free_func((GDestroyNotify)dlock__hold_unref);

	dlock__mutex_assert_held(&s->mu);
	for (guint i = 0; i < s->holds->len; i++) {
		zk_node *node = s->holds->pdata[i];

		g_ptr_array_add(copy, dlock__hold_ref(node->hold));
	}
	return copy;
}

static void wake_all_locked(zk_session *s)
{
	dlock__mutex_assert_held(&s->mu);
	dlock__waketable_wake_all(s->waiters);
}

void dlock__zk_holds_report(GPtrArray *holds, dlock_state state)
{
	if (!holds)
		return;
	for (guint i = 0; i < holds->len; i++)
		dlock__hold_report(holds->pdata[i], state);
	g_ptr_array_unref(holds);
}

/*
 * End a session (expired, auth refused, or our timer ran out): every hold
 * on it is lost, waiters move on, and the session thread will close it.
 * Called with b->mu and s->mu held; returns the holds to report LOST, and
 * adds to notes what to log after.
 */
GPtrArray *dlock__zk_session_end_locked(zk_backend *b, zk_session *s, const char *reason,
                                        GPtrArray *notes)
{
	dlock__mutex_assert_held(&b->mu);
	s->phase = ZK_ENDED;
	s->end_reason = reason;
	if (b->current == s) {
		b->current = NULL;
		g_atomic_ref_count_dec(&s->ref); /* b->sessions still holds one */
	}
	wake_all_locked(s);
	g_cond_broadcast(&b->cond);
	note_add(notes, s->holds->len ? DLOCK_LOG_WARNING : DLOCK_LOG_INFO,
	         "%s: session 0x%" PRIx64 " ended (%s); %u lock(s) lost", b->label, session_id(s->zh),
	         reason, s->holds->len);
	return holds_copy_locked(s);
}

static void state_changed(zk_session *s, zhandle_t *zh, int state)
{
	zk_backend *b = s->b;
	GPtrArray *holds = NULL, *notes = dlock__zk_notes_new();
	dlock_state what = DLOCK_STATE_SUSPENDED;

	dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	if (s->phase == ZK_ENDED) {
		/* already over */
	} else if (state == ZOO_CONNECTED_STATE) {
		bool reconnect = s->ever_connected && s->phase == ZK_CONNECTING;
		int64_t now = dlock__boot_us();

		dlock__zk_cloexec_socket(zh);
		s->phase = ZK_CONNECTED;
		s->ever_connected = true;
		s->timeout_ms = zoo_recv_timeout(zh);
		bounds_push_locked(s);
		/* The server heard from us when it took the connect request,
		 * which left at an unknown time before now: now would be later
		 * than the true contact.  A probe sent at once measures it
		 * (the first connection counts from the session's opening). */
		s->probe_due_us = reconnect ? now : now + s->timeout_ms * 1000 / 3;
		if (reconnect) {
			holds = holds_copy_locked(s);
			what = DLOCK_STATE_RECONNECTED;
		}
		note_add(notes, DLOCK_LOG_INFO, "%s: session 0x%" PRIx64 " %s (timeout %d ms)", b->label,
		         session_id(zh), reconnect ? "reconnected" : "connected", zoo_recv_timeout(zh));
		wake_all_locked(s);
		g_cond_broadcast(&b->cond);
	} else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
		if (s->phase == ZK_CONNECTED) {
			s->phase = ZK_CONNECTING;
			holds = holds_copy_locked(s);
			what = DLOCK_STATE_SUSPENDED;
			note_add(notes, DLOCK_LOG_WARNING, "%s: session 0x%" PRIx64 " disconnected", b->label,
			         session_id(zh));
			wake_all_locked(s);
			g_cond_broadcast(&b->cond);
		}
	} else if (state == ZOO_EXPIRED_SESSION_STATE) {
		holds = dlock__zk_session_end_locked(b, s, "expired by the server", notes);
		what = DLOCK_STATE_LOST;
	} else if (state == ZOO_AUTH_FAILED_STATE) {
		holds = dlock__zk_session_end_locked(b, s, "authentication refused", notes);
		what = DLOCK_STATE_LOST;
	}
	dlock__mutex_unlock(&s->mu);
	dlock__mutex_unlock(&b->mu);
	dlock__zk_notes_flush(b, notes);
	g_ptr_array_unref(notes);
	dlock__zk_holds_report(holds, what);
}

void dlock__zk_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	zk_session *s = ctx;

	if (type == ZOO_SESSION_EVENT) {
		state_changed(s, zh, state);
		return;
	}
	if (!path || type == ZOO_NOTWATCHING_EVENT)
		return;
	/* A data watch fired (the node was deleted or changed): wake the
	 * threads waiting on it.  The watch is used up. */
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	if (*path) { /* never ZK_SESSION_WAITERS */
		dlock__waketable_wake(s->waiters, path);
		dlock__waketable_drop(s->waiters, path);
	}
	dlock__mutex_unlock(&s->mu);
}

void dlock__zk_session_contact(zk_session *s, int64_t sent_us)
{
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	dlock__zk_session_contact_locked(s, sent_us);
	dlock__mutex_unlock(&s->mu);
}

bool dlock__zk_session_fresh(zk_session *s)
{
	bool fresh;

	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	fresh = s->phase != ZK_ENDED &&
	        dlock__boot_us() + dlock__lease_margin_us(s->timeout_ms) < dlock__zk_session_expiry_locked(s);
	dlock__mutex_unlock(&s->mu);
	return fresh;
}

/* ---- opening and waiting ---------------------------------------------- */

/* The first pause before names left out of a session are looked up
 * again (servers.c). */
#define RESOLVE_FIRST_US (500 * 1000)

/* Open a session on servers, "ip:port,..." (no I/O: the client library
 * connects in its own thread), missing names having been left out of it.
 * Called with b->mu held. */
static int session_open(zk_backend *b, const char *servers, unsigned missing, zk_session **ret)
{
	zk_session *s = g_new0(zk_session, 1);
	char *hosts = g_strconcat(servers, b->chroot, NULL);
	sigset_t all, old;
	GArray *fds;
	int saved_errno;

	g_atomic_ref_count_init(&s->ref);
	s->b = b;
	g_mutex_init(&s->mu);
	g_cond_init(&s->settled);
	s->phase = ZK_CONNECTING;
	s->holds = g_ptr_array_new();
	s->waiters = dlock__waketable_new(g_str_hash, g_str_equal, (dlock__key_copy_fn)g_strdup, g_free, NULL);
	s->cleanups = dlock__cleanups_new(s, 0, 0);
	s->servers = g_strdup(servers);
	s->missing = missing;
	s->resolve_pause_us = RESOLVE_FIRST_US;
	s->resolve_due_us = dlock__boot_us() + RESOLVE_FIRST_US;

	/* The client's I/O and completion threads inherit this mask: library
	 * threads run with every signal blocked. */
	dlock__assert_may_block("a new ZooKeeper session");
	sigfillset(&all);
	fds = dlock__zk_fds();
	pthread_sigmask(SIG_SETMASK, &all, &old);
	s->zh = zookeeper_init2(hosts, dlock__zk_watcher, (int)b->session_timeout_ms, NULL, s, 0,
	                        discard_log);
	saved_errno = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	dlock__zk_cloexec_new_pipes(fds);
	g_array_unref(fds);
	g_free(hosts);
	if (!s->zh) {
		dlock__zk_session_unref(s);
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: cannot start a session: %s", b->label,
		                    g_strerror(saved_errno));
	}
	/* The connect string holds addresses, not names: the client's own
	 * lookups, by default one in every turn of its I/O loop (a netlink
	 * socket, a read of /dev/urandom: some twenty system calls per
	 * request), would find nothing new. */
	zoo_set_servers_resolution_delay(s->zh, -1);
	if (b->credentials)
		zoo_add_auth(s->zh, "digest", b->credentials, (int)strlen(b->credentials), NULL, NULL);

	g_ptr_array_add(b->sessions, s);           /* the list's reference */
	b->current = dlock__zk_session_ref(s);     /* current's reference */
	dlock__lazy_thread_get_locked(&b->thread, "dlock-zksession", NULL, dlock__zk_session_thread, b);
	*ret = s;
	return DLOCK_OK;
}

zk_phase dlock__zk_session_phase(zk_session *s)
{
	zk_phase phase;

	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	phase = s->phase;
	dlock__mutex_unlock(&s->mu);
	return phase;
}

/*
 * Wake the session thread if it sleeps past due_us, the first time it has
 * to look at a session that just changed (a hold or a waiter added); a
 * thread that will look by then anyway is left asleep, so an uncontended
 * acquire pays no thread switch.  Called with s->mu released: the thread
 * holds b->mu from its pass over the sessions until it sleeps, so it has
 * either seen the change or is asleep with thread_wake_us set.
 */
static void nudge_thread(zk_backend *b, int64_t due_us)
{
	dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
	if (b->thread_wake_us != 0 && due_us < b->thread_wake_us)
		g_cond_broadcast(&b->cond);
	dlock__mutex_unlock(&b->mu);
}

void dlock__zk_session_add_waiter(zk_session *s, dlock__waiter *waiter)
{
	bool first;
	int64_t due;

	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	dlock__waketable_add(s->waiters, ZK_SESSION_WAITERS, waiter);
	first = dlock__waketable_count(s->waiters, ZK_SESSION_WAITERS) == 1 && s->holds->len == 0;
	due = s->probe_due_us;
	dlock__mutex_unlock(&s->mu);
	/* Probes start now (see in_use_locked). */
	if (first)
		nudge_thread(s->b, due);
}

void dlock__zk_session_remove_waiter(zk_session *s, dlock__waiter *waiter)
{
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	dlock__waketable_remove(s->waiters, ZK_SESSION_WAITERS, waiter);
	dlock__mutex_unlock(&s->mu);
}

int dlock__zk_session_wait_connected(zk_session *s, dlock__waiter *waiter, int64_t until_us)
{
	dlock__waiter *own = waiter ? NULL : dlock__waiter_new();
	dlock__waiter *w = waiter ? waiter : own;
	int rc;

	dlock__zk_session_add_waiter(s, w);
	for (;;) {
		uint64_t seen = dlock__waiter_seq(w);
		zk_phase phase = dlock__zk_session_phase(s);

		if (phase == ZK_CONNECTED) {
			rc = DLOCK_OK;
			break;
		}
		if (phase == ZK_ENDED) {
			rc = DLOCK_ELOST;
			break;
		}
		rc = dlock__waiter_sleep(w, seen, until_us);
		if (rc != DLOCK_OK)
			break;
	}
	dlock__zk_session_remove_waiter(s, w);
	dlock__waiter_free(own);
	return rc;
}

/*
 * A caller is about to wait for s to connect: if some servers' names were
 * left out of it, look them up again soon -- half a second after the last
 * round rather than after the whole pause -- since a name may resolve by
 * now and the caller needs a server.
 */
static void refresh_soon(zk_session *s)
{
	int64_t due = 0;

	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	if (s->phase == ZK_CONNECTING && s->missing > 0) {
		int64_t last = s->resolve_due_us - s->resolve_pause_us;

		s->resolve_due_us = MIN(s->resolve_due_us, last + RESOLVE_FIRST_US);
		due = s->resolve_due_us;
	}
	dlock__mutex_unlock(&s->mu);
	if (due)
		nudge_thread(s->b, due);
}

int dlock__zk_session_get(zk_backend *b, dlock__waiter *waiter, int64_t until_us,
                          zk_session **ret)
{
	for (;;) {
		zk_session *s;
		const char *reason;
		int rc;

		dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
		if (b->stopping) {
			dlock__mutex_unlock(&b->mu);
			return dlock__error(DLOCK_ECANCELED, "%s: the client is being freed", b->label);
		}
		s = b->current;
		if (!s) {
			GPtrArray *missing = g_ptr_array_new();
			char *servers = NULL;
			int64_t opened_us;

			/* Resolve without b->mu, which every call on this backend
			 * and the session thread need; another thread may open a
			 * session meanwhile, which is then used instead. */
			dlock__mutex_unlock(&b->mu);
			rc = dlock__zk_servers_resolve(b, waiter, until_us, &servers, missing);
			if (rc != DLOCK_OK) {
				g_ptr_array_unref(missing);
				return rc;
			}
			for (guint i = 0; i < missing->len; i++)
				dlock__log(b->logger, DLOCK_LOG_WARNING, "%s: server %s left out of the session "
				           "until its name resolves", b->label, (char *)missing->pdata[i]);
			dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
			if (b->stopping) {
				dlock__mutex_unlock(&b->mu);
				g_free(servers);
				g_ptr_array_unref(missing);
				return dlock__error(DLOCK_ECANCELED, "%s: the client is being freed", b->label);
			}
			/* The server can have heard from a session opened now no
			 * earlier than this: its first contact, for the timer. */
			opened_us = dlock__boot_us();
			s = b->current;
			if (!s) {
				if ((rc = session_open(b, servers, missing->len, &s)) != DLOCK_OK) {
					dlock__mutex_unlock(&b->mu);
					g_free(servers);
					g_ptr_array_unref(missing);
					return rc;
				}
				dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
				s->contact_us = MAX(s->contact_us, opened_us);
				dlock__mutex_unlock(&s->mu);
			}
			g_free(servers);
			g_ptr_array_unref(missing);
		}
		dlock__zk_session_ref(s);
		dlock__mutex_unlock(&b->mu);

		refresh_soon(s);
		rc = dlock__zk_session_wait_connected(s, waiter, until_us);
		if (rc == DLOCK_OK) {
			*ret = s;
			return DLOCK_OK;
		}
		dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
		reason = s->end_reason;
		dlock__mutex_unlock(&s->mu);
		dlock__zk_session_unref(s);
		if (rc == DLOCK_ETIMEDOUT)
			return dlock__error(DLOCK_EUNAVAILABLE, "%s: no server answered in time", b->label);
		if (rc != DLOCK_ELOST)
			return dlock__error(rc, "%s: wait for a session was canceled", b->label);
		if (reason && strcmp(reason, "authentication refused") == 0)
			return dlock__error(DLOCK_EACCES, "%s: the servers refused the credentials", b->label);
		/* The session ended while connecting: open another. */
	}
}

bool dlock__zk_session_refused(zk_backend *b)
{
	bool refused = false;

	dlock__mutex_lock(&b->mu, DLOCK__RANK_ZK_BACKEND);
	if (b->current) {
		zk_session *s = b->current;

		/* The client library sets its state to 0 -- none of its named
		 * states -- when a connection attempt fails, until it starts
		 * the next (CONNECTING, ASSOCIATING once the TCP connection
		 * is up): a server that is only slow to answer never shows it. */
		dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
		refused = s->phase != ZK_ENDED && s->zh && zoo_state(s->zh) == 0;
		dlock__mutex_unlock(&s->mu);
	}
	dlock__mutex_unlock(&b->mu);
	return refused;
}

/* ---- watches and holds ------------------------------------------------ */

void dlock__zk_watch_add(zk_session *s, const char *path, dlock__waiter *waiter)
{
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	dlock__waketable_add(s->waiters, path, waiter);
	dlock__mutex_unlock(&s->mu);
}

void dlock__zk_watch_remove(zk_session *s, const char *path, dlock__waiter *waiter)
{
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	dlock__waketable_remove(s->waiters, path, waiter);
	dlock__mutex_unlock(&s->mu);
}

bool dlock__zk_watch_fired(zk_session *s, const char *path, dlock__waiter *waiter)
{
	bool fired;

	/* A fired watch's key was dropped (dlock__zk_watcher). */
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	fired = !dlock__waketable_has(s->waiters, path, waiter);
	dlock__mutex_unlock(&s->mu);
	return fired;
}

bool dlock__zk_session_track(zk_session *s, zk_node *node)
{
	zk_phase phase;
	int64_t due = 0;

	/* Decided under the same mutex as every state change, so a hold is
	 * either on the list the next change reports to, or told now. */
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	phase = s->phase;
	if (phase != ZK_ENDED) {
		g_ptr_array_add(s->holds, node);
		dlock__hold_set_valid_until(node->hold, dlock__zk_session_expiry_locked(s));
		if (s->holds->len == 1)
			s->probe_due_us = dlock__boot_us() + s->timeout_ms * 1000 / 3;
		due = MIN(dlock__zk_session_expiry_locked(s), s->probe_due_us);
	}
	/* Granted by an answer that came just before the connection dropped:
	 * the disconnection was reported before this hold existed.  Told
	 * under s->mu so that the RECONNECTED of the next change comes after
	 * (the hold is still being acquired, so this only marks it). */
	if (phase == ZK_CONNECTING)
		dlock__hold_report(node->hold, DLOCK_STATE_SUSPENDED);
	dlock__mutex_unlock(&s->mu);
	if (phase == ZK_ENDED)
		return false;
	nudge_thread(s->b, due);
	return true;
}

bool dlock__zk_session_untrack(zk_session *s, zk_node *node)
{
	bool alive;

	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	g_ptr_array_remove_fast(s->holds, node);
	alive = s->phase != ZK_ENDED;
	dlock__mutex_unlock(&s->mu);
	return alive;
}

/* ---- requests in flight ------------------------------------------------ */

void dlock__zk_request_sent_locked(zk_session *s)
{
	dlock__mutex_assert_held(&s->mu);
	s->outstanding++;
}

void dlock__zk_request_done(zk_session *s)
{
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	if (--s->outstanding == 0)
		g_cond_broadcast(&s->settled);
	dlock__mutex_unlock(&s->mu);
}
