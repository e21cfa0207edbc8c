/* SPDX-License-Identifier: MIT */
/*
 * A torture worker: one process, one client, and for each resource the
 * handles of its recipe (torture.h):
 *  - mutex: an EXCLUSIVE handle;
 *  - read-write: a WRITE and a READ handle; a round takes one of them,
 *    and a write hold is sometimes downgraded (READ through the other
 *    handle, then the write hold released), now and then with the write
 *    handle freed from another thread while the downgrade runs;
 *  - semaphore: a handle set to N permits;
 *  - election: a participant (torture-elect.c).
 * It loops over rounds -- acquire one or two resources with a deadline
 * (sometimes 0 or a few ms), write to the storage service with the
 * fencing token when the hold is exclusive, sometimes hold a while,
 * release -- until SIGUSR1 asks it to stop.  A hold reported LOST is
 * kept unreleased for seconds, as a program that does not look would: a
 * lost hold must keep no one out.
 *
 * An honest worker writes only while dlock_held() says it holds, and
 * reports every state callback and every result.  Some make most calls
 * without a waiting thread (torture-async.c); their handles are owned by
 * the handle, and they downgrade no write hold.  The rogue is
 * torture-rogue.c.
 */
#include "torture-worker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile sig_atomic_t tw_stopping;
int tw_masters;
static GMutex out_lock;

void tw_resource_name(int res, char *buf, size_t size)
{
	torture_resource_name(res, tw_masters, buf, size);
}

/* A redis+cluster:// URI names every master as a seed: their number. */
static int cluster_masters(const char *uri)
{
	int n = 1;

	if (!g_str_has_prefix(uri, "redis+cluster://"))
		return 0;
	for (const char *p = uri; *p && *p != '?'; p++)
		n += *p == ',';
	return n;
}

void tw_emit_at(int64_t at, char kind, char mode, int owner, int res, uint64_t token, int code, int64_t aux)
{
	g_mutex_lock(&out_lock);
	printf("%c %" PRId64 " %d %" PRIu64 " %d %c %d %" PRId64 "\n", kind, at ? at : g_get_monotonic_time(), res,
	       token, code, mode, owner, aux);
	fflush(stdout);
	g_mutex_unlock(&out_lock);
}

void tw_emit(char kind, char mode, int owner, int res, uint64_t token, int code, int64_t aux)
{
	tw_emit_at(0, kind, mode, owner, res, token, code, aux);
}

void tw_failed(char mode, int owner, int res, int code)
{
	static int told; /* the first ten say enough */

	if (code != DLOCK_EBUSY && code != DLOCK_ETIMEDOUT && code != DLOCK_ECANCELED &&
	    g_atomic_int_add(&told, 1) < 10) {
		g_mutex_lock(&out_lock);
		printf("r%d %s acquire: %s: %s\n", res, torture_mode_name(mode), dlock_code_name(code),
		       dlock_last_error_message());
		g_mutex_unlock(&out_lock);
	}
	tw_emit(EV_FAILED, mode, owner, res, 0, code, 0);
}

bool tw_store_write(char mode, int owner, int res, uint64_t token)
{
	char reply[16];
	bool ok;

	/* One write and its answer at a time: the answers come in order. */
	g_mutex_lock(&out_lock);
	printf("%c %" PRId64 " %d %" PRIu64 " 0 %c %d 0\n", EV_WRITE, g_get_monotonic_time(), res, token, mode, owner);
	fflush(stdout);
	/* A stop asked meanwhile (SIGUSR1, without SA_RESTART) interrupts
	 * the read: the answer is still to come, and the round ends as any
	 * other, with the client freed before the exit.  At the end of stdin
	 * the orchestrator is gone: leave at once, as a killed worker would,
	 * running no exit handler (nor the leak check of a sanitized build)
	 * beside the library's threads. */
	while (!fgets(reply, sizeof(reply), stdin)) {
		if (!ferror(stdin) || errno != EINTR)
			_exit(0);
		clearerr(stdin);
	}
	ok = reply[0] == '1';
	g_mutex_unlock(&out_lock);
	return ok;
}

void tw_hold_for(int64_t ms)
{
	int64_t until = g_get_monotonic_time() + ms * 1000;

	while (!tw_stopping && g_get_monotonic_time() < until)
		g_usleep(10000);
}

static void on_stop(int sig)
{
	(void)sig;
	tw_stopping = 1;
}

/* ---- lock recipes ---------------------------------------------------------- */

/* A resource's handles.  which: 0 the main handle (EXCLUSIVE, WRITE or
 * the permit), 1 the READ handle of a read-write resource. */
typedef struct resource {
	int res;
	char recipe;
	const char *uri;
	dlock_client *client;
	dlock_lock *lock[2];
	char mode[2];
	uint64_t token[2]; /* atomic: the hold's token, for the state events */
	int lost[2];       /* atomic: LOST reported since the acquire */
	int cb[2];         /* user data of the state callbacks: res * 2 + which */
	tw_election election;
} resource;

static resource resources[TORTURE_MAX_RESOURCES];

static void on_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	int *cb = user_data, which = *cb % 2;
	resource *r = &resources[*cb / 2];

	(void)lock;
	if (state == DLOCK_STATE_LOST)
		g_atomic_int_set(&r->lost[which], 1);
	tw_emit(EV_STATE, r->mode[which], 0, r->res, __atomic_load_n(&r->token[which], __ATOMIC_RELAXED), (int)state, 0);
}

/* (Re)create handle which of r: its mode, permits, lease and callback. */
static bool make_handle(resource *r, int which, uint32_t permits)
{
	char name[32];
	dlock_lock *lock;

	tw_resource_name(r->res, name, sizeof(name));
	if (dlock_lock_new(r->client, name, &lock) != DLOCK_OK)
		return false;
	if (r->recipe == RECIPE_RW)
		dlock_lock_set_mode(lock, which ? DLOCK_MODE_READ : DLOCK_MODE_WRITE);
	else if (r->recipe == RECIPE_SEMAPHORE)
		dlock_lock_set_permits(lock, permits);
	/* Leases of different lengths fall due at different times in one
	 * watchdog (the URI's ttl is 1 s); not on Redlock, whose rounds
	 * have their own bound (Sentinel's commas name sentinels, a
	 * cluster's its seeds). */
	if ((g_str_has_prefix(r->uri, "redis://") && !strchr(r->uri, ',')) ||
	    g_str_has_prefix(r->uri, "redis+sentinel://") || g_str_has_prefix(r->uri, "redis+cluster://")) {
		if (r->res % 3 == 0)
			dlock_lock_set_ttl(lock, 700);
		else if (r->res % 3 == 1)
			dlock_lock_set_ttl(lock, 1500);
	}
	/* The calls without a waiting thread need a handle that owns. */
	if (tw_async != TW_ASYNC_NONE)
		dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE);
	r->cb[which] = r->res * 2 + which;
	dlock_lock_set_state_callback(lock, on_state, &r->cb[which]);
	r->lock[which] = lock;
	return true;
}

/* Acquire handle which of r within wait_ms, reporting the try and its end. */
static bool take(GRand *rand, resource *r, int which, int64_t wait_ms)
{
	int rc;

	tw_emit(EV_TRY, r->mode[which], 0, r->res, 0, 0, wait_ms);
	g_atomic_int_set(&r->lost[which], 0);
	if (tw_async_pick(rand))
		rc = tw_acquire_async(r->lock[which], r->mode[which], r->res, wait_ms, rand);
	else
		rc = dlock_acquire(r->lock[which], wait_ms);
	if (rc != DLOCK_OK) {
		tw_failed(r->mode[which], 0, r->res, rc);
		return false;
	}
	__atomic_store_n(&r->token[which], dlock_fencing_token(r->lock[which]), __ATOMIC_RELAXED);
	tw_emit(EV_ACQUIRED, r->mode[which], 0, r->res, r->token[which], 0, 0);
	return true;
}

/* Release handle which of r.  A hold reported LOST is kept a few seconds
 * first, as by a program that does not look: the library must not keep
 * others out meanwhile. */
static void give_back(GRand *rand, resource *r, int which)
{
	int64_t t0;
	int rc;

	if (g_atomic_int_get(&r->lost[which]))
		tw_hold_for(g_rand_int_range(rand, 4500, 6500));
	t0 = g_get_monotonic_time();
	if (tw_async_pick(rand))
		rc = tw_release_async(r->lock[which], r->mode[which], r->res, rand);
	else
		rc = dlock_release(r->lock[which]);
	tw_emit_at(t0, EV_RELEASE, r->mode[which], 0, r->res, r->token[which], rc, g_get_monotonic_time());
	__atomic_store_n(&r->token[which], 0, __ATOMIC_RELAXED);
}

static void write_if_held(resource *r, int which)
{
	if (r->mode[which] != MODE_READ && r->mode[which] != MODE_PERMIT && dlock_held(r->lock[which]))
		tw_store_write(r->mode[which], 0, r->res, r->token[which]);
}

/* Frees a write handle while the downgrade runs (another thread). */
typedef struct freer {
	resource *r;
	int64_t delay_us;
} freer;

static gpointer freer_main(gpointer data)
{
	freer *f = data;
	int64_t t0;

	g_usleep((gulong)f->delay_us);
	t0 = g_get_monotonic_time();
	dlock_lock_free(f->r->lock[0]);
	tw_emit_at(t0, EV_RELEASE, MODE_WRITE, 0, f->r->res, f->r->token[0], DLOCK_OK, g_get_monotonic_time());
	return NULL;
}

/*
 * Downgrade r's write hold: READ through the other handle, then the write
 * hold released, the read hold kept a while.  Sometimes the write handle
 * is freed from another thread meanwhile (its hold released by the free),
 * which the downgrade must notice: READ beside another owner's WRITE is a
 * violation whatever the timing.
 */
static void downgrade(GRand *rand, resource *r, int64_t wait_ms, uint32_t permits)
{
	freer f = { r, g_rand_int_range(rand, 0, 1500) };
	GThread *racer = NULL;
	bool got;

	if (g_rand_int_range(rand, 0, 100) < 30)
		racer = g_thread_new("torture-freer", freer_main, &f);
	got = take(rand, r, 1, wait_ms);
	if (racer) {
		g_thread_join(racer);
		__atomic_store_n(&r->token[0], 0, __ATOMIC_RELAXED);
		if (!make_handle(r, 0, permits))
			exit(2);
	} else {
		give_back(rand, r, 0);
	}
	if (!got)
		return;
	tw_hold_for(g_rand_int_range(rand, 0, 300));
	give_back(rand, r, 1);
}

/* A wait: mostly a deadline of a few seconds, sometimes a try or a few ms. */
static int64_t pick_wait(GRand *rand)
{
	int dice = g_rand_int_range(rand, 0, 100);

	return dice < 8 ? 0 : dice < 16 ? g_rand_int_range(rand, 1, 20) : g_rand_int_range(rand, 300, 3000);
}

/* One or two lock resources (never an election), first one of them. */
static void lock_round(GRand *rand, int nres, int first, uint32_t permits)
{
	int pick[2] = { first, -1 }, which[2] = { 0, 0 }, n = 1, got = 0;
	int64_t wait = pick_wait(rand), hold;

	if (g_rand_int_range(rand, 0, 10) < 3) {
		int other = g_rand_int_range(rand, 0, nres);

		/* One order for everyone keeps two-resource rounds from
		 * waiting on each other until their deadlines. */
		if (other != first && resources[other].recipe != RECIPE_ELECTION) {
			pick[0] = MIN(first, other);
			pick[1] = MAX(first, other);
			n = 2;
		}
	}
	for (int i = 0; i < n; i++) {
		resource *r = &resources[pick[i]];

		which[i] = r->recipe == RECIPE_RW && g_rand_boolean(rand) ? 1 : 0;
		if (!take(rand, r, which[i], wait))
			break;
		got++;
	}
	if (got == n) {
		int dice = g_rand_int_range(rand, 0, 100);

		for (int i = 0; i < n; i++)
			write_if_held(&resources[pick[i]], which[i]);
		hold = dice < 50 ? 0 : dice < 92 ? g_rand_int_range(rand, 1, 200) : g_rand_int_range(rand, 200, 1500);
		if (hold > 0) {
			tw_hold_for(hold);
			for (int i = 0; i < n; i++)
				write_if_held(&resources[pick[i]], which[i]);
		}
	}
	for (int i = got - 1; i >= 0; i--) {
		resource *r = &resources[pick[i]];

		if (r->recipe == RECIPE_RW && which[i] == 0 && tw_async == TW_ASYNC_NONE &&
		    g_rand_int_range(rand, 0, 100) < 30)
			downgrade(rand, r, wait, permits);
		else
			give_back(rand, r, which[i]);
	}
}

/* ---- the process ------------------------------------------------------------ */

static bool open_resource(dlock_client *client, const char *uri, int res, char recipe, const char *id,
                          uint32_t permits)
{
	resource *r = &resources[res];

	r->res = res;
	r->recipe = recipe;
	r->uri = uri;
	r->client = client;
	switch (recipe) {
	case RECIPE_ELECTION:
		return tw_election_open(&r->election, client, res, id);
	case RECIPE_RW:
		r->mode[0] = MODE_WRITE;
		r->mode[1] = MODE_READ;
		return make_handle(r, 0, permits) && make_handle(r, 1, permits);
	case RECIPE_SEMAPHORE:
		r->mode[0] = MODE_PERMIT;
		return make_handle(r, 0, permits);
	default:
		r->mode[0] = MODE_EXCLUSIVE;
		return make_handle(r, 0, permits);
	}
}

static void close_resource(resource *r)
{
	if (r->recipe == RECIPE_ELECTION) {
		tw_election_close(&r->election);
		return;
	}
	dlock_lock_free(r->lock[0]);
	dlock_lock_free(r->lock[1]);
}

/* argv: URI SLOT LIFE SEED LAYOUT PERMITS MODE */
int torture_worker_main(int argc, char **argv)
{
	dlock_client *client = NULL;
	struct sigaction sa = { .sa_handler = on_stop };
	const char *layout;
	uint32_t permits;
	GRand *rand;
	char id[32];
	int nres;

	if (argc < 7) {
		fprintf(stderr, "torture worker: expected URI SLOT LIFE SEED LAYOUT PERMITS MODE\n");
		return 64;
	}
	sigaction(SIGUSR1, &sa, NULL);
	/* A GLib critical is a broken assertion (a reference dropped twice,
	 * say): a crash the checker must count, not a line on stderr. */
	g_log_set_always_fatal(G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
	layout = argv[4];
	nres = (int)strlen(layout);
	permits = (uint32_t)strtoul(argv[5], NULL, 10);
	tw_masters = cluster_masters(argv[0]);
	if (nres < 1 || nres > TORTURE_MAX_RESOURCES || permits < 2)
		return 64;
	if (strcmp(argv[6], "rogue") == 0)
		tw_rogue_main(argv[0], layout, permits);
	rand = g_rand_new_with_seed((guint32)(strtoull(argv[3], NULL, 10) * 1000003u + strtoul(argv[1], NULL, 10) * 7919u +
	                                      strtoul(argv[2], NULL, 10)));
	if (dlock_client_new(argv[0], &client) != DLOCK_OK) {
		fprintf(stderr, "torture worker: client: %s\n", dlock_last_error_message());
		return 2;
	}
	if (!tw_async_start(client, atoi(argv[1]))) {
		fprintf(stderr, "torture worker: delivery: %s\n", dlock_last_error_message());
		return 2;
	}
	g_snprintf(id, sizeof(id), "w%s.%s", argv[1], argv[2]);
	for (int r = 0; r < nres; r++)
		if (!open_resource(client, argv[0], r, layout[r], id, permits))
			return 2;
	while (!tw_stopping) {
		int r = g_rand_int_range(rand, 0, nres);

		if (resources[r].recipe == RECIPE_ELECTION)
			tw_election_round(rand, &resources[r].election, pick_wait(rand));
		else
			lock_round(rand, nres, r, permits);
		g_usleep((gulong)g_rand_int_range(rand, 0, 20000));
	}
	tw_async_stop();
	for (int r = 0; r < nres; r++)
		close_resource(&resources[r]);
	dlock_client_free(client);
	tw_emit(EV_EXIT, MODE_NONE, 0, -1, 0, 0, 0);
	g_rand_free(rand);
	return 0;
}
