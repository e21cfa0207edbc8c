/* SPDX-License-Identifier: MIT */
/*
 * What a torture run prints: its summary, the per-recipe counts, the
 * self-check's verdict, and the dump of every event and fault
 * ($DLOCK_TORTURE_EVENTS) that --recheck reads back.
 */
#include "torture-run.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* What each recipe was put through, and its own invariants' counts. */
static void print_recipes(const torture_run *run, const torture_findings *f)
{
	static const char modes[] = { MODE_EXCLUSIVE, MODE_WRITE, MODE_READ, MODE_PERMIT, MODE_LEADER };
	int64_t grants[G_N_ELEMENTS(modes)] = { 0 }, raced = 0;

	for (guint i = 0; i < run->events->len; i++) {
		torture_event *e = &g_array_index(run->events, torture_event, i);

		for (guint m = 0; m < G_N_ELEMENTS(modes); m++)
			grants[m] += e->kind == EV_ACQUIRED && e->code == 0 && e->mode == modes[m];
		raced += e->kind == EV_ACQUIRED && e->code == 1;
	}
	printf("torture: layout=%s (m mutex, r read-write, s semaphore of %u, e election) grants: exclusive=%" PRId64
	       " write=%" PRId64 " read=%" PRId64 " permit=%" PRId64 " leader=%" PRId64
	       " (campaigns won and resigned at once by a racing resign: %" PRId64 ")\n",
	       run->layout, run->limits.permits, grants[0], grants[1], grants[2], grants[3], grants[4], raced);
	printf("torture: invariants: mutex two-holders=%" PRId64 " | read-write two-writers=%" PRId64
	       " reader-beside-writer=%" PRId64 " | semaphore more-than-N=%" PRId64 " busy-with-a-free-permit=%" PRId64
	       " | election two-leaders=%" PRId64 " event-order=%" PRId64 " | token-order=%" PRId64 " (explained %" PRId64
	       ") upkeep-after-lost=%" PRId64 " results-not-allowed=%" PRId64 " lost-with-a-quorum-up=%" PRId64
	       " | async done-not-once=%" PRId64 "\n",
	       f->two_holders, f->two_writers, f->reader_beside_writer, f->permits_exceeded, f->busy_free_permit,
	       f->two_leaders, f->election_events, f->token_order, f->token_order_explained, f->upkeep_after_lost,
	       f->bad_results, f->lost_quorum_up, f->dones_not_once);
}

void torture_print_summary(torture_run *run, const torture_findings *f, long long leftovers, int64_t elapsed_ms)
{
	int64_t acquisitions = 0, tries = 0;
	GString *faults = g_string_new("");

	for (guint i = 0; i < run->events->len; i++) {
		torture_event *e = &g_array_index(run->events, torture_event, i);

		acquisitions += e->kind == EV_ACQUIRED;
		tries += e->kind == EV_TRY;
	}
	for (int k = 0; k < FAULT_KINDS; k++) {
		int n = 0;

		for (guint i = 0; i < run->faults->len; i++)
			n += g_array_index(run->faults, torture_fault, i).kind == (torture_fault_kind)k;
		if (run->enabled[k])
			g_string_append_printf(faults, " %s=%d", torture_fault_name(k), n);
	}
	printf("torture: backend=%s seed=%" PRIu64 " %.1fs workers=%d resources=%d acquisitions=%" PRId64
	       " tries=%" PRId64 " writes=%" PRId64 " refused=%" PRId64 " faults:%s%s states: suspended=%" PRId64
	       " reconnected=%" PRId64 " lost=%" PRId64 " | overlaps=%" PRId64 " (explained %" PRId64
	       ") order-violations=%" PRId64 " stale-writes=%" PRId64 " silent-losses=%" PRId64
	       " (explained %" PRId64 ") tokenless-grants=%" PRId64 " liveness-gaps=%" PRId64 " (longest wait %.2fs) leftovers=%lld crashes=%d\n",
	       torture_backend_name(run->backend), run->seed, elapsed_ms / 1000.0, run->workers, run->resources, acquisitions,
	       tries, f->writes_accepted, f->writes_refused, faults->len ? faults->str : " none",
	       run->fencing_off ? " (fencing check OFF)" : "", f->suspended, f->reconnected, f->lost, f->overlaps,
	       f->overlaps_explained, f->order_violations, f->stale_accepted, f->silent_losses,
	       f->silent_losses_explained, f->tokenless_grants, f->liveness_gaps, f->longest_wait_us / 1e6, leftovers, run->crashes);
	g_string_free(faults, TRUE);
	print_recipes(run, f);
	if (f->longest_wait_us)
		printf("torture: longest wait for a free resource: r%d from +%.3fs for %.3fs (the faults then allowed %.3fs)\n",
		       f->longest_wait_res, f->longest_wait_from / 1e6, f->longest_wait_us / 1e6,
		       f->longest_wait_allowed / 1e6);
	if (f->overlaps_explained) {
		printf("torture: overlaps explained by a fault of one of the two holders (or a Redis restart):");
		for (int k = 0; k < FAULT_KINDS; k++)
			if (f->explained_by[k])
				printf(" %s=%" PRId64, torture_fault_name(k), f->explained_by[k]);
		printf("\n");
	}
}

/*
 * Every event and fault, one a line, for a reader looking into a finding
 * ($DLOCK_TORTURE_EVENTS names the file), headed by what the checker
 * needs besides: `test-torture --recheck FILE` checks it again.  Times
 * are seconds since the run's start.
 */
void torture_dump(const torture_run *run)
{
	const torture_limits *lim = &run->limits;
	const char *path = g_getenv("DLOCK_TORTURE_EVENTS");
	FILE *out;

	if (!path || !(out = fopen(path, "w")))
		return;
	fprintf(out, "limits lease %" PRId64 " slack %" PRId64 " end +%.6f layout %s permits %u quorum %d strict %d\n",
	        lim->lease_us, lim->slack_us, (lim->run_end - lim->run_start) / 1e6, run->layout, lim->permits,
	        lim->quorum, lim->strict);
	for (guint i = 0; i < run->events->len; i++) {
		torture_event *e = &g_array_index(run->events, torture_event, i);

		fprintf(out, "+%.6f worker %d.%d owner %d %c %c r%d token %" PRIu64 " code %d aux %" PRId64 "\n",
		        (e->t - lim->run_start) / 1e6, e->slot, e->life, e->owner, e->kind, e->mode, e->res, e->token,
		        e->code, e->kind == EV_RELEASE ? e->aux - lim->run_start : e->aux);
	}
	for (guint i = 0; i < run->faults->len; i++) {
		torture_fault *f = &g_array_index(run->faults, torture_fault, i);

		fprintf(out, "fault %s worker %d.%d server %d +%.6f..+%.6f\n", torture_fault_name(f->kind), f->slot,
		        f->life, f->server, (f->start - lim->run_start) / 1e6, (f->end - lim->run_start) / 1e6);
	}
	fclose(out);
}

static int64_t usec(double seconds)
{
	return (int64_t)(seconds * 1e6 + (seconds < 0 ? -0.5 : 0.5));
}

/* One line of a dump into the run; false if it does not read as one. */
static bool read_line(torture_run *run, const char *line)
{
	torture_limits *lim = &run->limits;
	torture_event e = { 0 };
	torture_fault f = { 0 };
	char kind[2], mode[2], name[32], layout[TORTURE_MAX_RESOURCES + 1];
	double t, t2;
	int quorum, strict;

	if (sscanf(line, "limits lease %" SCNd64 " slack %" SCNd64 " end +%lf layout %8s permits %u quorum %d strict %d",
	           &lim->lease_us, &lim->slack_us, &t, layout, &lim->permits, &quorum, &strict) == 7) {
		lim->run_end = usec(t);
		lim->quorum = quorum;
		lim->strict = strict;
		g_strlcpy(run->layout, layout, sizeof(run->layout));
		lim->nres = run->resources = (int)strlen(layout);
		memcpy(lim->recipes, layout, (size_t)lim->nres);
		return true;
	}
	if (sscanf(line, "+%lf worker %d.%d owner %d %1s %1s r%d token %" SCNu64 " code %d aux %" SCNd64, &t, &e.slot,
	           &e.life, &e.owner, kind, mode, &e.res, &e.token, &e.code, &e.aux) == 10) {
		e.t = usec(t);
		e.kind = kind[0];
		e.mode = mode[0];
		g_array_append_val(run->events, e);
		return true;
	}
	if (sscanf(line, "fault %31s worker %d.%d server %d +%lf..+%lf", name, &f.slot, &f.life, &f.server, &t, &t2) == 6 &&
	    torture_fault_from_name(name) >= 0) {
		f.kind = (torture_fault_kind)torture_fault_from_name(name);
		f.start = usec(t);
		f.end = usec(t2);
		g_array_append_val(run->faults, f);
		return true;
	}
	return false;
}

int torture_recheck(const char *path)
{
	torture_run run = { 0 };
	torture_findings f;
	char *text = NULL, **lines;
	bool failed;

	if (!g_file_get_contents(path, &text, NULL, NULL)) {
		fprintf(stderr, "test-torture: cannot read %s\n", path);
		return 64;
	}
	run.events = g_array_new(FALSE, FALSE, sizeof(torture_event));
	run.faults = g_array_new(FALSE, FALSE, sizeof(torture_fault));
	lines = g_strsplit(text, "\n", -1);
	for (int i = 0; lines[i]; i++)
		if (*lines[i] && !read_line(&run, lines[i]))
			fprintf(stderr, "test-torture: %s:%d: not an event, fault or limits line\n", path, i + 1);
	g_strfreev(lines);
	g_free(text);
	/* RELEASE events carry their return time as aux. */
	torture_check(run.events, run.faults, &run.limits, &f);
	print_recipes(&run, &f);
	failed = torture_findings_failed(&f);
	printf("torture: recheck of %s: %s\n", path, failed ? "FAILED" : "passed");
	g_array_unref(run.events);
	g_array_unref(run.faults);
	return failed;
}

/*
 * The self-check passes only if the checker named every rule the rogue
 * broke (torture-rogue.c): each count must be above zero.
 */
int torture_self_check_verdict(const torture_run *run, const torture_findings *f)
{
	const struct {
		const char *name;
		int64_t count;
	} rules[] = {
		{ "two holders of a mutex", f->two_holders },
		{ "two writers", f->two_writers },
		{ "a reader beside a writer", f->reader_beside_writer },
		{ "more than N permit holders", f->permits_exceeded },
		{ "two leaders", f->two_leaders },
		{ "a token out of order", f->token_order },
		{ "an accepted write with a lower token", f->order_violations },
		{ "a stale write accepted", f->stale_accepted },
		{ "a silent loss", f->silent_losses },
		{ "a liveness gap (a secret hold)", f->liveness_gaps },
		{ "a lost hold kept up", f->upkeep_after_lost },
		{ "a try refused beside a free permit", f->busy_free_permit },
		{ "a result the wait does not allow", f->bad_results },
		{ "a crash", run->crashes },
	};
	GString *missed = g_string_new("");
	bool failed;

	for (guint i = 0; i < G_N_ELEMENTS(rules); i++)
		if (rules[i].count == 0)
			g_string_append_printf(missed, "%s%s", missed->len ? ", " : "", rules[i].name);
	failed = missed->len > 0;
	if (failed)
		printf("torture: self-check FAILED: the checker did not report the rogue worker's %s\n", missed->str);
	else
		printf("torture: self-check passed: the checker reported each rule the rogue worker broke\n");
	g_string_free(missed, TRUE);
	return failed;
}

