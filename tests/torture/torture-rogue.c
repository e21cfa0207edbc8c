/* SPDX-License-Identifier: MIT */
/*
 * The rogue worker of --self-check: it breaks, on purpose and in one run,
 * every rule the checker is there to enforce, and the self-check passes
 * only if each is reported by name.  Owners are clients of its own
 * (owner numbers in its events), so it needs no honest worker's help; its
 * stale holds are leases without a watchdog (500 ms) whose LOST it
 * ignores, and the rest are lies in what it reports.
 *
 * On the layout's resources, each stage on a thread of its own:
 *  - mutex: owner 0 keeps writing with its stale token for 3 s while
 *    owner 7 is granted the lock and writes (two holders, a write with a
 *    lower token accepted -- the storage's fencing is off --, a stale
 *    write, a silent loss); then owner 0 holds again, reports LOST at
 *    once and keeps the hold 6 s while owner 5 tries (a liveness gap, a
 *    lost hold keeping others out); it also reports an acquire that
 *    returned DLOCK_EUNAVAILABLE with no fault anywhere;
 *  - read-write: owner 1 believes its stale WRITE while owner 2 takes
 *    WRITE (two writers) and owner 3 READ (a reader beside a writer),
 *    owner 3 reporting owner 1's token as its own (token order);
 *  - semaphore: owner 4 reports a try refused while every permit was
 *    free; owner 1 believes its stale permit while owners 2 and 3 take
 *    the other permits (N+1 holders);
 *  - election: owner 1 believes its stale leadership while owner 2 is
 *    elected (two leaders).
 * Then it dies of a signal nobody sent it (a crash).
 */
#include "torture-worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

typedef struct stage {
	const char *uri;
	int res;
	uint32_t permits;
} stage;

static dlock_client *client_of(const char *uri)
{
	dlock_client *client;

	if (dlock_client_new(uri, &client) != DLOCK_OK)
		exit(2);
	return client;
}

/* A handle of its own client, mode or permits set; stale: a 500 ms lease
 * without a watchdog. */
static dlock_lock *handle(dlock_client *client, int res, dlock_mode mode, uint32_t permits, bool stale)
{
	char name[32];
	dlock_lock *lock;

	tw_resource_name(res, name, sizeof(name));
	if (dlock_lock_new(client, name, &lock) != DLOCK_OK)
		exit(2);
	if (mode != DLOCK_MODE_EXCLUSIVE)
		dlock_lock_set_mode(lock, mode);
	if (permits > 1)
		dlock_lock_set_permits(lock, permits);
	if (stale) {
		dlock_lock_set_ttl(lock, 500);
		dlock_lock_set_watchdog(lock, 0);
	}
	return lock;
}

/* Acquire and report; the token reported (lie_token if not 0). */
static uint64_t take(dlock_lock *lock, char mode, int owner, int res, uint64_t lie_token)
{
	uint64_t token;

	tw_emit(EV_TRY, mode, owner, res, 0, 0, 5000);
	if (dlock_acquire(lock, 5000) != DLOCK_OK) {
		tw_emit(EV_FAILED, mode, owner, res, 0, DLOCK_ETIMEDOUT, 0);
		return 0;
	}
	token = lie_token ? lie_token : dlock_fencing_token(lock);
	tw_emit(EV_ACQUIRED, mode, owner, res, token, 0, 0);
	return token;
}

/* Release and report it as clean, whatever it returned. */
static void give_back(dlock_lock *lock, char mode, int owner, int res, uint64_t token)
{
	int64_t t0 = g_get_monotonic_time();

	(void)dlock_release(lock);
	tw_emit_at(t0, EV_RELEASE, mode, owner, res, token, DLOCK_OK, g_get_monotonic_time());
}

typedef struct trier {
	const char *uri;
	int res, owner;
	int64_t delay_ms, wait_ms;
} trier;

/* Another owner that writes as soon as it is granted, or keeps trying. */
static gpointer trier_main(gpointer data)
{
	trier *t = data;
	dlock_client *client = client_of(t->uri);
	dlock_lock *lock = handle(client, t->res, DLOCK_MODE_EXCLUSIVE, 1, false);
	uint64_t token;
	int rc;

	g_usleep((gulong)t->delay_ms * 1000);
	tw_emit(EV_TRY, MODE_EXCLUSIVE, t->owner, t->res, 0, 0, t->wait_ms);
	rc = dlock_acquire(lock, t->wait_ms);
	if (rc == DLOCK_OK) {
		token = dlock_fencing_token(lock);
		tw_emit(EV_ACQUIRED, MODE_EXCLUSIVE, t->owner, t->res, token, 0, 0);
		tw_store_write(MODE_EXCLUSIVE, t->owner, t->res, token);
		g_usleep(300000);
		give_back(lock, MODE_EXCLUSIVE, t->owner, t->res, token);
	} else {
		tw_emit(EV_FAILED, MODE_EXCLUSIVE, t->owner, t->res, 0, rc, 0);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	return NULL;
}

static void mutex_stage(const char *uri, int res)
{
	dlock_client *client = client_of(uri);
	dlock_lock *lock = handle(client, res, DLOCK_MODE_EXCLUSIVE, 1, true);
	dlock_lock *secret = handle(client, res, DLOCK_MODE_EXCLUSIVE, 1, false);
	trier second = { uri, res, 7, 800, 5000 }, waiter = { uri, res, 5, 300, 5500 };
	GThread *thread;
	uint64_t token;

	/* A result no wait allows on a healthy server. */
	tw_emit(EV_TRY, MODE_EXCLUSIVE, 6, res, 0, 0, 1000);
	tw_emit(EV_FAILED, MODE_EXCLUSIVE, 6, res, 0, DLOCK_EUNAVAILABLE, 0);

	/* Stale writes beside a second holder. */
	thread = g_thread_new("rogue-second", trier_main, &second);
	if ((token = take(lock, MODE_EXCLUSIVE, 0, res, 0))) {
		for (int i = 0; i < 30; i++) {
			tw_store_write(MODE_EXCLUSIVE, 0, res, token);
			g_usleep(100000);
		}
		give_back(lock, MODE_EXCLUSIVE, 0, res, token);
	}
	g_thread_join(thread);

	/* A hold reported LOST and kept while another owner waits. */
	thread = g_thread_new("rogue-waiter", trier_main, &waiter);
	if ((token = take(secret, MODE_EXCLUSIVE, 0, res, 0))) {
		tw_emit(EV_STATE, MODE_EXCLUSIVE, 0, res, token, DLOCK_STATE_LOST, 0);
		g_usleep(6000000);
		give_back(secret, MODE_EXCLUSIVE, 0, res, token);
	}
	g_thread_join(thread);
	dlock_lock_free(lock);
	dlock_lock_free(secret);
	dlock_client_free(client);
}

/* Owner 1 believes a stale hold for 3 s; meanwhile the others come in. */
static gpointer rw_stage(gpointer data)
{
	stage *s = data;
	dlock_client *c1 = client_of(s->uri), *c2 = client_of(s->uri), *c3 = client_of(s->uri);
	dlock_lock *w1 = handle(c1, s->res, DLOCK_MODE_WRITE, 1, true);
	dlock_lock *w2 = handle(c2, s->res, DLOCK_MODE_WRITE, 1, false);
	dlock_lock *r3 = handle(c3, s->res, DLOCK_MODE_READ, 1, false);
	int64_t start = g_get_monotonic_time();
	uint64_t t1, t2, t3;

	t1 = take(w1, MODE_WRITE, 1, s->res, 0);
	g_usleep(800000);
	if ((t2 = take(w2, MODE_WRITE, 2, s->res, 0))) {
		g_usleep(200000);
		give_back(w2, MODE_WRITE, 2, s->res, t2);
	}
	/* Owner 3 reports owner 1's token: a later hold, not a larger token. */
	if ((t3 = take(r3, MODE_READ, 3, s->res, t1 ? t1 : 1))) {
		g_usleep(200000);
		give_back(r3, MODE_READ, 3, s->res, t3);
	}
	g_usleep((gulong)MAX(0, start + 3000000 - g_get_monotonic_time()));
	if (t1)
		give_back(w1, MODE_WRITE, 1, s->res, t1);
	dlock_lock_free(w1);
	dlock_lock_free(w2);
	dlock_lock_free(r3);
	dlock_client_free(c1);
	dlock_client_free(c2);
	dlock_client_free(c3);
	return NULL;
}

static gpointer semaphore_stage(gpointer data)
{
	stage *s = data;
	dlock_client *c[3] = { client_of(s->uri), client_of(s->uri), client_of(s->uri) };
	dlock_lock *p[3];
	uint64_t t[3] = { 0 };
	int64_t start = g_get_monotonic_time();

	/* A try refused although (for all the rogue knows) no permit is taken. */
	tw_emit(EV_TRY, MODE_PERMIT, 4, s->res, 0, 0, 0);
	tw_emit(EV_FAILED, MODE_PERMIT, 4, s->res, 0, DLOCK_EBUSY, 0);
	for (int i = 0; i < 3; i++)
		p[i] = handle(c[i], s->res, DLOCK_MODE_EXCLUSIVE, s->permits, i == 0);
	t[0] = take(p[0], MODE_PERMIT, 1, s->res, 0);
	g_usleep(800000);
	/* Every other permit, beside the stale one. */
	for (uint32_t i = 1; i < s->permits + 1 && i < 3; i++)
		t[i] = take(p[i], MODE_PERMIT, (int)i + 1, s->res, 0);
	g_usleep(200000);
	for (int i = 2; i >= 1; i--)
		if (t[i])
			give_back(p[i], MODE_PERMIT, i + 1, s->res, t[i]);
	g_usleep((gulong)MAX(0, start + 3000000 - g_get_monotonic_time()));
	if (t[0])
		give_back(p[0], MODE_PERMIT, 1, s->res, t[0]);
	for (int i = 0; i < 3; i++) {
		dlock_lock_free(p[i]);
		dlock_client_free(c[i]);
	}
	return NULL;
}

static gpointer election_stage(gpointer data)
{
	stage *s = data;
	dlock_client *c1 = client_of(s->uri), *c2 = client_of(s->uri);
	dlock_election *e1, *e2;
	char name[32];
	int64_t start = g_get_monotonic_time(), t0;
	uint64_t t1 = 0, t2 = 0;

	tw_resource_name(s->res, name, sizeof(name));
	if (dlock_election_new(c1, name, "rogue-1", &e1) != DLOCK_OK ||
	    dlock_election_new(c2, name, "rogue-2", &e2) != DLOCK_OK)
		exit(2);
	dlock_lock_set_ttl(dlock_election_lock(e1), 500);
	dlock_lock_set_watchdog(dlock_election_lock(e1), 0);
	tw_emit(EV_TRY, MODE_LEADER, 1, s->res, 0, 0, 5000);
	if (dlock_election_campaign(e1, 5000) == DLOCK_OK)
		tw_emit(EV_ACQUIRED, MODE_LEADER, 1, s->res, t1 = dlock_election_fencing_token(e1), 0, 0);
	g_usleep(800000);
	tw_emit(EV_TRY, MODE_LEADER, 2, s->res, 0, 0, 5000);
	if (dlock_election_campaign(e2, 5000) == DLOCK_OK) {
		tw_emit(EV_ACQUIRED, MODE_LEADER, 2, s->res, t2 = dlock_election_fencing_token(e2), 0, 0);
		g_usleep(200000);
		t0 = g_get_monotonic_time();
		(void)dlock_election_resign(e2);
		tw_emit_at(t0, EV_RELEASE, MODE_LEADER, 2, s->res, t2, DLOCK_OK, g_get_monotonic_time());
	}
	g_usleep((gulong)MAX(0, start + 3000000 - g_get_monotonic_time()));
	if (t1) {
		t0 = g_get_monotonic_time();
		(void)dlock_election_resign(e1);
		tw_emit_at(t0, EV_RELEASE, MODE_LEADER, 1, s->res, t1, DLOCK_OK, g_get_monotonic_time());
	}
	dlock_election_free(e1);
	dlock_election_free(e2);
	dlock_client_free(c1);
	dlock_client_free(c2);
	return NULL;
}

void tw_rogue_main(const char *uri, const char *layout, uint32_t permits)
{
	stage stages[TORTURE_MAX_RESOURCES];
	GThread *threads[TORTURE_MAX_RESOURCES] = { NULL };
	int mutex_res = -1, n = (int)strlen(layout);

	for (int r = 0; r < n; r++) {
		stages[r] = (stage){ uri, r, permits };
		if (layout[r] == RECIPE_MUTEX && mutex_res < 0)
			mutex_res = r;
		else if (layout[r] == RECIPE_RW)
			threads[r] = g_thread_new("rogue-rw", rw_stage, &stages[r]);
		else if (layout[r] == RECIPE_SEMAPHORE)
			threads[r] = g_thread_new("rogue-permits", semaphore_stage, &stages[r]);
		else if (layout[r] == RECIPE_ELECTION)
			threads[r] = g_thread_new("rogue-election", election_stage, &stages[r]);
	}
	if (mutex_res >= 0)
		mutex_stage(uri, mutex_res);
	for (int r = 0; r < n; r++)
		if (threads[r])
			g_thread_join(threads[r]);
	/* And it dies of a signal nobody sent it (without a core). */
	setrlimit(RLIMIT_CORE, &(struct rlimit){ 0, 0 });
	abort();
}
