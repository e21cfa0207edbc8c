/* SPDX-License-Identifier: MIT */
/*
 * A torture worker's election rounds.
 *
 * The participant campaigns within the round's wait, leads a while
 * (writing to the storage only while dlock_election_is_leader() says so)
 * and resigns.  In about one round of four another thread resigns again
 * and again while the campaign runs and just after it returns, so
 * resignations land on every step of a campaign's end.  A campaign whose
 * leadership that thread already ended is reported as won but not held
 * (code 1 of EV_ACQUIRED), and its leadership believed nowhere.
 *
 * The callbacks are what a program driven by them believes: after every
 * round the worker waits (bounded) until the last event agrees with the
 * library's own answer -- ELECTED last while not leading, or leading
 * without an ELECTED, is reported as a note for the checker.  (A resign
 * that returns DLOCK_ELOST posts no event, as documented: that round's
 * end is not looked at.)
 */
#include "torture-worker.h"

#include <stdlib.h>

/* How long the callbacks may take to catch up, before slack. */
#define SETTLE_MS 3000

static void on_election(dlock_election *e, dlock_election_event event, const char *id, void *data)
{
	tw_election *te = data;
	uint64_t token = __atomic_load_n(&te->token, __ATOMIC_RELAXED);

	(void)e;
	(void)id;
	if (event == DLOCK_ELECTION_LEADER_CHANGED)
		return;
	tw_emit(EV_ELECTION, MODE_LEADER, 0, te->res, token, (int)event, 0);
	g_atomic_int_set(&te->view, (int)event);
	/* The same as a lock's states: ELECTED after SUSPENDED is
	 * RECONNECTED; after a campaign it says nothing new. */
	if (event == DLOCK_ELECTION_SUSPENDED) {
		te->suspended = true;
		tw_emit(EV_STATE, MODE_LEADER, 0, te->res, token, DLOCK_STATE_SUSPENDED, 0);
	} else if (event == DLOCK_ELECTION_ELECTED && te->suspended) {
		te->suspended = false;
		tw_emit(EV_STATE, MODE_LEADER, 0, te->res, token, DLOCK_STATE_RECONNECTED, 0);
	} else if (event == DLOCK_ELECTION_LOST) {
		te->suspended = false;
		tw_emit(EV_STATE, MODE_LEADER, 0, te->res, token, DLOCK_STATE_LOST, 0);
	} else {
		te->suspended = false;
	}
}

bool tw_election_open(tw_election *te, dlock_client *client, int res, const char *id)
{
	char name[32];

	te->res = res;
	tw_resource_name(res, name, sizeof(name));
	if (dlock_election_new(client, name, id, &te->e) != DLOCK_OK)
		return false;
	return dlock_election_set_callback(te->e, on_election, te) == DLOCK_OK;
}

void tw_election_close(tw_election *te)
{
	dlock_election_free(te->e);
}

/* The racing resign: from the campaign's start until told to stop. */
typedef struct racer {
	tw_election *te;
	guint32 seed;
	int stop; /* atomic */
} racer;

static gpointer racer_main(gpointer data)
{
	racer *rc = data;
	GRand *rand = g_rand_new_with_seed(rc->seed);

	while (!g_atomic_int_get(&rc->stop)) {
		int64_t t0 = g_get_monotonic_time();
		int r = dlock_election_resign(rc->te->e);

		if (r != DLOCK_ENOTHELD)
			tw_emit_at(t0, EV_RELEASE, MODE_LEADER, 0, rc->te->res,
			           __atomic_load_n(&rc->te->token, __ATOMIC_RELAXED), r, g_get_monotonic_time());
		g_usleep((gulong)g_rand_int_range(rand, 20, 300));
	}
	g_rand_free(rand);
	return NULL;
}

static bool view_not_elected(tw_election *te)
{
	return g_atomic_int_get(&te->view) != DLOCK_ELECTION_ELECTED;
}

/* Wait (bounded) for the callbacks to agree with the library: a
 * participant that does not lead must not have ELECTED as its last
 * event, one that leads must have it. */
static void settle(tw_election *te, bool leading_expected)
{
	int64_t until = g_get_monotonic_time() + (int64_t)SETTLE_MS * 1000;

	for (;;) {
		bool leading = dlock_election_is_leader(te->e);
		bool elected = !view_not_elected(te);

		if (leading != leading_expected || leading == elected)
			return;
		if (g_get_monotonic_time() >= until)
			break;
		g_usleep(1000);
	}
	tw_emit(EV_NOTE, MODE_LEADER, 0, te->res, __atomic_load_n(&te->token, __ATOMIC_RELAXED),
	        leading_expected ? NOTE_LEADING_NOT_ELECTED : NOTE_ELECTED_NOT_LEADING, 0);
}

/* Resign; its result. */
static int resign(tw_election *te)
{
	int64_t t0 = g_get_monotonic_time();
	int rc = dlock_election_resign(te->e);

	tw_emit_at(t0, EV_RELEASE, MODE_LEADER, 0, te->res, __atomic_load_n(&te->token, __ATOMIC_RELAXED), rc,
	           g_get_monotonic_time());
	return rc;
}

void tw_election_round(GRand *rand, tw_election *te, int64_t wait_ms)
{
	racer rc = { te, g_rand_int(rand), 0 };
	GThread *thread = NULL;
	int dice = g_rand_int_range(rand, 0, 100);
	uint64_t token;
	int r;

	tw_emit(EV_TRY, MODE_LEADER, 0, te->res, 0, 0, wait_ms);
	if (dice < 25)
		thread = g_thread_new("torture-resign", racer_main, &rc);
	r = tw_async_pick(rand) ? tw_campaign_async(te->e, te->res, wait_ms, rand)
	                        : dlock_election_campaign(te->e, wait_ms);
	if (thread) {
		g_usleep(3000);
		g_atomic_int_set(&rc.stop, 1);
		g_thread_join(thread);
	}
	if (r != DLOCK_OK) {
		tw_failed(MODE_LEADER, 0, te->res, r);
		settle(te, false);
		return;
	}
	token = dlock_election_fencing_token(te->e);
	if (!dlock_election_is_leader(te->e)) {
		/* Resigned by the racing thread, or suspended already: not
		 * believed; whatever is left is resigned. */
		tw_emit(EV_ACQUIRED, MODE_LEADER, 0, te->res, token, 1, 0);
		resign(te);
		settle(te, false);
		return;
	}
	__atomic_store_n(&te->token, token, __ATOMIC_RELAXED);
	tw_emit(EV_ACQUIRED, MODE_LEADER, 0, te->res, token, 0, 0);
	if (dlock_election_is_leader(te->e))
		tw_store_write(MODE_LEADER, 0, te->res, token);
	dice = g_rand_int_range(rand, 0, 100);
	tw_hold_for(dice < 50 ? 0 : dice < 92 ? g_rand_int_range(rand, 1, 200) : g_rand_int_range(rand, 200, 1500));
	if (dlock_election_is_leader(te->e))
		tw_store_write(MODE_LEADER, 0, te->res, token);
	settle(te, true);
	r = resign(te);
	__atomic_store_n(&te->token, 0, __ATOMIC_RELAXED);
	/* A resign that finds the leadership already lost says so with
	 * DLOCK_ELOST alone: no event is promised for it. */
	if (r != DLOCK_ELOST)
		settle(te, false);
}
