/* SPDX-License-Identifier: MIT */
/* Leader election checks: see test-election.h. */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-election.h"
#include "test-exclusion.h"
#include "test-util.h"

/* How long an expected event may take to arrive, before slack. */
#define EVENT_WAIT_MS 10000

int test_election_worker(char **argv)
{
	dlock_client *client;
	dlock_election *e;
	char buf[64];
	int rc;

	if (dlock_client_new(argv[0], &client) != DLOCK_OK)
		return 2;
	if (dlock_election_new(client, argv[1], argv[2], &e) != DLOCK_OK ||
	    dlock_election_campaign(e, -1) != DLOCK_OK)
		return 3;
	printf("leader %" PRIu64 "\n", dlock_election_fencing_token(e));
	fflush(stdout);
	while (fgets(buf, sizeof(buf), stdin))
		;
	rc = dlock_election_resign(e);
	dlock_election_free(e);
	dlock_client_free(client);
	return rc == DLOCK_OK ? 0 : 3;
}

/* One participant or observer, with its own client and event record. */
typedef struct member {
	dlock_client *client;
	dlock_election *e;
	GAsyncQueue *events; /* char *: "elected:ID", "changed:ID" or "changed:-" */
	int campaign_rc;     /* of the campaign thread */
	int64_t campaign_done_ms;
} member;

static const char *event_name(dlock_election_event event)
{
	switch (event) {
	case DLOCK_ELECTION_ELECTED:
		return "elected";
	case DLOCK_ELECTION_SUSPENDED:
		return "suspended";
	case DLOCK_ELECTION_LOST:
		return "lost";
	case DLOCK_ELECTION_RESIGNED:
		return "resigned";
	default:
		return "changed";
	}
}

static void on_event(dlock_election *e, dlock_election_event event, const char *leader_id, void *data)
{
	member *m = data;

	assert_ptr_equal(e, m->e);
	g_async_queue_push(m->events, g_strdup_printf("%s:%s", event_name(event),
	                                              leader_id ? leader_id : "-"));
}

static void member_new(member *m, const char *uri, const char *name, const char *id)
{
	memset(m, 0, sizeof(*m));
	assert_int_equal(dlock_client_new(uri, &m->client), DLOCK_OK);
	assert_int_equal(dlock_election_new(m->client, name, id, &m->e), DLOCK_OK);
	m->events = g_async_queue_new_full(g_free);
	assert_int_equal(dlock_election_set_callback(m->e, on_event, m), DLOCK_OK);
}

static void member_free(member *m)
{
	dlock_election_free(m->e);
	dlock_client_free(m->client);
	g_async_queue_unref(m->events);
}

/* Wait for the event text; with skip_nobody, "changed:-" on the way is
 * passed over (an observer may look between a release and the grant). */
static void expect_event(member *m, const char *text, bool skip_nobody)
{
	int64_t until = test_now_ms() + EVENT_WAIT_MS * test_slack_factor();

	for (;;) {
		int64_t left = until - test_now_ms();
		char *got = left > 0 ? g_async_queue_timeout_pop(m->events, (guint64)left * 1000) : NULL;

		if (!got)
			fail_msg("no event '%s' within %d ms", text, EVENT_WAIT_MS);
		if (strcmp(got, text) == 0) {
			g_free(got);
			return;
		}
		if (!(skip_nobody && strcmp(got, "changed:-") == 0))
			fail_msg("event '%s' while waiting for '%s'", got, text);
		g_free(got);
	}
}

static void *campaign_thread(void *data)
{
	member *m = data;

	m->campaign_rc = dlock_election_campaign(m->e, 60000);
	__atomic_store_n(&m->campaign_done_ms, test_now_ms(), __ATOMIC_SEQ_CST);
	return NULL;
}

static void assert_leader(member *asker, const char *id)
{
	char *leader = NULL;

	assert_int_equal(dlock_election_leader(asker->e, &leader), DLOCK_OK);
	if (id)
		assert_string_equal(leader, id);
	else
		assert_null(leader);
	free(leader);
}

typedef struct campaigner {
	member *m;
	pthread_t thread;
	bool done;
} campaigner;

/* A campaigner whose campaign has returned (joined now), or NULL. */
static campaigner *finished(campaigner *c, int n)
{
	for (int i = 0; i < n; i++)
		if (!c[i].done && __atomic_load_n(&c[i].m->campaign_done_ms, __ATOMIC_SEQ_CST)) {
			pthread_join(c[i].thread, NULL);
			c[i].done = true;
			return &c[i];
		}
	return NULL;
}

/* Resign `from`; one of the n campaigners (whichever the backend serves
 * next: arrival order on Redis and ZooKeeper, the kernel's on the file
 * backend) leads within bound_ms with a larger token, and the observer
 * sees it.  Returns it. */
static member *hand_over(member *from, campaigner *c, int n, member *observer, uint64_t *token,
                         int64_t bound_ms)
{
	int64_t t0 = test_now_ms(), until = t0 + 2 * EVENT_WAIT_MS * test_slack_factor();
	char *resigned = g_strdup_printf("resigned:%s", dlock_election_id(from->e));
	char *elected, *changed;
	campaigner *won;
	member *to;

	assert_int_equal(dlock_election_resign(from->e), DLOCK_OK);
	assert_false(dlock_election_is_leader(from->e));
	expect_event(from, resigned, false);
	while (!(won = finished(c, n)) && test_now_ms() < until)
		g_usleep(1000);
	assert_non_null(won);
	to = won->m;
	assert_int_equal(to->campaign_rc, DLOCK_OK);
	print_message("handover to %s: %" PRId64 " ms\n", dlock_election_id(to->e),
	              to->campaign_done_ms - t0);
	assert_true(to->campaign_done_ms - t0 <= bound_ms * test_slack_factor());
	assert_true(dlock_election_is_leader(to->e));
	assert_true(dlock_election_fencing_token(to->e) > *token);
	*token = dlock_election_fencing_token(to->e);
	elected = g_strdup_printf("elected:%s", dlock_election_id(to->e));
	changed = g_strdup_printf("changed:%s", dlock_election_id(to->e));
	expect_event(to, elected, false);
	expect_event(observer, changed, true);
	/* Woken by the backend's word, not by a poll that happened to come. */
	print_message("the observer saw it after %" PRId64 " ms\n", test_now_ms() - t0);
	assert_true(test_now_ms() - t0 <= (bound_ms + 200) * test_slack_factor());
	assert_leader(observer, dlock_election_id(to->e));
	g_free(elected);
	g_free(changed);
	g_free(resigned);
	return to;
}

/* Until a campaign started in a thread is waiting on the server, as far
 * as a test can tell from outside: a short pause. */
static void let_queue(void)
{
	g_usleep(300 * 1000);
}

void test_election_handover(const char *uri, const char *name, int64_t hand_bound_ms)
{
	member a, b, c, obs;
	campaigner waiting[2] = { { &b, 0, false }, { &c, 0, false } };
	member *leader;
	uint64_t token;

	member_new(&obs, uri, name, "observer");
	assert_int_equal(dlock_election_observe(obs.e, 1), DLOCK_OK);
	expect_event(&obs, "changed:-", false);
	member_new(&a, uri, name, "alpha");
	member_new(&b, uri, name, "beta");
	member_new(&c, uri, name, "gamma");

	assert_int_equal(dlock_election_campaign(a.e, 0), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(a.e, 0), DLOCK_OK); /* leading already */
	assert_true(dlock_election_is_leader(a.e));
	token = dlock_election_fencing_token(a.e);
	assert_true(token > 0);
	expect_event(&a, "elected:alpha", false);
	expect_event(&obs, "changed:alpha", false);
	assert_leader(&b, "alpha");
	assert_int_equal(dlock_election_campaign(b.e, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_election_resign(b.e), DLOCK_ENOTHELD);

	for (int i = 0; i < 2; i++) {
		pthread_create(&waiting[i].thread, NULL, campaign_thread, waiting[i].m);
		let_queue();
	}
	leader = hand_over(&a, waiting, 2, &obs, &token, hand_bound_ms);
	leader = hand_over(leader, waiting, 2, &obs, &token, hand_bound_ms);
	assert_int_equal(dlock_election_resign(leader->e), DLOCK_OK);
	expect_event(leader, leader == &b ? "resigned:beta" : "resigned:gamma", false);
	expect_event(&obs, "changed:-", false);
	assert_leader(&obs, NULL);
	/* Nothing else was told: no stray events. */
	assert_int_equal(g_async_queue_length(a.events), 0);
	assert_int_equal(g_async_queue_length(b.events), 0);
	assert_int_equal(g_async_queue_length(c.events), 0);
	member_free(&a);
	member_free(&b);
	member_free(&c);
	member_free(&obs);
}

int64_t test_election_failover(const char *uri, const char *name, int64_t bound_ms)
{
	const char *args[] = { "elect", uri, name, "doomed", NULL };
	member p, obs;
	pthread_t t;
	char line[64];
	uint64_t dead_token;
	int in_fd, out_fd;
	int64_t t0, took;
	pid_t pid;

	member_new(&obs, uri, name, "observer");
	assert_int_equal(dlock_election_observe(obs.e, 1), DLOCK_OK);
	expect_event(&obs, "changed:-", false);
	pid = test_spawn_worker_io(args, &in_fd, &out_fd);
	assert_true(test_read_line(out_fd, line, sizeof(line), EVENT_WAIT_MS));
	assert_true(g_str_has_prefix(line, "leader "));
	dead_token = g_ascii_strtoull(line + 7, NULL, 10);
	expect_event(&obs, "changed:doomed", false);

	member_new(&p, uri, name, "heir");
	pthread_create(&t, NULL, campaign_thread, &p);
	let_queue();
	assert_false(dlock_election_is_leader(p.e));
	t0 = test_now_ms();
	kill(pid, SIGKILL);
	assert_int_equal(test_wait_worker(pid), -1);
	pthread_join(t, NULL);
	took = p.campaign_done_ms - t0;
	print_message("leader killed: the next led after %" PRId64 " ms (bound %" PRId64 " ms)\n", took,
	              bound_ms);
	assert_int_equal(p.campaign_rc, DLOCK_OK);
	assert_true(took <= bound_ms * test_slack_factor());
	assert_true(dlock_election_fencing_token(p.e) > dead_token);
	expect_event(&p, "elected:heir", false);
	expect_event(&obs, "changed:heir", true);
	close(in_fd);
	close(out_fd);
	member_free(&p);
	member_free(&obs);
	return took;
}

void test_election_freeze(const char *uri, const char *name, void (*freeze)(void *),
                          void (*thaw)(void *), void *arg, int64_t freeze_ms, bool expect_lost)
{
	member m;
	uint64_t token;

	member_new(&m, uri, name, "frozen");
	assert_int_equal(dlock_election_campaign(m.e, 5000), DLOCK_OK);
	expect_event(&m, "elected:frozen", false);
	token = dlock_election_fencing_token(m.e);
	freeze(arg);
	expect_event(&m, "suspended:frozen", false);
	assert_false(dlock_election_is_leader(m.e));
	if (expect_lost)
		expect_event(&m, "lost:frozen", false);
	else
		g_usleep((gulong)freeze_ms * 1000);
	thaw(arg);
	if (expect_lost) {
		assert_false(dlock_election_is_leader(m.e));
		assert_int_equal(dlock_election_campaign(m.e, 10000), DLOCK_OK);
		assert_true(dlock_election_fencing_token(m.e) > token);
	} else {
		assert_true(dlock_election_fencing_token(m.e) == token);
	}
	/* Confirmed again, or elected afresh. */
	expect_event(&m, "elected:frozen", false);
	assert_true(dlock_election_is_leader(m.e));
	assert_int_equal(dlock_election_resign(m.e), DLOCK_OK);
	expect_event(&m, "resigned:frozen", false);
	member_free(&m);
}

/* ---- resignations racing campaigns, and frees following resignations -- */

/* Events as "elected", "resigned", ... without asserting anything on the
 * callback thread (an event of an election already freed would be a
 * failure of its own, reported by the test's thread). */
static void tally(dlock_election *e, dlock_election_event event, const char *leader_id, void *data)
{
	(void)e;
	(void)leader_id;
	g_async_queue_push(data, g_strdup(event_name(event)));
}

/* The next event within EVENT_WAIT_MS (before slack), or NULL. */
static char *next_event(GAsyncQueue *events)
{
	return g_async_queue_timeout_pop(events, (guint64)EVENT_WAIT_MS * test_slack_factor() * 1000);
}

typedef struct resigner {
	dlock_election *e;
	pthread_t thread;
	int done;            /* the campaign has returned (atomic) */
	int rc;              /* of the resignation, or 1 if none was made */
	bool early;          /* made before the campaign had returned */
	bool yield;          /* let other threads run between looks */
} resigner;

/* Resign the moment the participant leads: as the campaign finishes. */
static void *resign_when_leading(void *data)
{
	resigner *r = data;

	r->rc = 1;
	for (;;) {
		bool done = __atomic_load_n(&r->done, __ATOMIC_SEQ_CST);

		if (dlock_election_is_leader(r->e)) {
			r->early = !done;
			r->rc = dlock_election_resign(r->e);
			break;
		}
		if (done)
			break;
		/* valgrind runs one thread at a time and hands its lock over
		 * unfairly: a spin would starve the campaign's own threads
		 * (and the test's proxy) past their command timeouts. */
		if (r->yield)
			sched_yield();
	}
	return NULL;
}

void test_election_resign_racing_campaign(const char *uri, const char *name, int rounds,
                                          void (*before)(void *), void *arg)
{
	GAsyncQueue *events = g_async_queue_new_full(g_free);
	dlock_client *client;
	dlock_election *e;
	int broken = 0, raced = 0;
	int64_t slowest_ms = 0;
	char *first_break = NULL;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, name, "racer", &e), DLOCK_OK);
	assert_int_equal(dlock_election_set_callback(e, tally, events), DLOCK_OK);
	for (int i = 0; i < rounds; i++) {
		resigner r = { e, 0, 0, 1, false, test_under_valgrind() };
		char *got[2] = { NULL, NULL };
		bool ok;
		int64_t t0;
		int rc;

		if (before)
			before(arg);
		pthread_create(&r.thread, NULL, resign_when_leading, &r);
		t0 = test_now_ms();
		rc = dlock_election_campaign(e, 10000);
		slowest_ms = MAX(slowest_ms, test_now_ms() - t0);
		if (rc != DLOCK_OK)
			print_message("round %d: campaign: %s after %" PRId64 " ms: %s\n", i, dlock_code_name(rc),
			              test_now_ms() - t0, dlock_last_error_message());
		__atomic_store_n(&r.done, 1, __ATOMIC_SEQ_CST);
		pthread_join(r.thread, NULL);
		assert_int_equal(rc, DLOCK_OK);
		assert_int_equal(r.rc, DLOCK_OK);
		raced += r.early;
		got[0] = next_event(events);
		got[1] = next_event(events);
		ok = got[0] && got[1] && strcmp(got[0], "elected") == 0 && strcmp(got[1], "resigned") == 0 &&
		     !dlock_election_is_leader(e);
		if (!ok) {
			broken++;
			if (!first_break)
				first_break = g_strdup_printf("round %d: campaign %s, resign %s, events %s, %s; "
				                              "leading: %d", i, dlock_code_name(rc),
				                              dlock_code_name(r.rc), got[0] ? got[0] : "none",
				                              got[1] ? got[1] : "none",
				                              dlock_election_is_leader(e));
			/* A round that went wrong may have left a hold behind. */
			dlock_election_resign(e);
		}
		g_free(got[0]);
		g_free(got[1]);
		while ((got[0] = g_async_queue_try_pop(events))) {
			if (!ok)
				print_message("  then: %s\n", got[0]);
			g_free(got[0]);
		}
	}
	print_message("%d of %d rounds out of order (%d resigned before the campaign returned; "
	              "the slowest campaign took %" PRId64 " ms)\n", broken, rounds, raced, slowest_ms);
	if (first_break)
		print_message("first: %s\n", first_break);
	g_free(first_break);
	dlock_election_free(e);
	dlock_client_free(client);
	g_async_queue_unref(events);
	assert_int_equal(broken, 0);
}

void test_election_resign_then_free_delivers_resigned(const char *uri, const char *name, int rounds)
{
	GAsyncQueue *events = g_async_queue_new_full(g_free);
	dlock_client *client;
	int delivered = 0, elected = 0;
	char *late;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	for (int i = 0; i < rounds; i++) {
		dlock_election *e;
		char *got;
		bool resigned = false;

		assert_int_equal(dlock_election_new(client, name, "brief", &e), DLOCK_OK);
		assert_int_equal(dlock_election_set_callback(e, tally, events), DLOCK_OK);
		assert_int_equal(dlock_election_campaign(e, 10000), DLOCK_OK);
		assert_int_equal(dlock_election_resign(e), DLOCK_OK);
		dlock_election_free(e);
		/* What the callback was told before the free returned. */
		while ((got = g_async_queue_try_pop(events))) {
			if (strcmp(got, "elected") == 0 && !resigned)
				elected++;
			else if (strcmp(got, "resigned") == 0 && !resigned)
				resigned = true;
			else
				fail_msg("round %d: unexpected event '%s'", i, got);
			g_free(got);
		}
		delivered += resigned;
	}
	/* Nothing of a freed election comes afterwards. */
	late = g_async_queue_timeout_pop(events, 500 * 1000);
	print_message("RESIGNED delivered before the free returned in %d of %d rounds (ELECTED in %d)%s%s\n",
	              delivered, rounds, elected, late ? "; later: " : "", late ? late : "");
	dlock_client_free(client);
	g_async_queue_unref(events);
	if (late)
		fail_msg("event '%s' after the election was freed", late);
	assert_int_equal(elected, rounds);
	assert_int_equal(delivered, rounds);
}

int test_election_worker_main(int argc, char **argv)
{
	if (argc >= 6 && strcmp(argv[2], "elect") == 0)
		return test_election_worker(argv + 3);
	if (argc >= 9 && strcmp(argv[2], "counter") == 0)
		return test_exclusion_worker(argv + 3);
	return 64;
}
