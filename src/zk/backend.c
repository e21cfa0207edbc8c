/* SPDX-License-Identifier: MIT */
/*
 * The ZooKeeper backend: options, paths, opening and closing, and the
 * operations table.
 *
 * zk://[user:password@]host[:port][,host[:port]...][/chroot][?options]
 * The chroot goes into the client's connect string; the lock of resource
 * R is the node <root>/R (default root "/dlock"), whose children are the
 * contenders' ephemeral sequential nodes.  With credentials the session
 * authenticates with the digest scheme, and lock nodes and the resource's
 * node get the creator all rights and everyone else read (peers and
 * `dlock status` read a holder's data).  ZooKeeper checks a delete against
 * the parent's ACL, so it is the resource node's ACL that keeps other
 * identities from deleting (or queueing behind) a lock taken with
 * credentials; the nodes above it stay open.
 */
#include <stddef.h>
#include <string.h>

#include "error.h"
#include "internal.h"
#include "zk.h"

#define DEFAULT_PORT 2181

/* The options, as the rows below parse them. */
typedef struct zk_options {
	int64_t session_timeout_ms;
	int64_t connect_timeout_ms;
	char *root;
} zk_options;

/* An absolute node path of non-empty segments other than "." and "..",
 * with no trailing '/' (so not "/" itself either). */
static bool root_ok(const char *value)
{
	gchar **parts;
	bool ok = true;

	if (value[0] != '/' || strcmp(value, "/") == 0)
		return false;
	parts = g_strsplit(value + 1, "/", -1);
	for (int i = 0; parts[i]; i++)
		if (!*parts[i] || strcmp(parts[i], ".") == 0 || strcmp(parts[i], "..") == 0)
			ok = false;
	g_strfreev(parts);
	return ok;
}

static const dlock__option options[] = {
	DLOCK__OPTION_TIMEOUT("session-timeout", "10s", zk_options, session_timeout_ms),
	DLOCK__OPTION_CONNECT_TIMEOUT(zk_options, connect_timeout_ms),
	{ .name = "root", .kind = DLOCK__OPTION_STRING, .fallback = "/dlock",
	  .offset = offsetof(zk_options, root), .check = root_ok,
	  .why = "is not an absolute node path without empty, '.' or '..' segments or a trailing '/'" },
	{ .name = NULL },
};

char *dlock__zk_dir(const zk_backend *b, const char *resource)
{
	return g_strconcat(b->root, "/", resource, NULL);
}

static int check_resource(const dlock__backend *backend, const char *resource)
{
	char *segment = dlock__zk_ambiguous_segment(resource);

	if (segment) {
		int rc = dlock__error(DLOCK_EINVAL,
		                      "resource name '%s': segment '%s' would read as a lock node "
		                      "of its parent on ZooKeeper", resource, segment);

		g_free(segment);
		return rc;
	}
	return DLOCK_OK;
}

/* "h1:p1,h2:p2[/chroot]" for zookeeper_init. */
static char *connect_string(const dlock__uri *uri)
{
	GString *s = g_string_new(NULL);

	for (guint i = 0; i < uri->hosts->len; i++) {
		const dlock__host *h = uri->hosts->pdata[i];
		bool v6 = strchr(h->host, ':') != NULL;

		g_string_append_printf(s, "%s%s%s%s:%d", i ? "," : "", v6 ? "[" : "", h->host,
		                       v6 ? "]" : "", h->port ? h->port : DEFAULT_PORT);
	}
	if (uri->path && strcmp(uri->path, "/") != 0)
		g_string_append(s, uri->path);
	return g_string_free(s, FALSE);
}

static int check_chroot(const dlock__uri *uri)
{
	const char *p = uri->path;

	if (!p || strcmp(p, "/") == 0)
		return DLOCK_OK;
	if (g_str_has_suffix(p, "/") || strstr(p, "//") || strstr(p, "/./") ||
	    strstr(p, "/../") || g_str_has_suffix(p, "/.") || g_str_has_suffix(p, "/.."))
		return dlock__error(DLOCK_ECONFIG, "URI %s: chroot '%s' is not a clean absolute path",
		                    uri->redacted, p);
	return DLOCK_OK;
}

static int open_backend(const dlock__backend_env *env, const dlock__uri *uri,
                        const dlock__options *opts, dlock__backend **ret)
{
	const zk_options *o = opts->values;
	zk_backend *b;

	if (uri->hosts->len == 0)
		return dlock__error(DLOCK_ECONFIG, "URI %s: zk takes one or more host[:port]", uri->redacted);
	if (check_chroot(uri) != DLOCK_OK)
		return DLOCK_ECONFIG;
	if ((uri->user && *uri->user) != (uri->password != NULL))
		return dlock__error(DLOCK_ECONFIG, "URI %s: digest credentials need both a user and a "
		                    "password (zk://user:password@host)", uri->redacted);
	if (uri->user && strchr(uri->user, ':'))
		return dlock__error(DLOCK_ECONFIG, "URI %s: a digest user name cannot contain ':'",
		                    uri->redacted);
	if (o->session_timeout_ms > INT32_MAX)
		return dlock__error(DLOCK_ECONFIG, "URI %s: session-timeout is too large", uri->redacted);

	b = g_new0(zk_backend, 1);
	b->logger = env->logger;
	b->hosts = connect_string(uri);
	b->label = g_strdup_printf("zk %s", b->hosts);
	b->server_hosts = g_new0(char *, uri->hosts->len + 1);
	b->server_ports = g_new0(int, uri->hosts->len);
	for (guint i = 0; i < uri->hosts->len; i++) {
		const dlock__host *h = uri->hosts->pdata[i];

		b->server_hosts[i] = g_strdup(h->host);
		b->server_ports[i] = h->port ? h->port : DEFAULT_PORT;
	}
	b->chroot = g_strdup(uri->path && strcmp(uri->path, "/") != 0 ? uri->path : "");
	b->resolver = dlock__resolver_new();
	if (uri->user && *uri->user)
		b->credentials = g_strconcat(uri->user, ":", uri->password, NULL);
	b->root = g_strdup(o->root);
	b->session_timeout_ms = o->session_timeout_ms;
	b->connect_timeout_ms = o->connect_timeout_ms;
	if (b->credentials) {
		b->acl_entries[0].perms = ZOO_PERM_ALL;
		b->acl_entries[0].id = ZOO_AUTH_IDS;
		b->acl_entries[1].perms = ZOO_PERM_READ;
		b->acl_entries[1].id = ZOO_ANYONE_ID_UNSAFE;
		b->lock_acl.count = 2;
		b->lock_acl.data = b->acl_entries;
	} else {
		b->lock_acl = ZOO_OPEN_ACL_UNSAFE;
	}
	g_mutex_init(&b->mu);
	g_cond_init(&b->cond);
	b->sessions = g_ptr_array_new();
	*ret = (dlock__backend *)(void *)b;
	return DLOCK_OK;
}

static void close_backend(dlock__backend *backend)
{
	zk_backend *b = zk_of(backend);

	dlock__zk_sessions_stop(b);
	g_ptr_array_unref(b->sessions);
	g_mutex_clear(&b->mu);
	g_cond_clear(&b->cond);
	g_free(b->label);
	g_free(b->hosts);
	g_strfreev(b->server_hosts);
	g_free(b->server_ports);
	g_free(b->chroot);
	dlock__resolver_free(b->resolver);
	dlock__secret_free(b->credentials);
	g_free(b->root);
	g_free(b);
}

const dlock__backend_ops dlock__zk_ops = {
	.type = "zk",
	/* Sessions, not leases: no TTL, no watchdog.  Election nodes hold
	 * the bare participant id (Curator LeaderSelector's format). */
	.caps = DLOCK__CAP_SHARED | DLOCK__CAP_PERMITS | DLOCK__CAP_BARE_IDS,
	.options = options,
	.options_size = sizeof(zk_options),
	.open = open_backend,
	.close = close_backend,
	.acquire_begin = dlock__zk_acquire_begin,
	.acquire_step = dlock__zk_acquire_step,
	.acquire_end = dlock__zk_acquire_end,
	.release = dlock__zk_release,
	.abandon = dlock__zk_abandon,
	.check_resource = check_resource,
	.query = dlock__zk_query,
	.watch = dlock__zk_observe,
	.unwatch = dlock__zk_unobserve,
};
