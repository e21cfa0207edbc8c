/* SPDX-License-Identifier: MIT */
/*
 * Acquire and release on Redis.
 *
 * Acquire tries once (the uncontended path is one EVALSHA round trip).
 * If the lock is held elsewhere the wait joins the resource's queue
 * (lua/acquire.lua): it listens, through the client's one subscriber connection,
 * on a channel of its own and on the release channel, and once the server
 * has confirmed that, queues.  A release then hands the lock to the head
 * of the queue itself and tells it on its channel, so the waiter holds the
 * lock when the message comes, with no round trip of its own; one message
 * per handoff, whatever the number of waiters.  The waiter also tries
 * again (which renews its queue entry) when the subscriber reconnects,
 * when "released" comes (a release that found no live waiter to hand to),
 * and on a timer: at the head, min(PTTL, a capped backoff), which covers a
 * holder that crashed and never releases; further back, the backoff's cap.
 * A wait that ends without the lock leaves the queue, and releases the
 * lock at once if a release handed it over meanwhile.
 */
#include <inttypes.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "lease.h"
#include "mutex.h"
#include "scripts-lua.h"

#define BACKOFF_FIRST_US (50 * 1000)
#define BACKOFF_CAP_US (1000 * 1000)
/* How long a queue entry lives unless its waiter renews it (each try
 * does, at least every BACKOFF_CAP_US): the most a dead waiter's entry can
 * hold up a try.  In the server's time.  With min-replicas, plus the
 * WAIT's timeout (entry_lease_ms()). */
#define QUEUE_ENTRY_LEASE_MS 5000
/* After a release found the server unreachable, later releases within this
 * time defer at once instead of each waiting out its own timeout. */
#define RELEASE_DEFER_US (1000 * 1000)
/* How often a wait at the head of the queue that no message can reach
 * (its channel refused) tries: a grant to it stays unused until then. */
#define POLL_US (200 * 1000)

typedef enum try_result {
	TRY_GRANTED,
	TRY_UNACKED,   /* granted, but fewer replicas than min-replicas have it */
	TRY_BUSY,
	TRY_FAILED,    /* an answer we can trust: nothing was set */
	TRY_UNCERTAIN  /* no answer: the script may have set our key */
} try_result;

/* A wait's place in the queue. */
typedef struct queue_place {
	char *channel;            /* the wait's own channel */
	redis_grant box;          /* where the subscriber leaves a grant */
	bool listening;           /* registered with the subscriber */
	bool queued;              /* an entry may exist: leave the queue on failure */
	int64_t ticket;           /* our entry, 0 when not known to be queued */
	bool at_head;             /* our entry was the first live one at the last try */
	bool polls;               /* the server refused our channel (ACL): the entry
	                           * says so, a grant is not published to it, and our
	                           * own tries find it */
	int64_t queued_sent_us;   /* CLOCK_BOOTTIME send of the last try that found
	                           * us queued under ticket: a grant came later */
} queue_place;

/* What a try learned. */
typedef struct try_answer {
	int64_t sent_us;          /* CLOCK_BOOTTIME */
	uint64_t token;           /* granted: the fencing token */
	int64_t pttl;             /* busy: the lock's remaining time */
	int64_t ticket;           /* busy and queueing: our entry */
	bool at_head;             /* and whether it is the first live one */
} try_answer;

static bool reply_is_integers(const redisReply *reply, size_t n)
{
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (reply->element[i]->type != REDIS_REPLY_INTEGER)
			return false;
	return true;
}

/* A grant (or renewal) fewer replicas acknowledged than asked for. */
static int unacked_error(redis_backend *b, const redis_lease *lease, const redis_ack *ack)
{
	return dlock__error(DLOCK_EUNAVAILABLE, "%s: '%s' was granted, but %d of the %d replicas asked "
	                    "for (min-replicas) acknowledged it within %" G_GINT64_FORMAT " ms",
	                    b->label, dlock__hold_resource(lease->hold), MAX(ack->acked, 0), ack->n,
	                    ack->timeout_ms);
}

/*
 * How long our queue entry lives unless renewed.  With min-replicas each
 * try's WAIT holds the wait up, as long as its timeout when the replicas
 * lag, before the pause to the next try: the entry outlives both, or the
 * wait would lose its place in the queue to waiters that came later.
 */
static int64_t entry_lease_ms(redis_backend *b, const redis_lease *lease)
{
	redis_ack ack = dlock__redis_ack_for(b, lease->ttl_ms);

	return QUEUE_ENTRY_LEASE_MS + (ack.n > 0 ? ack.timeout_ms : 0);
}

/*
 * One EVALSHA of the acquire script, bounded by deadline_us; a cancel of
 * waiter interrupts it.  With place, the try queues (or renews our entry).
 * The connection of an attempt left unanswered is kept in lease->kept
 * (dlock__redis_conn_keep()).
 */
static try_result try_once(redis_backend *b, redis_lease *lease, dlock__waiter *waiter,
                           const queue_place *place, int64_t deadline_us, try_answer *ans,
                           int *ret_rc)
{
	char ttl[24], ticket[24] = "", entry_lease[24];
	const char *words[ACQUIRE_WORDS] = {
		[ACQUIRE_KEY_LOCK] = lease->names.key,
		[ACQUIRE_KEY_FENCE] = lease->names.fence,
		[ACQUIRE_KEY_QUEUE] = lease->names.queue,
		[ACQUIRE_KEY_PERMITS] = lease->names.permits,
		[ACQUIRE_ARG_TOKEN] = lease->token,
		[ACQUIRE_ARG_TTL] = ttl,
		[ACQUIRE_ARG_WAIT_ID] = place ? lease->id : "",
		[ACQUIRE_ARG_TICKET] = ticket,
		[ACQUIRE_ARG_ENTRY_LEASE] = entry_lease,
		[ACQUIRE_ARG_MODE] = lease->mode,
		[ACQUIRE_ARG_UNREACHABLE] = place && place->polls ? "~" : "",
	};
	size_t want = place ? 4 : 2;
	redis_ack ack = dlock__redis_ack_for(b, lease->ttl_ms);
	redisReply *reply;
	bool uncertain = false;
	try_result result;
	int rc;

	g_snprintf(ttl, sizeof(ttl), "%" G_GINT64_FORMAT, lease->ttl_ms);
	if (place && place->ticket > 0)
		g_snprintf(ticket, sizeof(ticket), "%" G_GINT64_FORMAT, place->ticket);
	g_snprintf(entry_lease, sizeof(entry_lease), "%" G_GINT64_FORMAT, entry_lease_ms(b, lease));
	ans->sent_us = dlock__boot_us();
	rc = dlock__redis_eval_pooled(b, waiter, deadline_us, SCRIPT_ACQUIRE, words, &ack, &reply,
	                              &uncertain, lease->kept);
	if (rc != DLOCK_OK) {
		*ret_rc = rc;
		if (uncertain && (rc == DLOCK_EUNAVAILABLE || rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECANCELED))
			return TRY_UNCERTAIN;
		return TRY_FAILED;
	}
	if (!reply_is_integers(reply, 2) ||
	    (reply->element[0]->integer == 0 && !reply_is_integers(reply, want))) {
		*ret_rc = dlock__error(DLOCK_EBACKEND, "%s: unexpected reply to the acquire script", b->label);
		result = TRY_FAILED;
	} else if (reply->element[0]->integer == -1) {
		/* A semaphore in use with another number of permits. */
		*ret_rc = dlock__error_permits(dlock__hold_resource(lease->hold),
		                               dlock__hold_permits(lease->hold),
		                               (uint32_t)reply->element[1]->integer);
		result = TRY_FAILED;
	} else if (reply->element[0]->integer == 1 && ack.n > 0 && ack.acked < ack.n) {
		ans->token = (uint64_t)reply->element[1]->integer;
		*ret_rc = unacked_error(b, lease, &ack);
		result = TRY_UNACKED;
	} else if (reply->element[0]->integer == 1) {
		ans->token = (uint64_t)reply->element[1]->integer;
		result = TRY_GRANTED;
	} else {
		ans->pttl = reply->element[1]->integer;
		if (place) {
			ans->ticket = reply->element[2]->integer;
			ans->at_head = reply->element[3]->integer == 1;
		}
		result = TRY_BUSY;
	}
	freeReplyObject(reply);
	return result;
}

/*
 * The bound of one try's script: the caller's deadline.  A try (wait 0)
 * has none, each of its steps bounded by the backend's timeouts alone;
 * but on a cluster a slot being migrated answers TRYAGAIN until the
 * migration ends, which may be never (a tool stopped half way), and the
 * routing waits that out within the deadline: there a try's script gets
 * a connect and a command timeout in all, and then the migration's
 * DLOCK_EUNAVAILABLE.
 */
static int64_t script_deadline_us(const redis_backend *b, int64_t wait_ms, int64_t deadline_us)
{
	if (wait_ms != 0 || deadline_us != INT64_MAX || !b->cluster)
		return deadline_us;
	return dlock__mono_us() + (b->connect_timeout_ms + b->command_timeout_ms) * 1000;
}

/*
 * A step of a try (connect, AUTH, the script's answer) ran out of time.
 * If the caller's deadline is what ended it, the wait timed out: the
 * server may be healthy and only slower than a short wait, and whether it
 * is reachable was never found out.  Otherwise the backend's own connect
 * or command timeout passed first, and the server is unavailable (the
 * message, "no answer within N ms", stays).
 */
static int out_of_time(const char *resource, int64_t wait_ms, int64_t deadline_us)
{
	if (deadline_us != INT64_MAX && dlock__remaining_us(deadline_us) == 0)
		return dlock__error_timeout(resource, wait_ms);
	return dlock__error_prefix(DLOCK_EUNAVAILABLE, "");
}

/* The wait id: the random part of the owner token ("dlock1:<32 hex>:..."),
 * which no other hold shares. */
static char *wait_id(const char *token)
{
	const char *start = strchr(token, ':');

	return g_strndup(start + 1, strcspn(start + 1, ":"));
}

static redis_lease *lease_new(redis_backend *b, dlock__hold *hold)
{
	/* Reference-counted (the watchdog keeps one while it renews). */
	redis_lease *lease = g_atomic_rc_box_new0(redis_lease);

	lease->hold = dlock__hold_ref(hold);
	dlock__redis_names_init(&lease->names, b, dlock__hold_resource(hold));
	lease->token = dlock__token_new(dlock__hold_holder(hold));
	lease->id = wait_id(lease->token);
	if (dlock__hold_permits(hold) > 1)
		g_snprintf(lease->mode, sizeof(lease->mode), "s%" PRIu32, dlock__hold_permits(hold));
	else
		g_strlcpy(lease->mode, dlock__hold_mode(hold) == DLOCK__MODE_READ ? "r" : "w",
		          sizeof(lease->mode));
	lease->ttl_ms = dlock__hold_ttl_ms(hold);
	lease->renew = dlock__hold_watchdog(hold);
	lease->kept = g_array_new(FALSE, FALSE, sizeof(int));
	return lease;
}

/*
 * Whether a grant whose try was sent at sent_us (CLOCK_BOOTTIME) is still
 * alive now.  The lease counts from the send, as the watchdog counts it;
 * an answer that comes later than that (the server paused, or the link
 * stalled, in between) brings a hold that is dead or about to be declared
 * lost.  One more margin is asked for, so the watchdog cannot declare the
 * hold lost before the caller has it.
 */
static bool grant_alive(const redis_lease *lease, int64_t sent_us)
{
	return dlock__boot_us() + dlock__lease_margin_us(lease->ttl_ms) <
	       dlock__lease_end_us(sent_us, lease->ttl_ms);
}

/* How long to sleep before the next try when woken by nothing else: the
 * lock's remaining time if that comes first, else the backoff.  A peer may
 * set any expiry Redis takes (up to about 9.2e18 ms), so the PTTL is
 * compared before it is turned into microseconds.  Behind the head of the
 * queue only the entry's renewal is due. */
static int64_t next_sleep_us(const queue_place *place, int64_t ttl_ms, int64_t pttl_ms,
                             int64_t backoff_us)
{
	/* A wait no message reaches finds its grant by its own tries: often
	 * enough to use a grant long before the lease it came with (counted
	 * from the grant) runs out, and at the head more often still. */
	int64_t cap_us = place->polls ? MIN(BACKOFF_CAP_US, ttl_ms * 1000 / 3) : BACKOFF_CAP_US;

	if (place->ticket > 0 && !place->at_head)
		return cap_us;
	if (place->ticket > 0 && place->polls)
		backoff_us = MIN(backoff_us, MIN(POLL_US, cap_us));
	if (pttl_ms >= 0 && pttl_ms < backoff_us / 1000)
		return MIN(pttl_ms * 1000 + 1000, backoff_us);
	return backoff_us;
}

/* The lease is ours from sent_us on: hand it to the hold and the watchdog. */
static void take_grant(redis_backend *b, redis_lease *lease, uint64_t token, int64_t sent_us)
{
	/* Earlier tries the server is done with are no concern. */
	if (dlock__redis_kept_settled(lease->kept)) {
		g_array_unref(lease->kept);
		lease->kept = NULL;
	}
	lease->confirmed_us = sent_us;
	dlock__hold_set_token(lease->hold, token);
	dlock__hold_set_backend_data(lease->hold, lease);
	dlock__redis_watch(b, lease);
}

static void start_listening(redis_backend *b, redis_lease *lease, queue_place *place,
                            dlock__waiter *waiter)
{
	place->channel = g_strconcat(lease->names.wait, lease->id, NULL);
	dlock__redis_sub_add_wait(b, lease->names.released, place->channel, waiter, &place->box);
	place->listening = true;
}

static void stop_listening(redis_backend *b, redis_lease *lease, queue_place *place,
                           dlock__waiter *waiter)
{
	if (!place->listening)
		return;
	dlock__redis_sub_remove_wait(b, lease->names.released, place->channel, waiter);
	g_free(place->channel);
}

static int release_script(redis_backend *b, redis_lease *lease, const char *ticket,
                          int64_t until_us, int *ret_deleted);

/*
 * Give back a grant too few replicas acknowledged (the message of why is
 * the last error, and stays so).  The grant took our queue entry.  False
 * when the release got no answer: the caller gives up, and the cleanup
 * deletes our key once the server is done with our tries.
 */
static bool return_unacked(redis_backend *b, redis_lease *lease, queue_place *place,
                           int64_t deadline_us)
{
	char *why = g_strdup(dlock_last_error_message());
	int64_t until_us = MIN(deadline_us, dlock__mono_us() + b->command_timeout_ms * 1000);
	int deleted = 0;
	bool done;

	place->ticket = 0;
	place->at_head = false;
	done = dlock__remaining_us(until_us) > 0 && release_script(b, lease, "", until_us, &deleted) == DLOCK_OK;
	dlock__log(b->logger, DLOCK_LOG_WARNING, "%s%s", why,
	           done ? ": given back" : ": to be given back in the background");
	dlock__error(DLOCK_EUNAVAILABLE, "%s", why);
	g_free(why);
	return done;
}

/*
 * The wait ended without the lock: leave the queue, and release the lock
 * if a release handed it to us meanwhile (the next waiter gets it).  That
 * is a round trip, and the caller's deadline bounds it: only what is left
 * of it by until_us is spent here (after a cancel or a deadline, nothing),
 * and whatever is not done by then -- no time, no answer, or a try that
 * may still set our key or queue us -- the background cleanup does, on
 * the watchdog's connection, as soon as the server is done with our
 * unanswered tries.  Until it has, a release may still grant the lock to
 * our entry: that grant holds our token and the cleanup's release hands
 * it on, so the cleanup lasts as long as such a grant could (the entry's
 * lease, then the hold's).
 */
static void give_up(redis_backend *b, redis_lease *lease, const queue_place *place, bool uncertain,
                    int64_t until_us)
{
	char ticket[24] = "";
	int deleted = 0;
	bool done = true;

	if (place->queued) {
		/* Our entry by its ticket.  After a try whose answer never
		 * came the ticket may be unknown, or stale (that try queued us
		 * afresh): the script looks for the entry by wait id.  Left
		 * queued, it would be granted the lock, and our channel may
		 * still be subscribed to hear that grant. */
		if (place->ticket > 0 && !uncertain)
			g_snprintf(ticket, sizeof(ticket), "%" G_GINT64_FORMAT, place->ticket);
		else
			g_strlcpy(ticket, "?", sizeof(ticket));
		done = dlock__remaining_us(until_us) > 0 &&
		       release_script(b, lease, ticket, until_us, &deleted) == DLOCK_OK;
		if (done && deleted)
			dlock__log(b->logger, DLOCK_LOG_DEBUG, "%s: %s was handed to a wait that had ended: "
			           "released", b->label, lease->names.key);
	}
	if (!done || uncertain || lease->kept->len > 0) {
		int64_t grant_ms = (place->queued ? entry_lease_ms(b, lease) : 0) + lease->ttl_ms;

		dlock__redis_cleanup_later(b, lease, ticket, dlock__boot_us() + grant_ms * 1000, lease->kept);
		lease->kept = NULL;
	}
}

/*
 * A READ hold for the owner of write, a live EXCLUSIVE or WRITE hold on
 * the same resource: granted at once, never queued (lua/downgrade.lua).
 * Until the write is released the read hold renews through it.
 */
static int downgrade(redis_backend *b, redis_lease *lease, const redis_lease *write,
                     dlock__waiter *waiter, int64_t wait_ms, int64_t deadline_us)
{
	char ttl[24];
	const char *words[DOWNGRADE_WORDS] = {
		[DOWNGRADE_KEY_LOCK] = lease->names.key,
		[DOWNGRADE_KEY_FENCE] = lease->names.fence,
		[DOWNGRADE_KEY_QUEUE] = lease->names.queue,
		[DOWNGRADE_ARG_WRITE_TOKEN] = write->token,
		[DOWNGRADE_ARG_TOKEN] = lease->token,
		[DOWNGRADE_ARG_TTL] = ttl,
		[DOWNGRADE_ARG_WAIT_ID] = write->id,
	};
	int64_t sent_us = dlock__boot_us();
	redis_ack ack = dlock__redis_ack_for(b, lease->ttl_ms);
	bool uncertain = false;
	redisReply *reply;
	uint64_t token = 0;
	int rc;

	g_snprintf(ttl, sizeof(ttl), "%" G_GINT64_FORMAT, lease->ttl_ms);
	rc = dlock__redis_eval_pooled(b, waiter, script_deadline_us(b, wait_ms, deadline_us),
	                              SCRIPT_DOWNGRADE, words, &ack, &reply, &uncertain, lease->kept);
	if (rc == DLOCK_ETIMEDOUT)
		rc = out_of_time(dlock__hold_resource(lease->hold), wait_ms, deadline_us);
	if (rc == DLOCK_OK) {
		if (!reply_is_integers(reply, 1) ||
		    (reply->element[0]->integer == 1 && !reply_is_integers(reply, 2)))
			rc = dlock__error(DLOCK_EBACKEND, "%s: unexpected reply to the downgrade script",
			                  b->label);
		else if (reply->element[0]->integer == 1)
			token = (uint64_t)reply->element[1]->integer;
		else
			rc = dlock__error(DLOCK_ELOST, "%s: cannot downgrade '%s': the write hold has "
			                  "ended on the server", b->label, lease->names.key);
		/* Made, but not replicated: it goes with the cleanup below. */
		if (token && ack.n > 0 && ack.acked < ack.n)
			rc = unacked_error(b, lease, &ack);
		freeReplyObject(reply);
	}
	if (rc == DLOCK_OK && !grant_alive(lease, sent_us))
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: the downgrade of '%s' came after its %" PRId64
		                  " ms lease had run out", b->label, lease->names.key, lease->ttl_ms);
	if (rc == DLOCK_OK) {
		lease->under = g_strdup(write->token);
		take_grant(b, lease, token, sent_us);
		return DLOCK_OK;
	}
	/* An entry the script may have made, or did, goes with the lease. */
	if (uncertain || token)
		dlock__redis_cleanup_later(b, lease, "", dlock__boot_us() + lease->ttl_ms * 1000,
		                           lease->kept);
	else
		dlock__redis_kept_close(lease->kept);
	lease->kept = NULL;
	dlock__redis_lease_unref(lease);
	return rc;
}

/* An acquire's machine (backend.h): what the wait keeps between steps. */
typedef struct redis_acquire {
	dlock__wait wait;
	redis_lease *lease;     /* ours until granted, then the hold's */
	queue_place place;
	bool uncertain;         /* a try may have set our key unseen */
	bool first;
	char *unacked;          /* why the last grant was not a hold, if it was not */
} redis_acquire;

int dlock__redis_acquire_begin(dlock__backend *backend, dlock__hold *hold, dlock__waiter *waiter,
                               int64_t wait_ms, int64_t deadline_us, unsigned flags,
                               void **ret_machine)
{
	redis_backend *b = redis_of(backend);
	dlock__hold *write = dlock__hold_downgrade_of(hold);
	redis_acquire *m;

	(void)flags;
	/* One round trip, bounded by the deadline: a step of its own. */
	if (write && dlock__hold_backend_data(write))
		return downgrade(b, lease_new(b, hold), dlock__hold_backend_data(write), waiter, wait_ms,
		                 deadline_us);
	m = g_new0(redis_acquire, 1);
	dlock__wait_init(&m->wait, waiter, dlock__hold_resource(hold), wait_ms, deadline_us,
	                 BACKOFF_FIRST_US);
	m->lease = lease_new(b, hold);
	m->first = true;
	*ret_machine = m;
	return DLOCK_OK;
}

/* The wait ends with rc: off the subscriber, and on failure out of the
 * queue, with what a try may have left behind removed. */
static int finish(redis_backend *b, redis_acquire *m, int rc)
{
	stop_listening(b, m->lease, &m->place, m->wait.waiter);
	/* The deadline, after grants too few replicas acknowledged: the
	 * backend is what failed, and the last one says how. */
	if (m->unacked && (rc == DLOCK_ETIMEDOUT || rc == DLOCK_EUNAVAILABLE))
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s", m->unacked);
	if (rc != DLOCK_OK) {
		/* Leave the queue; a try whose answer never came may have set our
		 * key (later tries with the same token would have found it ours),
		 * or may still: make sure it goes, once the server is done with
		 * that try.  A cancel wants the caller back now, and a step
		 * past the deadline does no I/O: the cleanup goes to the
		 * background. */
		int64_t until_us = rc == DLOCK_ECANCELED
		                           ? 0
		                           : MIN(m->wait.deadline_us,
		                                 dlock__mono_us() + b->command_timeout_ms * 1000);

		give_up(b, m->lease, &m->place, m->uncertain, until_us);
		dlock__redis_lease_unref(m->lease);
	}
	m->lease = NULL;
	return rc;
}

int dlock__redis_acquire_step(dlock__backend *backend, void *machine, dlock__turn *ret_turn)
{
	redis_backend *b = redis_of(backend);
	redis_acquire *m = machine;
	redis_lease *lease = m->lease;
	queue_place *place = &m->place;
	dlock__waiter *waiter = m->wait.waiter;
	const char *resource = m->wait.resource;
	int64_t wait_ms = m->wait.wait_ms, deadline_us = m->wait.deadline_us;
	int rc = dlock__wait_resume(&m->wait, BACKOFF_CAP_US);

	if (rc != DLOCK_OK)
		return finish(b, m, rc);
	for (;;) {
		uint64_t seen = dlock__waiter_seq(waiter);
		try_answer ans = { .pttl = -1 };
		int64_t nap_us;
		bool queue;
		try_result result;

		if (place->ticket > 0 && dlock__redis_sub_take_grant(b, &place->box, place->ticket, &ans.token)) {
			/* Handed over by a release, after our last try found us
			 * queued: the lease counts from that try's send.  Too old
			 * for what is left of the lease, or to be acknowledged by
			 * replicas (min-replicas: the releaser's writes are not
			 * ours to WAIT for): the next try, at once, renews it,
			 * finding our token in the lock, and waits for them. */
			if (b->min_replicas == 0 && grant_alive(lease, place->queued_sent_us)) {
				take_grant(b, lease, ans.token, place->queued_sent_us);
				return finish(b, m, DLOCK_OK);
			}
			place->ticket = 0;
		}
		if (dlock__waiter_canceled(waiter))
			return finish(b, m, dlock__error_canceled(resource));
		if (dlock__remaining_us(deadline_us) == 0)
			return finish(b, m, dlock__error_timeout(resource, wait_ms));
		/* Queue only once the server will tell us of a grant, or has
		 * refused to (an ACL without channel rights): then the entry
		 * says so, and our own tries find the grant. */
		queue = place->listening && dlock__redis_sub_confirmed(b, place->channel);
		place->polls = place->listening && !queue && dlock__redis_sub_refused(b, place->channel);
		queue = queue || place->polls;
		if (queue)
			place->queued = true;
		result = try_once(b, lease, waiter, queue ? place : NULL,
		                  script_deadline_us(b, wait_ms, deadline_us), &ans, &rc);
		/* Only running out of time keeps the last unacknowledged
		 * grant as the reason. */
		if (result == TRY_BUSY || result == TRY_GRANTED ||
		    (result != TRY_UNACKED && rc != DLOCK_ETIMEDOUT))
			g_clear_pointer(&m->unacked, g_free);
		if (rc == DLOCK_ETIMEDOUT)
			rc = out_of_time(resource, wait_ms, deadline_us);
		if (result == TRY_GRANTED && !grant_alive(lease, ans.sent_us)) {
			/* Not a grant.  Our token may still be in the key: a later
			 * try renews it from its own send, a failure deletes it. */
			m->uncertain = true;
			m->first = false;
			rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: the grant of '%s' came after its %" PRId64
			                  " ms lease had run out", b->label, resource, lease->ttl_ms);
			dlock__log(b->logger, DLOCK_LOG_WARNING, "%s", dlock_last_error_message());
			if (wait_ms == 0)
				return finish(b, m, rc);
			/* No pause: that answer alone took longer than the lease. */
			continue;
		}
		if (result == TRY_GRANTED) {
			take_grant(b, lease, ans.token, ans.sent_us);
			return finish(b, m, DLOCK_OK);
		}
		if (result == TRY_UNACKED) {
			/* Not a hold: a promoted replica might never have seen it.
			 * It goes back at once (handed on to the next in line),
			 * and the wait tries again, from the back of the queue. */
			if (!return_unacked(b, lease, place, deadline_us)) {
				m->uncertain = true;
				return finish(b, m, rc);
			}
			m->first = false;
			g_free(m->unacked);
			m->unacked = g_strdup(dlock_last_error_message());
			if (wait_ms == 0 || dlock__remaining_us(deadline_us) == 0)
				return finish(b, m, rc);
			return dlock__wait_turn(&m->wait, seen, m->wait.backoff_us, ret_turn);
		}
		if (result == TRY_BUSY && queue) {
			place->ticket = ans.ticket;
			place->at_head = ans.at_head;
			place->queued_sent_us = ans.sent_us;
		}
		if (result == TRY_UNCERTAIN)
			m->uncertain = true;
		if (result != TRY_BUSY && rc == DLOCK_ECANCELED)
			return finish(b, m, dlock__error_canceled(resource));
		if (result != TRY_BUSY) {
			/* A first try that cannot reach the server fails fast; once
			 * waiting, a dropped connection is retried until the deadline.
			 * What the server refuses is final. */
			if (m->first || rc == DLOCK_EBACKEND || rc == DLOCK_ETIMEDOUT || rc == DLOCK_EACCES ||
			    rc == DLOCK_ECONFIG)
				return finish(b, m, rc);
		}
		m->first = false;
		if (result == TRY_BUSY && wait_ms == 0)
			return finish(b, m, dlock__error_busy(resource));
		if (!place->listening)
			start_listening(b, lease, place, waiter);
		nap_us = next_sleep_us(place, lease->ttl_ms, ans.pttl, m->wait.backoff_us);
		return dlock__wait_turn(&m->wait, seen, nap_us, ret_turn);
	}
}

void dlock__redis_acquire_end(dlock__backend *backend, void *machine)
{
	redis_acquire *m = machine;

	(void)backend;
	g_free(m->unacked);
	g_free(m);
}

/* The release script for lease, bounded by until_us (monotonic): a
 * reconnect included.  *ret_deleted: whether it deleted our lock. */
static int release_script(redis_backend *b, redis_lease *lease, const char *ticket,
                          int64_t until_us, int *ret_deleted)
{
	const char *words[RELEASE_WORDS];
	redisReply *reply;
	bool uncertain = false;
	int rc;

	dlock__redis_release_words(&lease->names, lease->token, ticket, lease->id, lease->mode,
	                           dlock__redis_publish_command(b), words);
	rc = dlock__redis_eval_pooled(b, NULL, until_us, SCRIPT_RELEASE, words, NULL, &reply, &uncertain,
	                              NULL);
	if (rc != DLOCK_OK)
		return rc;
	/* After an attempt without an answer, "not ours" may mean that attempt
	 * deleted it: only a clean first answer proves the lease had ended. */
	*ret_deleted = (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) || uncertain;
	freeReplyObject(reply);
	return DLOCK_OK;
}

/* The connections of the acquire's tries left unanswered, or NULL. */
static GArray *take_kept(redis_lease *lease)
{
	GArray *kept = lease->kept;

	lease->kept = NULL;
	return kept;
}

static bool release_deferred(redis_backend *b)
{
	bool defer;

	dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
	defer = dlock__mono_us() < b->release_defer_until_us;
	dlock__mutex_unlock(&b->pool_mu);
	return defer;
}

/* A hold the core found past its lease's end: see dlock__redis_lease_abandon(). */
void dlock__redis_abandon(dlock__backend *backend, dlock__hold *hold)
{
	redis_backend *b = redis_of(backend);
	redis_lease *lease = dlock__hold_backend_data(hold);

	if (lease)
		dlock__redis_lease_abandon(b, lease);
}

/*
 * End a hold: stop the watchdog for it, then compare-and-delete, which
 * hands the lock to the next waiter.  If the server is unreachable (or the
 * watchdog already found it so), the delete goes on in the background and
 * the caller is not kept waiting.
 */
int dlock__redis_release(dlock__backend *backend, dlock__hold *hold)
{
	redis_backend *b = redis_of(backend);
	redis_lease *lease = dlock__hold_backend_data(hold);
	bool lost = false, suspended;
	int deleted = 0;
	int rc;

	if (!lease)
		return DLOCK_OK;
	dlock__hold_set_backend_data(hold, NULL);
	suspended = dlock__redis_unwatch(b, lease, &lost);
	if (!suspended && release_deferred(b))
		suspended = true; /* a release just found the server unreachable */
	if (suspended) {
		/* A lease lost with its key still maybe ours has its deferred
		 * release queued already. */
		if (!lease->cleaned)
			dlock__redis_cleanup_later(b, lease, "", dlock__boot_us() + lease->ttl_ms * 1000,
			                           take_kept(lease));
		rc = lost ? DLOCK_ELOST : DLOCK_OK;
	} else if ((rc = release_script(b, lease, "", dlock__mono_us() + b->command_timeout_ms * 1000,
	                                &deleted)) != DLOCK_OK) {
		dlock__log(b->logger, DLOCK_LOG_WARNING, "release of '%s' deferred: %s", lease->names.key,
		           dlock_last_error_message());
		if (rc == DLOCK_EUNAVAILABLE || rc == DLOCK_ETIMEDOUT) {
			dlock__mutex_lock(&b->pool_mu, DLOCK__RANK_REDIS_POOL);
			b->release_defer_until_us = dlock__mono_us() + RELEASE_DEFER_US;
			dlock__mutex_unlock(&b->pool_mu);
		}
		dlock__redis_cleanup_later(b, lease, "", dlock__boot_us() + lease->ttl_ms * 1000,
		                           take_kept(lease));
		rc = DLOCK_OK;
	} else {
		rc = deleted ? DLOCK_OK : DLOCK_ELOST;
		/* An earlier try of the acquire, left unanswered, may still set
		 * the key again after this delete. */
		if (lease->kept)
			dlock__redis_cleanup_later(b, lease, "", dlock__boot_us() + lease->ttl_ms * 1000,
			                           take_kept(lease));
	}
	dlock__redis_lease_unref(lease);
	return rc;
}
