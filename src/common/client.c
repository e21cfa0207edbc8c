/*
 * Clients: built from a specification, they own the configured backends,
 * the registry of live holds, the handles, and the callback thread.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

DLOCK_API const char *dlock_version(void)
{
	return DLOCK_VERSION_STRING;
}

bool dlock__client_forked(const dlock_client *client)
{
	return client->pid != getpid();
}

int dlock__client_enter(dlock_client *client)
{
	if (dlock__client_forked(client))
		return dlock__error(DLOCK_ECANCELED,
		                    "the client was created in process %ld; this is a forked child",
		                    (long)client->pid);
	g_mutex_lock(&client->mu);
	if (client->closing) {
		g_mutex_unlock(&client->mu);
		return dlock__error(DLOCK_ECANCELED, "the client is being freed");
	}
	client->active++;
	g_mutex_unlock(&client->mu);
	return DLOCK_OK;
}

void dlock__client_leave(dlock_client *client)
{
	g_mutex_lock(&client->mu);
	/* Only teardown waits on idle; a broadcast costs a system call. */
	if (--client->active == 0 && client->closing)
		g_cond_broadcast(&client->idle);
	g_mutex_unlock(&client->mu);
}

static void slot_free(dlock__slot *slot)
{
	if (slot->impl)
		slot->ops->close(slot->impl);
	g_free(slot->name);
	g_free(slot->redacted);
	g_free(slot);
}

/* Build one backend from a URI, with ops (NULL: chosen by the scheme). */
static int slot_from_uri(dlock_client *client, const char *name, const char *spec,
                         const dlock__backend_ops *ops, dlock__slot **ret_slot)
{
	dlock__backend_env env = { &client->logger, name };
	dlock__options opts;
	dlock__slot *slot;
	dlock__uri *uri;
	char *where;
	int rc;

	rc = dlock__uri_parse(spec, &uri);
	if (rc != DLOCK_OK)
		return rc;
	if (!ops)
		ops = dlock__backend_for_scheme(uri->scheme);
	if (!ops) {
		rc = dlock__error(DLOCK_ECONFIG, "URI %s: unknown scheme '%s' (known: redis, redis+unix)",
		                  uri->redacted, uri->scheme);
		dlock__uri_free(uri);
		return rc;
	}
	dlock__options_init(&opts);
	where = g_strdup_printf("URI %s", uri->redacted);
	for (guint i = 0; i < uri->options->len && rc == DLOCK_OK; i++) {
		const dlock__kv *kv = uri->options->pdata[i];

		rc = dlock__options_set(&opts, ops->options, kv->key, kv->value, where);
	}
	g_free(where);

	slot = g_new0(dlock__slot, 1);
	slot->name = g_strdup(name);
	slot->redacted = g_strdup(uri->redacted);
	slot->ops = ops;
	if (rc == DLOCK_OK)
		rc = ops->open(&env, uri, &opts, &slot->impl);
	dlock__options_clear(&opts);
	dlock__uri_free(uri);
	if (rc != DLOCK_OK) {
		slot_free(slot);
		return rc;
	}
	*ret_slot = slot;
	return DLOCK_OK;
}

DLOCK_API int dlock_client_new(const char *spec, dlock_client **ret_client)
{
	return dlock__client_new_with_ops(spec, NULL, ret_client);
}

int dlock__client_new_with_ops(const char *spec, const dlock__backend_ops *ops,
                               dlock_client **ret_client)
{
	dlock_client *client;
	dlock__slot *slot = NULL;
	int rc;

	if (!ret_client)
		return dlock__error(DLOCK_EINVAL, "dlock_client_new: ret_client is NULL");
	if (!spec)
		spec = getenv("DLOCK_CONFIG");
	if (!spec || !*spec)
		return dlock__error(DLOCK_ECONFIG,
		                    "no specification given and $DLOCK_CONFIG is not set; "
		                    "this build has no default backend: pass a URI such as redis://127.0.0.1:6379");
	if (!strstr(spec, "://"))
		return dlock__error(DLOCK_ECONFIG,
		                    "'%s' is not a URI (scheme://...); this build reads no configuration files",
		                    spec);

	client = g_new0(dlock_client, 1);
	client->pid = getpid();
	dlock__logger_init(&client->logger);
	g_mutex_init(&client->mu);
	g_cond_init(&client->idle);
	client->slots = g_ptr_array_new_with_free_func((GDestroyNotify)slot_free);
	client->holds = g_hash_table_new(g_direct_hash, g_direct_equal);
	client->locks = g_hash_table_new(g_direct_hash, g_direct_equal);

	rc = slot_from_uri(client, "default", spec, ops, &slot);
	if (rc != DLOCK_OK) {
		dlock_client_free(client);
		return rc;
	}
	g_ptr_array_add(client->slots, slot);
	client->default_slot = slot;
	*ret_client = client;
	return DLOCK_OK;
}

DLOCK_API void dlock_client_free(dlock_client *client)
{
	GHashTableIter iter;
	gpointer key;
	GPtrArray *holds;

	if (!client || dlock__client_forked(client))
		return; /* in a forked child nothing of the parent's is touched */

	/* Stop new calls, wake every waiter, and wait for calls in flight. */
	g_mutex_lock(&client->mu);
	client->closing = true;
	g_hash_table_iter_init(&iter, client->locks);
	while (g_hash_table_iter_next(&iter, &key, NULL)) {
		dlock_lock *lock = key;

		g_mutex_lock(&lock->mu);
		for (guint i = 0; i < lock->waiters->len; i++)
			dlock__waiter_cancel(lock->waiters->pdata[i]);
		g_mutex_unlock(&lock->mu);
	}
	while (client->active > 0)
		g_cond_wait(&client->idle, &client->mu);
	holds = g_ptr_array_new();
	g_hash_table_iter_init(&iter, client->holds);
	while (g_hash_table_iter_next(&iter, &key, NULL))
		g_ptr_array_add(holds, key);
	g_hash_table_steal_all(client->holds);
	g_mutex_unlock(&client->mu);

	/* Release what is still held; each release is bounded by its backend. */
	for (guint i = 0; i < holds->len; i++) {
		dlock__hold_teardown(holds->pdata[i]);
		dlock__hold_unref(holds->pdata[i]);
	}
	g_ptr_array_unref(holds);

	/* Backends join their threads; then the callback thread drains. */
	g_ptr_array_unref(client->slots);
	dlock__callbacks_stop(client);

	g_hash_table_iter_init(&iter, client->locks);
	while (g_hash_table_iter_next(&iter, &key, NULL)) {
		dlock_lock *lock = key;

		g_mutex_lock(&lock->mu);
		lock->client = NULL;
		lock->slot = NULL;
		if (lock->hold) {
			dlock__hold_unref(lock->hold);
			lock->hold = NULL;
		}
		g_mutex_unlock(&lock->mu);
	}
	g_hash_table_unref(client->locks);
	g_hash_table_unref(client->holds);
	g_cond_clear(&client->idle);
	g_mutex_clear(&client->mu);
	dlock__logger_clear(&client->logger);
	g_free(client);
}
