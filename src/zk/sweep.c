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
#include "error.h"
#include "internal.h"

typedef struct sweep {
	zk_session *session;       /* referenced while a listing is in flight */
	char *dir;
	char *uuid;
} sweep;

static void sweep_free(sweep *sw)
{
	if (!sw)
		return;
	g_free(sw->dir);
	g_free(sw->uuid);
	g_free(sw);
}

static void sweep_listed(int rc, const struct String_vector *children, const void *data);

/* Keep sw for the next reconnect; s->mu held. */
static void keep_locked(zk_session *s, sweep *sw)
{
	if (!s->sweeps)
		s->sweeps = g_ptr_array_new_with_free_func((GDestroyNotify)sweep_free);
	g_ptr_array_add(s->sweeps, sw);
}

/* Send the listing, or keep the sweep for the next reconnect; s->mu held.
 * Takes sw. */
static void sweep_send_locked(zk_session *s, sweep *sw)
{
	int rc;

	if (s->phase == ZK_ENDED) {
		sweep_free(sw);
		return;
	}
	if (s->phase != ZK_CONNECTED) {
		keep_locked(s, sw);
		return;
	}
	sw->session = dlock__zk_session_ref(s);
	rc = zoo_aget_children(s->zh, sw->dir, 0, sweep_listed, sw);
	if (rc != ZOK) {
		/* Not queued: no completion will run.  The caller holds another
		 * reference, so this one cannot be the last. */
		g_atomic_ref_count_dec(&s->ref);
		sw->session = NULL;
		if (dlock__zk_rc_connection(rc))
			keep_locked(s, sw);
		else
			sweep_free(sw);
	}
}

static void sweep_listed(int rc, const struct String_vector *children, const void *data)
{
	sweep *sw = (sweep *)data;
	zk_session *s = sw->session;
	GPtrArray *deleted = g_ptr_array_new_with_free_func(g_free);

	sw->session = NULL;
	g_mutex_lock(&s->mu);
	if (rc == ZOK && children) {
		for (int i = 0; i < children->count; i++) {
			char *path;

			if (!dlock__zk_node_is_ours(children->data[i], sw->uuid))
				continue;
			path = g_strconcat(sw->dir, "/", children->data[i], NULL);
			dlock__zk_delete_send_locked(s, path);
			g_ptr_array_add(deleted, path);
		}
		sweep_free(sw);
	} else if (dlock__zk_rc_connection(rc) && s->phase != ZK_ENDED) {
		keep_locked(s, sw); /* again after the reconnect */
	} else {
		/* ZNONODE: nothing was made (or it is gone); or the session
		 * ended, taking the node with it. */
		sweep_free(sw);
	}
	g_mutex_unlock(&s->mu);
	for (guint i = 0; i < deleted->len; i++)
		dlock__log(s->b->logger, DLOCK_LOG_INFO, "%s: deleting %s, left by an acquire that gave up",
		           s->b->label, (char *)deleted->pdata[i]);
	g_ptr_array_unref(deleted);
	dlock__zk_session_unref(s);
}

void dlock__zk_sweep_later(zk_session *s, const char *dir, const char *uuid)
{
	sweep *sw = g_new0(sweep, 1);

	sw->dir = g_strdup(dir);
	sw->uuid = g_strdup(uuid);
	g_mutex_lock(&s->mu);
	sweep_send_locked(s, sw);
	g_mutex_unlock(&s->mu);
}

void dlock__zk_sweeps_send_locked(zk_session *s)
{
	GPtrArray *pending = s->sweeps;

	if (!pending || s->phase != ZK_CONNECTED)
		return;
	s->sweeps = NULL;
	for (guint i = 0; i < pending->len; i++)
		sweep_send_locked(s, g_steal_pointer(&pending->pdata[i]));
	g_ptr_array_unref(pending);
}

void dlock__zk_sweeps_drop(zk_session *s)
{
	if (s->sweeps)
		g_ptr_array_unref(s->sweeps);
	s->sweeps = NULL;
}
