/*
 * The Redis backend: options, opening and closing, and the operations
 * table.  Key names: keys.c.
 */
#include <stddef.h>
#include <string.h>

#include "error.h"
#include "internal.h"
#include "redis.h"

#define DEFAULT_PORT 6379

/* The options, as the rows below parse them. */
typedef struct redis_options {
	int64_t ttl_ms;
	bool watchdog;
	int64_t connect_timeout_ms;
	int64_t command_timeout_ms;
	int key_format; /* index in key_formats */
	char *prefix;
} redis_options;

enum { KEY_FORMAT_BRACED, KEY_FORMAT_PLAIN };

static const char *const key_formats[] = { "braced", "plain", NULL };

/* The braces of the key's hash tag are dlock's own. */
static bool prefix_ok(const char *value)
{
	return !strpbrk(value, "{}");
}

static const dlock__option options[] = {
	DLOCK__OPTION_TTL(redis_options, ttl_ms),
	DLOCK__OPTION_WATCHDOG(redis_options, watchdog),
	DLOCK__OPTION_CONNECT_TIMEOUT(redis_options, connect_timeout_ms),
	DLOCK__OPTION_TIMEOUT("command-timeout", "3s", redis_options, command_timeout_ms),
	{ .name = "key-format", .kind = DLOCK__OPTION_CHOICE, .fallback = "braced",
	  .offset = offsetof(redis_options, key_format), .choices = key_formats },
	{ .name = "prefix", .kind = DLOCK__OPTION_STRING, .fallback = "dlock:",
	  .offset = offsetof(redis_options, prefix), .check = prefix_ok,
	  .why = "contains '{' or '}', which would break the key's hash tag" },
	{ .name = NULL },
};

static int check_resource(const dlock__backend *b, const char *resource)
{
	if (b->plain_keys && (g_str_has_suffix(resource, ":fence") ||
	                      g_str_has_suffix(resource, ":q") ||
	                      g_str_has_suffix(resource, ":released")))
		return dlock__error(DLOCK_EINVAL,
		                    "resource name '%s': with key-format=plain, names ending in "
		                    "':fence', ':q' or ':released' would collide with dlock's own keys",
		                    resource);
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
	const redis_options *o = opts->values;
	bool plain_keys = o->key_format == KEY_FORMAT_PLAIN;
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
	if (plain_keys && dlock__options_given(opts, "prefix"))
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
	b->connect_timeout_ms = o->connect_timeout_ms;
	b->command_timeout_ms = o->command_timeout_ms;
	b->plain_keys = plain_keys;
	b->prefix = g_strdup(o->prefix);
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
	dlock__secret_free(b->password);
	g_free(b->prefix);
	g_free(b);
}

const dlock__backend_ops dlock__redis_ops = {
	.type = "redis",
	.caps = DLOCK__CAP_LEASE | DLOCK__CAP_SHARED,
	.options = options,
	.options_size = sizeof(redis_options),
	.open = open_backend,
	.close = close_backend,
	.acquire = dlock__redis_acquire,
	.release = dlock__redis_release,
	.check_resource = check_resource,
	.query = dlock__redis_query,
};
