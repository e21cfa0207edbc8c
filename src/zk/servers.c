/*
 * The ensemble's servers as the client library gets them.
 *
 * The C client would resolve the servers' names itself, synchronously,
 * inside zookeeper_init2() -- no deadline stops that -- and again in every
 * turn of its I/O loop.  dlock resolves them within the caller's time
 * (resolve.h) and hands the client IP literals, with its own lookups
 * turned off.
 *
 * A server whose name does not resolve in time is left out of the
 * session's list.
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

int dlock__zk_servers_resolve(dlock__backend *b, dlock__waiter *waiter, int64_t until_us,
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
