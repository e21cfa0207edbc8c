/* SPDX-License-Identifier: MIT */
/*
 * Sweeps: finding and deleting a lock node whose create may have happened
 * although nobody learned its name.
 *
 * A create whose answer is lost with the connection, or that an acquire
 * stops waiting for (deadline, cancel), may still have made its node.
 * The node is ephemeral, so it goes when the session ends, but a session
 * that lives on keeps it first in its queue or ahead of everyone who comes
 * later, and nobody would ever delete it.  Its name is unknown, but it
 * carries the acquire's uuid: a sweep lists the resource's children and
 * deletes the one with that uuid.  The listing is sent on the same session
 * after the create, and ZooKeeper answers a session's requests in order,
 * so it sees the create if the create happened.  A sweep that gets no
 * answer for want of a connection is sent again after the next reconnect;
 * one on an ended session is dropped (the node ended with it).
 */
#include "clock.h"
#include "error.h"
#include "internal.h"
#include "mutex.h"

typedef struct sweep {
	zk_session *session;       /* referenced while a listing is in flight */
	char *dir;
	char *uuid;
} sweep;

static void sweep_free(gpointer data)
{
	sweep *sw = data;

	if (!sw)
		return;
	g_free(sw->dir);
	g_free(sw->uuid);
	g_free(sw);
}

static sweep *sweep_new(const char *dir, const char *uuid)
{
	sweep *sw = g_new0(sweep, 1);

	sw->dir = g_strdup(dir);
	sw->uuid = g_strdup(uuid);
	return sw;
}

static dlock__cleanup_result sweep_try(gpointer data, gpointer session);

static const dlock__cleanup_ops sweep_ops = { sweep_try, sweep_free };

/* Keep a sweep of dir for uuid for the next reconnect; s->mu held. */
static void keep_locked(zk_session *s, const char *dir, const char *uuid)
{
	dlock__mutex_assert_held(&s->mu);
	dlock__cleanups_add(s->cleanups, &sweep_ops, sweep_new(dir, uuid), INT64_MAX, dlock__boot_us());
}

static void sweep_listed(int rc, const struct String_vector *children, const void *data);

/*
 * Send the listing for a sweep of the item's dir and uuid (the completion
 * takes it from there): done, or to retry if the client refused it for
 * want of a connection, else given up.  s->mu held, s connected.
 */
static dlock__cleanup_result sweep_try(gpointer data, gpointer session)
{
	const sweep *item = data;
	zk_session *s = session;
	sweep *sw = sweep_new(item->dir, item->uuid);
	int rc;

	sw->session = dlock__zk_session_ref(s);
	dlock__zk_request_sent_locked(s);
	rc = zoo_aget_children(s->zh, sw->dir, 0, sweep_listed, sw);
	if (rc == ZOK)
		return DLOCK__CLEANUP_DONE;
	/* Not queued: no completion will run.  The caller holds another
	 * reference, so this one cannot be the last. */
	s->outstanding--;
	g_atomic_ref_count_dec(&s->ref);
	sweep_free(sw);
	return dlock__zk_rc_connection(rc) ? DLOCK__CLEANUP_RETRY : DLOCK__CLEANUP_GIVE_UP;
}

static void sweep_listed(int rc, const struct String_vector *children, const void *data)
{
	sweep *sw = (sweep *)data;
	zk_session *s = sw->session;
	GPtrArray *deleted = g_ptr_array_new_with_free_func(g_free);

	sw->session = NULL;
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	if (rc == ZOK && children) {
		for (int i = 0; i < children->count; i++) {
			char *path;

			if (!dlock__zk_node_is_ours(children->data[i], sw->uuid))
				continue;
			path = g_strconcat(sw->dir, "/", children->data[i], NULL);
			dlock__zk_delete_send_locked(s, path);
			g_ptr_array_add(deleted, path);
		}
	} else if (dlock__zk_rc_connection(rc) && s->phase != ZK_ENDED) {
		keep_locked(s, sw->dir, sw->uuid); /* again after the reconnect */
	}
	/* Otherwise ZNONODE: nothing was made (or it is gone); or the session
	 * ended, taking the node with it. */
	sweep_free(sw);
	dlock__mutex_unlock(&s->mu);
	dlock__zk_request_done(s);
	for (guint i = 0; i < deleted->len; i++)
		dlock__log(s->b->logger, DLOCK_LOG_INFO, "%s: deleting %s, left by an acquire that gave up",
		           s->b->label, (char *)deleted->pdata[i]);
	g_ptr_array_unref(deleted);
	dlock__zk_session_unref(s);
}

void dlock__zk_sweep_later(zk_session *s, const char *dir, const char *uuid)
{
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	if (s->phase == ZK_CONNECTED) {
		sweep item = { NULL, (char *)dir, (char *)uuid };

		if (sweep_try(&item, s) == DLOCK__CLEANUP_RETRY)
			keep_locked(s, dir, uuid);
	} else if (s->phase != ZK_ENDED) {
		keep_locked(s, dir, uuid);
	}
	dlock__mutex_unlock(&s->mu);
}
