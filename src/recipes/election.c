/* SPDX-License-Identifier: MIT */
/*
 * Leader election (docs/recipes.md, "Leader election"): a participant is
 * a lock handle on the election's name whose holds carry the
 * participant's id, owned by the handle so that any thread may resign.
 * Leading is holding; the hold's states are the leader's (SUSPENDED,
 * RECONNECTED as ELECTED again, LOST), and they reach the election's
 * callback through the handle's events on the callback thread, with the
 * election's own events (ELECTED, RESIGNED, LEADER_CHANGED) queued the
 * same way and in the same order.
 *
 * The election is a recipe on its handle (recipe.h's dlock__recipe_ops):
 * the core tells it the handle's events and asks it for the holder id;
 * it never calls the election.  ELECTED is told for a campaign's grant
 * (DLOCK__EVENT_GRANT, posted by hold.c) before any state of that hold and
 * before its end, so a resignation that lands as the campaign returns is told
 * after it; a fresh campaign waits, before it asks the server, until a
 * resignation under way has posted its RESIGNED, so the next ELECTED
 * cannot overtake it either -- within its deadline, and a cancel ends
 * that wait: the resignation's release may take the backend's timeouts.
 * Announcements go to the client's announcing thread (announce.c): a
 * campaign is not held past its deadline by a slow server.
 *
 * The election lives as long as its handle: the handle's last reference
 * (the user's, or a queued event's) frees it, so a callback never sees it
 * freed under it.  Its free delivers the events queued before it (a
 * resignation's RESIGNED among them) and returns when none of its
 * callbacks runs, except on the callback thread itself.
 *
 * Observing runs a thread ("dlock-observe") that queries who holds the
 * name, reports a change, and sleeps until the backend's watch wakes it,
 * the lease it saw ends, or a backoff after a failed query passes; a
 * backend whose watch could not be set is looked at every second.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "recipe.h"
#include "mutex.h"
#include "thread.h"

/* Observing: how long to trust a quiet backend, how often to look at one
 * that cannot notify (a watch that could not be set), and the backoff
 * after a failed query. */
#define OBSERVE_QUIET_US (30 * G_USEC_PER_SEC)
#define OBSERVE_UNWATCHED_US (1 * G_USEC_PER_SEC)
#define OBSERVE_BACKOFF_MIN_US (100 * 1000)
#define OBSERVE_BACKOFF_MAX_US (5 * G_USEC_PER_SEC)
/* A lease seen in a query is looked at again this long after its end. */
#define OBSERVE_LEASE_SLACK_US (20 * 1000)

#define PARTICIPANT_MAX 255

struct dlock_election {
	dlock_lock *lock;        /* owner DLOCK_OWNER_HANDLE; its end frees this */
	char *id;
	GMutex turn;             /* one resignation at a time, across its release
	                          * (rank ELECTION_TURN) */
	GMutex mu;               /* guards everything below; announcements and
	                          * RESIGNED are queued under it (rank ELECTION) */
	dlock_election_fn fn;
	void *user_data;
	GThread *observer;       /* while observing */
	dlock__waiter *observe_waiter;
	bool campaigning;        /* one campaign at a time */
	int64_t campaign_wait_ms; /* an asynchronous campaign's, for its messages */
	bool resigning;          /* a resignation has begun and not yet posted */
	GPtrArray *turn_waiters; /* dlock__waiter * of campaigns waiting for it */
};

/* ---- the core's hooks --------------------------------------------------- */

static const char *holder_id(const void *recipe)
{
	const dlock_election *election = recipe;

	return election->id;
}

static void destroy(void *recipe)
{
	dlock_election *election = recipe;

	g_free(election->id);
	g_ptr_array_unref(election->turn_waiters);
	g_mutex_clear(&election->turn);
	g_mutex_clear(&election->mu);
	g_free(election);
}

static void post(dlock_election *e, dlock_election_event event, const char *text)
{
	dlock_client *client = dlock__lock_client(e->lock);

	if (client)
		dlock__callbacks_post_event(client, e->lock, DLOCK__EVENT_RECIPE, (int)event, text);
}

/* The handle's events, as the election's: a grant is ELECTED, and so is a
 * hold RECONNECTED; SUSPENDED and LOST are the leader's; the election's
 * own (RESIGNED, LEADER_CHANGED) come as it posted them. */
static void on_event(void *recipe, dlock__event_kind kind, int code, const char *text)
{
	dlock_election *e = recipe;
	dlock_election_event event;
	dlock_election_fn fn;
	void *user_data;
	bool freed;

	if (kind == DLOCK__EVENT_GRANT)
		event = DLOCK_ELECTION_ELECTED;
	else if (kind == DLOCK__EVENT_RECIPE)
		event = (dlock_election_event)code;
	else if (code == DLOCK_STATE_SUSPENDED)
		event = DLOCK_ELECTION_SUSPENDED;
	else if (code == DLOCK_STATE_RECONNECTED)
		event = DLOCK_ELECTION_ELECTED;
	else
		event = DLOCK_ELECTION_LOST;
	freed = dlock__lock_freed(e->lock);
	dlock__mutex_lock(&e->mu, DLOCK__RANK_ELECTION);
	fn = freed ? NULL : e->fn;
	user_data = e->user_data;
	dlock__mutex_unlock(&e->mu);
	if (fn)
		fn(e, event, event == DLOCK_ELECTION_LEADER_CHANGED ? text : e->id, user_data);
}

/* 1 to 255 bytes of UTF-8 without control characters: it travels in node
 * data, holder records and channel messages. */
static int check_participant(const char *id)
{
	if (!*id || strlen(id) > PARTICIPANT_MAX)
		return dlock__error(DLOCK_EINVAL, "participant id must be 1 to %d bytes long",
		                    PARTICIPANT_MAX);
	if (!g_utf8_validate(id, -1, NULL))
		return dlock__error(DLOCK_EINVAL, "participant id is not valid UTF-8");
	for (const char *p = id; *p; p = g_utf8_next_char(p)) {
		gunichar c = g_utf8_get_char(p);

		if (c < 0x20 || (c >= 0x7f && c <= 0x9f))
			return dlock__error(DLOCK_EINVAL, "participant id has a control character "
			                    "(U+%04X)", c);
	}
	return DLOCK_OK;
}

static void stop(void *recipe);

static const dlock__recipe_ops election_recipe = {
	.kind = "election",
	.holder_id = holder_id,
	.event = on_event,
	.stop = stop,
	.destroy = destroy,
};

DLOCK_API int dlock_election_new(dlock_client *client, const char *name,
                                 const char *participant_id, dlock_election **ret_election)
{
	dlock_lock *lock = NULL;
	dlock_election *e;
	char *id;
	int rc;

	if (!ret_election)
		return dlock__error(DLOCK_EINVAL, "dlock_election_new: ret_election is NULL");
	id = participant_id ? g_strdup(participant_id)
	                    : g_strdup_printf("%s-%d", g_get_host_name(), (int)getpid());
	rc = check_participant(id);
	if (rc == DLOCK_OK)
		rc = dlock_lock_new(client, name, &lock);
	if (rc == DLOCK_OK)
		rc = dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE);
	if (rc != DLOCK_OK) {
		dlock_lock_free(lock);
		g_free(id);
		return rc;
	}
	e = g_new0(dlock_election, 1);
	e->lock = lock;
	e->id = id;
	g_mutex_init(&e->turn);
	g_mutex_init(&e->mu);
	e->turn_waiters = g_ptr_array_new();
	/* Before the handle is shared: the callback thread reads it without
	 * the handle's mutex. */
	dlock__lock_set_recipe(lock, &election_recipe, e);
	*ret_election = e;
	return DLOCK_OK;
}

static int check_election(const dlock_election *e, const char *what)
{
	if (!e)
		return dlock__error(DLOCK_EINVAL, "%s: election is NULL", what);
	return DLOCK_OK;
}

/* Stop and join the observer thread, if any (not from that thread). */
static void observe_stop(dlock_election *e)
{
	GThread *thread;
	dlock__waiter *waiter;

	dlock__mutex_lock(&e->mu, DLOCK__RANK_ELECTION);
	thread = e->observer;
	waiter = e->observe_waiter;
	e->observer = NULL;
	e->observe_waiter = NULL;
	dlock__mutex_unlock(&e->mu);
	if (!thread)
		return;
	dlock__waiter_cancel(waiter);
	g_thread_join(thread);
	dlock__waiter_free(waiter);
}

/* The client is closing (the core's hook). */
static void stop(void *recipe)
{
	observe_stop(recipe);
}

DLOCK_API void dlock_election_free(dlock_election *election)
{
	dlock_client *client;

	if (!election)
		return;
	client = dlock__lock_client(election->lock);
	if (!client || dlock__client_forked(client)) {
		dlock_lock_free(election->lock);
		return;
	}
	observe_stop(election);
	/* A campaign under way ends now, and one that starts gets nowhere:
	 * on the callback thread, the flush below would wait for it. */
	dlock__lock_cancel_all(election->lock);
	/* What was queued for the callback before the free -- RESIGNED, which
	 * a resignation's DLOCK_OK promises -- is told before it returns. */
	dlock__callbacks_flush(client);
	/* Releases a leader's hold and cancels a campaign; the election goes
	 * with the handle's last reference.  Events of the handle from now
	 * on are dropped; once a callback of it that had begun has returned,
	 * none runs after the free. */
	dlock_lock_free(election->lock);
	dlock__callbacks_flush(client);
}

/* The backend's word to observers, when it has one: id leads (NULL:
 * nobody, resigned), made in the background.  Called with e->mu held,
 * under which a resignation's word is queued too: a leader's, asked for
 * while it still leads, goes before it. */
static void announce(dlock_election *e, const char *id)
{
	dlock__lock_announce(e->lock, id);
}

/* A campaign that is the election's only one: two at once through the
 * one handle would be two contenders of one owner. */
static int campaign(dlock_election *election, int64_t wait_ms);

DLOCK_API int dlock_election_campaign(dlock_election *election, int64_t wait_ms)
{
	bool busy;
	int rc;

	if ((rc = check_election(election, "dlock_election_campaign")) != DLOCK_OK)
		return rc;
	/* A call on the handle from start to end: a free that comes meanwhile
	 * cancels it and waits for it to be done with the election. */
	if ((rc = dlock__lock_enter(election->lock, "dlock_election_campaign")) != DLOCK_OK)
		return rc;
	dlock__mutex_lock(&election->mu, DLOCK__RANK_ELECTION);
	busy = election->campaigning;
	election->campaigning = true;
	dlock__mutex_unlock(&election->mu);
	if (busy) {
		rc = dlock__error(DLOCK_EINVAL, "election '%s': a campaign is already under way for "
		                  "this participant", dlock__lock_resource(election->lock));
		dlock__lock_leave(election->lock);
		return rc;
	}
	rc = campaign(election, wait_ms);
	dlock__mutex_lock(&election->mu, DLOCK__RANK_ELECTION);
	election->campaigning = false;
	dlock__mutex_unlock(&election->mu);
	dlock__lock_leave(election->lock);
	return rc;
}

/*
 * The participant's own hold, if any: leading already (DLOCK_OK, at once),
 * a suspension waited out within deadline_us (DLOCK_OK when confirmed), or
 * one lost (cleared) or ended meanwhile: 1, campaign afresh.  No count is
 * added, so one resignation ends it.  Inside the campaign's call.
 */
static int leading(dlock_lock *lock, int64_t deadline_us)
{
	int rc = dlock__owner_confirm(lock, deadline_us);

	return rc == DLOCK_ELOST ? DLOCK__HOLD_ENDED : rc;
}

/*
 * One look at a resignation under way, as a step: DLOCK_OK when there is
 * none; else DLOCK__STEP_WAIT with a turn until waiter is woken (the
 * resignation's end wakes it) or the deadline; DLOCK_ECANCELED when
 * waiter is canceled, DLOCK_EBUSY or DLOCK_ETIMEDOUT when the wait is
 * over.  Its release may take the backend's timeouts, hence the deadline;
 * waiter is the handle's, which a cancel or the election's free reaches.
 * No I/O.
 */
static int resignation_turn(dlock_election *e, dlock__waiter *waiter, int64_t wait_ms,
                            int64_t deadline_us, dlock__turn *ret_turn)
{
	const char *resource = dlock__lock_resource(e->lock);
	int rc = DLOCK__STEP_WAIT;

	dlock__mutex_lock(&e->mu, DLOCK__RANK_ELECTION);
	if (!e->resigning)
		rc = DLOCK_OK;
	else if (dlock__waiter_canceled(waiter))
		rc = dlock__error_canceled(resource);
	else if (wait_ms == 0 || dlock__remaining_us(deadline_us) == 0)
		rc = dlock__error(wait_ms == 0 ? DLOCK_EBUSY : DLOCK_ETIMEDOUT,
		                  "election '%s': a resignation of this participant was still under "
		                  "way %s", resource,
		                  wait_ms == 0 ? "(a try waits for none)" : "at the deadline");
	else if (!g_ptr_array_find(e->turn_waiters, waiter, NULL))
		g_ptr_array_add(e->turn_waiters, waiter);
	/* The resignation's end is woken under e->mu: after this look, it
	 * bumps the sequence read here. */
	if (rc == DLOCK__STEP_WAIT)
		dlock__waiter_turn_begin(ret_turn, dlock__waiter_seq(waiter), deadline_us, INT64_MAX);
	else
		g_ptr_array_remove_fast(e->turn_waiters, waiter);
	dlock__mutex_unlock(&e->mu);
	return rc;
}

/* Wait until no resignation is under way, on the calling thread. */
static int wait_for_resignation(dlock_election *e, int64_t wait_ms, int64_t deadline_us)
{
	dlock__waiter *waiter;
	dlock__turn turn;
	bool busy;
	int rc;

	dlock__mutex_lock(&e->mu, DLOCK__RANK_ELECTION);
	busy = e->resigning;
	dlock__mutex_unlock(&e->mu);
	if (!busy)
		return DLOCK_OK;
	waiter = dlock__waiter_new();
	dlock__lock_add_waiter(e->lock, waiter);
	while ((rc = resignation_turn(e, waiter, wait_ms, deadline_us, &turn)) == DLOCK__STEP_WAIT)
		dlock__waiter_sleep(waiter, turn.seen, turn.until_us);
	dlock__lock_remove_waiter(e->lock, waiter);
	dlock__waiter_free(waiter);
	return rc;
}

/* A campaign's failure to be granted, said as the election's. */
static int campaign_failure(dlock_lock *lock, int rc, int64_t wait_ms)
{
	if (rc == DLOCK_EBUSY)
		return dlock__error(DLOCK_EBUSY, "election '%s': another participant leads",
		                    dlock__lock_resource(lock));
	if (rc == DLOCK_ETIMEDOUT)
		return dlock__error(DLOCK_ETIMEDOUT, "election '%s': not elected within %" PRId64 " ms",
		                    dlock__lock_resource(lock), wait_ms);
	return rc;
}

static int campaign(dlock_election *election, int64_t wait_ms)
{
	int64_t deadline_us = dlock__deadline_after_ms(wait_ms);
	dlock_lock *lock = election->lock;
	int64_t left_ms = wait_ms;
	int rc;

	rc = leading(lock, deadline_us);
	if (rc != 1)
		return rc;
	/* A resignation under way tells its RESIGNED before this campaign
	 * can be granted and tell ELECTED. */
	rc = wait_for_resignation(election, wait_ms, deadline_us);
	if (rc != DLOCK_OK)
		return rc;
	if (wait_ms > 0)
		left_ms = MAX(dlock__remaining_us(deadline_us) / 1000, 1);
	rc = dlock_acquire(lock, left_ms);
	if (rc != DLOCK_OK)
		return campaign_failure(lock, rc, wait_ms);
	/* ELECTED went out with the grant (DLOCK__EVENT_GRANT). */
	dlock__mutex_lock(&election->mu, DLOCK__RANK_ELECTION);
	announce(election, election->id);
	dlock__mutex_unlock(&election->mu);
	return DLOCK_OK;
}

/*
 * A campaign without a waiting thread is the core's asynchronous acquire
 * of the handle (recipe.h), which confirms a leadership held as leading()
 * does; its hooks wait out a resignation as wait_for_resignation() does,
 * and end the campaign as campaign() does, just before done: the grant is
 * installed then, so ELECTED comes after done.
 */
static int campaign_prepare(void *data, dlock__waiter *waiter, int64_t wait_ms,
                            int64_t deadline_us, dlock__turn *ret_turn)
{
	return resignation_turn(data, waiter, wait_ms, deadline_us, ret_turn);
}

static void campaign_delivered(void *data, int rc, bool fresh)
{
	dlock_election *e = data;
	int64_t wait_ms;

	dlock__mutex_lock(&e->mu, DLOCK__RANK_ELECTION);
	e->campaigning = false;
	wait_ms = e->campaign_wait_ms;
	if (fresh)
		announce(e, e->id);
	dlock__mutex_unlock(&e->mu);
	if (rc != DLOCK_OK)
		campaign_failure(e->lock, rc, wait_ms);
}

static const dlock__recipe_call campaign_call = {
	.prepare = campaign_prepare,
	.delivered = campaign_delivered,
};

DLOCK_API int dlock_election_campaign_async(dlock_election *election, int64_t wait_ms,
                                            dlock_done_fn done, void *user_data)
{
	bool busy;
	int rc;

	if ((rc = check_election(election, "dlock_election_campaign_async")) != DLOCK_OK)
		return rc;
	dlock__mutex_lock(&election->mu, DLOCK__RANK_ELECTION);
	busy = election->campaigning;
	if (!busy) {
		election->campaigning = true;
		election->campaign_wait_ms = wait_ms;
	}
	dlock__mutex_unlock(&election->mu);
	if (busy)
		return dlock__error(DLOCK_EINVAL, "election '%s': a campaign is already under way for "
		                    "this participant", dlock__lock_resource(election->lock));
	rc = dlock__lock_acquire_async(election->lock, wait_ms, &campaign_call, election, done,
	                               user_data, "dlock_election_campaign_async");
	if (rc != DLOCK_OK) {
		dlock__mutex_lock(&election->mu, DLOCK__RANK_ELECTION);
		election->campaigning = false;
		dlock__mutex_unlock(&election->mu);
	}
	return rc;
}

DLOCK_API int dlock_election_resign(dlock_election *election)
{
	int rc;

	if ((rc = check_election(election, "dlock_election_resign")) != DLOCK_OK)
		return rc;
	/* A call on the handle to the end: a callback that frees the election
	 * when told RESIGNED waits until this is done with it. */
	if ((rc = dlock__lock_enter(election->lock, "dlock_election_resign")) != DLOCK_OK)
		return rc;
	dlock__mutex_lock(&election->turn, DLOCK__RANK_ELECTION_TURN);
	dlock__mutex_lock(&election->mu, DLOCK__RANK_ELECTION);
	election->resigning = true;
	dlock__mutex_unlock(&election->mu);
	rc = dlock_release(election->lock);
	dlock__mutex_lock(&election->mu, DLOCK__RANK_ELECTION);
	if (rc == DLOCK_OK) {
		announce(election, NULL);
		post(election, DLOCK_ELECTION_RESIGNED, NULL);
	}
	election->resigning = false;
	for (guint i = 0; i < election->turn_waiters->len; i++)
		dlock__waiter_wake(election->turn_waiters->pdata[i]);
	dlock__mutex_unlock(&election->mu);
	dlock__mutex_unlock(&election->turn);
	dlock__lock_leave(election->lock);
	return rc;
}

DLOCK_API int dlock_election_cancel(dlock_election *election)
{
	int rc;

	if ((rc = check_election(election, "dlock_election_cancel")) != DLOCK_OK)
		return rc;
	return dlock_lock_cancel(election->lock);
}

DLOCK_API int dlock_election_is_leader(const dlock_election *election)
{
	return election ? dlock_held(election->lock) : 0;
}

DLOCK_API uint64_t dlock_election_fencing_token(const dlock_election *election)
{
	return election ? dlock_fencing_token(election->lock) : 0;
}

DLOCK_API dlock_lock *dlock_election_lock(dlock_election *election)
{
	return election ? election->lock : NULL;
}

DLOCK_API const char *dlock_election_id(const dlock_election *election)
{
	return election ? election->id : NULL;
}

DLOCK_API const char *dlock_election_name(const dlock_election *election)
{
	return election ? dlock__lock_resource(election->lock) : NULL;
}

DLOCK_API int dlock_election_leader(dlock_election *election, char **ret_leader_id)
{
	const char *leader;
	dlock_info *info;
	int rc;

	if ((rc = check_election(election, "dlock_election_leader")) != DLOCK_OK)
		return rc;
	if (!ret_leader_id)
		return dlock__error(DLOCK_EINVAL, "dlock_election_leader: ret_leader_id is NULL");
	rc = dlock_lock_query(election->lock, &info);
	if (rc != DLOCK_OK)
		return rc;
	leader = dlock_info_leader(info);
	*ret_leader_id = leader ? strdup(leader) : NULL;
	dlock_info_free(info);
	if (leader && !*ret_leader_id)
		return dlock__error(DLOCK_EINVAL, "dlock_election_leader: out of memory");
	return DLOCK_OK;
}

DLOCK_API int dlock_election_set_callback(dlock_election *election, dlock_election_fn fn,
                                          void *user_data)
{
	int rc;

	if ((rc = check_election(election, "dlock_election_set_callback")) != DLOCK_OK)
		return rc;
	if (!dlock__lock_client(election->lock) ||
	    dlock__client_forked(dlock__lock_client(election->lock)))
		return dlock__error(DLOCK_ECANCELED, "dlock_election_set_callback: client was freed or "
		                    "belongs to the parent process");
	dlock__mutex_lock(&election->mu, DLOCK__RANK_ELECTION);
	election->fn = fn;
	election->user_data = user_data;
	dlock__mutex_unlock(&election->mu);
	return DLOCK_OK;
}

/* The observer's sleep after a query: until the lease it saw ends, else
 * as long as a quiet backend is trusted. */
static int64_t observe_nap_us(const dlock_info *info)
{
	int64_t left_ms = dlock_info_expires_in_ms(info);

	if (left_ms < 0)
		return OBSERVE_QUIET_US;
	return MIN(OBSERVE_QUIET_US, left_ms * 1000 + OBSERVE_LEASE_SLACK_US);
}

/* What an observer thread starts with: the waiter is its own reference,
 * so a stop that comes before the thread runs finds it canceled. */
typedef struct observer_start {
	dlock_election *e;
	dlock__waiter *waiter;
} observer_start;

static gpointer observe_main(gpointer data)
{
	observer_start *start = data;
	dlock_election *e = start->e;
	dlock_lock *lock = e->lock;
	dlock__waiter *waiter = start->waiter;
	int64_t backoff_us = OBSERVE_BACKOFF_MIN_US;
	void *watch = NULL;
	char *last = NULL;
	bool first = true;

	while (!dlock__waiter_canceled(waiter)) {
		uint64_t seen = dlock__waiter_seq(waiter);
		bool armed = dlock__lock_watch(lock, waiter, &watch) == DLOCK_OK;
		dlock_info *info;
		int64_t nap_us;

		if (dlock_lock_query(lock, &info) == DLOCK_OK) {
			const char *leader = dlock_info_leader(info);

			if (first || g_strcmp0(leader, last) != 0) {
				post(e, DLOCK_ELECTION_LEADER_CHANGED, leader);
				g_free(last);
				last = g_strdup(leader);
				first = false;
			}
			nap_us = observe_nap_us(info);
			dlock_info_free(info);
			backoff_us = OBSERVE_BACKOFF_MIN_US;
		} else {
			nap_us = backoff_us;
			backoff_us = MIN(backoff_us * 2, OBSERVE_BACKOFF_MAX_US);
		}
		if (!armed)
			nap_us = MIN(nap_us, OBSERVE_UNWATCHED_US);
		if (dlock__waiter_sleep(waiter, seen, dlock__mono_us() + nap_us) == DLOCK_ECANCELED)
			break;
	}
	dlock__lock_unwatch(lock, watch);
	g_free(last);
	dlock__waiter_free(waiter);
	g_free(start);
	return NULL;
}

DLOCK_API int dlock_election_observe(dlock_election *election, int enabled)
{
	dlock_client *client;
	int rc;

	if ((rc = check_election(election, "dlock_election_observe")) != DLOCK_OK)
		return rc;
	client = dlock__lock_client(election->lock);
	if (!client || dlock__client_forked(client))
		return dlock__error(DLOCK_ECANCELED, "dlock_election_observe: client was freed or "
		                    "belongs to the parent process");
	if (!enabled) {
		observe_stop(election);
		return DLOCK_OK;
	}
	/* A call on the client while the thread starts: the client's free
	 * (whose callbacks may get here) stops observers only once no call
	 * is under way, and an observer started later would outlive it. */
	if ((rc = dlock__client_enter(client)) != DLOCK_OK)
		return rc;
	dlock__mutex_lock(&election->mu, DLOCK__RANK_ELECTION);
	if (!election->observer) {
		observer_start *start = g_new(observer_start, 1);

		election->observe_waiter = dlock__waiter_new();
		start->e = election;
		start->waiter = dlock__waiter_ref(election->observe_waiter);
		election->observer = dlock__thread_new("dlock-observe", observe_main, start);
	}
	dlock__mutex_unlock(&election->mu);
	dlock__client_leave(client);
	return DLOCK_OK;
}
