/* SPDX-License-Identifier: MIT */
/*
 * Configuration files: see config.h.
 */
#include <string.h>

#include "config.h"
#include "error.h"
#include "parse.h"

static void kv_free(gpointer data)
{
	dlock__kv *kv = data;

	g_free(kv->key);
	g_free(kv->value);
	g_free(kv);
}

static void backend_free(gpointer data)
{
	dlock__config_backend *b = data;

	g_free(b->name);
	g_free(b->url);
	g_ptr_array_unref(b->options);
	g_free(b);
}

static void route_free(gpointer data)
{
	dlock__config_route *r = data;

	g_free(r->name);
	g_free(r->match);
	g_free(r->backend);
	g_free(r);
}

void dlock__config_free(dlock__config *config)
{
	if (!config)
		return;
	g_free(config->path);
	g_free(config->default_backend);
	g_ptr_array_unref(config->backends);
	g_ptr_array_unref(config->routes);
	g_free(config);
}

bool dlock__glob_match(const char *p, const char *t)
{
	/* Iterative, with one backtrack point for the last '*'. */
	const char *star = NULL, *resume = NULL;

	while (*t) {
		if (*p == '*') {
			star = p++;
			resume = t;
		} else if (*p == '?' || (*p && *p == *t)) {
			p++;
			t++;
		} else if (star) {
			p = star + 1;
			t = ++resume;
		} else {
			return false;
		}
	}
	while (*p == '*')
		p++;
	return *p == '\0';
}

/*
 * Whether a covers b, deciding for every pair of suffixes (a + i, b + j)
 * from the ends backwards: a's '*' may absorb any run of b, b's own
 * wildcards included; a '?' covers one literal or '?'; a literal covers
 * only itself.  Sound: a "true" is always a real inclusion (not complete:
 * "*?" covers "?*" but is not found to).  The answer for (i, j) needs only
 * (i + 1, j), (i + 1, j + 1) and (i, j + 1), so two rows of b's length
 * suffice: O(|a| * |b|) time, where trying each way for each '*' in turn
 * took time exponential in the number of stars.
 */
bool dlock__glob_covers(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	bool *next = g_new0(bool, lb + 1); /* row i + 1 */
	bool *row = g_new0(bool, lb + 1);  /* row i */
	bool result;

	/* Row la: the empty rest of a covers only the empty rest of b. */
	next[lb] = true;
	for (size_t i = la; i-- > 0;) {
		for (size_t j = lb + 1; j-- > 0;) {
			if (a[i] == '*')
				row[j] = next[j] || (j < lb && row[j + 1]);
			else if (j == lb || b[j] == '*')
				row[j] = false;
			else if (a[i] == '?' || (a[i] == b[j] && b[j] != '?'))
				row[j] = next[j + 1];
			else
				row[j] = false;
		}
		bool *t = next;

		next = row;
		row = t;
	}
	result = next[0];
	g_free(next);
	g_free(row);
	return result;
}

/*
 * GKeyFile merges a repeated group or key silently; a repeated setting in
 * a lock configuration is almost always a mistake, so find them in the text.
 */
static int check_duplicates(const char *path, const char *text)
{
	GHashTable *groups = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	GHashTable *keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	gchar **lines = g_strsplit(text, "\n", -1);
	char *group = NULL;
	int rc = DLOCK_OK;

	for (int i = 0; lines[i] && rc == DLOCK_OK; i++) {
		char *line = g_strstrip(lines[i]);
		char *eq;

		if (!*line || *line == '#' || *line == ';')
			continue;
		if (*line == '[') {
			char *end = strchr(line, ']');

			if (!end)
				continue; /* GKeyFile reports it */
			g_free(group);
			group = g_strndup(line + 1, (gsize)(end - line - 1));
			if (!g_hash_table_add(groups, g_strdup(group)))
				rc = dlock__error(DLOCK_ECONFIG, "file %s, line %d: group [%s] appears twice",
				                  path, i + 1, group);
			g_hash_table_remove_all(keys);
			continue;
		}
		eq = strchr(line, '=');
		if (!eq || !group)
			continue;
		*eq = '\0';
		g_strchomp(line);
		if (!g_hash_table_add(keys, g_strdup(line)))
			rc = dlock__error(DLOCK_ECONFIG, "file %s, group [%s], key %s: given twice (line %d)",
			                  path, group, line, i + 1);
	}
	g_free(group);
	g_strfreev(lines);
	g_hash_table_unref(groups);
	g_hash_table_unref(keys);
	return rc;
}

/*
 * A key's value without an inline comment: " ; text" or " # text" after
 * the value, as in "backend = cache   ; used when no route matches".
 * GKeyFile itself only knows comments on lines of their own.
 */
static char *get_value(GKeyFile *kf, const char *group, const char *key)
{
	char *value = g_key_file_get_value(kf, group, key, NULL);

	for (char *p = value; p && *p; p++) {
		if ((*p == ';' || *p == '#') && p > value && g_ascii_isspace(p[-1])) {
			*p = '\0';
			break;
		}
	}
	return value ? g_strstrip(value) : NULL;
}

static dlock__config_backend *find_backend(const dlock__config *config, const char *name)
{
	for (guint i = 0; i < config->backends->len; i++) {
		dlock__config_backend *b = config->backends->pdata[i];

		if (strcmp(b->name, name) == 0)
			return b;
	}
	return NULL;
}

/* A group name "KIND NAME": NAME after exactly one space, non-empty. */
static const char *group_name(const char *group, const char *kind)
{
	size_t len = strlen(kind);

	if (strncmp(group, kind, len) != 0 || group[len] != ' ' || !group[len + 1])
		return NULL;
	return group + len + 1;
}

static int load_defaults(dlock__config *c, GKeyFile *kf, const char *group)
{
	gchar **keys = g_key_file_get_keys(kf, group, NULL, NULL);
	int rc = DLOCK_OK;

	for (int i = 0; keys && keys[i] && rc == DLOCK_OK; i++) {
		char *value = get_value(kf, group, keys[i]);

		if (strcmp(keys[i], "backend") == 0) {
			c->default_backend = g_strdup(value);
		} else if (strcmp(keys[i], "wait") == 0) {
			if (!dlock__duration_parse(value, &c->wait_ms))
				rc = dlock__error(DLOCK_ECONFIG,
				                  "file %s, group [%s], key wait: '%s' is not a duration "
				                  "(" DLOCK__DURATION_FORMS ")",
				                  c->path, group, value);
		} else {
			rc = dlock__error(DLOCK_ECONFIG, "file %s, group [%s], key %s: unknown key "
			                  "(known: backend, wait)", c->path, group, keys[i]);
		}
		g_free(value);
	}
	g_strfreev(keys);
	return rc;
}

static int load_backend(dlock__config *c, GKeyFile *kf, const char *group, const char *name)
{
	gchar **keys = g_key_file_get_keys(kf, group, NULL, NULL);
	dlock__config_backend *b = g_new0(dlock__config_backend, 1);

	b->name = g_strdup(name);
	b->options = g_ptr_array_new_with_free_func(kv_free);
	for (int i = 0; keys && keys[i]; i++) {
		char *value = get_value(kf, group, keys[i]);

		if (strcmp(keys[i], "url") == 0) {
			b->url = value;
		} else {
			dlock__kv *kv = g_new0(dlock__kv, 1);

			kv->key = g_strdup(keys[i]);
			kv->value = value;
			g_ptr_array_add(b->options, kv);
		}
	}
	g_strfreev(keys);
	g_ptr_array_add(c->backends, b);
	if (!b->url)
		return dlock__error(DLOCK_ECONFIG, "file %s, group [%s], key url: missing", c->path, group);
	return DLOCK_OK;
}

static int load_route(dlock__config *c, GKeyFile *kf, const char *group, const char *name)
{
	gchar **keys = g_key_file_get_keys(kf, group, NULL, NULL);
	dlock__config_route *r = g_new0(dlock__config_route, 1);
	int rc = DLOCK_OK;

	r->name = g_strdup(name);
	g_ptr_array_add(c->routes, r);
	for (int i = 0; keys && keys[i] && rc == DLOCK_OK; i++) {
		char *value = get_value(kf, group, keys[i]);

		if (strcmp(keys[i], "match") == 0)
			r->match = g_strdup(value);
		else if (strcmp(keys[i], "backend") == 0)
			r->backend = g_strdup(value);
		else
			rc = dlock__error(DLOCK_ECONFIG, "file %s, group [%s], key %s: unknown key "
			                  "(known: match, backend)", c->path, group, keys[i]);
		g_free(value);
	}
	g_strfreev(keys);
	if (rc == DLOCK_OK && !r->match)
		rc = dlock__error(DLOCK_ECONFIG, "file %s, group [%s], key match: missing", c->path, group);
	if (rc == DLOCK_OK && !r->backend)
		rc = dlock__error(DLOCK_ECONFIG, "file %s, group [%s], key backend: missing", c->path, group);
	return rc;
}

/* Cross-group checks, once every group is read. */
static int check_references(dlock__config *c)
{
	if (c->backends->len == 0)
		return dlock__error(DLOCK_ECONFIG, "file %s: no [backend NAME] group", c->path);
	if (c->default_backend && !find_backend(c, c->default_backend))
		return dlock__error(DLOCK_ECONFIG, "file %s, group [defaults], key backend: no [backend %s] group",
		                    c->path, c->default_backend);
	if (!c->default_backend && c->backends->len > 1)
		return dlock__error(DLOCK_ECONFIG,
		                    "file %s, group [defaults], key backend: missing; with several backends "
		                    "it names the one used when no route matches", c->path);
	for (guint i = 0; i < c->routes->len; i++) {
		dlock__config_route *r = c->routes->pdata[i];

		if (!find_backend(c, r->backend))
			return dlock__error(DLOCK_ECONFIG, "file %s, group [route %s], key backend: no [backend %s] group",
			                    c->path, r->name, r->backend);
		for (guint j = 0; j < i; j++) {
			dlock__config_route *earlier = c->routes->pdata[j];

			if (dlock__glob_covers(earlier->match, r->match))
				return dlock__error(DLOCK_ECONFIG,
				                    "file %s, group [route %s], key match: '%s' can never match: "
				                    "the earlier [route %s] ('%s') matches every such name first",
				                    c->path, r->name, r->match, earlier->name, earlier->match);
		}
	}
	return DLOCK_OK;
}

/* A GLib message with any URI in it redacted (it may quote a line). */
static int glib_error(const char *shown, GError *error)
{
	char *message = dlock__uri_redact_text(error->message);
	int rc = dlock__error(DLOCK_ECONFIG, "file %s: %s", shown, message);

	g_free(message);
	g_error_free(error);
	return rc;
}

int dlock__config_load(const char *path, dlock__config **ret)
{
	GKeyFile *kf = g_key_file_new();
	GError *error = NULL;
	dlock__config *c;
	gchar **groups;
	char *text = NULL;
	/* A URI mistyped without "//" is taken for a file name: messages show
	 * it without its password. */
	char *shown = dlock__uri_redact(path);
	int rc;

	if (!g_file_get_contents(path, &text, NULL, &error)) {
		rc = glib_error(shown, error);
		g_free(shown);
		g_key_file_free(kf);
		return rc;
	}
	rc = check_duplicates(shown, text);
	if (rc == DLOCK_OK && !g_key_file_load_from_data(kf, text, (gsize)-1, G_KEY_FILE_NONE, &error))
		rc = glib_error(shown, error);
	g_free(text);
	if (rc != DLOCK_OK) {
		g_free(shown);
		g_key_file_free(kf);
		return rc;
	}

	c = g_new0(dlock__config, 1);
	c->path = shown;
	c->wait_ms = -1;
	c->backends = g_ptr_array_new_with_free_func(backend_free);
	c->routes = g_ptr_array_new_with_free_func(route_free);
	groups = g_key_file_get_groups(kf, NULL);
	for (int i = 0; groups[i] && rc == DLOCK_OK; i++) {
		const char *name;

		if (strcmp(groups[i], "defaults") == 0)
			rc = load_defaults(c, kf, groups[i]);
		else if ((name = group_name(groups[i], "backend")))
			rc = load_backend(c, kf, groups[i], name);
		else if ((name = group_name(groups[i], "route")))
			rc = load_route(c, kf, groups[i], name);
		else
			rc = dlock__error(DLOCK_ECONFIG, "file %s, group [%s]: unknown group "
			                  "(known: [defaults], [backend NAME], [route NAME])", c->path, groups[i]);
	}
	g_strfreev(groups);
	g_key_file_free(kf);
	if (rc == DLOCK_OK)
		rc = check_references(c);
	if (rc != DLOCK_OK) {
		dlock__config_free(c);
		return rc;
	}
	*ret = c;
	return DLOCK_OK;
}
