/* SPDX-License-Identifier: MIT */
/*
 * Name resolution with a deadline, on glibc's asynchronous getaddrinfo_a():
 * the lookup runs in the C library's own helper threads (created with
 * every signal blocked) while the caller waits for at most the time it
 * has left.  A lookup still running at the deadline is canceled if it has
 * not started; otherwise it is abandoned: its request record must stay
 * valid until the C library finishes with it, so it is parked on the
 * resolver and freed by a later call once done.
 *
 * The caller does not wait in gai_suspend(): a gai_suspend() that times
 * out just as a lookup finishes leaves its wait entry, on its own stack,
 * listed with the request, and the helper thread then writes through it
 * (glibc 2.36 sets a request's result before it takes the lock under which
 * gai_suspend() unlists what has not finished).  Nor does it ask for a
 * notification thread (SIGEV_THREAD), which glibc starts with every
 * signal unblocked.  It looks at the requests instead, napping between
 * looks from NAP_FIRST_US up to NAP_CAP_US: a lookup from the hosts file
 * is seen within a few times what it took, a slow DNS answer within
 * NAP_CAP_US.  Naps are sleeps on the caller's waiter, when it has one, so
 * a cancel ends the wait at once.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#include <glib.h>

#include "clock.h"
#include "error.h"
#include "mutex.h"
#include "resolve.h"

/* How long the other names of a list may still take once one resolved. */
#define GRACE_US (100 * 1000)
/* The first and the longest nap between two looks at running lookups. */
#define NAP_FIRST_US 50
#define NAP_CAP_US (10 * 1000)

struct dlock__resolver {
	GMutex mu;                /* guards abandoned (rank RESOLVE) */
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
	dlock__mutex_lock(&resolver->mu, DLOCK__RANK_RESOLVE);
	/* What still runs is left to the C library (see above). */
	g_slist_free(reap_locked(resolver->abandoned));
	dlock__mutex_unlock(&resolver->mu);
	g_mutex_clear(&resolver->mu);
	g_free(resolver);
}

static bool is_literal(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/*
 * Wait until every lookup has finished or deadline_us passes -- but once
 * one host has addresses (have_one: a literal among them), give the others
 * only GRACE_US more: a server whose name never resolves must not hold up
 * a session the others can serve.  Returns false when waiter (may be NULL)
 * was canceled first.
 */
static bool wait_lookups(lookup **lookups, guint n, bool have_one, dlock__waiter *waiter,
                         int64_t deadline_us)
{
	int64_t nap_us = NAP_FIRST_US;

	if (have_one)
		deadline_us = MIN(deadline_us, dlock__mono_us() + GRACE_US);
	for (;;) {
		uint64_t seen = waiter ? dlock__waiter_seq(waiter) : 0;
		bool pending = false;
		int64_t until_us;

		for (guint i = 0; i < n; i++) {
			int err = lookups[i] ? gai_error(&lookups[i]->cb) : EAI_CANCELED;

			if (err == EAI_INPROGRESS) {
				pending = true;
			} else if (err == 0 && !have_one) {
				have_one = true;
				deadline_us = MIN(deadline_us, dlock__mono_us() + GRACE_US);
			}
		}
		if (!pending)
			return true;
		if (waiter && dlock__waiter_canceled(waiter))
			return false;
		if (dlock__remaining_us(deadline_us) <= 0)
			return true;
		until_us = MIN(deadline_us, dlock__mono_us() + nap_us);
		nap_us = MIN(nap_us * 2, NAP_CAP_US);
		if (!waiter)
			g_usleep((gulong)MAX(dlock__remaining_us(until_us), 0));
		else if (dlock__waiter_sleep(waiter, seen, until_us) == DLOCK_ECANCELED)
			return false;
	}
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

/* The outcome of one finished (or abandoned) lookup; frees or parks it. */
static int finish_lookup(dlock__resolver *r, lookup *l, char ***ret_addrs)
{
	int err = gai_error(&l->cb);

	if (err == EAI_INPROGRESS && gai_cancel(&l->cb) == EAI_NOTCANCELED) {
		dlock__mutex_lock(&r->mu, DLOCK__RANK_RESOLVE);
		r->abandoned = g_slist_prepend(r->abandoned, l);
		dlock__mutex_unlock(&r->mu);
		return dlock__error(DLOCK_EUNAVAILABLE, "host name '%s' was not resolved in the time left",
		                    l->name);
	}
	err = gai_error(&l->cb);
	if (err == EAI_CANCELED || err == EAI_INPROGRESS) {
		err = dlock__error(DLOCK_EUNAVAILABLE, "host name '%s' was not resolved in the time left",
		                   l->name);
	} else if (err != 0) {
		err = dlock__error(DLOCK_EUNAVAILABLE, "cannot resolve host name '%s': %s", l->name,
		                   gai_strerror(err));
	} else {
		*ret_addrs = addresses(l->cb.ar_result);
		err = DLOCK_OK;
		if (!(*ret_addrs)[0]) {
			g_strfreev(*ret_addrs);
			*ret_addrs = NULL;
			err = dlock__error(DLOCK_EUNAVAILABLE, "host name '%s' has no IP address", l->name);
		}
	}
	lookup_free(l);
	return err;
}

int dlock__resolve_each(dlock__resolver *resolver, const char *const *hosts, unsigned n,
                        dlock__waiter *waiter, int64_t deadline_us, char ***ret_addrs)
{
	lookup **lookups = g_new0(lookup *, n);
	char *why = NULL;
	bool have_one = false;
	int rc = DLOCK_EUNAVAILABLE;

	dlock__mutex_lock(&resolver->mu, DLOCK__RANK_RESOLVE);
	resolver->abandoned = reap_locked(resolver->abandoned);
	dlock__mutex_unlock(&resolver->mu);

	/* Literals need no lookup; the names are looked up all at once. */
	for (unsigned i = 0; i < n; i++) {
		struct gaicb *list[1];
		int err;

		ret_addrs[i] = NULL;
		if (is_literal(hosts[i])) {
			ret_addrs[i] = g_new0(char *, 2);
			ret_addrs[i][0] = g_strdup(hosts[i]);
			have_one = true;
			continue;
		}
		lookups[i] = g_new0(lookup, 1);
		lookups[i]->name = g_strdup(hosts[i]);
		lookups[i]->hints.ai_family = AF_UNSPEC;
		lookups[i]->hints.ai_socktype = SOCK_STREAM;
		lookups[i]->cb.ar_name = lookups[i]->name;
		lookups[i]->cb.ar_request = &lookups[i]->hints;
		list[0] = &lookups[i]->cb;
		if (dlock__remaining_us(deadline_us) <= 0) {
			if (!why)
				why = g_strdup_printf("no time left to resolve host name '%s'", hosts[i]);
			lookup_free(lookups[i]);
			lookups[i] = NULL;
			continue;
		}
		err = getaddrinfo_a(GAI_NOWAIT, list, 1, NULL);
		if (err != 0) {
			if (!why)
				why = g_strdup_printf("cannot start resolving host name '%s': %s", hosts[i],
				                      gai_strerror(err));
			lookup_free(lookups[i]);
			lookups[i] = NULL;
		}
	}
	if (!wait_lookups(lookups, n, have_one, waiter, deadline_us)) {
		/* What resolved is not wanted any more; the rest is abandoned. */
		for (unsigned i = 0; i < n; i++) {
			if (lookups[i])
				finish_lookup(resolver, lookups[i], &ret_addrs[i]);
			g_strfreev(ret_addrs[i]);
			ret_addrs[i] = NULL;
		}
		g_free(lookups);
		g_free(why);
		return dlock__error(DLOCK_ECANCELED, "resolving host name '%s'%s was canceled", hosts[0],
		                    n > 1 ? " and the others" : "");
	}
	for (unsigned i = 0; i < n; i++) {
		if (lookups[i] && finish_lookup(resolver, lookups[i], &ret_addrs[i]) != DLOCK_OK && !why)
			why = g_strdup(dlock_last_error_message());
		if (ret_addrs[i])
			rc = DLOCK_OK;
	}
	g_free(lookups);
	if (rc != DLOCK_OK)
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s", why ? why : "no host name given");
	g_free(why);
	return rc;
}

int dlock__resolve(dlock__resolver *resolver, const char *host, dlock__waiter *waiter,
                   int64_t deadline_us, char ***ret_addrs)
{
	const char *hosts[1] = { host };

	return dlock__resolve_each(resolver, hosts, 1, waiter, deadline_us, ret_addrs);
}
