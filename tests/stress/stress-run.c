/* SPDX-License-Identifier: MIT */
/*
 * The stress run (stress.h): one thread per owner, each with a client of
 * its own, looping over acquires of the recipe with a wait drawn from 0,
 * 1-10 ms, 100 ms and forever; a canceler thread cancels an acquire under
 * way at its planned moment (every wait forever, and one in five of the
 * others); every result is judged by what the wait allows and how soon it
 * came, every hold by the referee (stress-check.c).
 */
#include "stress-check.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <dlock.h>

#include "test-util.h"

/* One owner: its thread, client, handles and the cancel planned for the
 * acquire under way. */
typedef struct owner {
	int index;
	struct run *run;
	GThread *thread;
	GRand *rand;
	dlock_client *client;
	dlock_lock *lock;       /* mutex, write, permit, or the election's */
	dlock_lock *read;       /* read-write: the READ handle */
	dlock_election *election;
	GMutex mu;              /* guards the five below */
	bool in_flight;
	bool election_call;     /* the call under way is a campaign */
	dlock_lock *target;     /* the handle of the acquire under way */
	int64_t cancel_at;      /* µs, 0 none */
	int64_t canceled_at;    /* µs, 0 none */
	/* election callbacks (the callback thread's, read after the free) */
	int elected, resigned, ended;
	/* what it did */
	int campaigns_won, resigns_ok;
} owner;

typedef struct run {
	const stress_config *cfg;
	stress_report *report;
	stress_referee *ref;
	owner owners[STRESS_MAX_THREADS];
	int64_t slack_us;
	int64_t until;  /* µs */
	int stop;       /* atomic: the canceler's end */
	GMutex count_mu;
} run;

const char *stress_recipe_name(stress_recipe recipe)
{
	static const char *const names[] = { "mutex", "read-write", "semaphore", "election" };

	return names[recipe];
}

static void on_election(dlock_election *e, dlock_election_event event, const char *id, void *data)
{
	owner *o = data;

	(void)e;
	(void)id;
	if (event == DLOCK_ELECTION_ELECTED)
		o->elected++;
	else if (event == DLOCK_ELECTION_RESIGNED)
		o->resigned++;
	else if (event == DLOCK_ELECTION_LOST || event == DLOCK_ELECTION_SUSPENDED)
		o->ended++;
}

static dlock_lock *handle(owner *o, dlock_mode mode)
{
	dlock_lock *lock;

	if (dlock_lock_new(o->client, o->run->cfg->resource, &lock) != DLOCK_OK)
		g_error("stress: dlock_lock_new: %s", dlock_last_error_message());
	if (mode != DLOCK_MODE_EXCLUSIVE)
		dlock_lock_set_mode(lock, mode);
	if (o->run->cfg->recipe == STRESS_SEMAPHORE)
		dlock_lock_set_permits(lock, o->run->cfg->permits);
	return lock;
}

static void owner_open(run *r, owner *o, int index)
{
	const stress_config *cfg = r->cfg;
	char id[32];

	o->index = index;
	o->run = r;
	o->rand = g_rand_new_with_seed(cfg->seed * 7919u + (guint32)index);
	g_mutex_init(&o->mu);
	if (dlock_client_new(cfg->uri, &o->client) != DLOCK_OK)
		g_error("stress: dlock_client_new: %s", dlock_last_error_message());
	switch (cfg->recipe) {
	case STRESS_ELECTION:
		g_snprintf(id, sizeof(id), "stress-%d", index);
		if (dlock_election_new(o->client, cfg->resource, id, &o->election) != DLOCK_OK)
			g_error("stress: dlock_election_new: %s", dlock_last_error_message());
		dlock_election_set_callback(o->election, on_election, o);
		o->lock = dlock_election_lock(o->election);
		break;
	case STRESS_RW:
		o->lock = handle(o, DLOCK_MODE_WRITE);
		o->read = handle(o, DLOCK_MODE_READ);
		break;
	default:
		o->lock = handle(o, DLOCK_MODE_EXCLUSIVE);
		break;
	}
}

/* Free the owner's handles and client; then its election's callbacks
 * must match what it did. */
static void owner_close(run *r, owner *o)
{
	bool participant = r->cfg->recipe == STRESS_ELECTION;

	dlock_lock_free(o->lock); /* a participant's election is freed already */
	dlock_lock_free(o->read);
	dlock_client_free(o->client);
	if (participant && (o->elected != o->campaigns_won || o->resigned != o->resigns_ok || o->ended))
		stress_violation(r->ref, "ELECTION EVENTS: owner %d won %d campaigns and resigned %d times, its callback "
		                 "got ELECTED %d, RESIGNED %d and SUSPENDED or LOST %d times (on a healthy server)",
		                 o->index, o->campaigns_won, o->resigns_ok, o->elected, o->resigned, o->ended);
	g_rand_free(o->rand);
	g_mutex_clear(&o->mu);
}

/* ---- waits, cancels and results ---------------------------------------------- */

static int64_t pick_wait(owner *o)
{
	if (o->run->cfg->never_give_up)
		return g_rand_boolean(o->rand) ? 0 : -1;
	switch (g_rand_int_range(o->rand, 0, 4)) {
	case 0:
		return 0;
	case 1:
		return g_rand_int_range(o->rand, 1, 11);
	case 2:
		return 100;
	default:
		return -1;
	}
}

/* When to cancel an acquire with this wait (µs from now), 0 never:
 * always a wait forever, one in five of the others. */
static int64_t pick_cancel(owner *o, int64_t wait_ms)
{
	if (o->run->cfg->never_give_up || (wait_ms >= 0 && g_rand_int_range(o->rand, 0, 5) != 0))
		return 0;
	return g_rand_int_range(o->rand, 0, (gint32)(wait_ms >= 0 ? wait_ms + 20 : 300) * 1000) + 1;
}

static gpointer canceler_main(gpointer data)
{
	run *r = data;

	while (!g_atomic_int_get(&r->stop)) {
		int64_t now = g_get_monotonic_time();

		for (int i = 0; i < r->cfg->threads; i++) {
			owner *o = &r->owners[i];

			g_mutex_lock(&o->mu);
			if (o->in_flight && o->cancel_at && now >= o->cancel_at && !o->canceled_at) {
				o->canceled_at = g_get_monotonic_time();
				if (o->election_call)
					dlock_election_cancel(o->election);
				else
					dlock_lock_cancel(o->target);
				g_mutex_lock(&r->count_mu);
				r->report->cancels_sent++;
				g_mutex_unlock(&r->count_mu);
			}
			g_mutex_unlock(&o->mu);
		}
		g_usleep(500);
	}
	return NULL;
}

static void count(run *r, int rc)
{
	g_mutex_lock(&r->count_mu);
	r->report->acquires++;
	r->report->granted += rc == DLOCK_OK;
	r->report->busy += rc == DLOCK_EBUSY;
	r->report->timed_out += rc == DLOCK_ETIMEDOUT;
	r->report->canceled += rc == DLOCK_ECANCELED;
	g_mutex_unlock(&r->count_mu);
}

/* Whether rc is a result the wait (and a cancel sent or not) allows. */
static bool allowed(int rc, int64_t wait_ms, bool canceled)
{
	if (rc == DLOCK_OK || (rc == DLOCK_ECANCELED && canceled))
		return true;
	if (wait_ms == 0)
		return rc == DLOCK_EBUSY;
	return wait_ms > 0 && rc == DLOCK_ETIMEDOUT;
}

/*
 * One acquire (or campaign) with a planned cancel, judged: its result and
 * how soon it came.  Returns rc; the referee has the hold if DLOCK_OK.
 */
static int acquire(owner *o, dlock_lock *lock, stress_mode mode, int64_t wait_ms, bool cancelable)
{
	run *r = o->run;
	int64_t cancel_in = cancelable ? pick_cancel(o, wait_ms) : 0, t0, t1, canceled_at;
	stress_try t;
	uint64_t token;
	int rc;

	stress_try_begin(r->ref, &t, o->index, mode, wait_ms);
	g_mutex_lock(&o->mu);
	t0 = g_get_monotonic_time();
	o->in_flight = true;
	o->election_call = mode == MODE_LEADER;
	o->target = lock;
	o->cancel_at = cancel_in ? t0 + cancel_in : 0;
	o->canceled_at = 0;
	g_mutex_unlock(&o->mu);
	rc = mode == MODE_LEADER ? dlock_election_campaign(o->election, wait_ms) : dlock_acquire(lock, wait_ms);
	t1 = g_get_monotonic_time();
	g_mutex_lock(&o->mu);
	o->in_flight = false;
	canceled_at = o->canceled_at;
	g_mutex_unlock(&o->mu);
	token = rc == DLOCK_OK ? (mode == MODE_LEADER ? dlock_election_fencing_token(o->election) : dlock_fencing_token(lock))
	                       : 0;
	stress_try_end(r->ref, &t, rc, token);
	count(r, rc);
	if (!allowed(rc, wait_ms, canceled_at != 0))
		stress_violation(r->ref, "RESULT NOT ALLOWED: owner %d's %s acquire with wait %" PRId64 " ms%s returned %s after "
		                 "%.1f ms (%s)",
		                 o->index, stress_mode_name(mode), wait_ms,
		                 canceled_at ? " (canceled)" : "", dlock_code_name(rc), (t1 - t0) / 1e3,
		                 dlock_last_error_message());
	else if (wait_ms >= 0 && t1 - t0 > wait_ms * 1000 + r->slack_us)
		stress_violation(r->ref, "LATE: owner %d's %s acquire with wait %" PRId64 " ms returned %s after %.1f ms",
		                 o->index, stress_mode_name(mode), wait_ms, dlock_code_name(rc), (t1 - t0) / 1e3);
	else if (rc == DLOCK_ECANCELED && t1 - canceled_at > r->slack_us)
		stress_violation(r->ref, "LATE CANCEL: owner %d's %s acquire returned DLOCK_ECANCELED %.1f ms after the cancel",
		                 o->index, stress_mode_name(mode), (t1 - canceled_at) / 1e3);
	return rc;
}

static void release(owner *o, dlock_lock *lock, stress_mode mode)
{
	run *r = o->run;
	int rc;

	stress_release_begin(r->ref, o->index, mode);
	rc = mode == MODE_LEADER ? dlock_election_resign(o->election) : dlock_release(lock);
	stress_release_end(r->ref, o->index, mode);
	if (rc != DLOCK_OK)
		stress_violation(r->ref, "RELEASE: owner %d's %s returned %s (%s)", o->index,
		                 mode == MODE_LEADER ? "resign" : "release", dlock_code_name(rc), dlock_last_error_message());
	else if (mode == MODE_LEADER)
		o->resigns_ok++;
}

static void hold_a_little(owner *o)
{
	g_usleep((gulong)g_rand_int_range(o->rand, 0, 5000));
}

/* ---- rounds -------------------------------------------------------------------- */

/* A write hold downgraded: READ at once through the other handle, the
 * write hold released, the read hold kept a little. */
static void downgrade(owner *o)
{
	run *r = o->run;
	int rc = acquire(o, o->read, MODE_READ, 0, false);

	if (rc != DLOCK_OK) {
		stress_violation(r->ref, "DOWNGRADE: owner %d holding WRITE was refused READ: %s", o->index,
		                 dlock_code_name(rc));
		release(o, o->lock, MODE_WRITE);
		return;
	}
	g_mutex_lock(&r->count_mu);
	r->report->downgrades++;
	g_mutex_unlock(&r->count_mu);
	release(o, o->lock, MODE_WRITE);
	hold_a_little(o);
	release(o, o->read, MODE_READ);
}

static void round_of(owner *o)
{
	stress_recipe recipe = o->run->cfg->recipe;
	int64_t wait_ms = pick_wait(o);
	stress_mode mode = recipe == STRESS_MUTEX ? MODE_EXCLUSIVE : recipe == STRESS_SEMAPHORE ? MODE_PERMIT :
	                   recipe == STRESS_ELECTION ? MODE_LEADER : g_rand_boolean(o->rand) ? MODE_WRITE : MODE_READ;
	dlock_lock *lock = mode == MODE_READ ? o->read : o->lock;

	if (acquire(o, lock, mode, wait_ms, true) != DLOCK_OK)
		return;
	if (mode == MODE_LEADER)
		o->campaigns_won++;
	hold_a_little(o);
	if (mode == MODE_WRITE && g_rand_int_range(o->rand, 0, 3) == 0)
		downgrade(o);
	else
		release(o, lock, mode);
}

/* A participant's last round: elected, resigned, and the election freed
 * at once -- the resign's RESIGNED must still be delivered. */
static void last_election_round(owner *o)
{
	if (acquire(o, o->lock, MODE_LEADER, -1, false) == DLOCK_OK) {
		o->campaigns_won++;
		release(o, o->lock, MODE_LEADER);
	}
	dlock_election_free(o->election);
	o->election = NULL;
	o->lock = NULL;
}

static gpointer owner_main(gpointer data)
{
	owner *o = data;

	while (g_get_monotonic_time() < o->run->until) {
		round_of(o);
		g_usleep((gulong)g_rand_int_range(o->rand, 0, 2000));
	}
	if (o->election)
		last_election_round(o);
	return NULL;
}

void stress_run(const stress_config *cfg, stress_report *report)
{
	run r = { .cfg = cfg, .report = report };
	GThread *canceler;
	int64_t t0 = g_get_monotonic_time();

	g_assert(cfg->threads > 0 && cfg->threads <= STRESS_MAX_THREADS);
	memset(report, 0, sizeof(*report));
	g_mutex_init(&r.count_mu);
	r.ref = stress_referee_new(cfg, report);
	r.slack_us = test_slack(STRESS_SLACK_MS) * 1000;
	for (int i = 0; i < cfg->threads; i++)
		owner_open(&r, &r.owners[i], i);
	r.until = g_get_monotonic_time() + cfg->duration_ms * 1000;
	canceler = g_thread_new("stress-cancel", canceler_main, &r);
	for (int i = 0; i < cfg->threads; i++)
		r.owners[i].thread = g_thread_new("stress-owner", owner_main, &r.owners[i]);
	for (int i = 0; i < cfg->threads; i++)
		g_thread_join(r.owners[i].thread);
	g_atomic_int_set(&r.stop, 1);
	g_thread_join(canceler);
	for (int i = 0; i < cfg->threads; i++)
		owner_close(&r, &r.owners[i]);
	printf("stress: %s '%s' on %d owners for %.1f s: %" PRId64 " acquires (%" PRId64 " granted, %" PRId64
	       " busy, %" PRId64 " timed out, %" PRId64 " canceled of %" PRId64 " cancels sent), %" PRId64
	       " downgrades, %" PRId64 " violations\n",
	       stress_recipe_name(cfg->recipe), cfg->resource, cfg->threads, (g_get_monotonic_time() - t0) / 1e6,
	       report->acquires, report->granted, report->busy, report->timed_out, report->canceled,
	       report->cancels_sent, report->downgrades, report->violations);
	fflush(stdout);
	stress_referee_free(r.ref);
	g_mutex_clear(&r.count_mu);
}
