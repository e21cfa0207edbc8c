/*
 * The fixed option names, the same as URI query parameters and as keys of
 * a configuration file's backend groups.  Every refusal happens when the
 * client is built and names the source, the key, the value and the rule.
 */
#include <string.h>

#include "error.h"
#include "parse.h"

void dlock__options_init(dlock__options *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->ttl_ms = 30000;
	opts->watchdog = true;
	opts->connect_timeout_ms = 5000;
	opts->command_timeout_ms = 3000;
	opts->plain_keys = false;
	opts->prefix = g_strdup("dlock:");
	opts->session_timeout_ms = 10000;
	opts->root = g_strdup("/dlock");
	opts->dir = NULL;
}

void dlock__options_clear(dlock__options *opts)
{
	g_free(opts->prefix);
	g_free(opts->root);
	g_free(opts->dir);
	opts->prefix = opts->root = opts->dir = NULL;
}

static int bad(const char *where, const char *key, const char *value, const char *why)
{
	return dlock__error(DLOCK_ECONFIG, "%s: option '%s': '%s' %s", where, key, value, why);
}

static int out_of_range(const char *where, const char *key, const char *value, const char *bound,
                        int64_t limit_ms)
{
	char *why = g_strdup_printf("is %s of %" G_GINT64_FORMAT "ms", bound, limit_ms);
	int rc = bad(where, key, value, why);

	g_free(why);
	return rc;
}

static int set_duration(int64_t *field, int64_t min_ms, int64_t max_ms, const char *where,
                        const char *key, const char *value)
{
	int64_t ms;

	if (!dlock__duration_parse(value, &ms))
		return bad(where, key, value, "is not a duration (like 250ms, 10s, 2m; a bare number is seconds)");
	if (ms < min_ms)
		return out_of_range(where, key, value, "below the minimum", min_ms);
	if (ms > max_ms)
		return out_of_range(where, key, value, "above the maximum", max_ms);
	*field = ms;
	return DLOCK_OK;
}

static bool parse_bool(const char *value, bool *ret)
{
	static const char *const yes[] = { "on", "true", "yes", "1" };
	static const char *const no[] = { "off", "false", "no", "0" };

	for (size_t i = 0; i < G_N_ELEMENTS(yes); i++) {
		if (g_ascii_strcasecmp(value, yes[i]) == 0) {
			*ret = true;
			return true;
		}
		if (g_ascii_strcasecmp(value, no[i]) == 0) {
			*ret = false;
			return true;
		}
	}
	return false;
}

/* An absolute path of non-empty segments other than "." and "..", with no
 * trailing '/' (except the root itself when root_ok). */
static bool clean_path(const char *value, bool root_ok)
{
	gchar **parts;
	bool ok = true;

	if (value[0] != '/')
		return false;
	if (strcmp(value, "/") == 0)
		return root_ok;
	parts = g_strsplit(value + 1, "/", -1);
	for (int i = 0; parts[i]; i++)
		if (!*parts[i] || strcmp(parts[i], ".") == 0 || strcmp(parts[i], "..") == 0)
			ok = false;
	g_strfreev(parts);
	return ok;
}

static const struct {
	const char *name;
	unsigned bit;
} names[] = {
	{ "ttl", DLOCK__OPT_TTL },
	{ "watchdog", DLOCK__OPT_WATCHDOG },
	{ "connect-timeout", DLOCK__OPT_CONNECT_TIMEOUT },
	{ "command-timeout", DLOCK__OPT_COMMAND_TIMEOUT },
	{ "key-format", DLOCK__OPT_KEY_FORMAT },
	{ "prefix", DLOCK__OPT_PREFIX },
	{ "session-timeout", DLOCK__OPT_SESSION_TIMEOUT },
	{ "root", DLOCK__OPT_ROOT },
	{ "dir", DLOCK__OPT_DIR },
};

int dlock__options_set(dlock__options *opts, unsigned allowed, const char *key,
                       const char *value, const char *where)
{
	unsigned bit = 0;
	int rc = DLOCK_OK;

	for (size_t i = 0; i < G_N_ELEMENTS(names) && !bit; i++)
		if (strcmp(names[i].name, key) == 0)
			bit = names[i].bit;
	if (!bit)
		return dlock__error(DLOCK_ECONFIG, "%s: unknown option '%s'", where, key);
	if (!(allowed & bit))
		return dlock__error(DLOCK_ECONFIG, "%s: option '%s' does not apply to this backend", where, key);
	if (opts->given & bit)
		return dlock__error(DLOCK_ECONFIG, "%s: option '%s' given twice", where, key);

	switch (bit) {
	case DLOCK__OPT_TTL:
		rc = set_duration(&opts->ttl_ms, DLOCK__TTL_MIN_MS, DLOCK__TTL_MAX_MS, where, key, value);
		break;
	case DLOCK__OPT_CONNECT_TIMEOUT:
		rc = set_duration(&opts->connect_timeout_ms, 1, DLOCK__TIMEOUT_MAX_MS, where, key, value);
		break;
	case DLOCK__OPT_COMMAND_TIMEOUT:
		rc = set_duration(&opts->command_timeout_ms, 1, DLOCK__TIMEOUT_MAX_MS, where, key, value);
		break;
	case DLOCK__OPT_SESSION_TIMEOUT:
		rc = set_duration(&opts->session_timeout_ms, 1, DLOCK__TIMEOUT_MAX_MS, where, key, value);
		break;
	case DLOCK__OPT_WATCHDOG:
		if (!parse_bool(value, &opts->watchdog))
			rc = bad(where, key, value, "is neither on nor off");
		break;
	case DLOCK__OPT_KEY_FORMAT:
		if (strcmp(value, "braced") == 0)
			opts->plain_keys = false;
		else if (strcmp(value, "plain") == 0)
			opts->plain_keys = true;
		else
			rc = bad(where, key, value, "is neither braced nor plain");
		break;
	case DLOCK__OPT_PREFIX:
		if (strpbrk(value, "{}"))
			rc = bad(where, key, value, "contains '{' or '}', which would break the key's hash tag");
		else {
			g_free(opts->prefix);
			opts->prefix = g_strdup(value);
		}
		break;
	case DLOCK__OPT_ROOT:
		if (!clean_path(value, false))
			rc = bad(where, key, value, "is not an absolute node path without empty, '.' or '..' segments or a trailing '/'");
		else {
			g_free(opts->root);
			opts->root = g_strdup(value);
		}
		break;
	case DLOCK__OPT_DIR:
		if (value[0] != '/')
			rc = bad(where, key, value, "is not an absolute path");
		else {
			g_free(opts->dir);
			opts->dir = g_strdup(value);
		}
		break;
	}
	if (rc == DLOCK_OK)
		opts->given |= bit;
	return rc;
}
