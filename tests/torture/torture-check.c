/* SPDX-License-Identifier: MIT */
/*
 * The torture checker: rebuilds every hold from the workers' events and
 * looks for what must never happen.
 *
 * A hold is believed from the return of its acquire until its release
 * starts, its first LOST, or its process's death, minus the stretches
 * between SUSPENDED and RECONNECTED.  An election's leadership is a hold
 * from a campaign's DLOCK_OK -- once the worker has seen it still leads --
 * until a resign starts.  Holds are an owner's: a worker process's client
 * (the rogue has several).  Findings, each printed with the recipe and
 * the rule broken:
 *  - a recipe's exclusion broken (torture-invariants.c): two holders of a
 *    mutex, two writers, a reader beside a writer, more than N permit
 *    holders, two leaders -- holds believed at the same instant, unless one
 *    of their processes was paused or partitioned by the nemesis then (the
 *    fault's window, plus a margin for the library to notice), or the Redis
 *    server had been restarted empty (no persistence: the key is gone;
 *    plus the lease).  With --strict a partition excuses nothing: the
 *    library must declare LOST by its own clock before the server's lease
 *    or session can end.  A downgrade's read hold and its own write hold
 *    are one owner's;
 *  - a token out of order (torture-invariants.c);
 *  - order violation: an accepted write with a lower token than an
 *    earlier accepted write on that resource (the storage's fencing check
 *    should make this impossible);
 *  - stale accepted write: a write the fencing check let through although
 *    a hold with a larger token had already been granted, from a process
 *    the nemesis was not pausing or partitioning;
 *  - silent loss: a hold whose process survived to release it, superseded
 *    by a grant that excludes it, and never told LOST (no state callback,
 *    no DLOCK_ELOST from release) nor SUSPENDED at the time of its
 *    release, unless the other owner's grant followed a Redis restart;
 *  - grant without token: an acquire returned DLOCK_OK and the hold has
 *    fencing token 0 (dead on arrival);
 *  - liveness, lost holds kept up, tries refused beside a free permit and
 *    results no wait allows (torture-liveness.c);
 *  - an election's callbacks out of step with its leadership (the
 *    worker's notes).
 */
#include "torture-check.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <dlock.h>

#include "test-cluster.h"

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
		[FAULT_MASTER_FREEZE] = "master-freeze",
		[FAULT_MASTER_KILL] = "master-kill",
		[FAULT_MASTER_BLACKHOLE] = "master-blackhole",
		[FAULT_FAILOVER] = "failover",
		[FAULT_SWITCHOVER] = "switchover",
		[FAULT_MIGRATE] = "migrate",
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

bool torture_fault_is_master(torture_fault_kind kind)
{
	return kind == FAULT_MASTER_FREEZE || kind == FAULT_MASTER_KILL || kind == FAULT_MASTER_BLACKHOLE;
}

bool torture_fault_is_server(torture_fault_kind kind)
{
	return kind == FAULT_SERVER_RESTART || kind == FAULT_SERVER_FREEZE || kind == FAULT_LEADER_KILL ||
	       torture_fault_is_master(kind) || kind == FAULT_FAILOVER || kind == FAULT_SWITCHOVER ||
	       kind == FAULT_MIGRATE;
}

void torture_resource_name(int res, int masters, char *buf, size_t size)
{
	g_snprintf(buf, size, "torture/r%d", res);
	if (masters <= 0)
		return;
	/* test-cluster.h: master m serves [m * S / M, (m + 1) * S / M). */
	for (int n = 0;; n++) {
		int m = res % masters, slot;
		char key[64];

		g_snprintf(buf, size, "torture/r%d.%d", res, n);
		g_snprintf(key, sizeof(key), "dlock:{%s}", buf);
		slot = test_cluster_keyslot(key);
		if (slot >= m * TEST_CLUSTER_SLOTS / masters && slot < (m + 1) * TEST_CLUSTER_SLOTS / masters)
			return;
	}
}

const char *torture_recipe_name(torture_recipe recipe)
{
	switch (recipe) {
	case RECIPE_MUTEX:
		return "mutex";
	case RECIPE_RW:
		return "read-write";
	case RECIPE_SEMAPHORE:
		return "semaphore";
	case RECIPE_ELECTION:
		return "election";
	}
	return "?";
}

const char *torture_mode_name(char mode)
{
	switch (mode) {
	case MODE_EXCLUSIVE:
		return "exclusive";
	case MODE_WRITE:
		return "write";
	case MODE_READ:
		return "read";
	case MODE_PERMIT:
		return "permit";
	case MODE_LEADER:
		return "leader";
	}
	return "?";
}

bool torture_shown(int64_t count)
{
	if (count == 11)
		printf("torture: (further findings of this kind not shown)\n");
	return count <= 10;
}

double torture_rel(const check *c, int64_t t)
{
	return (t - c->lim->run_start) / 1e6;
}

torture_recipe torture_recipe_of(const check *c, int res)
{
	return res >= 0 && res < c->lim->nres ? (torture_recipe)c->lim->recipes[res] : RECIPE_MUTEX;
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

/* A hold's key: one owner's hold of one resource in one mode. */
static char *key_of(const torture_event *e)
{
	return g_strdup_printf("%d.%d.%d.%d.%c", e->slot, e->life, e->owner, e->res, e->mode);
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

int64_t torture_believed_end(const hold *h)
{
	return MIN(h->end, h->lost_at);
}

bool torture_believed_at(const hold *h, int64_t t)
{
	if (t < h->acq || t >= torture_believed_end(h))
		return false;
	for (guint i = 0; i + 1 < h->suspended->len; i += 2)
		if (t >= g_array_index(h->suspended, int64_t, i) && t < g_array_index(h->suspended, int64_t, i + 1))
			return false;
	return true;
}

bool torture_same_owner(const hold *a, const hold *b)
{
	return a->slot == b->slot && a->life == b->life && a->owner == b->owner;
}

bool torture_modes_conflict(char a, char b)
{
	bool shared_a = a == MODE_READ || a == MODE_PERMIT, shared_b = b == MODE_READ || b == MODE_PERMIT;

	return !(shared_a && shared_b);
}

int torture_explained(const check *c, const hold *h, int64_t t)
{
	/* Measured: a resumed or reconnected holder hears LOST within a
	 * millisecond; the margin is for a loaded machine.  A restart is
	 * noticed only at the next renewal (within the lease). */
	int64_t grace = c->lim->slack_us;
	int why = -1;

	for (guint i = 0; i < c->faults->len; i++) {
		torture_fault *f = &g_array_index(c->faults, torture_fault, i);
		bool mine = f->slot == h->slot && f->life == h->life;
		bool partition = f->kind == FAULT_STALL || f->kind == FAULT_RESET || f->kind == FAULT_REFUSE;
		bool relevant = (mine && (f->kind == FAULT_PAUSE || (partition && !c->lim->strict))) ||
		                f->kind == FAULT_SERVER_RESTART;

		if (relevant && t >= f->start &&
		    t <= f->end + grace + (f->kind == FAULT_SERVER_RESTART ? c->lim->lease_us : 0)) {
			/* A restart explains it whatever else happened. */
			if (f->kind == FAULT_SERVER_RESTART)
				return (int)f->kind;
			if (why < 0)
				why = (int)f->kind;
		}
	}
	return why;
}

bool torture_fault_in_force(const check *c, int64_t from, int64_t to, fault_scope scope, int slot, int life)
{
	for (guint i = 0; i < c->faults->len; i++) {
		torture_fault *f = &g_array_index(c->faults, torture_fault, i);
		bool own = f->slot == slot && f->life == life;

		if (f->slot >= 0 && ((scope == SCOPE_OWN && !own) || (scope == SCOPE_OTHERS && own)))
			continue;
		if (c->lim->quorum && torture_fault_is_master(f->kind))
			continue;
		if (f->start <= to && f->end + c->lim->lease_us + c->lim->slack_us >= from)
			return true;
	}
	return false;
}

/* Whether a Redis restart (every key gone) happened shortly before t. */
static bool after_restart(const check *c, int64_t t)
{
	for (guint i = 0; i < c->faults->len; i++) {
		torture_fault *f = &g_array_index(c->faults, torture_fault, i);

		if (f->kind == FAULT_SERVER_RESTART && t >= f->start && t <= f->end + c->lim->lease_us + c->lim->slack_us)
			return true;
	}
	return false;
}

static hold *hold_new(const torture_event *e, GHashTable *tries, const char *key)
{
	hold *h = g_new0(hold, 1);
	int64_t *try_at = g_hash_table_lookup(tries, key);

	h->slot = e->slot;
	h->life = e->life;
	h->owner = e->owner;
	h->res = e->res;
	h->mode = e->mode;
	h->token = e->token;
	h->try_at = try_at ? *try_at : e->t;
	h->acq = e->t;
	h->end = G_MAXINT64;
	h->release_end = G_MAXINT64;
	h->lost_at = G_MAXINT64;
	h->suspended = g_array_new(FALSE, FALSE, sizeof(int64_t));
	return h;
}

static void on_state(check *c, hold *h, const torture_event *e)
{
	torture_findings *f = c->f;

	if (e->code == DLOCK_STATE_SUSPENDED)
		f->suspended++;
	else if (e->code == DLOCK_STATE_RECONNECTED)
		f->reconnected++;
	else if (e->code == DLOCK_STATE_LOST)
		f->lost++;
	if (!h)
		return;
	if (e->code == DLOCK_STATE_SUSPENDED && h->suspended->len % 2 == 0)
		g_array_append_val(h->suspended, e->t);
	else if (e->code != DLOCK_STATE_SUSPENDED && h->suspended->len % 2 == 1)
		g_array_append_val(h->suspended, e->t);
	if (e->code == DLOCK_STATE_LOST && h->lost_at == G_MAXINT64) {
		h->lost_at = e->t;
		h->told_lost = true;
	}
}

static void on_note(check *c, const torture_event *e)
{
	if (e->code == NOTE_DONE_NOT_ONCE) {
		c->f->dones_not_once++;
		if (torture_shown(c->f->dones_not_once))
			printf("torture: DONE NOT RUN ONCE on r%d (%s) at +%.3fs: worker %d.%d: a call without a "
			       "waiting thread whose done did not come, or came twice\n", e->res,
			       torture_recipe_name(torture_recipe_of(c, e->res)), torture_rel(c, e->t), e->slot, e->life);
		return;
	}
	c->f->election_events++;
	if (torture_shown(c->f->election_events))
		printf("torture: ELECTION EVENTS OUT OF STEP on r%d (election) at +%.3fs: worker %d.%d %s\n", e->res,
		       torture_rel(c, e->t), e->slot, e->life,
		       e->code == NOTE_ELECTED_NOT_LEADING ?
		               "does not lead, and its last event is ELECTED (a resign or loss without its event)" :
		               "leads, and no ELECTED came");
}

static void on_acquired(check *c, const torture_event *e, GHashTable *open, GHashTable *tries, const char *key)
{
	hold *h;

	/* A campaign won, and resigned at once by the racing thread: the
	 * worker never believed it led. */
	if (e->code != 0)
		return;
	if (e->token == 0) {
		c->f->tokenless_grants++;
		if (torture_shown(c->f->tokenless_grants))
			printf("torture: GRANT WITHOUT TOKEN on r%d (%s) at +%.3fs: worker %d.%d's %s acquire returned "
			       "DLOCK_OK with fencing token 0\n",
			       e->res, torture_recipe_name(torture_recipe_of(c, e->res)), torture_rel(c, e->t), e->slot,
			       e->life, torture_mode_name(e->mode));
	}
	h = hold_new(e, tries, key);
	g_ptr_array_add(c->holds, h);
	g_hash_table_replace(open, g_strdup(key), h);
}

static void build_holds(check *c)
{
	GHashTable *open = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	GHashTable *tries = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	GHashTable *last_seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	GHashTableIter it;
	gpointer k, v;

	g_array_sort(c->events, by_time);
	for (guint i = 0; i < c->events->len; i++) {
		torture_event *e = &g_array_index(c->events, torture_event, i);
		char *key = key_of(e);
		hold *h = g_hash_table_lookup(open, key);
		int64_t *seen = g_new(int64_t, 1);

		*seen = e->t;
		g_hash_table_replace(last_seen, g_strdup_printf("%d.%d", e->slot, e->life), seen);
		switch (e->kind) {
		case EV_TRY:
			seen = g_new(int64_t, 1);
			*seen = e->t;
			g_hash_table_replace(tries, g_strdup(key), seen);
			break;
		case EV_ACQUIRED:
			on_acquired(c, e, open, tries, key);
			break;
		case EV_STATE:
			on_state(c, h, e);
			break;
		case EV_NOTE:
			on_note(c, e);
			break;
		case EV_RELEASE:
			if (!h)
				break;
			h->end = e->t;
			h->release_end = MAX(e->aux, e->t);
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
		int64_t death = death_of(c->faults, h->slot, h->life);

		h->end = death != G_MAXINT64 ? death : seen ? MAX(*seen, c->lim->run_end) : c->lim->run_end;
		/* What it held on the server ends with its lease (or session,
		 * or file descriptors) at the latest. */
		h->release_end = h->end + c->lim->lease_us;
		g_free(life);
	}
	for (guint i = 0; i < c->holds->len; i++) {
		hold *h = g_ptr_array_index(c->holds, i);

		if (h->suspended->len % 2 == 1) {
			int64_t end = torture_believed_end(h);
			g_array_append_val(h->suspended, end);
		}
	}
	g_hash_table_unref(open);
	g_hash_table_unref(tries);
	g_hash_table_unref(last_seen);
}

static void check_silent_losses(check *c)
{
	torture_findings *f = c->f;

	for (guint i = 0; i < c->holds->len; i++) {
		hold *a = g_ptr_array_index(c->holds, i);

		/* A release while SUSPENDED returns DLOCK_OK without asking the
		 * server (docs/architecture.md, "States of a hold"): the owner
		 * was told the hold was uncertain, which is all the library
		 * knew. */
		if (!a->released || a->told_lost || a->suspended_at_release)
			continue;
		for (guint j = i + 1; j < c->holds->len; j++) {
			hold *b = g_ptr_array_index(c->holds, j);

			if (b->acq >= a->end)
				break;
			if (b->res != a->res || torture_same_owner(a, b) || b->token <= a->token ||
			    !torture_modes_conflict(a->mode, b->mode))
				continue;
			/* The restart took the key with it: a release that then
			 * finds its connection dead cannot tell "not ours" from
			 * "deleted by my unanswered try", and says DLOCK_OK. */
			if (after_restart(c, b->acq)) {
				f->silent_losses_explained++;
				break;
			}
			f->silent_losses++;
			if (torture_shown(f->silent_losses))
				printf("torture: SILENT LOSS on r%d (%s): worker %d.%d's %s hold token %" PRIu64
				       " held +%.3f..+%.3f and was never told LOST, while worker %d.%d was granted %s token %" PRIu64
				       " at +%.3f\n",
				       a->res, torture_recipe_name(torture_recipe_of(c, a->res)), a->slot, a->life,
				       torture_mode_name(a->mode), a->token, torture_rel(c, a->acq), torture_rel(c, a->end), b->slot,
				       b->life, torture_mode_name(b->mode), b->token, torture_rel(c, b->acq));
			break;
		}
	}
}

static const hold *hold_of_write(const check *c, const torture_event *w)
{
	for (guint i = c->holds->len; i-- > 0;) {
		const hold *h = g_ptr_array_index(c->holds, i);

		if (h->slot == w->slot && h->life == w->life && h->owner == w->owner && h->res == w->res &&
		    h->token == w->token)
			return h;
	}
	return NULL;
}

static void check_writes(check *c)
{
	uint64_t max_accepted[TORTURE_MAX_RESOURCES] = { 0 };
	uint64_t max_granted[TORTURE_MAX_RESOURCES] = { 0 };
	torture_findings *f = c->f;
	guint next = 0;

	/* events are sorted by time, holds by acquire time. */
	for (guint i = 0; i < c->events->len; i++) {
		torture_event *e = &g_array_index(c->events, torture_event, i);
		const hold *h;

		if (e->kind != EV_WRITE || e->res < 0 || e->res >= TORTURE_MAX_RESOURCES)
			continue;
		while (next < c->holds->len && ((hold *)g_ptr_array_index(c->holds, next))->acq < e->t) {
			hold *g = g_ptr_array_index(c->holds, next++);

			max_granted[g->res] = MAX(max_granted[g->res], g->token);
		}
		if (!e->code) {
			f->writes_refused++;
			continue;
		}
		f->writes_accepted++;
		if (e->token < max_accepted[e->res]) {
			f->order_violations++;
			if (torture_shown(f->order_violations))
				printf("torture: ORDER VIOLATION on r%d (%s) at +%.3fs: write by worker %d.%d with token %" PRIu64
				       " accepted after token %" PRIu64 "\n",
				       e->res, torture_recipe_name(torture_recipe_of(c, e->res)), torture_rel(c, e->t), e->slot,
				       e->life, e->token, max_accepted[e->res]);
		}
		max_accepted[e->res] = MAX(max_accepted[e->res], e->token);
		if (e->token < max_granted[e->res]) {
			h = hold_of_write(c, e);
			if (h && torture_explained(c, h, e->t) >= 0)
				continue;
			f->stale_accepted++;
			if (torture_shown(f->stale_accepted))
				printf("torture: STALE WRITE ACCEPTED on r%d (%s) at +%.3fs: worker %d.%d wrote with token %" PRIu64
				       " after token %" PRIu64 " had been granted\n",
				       e->res, torture_recipe_name(torture_recipe_of(c, e->res)), torture_rel(c, e->t), e->slot,
				       e->life, e->token, max_granted[e->res]);
		}
	}
}

bool torture_findings_failed(const torture_findings *f)
{
	return f->overlaps || f->order_violations || f->token_order || f->stale_accepted || f->silent_losses ||
	       f->tokenless_grants || f->liveness_gaps || f->upkeep_after_lost || f->busy_free_permit ||
	       f->bad_results || f->lost_quorum_up || f->election_events || f->dones_not_once;
}

void torture_check(GArray *events, GArray *faults, const torture_limits *limits, torture_findings *f)
{
	check c = { events, faults, limits, f, g_ptr_array_new_with_free_func(hold_free) };

	memset(f, 0, sizeof(*f));
	build_holds(&c);
	g_ptr_array_sort(c.holds, by_acquire);
	f->holds = c.holds->len;
	torture_check_exclusion(&c);
	torture_check_tokens(&c);
	check_silent_losses(&c);
	check_writes(&c);
	torture_check_liveness(&c);
	torture_check_lost_upkeep(&c);
	torture_check_tries(&c);
	g_ptr_array_unref(c.holds);
}
