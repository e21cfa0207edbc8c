/* SPDX-License-Identifier: MIT */
/*
 * Who holds a resource on ZooKeeper: the first contender among the
 * resource's children, read without a watch.
 */
#include "clock.h"
#include "error.h"
#include "internal.h"

/* Read the data of the node at path: DLOCK_OK with ZOK and *ret (owned)
 * set, or ZNONODE (gone meanwhile), or an error. */
static int read_node(zk_backend *b, zk_session *s, dlock__waiter *w, const char *resource,
                     const char *path, int64_t deadline_us, int *ret_zrc, char **ret,
                     int64_t *ret_czxid)
{
	zk_call *call = dlock__zk_call_new(s, CALL_GET, w);
	int rc = DLOCK_OK;

	dlock__zk_get(call, path, false);
	if (dlock__zk_call_wait(call, deadline_us) != DLOCK_OK) {
		dlock__zk_call_abandon(call);
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: no answer to the query of '%s'", b->label,
		                    resource);
	}
	*ret_zrc = call->rc;
	if (call->rc == ZOK) {
		*ret = g_strdup(call->data);
		*ret_czxid = call->stat.czxid;
	} else if (call->rc != ZNONODE) {
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: query of '%s': %s", b->label, resource,
		                  dlock__zk_strerror(call->rc));
	}
	dlock__zk_call_unref(call);
	return rc;
}

/* The holders' names, first first (a NULL-terminated list; g_strfreev). */
static char **holder_names(char *const *children)
{
	GArray *contenders = dlock__zk_contenders(children);
	guint n = dlock__zk_holders(contenders);
	char **names = g_new0(char *, n + 1);

	for (guint i = 0; i < n; i++)
		names[i] = g_strdup(g_array_index(contenders, dlock__zk_contender, i).name);
	g_array_unref(contenders);
	return names;
}

/*
 * Read every holder's node into ret: a writer's data as holder_raw, or
 * each reader's among readers (shared).  DLOCK_OK, with ret->locked
 * false if a node went meanwhile (list again), or an error.
 */
static int read_holders(zk_backend *b, zk_session *s, dlock__waiter *w, const char *resource,
                        const char *dir, char **names, int64_t deadline_us,
                        dlock__server_info *ret)
{
	bool shared = dlock__zk_node_is_reader(names[0]);
	int rc = DLOCK_OK;

	ret->readers = shared ? g_ptr_array_new_with_free_func(g_free) : NULL;
	for (size_t i = 0; names[i]; i++) {
		char *path = g_strconcat(dir, "/", names[i], NULL);
		char *data = NULL;
		int64_t czxid = 0;
		int zrc = ZOK;

		rc = read_node(b, s, w, resource, path, deadline_us, &zrc, &data, &czxid);
		g_free(path);
		if (rc != DLOCK_OK || zrc != ZOK)
			break;
		if (shared)
			g_ptr_array_add(ret->readers, data);
		else
			ret->holder_raw = data;
		/* the token of the latest hold */
		ret->fencing_token = MAX(ret->fencing_token, (uint64_t)czxid);
		ret->locked = names[i + 1] == NULL;
	}
	ret->shared = shared && ret->locked;
	if (!ret->locked) {
		dlock__server_info_clear(ret);
		ret->fencing_token = 0;
	}
	return rc;
}

/*
 * Who holds resource: the first contender's data (a dlock holder record,
 * or whatever a peer stores) and its czxid, the holder's fencing token;
 * when readers hold, every one of them, and the latest one's czxid.
 */
int dlock__zk_query(dlock__backend *backend, const char *resource, int64_t deadline_us,
                    dlock__server_info *ret)
{
	zk_backend *b = zk_of(backend);
	char *dir = dlock__zk_dir(b, resource);
	dlock__waiter *w = dlock__waiter_new();
	zk_session *s = NULL;
	int rc;

	if (deadline_us == INT64_MAX)
		deadline_us = dlock__mono_us() + b->connect_timeout_ms * 1000;
	rc = dlock__zk_session_get(b, NULL, deadline_us, &s);
	/* A holder may release between the listing and the reads: list again. */
	for (int round = 0; rc == DLOCK_OK && round < 10; round++) {
		zk_call *call = dlock__zk_call_new(s, CALL_CHILDREN, w);
		char **names;
		bool vacant;

		dlock__zk_get_children(call, dir);
		if (dlock__zk_call_wait(call, deadline_us) != DLOCK_OK) {
			dlock__zk_call_abandon(call);
			rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: no answer to the query of '%s'", b->label,
			                  resource);
			break;
		}
		if (call->rc != ZOK && call->rc != ZNONODE) {
			rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: query of '%s': %s", b->label, resource,
			                  dlock__zk_strerror(call->rc));
			dlock__zk_call_unref(call);
			break;
		}
		names = holder_names(call->children);
		dlock__zk_call_unref(call);
		vacant = !names[0];
		if (!vacant)
			rc = read_holders(b, s, w, resource, dir, names, deadline_us, ret);
		else
			rc = dlock__zk_semaphore_query(b, s, w, dir, deadline_us, ret);
		g_strfreev(names);
		if (vacant || ret->locked)
			break;
	}
	ret->expires_in_ms = -1; /* a node lives as long as its holder's session */
	dlock__zk_session_unref(s);
	dlock__waiter_free(w);
	g_free(dir);
	return rc;
}
