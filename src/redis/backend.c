/*
 * The Redis backend: options, key names, opening and closing, and the
 * operations table.
 *
 * Keys for resource R: "<prefix>{R}" (default prefix "dlock:"), the fencing
 * counter "<prefix>{R}:fence" and the release channel
 * "<prefix>{R}:released"; the braces keep all three in one cluster slot.
 * With key-format=plain the lock key is R itself, as redis-py's Lock and
 * similar peers name it, so dlock and those peers exclude each other.
 */
#include <string.h>

#include "error.h"
#include "internal.h"

#define DEFAULT_PORT 6379


/* The key names are built on every acquire: concatenation, not printf. */
static char *key_with(const dlock__backend *b, const char *resource, const char *suffix)
{
	if (b->plain_keys)
		return g_strconcat(resource, suffix, NULL);
	return g_strconcat(b->prefix, "{", resource, "}", suffix, NULL);
}

char *dlock__redis_key(const dlock__backend *b, const char *resource)
{
	return key_with(b, resource, "");
}

char *dlock__redis_fence_key(const dlock__backend *b, const char *resource)
{
	return key_with(b, resource, ":fence");
}

char *dlock__redis_channel(const dlock__backend *b, const char *resource)
{
	return key_with(b, resource, ":released");
}

static int check_resource(const dlock__backend *b, const char *resource)
{
	if (b->plain_keys && (g_str_has_suffix(resource, ":fence") ||
	                      g_str_has_suffix(resource, ":released")))
		return dlock__error(DLOCK_EINVAL,
		                    "resource name '%s': with key-format=plain, names ending in "
		                    "':fence' or ':released' would collide with dlock's own keys", resource);
	return DLOCK_OK;
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

static int open_backend(const dlock__backend_env *env, const dlock__uri *uri,
                        const dlock__options *opts, dlock__backend **ret)
{
	dlock__backend *b;
	bool is_unix = strcmp(uri->scheme, "redis+unix") == 0;
	int db = 0;

	if (is_unix) {
		if (uri->hosts->len > 0)
			return dlock__error(DLOCK_ECONFIG, "URI %s: redis+unix takes a socket path, not a host "
			                    "(redis+unix:///path/to/socket)", uri->redacted);
		if (!uri->path || strlen(uri->path) < 2)
			return dlock__error(DLOCK_ECONFIG, "URI %s: no socket path", uri->redacted);
	} else {
		if (uri->hosts->len != 1)
			return dlock__error(DLOCK_ECONFIG, "URI %s: redis takes exactly one host:port",
			                    uri->redacted);
		if (parse_db(uri, &db) != DLOCK_OK)
			return DLOCK_ECONFIG;
	}
	if (uri->user && *uri->user && !uri->password)
		return dlock__error(DLOCK_ECONFIG, "URI %s: user '%s' given without a password",
		                    uri->redacted, uri->user);
	if (opts->plain_keys && (opts->given & DLOCK__OPT_PREFIX))
		return dlock__error(DLOCK_ECONFIG, "URI %s: option 'prefix' applies only to key-format=braced",
		                    uri->redacted);

	b = g_new0(dlock__backend, 1);
	b->logger = env->logger;
	if (is_unix) {
		b->unix_path = g_strdup(uri->path);
		b->label = g_strdup_printf("redis unix:%s", uri->path);
	} else {
		const dlock__host *host = uri->hosts->pdata[0];

		b->host = g_strdup(host->host);
		b->port = host->port ? host->port : DEFAULT_PORT;
		b->label = g_strdup_printf("redis %s:%d", b->host, b->port);
	}
	/* "redis://:pw@host" is a password alone: AUTH pw, not AUTH "" pw. */
	b->user = uri->user && *uri->user ? g_strdup(uri->user) : NULL;
	b->password = g_strdup(uri->password);
	b->db = db;
	b->ttl_ms = opts->ttl_ms;
	b->watchdog = opts->watchdog;
	b->connect_timeout_ms = opts->connect_timeout_ms;
	b->command_timeout_ms = opts->command_timeout_ms;
	b->plain_keys = opts->plain_keys;
	b->prefix = g_strdup(opts->prefix);
	g_mutex_init(&b->pool_mu);
	g_queue_init(&b->pool);
	g_mutex_init(&b->lazy_mu);
	b->resolver = dlock__resolver_new();
	dlock__redis_scripts_init(b);
	*ret = b;
	return DLOCK_OK;
}

static void close_backend(dlock__backend *b)
{
	dlock__redis_sub_stop(b);
	dlock__redis_watchdog_stop(b);
	dlock__redis_pool_clear(b);
	dlock__redis_scripts_clear(b);
	dlock__resolver_free(b->resolver);
	g_mutex_clear(&b->pool_mu);
	g_mutex_clear(&b->lazy_mu);
	g_free(b->label);
	g_free(b->host);
	g_free(b->unix_path);
	g_free(b->user);
	if (b->password)
		memset(b->password, 0, strlen(b->password));
	g_free(b->password);
	g_free(b->prefix);
	g_free(b);
}

static int64_t default_ttl_ms(const dlock__backend *b)
{
	return b->ttl_ms;
}

static bool default_watchdog(const dlock__backend *b)
{
	return b->watchdog;
}

const dlock__backend_ops dlock__redis_ops = {
	.type = "redis",
	.caps = DLOCK__CAP_LEASE,
	.options = DLOCK__OPT_TTL | DLOCK__OPT_WATCHDOG | DLOCK__OPT_CONNECT_TIMEOUT |
	           DLOCK__OPT_COMMAND_TIMEOUT | DLOCK__OPT_KEY_FORMAT | DLOCK__OPT_PREFIX,
	.open = open_backend,
	.close = close_backend,
	.acquire = dlock__redis_acquire,
	.release = dlock__redis_release,
	.check_resource = check_resource,
	.query = dlock__redis_query,
	.default_ttl_ms = default_ttl_ms,
	.default_watchdog = default_watchdog,
};
