/* SPDX-License-Identifier: MIT */
/*
 * Clients: built from a specification, they own the configured backends,
 * the registry of live holds, the handles, and the callback thread.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "core.h"
#include "mutex.h"

DLOCK_API const char *dlock_version(void)
{
	return DLOCK_VERSION_STRING;
}

bool dlock__client_forked(const dlock_client *client)
{
	return client->pid != dlock__self_pid();
}

int dlock__client_enter(dlock_client *client)
{
	if (dlock__client_forked(client))
		return dlock__error(DLOCK_ECANCELED,
		                    "the client was created in process %ld; this is a forked child",
		                    (long)client->pid);
	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	if (client->closing) {
		dlock__mutex_unlock(&client->mu);
		return dlock__error(DLOCK_ECANCELED, "the client is being freed");
	}
	client->active++;
	dlock__mutex_unlock(&client->mu);
	return DLOCK_OK;
}

void dlock__client_leave(dlock_client *client)
{
	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	/* Only teardown waits on idle; a broadcast costs a system call. */
	if (--client->active == 0 && client->closing)
		g_cond_broadcast(&client->idle);
	dlock__mutex_unlock(&client->mu);
}

static void slot_free(dlock__slot *slot)
{
	if (slot->impl)
		slot->ops->close(slot->impl);
	g_free(slot->name);
	g_free(slot->redacted);
	g_free(slot);
}

/*
 * The backend's options: its rows' defaults, then the URI's query, then
 * the other keys of the configuration file's group.
 */
static int slot_options(const dlock__backend_ops *ops, const dlock__uri *uri, GPtrArray *extra,
                        const char *extra_where, dlock__options *opts)
{
	char *where = g_strdup_printf("URI %s", uri->redacted);
	int rc = DLOCK_OK;

	dlock__options_init(opts, ops->options, ops->options_size, dlock__backend_option_known);
	for (guint i = 0; i < uri->options->len && rc == DLOCK_OK; i++) {
		const dlock__kv *kv = uri->options->pdata[i];

		rc = dlock__options_set(opts, kv->key, kv->value, where);
	}
	for (guint i = 0; extra && i < extra->len && rc == DLOCK_OK; i++) {
		const dlock__kv *kv = extra->pdata[i];

		/* Read into the URI already (dlock__uri_read_secret_files()). */
		if (!dlock__secret_file_key(kv->key))
			rc = dlock__options_set(opts, kv->key, kv->value, extra_where);
	}
	g_free(where);
	return rc;
}

/* A lease backend's "ttl" and "watchdog" options are its holds' defaults;
 * a backend without a lease gives its holds neither. */
static void slot_lease_defaults(dlock__slot *slot, const dlock__options *opts)
{
	const int64_t *ttl_ms = dlock__options_value(opts, "ttl");
	const bool *watchdog = dlock__options_value(opts, "watchdog");

	if (!(slot->ops->caps & DLOCK__CAP_LEASE))
		return;
	slot->ttl_ms = ttl_ms ? *ttl_ms : 0;
	slot->watchdog = watchdog && *watchdog;
}

/*
 * Build one backend from a URI plus, from a configuration file, the other
 * keys of its group (extra, NULL for none; where names the group).  ops
 * NULL: chosen by the URI.
 */
static int slot_new(dlock_client *client, const char *name, const char *spec, GPtrArray *extra,
                    const char *extra_where, const dlock__backend_ops *ops, dlock__slot **ret_slot)
{
	dlock__backend_env env = { &client->logger, name };
	dlock__options opts;
	dlock__slot *slot;
	dlock__uri *uri;
	int rc;

	rc = dlock__uri_parse(spec, &uri);
	if (rc != DLOCK_OK && extra_where) {
		char *prefix = g_strconcat(extra_where, ", key url: ", NULL);

		dlock__error_prefix(rc, prefix);
		g_free(prefix);
	}
	if (rc != DLOCK_OK)
		return rc;
	if (!ops)
		ops = dlock__backend_for_uri(uri);
	if (!ops) {
		char *known = dlock__backend_schemes();

		rc = dlock__error(DLOCK_ECONFIG, "%s%sURI %s: unknown scheme '%s' (known: %s)",
		                  extra_where ? extra_where : "", extra_where ? ", key url: " : "",
		                  uri->redacted, uri->scheme, known);
		g_free(known);
		dlock__uri_free(uri);
		return rc;
	}
	rc = dlock__uri_read_secret_files(uri, extra, extra_where);
	if (rc == DLOCK_OK)
		rc = slot_options(ops, uri, extra, extra_where, &opts);
	else
		dlock__options_init(&opts, ops->options, ops->options_size, dlock__backend_option_known);

	slot = g_new0(dlock__slot, 1);
	slot->name = g_strdup(name);
	slot->redacted = g_strdup(uri->redacted);
	slot->ops = ops;
	slot_lease_defaults(slot, &opts);
	if (rc == DLOCK_OK) {
		rc = ops->open(&env, uri, &opts, &slot->impl);
		/* What the backend found wrong with the URI: say where it came from. */
		if (rc == DLOCK_ECONFIG && extra_where) {
			char *prefix = g_strconcat(extra_where, ", key url: ", NULL);

			dlock__error_prefix(rc, prefix);
			g_free(prefix);
		}
	}
	if (rc == DLOCK_OK && ops->describe) {
		g_free(slot->redacted);
		slot->redacted = ops->describe(slot->impl);
	}
	dlock__options_clear(&opts);
	dlock__uri_free(uri);
	if (rc != DLOCK_OK) {
		slot_free(slot);
		return rc;
	}
	*ret_slot = slot;
	return DLOCK_OK;
}

static void route_free(gpointer data)
{
	dlock__route *route = data;

	g_free(route->match);
	g_free(route);
}

/* Open every backend of a configuration file and its routes. */
static int client_from_config(dlock_client *client, const char *path)
{
	dlock__config *config;
	int rc;

	rc = dlock__config_load(path, &config);
	if (rc != DLOCK_OK)
		return rc;
	for (guint i = 0; i < config->backends->len && rc == DLOCK_OK; i++) {
		const dlock__config_backend *b = config->backends->pdata[i];
		char *where = g_strdup_printf("file %s, group [backend %s]", config->path, b->name);
		dlock__slot *slot;

		rc = slot_new(client, b->name, b->url, b->options, where, NULL, &slot);
		g_free(where);
		if (rc == DLOCK_OK)
			g_ptr_array_add(client->slots, slot);
	}
	for (guint i = 0; i < config->routes->len && rc == DLOCK_OK; i++) {
		const dlock__config_route *r = config->routes->pdata[i];
		dlock__route *route = g_new0(dlock__route, 1);

		route->match = g_strdup(r->match);
		route->slot = dlock__client_slot(client, r->backend);
		g_ptr_array_add(client->routes, route);
	}
	if (rc == DLOCK_OK)
		client->default_slot = config->default_backend
		                           ? dlock__client_slot(client, config->default_backend)
		                           : client->slots->pdata[0];
	client->default_wait_ms = config->wait_ms;
	dlock__config_free(config);
	return rc;
}

dlock__slot *dlock__client_slot(const dlock_client *client, const char *name)
{
	for (guint i = 0; i < client->slots->len; i++) {
		dlock__slot *slot = client->slots->pdata[i];

		if (strcmp(slot->name, name) == 0)
			return slot;
	}
	return NULL;
}

dlock__slot *dlock__client_route(const dlock_client *client, const char *resource)
{
	for (guint i = 0; i < client->routes->len; i++) {
		const dlock__route *route = client->routes->pdata[i];

		if (dlock__glob_match(route->match, resource))
			return route->slot;
	}
	return client->default_slot;
}

DLOCK_API int dlock_client_set_log_callback(dlock_client *client, dlock_log_level max_level,
                                            dlock_log_fn fn, void *user_data)
{
	if (!client)
		return dlock__error(DLOCK_EINVAL, "client is NULL");
	if (dlock__client_forked(client))
		return dlock__error(DLOCK_ECANCELED, "client was created in another process (fork)");
	dlock__logger_set(&client->logger, max_level, fn, user_data);
	return DLOCK_OK;
}

DLOCK_API int64_t dlock_client_default_wait_ms(const dlock_client *client)
{
	return client ? client->default_wait_ms : -1;
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
	char *fallback = NULL;
	int rc;

	if (!ret_client)
		return dlock__error(DLOCK_EINVAL, "dlock_client_new: ret_client is NULL");
	/* An empty string is a mistake (an unset variable, say), not "default". */
	if (spec && !*spec)
		return dlock__error(DLOCK_ECONFIG, "empty specification: pass a URI, a configuration file, "
		                    "or NULL for $DLOCK_CONFIG or the file default");
	if (!spec)
		spec = getenv("DLOCK_CONFIG");
	if (!spec || !*spec)
		spec = fallback = g_strconcat(dlock__backend_default_scheme(), "://", NULL);

	client = g_new0(dlock_client, 1);
	client->pid = dlock__self_pid();
	client->event_fd = -1;
	dlock__logger_init(&client->logger);
	g_mutex_init(&client->mu);
	g_cond_init(&client->idle);
	client->slots = g_ptr_array_new_with_free_func((GDestroyNotify)slot_free);
	client->routes = g_ptr_array_new_with_free_func(route_free);
	client->holds = g_hash_table_new(g_direct_hash, g_direct_equal);
	client->locks = g_hash_table_new(g_direct_hash, g_direct_equal);
	client->default_wait_ms = -1;

	if (strstr(spec, "://")) {
		rc = slot_new(client, "default", spec, NULL, NULL, ops, &slot);
		if (rc == DLOCK_OK) {
			g_ptr_array_add(client->slots, slot);
			client->default_slot = slot;
		}
	} else {
		rc = client_from_config(client, spec);
	}
	g_free(fallback);
	if (rc != DLOCK_OK) {
		dlock_client_free(client);
		return rc;
	}
	*ret_client = client;
	return DLOCK_OK;
}

/* Snapshot of the client's handles, each referenced. */
static GPtrArray *client_handles(dlock_client *client)
{
	GPtrArray *handles = g_ptr_array_new_with_free_func((GDestroyNotify)dlock__lock_unref);
	GHashTableIter iter;
	gpointer key;

	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	g_hash_table_iter_init(&iter, client->locks);
	while (g_hash_table_iter_next(&iter, &key, NULL))
		g_ptr_array_add(handles, dlock__lock_ref(key));
	dlock__mutex_unlock(&client->mu);
	return handles;
}

/*
 * Stop what every recipe runs on threads of its own (an election's
 * observer).  Each recipe is held by a reference to its handle meanwhile:
 * a callback that runs during the free may free its recipe (allowed
 * there), and the handle's last reference takes the recipe with it.
 * Called once the client is closing, when no such thread can start any
 * more (dlock_election_observe() enters the client).
 */
static void stop_recipes(dlock_client *client)
{
	GPtrArray *handles = client_handles(client);

	for (guint i = 0; i < handles->len; i++) {
		dlock_lock *lock = handles->pdata[i];

		if (lock->recipe_ops)
			lock->recipe_ops->stop(lock->recipe);
	}
	g_ptr_array_unref(handles);
}

static void claim_calls(dlock_client *client)
{
	GPtrArray *handles = client_handles(client);

	for (guint i = 0; i < handles->len; i++)
		dlock__op_wait_delivered(handles->pdata[i]);
	for (guint i = 0; i < handles->len; i++)
		dlock__op_claim(handles->pdata[i]);
	g_ptr_array_unref(handles);
}

DLOCK_API void dlock_client_free(dlock_client *client)
{
	GHashTableIter iter;
	gpointer key;
	GPtrArray *holds;

	if (!client || dlock__client_forked(client))
		return; /* in a forked child nothing of the parent's is touched */
	/* The free waits for the callback thread to end: from that thread it
	 * would wait for itself.  Refused, with word of why. */
	if (dlock__callbacks_on_thread(client)) {
		dlock__error(DLOCK_EINVAL, "dlock_client_free: called from a callback, on the client's "
		             "callback thread, whose end the free waits for; the client was not freed "
		             "(free it from another thread once the callback has returned)");
		dlock__log(&client->logger, DLOCK_LOG_ERROR, "%s", dlock_last_error_message());
		return;
	}

	/* Stop new calls, wake every waiter, and wait for calls in flight
	 * (an observer's query among them: its next one is refused). */
	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	client->closing = true;
	g_hash_table_iter_init(&iter, client->locks);
	while (g_hash_table_iter_next(&iter, &key, NULL)) {
		dlock_lock *lock = key;

		dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
		for (guint i = 0; i < lock->waiters->len; i++)
			dlock__waiter_cancel(lock->waiters->pdata[i]);
		dlock__mutex_unlock(&lock->mu);
	}
	while (client->active > 0)
		g_cond_wait(&client->idle, &client->mu);
	dlock__mutex_unlock(&client->mu);

	/* Calls without a waiting thread whose steps have ended: once the
	 * dones running on the callback thread have returned (it starts no
	 * other now), every done not yet run runs here, with
	 * DLOCK_ECANCELED, and the grant it would have brought is released. */
	claim_calls(client);

	dlock__mutex_lock(&client->mu, DLOCK__RANK_CLIENT);
	holds = g_ptr_array_new();
	g_hash_table_iter_init(&iter, client->holds);
	while (g_hash_table_iter_next(&iter, &key, NULL))
		g_ptr_array_add(holds, key);
	g_hash_table_steal_all(client->holds);
	dlock__mutex_unlock(&client->mu);

	/* Elections' observers query through the client; none starts now. */
	stop_recipes(client);

	/* Release what is still held; each release is bounded by its backend. */
	for (guint i = 0; i < holds->len; i++) {
		dlock__hold_teardown(holds->pdata[i]);
		dlock__hold_unref(holds->pdata[i]);
	}
	g_ptr_array_unref(holds);

	/* Announcements still queued go out while the backends are open.
	 * The callback thread drains before the backends go: a callback may
	 * still read a handle's backend (dlock_lock_backend_uri()), and
	 * nothing posts an event any more (every hold has left the client,
	 * the observers are stopped).  Then backends join their threads. */
	dlock__announce_stop(client);
	dlock__callbacks_stop(client);
	/* Every call has ended, and every release a done's refusal left to a
	 * worker (counted as a call) is done: the stepper is idle. */
	dlock__stepper_free(client->stepper);
	g_ptr_array_unref(client->routes);
	g_ptr_array_unref(client->slots);

	g_hash_table_iter_init(&iter, client->locks);
	while (g_hash_table_iter_next(&iter, &key, NULL)) {
		dlock_lock *lock = key;

		dlock__mutex_lock(&lock->mu, DLOCK__RANK_LOCK);
		lock->client = NULL;
		lock->slot = NULL;
		if (lock->hold) {
			dlock__hold_unref(lock->hold);
			lock->hold = NULL;
		}
		dlock__mutex_unlock(&lock->mu);
	}
	g_hash_table_unref(client->locks);
	g_hash_table_unref(client->holds);
	g_cond_clear(&client->idle);
	g_mutex_clear(&client->mu);
	if (client->event_fd >= 0)
		close(client->event_fd);
	dlock__logger_clear(&client->logger);
	g_free(client);
}
