/* SPDX-License-Identifier: MIT */
/*
 * The stress run's referee: see stress-check.h.  Rules checked when an
 * acquire returns DLOCK_OK, against the holds registered then (other
 * owners'):
 *  - mutex: none ("TWO HOLDERS"); election: none ("TWO LEADERS");
 *  - read-write: a write hold beside none, a read hold beside no write
 *    hold ("TWO WRITERS", "READER BESIDE WRITER"); an owner's downgrade
 *    read hold beside its own write hold is one owner's;
 *  - semaphore: fewer than N ("MORE THAN N PERMITS");
 *  - tokens ("TOKEN ORDER"): larger than every hold's whose acquire had
 *    returned before this acquire began; and, for holds that exclude
 *    each other (a write class hold and any other, two readers excepted),
 *    larger than every one registered before it, which on a healthy
 *    server was released before this one was granted.  A downgrade's read
 *    hold continues its owner's write hold and may carry its token.
 * And when a semaphore's try (wait 0) returns DLOCK_EBUSY: at some moment
 * while it ran, N other owners were acquiring, holding or releasing, or
 * had given up an acquire less than STRESS_GHOST_MS before ("TRY REFUSED
 * BESIDE A FREE PERMIT"), else a permit was free all along.
 */
#include "stress-check.h"

#include <inttypes.h>
#include <stdio.h>

#include <dlock.h>

#include "test-util.h"

typedef struct held {
	int owner;
	stress_mode mode;
	uint64_t token;
} held;

struct stress_referee {
	GMutex mu;
	const stress_config *cfg;
	stress_report *report;
	GArray *holds;      /* held, registered */
	uint64_t max_any;   /* largest token of any hold registered so far */
	uint64_t max_write; /* ... of a write class hold */
	int busy;           /* semaphore: owners acquiring, holding or releasing */
	int64_t ghosts[STRESS_MAX_THREADS]; /* semaphore: until when an acquire
	                     * that gave up may have left its permit behind */
	GPtrArray *tries;   /* stress_try *: semaphore tries under way */
};

const char *stress_mode_name(stress_mode mode)
{
	static const char *const names[] = { "exclusive", "write", "read", "permit", "leader" };

	return names[mode];
}

static bool write_class(stress_mode mode)
{
	return mode == MODE_EXCLUSIVE || mode == MODE_WRITE || mode == MODE_LEADER;
}

stress_referee *stress_referee_new(const stress_config *cfg, stress_report *report)
{
	stress_referee *ref = g_new0(stress_referee, 1);

	g_mutex_init(&ref->mu);
	ref->cfg = cfg;
	ref->report = report;
	ref->holds = g_array_new(FALSE, FALSE, sizeof(held));
	ref->tries = g_ptr_array_new();
	return ref;
}

void stress_referee_free(stress_referee *ref)
{
	g_array_unref(ref->holds);
	g_ptr_array_unref(ref->tries);
	g_mutex_clear(&ref->mu);
	g_free(ref);
}

static void violation_v(stress_referee *ref, const char *fmt, va_list ap)
{
	char *text = g_strdup_vprintf(fmt, ap);

	if (++ref->report->violations <= 20)
		printf("stress: %s '%s': %s\n", stress_recipe_name(ref->cfg->recipe), ref->cfg->resource, text);
	else if (ref->report->violations == 21)
		printf("stress: (further violations not shown)\n");
	fflush(stdout);
	g_free(text);
}

void stress_violation(stress_referee *ref, const char *fmt, ...)
{
	va_list ap;

	g_mutex_lock(&ref->mu);
	va_start(ap, fmt);
	violation_v(ref, fmt, ap);
	va_end(ap);
	g_mutex_unlock(&ref->mu);
}

/* The same, with ref->mu held. */
G_GNUC_PRINTF(2, 3) static void violation_locked(stress_referee *ref, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	violation_v(ref, fmt, ap);
	va_end(ap);
}

/* Permits an acquire that gave up may have left behind, now. */
static int ghosts(const stress_referee *ref)
{
	int64_t now = g_get_monotonic_time();
	int n = 0;

	for (int i = 0; i < STRESS_MAX_THREADS; i++)
		n += ref->ghosts[i] > now;
	return n;
}

void stress_try_begin(stress_referee *ref, stress_try *t, int owner, stress_mode mode, int64_t wait_ms)
{
	g_mutex_lock(&ref->mu);
	*t = (stress_try){ owner, mode, wait_ms, ref->max_any, 0, 0, false };
	for (guint i = 0; mode == MODE_READ && i < ref->holds->len; i++) {
		held *h = &g_array_index(ref->holds, held, i);

		if (h->owner == owner && h->mode == MODE_WRITE)
			t->own_write = h->token;
	}
	if (mode == MODE_PERMIT) {
		t->others_max = ref->busy + ghosts(ref);
		ref->busy++;
		for (guint i = 0; i < ref->tries->len; i++) {
			stress_try *u = g_ptr_array_index(ref->tries, i);

			u->others_max = MAX(u->others_max, ref->busy - 1 + ghosts(ref));
		}
		if (wait_ms == 0) {
			g_ptr_array_add(ref->tries, t);
			t->listed = true;
		}
	}
	g_mutex_unlock(&ref->mu);
}

/* The new hold against the registered ones: exclusion. */
static void check_exclusion(stress_referee *ref, const stress_try *t, uint64_t token)
{
	int others = 0;

	for (guint i = 0; i < ref->holds->len; i++) {
		held *h = &g_array_index(ref->holds, held, i);

		if (h->owner == t->owner)
			continue;
		others++;
		if (t->mode == MODE_PERMIT)
			continue;
		if (t->mode == MODE_EXCLUSIVE)
			violation_locked(ref, "TWO HOLDERS: owner %d granted token %" PRIu64 " while owner %d holds token %" PRIu64,
			                 t->owner, token, h->owner, h->token);
		else if (t->mode == MODE_LEADER)
			violation_locked(ref, "TWO LEADERS: owner %d elected with token %" PRIu64 " while owner %d leads with token %" PRIu64,
			                 t->owner, token, h->owner, h->token);
		else if (t->mode == MODE_WRITE && h->mode == MODE_WRITE)
			violation_locked(ref, "TWO WRITERS: owner %d granted write token %" PRIu64 " while owner %d holds write token %" PRIu64,
			                 t->owner, token, h->owner, h->token);
		else if (t->mode == MODE_WRITE || h->mode == MODE_WRITE)
			violation_locked(ref, "READER BESIDE WRITER: owner %d granted %s token %" PRIu64 " while owner %d holds %s token %" PRIu64,
			                 t->owner, stress_mode_name(t->mode), token, h->owner, stress_mode_name(h->mode), h->token);
	}
	if (t->mode == MODE_PERMIT && (uint32_t)others + 1 > ref->cfg->permits)
		violation_locked(ref, "MORE THAN N PERMITS: owner %d granted a permit (token %" PRIu64 ") while %d other owners hold one of %u",
		                 t->owner, token, others, ref->cfg->permits);
}

/* Whether token follows floor: larger, or a downgrade's read hold
 * carrying its own write hold's token (one owner's continuous hold). */
static bool follows(const stress_try *t, uint64_t token, uint64_t floor)
{
	return token > floor || (token == floor && t->own_write == token);
}

static void check_token(stress_referee *ref, const stress_try *t, uint64_t token)
{
	if (token == 0)
		violation_locked(ref, "GRANT WITHOUT TOKEN: owner %d's %s acquire returned DLOCK_OK with token 0", t->owner,
		                 stress_mode_name(t->mode));
	else if (!follows(t, token, t->floor))
		violation_locked(ref, "TOKEN ORDER: owner %d's %s hold got token %" PRIu64 ", not larger than %" PRIu64
		                 " of a hold returned before its acquire began",
		                 t->owner, stress_mode_name(t->mode), token, t->floor);
	else if (t->mode != MODE_PERMIT && !follows(t, token, write_class(t->mode) ? ref->max_any : ref->max_write))
		violation_locked(ref, "TOKEN ORDER: owner %d's %s hold got token %" PRIu64 ", not larger than %" PRIu64
		                 " of a hold it excludes, granted before it",
		                 t->owner, stress_mode_name(t->mode), token, write_class(t->mode) ? ref->max_any : ref->max_write);
}

void stress_try_end(stress_referee *ref, stress_try *t, int rc, uint64_t token)
{
	g_mutex_lock(&ref->mu);
	if (t->listed)
		g_ptr_array_remove_fast(ref->tries, t);
	if (t->mode == MODE_PERMIT && rc != DLOCK_OK)
		ref->busy--;
	if (t->mode == MODE_PERMIT && (rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECANCELED))
		ref->ghosts[t->owner] = g_get_monotonic_time() + test_slack(STRESS_GHOST_MS) * 1000;
	if (rc == DLOCK_EBUSY && t->mode == MODE_PERMIT && t->wait_ms == 0 && (uint32_t)t->others_max < ref->cfg->permits)
		violation_locked(ref, "TRY REFUSED BESIDE A FREE PERMIT: owner %d's try returned DLOCK_EBUSY while at most %d "
		                 "other owners were acquiring, holding or releasing one of %u permits",
		                 t->owner, t->others_max, ref->cfg->permits);
	if (rc == DLOCK_OK) {
		held h = { t->owner, t->mode, token };

		check_exclusion(ref, t, token);
		check_token(ref, t, token);
		g_array_append_val(ref->holds, h);
		ref->max_any = MAX(ref->max_any, token);
		if (write_class(t->mode))
			ref->max_write = MAX(ref->max_write, token);
	}
	g_mutex_unlock(&ref->mu);
}

void stress_release_begin(stress_referee *ref, int owner, stress_mode mode)
{
	g_mutex_lock(&ref->mu);
	for (guint i = 0; i < ref->holds->len; i++) {
		held *h = &g_array_index(ref->holds, held, i);

		if (h->owner == owner && h->mode == mode) {
			g_array_remove_index_fast(ref->holds, i);
			break;
		}
	}
	g_mutex_unlock(&ref->mu);
}

void stress_release_end(stress_referee *ref, int owner, stress_mode mode)
{
	(void)owner;
	g_mutex_lock(&ref->mu);
	if (mode == MODE_PERMIT)
		ref->busy--;
	g_mutex_unlock(&ref->mu);
}
