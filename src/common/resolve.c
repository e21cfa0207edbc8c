/*
 * Name resolution with a deadline, on glibc's asynchronous getaddrinfo_a():
 * the lookup runs in the C library's own helper threads (created with
 * every signal blocked) while the caller waits in gai_suspend() for at
 * most the time it has left.  A lookup still running at the deadline is
 * canceled if it has not started; otherwise it is abandoned: its request
 * record must stay valid until the C library finishes with it, so it is
 * parked on the resolver and freed by a later call once done.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <glib.h>

#include "clock.h"
#include "error.h"
#include "resolve.h"

struct dlock__resolver {
	GMutex mu;
	GSList *abandoned;        /* lookup * still running in the C library */
};

typedef struct lookup {
	struct gaicb cb;
	struct addrinfo hints;
	char *name;
} lookup;

dlock__resolver *dlock__resolver_new(void)
{
	dlock__resolver *r = g_new0(dlock__resolver, 1);

	g_mutex_init(&r->mu);
	return r;
}

static void lookup_free(lookup *l)
{
	if (l->cb.ar_result)
		freeaddrinfo(l->cb.ar_result);
	g_free(l->name);
	g_free(l);
}

/* Free the abandoned lookups the C library has finished with; returns
 * those still running.  Called with r->mu held. */
static GSList *reap_locked(GSList *list)
{
	GSList *running = NULL;

	for (GSList *it = list; it; it = it->next) {
		lookup *l = it->data;

		if (gai_error(&l->cb) == EAI_INPROGRESS && gai_cancel(&l->cb) == EAI_NOTCANCELED)
			running = g_slist_prepend(running, l);
		else
			lookup_free(l);
	}
	g_slist_free(list);
	return running;
}

void dlock__resolver_free(dlock__resolver *resolver)
{
	if (!resolver)
		return;
	g_mutex_lock(&resolver->mu);
	/* What still runs is left to the C library (see above). */
	g_slist_free(reap_locked(resolver->abandoned));
	g_mutex_unlock(&resolver->mu);
	g_mutex_clear(&resolver->mu);
	g_free(resolver);
}

static bool is_literal(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* Wait for l until deadline_us; true when it finished. */
static bool wait_lookup(lookup *l, int64_t deadline_us)
{
	const struct gaicb *list[1] = { &l->cb };

	while (gai_error(&l->cb) == EAI_INPROGRESS) {
		struct timespec ts;
		int64_t left;

		if (deadline_us == INT64_MAX) {
			gai_suspend(list, 1, NULL);
			continue;
		}
		left = dlock__remaining_us(deadline_us);
		if (left <= 0)
			return false;
		ts.tv_sec = left / 1000000;
		ts.tv_nsec = (left % 1000000) * 1000;
		gai_suspend(list, 1, &ts); /* EAI_AGAIN (time), EAI_INTR: look again */
	}
	return true;
}

/* The numeric addresses of a finished lookup, IPv4 first, without repeats. */
static char **addresses(const struct addrinfo *res)
{
	GPtrArray *v4 = g_ptr_array_new(), *v6 = g_ptr_array_new();
	char **out;
	guint n = 0;

	for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		char text[INET6_ADDRSTRLEN];
		GPtrArray *into = ai->ai_family == AF_INET ? v4 : v6;
		bool seen = false;

		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
		    getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof(text), NULL, 0, NI_NUMERICHOST) != 0)
			continue;
		for (guint i = 0; i < into->len && !seen; i++)
			seen = strcmp(into->pdata[i], text) == 0;
		if (!seen)
			g_ptr_array_add(into, g_strdup(text));
	}
	out = g_new0(char *, v4->len + v6->len + 1);
	for (guint i = 0; i < v4->len; i++)
		out[n++] = v4->pdata[i];
	for (guint i = 0; i < v6->len; i++)
		out[n++] = v6->pdata[i];
	g_ptr_array_unref(v4);
	g_ptr_array_unref(v6);
	return out;
}

int dlock__resolve(dlock__resolver *resolver, const char *host, int64_t deadline_us,
                   char ***ret_addrs)
{
	struct gaicb *list[1];
	lookup *l;
	int err;

	if (is_literal(host)) {
		*ret_addrs = g_new0(char *, 2);
		(*ret_addrs)[0] = g_strdup(host);
		return DLOCK_OK;
	}
	g_mutex_lock(&resolver->mu);
	resolver->abandoned = reap_locked(resolver->abandoned);
	g_mutex_unlock(&resolver->mu);
	if (dlock__remaining_us(deadline_us) <= 0)
		return dlock__error(DLOCK_EUNAVAILABLE, "no time left to resolve host name '%s'", host);

	l = g_new0(lookup, 1);
	l->name = g_strdup(host);
	l->hints.ai_family = AF_UNSPEC;
	l->hints.ai_socktype = SOCK_STREAM;
	l->cb.ar_name = l->name;
	l->cb.ar_request = &l->hints;
	list[0] = &l->cb;
	err = getaddrinfo_a(GAI_NOWAIT, list, 1, NULL);
	if (err != 0) {
		lookup_free(l);
		return dlock__error(DLOCK_EUNAVAILABLE, "cannot start resolving host name '%s': %s", host,
		                    gai_strerror(err));
	}
	if (!wait_lookup(l, deadline_us) && gai_cancel(&l->cb) == EAI_NOTCANCELED) {
		g_mutex_lock(&resolver->mu);
		resolver->abandoned = g_slist_prepend(resolver->abandoned, l);
		g_mutex_unlock(&resolver->mu);
		return dlock__error(DLOCK_EUNAVAILABLE, "host name '%s' was not resolved in the time left", host);
	}
	err = gai_error(&l->cb);
	if (err == EAI_CANCELED) {
		lookup_free(l);
		return dlock__error(DLOCK_EUNAVAILABLE, "host name '%s' was not resolved in the time left", host);
	}
	if (err != 0) {
		lookup_free(l);
		return dlock__error(DLOCK_EUNAVAILABLE, "cannot resolve host name '%s': %s", host,
		                    gai_strerror(err));
	}
	*ret_addrs = addresses(l->cb.ar_result);
	lookup_free(l);
	if (!(*ret_addrs)[0]) {
		g_strfreev(*ret_addrs);
		*ret_addrs = NULL;
		return dlock__error(DLOCK_EUNAVAILABLE, "host name '%s' has no IP address", host);
	}
	return DLOCK_OK;
}
