/* SPDX-License-Identifier: MIT */
/*
 * What the workers' acquires went through, checked per resource:
 *
 *  - liveness gap: workers kept trying a free resource (no hold believed;
 *    for a semaphore, fewer than N) for longer than the lease, the faults
 *    at the time and a margin allow;
 *  - a lost hold kept up: once a hold was reported LOST, the lease (or
 *    session) and the margin later, another worker tried for a second or
 *    more without interruption and nobody got the resource, while that
 *    LOST hold's owner had not released it yet, no one else held it and
 *    no fault but the lost holder's own was in force: the library kept
 *    up (renewed, or kept the session of) a hold it had declared lost;
 *  - a try refused beside a free permit: a semaphore's wait-0 acquire
 *    returned DLOCK_EBUSY although, all along, fewer than N other owners
 *    even might have held a permit (from the start of their acquire to the
 *    return of their release; a wait that gave up until a lease after),
 *    and no fault was in force;
 *  - a result the wait does not allow: wait 0 gives DLOCK_OK or
 *    DLOCK_EBUSY, a deadline DLOCK_OK or DLOCK_ETIMEDOUT (a downgrade also
 *    DLOCK_ELOST; a call the worker canceled also DLOCK_ECANCELED), returned within the deadline and the margin unless the
 *    process was paused (a try is bounded by the backend's own timeouts,
 *    which a fault may use up); DLOCK_EUNAVAILABLE or DLOCK_EBACKEND only while a
 *    fault was in force (on Redlock, a fault of one master is none: a
 *    quorum is up); anything else never;
 *  - Redlock: a hold reported LOST although a quorum of masters was up
 *    all along -- no fault of its own process, and fewer than two master
 *    faults during the hold.
 */
#include "torture-check.h"

#include <inttypes.h>
#include <stdio.h>

#include <dlock.h>

typedef struct window {
	int64_t start, end;
} window;

/* One acquire: from its try to its result. */
typedef struct attempt {
	int slot, life, owner, res;
	char mode;
	int64_t start, end, wait_ms;
	bool granted;
	bool canceled; /* the worker canceled it (EV_CANCEL) */
	int code; /* the result when not granted */
} attempt;

static GArray *attempts_of(const check *c)
{
	GArray *out = g_array_new(FALSE, FALSE, sizeof(attempt));
	GHashTable *pending = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);

	for (guint i = 0; i < c->events->len; i++) {
		torture_event *e = &g_array_index(c->events, torture_event, i);
		char *key;
		attempt *a;

		if (e->kind != EV_TRY && e->kind != EV_FAILED && e->kind != EV_ACQUIRED && e->kind != EV_CANCEL)
			continue;
		key = g_strdup_printf("%d.%d.%d.%d.%c", e->slot, e->life, e->owner, e->res, e->mode);
		if (e->kind == EV_TRY) {
			a = g_new(attempt, 1);
			*a = (attempt){ e->slot, e->life, e->owner, e->res, e->mode, e->t, G_MAXINT64, e->aux, false, false, 0 };
			g_hash_table_replace(pending, key, a);
			continue;
		}
		if (e->kind == EV_CANCEL) {
			if ((a = g_hash_table_lookup(pending, key)))
				a->canceled = true;
			g_free(key);
			continue;
		}
		if ((a = g_hash_table_lookup(pending, key))) {
			a->end = e->t;
			a->granted = e->kind == EV_ACQUIRED;
			a->code = a->granted ? 0 : e->code;
			g_array_append_val(out, *a);
			g_hash_table_remove(pending, key);
		}
		g_free(key);
	}
	g_hash_table_unref(pending);
	return out;
}

static int by_start(gconstpointer a, gconstpointer b)
{
	const window *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Merge windows closer than gap; sorted in place. */
static void merge(GArray *w, int64_t gap)
{
	guint out = 0;

	g_array_sort(w, by_start);
	for (guint i = 0; i < w->len; i++) {
		window *x = &g_array_index(w, window, i);

		if (out > 0 && x->start <= g_array_index(w, window, out - 1).end + gap) {
			window *last = &g_array_index(w, window, out - 1);
			last->end = MAX(last->end, x->end);
		} else {
			g_array_index(w, window, out++) = *x;
		}
	}
	g_array_set_size(w, out);
}

/*
 * How long a free resource may be waited for: the lease and the margin,
 * plus each fault then, whole, and a lease after it.  A Sentinel
 * failover's window runs from the master's kill (or SENTINEL FAILOVER)
 * until the old master is back as a replica and the setup is ready: with
 * min-replicas=1 and one replica, no grant counts in between (no replica
 * acknowledges it, or the old master, a master of its own after a
 * switchover, has none), so all of it is allowed.  A Cluster fault's
 * window likewise runs until the cluster is whole again: a killed
 * master's, through its replica's takeover (about 2.5 s) until the old
 * one has rejoined as that replica's replica (min-replicas=1: no grant on
 * its slots counts before); a migration's, from the slot's MIGRATING to
 * every node naming the new owner (a script whose keys the two masters
 * split gets -TRYAGAIN until the end, so waiters and renewals on that
 * slot can make no progress meanwhile); a CLUSTER FAILOVER's, from the
 * handover until the old master is fed as a replica.
 */
static int64_t allowance(const check *c, int64_t from, int64_t to)
{
	const torture_limits *lim = c->lim;
	int64_t allowed = lim->lease_us + lim->slack_us;

	for (guint i = 0; i < c->faults->len; i++) {
		torture_fault *x = &g_array_index(c->faults, torture_fault, i);

		if (x->start <= to && x->end + lim->lease_us + lim->slack_us >= from)
			allowed += (x->end - x->start) + lim->lease_us;
	}
	return allowed;
}

typedef struct count_edge {
	int64_t t;
	int delta;
} count_edge;

static int by_count_edge(gconstpointer a, gconstpointer b)
{
	const count_edge *x = a, *y = b;

	return x->t != y->t ? (x->t < y->t ? -1 : 1) : x->delta - y->delta;
}

/* When res was taken: any hold believed; for a semaphore, N of them. */
static GArray *taken_windows(const check *c, int res)
{
	GArray *w = g_array_new(FALSE, FALSE, sizeof(window)), *edges = g_array_new(FALSE, FALSE, sizeof(count_edge));
	int need = torture_recipe_of(c, res) == RECIPE_SEMAPHORE ? (int)c->lim->permits : 1, n = 0;
	int64_t from = 0;

	for (guint i = 0; i < c->holds->len; i++) {
		hold *h = g_ptr_array_index(c->holds, i);

		if (h->res != res || torture_believed_end(h) <= h->acq)
			continue;
		g_array_append_val(edges, ((count_edge){ h->acq, +1 }));
		g_array_append_val(edges, ((count_edge){ torture_believed_end(h), -1 }));
	}
	g_array_sort(edges, by_count_edge);
	for (guint i = 0; i < edges->len; i++) {
		count_edge *e = &g_array_index(edges, count_edge, i);

		if (e->delta > 0 && ++n == need)
			from = e->t;
		else if (e->delta < 0 && n-- == need)
			g_array_append_val(w, ((window){ from, e->t }));
	}
	g_array_unref(edges);
	merge(w, 0);
	return w;
}

static void gap_finding(check *c, int res, int64_t from, int64_t stop)
{
	torture_findings *f = c->f;
	int64_t wait = stop - from, allowed = allowance(c, from, stop);

	if (wait > f->longest_wait_us) {
		f->longest_wait_us = wait;
		f->longest_wait_res = res;
		f->longest_wait_from = from - c->lim->run_start;
		f->longest_wait_allowed = allowed;
	}
	if (wait <= allowed)
		return;
	f->liveness_gaps++;
	if (torture_shown(f->liveness_gaps))
		printf("torture: LIVENESS GAP on r%d (%s): workers tried from +%.3fs to +%.3fs (%.3fs, allowed %.3fs) and "
		       "nobody got it\n",
		       res, torture_recipe_name(torture_recipe_of(c, res)), torture_rel(c, from), torture_rel(c, stop),
		       wait / 1e6, allowed / 1e6);
}

static void liveness_of(check *c, GArray *attempts, int res)
{
	GArray *held = taken_windows(c, res), *trying = g_array_new(FALSE, FALSE, sizeof(window));

	for (guint i = 0; i < attempts->len; i++) {
		attempt *a = &g_array_index(attempts, attempt, i);

		if (a->res == res)
			g_array_append_val(trying, ((window){ a->start, a->end }));
	}
	/* A worker's next try on a resource follows its last one within its
	 * think time and its other resource's round. */
	merge(trying, 200000);
	for (guint i = 0; i < trying->len; i++) {
		window t = g_array_index(trying, window, i);
		int64_t cursor = MAX(t.start, c->lim->run_start);

		t.end = MIN(t.end, c->lim->run_end);
		/* Walk the taken windows: the parts of t outside them. */
		for (guint j = 0; j <= held->len && cursor < t.end; j++) {
			int64_t free_until = j < held->len ? g_array_index(held, window, j).start : G_MAXINT64;
			int64_t stop = MIN(free_until, t.end);

			if (j < held->len && g_array_index(held, window, j).end <= cursor)
				continue;
			if (stop > cursor)
				gap_finding(c, res, cursor, stop);
			if (j < held->len)
				cursor = MAX(cursor, g_array_index(held, window, j).end);
		}
	}
	g_array_unref(held);
	g_array_unref(trying);
}

void torture_check_liveness(check *c)
{
	GArray *attempts = attempts_of(c);

	for (int res = 0; res < c->lim->nres; res++)
		liveness_of(c, attempts, res);
	g_array_unref(attempts);
}

/* Whether a hold of res other than skip was believed in [from, to). */
static bool other_hold_in(const check *c, int res, const hold *skip, int64_t from, int64_t to)
{
	for (guint i = 0; i < c->holds->len; i++) {
		hold *h = g_ptr_array_index(c->holds, i);

		if (h != skip && h->res == res && h->acq < to && torture_believed_end(h) > from)
			return true;
	}
	return false;
}

/* A second without interruption: what a free resource never makes a
 * healthy waiter wait. */
#define KEPT_OUT_US (1000 * 1000)

static void lost_upkeep_of(check *c, GArray *attempts, const hold *h)
{
	int64_t from = h->lost_at + c->lim->lease_us + c->lim->slack_us, to = h->end;
	torture_findings *f = c->f;

	if (to - from < KEPT_OUT_US)
		return;
	for (guint i = 0; i < attempts->len; i++) {
		attempt *a = &g_array_index(attempts, attempt, i);
		int64_t s = MAX(from, a->start), e = MIN(to, a->end);

		if (a->res != h->res || (a->slot == h->slot && a->life == h->life && a->owner == h->owner) ||
		    e - s < KEPT_OUT_US ||
		    other_hold_in(c, h->res, h, s, e) || torture_fault_in_force(c, s, e, SCOPE_OTHERS, h->slot, h->life))
			continue;
		f->upkeep_after_lost++;
		if (torture_shown(f->upkeep_after_lost))
			printf("torture: LOST HOLD KEPT UP on r%d (%s): worker %d.%d's %s hold token %" PRIu64
			       " was reported LOST at +%.3fs and released at +%.3fs; worker %d.%d tried from +%.3fs to +%.3fs "
			       "and nobody got it, with no other holder and no fault in force\n",
			       h->res, torture_recipe_name(torture_recipe_of(c, h->res)), h->slot, h->life,
			       torture_mode_name(h->mode), h->token, torture_rel(c, h->lost_at), torture_rel(c, h->end),
			       a->slot, a->life, torture_rel(c, s), torture_rel(c, e));
		return;
	}
}

/* Redlock: masters with a fault during [from, to] (a killed one lost its
 * keys: it counts from its kill on). */
static int master_faults(const check *c, int64_t from, int64_t to)
{
	int n = 0;

	for (guint i = 0; i < c->faults->len; i++) {
		torture_fault *f = &g_array_index(c->faults, torture_fault, i);
		int64_t end = f->kind == FAULT_MASTER_KILL ? G_MAXINT64 : f->end + c->lim->lease_us + c->lim->slack_us;

		if (torture_fault_is_master(f->kind) && f->start <= to && end >= from)
			n++;
	}
	return n;
}

/* Whether a fault of h's own process overlapped [from, to] (plus slack). */
static bool own_fault(const check *c, const hold *h, int64_t from, int64_t to)
{
	for (guint i = 0; i < c->faults->len; i++) {
		torture_fault *f = &g_array_index(c->faults, torture_fault, i);

		if (f->slot == h->slot && f->life == h->life && f->start <= to && f->end + c->lim->slack_us >= from)
			return true;
	}
	return false;
}

static void lost_quorum_of(check *c, const hold *h)
{
	torture_findings *f = c->f;

	if (own_fault(c, h, h->try_at, h->lost_at) || master_faults(c, h->try_at - c->lim->lease_us, h->lost_at) >= 2)
		return;
	f->lost_quorum_up++;
	if (torture_shown(f->lost_quorum_up))
		printf("torture: LOST WITH A QUORUM UP on r%d (%s): worker %d.%d's %s hold token %" PRIu64
		       " (+%.3f) was reported LOST at +%.3fs with at most one master at fault and its process untouched\n",
		       h->res, torture_recipe_name(torture_recipe_of(c, h->res)), h->slot, h->life,
		       torture_mode_name(h->mode), h->token, torture_rel(c, h->acq), torture_rel(c, h->lost_at));
}

void torture_check_lost_upkeep(check *c)
{
	GArray *attempts = attempts_of(c);

	for (guint i = 0; i < c->holds->len; i++) {
		hold *h = g_ptr_array_index(c->holds, i);

		if (h->lost_at == G_MAXINT64 || !h->told_lost)
			continue;
		lost_upkeep_of(c, attempts, h);
		if (c->lim->quorum)
			lost_quorum_of(c, h);
	}
	g_array_unref(attempts);
}

/* Other owners that might hold a permit of res at t: their acquire had
 * started and their release had not returned; or a wait that gave up
 * (its own owner's too) may still have a permit for the library to clean
 * up in the background, until the lease and the margin have passed. */
static int might_hold(const check *c, GArray *attempts, const attempt *me, int64_t t)
{
	GHashTable *owners = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	int n;

	for (guint i = 0; i < c->holds->len; i++) {
		hold *h = g_ptr_array_index(c->holds, i);

		if (h->res == me->res && h->try_at <= t && t <= h->release_end &&
		    !(h->slot == me->slot && h->life == me->life && h->owner == me->owner))
			g_hash_table_add(owners, g_strdup_printf("%d.%d.%d", h->slot, h->life, h->owner));
	}
	for (guint i = 0; i < attempts->len; i++) {
		attempt *a = &g_array_index(attempts, attempt, i);

		if (a->res == me->res && !a->granted && (a->code == DLOCK_ETIMEDOUT || a->code == DLOCK_ECANCELED) &&
		    a->start <= t && t <= a->end + c->lim->lease_us + c->lim->slack_us)
			g_hash_table_add(owners, g_strdup_printf("%d.%d.%d", a->slot, a->life, a->owner));
	}
	n = (int)g_hash_table_size(owners);
	g_hash_table_unref(owners);
	return n;
}

static void busy_beside_free_permit(check *c, GArray *attempts, const attempt *a)
{
	torture_findings *f = c->f;
	int most = might_hold(c, attempts, a, a->start);

	if (torture_fault_in_force(c, a->start, a->end, SCOPE_ALL, -1, -1))
		return;
	for (guint i = 0; i < c->holds->len && most < (int)c->lim->permits; i++) {
		hold *h = g_ptr_array_index(c->holds, i);

		if (h->res == a->res && h->try_at > a->start && h->try_at <= a->end)
			most = MAX(most, might_hold(c, attempts, a, h->try_at));
	}
	if (most >= (int)c->lim->permits)
		return;
	f->busy_free_permit++;
	if (torture_shown(f->busy_free_permit))
		printf("torture: TRY REFUSED BESIDE A FREE PERMIT on r%d (semaphore of %u) at +%.3fs: worker %d.%d's try "
		       "returned DLOCK_EBUSY while at most %d other owners might have held a permit\n",
		       a->res, c->lim->permits, torture_rel(c, a->start), a->slot, a->life, most);
}

/* Why a result is not one the wait allows, or NULL. */
static const char *not_allowed(const check *c, const attempt *a)
{
	switch (a->code) {
	case DLOCK_OK:
		return NULL;
	case DLOCK_EBUSY:
		return a->wait_ms == 0 ? NULL : "DLOCK_EBUSY for a wait that was not 0";
	case DLOCK_ETIMEDOUT:
		return a->wait_ms != 0 ? NULL : "DLOCK_ETIMEDOUT for a try (wait 0)";
	case DLOCK_ELOST:
		return a->mode == MODE_READ ? NULL : "DLOCK_ELOST from a fresh acquire";
	case DLOCK_ECANCELED:
		return a->canceled ? NULL : "DLOCK_ECANCELED for a call nobody canceled";
	case DLOCK_EUNAVAILABLE:
	case DLOCK_EBACKEND:
		if (torture_fault_in_force(c, a->start - c->lim->slack_us, a->end, SCOPE_OWN, a->slot, a->life))
			return NULL;
		return c->lim->quorum ? "unavailable while a quorum of masters was up" :
		                        "unavailable with no fault in force";
	default:
		return "a code no acquire of a healthy owner returns";
	}
}

static void result_finding(check *c, const attempt *a, const char *why)
{
	torture_findings *f = c->f;

	f->bad_results++;
	if (torture_shown(f->bad_results))
		printf("torture: RESULT NOT ALLOWED on r%d (%s) at +%.3fs: worker %d.%d %s acquire with wait %" PRId64
		       " ms returned %s after %.3fs: %s\n",
		       a->res, torture_recipe_name(torture_recipe_of(c, a->res)), torture_rel(c, a->end), a->slot, a->life,
		       torture_mode_name(a->mode), a->wait_ms, a->granted ? "DLOCK_OK" : dlock_code_name(a->code),
		       (a->end - a->start) / 1e6, why);
}

/* Whether the process of a was paused while a ran (its clock ran on). */
static bool paused_during(const check *c, const attempt *a)
{
	for (guint i = 0; i < c->faults->len; i++) {
		torture_fault *f = &g_array_index(c->faults, torture_fault, i);

		if (f->kind == FAULT_PAUSE && f->slot == a->slot && f->life == a->life && f->start <= a->end &&
		    f->end >= a->start)
			return true;
	}
	return false;
}

void torture_check_tries(check *c)
{
	GArray *attempts = attempts_of(c);

	for (guint i = 0; i < attempts->len; i++) {
		attempt *a = &g_array_index(attempts, attempt, i);
		const char *why = not_allowed(c, a);
		char late[96];

		/* A try is bounded by the backend's own timeouts, which a fault
		 * can use up: only a deadline is held to. */
		if (!why && a->wait_ms > 0 && a->end - a->start > (a->wait_ms * 1000 + c->lim->slack_us) &&
		    !paused_during(c, a)) {
			g_snprintf(late, sizeof(late), "%.3fs past its deadline",
			           (a->end - a->start - a->wait_ms * 1000) / 1e6);
			why = late;
		}
		if (why)
			result_finding(c, a, why);
		if (!a->granted && a->code == DLOCK_EBUSY && a->wait_ms == 0 && a->mode == MODE_PERMIT)
			busy_beside_free_permit(c, attempts, a);
	}
	g_array_unref(attempts);
}
