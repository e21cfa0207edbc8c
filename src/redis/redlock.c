/* SPDX-License-Identifier: MIT */
/*
 * Redlock (docs/redis.md, "Redlock"): N independent masters, a hold
 * granted by a quorum (N/2 + 1) within the lease's validity, and fencing
 * tokens that keep increasing across holders.
 *
 * An acquire is two rounds, each one script on every master at once
 * (redlock-round.c).  The first sets the key where it is free and returns
 * each such master's counter without drawing from it.  The token is 1 + the
 * largest counter of the quorum; the second round (the fencing round)
 * raises the counter of each of those masters to the token, only while
 * it still holds our key.  Any two quorums share a master, so a later
 * holder, whose key can only be set there after ours is gone, reads a
 * counter at least as large as our token there: tokens increase.
 *
 * Each attempt sets the key under an owner token of its own, so the
 * background release of a failed attempt can never delete a later one's.
 *
 * No queue: per-master queues could each grant a different waiter.  A
 * waiter listens on the release channel of the masters whose key kept it
 * out and backs off with a random part, so clients that split the votes
 * do not collide again.  The query is redlock-query.c's.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "lease.h"
#include "mutex.h"
#include "redlock.h"
#include "scripts-lua.h"

#define BACKOFF_FIRST_US (20 * 1000)
#define BACKOFF_CAP_US (1000 * 1000)
/* After a release missed a quorum of answers, later releases within this
 * time go to the background at once instead of each waiting out its own
 * master timeout. */
#define RELEASE_DEFER_US (1000 * 1000)

int64_t dlock__redlock_drift_us(int64_t ttl_ms)
{
	return ttl_ms * 10 + 2000;
}

int64_t dlock__redlock_master_timeout_ms(const redlock_backend *rl, int64_t ttl_ms)
{
	if (rl->master_timeout_ms > 0)
		return rl->master_timeout_ms;
	return MAX(1, MIN(rl->command_timeout_ms, ttl_ms / 20));
}

static rl_lease *lease_new(redlock_backend *rl, dlock__hold *hold)
{
	rl_lease *lease = g_atomic_rc_box_new0(rl_lease);

	lease->hold = dlock__hold_ref(hold);
	dlock__redis_names_init(&lease->key.names, rl->masters[0], dlock__hold_resource(hold));
	lease->key.id = g_strdup("");
	g_strlcpy(lease->key.mode, "w", sizeof(lease->key.mode));
	lease->ttl_ms = dlock__hold_ttl_ms(hold);
	lease->renew = dlock__hold_watchdog(hold);
	lease->master_timeout_ms = dlock__redlock_master_timeout_ms(rl, lease->ttl_ms);
	for (int i = 0; i < rl->n_masters; i++)
		lease->kept[i] = g_array_new(FALSE, FALSE, sizeof(int));
	return lease;
}

static void lease_clear(rl_lease *lease)
{
	dlock__hold_unref(lease->hold);
	dlock__redis_names_clear(&lease->key.names);
	g_free(lease->key.token);
	g_free(lease->key.id);
	for (int i = 0; i < RL_MASTERS_MAX; i++)
		dlock__redis_kept_close(lease->kept[i]);
}

rl_lease *dlock__redlock_lease_ref(rl_lease *lease)
{
	return g_atomic_rc_box_acquire(lease);
}

void dlock__redlock_lease_unref(rl_lease *lease)
{
	if (lease)
		g_atomic_rc_box_release_full(lease, (GDestroyNotify)lease_clear);
}

/* The bound of a round starting now: one master timeout, within
 * deadline_us.  *ret_cut (may be NULL): the caller's deadline comes first,
 * so masters that do not answer by then may only be slower than that. */
static int64_t round_until(const rl_lease *lease, int64_t deadline_us, bool *ret_cut)
{
	int64_t bound_us = dlock__mono_us() + lease->master_timeout_ms * 1000;

	if (ret_cut)
		*ret_cut = deadline_us < bound_us;
	return MIN(deadline_us, bound_us);
}

/* Whether a round that got `got` of the quorum it needed would have had
 * enough with the masters it stopped waiting for, had the caller's
 * deadline not ended it first: then the attempt timed out, and says
 * nothing about the masters being unreachable. */
static bool cut_short(const redlock_backend *rl, bool cut, int got, const rl_call *calls)
{
	int late = 0;

	for (int i = 0; i < rl->n_masters; i++)
		late += calls[i].late;
	return cut && got < rl->quorum && got + late >= rl->quorum;
}

/* What is left of the validity of a lease whose first round was sent at
 * sent_us (CLOCK_BOOTTIME); <= 0 when none. */
static int64_t validity_left_us(const rl_lease *lease, int64_t sent_us)
{
	return lease->ttl_ms * 1000 - (dlock__boot_us() - sent_us) -
	       dlock__redlock_drift_us(lease->ttl_ms);
}

/* Master i's connections left unanswered go to its background release,
 * which waits for them, and wakes waiters as a release round does. */
static void cleanup_master(redlock_backend *rl, rl_lease *lease, int i)
{
	dlock__redis_cleanup_later_redlock(rl->masters[i], &lease->key,
	                                   dlock__boot_us() + lease->ttl_ms * 1000, lease->kept[i]);
	lease->kept[i] = g_array_new(FALSE, FALSE, sizeof(int));
}

void dlock__redlock_release_later(redlock_backend *rl, rl_lease *lease)
{
	for (int i = 0; i < rl->n_masters; i++)
		cleanup_master(rl, lease, i);
}

static bool reply_is_int(const redisReply *r, long long value)
{
	return r && r->type == REDIS_REPLY_INTEGER && r->integer == value;
}

/*
 * Delete our key on the masters picked by only (NULL: all) at once, and
 * wake their waiters, within deadline_us; a cancel of waiter (may be
 * NULL) ends the round.  A master that does not answer, or one that did
 * but may still run an earlier unanswered try, gets the background
 * release.  Returns how many said the key was ours; *ret_not_ours, how
 * many showed it was not.
 */
static int release_on(redlock_backend *rl, rl_lease *lease, const bool *only, dlock__waiter *waiter,
                      int64_t deadline_us, int *ret_not_ours)
{
	const char *words[RL_RELEASE_WORDS] = {
		[RL_RELEASE_KEY_LOCK] = lease->key.names.key,
		[RL_RELEASE_ARG_TOKEN] = lease->key.token,
		[RL_RELEASE_ARG_RELEASED] = lease->key.names.released,
	};
	/* Once a quorum has deleted, a silent master need not hold the caller
	 * up: its background release follows. */
	rl_request req = { SCRIPT_RL_RELEASE, words, only, only ? 0 : rl->quorum, lease->key.names.key,
	                   lease->master_timeout_ms, false, false, 0, NULL, NULL };
	rl_call calls[RL_MASTERS_MAX];
	int ours = 0, not_ours = 0;

	dlock__redlock_round(rl, &req, waiter, round_until(lease, deadline_us, NULL), calls,
	                     lease->kept);
	for (int i = 0; i < rl->n_masters; i++) {
		if (calls[i].skipped)
			continue;
		/* A release sent again after its first answer was lost may
		 * find the key gone by that first one: only a first answer
		 * shows that the key was not ours. */
		if (reply_is_int(calls[i].reply, 1) || (calls[i].reply && calls[i].resent))
			ours++;
		else if (calls[i].reply)
			not_ours++;
		if (!calls[i].reply || lease->kept[i]->len > 0)
			cleanup_master(rl, lease, i);
	}
	dlock__redlock_calls_clear(calls, rl->n_masters);
	if (ret_not_ours)
		*ret_not_ours = not_ours;
	return ours;
}

int dlock__redlock_release_all(redlock_backend *rl, rl_lease *lease, int *ret_not_ours)
{
	return release_on(rl, lease, NULL, NULL, INT64_MAX, ret_not_ours);
}

/* Whether two masters' hosts are one: the same address however written,
 * or the same name in any case. */
static bool same_host(const char *a, const char *b)
{
	unsigned char x[16], y[16];
	int family = strchr(a, ':') ? AF_INET6 : AF_INET;

	if (inet_pton(family, a, x) == 1 && inet_pton(family, b, y) == 1)
		return memcmp(x, y, family == AF_INET6 ? 16 : 4) == 0;
	return g_ascii_strcasecmp(a, b) == 0;
}

int dlock__redlock_check_masters(const redlock_backend *rl, const char *redacted_uri)
{
	for (int i = 0; i < rl->n_masters; i++)
		for (int k = 0; k < i; k++)
			if (rl->masters[i]->port == rl->masters[k]->port &&
			    same_host(rl->masters[i]->host, rl->masters[k]->host)) {
				const char *a = rl->masters[k]->host, *b = rl->masters[i]->host;
				bool as_is = strcmp(a, b) == 0;

				return dlock__error(DLOCK_ECONFIG, "URI %s: master %s:%d is named twice%s%s%s; "
				                    "a Redlock needs %d independent masters", redacted_uri, a,
				                    rl->masters[k]->port, as_is ? "" : " (also as ",
				                    as_is ? "" : b, as_is ? "" : ")", rl->n_masters);
			}
	return DLOCK_OK;
}

/*
 * Undo a failed attempt: delete the key at once where a master said yes
 * (within the caller's deadline), and leave the masters that did not
 * answer to their background release, which waits until they are done
 * with the attempt.  The caller's deadline bounds the undo as it bounds
 * the wait: after the deadline or a cancel -- before the undo or during
 * it -- the masters left go to their background release, and the caller
 * is not kept waiting for a master that stalls.  Each attempt has a token
 * of its own, so a background release never touches a later attempt's
 * key.  Keeps the message of the attempt's failure.
 */
static void undo(redlock_backend *rl, rl_lease *lease, const bool *yes, const bool *maybe,
                 dlock__waiter *waiter, int64_t deadline_us, int rc)
{
	char *why = g_strdup(dlock_last_error_message());
	bool any_yes = false;

	for (int i = 0; i < rl->n_masters; i++) {
		if (maybe[i] && !yes[i])
			cleanup_master(rl, lease, i);
		any_yes = any_yes || yes[i];
	}
	if (any_yes && dlock__remaining_us(deadline_us) > 0 && !dlock__waiter_canceled(waiter))
		release_on(rl, lease, yes, waiter, deadline_us, NULL);
	else if (any_yes)
		for (int i = 0; i < rl->n_masters; i++)
			if (yes[i])
				cleanup_master(rl, lease, i);
	dlock__error(rc, "%s", why);
	g_free(why);
}

/* The fencing round on the masters that took the key: how many confirmed.
 * *ret_cut: the caller's deadline cut it short (cut_short()). */
static int fence_round(redlock_backend *rl, rl_lease *lease, const bool *yes, uint64_t token,
                       dlock__waiter *waiter, int64_t deadline_us, bool *ret_cut)
{
	char token_text[24];
	const char *words[RL_FENCE_WORDS] = {
		[RL_FENCE_KEY_LOCK] = lease->key.names.key,
		[RL_FENCE_KEY_FENCE] = lease->key.names.fence,
		[RL_FENCE_ARG_TOKEN] = lease->key.token,
		[RL_FENCE_ARG_FENCE_TOKEN] = token_text,
	};
	rl_request req = { SCRIPT_RL_FENCE, words, yes, rl->quorum, lease->key.names.key,
	                   lease->master_timeout_ms, false, false, 0, NULL, NULL };
	rl_call calls[RL_MASTERS_MAX];
	int confirmed = 0;
	bool cut;

	g_snprintf(token_text, sizeof(token_text), "%" PRIu64, token);
	dlock__redlock_round(rl, &req, waiter, round_until(lease, deadline_us, &cut), calls,
	                     lease->kept);
	for (int i = 0; i < rl->n_masters; i++)
		if (reply_is_int(calls[i].reply, 1))
			confirmed++;
	*ret_cut = cut_short(rl, cut, confirmed, calls);
	dlock__redlock_calls_clear(calls, rl->n_masters);
	return confirmed;
}

/*
 * A quorum took the key in the round sent at sent_us: the token is
 * 1 + the largest counter among them, raised on each of them by the
 * fencing round.  Granted when a quorum confirms within the validity.
 */
static int fence_and_grant(redlock_backend *rl, rl_lease *lease, const bool *yes, uint64_t token,
                           dlock__waiter *waiter, int64_t wait_ms, int64_t deadline_us,
                           int64_t sent_us)
{
	const char *resource = dlock__hold_resource(lease->hold);
	bool cut = false;

	if (validity_left_us(lease, sent_us) > 0 &&
	    fence_round(rl, lease, yes, token, waiter, deadline_us, &cut) >= rl->quorum &&
	    validity_left_us(lease, sent_us) > 0) {
		lease->confirmed_us = sent_us;
		dlock__hold_set_token(lease->hold, token);
		dlock__hold_set_backend_data(lease->hold, lease);
		dlock__redlock_watch(rl, lease);
		return DLOCK_OK;
	}
	if (dlock__waiter_canceled(waiter))
		return dlock__error_canceled(resource);
	if (cut)
		return dlock__error_timeout(resource, wait_ms);
	return dlock__error(DLOCK_EUNAVAILABLE, "%s: '%s': the fencing round did not reach a quorum "
	                    "of %d within the lease's validity", rl->label, resource, rl->quorum);
}

/*
 * Each attempt sets the key with an owner token of its own.  A failed
 * attempt leaves the masters that did not answer to their background
 * release, a compare-and-delete of its token that runs once the master
 * is done with the attempt's script, which may be well after a later
 * attempt was granted with that master in its quorum: with one token for
 * every attempt, that delete would remove the grant's key there, and
 * another client could take the master over with the rest.  Every
 * connection an earlier attempt left unanswered has gone to a cleanup
 * with that attempt's token, so the kept arrays start empty.
 */
static void new_token(rl_lease *lease)
{
	g_free(lease->key.token);
	lease->key.token = dlock__token_new(dlock__hold_holder(lease->hold));
}

/* What the masters said to an attempt's first round. */
typedef struct votes {
	bool yes[RL_MASTERS_MAX];   /* took the key */
	bool maybe[RL_MASTERS_MAX]; /* took it, or may have: no answer */
	bool held[RL_MASTERS_MAX];  /* found it held */
} votes;

/*
 * One attempt: the first round, and the fencing round when a quorum took
 * the key.  Not granted, it leaves in *v what to undo (undo()): every
 * master that said yes or did not answer.  Masters that the caller's deadline
 * (wait_ms) did not leave the time to answer make it DLOCK_ETIMEDOUT, not
 * DLOCK_EUNAVAILABLE.  *ret_pttl: the shortest remaining time of the lock
 * among the masters that found it held (-1: none).
 */
static int attempt(redlock_backend *rl, rl_lease *lease, dlock__waiter *waiter, int64_t wait_ms,
                   int64_t deadline_us, int64_t *ret_pttl, votes *v)
{
	const char *resource = dlock__hold_resource(lease->hold);
	char ttl[24];
	const char *words[RL_ACQUIRE_WORDS] = {
		[RL_ACQUIRE_KEY_LOCK] = lease->key.names.key,
		[RL_ACQUIRE_KEY_FENCE] = lease->key.names.fence,
		[RL_ACQUIRE_ARG_TOKEN] = lease->key.token,
		[RL_ACQUIRE_ARG_TTL] = ttl,
	};
	/* Once a quorum took the key (or too few are left to), a master that
	 * is not connected yet does not hold the attempt up; one that has the
	 * script gets the master timeout, so a quorum of healthy masters all
	 * hold the key, fenced, when the acquire returns. */
	rl_request req = { SCRIPT_RL_ACQUIRE, words, NULL, rl->quorum, resource,
	                   lease->master_timeout_ms, true, true, 0, NULL, NULL };
	rl_call calls[RL_MASTERS_MAX];
	int64_t sent_us = dlock__boot_us();
	bool cut;
	int nyes = 0, answered, failed_rc = DLOCK_EUNAVAILABLE, rc = DLOCK_OK;
	uint64_t top = 0;
	char *failed;

	*ret_pttl = -1;
	memset(v, 0, sizeof(*v));
	g_snprintf(ttl, sizeof(ttl), "%" PRId64, lease->ttl_ms);
	answered = dlock__redlock_round(rl, &req, waiter, round_until(lease, deadline_us, &cut),
	                                calls, lease->kept);
	for (int i = 0; i < rl->n_masters; i++) {
		const redisReply *r = calls[i].reply;
		bool ints = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		            r->element[0]->type == REDIS_REPLY_INTEGER &&
		            r->element[1]->type == REDIS_REPLY_INTEGER;

		if (ints && r->element[0]->integer == 1) {
			v->yes[i] = v->maybe[i] = true;
			nyes++;
			top = MAX(top, (uint64_t)MAX(r->element[1]->integer, 0));
		} else if (ints) {
			v->held[i] = true;
			if (r->element[1]->integer >= 0)
				*ret_pttl = *ret_pttl < 0 ? r->element[1]->integer
				                          : MIN(*ret_pttl, r->element[1]->integer);
		}
		v->maybe[i] = v->maybe[i] || calls[i].unanswered;
	}
	failed = dlock__redlock_failure(calls, rl->n_masters, &failed_rc);
	if (answered == DLOCK_ECONFIG)
		rc = dlock__redlock_conflict_error(calls, rl->n_masters);
	cut = answered >= 0 && cut_short(rl, cut, answered, calls);
	dlock__redlock_calls_clear(calls, rl->n_masters);

	if (answered == DLOCK_ECANCELED) {
		rc = dlock__error_canceled(resource);
	} else if (answered == DLOCK_ECONFIG) {
		/* rc and its message set above */
	} else if (nyes >= rl->quorum) {
		rc = fence_and_grant(rl, lease, v->yes, top + 1, waiter, wait_ms, deadline_us, sent_us);
	} else if (cut) {
		rc = dlock__error_timeout(resource, wait_ms);
	} else if (answered < rl->quorum) {
		rc = dlock__error(failed_rc,
		                  "%s: '%s': %d of %d masters answered, a quorum is %d (%s)", rl->label,
		                  resource, answered, rl->n_masters, rl->quorum, failed);
	} else {
		rc = dlock__error_busy(resource);
	}
	g_free(failed);
	return rc;
}

/*
 * Listen for releases on the masters whose key kept the last attempt out,
 * and on no other.  A release on a master the attempt got -- its own
 * undo, or another waiter's -- cannot let it in; waking for those, each
 * waiter on a lock a quorum holds would wake itself, and the others, and
 * try again at once, over and over.  Nor on a master that did not answer:
 * the background release of an unanswered try would wake its own waiter
 * in a loop when that master is slow and free.  listening: per master.
 */
static void listen_to(redlock_backend *rl, rl_lease *lease, dlock__waiter *waiter, bool *listening,
                      const bool *want)
{
	for (int i = 0; i < rl->n_masters; i++) {
		if (want[i] && !listening[i])
			dlock__redis_sub_listen(rl->masters[i], lease->key.names.released, waiter);
		else if (!want[i] && listening[i])
			dlock__redis_sub_unlisten(rl->masters[i], lease->key.names.released, waiter);
		listening[i] = want[i];
	}
}

/* The next nap: the backoff, half of it random, or the lock's remaining
 * time when that comes first. */
static int64_t nap_us(int64_t backoff_us, int64_t pttl_ms)
{
	uint32_t r;
	int64_t nap;

	dlock__random_bytes(&r, sizeof(r));
	nap = backoff_us / 2 + (int64_t)(r % (uint32_t)(backoff_us / 2 + 1));
	if (pttl_ms >= 0 && pttl_ms < nap / 1000)
		nap = pttl_ms * 1000 + 1000;
	return nap;
}

/* An acquire's machine (backend.h): what the wait keeps between steps. */
typedef struct rl_acquire {
	dlock__wait wait;
	rl_lease *lease;        /* ours until granted, then the hold's */
	bool listening[RL_MASTERS_MAX];
	bool first;
	int last;               /* the last attempt's failure the deadline did not cut */
} rl_acquire;

int dlock__redlock_acquire_begin(dlock__backend *backend, dlock__hold *hold, dlock__waiter *waiter,
                                 int64_t wait_ms, int64_t deadline_us, unsigned flags,
                                 void **ret_machine)
{
	rl_acquire *m = g_new0(rl_acquire, 1);

	(void)flags;
	dlock__wait_init(&m->wait, waiter, dlock__hold_resource(hold), wait_ms, deadline_us,
	                 BACKOFF_FIRST_US);
	m->lease = lease_new(redlock_of(backend), hold);
	m->first = true;
	m->last = DLOCK_OK;
	*ret_machine = m;
	return DLOCK_OK;
}

/* The wait ends with rc: off the masters' release channels, and on
 * failure what earlier attempts' unanswered tries may still set goes to
 * the background. */
static int finish(redlock_backend *rl, rl_acquire *m, int rc)
{
	bool none[RL_MASTERS_MAX] = { false };

	listen_to(rl, m->lease, m->wait.waiter, m->listening, none);
	if (rc != DLOCK_OK) {
		for (int i = 0; i < rl->n_masters; i++)
			if (m->lease->kept[i]->len > 0)
				cleanup_master(rl, m->lease, i);
		dlock__redlock_lease_unref(m->lease);
	}
	m->lease = NULL;
	return rc;
}

int dlock__redlock_acquire_step(dlock__backend *backend, void *machine, dlock__turn *ret_turn)
{
	redlock_backend *rl = redlock_of(backend);
	rl_acquire *m = machine;
	rl_lease *lease = m->lease;
	dlock__waiter *waiter = m->wait.waiter;
	const char *resource = m->wait.resource;
	int64_t wait_ms = m->wait.wait_ms, deadline_us = m->wait.deadline_us;
	bool turned = m->wait.turned;
	int rc = dlock__wait_resume(&m->wait, BACKOFF_CAP_US);
	uint64_t seen;
	int64_t pttl_ms;
	votes v;
	bool stop;

	/* Woken as the deadline passed, or a first step begun past it (a
	 * call that waited that long to run): no attempt, whose rounds the
	 * deadline would cut before they begin. */
	if (rc == DLOCK_OK && dlock__remaining_us(deadline_us) == 0)
		rc = dlock__error_timeout(resource, wait_ms);
	if (rc == DLOCK_ETIMEDOUT && turned && m->last == DLOCK_EUNAVAILABLE)
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: '%s': no quorum of masters reachable "
		                  "within %" PRId64 " ms", rl->label, resource, wait_ms);
	if (rc != DLOCK_OK)
		return finish(rl, m, rc);
	seen = dlock__waiter_seq(waiter);
	if (dlock__waiter_canceled(waiter))
		return finish(rl, m, dlock__error_canceled(resource));
	new_token(lease);
	rc = attempt(rl, lease, waiter, wait_ms, deadline_us, &pttl_ms, &v);
	if (rc == DLOCK_OK)
		return finish(rl, m, DLOCK_OK);
	/* A first try that cannot reach a quorum fails fast; once
	 * waiting, masters that went away are tried until the deadline. */
	stop = rc == DLOCK_ECANCELED || rc == DLOCK_EBACKEND || rc == DLOCK_ECONFIG ||
	       rc == DLOCK_EACCES || (rc == DLOCK_EUNAVAILABLE && m->first) || wait_ms == 0;
	/* Before the undo, whose releases must not wake this waiter. */
	if (!stop && dlock__remaining_us(deadline_us) > 0)
		listen_to(rl, lease, waiter, m->listening, v.held);
	undo(rl, lease, v.yes, v.maybe, waiter, deadline_us, rc);
	if (stop)
		return finish(rl, m, rc);
	m->first = false;
	/* An attempt the deadline cut short tells nothing of the masters. */
	if (rc != DLOCK_ETIMEDOUT)
		m->last = rc;
	return dlock__wait_turn(&m->wait, seen, nap_us(m->wait.backoff_us, pttl_ms), ret_turn);
}

void dlock__redlock_acquire_end(dlock__backend *backend, void *machine)
{
	(void)backend;
	g_free(machine);
}

/* Whether a release just now found too few masters answering. */
static bool release_deferred(redlock_backend *rl)
{
	bool defer;

	dlock__mutex_lock(&rl->mu, DLOCK__RANK_REDLOCK);
	defer = dlock__mono_us() < rl->release_defer_until_us;
	dlock__mutex_unlock(&rl->mu);
	return defer;
}

/*
 * End a hold on every master at once; the masters that do not answer get
 * their background release.  When a quorum did not answer, the masters
 * are likely gone for the releases that follow too (a client freed with
 * many holds): for a second, releases go to the background at once, so
 * they cost one master timeout in all, not one each.
 */
int dlock__redlock_release(dlock__backend *backend, dlock__hold *hold)
{
	redlock_backend *rl = redlock_of(backend);
	rl_lease *lease = dlock__hold_backend_data(hold);
	bool lost = false;
	int ours, not_ours = 0, rc = DLOCK_OK;

	if (!lease)
		return DLOCK_OK;
	dlock__hold_set_backend_data(hold, NULL);
	dlock__redlock_unwatch(rl, lease, &lost);
	/* A lost hold's release may be under way in the background already. */
	if (!lease->cleaned && release_deferred(rl)) {
		dlock__redlock_release_later(rl, lease);
	} else if (!lease->cleaned) {
		ours = dlock__redlock_release_all(rl, lease, &not_ours);
		if (ours + not_ours < rl->quorum) {
			dlock__mutex_lock(&rl->mu, DLOCK__RANK_REDLOCK);
			rl->release_defer_until_us = dlock__mono_us() + RELEASE_DEFER_US;
			dlock__mutex_unlock(&rl->mu);
		}
	}
	if (lost)
		rc = dlock__error(DLOCK_ELOST, "%s: '%s' was lost before its release", rl->label,
		                  dlock__hold_resource(hold));
	else if (not_ours > rl->n_masters - rl->quorum)
		rc = dlock__error(DLOCK_ELOST, "%s: '%s' no longer held our token on %d of %d masters",
		                  rl->label, dlock__hold_resource(hold), not_ours, rl->n_masters);
	dlock__redlock_lease_unref(lease);
	return rc;
}

void dlock__redlock_close(redlock_backend *rl)
{
	dlock__redlock_watch_stop(rl);
	for (int i = 0; i < rl->n_masters; i++) {
		if (!rl->masters[i])
			continue;
		dlock__redis_dial_free(rl->masters[i]->parked_dial);
		dlock__redis_close_host(rl->masters[i]);
	}
	g_free(rl->masters);
	g_mutex_clear(&rl->mu);
	g_mutex_clear(&rl->lazy_mu);
	g_free(rl->label);
	g_free(rl);
}
