/*
 * The torture checker: rebuilds every hold from the workers' events and
 * looks for what must never happen.
 *
 * A hold is believed from the return of its acquire until its release
 * starts, its first LOST, or its process's death, minus the stretches
 * between SUSPENDED and RECONNECTED.  Findings:
 *  - overlap: two holds of one resource believed at the same instant,
 *    unless one of the two processes was paused or partitioned by the
 *    nemesis then (the fault's window, plus a margin for the library to
 *    notice), or the Redis server had been restarted empty (no
 *    persistence: the key is gone; plus the lease).  With --strict a
 *    partition excuses nothing: the library must declare LOST by its own
 *    clock before the server's lease or session can end;
 *  - order violation: an accepted write with a lower token than an
 *    earlier accepted write on that resource (the storage's fencing check
 *    should make this impossible);
 *  - stale accepted write: a write the fencing check let through although
 *    a hold with a larger token had already been granted, from a process
 *    the nemesis was not pausing or partitioning;
 *  - silent loss: a hold whose process survived to release it, superseded
 *    by another owner's grant, and never told LOST (no state callback, no
 *    DLOCK_ELOST from release) nor SUSPENDED at the time of its release,
 *    unless the other owner's grant followed a Redis restart;
 *  - grant without token: an acquire returned DLOCK_OK and the hold has
 *    fencing token 0 (dead on arrival);
 *  - liveness gap: workers kept trying a free resource for longer than
 *    the lease, the faults at the time and a margin allow.
 */
#include "torture.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <dlock.h>

typedef struct hold {
	int slot, life, res;
	uint64_t token;
	int64_t acq;
	int64_t end;      /* release started, process died, or run end */
	int64_t lost_at;  /* first LOST, or G_MAXINT64 */
	bool released;    /* ended by a release call (its process survived) */
	bool told_lost;
	bool suspended_at_release; /* released while SUSPENDED: told "uncertain" */
	GArray *suspended; /* int64_t pairs: [SUSPENDED, RECONNECTED or end) */
} hold;

typedef struct window {
	int64_t start, end;
} window;

const char *torture_fault_name(torture_fault_kind kind)
{
	static const char *const names[FAULT_KINDS] = {
		[FAULT_KILL] = "kill",
		[FAULT_PAUSE] = "pause",
		[FAULT_STALL] = "stall",
		[FAULT_RESET] = "reset",
		[FAULT_REFUSE] = "refuse",
		[FAULT_SERVER_RESTART] = "server-restart",
		[FAULT_SERVER_FREEZE] = "server-freeze",
		[FAULT_LEADER_KILL] = "leader-kill",
		[FAULT_DROP] = "drop-reply",
	};
	return (unsigned)kind < FAULT_KINDS ? names[kind] : "?";
}

int torture_fault_from_name(const char *name)
{
	for (int k = 0; k < FAULT_KINDS; k++)
		if (g_strcmp0(name, torture_fault_name(k)) == 0)
			return k;
	return -1;
}

/* Print the first findings of each kind: ten say enough. */
static bool shown(int64_t count)
{
	if (count == 11)
		printf("torture: (further findings of this kind not shown)\n");
	return count <= 10;
}

static int by_time(gconstpointer a, gconstpointer b)
{
	const torture_event *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

static int by_acquire(gconstpointer a, gconstpointer b)
{
	const hold *x = *(hold *const *)a, *y = *(hold *const *)b;

	return x->acq < y->acq ? -1 : x->acq > y->acq;
}

static char *key_of(int slot, int life, int res)
{
	return g_strdup_printf("%d.%d.%d", slot, life, res);
}

static void hold_free(gpointer p)
{
	hold *h = p;

	g_array_unref(h->suspended);
	g_free(h);
}

/* When the life of a slot was killed by the nemesis, or G_MAXINT64. */
static int64_t death_of(GArray *faults, int slot, int life)
{
	for (guint i = 0; i < faults->len; i++) {
		torture_fault *f = &g_array_index(faults, torture_fault, i);

		if (f->kind == FAULT_KILL && f->slot == slot && f->life == life)
			return f->start;
	}
	return G_MAXINT64;
}

/* The end of what h's process believed: release, death or first LOST. */
static int64_t believed_end(const hold *h)
{
	return MIN(h->end, h->lost_at);
}

/* Whether h was believed at instant t (not suspended then). */
static bool believed_at(const hold *h, int64_t t)
{
	if (t < h->acq || t >= believed_end(h))
		return false;
	for (guint i = 0; i + 1 < h->suspended->len; i += 2)
		if (t >= g_array_index(h->suspended, int64_t, i) && t < g_array_index(h->suspended, int64_t, i + 1))
			return false;
	return true;
}

/*
 * The first instant in [from, to) at which both holds are believed, or -1.
 * Belief changes only at the holds' acquire, suspension and end instants,
 * so those are the only candidates.
 */
static int64_t first_common_instant(const hold *a, const hold *b, int64_t from, int64_t to)
{
	const hold *both[2] = { a, b };
	int64_t best = -1;

	if (believed_at(a, from) && believed_at(b, from))
		return from;
	for (int k = 0; k < 2; k++) {
		const hold *h = both[k];

		for (guint i = 1; i < h->suspended->len; i += 2) {
			int64_t t = g_array_index(h->suspended, int64_t, i);

			if (t > from && t < to && believed_at(a, t) && believed_at(b, t) && (best < 0 || t < best))
				best = t;
		}
	}
	return best;
}

/* The kind of a pause or partition of this life (or a Redis restart) that
 * covers t, or -1. */
static int explained(GArray *faults, const torture_limits *lim, const hold *h, int64_t t)
{
	/* Measured: a resumed or reconnected holder hears LOST within a
	 * millisecond; the margin is for a loaded machine.  A restart is
	 * noticed only at the next renewal (within the lease). */
	int64_t grace = lim->slack_us;
	int why = -1;

	for (guint i = 0; i < faults->len; i++) {
		torture_fault *f = &g_array_index(faults, torture_fault, i);
		bool mine = f->slot == h->slot && f->life == h->life;
		bool partition = f->kind == FAULT_STALL || f->kind == FAULT_RESET || f->kind == FAULT_REFUSE;
		bool relevant = (mine && (f->kind == FAULT_PAUSE || (partition && !lim->strict))) ||
		                f->kind == FAULT_SERVER_RESTART;

		if (relevant && t >= f->start &&
		    t <= f->end + grace + (f->kind == FAULT_SERVER_RESTART ? lim->lease_us : 0)) {
			/* A restart explains it whatever else happened. */
			if (f->kind == FAULT_SERVER_RESTART)
				return (int)f->kind;
			if (why < 0)
				why = (int)f->kind;
		}
	}
	return why;
}

/* Whether a Redis restart (every key gone) happened shortly before t. */
static bool after_restart(GArray *faults, const torture_limits *lim, int64_t t)
{
	for (guint i = 0; i < faults->len; i++) {
		torture_fault *f = &g_array_index(faults, torture_fault, i);

		if (f->kind == FAULT_SERVER_RESTART && t >= f->start && t <= f->end + lim->lease_us + lim->slack_us)
			return true;
	}
	return false;
}

static GPtrArray *build_holds(GArray *events, GArray *faults, const torture_limits *lim, torture_findings *f)
{
	GHashTable *open = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	GHashTable *last_seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	GPtrArray *holds = g_ptr_array_new_with_free_func(hold_free);
	GHashTableIter it;
	gpointer k, v;

	g_array_sort(events, by_time);
	for (guint i = 0; i < events->len; i++) {
		torture_event *e = &g_array_index(events, torture_event, i);
		char *key = key_of(e->slot, e->life, e->res);
		hold *h = g_hash_table_lookup(open, key);
		int64_t *seen = g_new(int64_t, 1);

		*seen = e->t;
		g_hash_table_replace(last_seen, g_strdup_printf("%d.%d", e->slot, e->life), seen);
		switch (e->kind) {
		case EV_ACQUIRED:
			if (e->token == 0) {
				f->tokenless_grants++;
				if (shown(f->tokenless_grants))
					printf("torture: GRANT WITHOUT TOKEN on r%d at +%.3fs: worker %d.%d's acquire returned "
					       "DLOCK_OK with fencing token 0\n",
					       e->res, (e->t - lim->run_start) / 1e6, e->slot, e->life);
			}
			h = g_new0(hold, 1);
			h->slot = e->slot;
			h->life = e->life;
			h->res = e->res;
			h->token = e->token;
			h->acq = e->t;
			h->end = G_MAXINT64;
			h->lost_at = G_MAXINT64;
			h->suspended = g_array_new(FALSE, FALSE, sizeof(int64_t));
			g_ptr_array_add(holds, h);
			g_hash_table_replace(open, g_strdup(key), h);
			break;
		case EV_STATE:
			if (e->code == 1)
				f->suspended++;
			else if (e->code == 2)
				f->reconnected++;
			else if (e->code == 3)
				f->lost++;
			if (!h)
				break;
			if (e->code == 1 && h->suspended->len % 2 == 0)
				g_array_append_val(h->suspended, e->t);
			else if (e->code != 1 && h->suspended->len % 2 == 1)
				g_array_append_val(h->suspended, e->t);
			if (e->code == 3 && h->lost_at == G_MAXINT64) {
				h->lost_at = e->t;
				h->told_lost = true;
			}
			break;
		case EV_RELEASE:
			if (!h)
				break;
			h->end = e->t;
			h->released = true;
			h->suspended_at_release = h->suspended->len % 2 == 1;
			if (e->code == DLOCK_ELOST)
				h->told_lost = true;
			g_hash_table_remove(open, key);
			break;
		default:
			break;
		}
		g_free(key);
	}
	/* Holds never released: their process died, or the run ended. */
	g_hash_table_iter_init(&it, open);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		hold *h = v;
		char *life = g_strdup_printf("%d.%d", h->slot, h->life);
		int64_t *seen = g_hash_table_lookup(last_seen, life);
		int64_t death = death_of(faults, h->slot, h->life);

		h->end = death != G_MAXINT64 ? death : seen ? MAX(*seen, lim->run_end) : lim->run_end;
		g_free(life);
	}
	for (guint i = 0; i < holds->len; i++) {
		hold *h = g_ptr_array_index(holds, i);

		if (h->suspended->len % 2 == 1) {
			int64_t end = believed_end(h);
			g_array_append_val(h->suspended, end);
		}
	}
	g_hash_table_unref(open);
	g_hash_table_unref(last_seen);
	return holds;
}

static void check_overlaps(GPtrArray *holds, GArray *faults, const torture_limits *lim, torture_findings *f)
{
	for (guint i = 0; i < holds->len; i++) {
		hold *a = g_ptr_array_index(holds, i);

		for (guint j = i + 1; j < holds->len; j++) {
			hold *b = g_ptr_array_index(holds, j);
			int64_t from, to, t;
			int why;

			if (b->acq >= believed_end(a))
				break;
			if (b->res != a->res || (b->slot == a->slot && b->life == a->life))
				continue;
			from = MAX(a->acq, b->acq);
			to = MIN(believed_end(a), believed_end(b));
			if (from >= to)
				continue;
			t = first_common_instant(a, b, from, to);
			if (t < 0)
				continue;
			why = explained(faults, lim, a, t);
			if (why < 0)
				why = explained(faults, lim, b, t);
			if (why >= 0) {
				f->overlaps_explained++;
				f->explained_by[why]++;
				if (g_getenv("DLOCK_TORTURE_VERBOSE"))
					printf("torture: overlap on r%d at +%.3fs explained by %s: worker %d.%d token %" PRIu64
					       " (+%.3f..+%.3f) and worker %d.%d token %" PRIu64 " (+%.3f..+%.3f)\n",
					       a->res, (t - lim->run_start) / 1e6, torture_fault_name(why), a->slot, a->life,
					       a->token, (a->acq - lim->run_start) / 1e6, (believed_end(a) - lim->run_start) / 1e6,
					       b->slot, b->life, b->token, (b->acq - lim->run_start) / 1e6,
					       (believed_end(b) - lim->run_start) / 1e6);
				continue;
			}
			f->overlaps++;
			if (shown(f->overlaps))
				printf("torture: OVERLAP on r%d at +%.3fs: worker %d.%d token %" PRIu64
				       " (held +%.3f..+%.3f) and worker %d.%d token %" PRIu64 " (held +%.3f..+%.3f)\n",
				       a->res, (t - lim->run_start) / 1e6, a->slot, a->life, a->token,
				       (a->acq - lim->run_start) / 1e6, (believed_end(a) - lim->run_start) / 1e6, b->slot,
				       b->life, b->token, (b->acq - lim->run_start) / 1e6,
				       (believed_end(b) - lim->run_start) / 1e6);
		}
	}
}

static void check_silent_losses(GPtrArray *holds, GArray *faults, const torture_limits *lim, torture_findings *f)
{
	for (guint i = 0; i < holds->len; i++) {
		hold *a = g_ptr_array_index(holds, i);

		/* A release while SUSPENDED returns DLOCK_OK without asking the
		 * server (SPEC: release while unreachable): the owner was told
		 * the hold was uncertain, which is all the library knew. */
		if (!a->released || a->told_lost || a->suspended_at_release)
			continue;
		for (guint j = i + 1; j < holds->len; j++) {
			hold *b = g_ptr_array_index(holds, j);

			if (b->acq >= a->end)
				break;
			if (b->res != a->res || (b->slot == a->slot && b->life == a->life) || b->token <= a->token)
				continue;
			/* The restart took the key with it: a release that then
			 * finds its connection dead cannot tell "not ours" from
			 * "deleted by my unanswered try", and says DLOCK_OK. */
			if (after_restart(faults, lim, b->acq)) {
				f->silent_losses_explained++;
				break;
			}
			f->silent_losses++;
			if (shown(f->silent_losses))
				printf("torture: SILENT LOSS on r%d: worker %d.%d token %" PRIu64
				       " held +%.3f..+%.3f and was never told LOST, while worker %d.%d was granted token %" PRIu64
				       " at +%.3f\n",
				       a->res, a->slot, a->life, a->token, (a->acq - lim->run_start) / 1e6,
				       (a->end - lim->run_start) / 1e6, b->slot, b->life, b->token, (b->acq - lim->run_start) / 1e6);
			break;
		}
	}
}

static const hold *hold_of_write(GPtrArray *holds, const torture_event *w)
{
	for (guint i = holds->len; i-- > 0;) {
		const hold *h = g_ptr_array_index(holds, i);

		if (h->slot == w->slot && h->life == w->life && h->res == w->res && h->token == w->token)
			return h;
	}
	return NULL;
}

static void check_writes(GArray *events, GPtrArray *holds, GArray *faults, const torture_limits *lim,
                         torture_findings *f)
{
	uint64_t max_accepted[TORTURE_MAX_RESOURCES] = { 0 };
	uint64_t max_granted[TORTURE_MAX_RESOURCES] = { 0 };
	guint next = 0;

	/* events are sorted by time, holds by acquire time. */
	for (guint i = 0; i < events->len; i++) {
		torture_event *e = &g_array_index(events, torture_event, i);
		const hold *h;

		if (e->kind != EV_WRITE || e->res < 0 || e->res >= TORTURE_MAX_RESOURCES)
			continue;
		while (next < holds->len && ((hold *)g_ptr_array_index(holds, next))->acq < e->t) {
			hold *g = g_ptr_array_index(holds, next++);

			max_granted[g->res] = MAX(max_granted[g->res], g->token);
		}
		if (!e->code) {
			f->writes_refused++;
			continue;
		}
		f->writes_accepted++;
		if (e->token < max_accepted[e->res]) {
			f->order_violations++;
			if (shown(f->order_violations))
				printf("torture: ORDER VIOLATION on r%d at +%.3fs: write by worker %d.%d with token %" PRIu64
				       " accepted after token %" PRIu64 "\n",
				       e->res, (e->t - lim->run_start) / 1e6, e->slot, e->life, e->token, max_accepted[e->res]);
		}
		max_accepted[e->res] = MAX(max_accepted[e->res], e->token);
		if (e->token < max_granted[e->res]) {
			h = hold_of_write(holds, e);
			if (h && explained(faults, lim, h, e->t) >= 0)
				continue;
			f->stale_accepted++;
			if (shown(f->stale_accepted))
				printf("torture: STALE WRITE ACCEPTED on r%d at +%.3fs: worker %d.%d wrote with token %" PRIu64
				       " after token %" PRIu64 " had been granted\n",
				       e->res, (e->t - lim->run_start) / 1e6, e->slot, e->life, e->token, max_granted[e->res]);
		}
	}
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

static int64_t allowance(GArray *faults, const torture_limits *lim, int64_t from, int64_t to)
{
	int64_t allowed = lim->lease_us + lim->slack_us;

	for (guint i = 0; i < faults->len; i++) {
		torture_fault *x = &g_array_index(faults, torture_fault, i);

		if (x->start <= to && x->end + lim->lease_us + lim->slack_us >= from)
			allowed += (x->end - x->start) + lim->lease_us;
	}
	return allowed;
}

/*
 * For each resource: the stretches when no hold existed, and within them
 * the longest time some worker was trying without interruption.
 */
static void check_liveness(GArray *events, GPtrArray *holds, GArray *faults, const torture_limits *lim,
                           torture_findings *f, int nres)
{
	for (int r = 0; r < nres; r++) {
		GArray *held = g_array_new(FALSE, FALSE, sizeof(window));
		GArray *trying = g_array_new(FALSE, FALSE, sizeof(window));
		GHashTable *pending = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);

		for (guint i = 0; i < holds->len; i++) {
			hold *h = g_ptr_array_index(holds, i);
			window w = { h->acq, MIN(h->end, h->lost_at) };

			if (h->res == r)
				g_array_append_val(held, w);
		}
		for (guint i = 0; i < events->len; i++) {
			torture_event *e = &g_array_index(events, torture_event, i);
			char *key;
			int64_t *start;

			if (e->res != r || (e->kind != EV_TRY && e->kind != EV_FAILED && e->kind != EV_ACQUIRED))
				continue;
			key = key_of(e->slot, e->life, r);
			if (e->kind == EV_TRY) {
				start = g_new(int64_t, 1);
				*start = e->t;
				g_hash_table_replace(pending, key, start);
				continue;
			}
			start = g_hash_table_lookup(pending, key);
			if (start) {
				window w = { *start, e->t };
				g_array_append_val(trying, w);
				g_hash_table_remove(pending, key);
			}
			g_free(key);
		}
		merge(held, 0);
		/* A worker's next try on a resource follows its last one
		 * within its think time and its other resource's round. */
		merge(trying, 200000);
		for (guint i = 0; i < trying->len; i++) {
			window t = g_array_index(trying, window, i);
			int64_t cursor = MAX(t.start, lim->run_start);

			t.end = MIN(t.end, lim->run_end);

			/* Walk the held windows: the parts of t outside them. */
			for (guint j = 0; j <= held->len && cursor < t.end; j++) {
				int64_t free_until = j < held->len ? g_array_index(held, window, j).start : G_MAXINT64;
				int64_t free_from = cursor;
				int64_t stop = MIN(free_until, t.end);

				if (j < held->len && g_array_index(held, window, j).end <= cursor)
					continue;
				if (stop > free_from) {
					int64_t wait = stop - free_from;

					if (wait > f->longest_wait_us) {
						f->longest_wait_us = wait;
						f->longest_wait_res = r;
						f->longest_wait_from = free_from - lim->run_start;
						f->longest_wait_allowed = allowance(faults, lim, free_from, stop);
					}
					if (wait > allowance(faults, lim, free_from, stop)) {
						f->liveness_gaps++;
						if (shown(f->liveness_gaps))
							printf("torture: LIVENESS GAP on r%d: workers tried from +%.3fs to +%.3fs (%.3fs, "
							       "allowed %.3fs) and nobody got it\n",
							       r, (free_from - lim->run_start) / 1e6, (stop - lim->run_start) / 1e6,
							       wait / 1e6, allowance(faults, lim, free_from, stop) / 1e6);
					}
				}
				if (j < held->len)
					cursor = MAX(cursor, g_array_index(held, window, j).end);
			}
		}
		g_array_unref(held);
		g_array_unref(trying);
		g_hash_table_unref(pending);
	}
}

void torture_check(GArray *events, GArray *faults, const torture_limits *limits, torture_findings *f)
{
	GPtrArray *holds;
	int nres = 0;

	memset(f, 0, sizeof(*f));
	holds = build_holds(events, faults, limits, f);
	g_ptr_array_sort(holds, by_acquire);
	f->holds = holds->len;
	for (guint i = 0; i < holds->len; i++)
		nres = MAX(nres, ((hold *)g_ptr_array_index(holds, i))->res + 1);
	check_overlaps(holds, faults, limits, f);
	check_silent_losses(holds, faults, limits, f);
	check_writes(events, holds, faults, limits, f);
	check_liveness(events, holds, faults, limits, f, nres);
	g_ptr_array_unref(holds);
}
