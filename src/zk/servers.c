/* SPDX-License-Identifier: MIT */
/*
 * The ensemble's servers as the client library gets them.
 *
 * The C client would resolve the servers' names itself, synchronously,
 * inside zookeeper_init2() -- no deadline stops that -- and again in every
 * turn of its I/O loop.  dlock resolves them within the caller's time
 * (resolve.h) and hands the client IP literals, with its own lookups
 * turned off.
 *
 * A server whose name does not resolve when a session opens (not yet in
 * DNS, a resolver slow to answer) is left out of that session's list.  A
 * session lives as long as its servers keep it, which may be days, so
 * the names are tried again while any is missing: whenever the session
 * is not connected -- before its first connection, and after losing one,
 * which is when another server is needed -- the session thread looks
 * them up again, with a pause doubling from half a second to ten seconds
 * between rounds (a caller that comes to wait for the session brings the
 * next round forward, to half a second after the last), and gives the
 * client the longer list (zoo_set_servers()).  A connected session is
 * left alone: a new list may move it to another server, with a
 * disconnection its holds would see; its next disconnection takes the
 * new list in.
 *
 * The list handed over always has an odd number of addresses.  After a
 * failed connection attempt the client library (3.8) moves its place in
 * the list twice -- once for the failure, once to pick the next server --
 * so with an even number it only ever tries every other address: with
 * two, always the same one, in a loop without pause, and a session whose
 * other server is down never reconnects.  Steps of two reach every
 * address of an odd-sized list, so an even one gets its first address
 * again at its end.
 */
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "mutex.h"

/* Make the number of addresses in servers ("a:p,b:q,...") odd (see
 * above): an even list gets its first address again. */
static void pad_to_odd(GString *servers)
{
	guint count = 1;
	char *first;

	for (const char *p = servers->str; *p; p++)
		count += *p == ',';
	if (servers->len == 0 || count % 2 == 1)
		return;
	first = g_strndup(servers->str, (gsize)(strchr(servers->str, ',') - servers->str));
	g_string_append_printf(servers, ",%s", first);
	g_free(first);
}

int dlock__zk_servers_resolve(zk_backend *b, dlock__waiter *waiter, int64_t until_us,
                              char **ret_servers, GPtrArray *missing)
{
	unsigned n = g_strv_length(b->server_hosts);
	char ***addrs = g_new0(char **, n);
	GString *servers;
	int rc;

	rc = dlock__resolve_each(b->resolver, (const char *const *)b->server_hosts, n, waiter, until_us,
	                         addrs);
	if (rc != DLOCK_OK) {
		char *why = g_strdup(dlock_last_error_message());

		rc = dlock__error(rc, "%s: %s", b->label, why);
		g_free(why);
		g_free(addrs);
		return rc;
	}
	servers = g_string_new(NULL);
	for (unsigned i = 0; i < n; i++) {
		if (!addrs[i])
			g_ptr_array_add(missing, b->server_hosts[i]);
		for (int j = 0; addrs[i] && addrs[i][j]; j++) {
			bool v6 = strchr(addrs[i][j], ':') != NULL;

			g_string_append_printf(servers, "%s%s%s%s:%d", servers->len ? "," : "", v6 ? "[" : "",
			                       addrs[i][j], v6 ? "]" : "", b->server_ports[i]);
		}
		g_strfreev(addrs[i]);
	}
	g_free(addrs);
	pad_to_odd(servers);
	*ret_servers = g_string_free(servers, FALSE);
	return DLOCK_OK;
}

void dlock__zk_servers_refresh(zk_backend *b, zk_session *s, int64_t until_us)
{
	GPtrArray *missing = g_ptr_array_new();
	char *servers = NULL, *added = NULL;
	int zrc = ZOK;

	if (dlock__zk_servers_resolve(b, NULL, until_us, &servers, missing) != DLOCK_OK) {
		g_ptr_array_unref(missing);
		return; /* none resolved this time: keep what the session has */
	}
	dlock__mutex_lock(&s->mu, DLOCK__RANK_ZK_SESSION);
	/* Only a list with more of the names (one that failed to resolve
	 * this time keeps none of its addresses, so a passing failure of the
	 * resolver must not shrink the list), and only while not connected
	 * (see above): a connected session tries again at its next
	 * disconnection. */
	if (s->phase == ZK_CONNECTING && missing->len < s->missing &&
	    (zrc = zoo_set_servers(s->zh, servers)) == ZOK) {
		added = servers;
		servers = s->servers;
		s->servers = added;
		s->missing = missing->len;
		added = g_strdup(added);
	}
	dlock__mutex_unlock(&s->mu);
	if (added)
		dlock__log(b->logger, DLOCK_LOG_INFO, "%s: servers resolved again; the session now tries %s%s",
		           b->label, added, missing->len ? " (some names still do not resolve)" : "");
	else if (zrc != ZOK)
		dlock__log(b->logger, DLOCK_LOG_WARNING, "%s: cannot give the session its servers %s: %s",
		           b->label, servers, dlock__zk_strerror(zrc));
	g_free(added);
	g_free(servers);
	g_ptr_array_unref(missing);
}
