/* SPDX-License-Identifier: MIT */
/*
 * Each recipe's own rules, checked on the holds as their owners believed
 * them (torture-check.h), per resource:
 *
 * Exclusion -- at every instant:
 *  - mutex: at most one holder ("TWO HOLDERS");
 *  - read-write: at most one writer ("TWO WRITERS"), and a writer
 *    excludes readers ("READER BESIDE WRITER"); readers share;
 *  - semaphore of N: at most N permit holders ("MORE THAN N PERMITS");
 *  - election: at most one leader ("TWO LEADERS").
 * Holds of one owner never count against each other (a downgrade's read
 * hold beside its own write hold).  Each time a hold starts or resumes
 * (RECONNECTED) beside holds it excludes, that is one finding, unless a
 * pause or partition of one of the processes involved, or a Redis restart,
 * explains it (torture_explained()).
 *
 * Token order -- "a later hold always gets a larger token", across every
 * mode and owner of a resource, checked as two rules whose premises the
 * events establish without knowing the servers' clocks:
 *  (A) a hold whose acquire started after another hold's acquire had
 *      returned carries a larger token (its grant came after the other's);
 *  (B) of two holds that exclude each other (modes that conflict, other
 *      owners), the one whose acquire returned later carries the larger
 *      token: since they cannot overlap, it was granted after the other
 *      ended -- which covers a writer that queued before a downgrade's
 *      read hold and was granted after it.
 * Readers that overlap, and permits, are ordered by (A) alone.  A
 * downgrade's read hold continues its owner's write hold: it may carry
 * the write hold's token (or a larger one), and a writer granted after it
 * needs a larger token than it by (B).  A (B) finding is explained when the later hold's own return was held up by a
 * pause or partition of its process (its grant may predate the other's),
 * or by a Redis restart.
 */
#include "torture-check.h"

#include <inttypes.h>
#include <stdio.h>

typedef struct edge {
	int64_t t;
	bool start;
	hold *h;
} edge;

static int by_edge(gconstpointer a, gconstpointer b)
{
	const edge *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	/* Intervals are half-open: an end at t comes before a start at t. */
	return (int)x->start - (int)y->start;
}

/* The believed stretches of every hold of res, as start and end edges. */
static GArray *edges_of(const check *c, int res)
{
	GArray *edges = g_array_new(FALSE, FALSE, sizeof(edge));

	for (guint i = 0; i < c->holds->len; i++) {
		hold *h = g_ptr_array_index(c->holds, i);
		int64_t from = h->acq, end = torture_believed_end(h);

		if (h->res != res || end <= from)
			continue;
		for (guint s = 0; s + 1 < h->suspended->len; s += 2) {
			int64_t s0 = g_array_index(h->suspended, int64_t, s), s1 = g_array_index(h->suspended, int64_t, s + 1);

			if (s0 > from) {
				g_array_append_val(edges, ((edge){ from, true, h }));
				g_array_append_val(edges, ((edge){ MIN(s0, end), false, h }));
			}
			from = MAX(from, s1);
		}
		if (end > from) {
			g_array_append_val(edges, ((edge){ from, true, h }));
			g_array_append_val(edges, ((edge){ end, false, h }));
		}
	}
	g_array_sort(edges, by_edge);
	return edges;
}

static void describe(const check *c, GString *out, const hold *h)
{
	g_string_append_printf(out, "worker %d.%d", h->slot, h->life);
	if (h->owner)
		g_string_append_printf(out, " owner %d", h->owner);
	g_string_append_printf(out, " %s token %" PRIu64 " (held +%.3f..+%.3f)", torture_mode_name(h->mode), h->token,
	                       torture_rel(c, h->acq), torture_rel(c, torture_believed_end(h)));
}

/* Count one finding of the invariant, printing it unless explained. */
static void finding(check *c, int64_t *count, const char *what, int res, int64_t t, hold *h, GPtrArray *with)
{
	torture_findings *f = c->f;
	int why = torture_explained(c, h, t);
	GString *line;

	for (guint i = 0; why < 0 && i < with->len; i++)
		why = torture_explained(c, g_ptr_array_index(with, i), t);
	if (why >= 0) {
		f->overlaps_explained++;
		f->explained_by[why]++;
		if (!g_getenv("DLOCK_TORTURE_VERBOSE"))
			return;
	} else {
		(*count)++;
		f->overlaps++;
		if (!torture_shown(*count))
			return;
	}
	line = g_string_new("");
	g_string_append_printf(line, "torture: %s%s on r%d (%s", why >= 0 ? "explained: " : "", what, res,
	                       torture_recipe_name(torture_recipe_of(c, res)));
	if (torture_recipe_of(c, res) == RECIPE_SEMAPHORE)
		g_string_append_printf(line, " of %u", c->lim->permits);
	g_string_append_printf(line, ") at +%.3fs: ", torture_rel(c, t));
	describe(c, line, h);
	for (guint i = 0; i < with->len; i++) {
		g_string_append(line, i + 1 < with->len || with->len == 1 ? " and " : ", and ");
		describe(c, line, g_ptr_array_index(with, i));
	}
	if (why >= 0)
		g_string_append_printf(line, " -- by %s", torture_fault_name(why));
	printf("%s\n", line->str);
	g_string_free(line, TRUE);
}

/* h starts (or resumes) at t beside the active holds: what it breaks. */
static void entering(check *c, int res, int64_t t, hold *h, GPtrArray *active)
{
	torture_recipe recipe = torture_recipe_of(c, res);
	torture_findings *f = c->f;
	GPtrArray *others = g_ptr_array_new();

	for (guint i = 0; i < active->len; i++) {
		hold *a = g_ptr_array_index(active, i);

		if (!torture_same_owner(a, h))
			g_ptr_array_add(others, a);
	}
	if (recipe == RECIPE_SEMAPHORE) {
		if (others->len + 1 > c->lim->permits)
			finding(c, &f->permits_exceeded, "MORE THAN N PERMITS", res, t, h, others);
		g_ptr_array_unref(others);
		return;
	}
	for (guint i = 0; i < others->len; i++) {
		hold *a = g_ptr_array_index(others, i);
		GPtrArray *one = g_ptr_array_new();

		g_ptr_array_add(one, a);
		if (recipe == RECIPE_MUTEX)
			finding(c, &f->two_holders, "TWO HOLDERS", res, t, h, one);
		else if (recipe == RECIPE_ELECTION)
			finding(c, &f->two_leaders, "TWO LEADERS", res, t, h, one);
		else if (h->mode == MODE_WRITE && a->mode == MODE_WRITE)
			finding(c, &f->two_writers, "TWO WRITERS", res, t, h, one);
		else if (h->mode == MODE_WRITE || a->mode == MODE_WRITE)
			finding(c, &f->reader_beside_writer, "READER BESIDE WRITER", res, t, h, one);
		g_ptr_array_unref(one);
	}
	g_ptr_array_unref(others);
}

void torture_check_exclusion(check *c)
{
	for (int res = 0; res < c->lim->nres; res++) {
		GArray *edges = edges_of(c, res);
		GPtrArray *active = g_ptr_array_new();

		for (guint i = 0; i < edges->len; i++) {
			edge *e = &g_array_index(edges, edge, i);

			if (!e->start) {
				g_ptr_array_remove_fast(active, e->h);
				continue;
			}
			entering(c, res, e->t, e->h, active);
			g_ptr_array_add(active, e->h);
		}
		g_ptr_array_unref(active);
		g_array_unref(edges);
	}
}

static void token_finding(check *c, const char *rule, bool excusable, const hold *later, const hold *earlier)
{
	torture_findings *f = c->f;

	if (excusable && torture_explained(c, later, later->acq) >= 0) {
		f->token_order_explained++;
		return;
	}
	f->token_order++;
	if (!torture_shown(f->token_order))
		return;
	printf("torture: TOKEN ORDER on r%d (%s): worker %d.%d owner %d %s hold (acquire +%.3f..+%.3f) got token %" PRIu64
	       ", not larger than worker %d.%d owner %d %s hold's %" PRIu64 " (acquire returned +%.3f): %s\n",
	       later->res, torture_recipe_name(torture_recipe_of(c, later->res)), later->slot, later->life, later->owner,
	       torture_mode_name(later->mode), torture_rel(c, later->try_at), torture_rel(c, later->acq), later->token,
	       earlier->slot, earlier->life, earlier->owner, torture_mode_name(earlier->mode), earlier->token,
	       torture_rel(c, earlier->acq), rule);
}

/* Whether read hold b is the downgrade of its owner's write hold a: it
 * was asked for while a was held. */
static bool is_downgrade(const hold *a, const hold *b)
{
	return torture_same_owner(a, b) && b->mode == MODE_READ && (a->mode == MODE_WRITE || a->mode == MODE_EXCLUSIVE) &&
	       b->try_at >= a->acq && b->try_at < a->end;
}

void torture_check_tokens(check *c)
{
	/* c->holds is sorted by acquire return. */
	for (guint j = 0; j < c->holds->len; j++) {
		const hold *b = g_ptr_array_index(c->holds, j), *after_return = NULL, *excluding = NULL;

		if (b->token == 0)
			continue;
		for (guint i = 0; i < j; i++) {
			const hold *a = g_ptr_array_index(c->holds, i);

			if (a->res != b->res || a->token == 0 || a->token < b->token || a == b)
				continue;
			/* A downgrade continues its owner's write hold: its read
			 * hold may carry the same token. */
			if (a->token == b->token && is_downgrade(a, b))
				continue;
			if (a->acq < b->try_at && (!after_return || a->token > after_return->token))
				after_return = a;
			else if (!torture_same_owner(a, b) && torture_modes_conflict(a->mode, b->mode) &&
			         (!excluding || a->token > excluding->token))
				excluding = a;
		}
		if (after_return)
			token_finding(c, "its acquire started after the other's had returned", false, b, after_return);
		else if (excluding)
			token_finding(c, "the two exclude each other, and it was granted later", true, b, excluding);
	}
}
