/*
 * Who holds a resource on ZooKeeper: the first contender among the
 * resource's children, read without a watch.
 */
#include "clock.h"
#include "error.h"
#include "internal.h"

/*
 * Who holds resource: the first lock node's data (a dlock holder record,
 * or whatever a peer stores) and its czxid, the holder's fencing token.
 */
int dlock__zk_query(dlock__backend *b, const char *resource, int64_t deadline_us,
                    dlock__server_info *ret)
{
	char *dir = dlock__zk_dir(b, resource);
	dlock__waiter *w = dlock__waiter_new();
	zk_session *s = NULL;
	int rc;

	if (deadline_us == INT64_MAX)
		deadline_us = dlock__mono_us() + b->connect_timeout_ms * 1000;
	rc = dlock__zk_session_get(b, NULL, deadline_us, &s);
	/* The holder may release between the listing and the read: list again. */
	for (int round = 0; rc == DLOCK_OK && round < 10; round++) {
		zk_call *call = dlock__zk_call_new(s, CALL_CHILDREN, w);
		GArray *contenders;
		char *first = NULL;

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
		contenders = dlock__zk_contenders(call->children);
		if (contenders->len > 0)
			first = g_strconcat(dir, "/", g_array_index(contenders, dlock__zk_contender, 0).name, NULL);
		g_array_unref(contenders);
		dlock__zk_call_unref(call);
		if (!first)
			break; /* free */

		call = dlock__zk_call_new(s, CALL_GET, w);
		dlock__zk_get(call, first, false);
		g_free(first);
		if (dlock__zk_call_wait(call, deadline_us) != DLOCK_OK) {
			dlock__zk_call_abandon(call);
			rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: no answer to the query of '%s'", b->label,
			                  resource);
			break;
		}
		if (call->rc == ZOK) {
			ret->locked = true;
			ret->holder_raw = g_strdup(call->data);
			ret->fencing_token = (uint64_t)call->stat.czxid;
			ret->expires_in_ms = -1;
			dlock__zk_call_unref(call);
			break;
		}
		if (call->rc != ZNONODE)
			rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: query of '%s': %s", b->label, resource,
			                  dlock__zk_strerror(call->rc));
		dlock__zk_call_unref(call);
	}
	if (!ret->locked)
		ret->expires_in_ms = -1;
	dlock__zk_session_unref(s);
	dlock__waiter_free(w);
	g_free(dir);
	return rc;
}
