/*
 * A torture worker: one process, one client, one handle per resource,
 * looping acquire (one or two resources, with a deadline) -> write to the
 * storage service with the fencing token -> sometimes hold a while ->
 * release, until SIGUSR1 asks it to stop.
 *
 * It reports everything on stdout, one line per event:
 *   KIND TIME_US RESOURCE TOKEN CODE
 * and a write is a 'W' line answered by the storage service on stdin with
 * "1" (accepted) or "0" (refused by the fencing check).
 *
 * The last resource (when there are several) is taken as a leader
 * election instead (campaign, leading, resign): an election is a lock
 * whose holds carry the participant's id, so its leaders and the other
 * workers' lock holders of that resource exclude each other, and the
 * checker holds elections to the same rules under the same faults.
 *
 * An honest worker writes only while dlock_held() says it holds, and
 * reports every state callback.  A rogue worker (the checker's
 * self-check) lets its lease run out without a watchdog, ignores LOST,
 * keeps writing with its old token and reports its release as clean,
 * then holds the lock while saying it released it, then aborts: the
 * checker must catch each.
 */
#include "torture.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <dlock.h>

static GMutex out_lock;
static volatile sig_atomic_t stopping;
static uint64_t current_token[TORTURE_MAX_RESOURCES];
static bool rogue;

/* The state callback's thread reads the token of the hold it reports. */
static void set_token(int res, uint64_t token)
{
	__atomic_store_n(&current_token[res], token, __ATOMIC_RELAXED);
}

static void on_stop(int sig)
{
	(void)sig;
	stopping = 1;
}

/* One event line, stamped now unless at is not 0.  Lines from the state
 * callback's thread and the main thread must not interleave. */
static void emit_at(int64_t at, char kind, int res, uint64_t token, int code)
{
	g_mutex_lock(&out_lock);
	printf("%c %" PRId64 " %d %" PRIu64 " %d\n", kind, at ? at : g_get_monotonic_time(), res, token,
	       code);
	fflush(stdout);
	g_mutex_unlock(&out_lock);
}

static void emit(char kind, int res, uint64_t token, int code)
{
	emit_at(0, kind, res, token, code);
}

static void on_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	int res = GPOINTER_TO_INT(user_data);

	(void)lock;
	if (rogue)
		return;
	emit(EV_STATE, res, __atomic_load_n(&current_token[res], __ATOMIC_RELAXED), (int)state);
}

/* An election's events as the lock states they stand for: ELECTED after
 * SUSPENDED is RECONNECTED; after a campaign it says nothing new. */
static void on_election(dlock_election *e, dlock_election_event event, const char *id, void *data)
{
	static bool suspended[TORTURE_MAX_RESOURCES]; /* the callback thread's alone */
	int res = GPOINTER_TO_INT(data);

	(void)id;
	if (event == DLOCK_ELECTION_SUSPENDED) {
		suspended[res] = true;
		on_state(dlock_election_lock(e), DLOCK_STATE_SUSPENDED, data);
	} else if (event == DLOCK_ELECTION_ELECTED && suspended[res]) {
		suspended[res] = false;
		on_state(dlock_election_lock(e), DLOCK_STATE_RECONNECTED, data);
	} else if (event == DLOCK_ELECTION_LOST) {
		suspended[res] = false;
		on_state(dlock_election_lock(e), DLOCK_STATE_LOST, data);
	} else if (event == DLOCK_ELECTION_ELECTED || event == DLOCK_ELECTION_RESIGNED) {
		suspended[res] = false;
	}
}

/* A resource's handle: a lock, or an election and its handle. */
typedef struct handle {
	dlock_lock *lock;
	dlock_election *election;
} handle;

static int take(const handle *h, int64_t wait_ms)
{
	return h->election ? dlock_election_campaign(h->election, wait_ms) : dlock_acquire(h->lock, wait_ms);
}

static int give_back(const handle *h)
{
	return h->election ? dlock_election_resign(h->election) : dlock_release(h->lock);
}

/* Send one write to the storage service; whether it was accepted. */
static bool store_write(int res, uint64_t token)
{
	char reply[16];

	emit(EV_WRITE, res, token, 0);
	if (!fgets(reply, sizeof(reply), stdin))
		exit(0); /* the orchestrator is gone */
	return reply[0] == '1';
}

static void write_if_held(dlock_lock *lock, int res)
{
	if (!rogue && !dlock_held(lock))
		return;
	store_write(res, current_token[res]);
}

static void hold_for(int64_t ms)
{
	int64_t until = g_get_monotonic_time() + ms * 1000;

	while (!stopping && g_get_monotonic_time() < until)
		g_usleep(10000);
}

/*
 * The rogue's first act: a lease without watchdog that runs out, LOST
 * ignored, writes with the old token for 3 s, a release reported clean.
 */
static void rogue_stale_writes(dlock_lock *lock)
{
	emit(EV_TRY, 0, 0, 0);
	if (dlock_acquire(lock, 3000) != DLOCK_OK) {
		emit(EV_FAILED, 0, 0, DLOCK_ETIMEDOUT);
		return;
	}
	set_token(0, dlock_fencing_token(lock));
	emit(EV_ACQUIRED, 0, current_token[0], 0);
	for (int i = 0; i < 30 && !stopping; i++) {
		store_write(0, current_token[0]);
		hold_for(100);
	}
	emit(EV_RELEASE, 0, current_token[0], DLOCK_OK);
	(void)dlock_release(lock);
	set_token(0, 0);
}

/*
 * Its second: a hold kept alive by the watchdog for 6 s but reported
 * released at once, so the others wait on a lock nobody seems to hold.
 */
static void rogue_secret_hold(dlock_lock *lock)
{
	if (dlock_acquire(lock, 5000) != DLOCK_OK)
		return;
	hold_for(6000);
	(void)dlock_release(lock);
}

static void honest_round(GRand *rand, const handle *handles, int nres)
{
	int order[2], n = (nres > 1 && g_rand_int_range(rand, 0, 10) < 3) ? 2 : 1, got = 0;
	int64_t wait = g_rand_int_range(rand, 300, 3000), hold;

	order[0] = g_rand_int_range(rand, 0, nres);
	if (n == 2) {
		order[1] = (order[0] + g_rand_int_range(rand, 1, nres)) % nres;
		/* One order for everyone keeps two-resource rounds from
		 * waiting on each other until their deadlines. */
		if (order[1] < order[0]) {
			int t = order[0];
			order[0] = order[1];
			order[1] = t;
		}
	}
	for (int i = 0; i < n; i++) {
		int r = order[i], rc;

		emit(EV_TRY, r, 0, 0);
		rc = take(&handles[r], wait);
		if (rc != DLOCK_OK) {
			emit(EV_FAILED, r, 0, rc);
			break;
		}
		set_token(r, dlock_fencing_token(handles[r].lock));
		emit(EV_ACQUIRED, r, current_token[r], 0);
		got++;
	}
	if (got == n) {
		int dice = g_rand_int_range(rand, 0, 100);

		for (int i = 0; i < n; i++)
			write_if_held(handles[order[i]].lock, order[i]);
		hold = dice < 50 ? 0 : dice < 92 ? g_rand_int_range(rand, 1, 200) : g_rand_int_range(rand, 200, 1500);
		if (hold > 0) {
			hold_for(hold);
			for (int i = 0; i < n; i++)
				write_if_held(handles[order[i]].lock, order[i]);
		}
	}
	for (int i = got - 1; i >= 0; i--) {
		int r = order[i];
		int64_t t0 = g_get_monotonic_time();
		int rc = give_back(&handles[r]);

		emit_at(t0, EV_RELEASE, r, current_token[r], rc);
		set_token(r, 0);
	}
	g_usleep((gulong)g_rand_int_range(rand, 0, 20000));
}

/* argv: URI SLOT LIFE SEED NRES MODE */
int torture_worker_main(int argc, char **argv)
{
	dlock_client *client = NULL;
	handle handles[TORTURE_MAX_RESOURCES] = { { 0 } };
	dlock_lock **lock;
	struct sigaction sa = { .sa_handler = on_stop };
	GRand *rand;
	int nres, rc;

	if (argc < 6) {
		fprintf(stderr, "torture worker: expected URI SLOT LIFE SEED NRES MODE\n");
		return 64;
	}
	sigaction(SIGUSR1, &sa, NULL);
	rand = g_rand_new_with_seed((guint32)(strtoull(argv[3], NULL, 10) * 1000003u + strtoul(argv[1], NULL, 10) * 7919u +
	                                      strtoul(argv[2], NULL, 10)));
	nres = atoi(argv[4]);
	rogue = strcmp(argv[5], "rogue") == 0;
	if (nres < 1 || nres > TORTURE_MAX_RESOURCES)
		return 64;
	rc = dlock_client_new(argv[0], &client);
	if (rc != DLOCK_OK) {
		fprintf(stderr, "torture worker: client: %s\n", dlock_last_error_message());
		return 2;
	}
	for (int r = 0; r < nres; r++) {
		char name[32];

		g_snprintf(name, sizeof(name), "torture/r%d", r);
		lock = &handles[r].lock;
		if (!rogue && nres > 1 && r == nres - 1) {
			char id[32];

			g_snprintf(id, sizeof(id), "w%s.%s", argv[1], argv[2]);
			if (dlock_election_new(client, name, id, &handles[r].election) != DLOCK_OK)
				return 2;
			*lock = dlock_election_lock(handles[r].election);
			dlock_election_set_callback(handles[r].election, on_election, GINT_TO_POINTER(r));
		} else {
			if (dlock_lock_new(client, name, lock) != DLOCK_OK)
				return 2;
			dlock_lock_set_state_callback(*lock, on_state, GINT_TO_POINTER(r));
		}
		if (rogue) {
			dlock_lock_set_ttl(*lock, 500);
			dlock_lock_set_watchdog(*lock, 0);
		} else if (g_str_has_prefix(argv[0], "redis")) {
			/* Leases of different lengths fall due at different times
			 * in one watchdog (the URI's ttl is 1 s). */
			if (r % 3 == 0)
				dlock_lock_set_ttl(*lock, 700);
			else if (r % 3 == 1)
				dlock_lock_set_ttl(*lock, 1500);
		}
	}
	if (rogue) {
		dlock_lock *secret = NULL;
		char name[32];

		g_snprintf(name, sizeof(name), "torture/r0");
		if (dlock_lock_new(client, name, &secret) != DLOCK_OK)
			return 2;
		rogue_stale_writes(handles[0].lock);
		rogue_secret_hold(secret);
		dlock_lock_free(secret);
		/* And it dies of a signal nobody sent it (without a core). */
		setrlimit(RLIMIT_CORE, &(struct rlimit){ 0, 0 });
		abort();
	}
	while (!stopping)
		honest_round(rand, handles, nres);
	for (int r = 0; r < nres; r++) {
		if (handles[r].election)
			dlock_election_free(handles[r].election);
		else
			dlock_lock_free(handles[r].lock);
	}
	dlock_client_free(client);
	emit(EV_EXIT, -1, 0, 0);
	g_rand_free(rand);
	return 0;
}
