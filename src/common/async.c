/* SPDX-License-Identifier: MIT */
/*
 * Calls that no application thread waits in: an acquire or a release
 * started on a handle owned by the handle (DLOCK_OWNER_HANDLE), whose
 * result comes to a done callback.  docs/async.md gives the rules.
 *
 * The call is an op: a task of the client's stepper (kit/stepper.h) runs
 * the same steps dlock_acquire() runs on its caller's thread -- the
 * owner's settle, then the backend's machine (backend.h) -- and its waiter
 * pokes the task where a blocking acquire's would wake its thread.  When
 * the steps end, the result is queued for the callback thread as a DONE
 * event, behind the state callbacks already queued.
 *
 * A granted hold is installed when its done starts, not when the backend
 * grants it: until then a cancel can still take it back (it is released
 * in the background, and done gets DLOCK_ECANCELED), and whatever the
 * backend reports of it meanwhile is posted at the install, behind the
 * done.  The op's phase, under the handle's mutex, decides who runs done,
 * once: the callback thread (COMPLETE -> STARTED), or a free that claims
 * it first (COMPLETE -> CLAIMED) and runs it itself with DLOCK_ECANCELED.
 *
 * A recipe's acquire (an election's campaign, recipe.h) is the same op
 * with the recipe's hooks: one stepped before the backend is asked, one
 * told the result just before done.
 *
 * The op counts as a call on the handle and the client (dlock__lock_enter)
 * from its start until its steps end, so the frees wait for its steps as
 * they wait for a blocking acquire, and a step never runs on a freed
 * handle.
 */
#include "clock.h"
#include "core.h"
#include "mutex.h"
#include "recipe.h"
#include "stepper.h"

typedef enum op_kind {
	OP_ACQUIRE,
	OP_RELEASE,
} op_kind;

typedef enum op_stage {
	STAGE_SETTLE,  /* the owner's look at its hold: re-entry, refusal or fresh */
	STAGE_PREPARE, /* a recipe's hook before the backend is asked */
	STAGE_MACHINE, /* the backend's machine runs */
} op_stage;

typedef enum op_phase {
	OP_RUNNING,    /* its steps run */
	OP_COMPLETE,   /* its result is known and its DONE event queued */
	OP_STARTED,    /* the callback thread runs its done */
	OP_CLAIMED,    /* a free runs its done; the queued event is skipped */
	OP_RETURNED,   /* its done has returned */
} op_phase;

struct dlock__op {
	gatomicrefcount ref;     /* the handle's (async_op), the task's, a queued event's */
	dlock_lock *lock;        /* referenced */
	op_kind kind;
	op_stage stage;
	dlock_done_fn done;
	void *user_data;
	int64_t wait_ms;
	int64_t deadline_us;
	dlock__waiter *waiter;   /* on lock->waiters while the steps run */
	dlock__task *task;
	void *machine;           /* the backend's, during STAGE_MACHINE */
	const dlock__recipe_call *call; /* a recipe's call: its hooks */
	void *call_data;
	dlock__hold *downgrade;  /* the settle's, until the machine begins */
	dlock__hold *hold;       /* a fresh hold, from its grant until delivered */
	bool reentry;            /* granted as a re-entry of the handle's hold
	                          * (a recipe's: confirmed, not counted) */
	int rc;
	char *message;           /* a failure's detail message */
	/* guarded by lock->mu */
	op_phase phase;
	bool revoked;            /* dlock_lock_cancel() came before done started */
};

static dlock__op *op_ref(dlock__op *op)
{
	g_atomic_ref_count_inc(&op->ref);
	return op;
}

void dlock__op_unref(dlock__op *op)
{
	if (!op || !g_atomic_ref_count_dec(&op->ref))
		return;
	dlock__hold_unref(op->hold);
	dlock__hold_unref(op->downgrade);
	dlock__waiter_free(op->waiter);
	dlock__task_unref(op->task);
	dlock__lock_unref(op->lock);
	g_free(op->message);
	g_free(op);
}

/* The client's stepper, made on its first asynchronous call. */
static dlock__stepper *client_stepper(dlock_client *client)
{
	dlock__stepper *stepper;

	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	if (!client->stepper)
		client->stepper = dlock__stepper_new(DLOCK__STEPPER_MAX_WORKERS);
	stepper = client->stepper;
	dlock__mutex_unlock(&client->mu);
	return stepper;
}

/* ---- the background release of a grant nobody takes ------------------ */

typedef struct discard {
	dlock_client *client;  /* entered until the release is done */
	dlock__hold *hold;
} discard;

static bool discard_step(void *data, bool urgent, int64_t *until_us)
{
	discard *d = data;

	(void)urgent;
	(void)until_us;
	dlock__hold_discard(d->hold);
	dlock__hold_unref(d->hold);
	dlock__client_leave(d->client);
	g_free(d);
	return true;
}

/*
 * Release hold, granted and never installed, off the calling thread: on a
 * worker of the stepper, as a call of the client (its free waits for it).
 * On the calling thread if the client is being freed (its free then
 * waits for this thread, which releases within the backend's timeouts).
 * Takes the reference.
 */
static void discard_later(dlock_client *client, dlock__hold *hold)
{
	discard *d;
	dlock__task *task;

	if (dlock__client_enter(client) != DLOCK_OK) {
		dlock__hold_discard(hold);
		dlock__hold_unref(hold);
		return;
	}
	d = g_new0(discard, 1);
	d->client = client;
	d->hold = hold;
	task = dlock__task_new(discard_step, d, INT64_MAX);
	dlock__task_start(client_stepper(client), task);
	dlock__task_unref(task);
}

/* ---- the steps --------------------------------------------------------- */

/* The steps have ended with rc: the result is queued for done. */
static void complete(dlock__op *op, int rc)
{
	dlock_lock *lock = op->lock;

	if (op->hold)
		dlock__hold_set_downgrade(op->hold, NULL);
	if (op->kind == OP_ACQUIRE) {
		if (rc != DLOCK_OK && rc != DLOCK_ECANCELED && dlock__waiter_canceled(op->waiter))
			rc = dlock__lock_canceled_failure(lock, rc);
		dlock__lock_remove_waiter(lock, op->waiter);
		dlock__waiter_set_notify(op->waiter, NULL, NULL);
	}
	dlock__hold_unref(op->downgrade);
	op->downgrade = NULL;
	if (rc != DLOCK_OK) {
		op->message = g_strdup(dlock_last_error_message());
		dlock__hold_unref(op->hold);
		op->hold = NULL;
	}
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	op->rc = rc;
	op->phase = OP_COMPLETE;
	dlock__mutex_unlock(&lock->mu);
	/* Queued before the call ends: a free, which waits for the call,
	 * then finds it COMPLETE and the event queued. */
	dlock__callbacks_post_done(lock->client, lock, op_ref(op));
	dlock__lock_leave(lock);
}

/* A fresh hold: the backend's machine, begun. */
static int begin(dlock__op *op)
{
	dlock_lock *lock = op->lock;

	op->hold = dlock__hold_new(lock->client, lock);
	if (op->downgrade) {
		dlock__hold_set_downgrade(op->hold, op->downgrade);
		dlock__hold_unref(op->downgrade);
		op->downgrade = NULL;
	}
	/* A try (wait 0) is bounded by the backend's own timeouts alone. */
	return lock->slot->ops->acquire_begin(lock->slot->impl, op->hold, op->waiter, op->wait_ms,
	                                      op->wait_ms == 0 ? INT64_MAX : op->deadline_us,
	                                      DLOCK__ACQUIRE_ASYNC, &op->machine);
}

/* The steps have ended: the result goes to done, and the task's
 * reference goes. */
static bool finished(dlock__op *op, int rc)
{
	complete(op, rc);
	dlock__op_unref(op);
	return true;
}

/* Why a call that is urgent before its backend was asked ends. */
static int ended_early(const dlock__op *op)
{
	return dlock__waiter_canceled(op->waiter) ? dlock__error_canceled(op->lock->resource)
	                                          : dlock__error_timeout(op->lock->resource, op->wait_ms);
}

static bool step(void *data, bool urgent, int64_t *until_us)
{
	dlock__op *op = data;
	dlock_lock *lock = op->lock;
	const dlock__backend_ops *ops = lock->slot->ops;
	dlock__turn turn;
	int rc;

	if (op->kind == OP_RELEASE)
		return finished(op, dlock__owner_release(lock));
	if (op->stage == STAGE_SETTLE) {
		/* Counted at delivery, as a fresh hold is installed then. */
		rc = dlock__owner_settle_step(lock, op->deadline_us, op->waiter, false, !urgent, &turn,
		                              &op->downgrade);
		if (rc == DLOCK__OWNER_WAIT) {
			*until_us = turn.until_us;
			return false;
		}
		/* Canceled or past its deadline before it began, on a hold
		 * lost meanwhile: the next call or release clears it. */
		if (rc == DLOCK__OWNER_WOULD_BLOCK)
			return finished(op, ended_early(op));
		/* A recipe's hold found lost is cleared: it asks afresh. */
		if (rc == DLOCK_ELOST && op->call)
			rc = DLOCK__OWNER_FRESH;
		if (rc != DLOCK__OWNER_FRESH) {
			op->reentry = rc == DLOCK_OK;
			return finished(op, rc);
		}
		op->stage = STAGE_PREPARE;
	}
	if (op->stage == STAGE_PREPARE) {
		if (op->call) {
			rc = op->call->prepare(op->call_data, op->waiter, op->wait_ms, op->deadline_us,
			                       &turn);
			if (rc == DLOCK__STEP_WAIT) {
				*until_us = turn.until_us;
				return false;
			}
			if (rc != DLOCK_OK)
				return finished(op, rc);
		}
		/* Canceled or past its deadline before the backend was asked:
		 * it is not asked now (an urgent step may not wait for a
		 * server). */
		if (urgent)
			return finished(op, ended_early(op));
		rc = begin(op);
		if (!op->machine)
			return finished(op, rc);
		op->stage = STAGE_MACHINE;
	}
	rc = ops->acquire_step(lock->slot->impl, op->machine, &turn);
	if (rc == DLOCK__STEP_WAIT) {
		*until_us = turn.until_us;
		return false;
	}
	ops->acquire_end(lock->slot->impl, op->machine);
	op->machine = NULL;
	return finished(op, rc);
}

/* ---- start ------------------------------------------------------------- */

static int start(dlock_lock *lock, op_kind kind, int64_t wait_ms, const dlock__recipe_call *call,
                 void *call_data, dlock_done_fn done, void *user_data, const char *what)
{
	int64_t deadline_us = dlock__deadline_after_ms(wait_ms);
	dlock__op *op, *replaced = NULL;
	bool on_callback_thread;
	int rc;

	if (!done)
		return dlock__error(DLOCK_EINVAL, "%s: done must not be NULL", what);
	rc = dlock__lock_enter(lock, what);
	if (rc != DLOCK_OK)
		return rc;
	on_callback_thread = dlock__callbacks_on_thread(lock->client);
	if (kind == OP_ACQUIRE)
		rc = dlock__lock_freeze_options(lock);
	if (rc == DLOCK_OK && kind == OP_ACQUIRE && !lock->slot->ops->acquire_begin)
		rc = dlock__error(DLOCK_EINVAL, "%s: the %s backend of lock '%s' cannot acquire without "
		                  "blocking", what, lock->slot->ops->type, lock->resource);
	if (rc != DLOCK_OK) {
		dlock__lock_leave(lock);
		return rc;
	}
	op = g_new0(dlock__op, 1);
	g_atomic_ref_count_init(&op->ref);
	op->lock = dlock__lock_ref(lock);
	op->kind = kind;
	op->call = call;
	op->call_data = call_data;
	op->done = done;
	op->user_data = user_data;
	op->wait_ms = wait_ms;
	op->deadline_us = deadline_us;
	op->waiter = dlock__waiter_new();
	/* Its steps are urgent from the deadline on; a try's from never, and
	 * a release's never: it waits for nothing, and no cancel reaches it
	 * (its step releases on the server, on a worker). */
	op->task = dlock__task_new(step, op_ref(op),
	                           wait_ms == 0 || kind == OP_RELEASE ? INT64_MAX : deadline_us);

	/* The waiter pokes the task from before its first step on. */
	if (kind == OP_ACQUIRE)
		dlock__waiter_set_notify(op->waiter, dlock__task_notify, op->task);
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	if (lock->owner != DLOCK_OWNER_HANDLE)
		rc = dlock__error(DLOCK_EINVAL, "%s: lock '%s' is owned by its threads; only a handle-owned "
		                  "lock (DLOCK_OWNER_HANDLE) is acquired and released without blocking",
		                  what, lock->resource);
	else if (lock->async_op && !(lock->async_op->phase == OP_STARTED && on_callback_thread))
		rc = dlock__error(DLOCK_EBUSY, "%s: lock '%s' has a call in flight (its done has not "
		                  "returned)", what, lock->resource);
	else
		replaced = lock->async_op, lock->async_op = op_ref(op);
	/* Published with the call: a cancel (dlock_lock_cancel, the frees)
	 * that finds the call finds its waiter. */
	if (rc == DLOCK_OK && kind == OP_ACQUIRE) {
		g_ptr_array_add(lock->waiters, op->waiter);
		if (lock->freed || lock->closing)
			dlock__waiter_cancel(op->waiter);
	}
	dlock__mutex_unlock(&lock->mu);
	/* From inside the done of the handle's call (the one done that runs
	 * on this thread now): that call is over but for its return, and
	 * this one takes its place. */
	dlock__op_unref(replaced);
	if (rc != DLOCK_OK) {
		dlock__lock_leave(lock);
		dlock__op_unref(op); /* the task's, never started */
		dlock__op_unref(op);
		return rc;
	}
	dlock__task_start(client_stepper(lock->client), op->task);
	dlock__op_unref(op);
	return DLOCK_OK;
}

DLOCK_API int dlock_acquire_async(dlock_lock *lock, int64_t wait_ms, dlock_done_fn done,
                                  void *user_data)
{
	return start(lock, OP_ACQUIRE, wait_ms, NULL, NULL, done, user_data, "dlock_acquire_async");
}

int dlock__lock_acquire_async(dlock_lock *lock, int64_t wait_ms, const dlock__recipe_call *call,
                              void *data, dlock_done_fn done, void *user_data, const char *what)
{
	return start(lock, OP_ACQUIRE, wait_ms, call, data, done, user_data, what);
}

DLOCK_API int dlock_release_async(dlock_lock *lock, dlock_done_fn done, void *user_data)
{
	return start(lock, OP_RELEASE, 0, NULL, NULL, done, user_data, "dlock_release_async");
}

/* ---- delivery ---------------------------------------------------------- */

/* done has returned, or will not run again: the handle is free for
 * another call. */
static void returned(dlock__op *op)
{
	dlock_lock *lock = op->lock;
	bool ours;

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	if (op->phase == OP_STARTED)
		lock->delivering--;
	op->phase = OP_RETURNED;
	ours = lock->async_op == op;
	if (ours)
		lock->async_op = NULL;
	/* A free may wait for it. */
	g_cond_broadcast(&lock->idle);
	dlock__mutex_unlock(&lock->mu);
	if (ours)
		dlock__op_unref(op);
}

/* What done gets for an acquire whose result is a grant: installed now,
 * or taken back when a cancel or a free came first. */
static int install(dlock__op *op, bool revoked, uint64_t *ret_token)
{
	dlock_lock *lock = op->lock;
	dlock_client *client = lock->client;
	dlock__hold *hold = op->hold;

	op->hold = NULL;
	if (op->reentry) {
		/* Confirmed by the step; counted now, if it still stands. */
		hold = dlock__owner_find(lock);
		if (revoked) {
			dlock__hold_unref(hold);
			return dlock__error(DLOCK_ECANCELED, "wait for lock '%s' was canceled", lock->resource);
		}
		if (!hold || !(op->call ? dlock__hold_live(hold) : dlock__hold_count_up_live(hold, lock))) {
			dlock__hold_unref(hold);
			return dlock__error(DLOCK_ELOST, "lock '%s' ended before its re-entry was delivered",
			                    lock->resource);
		}
	} else if (revoked || dlock__client_enter(client) != DLOCK_OK) {
		/* The client's free, which this enter would have kept waiting,
		 * has begun: it would not see a hold installed now. */
		discard_later(client, hold);
		return dlock__error(DLOCK_ECANCELED, "wait for lock '%s' was canceled; its grant, which "
		                    "came meanwhile, is released", lock->resource);
	} else {
		dlock__owner_install(hold, lock);
		dlock__client_leave(client);
	}
	dlock__hold_state(hold, ret_token);
	dlock__hold_unref(hold);
	return DLOCK_OK;
}

void dlock__op_deliver(dlock__op *op)
{
	dlock_lock *lock = op->lock;
	uint64_t token = 0;
	bool revoked;
	int rc;

	/* Under the client's mutex too: a free that has begun (the client's
	 * or the handle's) runs every done of its handles not started yet
	 * itself, on its own thread, once no other runs. */
	dlock__mutex_lock(&lock->client->mu, DLOCK__RANK_CLIENT);
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	if (op->phase != OP_COMPLETE || lock->client->closing || lock->freed) {
		dlock__mutex_unlock(&lock->mu);
		dlock__mutex_unlock(&lock->client->mu);
		return; /* claimed by a free, which runs done */
	}
	op->phase = OP_STARTED;
	lock->delivering++;
	revoked = op->revoked;
	dlock__mutex_unlock(&lock->mu);
	dlock__mutex_unlock(&lock->client->mu);

	rc = op->rc;
	if (rc == DLOCK_OK && op->kind == OP_ACQUIRE)
		rc = install(op, revoked, &token);
	else if (rc != DLOCK_OK)
		dlock__error(rc, "%s", op->message);
	if (op->call)
		op->call->delivered(op->call_data, rc, rc == DLOCK_OK && !op->reentry);
	op->done(lock, rc, token, op->user_data);
	returned(op);
}

bool dlock__op_pending(dlock_lock *lock)
{
	bool pending;

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	pending = lock->async_op && lock->async_op->phase < OP_STARTED;
	dlock__mutex_unlock(&lock->mu);
	return pending;
}

/* ---- cancel and the frees ---------------------------------------------- */

void dlock__op_revoke(dlock_lock *lock)
{
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	if (lock->async_op && lock->async_op->phase <= OP_COMPLETE)
		lock->async_op->revoked = true;
	dlock__mutex_unlock(&lock->mu);
}

void dlock__op_claim(dlock_lock *lock)
{
	dlock__op *op;

	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	op = lock->async_op;
	if (op && op->phase == OP_COMPLETE)
		op->phase = OP_CLAIMED;
	else
		op = NULL;
	dlock__mutex_unlock(&lock->mu);
	if (!op)
		return;
	if (op->hold) {
		/* The free releases what it holds on the calling thread; so
		 * this grant, bounded by the backend's timeouts. */
		dlock__hold_discard(op->hold);
		dlock__hold_unref(op->hold);
		op->hold = NULL;
	}
	dlock__error(DLOCK_ECANCELED, "lock '%s' was freed before its call's result was delivered",
	             lock->resource);
	if (op->call)
		op->call->delivered(op->call_data, DLOCK_ECANCELED, false);
	op->done(lock, DLOCK_ECANCELED, 0, op->user_data);
	returned(op);
}

void dlock__op_wait_delivered(dlock_lock *lock)
{
	dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
	while (lock->delivering > 0)
		g_cond_wait(&lock->idle, &lock->mu);
	dlock__mutex_unlock(&lock->mu);
}
