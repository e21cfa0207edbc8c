/* SPDX-License-Identifier: MIT */
/*
 * The Redis backend: options, opening and closing, and the operations
 * table.  Key names: keys.c.
 */
#include <stddef.h>
#include <string.h>

#include "error.h"
#include "internal.h"
#include "redis.h"
#include "redlock.h"

#define DEFAULT_PORT 6379

/* The options, as the rows below parse them. */
typedef struct redis_options {
	int64_t ttl_ms;
	bool watchdog;
	int64_t connect_timeout_ms;
	int64_t command_timeout_ms;
	int key_format; /* index in key_formats */
	char *prefix;
	int64_t master_timeout_ms; /* Redlock only; 0 when not given */
	char *sentinel_user;       /* Sentinel only: to the sentinels; NULL when not given */
	char *sentinel_password;
	int min_replicas;          /* not Redlock */
	int64_t replica_timeout_ms; /* 0 when not given */
} redis_options;

enum { KEY_FORMAT_BRACED, KEY_FORMAT_PLAIN };

static const char *const key_formats[] = { "braced", "plain", NULL };

/* The braces of the key's hash tag are dlock's own. */
static bool prefix_ok(const char *value)
{
	return !strpbrk(value, "{}");
}

/* The rows of every Redis backend, a Redlock's included. */
#define REDIS_OPTION_ROWS                                                                       \
	DLOCK__OPTION_TTL(redis_options, ttl_ms), DLOCK__OPTION_WATCHDOG(redis_options, watchdog), \
	DLOCK__OPTION_CONNECT_TIMEOUT(redis_options, connect_timeout_ms),                         \
	DLOCK__OPTION_TIMEOUT("command-timeout", "3s", redis_options, command_timeout_ms),        \
	{ .name = "key-format", .kind = DLOCK__OPTION_CHOICE, .fallback = "braced",               \
	  .offset = offsetof(redis_options, key_format), .choices = key_formats },                \
	{ .name = "prefix", .kind = DLOCK__OPTION_STRING, .fallback = "dlock:",                   \
	  .offset = offsetof(redis_options, prefix), .check = prefix_ok,                          \
	  .why = "contains '{' or '}', which would break the key's hash tag" }

static const dlock__option options[] = {
	REDIS_OPTION_ROWS,
	{ .name = "sentinel-user", .kind = DLOCK__OPTION_STRING,
	  .offset = offsetof(redis_options, sentinel_user) },
	{ .name = "sentinel-password", .kind = DLOCK__OPTION_STRING,
	  .offset = offsetof(redis_options, sentinel_password) },
	{ .name = "min-replicas", .kind = DLOCK__OPTION_COUNT, .fallback = "0",
	  .offset = offsetof(redis_options, min_replicas), .count_max = 100 },
	/* No default of its own: it follows each hold's TTL. */
	DLOCK__OPTION_TIMEOUT("replica-timeout", NULL, redis_options, replica_timeout_ms),
	{ .name = NULL },
};

/* master-timeout has no default of its own: it follows each hold's TTL. */
static const dlock__option redlock_options[] = {
	REDIS_OPTION_ROWS,
	DLOCK__OPTION_TIMEOUT("master-timeout", NULL, redis_options, master_timeout_ms),
	{ .name = NULL },
};

static int check_names(const redis_backend *b, const char *resource)
{
	if (b->plain_keys && (g_str_has_suffix(resource, ":fence") ||
	                      g_str_has_suffix(resource, ":q") ||
	                      g_str_has_suffix(resource, ":permits") ||
	                      g_str_has_suffix(resource, ":released")))
		return dlock__error(DLOCK_EINVAL,
		                    "resource name '%s': with key-format=plain, names ending in "
		                    "':fence', ':q', ':permits' or ':released' would collide with dlock's "
		                    "own keys", resource);
	return DLOCK_OK;
}

static int check_resource(const dlock__backend *backend, const char *resource)
{
	return check_names(redis_of_const(backend), resource);
}

/* A Redlock's masters share one key format and prefix. */
static int check_resource_redlock(const dlock__backend *backend, const char *resource)
{
	const redlock_backend *rl = (const redlock_backend *)(const void *)backend;

	return check_names(rl->masters[0], resource);
}

static int parse_db(const dlock__uri *uri, int *ret_db)
{
	const char *text;
	char *end;
	long db;

	if (!uri->path || strcmp(uri->path, "/") == 0) {
		*ret_db = 0;
		return DLOCK_OK;
	}
	text = uri->path + 1;
	db = strtol(text, &end, 10);
	if (!*text || *end || db < 0 || db > 1000000)
		return dlock__error(DLOCK_ECONFIG, "URI %s: '%s' is not a database number", uri->redacted, text);
	*ret_db = (int)db;
	return DLOCK_OK;
}

/*
 * redis+sentinel's path: "/SERVICE" or "/SERVICE/db".  The service is the
 * name the sentinels monitor the master under; *ret_service points into
 * uri->path's copy in *ret_path (g_free).
 */
static int parse_sentinel_path(const dlock__uri *uri, char **ret_path, int *ret_db)
{
	char *path, *slash;
	dlock__uri db_part = *uri;

	*ret_db = 0;
	if (!uri->path || strlen(uri->path) < 2 || uri->path[1] == '/')
		return dlock__error(DLOCK_ECONFIG, "URI %s: no service name (redis+sentinel://"
		                    "sentinel1:26379,sentinel2:26379/SERVICE)", uri->redacted);
	path = g_strdup(uri->path + 1);
	slash = strchr(path, '/');
	if (slash) {
		db_part.path = slash;
		if (parse_db(&db_part, ret_db) != DLOCK_OK) {
			g_free(path);
			return DLOCK_ECONFIG;
		}
		*slash = '\0';
	}
	*ret_path = path;
	return DLOCK_OK;
}

/* What every server of uri shares: the checks, then one backend. */
static int check_uri(const dlock__uri *uri, const dlock__options *opts, int *ret_db)
{
	const redis_options *o = opts->values;
	bool is_unix = strcmp(uri->scheme, "redis+unix") == 0;
	bool is_sentinel = strcmp(uri->scheme, "redis+sentinel") == 0;
	bool is_cluster = strcmp(uri->scheme, "redis+cluster") == 0;

	*ret_db = 0;
	if (!is_sentinel && (o->sentinel_user || o->sentinel_password))
		return dlock__error(DLOCK_ECONFIG, "URI %s: options 'sentinel-user' and "
		                    "'sentinel-password' apply only to redis+sentinel://", uri->redacted);
	if (is_sentinel) {
		if (uri->hosts->len == 0)
			return dlock__error(DLOCK_ECONFIG, "URI %s: no sentinel given (redis+sentinel://"
			                    "sentinel1:26379,sentinel2:26379/SERVICE)", uri->redacted);
		if (o->sentinel_user && *o->sentinel_user && !o->sentinel_password)
			return dlock__error(DLOCK_ECONFIG, "URI %s: option 'sentinel-user' given without "
			                    "'sentinel-password'", uri->redacted);
	} else if (is_cluster) {
		if (uri->hosts->len == 0)
			return dlock__error(DLOCK_ECONFIG, "URI %s: no node given (redis+cluster://"
			                    "node1:6379,node2:6379)", uri->redacted);
		/* A cluster has database 0 alone: "/0" too says a database. */
		if (uri->path)
			return dlock__error(DLOCK_ECONFIG, "URI %s: a cluster has no databases to choose: "
			                    "no path after the nodes", uri->redacted);
		if (o->key_format == KEY_FORMAT_PLAIN)
			return dlock__error(DLOCK_ECONFIG, "URI %s: key-format=plain cannot be used on a "
			                    "cluster: a resource's keys must share the {R} hash tag's slot",
			                    uri->redacted);
	} else if (is_unix) {
		if (uri->hosts->len > 0)
			return dlock__error(DLOCK_ECONFIG, "URI %s: redis+unix takes a socket path, not a host "
			                    "(redis+unix:///path/to/socket)", uri->redacted);
		if (!uri->path || strlen(uri->path) < 2)
			return dlock__error(DLOCK_ECONFIG, "URI %s: no socket path", uri->redacted);
	} else {
		if (uri->hosts->len == 0)
			return dlock__error(DLOCK_ECONFIG, "URI %s: no host given (redis://host:6379)",
			                    uri->redacted);
		if (parse_db(uri, ret_db) != DLOCK_OK)
			return DLOCK_ECONFIG;
	}
	if (uri->user && *uri->user && !uri->password)
		return dlock__error(DLOCK_ECONFIG, "URI %s: user '%s' given without a password",
		                    uri->redacted, uri->user);
	if (o->key_format == KEY_FORMAT_PLAIN && dlock__options_given(opts, "prefix"))
		return dlock__error(DLOCK_ECONFIG, "URI %s: option 'prefix' applies only to key-format=braced",
		                    uri->redacted);
	return DLOCK_OK;
}

int dlock__redis_open_host(const dlock__backend_env *env, const dlock__uri *uri,
                           const dlock__host *host, const dlock__options *opts,
                           redis_backend **ret)
{
	const redis_options *o = opts->values;
	redis_backend *b;
	int db;

	if (check_uri(uri, opts, &db) != DLOCK_OK)
		return DLOCK_ECONFIG;
	b = g_new0(redis_backend, 1);
	b->logger = env->logger;
	if (strcmp(uri->scheme, "redis+sentinel") == 0) {
		char *service = NULL;

		if (parse_sentinel_path(uri, &service, &db) != DLOCK_OK) {
			g_free(b);
			return DLOCK_ECONFIG;
		}
		b->sentinel = dlock__redis_sentinel_new(uri, service, o->sentinel_user, o->sentinel_password);
		b->label = g_strdup_printf("redis+sentinel %s", service);
		g_free(service);
	} else if (strcmp(uri->scheme, "redis+cluster") == 0) {
		const dlock__host *seed = uri->hosts->pdata[0];

		b->cluster = dlock__redis_cluster_new(uri);
		b->label = g_strdup_printf("redis+cluster %s:%d%s", seed->host, seed->port ? seed->port : DEFAULT_PORT,
		                           uri->hosts->len > 1 ? ",..." : "");
	} else if (!host) {
		b->unix_path = g_strdup(uri->path);
		b->label = g_strdup_printf("redis unix:%s", uri->path);
	} else {
		b->host = g_strdup(host->host);
		b->port = host->port ? host->port : DEFAULT_PORT;
		b->label = g_strdup_printf("redis %s:%d", b->host, b->port);
	}
	/* "redis://:pw@host" is a password alone: AUTH pw, not AUTH "" pw. */
	b->user = uri->user && *uri->user ? g_strdup(uri->user) : NULL;
	b->password = g_strdup(uri->password);
	b->db = db;
	b->connect_timeout_ms = o->connect_timeout_ms;
	b->command_timeout_ms = o->command_timeout_ms;
	b->min_replicas = o->min_replicas;
	b->replica_timeout_ms = o->replica_timeout_ms;
	b->plain_keys = o->key_format == KEY_FORMAT_PLAIN;
	b->prefix = g_strdup(o->prefix);
	g_mutex_init(&b->pool_mu);
	g_queue_init(&b->pool);
	g_mutex_init(&b->lazy_mu);
	b->resolver = dlock__resolver_new();
	*ret = b;
	return DLOCK_OK;
}

static int open_single(const dlock__backend_env *env, const dlock__uri *uri,
                       const dlock__options *opts, redis_backend **ret)
{
	bool is_unix = strcmp(uri->scheme, "redis+unix") == 0;

	/* Several sentinels watch one master, several nodes make one
	 * cluster: one backend. */
	if (strcmp(uri->scheme, "redis+sentinel") == 0 || strcmp(uri->scheme, "redis+cluster") == 0)
		return dlock__redis_open_host(env, uri, NULL, opts, ret);

	if (!is_unix && uri->hosts->len > 1)
		return dlock__error(DLOCK_ECONFIG, "URI %s: several hosts make a Redlock, which "
		                    "redis+unix cannot be", uri->redacted);
	/* "redis://" alone, or "redis://${HOST}" with the variable unset:
	 * said here, before anything reads a host that is not there. */
	if (!is_unix && uri->hosts->len == 0)
		return dlock__error(DLOCK_ECONFIG, "URI %s: no host given (redis://host:6379)",
		                    uri->redacted);
	return dlock__redis_open_host(env, uri, is_unix ? NULL : uri->hosts->pdata[0], opts, ret);
}

void dlock__redis_close_host(redis_backend *b)
{
	dlock__redis_sub_stop(b);
	dlock__redis_watchdog_stop(b);
	dlock__redis_sentinel_free(b);
	dlock__redis_pool_clear(b);
	dlock__redis_cluster_free(b->cluster);
	dlock__resolver_free(b->resolver);
	g_mutex_clear(&b->pool_mu);
	g_mutex_clear(&b->lazy_mu);
	g_free(b->label);
	g_free(b->host);
	g_free(b->unix_path);
	g_free(b->user);
	dlock__secret_free(b->password);
	g_free(b->prefix);
	g_free(b);
}

/*
 * A Redlock: one backend per master, sharing every option.  An even N
 * tolerates no more failures than N - 1 does (the quorum is N/2 + 1):
 * allowed, as docs/backends.md, "Redlock", says.
 */
static int open_redlock(const dlock__backend_env *env, const dlock__uri *uri,
                        const dlock__options *opts, redlock_backend **ret)
{
	const redis_options *o = opts->values;
	redlock_backend *rl;
	int db, rc = DLOCK_OK;

	if (strcmp(uri->scheme, "redis") != 0 || uri->hosts->len < 2)
		return dlock__error(DLOCK_ECONFIG, "URI %s: a Redlock takes several redis hosts "
		                    "(redis://h1:6379,h2:6379,h3:6379)", uri->redacted);
	if (uri->hosts->len > RL_MASTERS_MAX)
		return dlock__error(DLOCK_ECONFIG, "URI %s: %u masters; a Redlock takes at most %d",
		                    uri->redacted, uri->hosts->len, RL_MASTERS_MAX);
	if (check_uri(uri, opts, &db) != DLOCK_OK)
		return DLOCK_ECONFIG;
	rl = g_new0(redlock_backend, 1);
	rl->logger = env->logger;
	rl->n_masters = (int)uri->hosts->len;
	rl->quorum = rl->n_masters / 2 + 1;
	rl->masters = g_new0(redis_backend *, rl->n_masters);
	for (int i = 0; i < rl->n_masters && rc == DLOCK_OK; i++)
		rc = dlock__redis_open_host(env, uri, uri->hosts->pdata[i], opts, &rl->masters[i]);
	rl->label = g_strdup_printf("redlock %s", uri->redacted);
	rl->command_timeout_ms = o->command_timeout_ms;
	rl->connect_timeout_ms = o->connect_timeout_ms;
	rl->master_timeout_ms = o->master_timeout_ms;
	g_mutex_init(&rl->mu);
	g_mutex_init(&rl->lazy_mu);
	if (rc == DLOCK_OK)
		rc = dlock__redlock_check_masters(rl, uri->redacted);
	if (rc != DLOCK_OK) {
		dlock__redlock_close(rl);
		return rc;
	}
	*ret = rl;
	return DLOCK_OK;
}

/* The ops see a backend as the seam's dlock__backend: these convert. */
static int open_single_op(const dlock__backend_env *env, const dlock__uri *uri,
                          const dlock__options *opts, dlock__backend **ret)
{
	redis_backend *b = NULL;
	int rc = open_single(env, uri, opts, &b);

	*ret = (dlock__backend *)(void *)b;
	return rc;
}

static int open_redlock_op(const dlock__backend_env *env, const dlock__uri *uri,
                           const dlock__options *opts, dlock__backend **ret)
{
	redlock_backend *rl = NULL;
	int rc = open_redlock(env, uri, opts, &rl);

	*ret = (dlock__backend *)(void *)rl;
	return rc;
}

static void close_single_op(dlock__backend *backend)
{
	dlock__redis_close_host(redis_of(backend));
}

static void close_redlock_op(dlock__backend *backend)
{
	dlock__redlock_close(redlock_of(backend));
}

const dlock__backend_ops dlock__redis_ops = {
	.type = "redis",
	.caps = DLOCK__CAP_LEASE | DLOCK__CAP_SHARED | DLOCK__CAP_PERMITS,
	.options = options,
	.options_size = sizeof(redis_options),
	.open = open_single_op,
	.close = close_single_op,
	.acquire_begin = dlock__redis_acquire_begin,
	.acquire_step = dlock__redis_acquire_step,
	.acquire_end = dlock__redis_acquire_end,
	.release = dlock__redis_release,
	.abandon = dlock__redis_abandon,
	.check_resource = check_resource,
	.query = dlock__redis_query,
	.watch = dlock__redis_observe,
	.unwatch = dlock__redis_unobserve,
	.announce = dlock__redis_announce,
};

const dlock__backend_ops dlock__redlock_ops = {
	.type = "redis, Redlock",
	.caps = DLOCK__CAP_LEASE,
	.options = redlock_options,
	.options_size = sizeof(redis_options),
	.open = open_redlock_op,
	.close = close_redlock_op,
	.acquire_begin = dlock__redlock_acquire_begin,
	.acquire_step = dlock__redlock_acquire_step,
	.acquire_end = dlock__redlock_acquire_end,
	.release = dlock__redlock_release,
	.abandon = dlock__redlock_abandon,
	.check_resource = check_resource_redlock,
	.query = dlock__redlock_query,
	.watch = dlock__redlock_observe,
	.unwatch = dlock__redlock_unobserve,
	.announce = dlock__redlock_announce,
};
