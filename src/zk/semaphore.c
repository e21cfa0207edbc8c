/* SPDX-License-Identifier: MIT */
/*
 * Semaphores on ZooKeeper (docs/zookeeper.md, "Semaphores"), in the
 * layout of Curator's InterProcessSemaphoreV2 on <root>/<R>, so that
 * Curator semaphores on the same path share the N permits with dlock's:
 *
 *   <root>/<R>/locks    an internal mutex, as a lock on <R>/locks
 *   <root>/<R>/leases   one "_c_<uuid>-lease-<seq10>" node per permit taken,
 *                       ephemeral, holding its holder's record
 *   <root>/<R>          N as decimal text in its data (kazoo's max_leases)
 *
 * An acquire takes the internal mutex (zk_attempt on the locks node, as a
 * lock's acquire queues), then creates its lease, lists the leases and
 * reads N in one round trip, and agrees on N: if there are at most N
 * leases it holds a permit; otherwise it waits for the leases to change
 * (a child watch), still holding the mutex, and looks again.  Either way
 * it gives the mutex up before returning.  So only the mutex holder
 * watches the leases, and the others queue on the mutex, each watching
 * its predecessor: a release wakes one acquirer.  Like Curator, it counts
 * every child of the leases node.
 *
 * A try (wait 0) that finds another acquirer on the mutex does not give
 * up at once: that holder keeps the mutex only for its lease's create and
 * listing, unless it waits for a permit, which it does only while none is
 * free.  So the try lists the leases: fewer than N, and it waits for its
 * turn at the mutex, for at most the connect timeout (a holder stopped or
 * cut off meanwhile; then DLOCK_EBUSY); N or more, and it is busy at once.
 * Every lease is still created under the mutex, so a permit granted after
 * another ended always has the larger czxid, as with waits.
 *
 * The agreement on N (under the mutex): the number in <R>'s data, if
 * any, must be ours while any lease but ours exists or anyone else queues
 * on the mutex (DLOCK_EINVAL naming both, and our lease is deleted);
 * otherwise ours is written, by a conditional set on the version read.
 * Curator with a plain maxLeases writes no number, and dlock takes one
 * that is missing as agreement.
 *
 * The lease is the hold: its session's states are the hold's, its czxid
 * the fencing token, and the release deletes it (acquire.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "nodes.h"

#define LOCKS "/locks"
#define LEASES "/leases"

/* N as <R>'s data holds it; 0 when none or not a number. */
static uint32_t parse_permits(const char *data)
{
	uint64_t value;
	char *end;

	if (!data || !g_ascii_isdigit(*data))
		return 0;
	value = g_ascii_strtoull(data, &end, 10);
	return *end == '\0' && value <= DLOCK_PERMITS_MAX ? (uint32_t)value : 0;
}

/* Take the code of call's answer, which has come: DLOCK_OK with
 * *ret_zrc, or AGAIN when the session ended; a connection loss is waited
 * out and *ret_zrc is then ZCONNECTIONLOSS (the caller asks again). */
static int answered(zk_attempt *a, zk_session *s, zk_call *call, int *ret_zrc)
{
	*ret_zrc = call->rc;
	if (dlock__zk_rc_session_ended(call->rc))
		return AGAIN;
	if (dlock__zk_rc_connection(call->rc)) {
		*ret_zrc = ZCONNECTIONLOSS;
		return dlock__zk_attempt_reconnect(a, s);
	}
	return DLOCK_OK;
}

/*
 * Wait for call's answer (a call sent without a waiter gets ours now) and
 * take its code, as answered().  DLOCK_OK leaves the call to the caller,
 * who unreferences it; on any failure it is let go here, abandoned if no
 * answer came, so the caller must not touch it again.
 */
static int answer(zk_attempt *a, zk_session *s, zk_call *call, int *ret_zrc)
{
	int rc = DLOCK_OK;

	if (!dlock__zk_call_attach(call, a->waiter))
		rc = dlock__zk_attempt_await(a, call); /* abandons the call on failure */
	if (rc != DLOCK_OK)
		return rc;
	if ((rc = answered(a, s, call, ret_zrc)) != DLOCK_OK)
		dlock__zk_call_unref(call);
	return rc;
}

/* The children of path (ZNONODE: none), with a child watch when watch. */
static int children_of(zk_attempt *a, zk_session *s, const char *path, bool watch, char ***ret)
{
	for (;;) {
		zk_call *call = dlock__zk_call_new(s, CALL_CHILDREN, a->waiter);
		int zrc = ZOK, rc;

		if (watch)
			dlock__zk_get_children_watch(call, path);
		else
			dlock__zk_get_children(call, path);
		if ((rc = answer(a, s, call, &zrc)) != DLOCK_OK)
			return rc;
		if (zrc == ZOK) {
			*ret = call->children ? call->children : g_new0(char *, 1);
			call->children = NULL;
		} else if (zrc == ZNONODE) {
			*ret = g_new0(char *, 1);
		} else if (zrc != ZCONNECTIONLOSS) {
			rc = dlock__zk_attempt_unexpected(a, zrc, "list", path);
		}
		dlock__zk_call_unref(call);
		if (rc != DLOCK_OK || zrc != ZCONNECTIONLOSS)
			return rc;
	}
}

static guint count_of(char **names)
{
	return g_strv_length(names);
}

/* Whether name is among names. */
static bool listed(char **names, const char *name)
{
	for (size_t i = 0; names[i]; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

/*
 * Under the internal mutex: agree on permits with <R>'s data (a->dir).
 * get is a read of it already sent; it is used up.  own is our lease's
 * name, which is not someone else's use.
 */
static int agree(zk_attempt *a, zk_session *s, uint32_t permits, const char *locks, const char *leases,
                 zk_call *get, const char *own)
{
	char text[16];

	g_snprintf(text, sizeof(text), "%" PRIu32, permits);
	for (;;) {
		char **held = NULL, **queued = NULL;
		uint32_t stored = 0;
		int32_t version = 0;
		int zrc = ZOK, rc;
		bool in_use;

		if (!get) {
			get = dlock__zk_call_new(s, CALL_GET, a->waiter);
			dlock__zk_get(get, a->dir, false);
		}
		rc = answer(a, s, get, &zrc);
		if (rc != DLOCK_OK)
			return rc; /* get is let go */
		if (zrc == ZOK) {
			stored = parse_permits(get->data);
			version = get->stat.version;
		} else if (zrc != ZCONNECTIONLOSS) {
			rc = dlock__zk_attempt_unexpected(a, zrc, "read", a->dir);
		}
		dlock__zk_call_unref(get);
		get = NULL;
		if (rc != DLOCK_OK)
			return rc;
		if (zrc == ZCONNECTIONLOSS)
			continue;
		if (stored == permits)
			return DLOCK_OK;
		if ((rc = children_of(a, s, leases, false, &held)) == DLOCK_OK)
			rc = children_of(a, s, locks, false, &queued);
		/* Anyone but us on the mutex waits with some N. */
		in_use = rc == DLOCK_OK &&
		         (count_of(held) > (listed(held, own) ? 1u : 0u) || count_of(queued) > 1);
		g_strfreev(held);
		g_strfreev(queued);
		if (rc != DLOCK_OK)
			return rc;
		if (stored && in_use)
			return dlock__error_permits(a->resource, permits, stored);
		{
			zk_call *set = dlock__zk_call_new(s, CALL_EXISTS, a->waiter);

			dlock__zk_set(set, a->dir, text, version);
			if ((rc = answer(a, s, set, &zrc)) != DLOCK_OK)
				return rc;
			dlock__zk_call_unref(set);
		}
		if (zrc == ZOK)
			return DLOCK_OK;
		if (zrc != ZBADVERSION && zrc != ZCONNECTIONLOSS)
			return dlock__zk_attempt_unexpected(a, zrc, "record the permits of", a->dir);
		/* Changed meanwhile, or the answer lost: read again. */
	}
}

/*
 * Holding the mutex: make our lease (l), agree on N, and wait until the
 * leases are at most N.  The read of N goes out just ahead of the
 * lease's create and listing, all three answered in one round trip; a
 * lease made and then refused for its N is deleted by the caller before
 * anyone else holds the mutex to count it.
 */
static int take_lease(zk_attempt *a, zk_attempt *m, zk_attempt *l, zk_session *s, uint32_t permits,
                      bool *agreed)
{
	char **children = NULL;
	int rc = DLOCK_OK;

	if (a->watching) {
		/* Called again after a turn: the wait for a change goes on. */
		rc = dlock__zk_attempt_watch_wait(a, s, a->watching);
		if (rc == YIELD)
			return YIELD;
		dlock__zk_watch_remove(s, a->watching, a->waiter);
		g_clear_pointer(&a->watching, g_free);
		if (rc != DLOCK_OK)
			return rc;
	} else if (!*agreed) {
		zk_call *get = dlock__zk_call_new(s, CALL_GET, NULL);

		dlock__zk_get(get, a->dir, false);
		if (!l->path && (rc = dlock__zk_attempt_create(l, s, &children)) != DLOCK_OK) {
			dlock__zk_call_abandon(get); /* lets our reference go */
			return rc;
		}
		if ((rc = agree(a, s, permits, m->dir, l->dir, get, l->name)) != DLOCK_OK) {
			g_strfreev(children);
			return rc;
		}
		*agreed = true;
	}
	for (;;) {
		bool watching = false;

		if (!children) {
			/* The watch is set by the listing, so no change after it
			 * is missed. */
			dlock__zk_watch_add(s, l->dir, a->waiter);
			watching = true;
			rc = children_of(a, s, l->dir, true, &children);
		}
		if (rc == DLOCK_OK && !listed(children, l->name)) {
			/* Deleted by someone else while we waited: lease again. */
			dlock__log(a->b->logger, DLOCK_LOG_WARNING, "%s: lease node %s vanished; taking "
			           "another", a->b->label, l->path);
			g_strfreev(children);
			children = NULL;
			dlock__zk_attempt_forget(l);
			rc = dlock__zk_attempt_create(l, s, &children);
			if (watching)
				dlock__zk_watch_remove(s, l->dir, a->waiter);
			if (rc != DLOCK_OK)
				return rc;
			continue;
		}
		/* A permit, by an answer that may have come too late to hold
		 * on (dlock__zk_session_fresh()): then list again. */
		if (rc == DLOCK_OK && count_of(children) <= permits && dlock__zk_session_fresh(s)) {
			g_strfreev(children);
			if (watching)
				dlock__zk_watch_remove(s, l->dir, a->waiter);
			return DLOCK_OK;
		}
		if (rc == DLOCK_OK && count_of(children) <= permits) {
			g_strfreev(children);
			children = NULL;
			if (watching)
				dlock__zk_watch_remove(s, l->dir, a->waiter);
			continue;
		}
		g_strfreev(children);
		children = NULL;
		if (rc == DLOCK_OK && a->wait_ms == 0) {
			rc = dlock__error_busy(a->resource);
		} else if (rc == DLOCK_OK && watching) {
			rc = dlock__zk_attempt_watch_wait(a, s, l->dir);
			if (rc == YIELD) {
				/* The watch stays while the turn lasts. */
				a->watching = g_strdup(l->dir);
				return YIELD;
			}
		}
		if (watching)
			dlock__zk_watch_remove(s, l->dir, a->waiter);
		if (rc != DLOCK_OK)
			return rc;
	}
}

/* A try's turn at the internal mutex (zk_attempt.turn). */
typedef struct try_turn {
	const zk_attempt *leases;
	uint32_t permits;
	bool waited;  /* the try chose to wait for its turn */
} try_turn;

/*
 * A try queued behind another acquirer on the mutex: wait for its turn
 * while the leases show a free permit (that acquirer is only passing
 * through), else busy.
 */
static int try_turn_check(zk_attempt *m, zk_session *s)
{
	try_turn *t = m->turn_data;
	char **leases = NULL;
	bool room;
	int rc;

	if ((rc = children_of(m, s, t->leases->dir, false, &leases)) != DLOCK_OK)
		return rc;
	room = count_of(leases) < t->permits;
	g_strfreev(leases);
	if (!room)
		return dlock__error_busy(m->resource);
	t->waited = true;
	return DLOCK_OK;
}

/* A queue in dir/part (the mutex, or the leases), for the acquire a. */
static void sub_attempt(const zk_attempt *a, const char *part, bool lease, zk_attempt *ret)
{
	*ret = *a;
	ret->dir = g_strconcat(a->dir, part, NULL);
	ret->uuid = dlock__zk_uuid_new();
	ret->path = NULL;
	ret->name = NULL;
	ret->unsure = false;
	ret->lease = lease;
	ret->watching = NULL;
}

static void sub_attempt_clear(zk_attempt *sub)
{
	g_free(sub->watching);
	g_free(sub->dir);
	g_free(sub->uuid);
	g_free(sub->path);
}

/*
 * After one attempt on s: the mutex node goes in any case, and the lease
 * stays only when granted.  A try that found no permit (or a refused N)
 * waits, bounded, for its deletes, so that it leaves nothing behind when
 * it returns; a wait that ended by its deadline or a cancel does not wait
 * at all, and neither does a grant for the mutex's: the deletes are sent
 * at once and retried across reconnects, and the session applies them in
 * the order sent, the lease's first, so the next mutex holder never
 * counts it.
 */
static void finish_attempt(zk_session *s, zk_attempt *m, zk_attempt *l, int rc)
{
	/* The lease's deadline: the mutex's may be a try's shorter one. */
	int64_t until = dlock__zk_cleanup_until(l, rc);

	if (rc != DLOCK_OK && rc != AGAIN) {
		if (l->path)
			dlock__zk_delete_node(s, l->path, until);
		else if (l->unsure)
			dlock__zk_attempt_sweep(l, s);
	}
	if (m->path)
		dlock__zk_delete_node(s, m->path, until);
	else if (m->unsure)
		dlock__zk_attempt_sweep(m, s);
	dlock__zk_attempt_forget(m);
}

/* A permit's acquire between its steps. */
struct zk_semaphore_acquire {
	zk_attempt m;          /* the internal mutex's queue */
	zk_attempt l;          /* the lease's */
	try_turn turn;
	uint32_t permits;
	bool first;            /* no pass yet */
	zk_session *s;         /* the pass under way, or NULL */
	bool mutex_held;       /* this pass holds the internal mutex */
	bool agreed;           /* this pass made its lease and agreed on N */
};

static zk_semaphore_acquire *semaphore_acquire_new(zk_backend *b, zk_attempt *a)
{
	zk_semaphore_acquire *sem = g_new0(zk_semaphore_acquire, 1);

	sem->permits = dlock__hold_permits(a->hold);
	sem->first = true;
	sub_attempt(a, LOCKS, false, &sem->m);
	sub_attempt(a, LEASES, true, &sem->l);
	sem->turn.leases = &sem->l;
	sem->turn.permits = sem->permits;
	if (a->wait_ms == 0) {
		/* A try waits for the mutex while a permit is free, bounded. */
		sem->m.turn = try_turn_check;
		sem->m.turn_data = &sem->turn;
		sem->m.deadline_us = MIN(a->deadline_us, dlock__mono_us() + b->connect_timeout_ms * 1000);
	}
	return sem;
}

void dlock__zk_semaphore_step_free(zk_semaphore_acquire *sem)
{
	if (!sem)
		return;
	sub_attempt_clear(&sem->m);
	sub_attempt_clear(&sem->l);
	g_free(sem);
}

int dlock__zk_semaphore_step(zk_backend *b, zk_attempt *a, zk_semaphore_acquire **semp)
{
	zk_semaphore_acquire *sem = *semp ? *semp : (*semp = semaphore_acquire_new(b, a));
	int rc;

	for (;;) {
		if (!sem->s) {
			if ((rc = dlock__zk_attempt_session(a, sem->first, &sem->s)) != DLOCK_OK)
				return rc;
			sem->first = false;
			dlock__zk_session_add_waiter(sem->s, a->waiter);
		}
		rc = DLOCK_OK;
		if (!sem->mutex_held) {
			rc = dlock__zk_attempt_run(&sem->m, sem->s);
			if (rc == YIELD) {
				a->yield_seen = sem->m.yield_seen;
				a->yield_until = sem->m.yield_until;
				return YIELD;
			}
			if (rc == DLOCK_ETIMEDOUT && sem->turn.waited)
				rc = dlock__error(DLOCK_EBUSY, "lock '%s' is held by another owner: another "
				                  "acquirer kept the semaphore's internal mutex (%s) for over "
				                  "%" PRId64 " ms", a->resource, sem->m.dir, b->connect_timeout_ms);
			sem->mutex_held = rc == DLOCK_OK;
		}
		if (sem->mutex_held) {
			rc = take_lease(a, &sem->m, &sem->l, sem->s, sem->permits, &sem->agreed);
			if (rc == YIELD)
				return YIELD;
		}
		/* The pass ends. */
		dlock__zk_session_remove_waiter(sem->s, a->waiter);
		if (rc == DLOCK_OK && !dlock__zk_grant(a->hold, sem->s, sem->l.path, sem->l.czxid))
			rc = AGAIN;
		finish_attempt(sem->s, &sem->m, &sem->l, rc);
		dlock__zk_session_unref(sem->s);
		sem->s = NULL;
		sem->mutex_held = false;
		sem->agreed = false;
		if (rc != AGAIN)
			return rc;
		dlock__log(b->logger, DLOCK_LOG_INFO, "%s: session ended while acquiring a permit of '%s'; "
		           "retrying", b->label, a->resource);
		dlock__zk_attempt_forget(&sem->l);
	}
}

int dlock__zk_semaphore_guard(zk_backend *b, zk_attempt *a, zk_session *s)
{
	char *parent = g_strndup(a->dir, strlen(a->dir) - strlen(LEASES));
	uint32_t stored = 0;
	int zrc = ZCONNECTIONLOSS, rc = DLOCK_OK;

	while (rc == DLOCK_OK && zrc == ZCONNECTIONLOSS) {
		zk_call *get = dlock__zk_call_new(s, CALL_GET, a->waiter);

		dlock__zk_get(get, parent, false);
		if ((rc = answer(a, s, get, &zrc)) != DLOCK_OK)
			break;
		if (zrc == ZOK)
			stored = parse_permits(get->data);
		dlock__zk_call_unref(get);
	}
	if (rc == DLOCK_OK && stored)
		rc = dlock__error(DLOCK_EINVAL, "lock '%s' would sit among the leases of a semaphore of %"
		                  PRIu32 " permits on '%.*s' (%s keeps them): use another name",
		                  a->resource, stored, (int)(strlen(a->resource) - strlen(LEASES)),
		                  a->resource, a->dir);
	g_free(parent);
	return rc;
}

/* Read the data of path into *ret (NULL when gone). */
static int read_data(zk_backend *b, zk_session *s, dlock__waiter *w, const char *path,
                     int64_t deadline_us, char **ret, int64_t *ret_czxid)
{
	zk_call *call = dlock__zk_call_new(s, CALL_GET, w);
	int rc = DLOCK_OK;

	*ret = NULL;
	dlock__zk_get(call, path, false);
	if (dlock__zk_call_wait(call, deadline_us) != DLOCK_OK) {
		dlock__zk_call_abandon(call);
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: no answer to the query of %s", b->label, path);
	}
	if (call->rc == ZOK) {
		*ret = g_strdup(call->data);
		if (ret_czxid)
			*ret_czxid = call->stat.czxid;
	} else if (call->rc != ZNONODE) {
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: query of %s: %s", b->label, path,
		                  dlock__zk_strerror(call->rc));
	}
	dlock__zk_call_unref(call);
	return rc;
}

int dlock__zk_semaphore_query(zk_backend *b, zk_session *s, dlock__waiter *w, const char *dir,
                              int64_t deadline_us, dlock__server_info *ret)
{
	char *leases = g_strconcat(dir, LEASES, NULL);
	zk_call *call = dlock__zk_call_new(s, CALL_CHILDREN, w);
	char *data = NULL;
	char **names = NULL;
	int rc;

	dlock__zk_get_children(call, leases);
	if (dlock__zk_call_wait(call, deadline_us) != DLOCK_OK) {
		dlock__zk_call_abandon(call);
		g_free(leases);
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: no answer to the query of %s", b->label, leases);
	}
	if (call->rc == ZOK && call->children) {
		names = call->children;
		call->children = NULL;
	}
	dlock__zk_call_unref(call);
	rc = read_data(b, s, w, dir, deadline_us, &data, NULL);
	if (rc == DLOCK_OK && names && names[0]) {
		ret->permits = parse_permits(data);
		ret->readers = g_ptr_array_new_with_free_func(g_free);
		for (size_t i = 0; rc == DLOCK_OK && names[i]; i++) {
			char *path = g_strconcat(leases, "/", names[i], NULL);
			char *record = NULL;
			int64_t czxid = 0;

			rc = read_data(b, s, w, path, deadline_us, &record, &czxid);
			if (record) {
				g_ptr_array_add(ret->readers, record);
				ret->fencing_token = MAX(ret->fencing_token, (uint64_t)czxid);
			}
			g_free(path);
		}
		ret->locked = ret->shared = ret->readers->len > 0;
	}
	g_strfreev(names);
	g_free(data);
	g_free(leases);
	return rc;
}
