/* SPDX-License-Identifier: MIT */
/*
 * The result code of an acquire that is canceled, or whose handle is
 * freed, while the backend is in a step it cannot interrupt.
 *
 * dlock.h promises DLOCK_ECANCELED for an acquire woken by
 * dlock_lock_cancel(), and "DLOCK_OK or DLOCK_ECANCELED" for an acquire in
 * flight when its handle is freed.  A Redis acquire whose TCP connect hangs
 * (the server's accept queue is full, so its SYNs are dropped) cannot be
 * interrupted; when the connect timeout ends it, the backend reports the
 * server unavailable.  The cancel came first: the caller must see
 * DLOCK_ECANCELED, not a backend failure it never waited for.
 *
 * And the cancel must end the hanging connect at once, not when its
 * timeout runs out.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redis.h"
#include "test-util.h"

#define CONNECT_TIMEOUT "1500ms"

/*
 * A loopback port whose connects hang: it listens with the smallest
 * backlog, and connections that nobody accepts fill that backlog, after
 * which the kernel drops new SYNs and the client's connect waits.
 */
typedef struct black_hole {
	int listener;
	int fillers[4];
	int port;
} black_hole;

static void black_hole_open(black_hole *h)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);

	h->listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(h->listener >= 0);
	assert_int_equal(bind(h->listener, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(h->listener, (struct sockaddr *)&sa, &len), 0);
	assert_int_equal(listen(h->listener, 0), 0);
	h->port = ntohs(sa.sin_port);
	for (int i = 0; i < 4; i++) {
		h->fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		assert_true(h->fillers[i] >= 0);
		if (connect(h->fillers[i], (struct sockaddr *)&sa, sizeof(sa)) != 0)
			assert_int_equal(errno, EINPROGRESS);
	}
	/* Let the handshakes that fit in the backlog complete. */
	g_usleep(200 * 1000);
}

static void black_hole_close(black_hole *h)
{
	for (int i = 0; i < 4; i++)
		close(h->fillers[i]);
	close(h->listener);
}

typedef struct call {
	dlock_lock *lock;
	int rc;
	char message[512];
	int64_t elapsed_ms;
	int64_t returned_ms;    /* test_now_ms() when the acquire returned */
	int entered;
} call;

static void *acquire_thread(void *data)
{
	call *c = data;
	int64_t start = test_now_ms();

	__atomic_store_n(&c->entered, 1, __ATOMIC_SEQ_CST);
	c->rc = dlock_acquire(c->lock, 20000);
	g_strlcpy(c->message, dlock_last_error_message(), sizeof(c->message));
	c->returned_ms = test_now_ms();
	c->elapsed_ms = c->returned_ms - start;
	return NULL;
}

/* The acquire returned soon after the call made at since_ms. */
static void assert_returned_at_once(const call *c, int64_t since_ms)
{
	int64_t after = c->returned_ms - since_ms;

	print_message("the acquire returned %" PRId64 " ms after the cancel\n", after);
	if (after > 300 + test_slack(300))
		fail_msg("the acquire returned %" PRId64 " ms after the cancel, not at once", after);
}

static void report(const char *what, const call *c)
{
	print_message("%s: acquire returned %s after %" PRId64 " ms: %s\n", what, dlock_strerror(c->rc),
	              c->elapsed_ms, c->message);
}

static dlock_client *client_on(const black_hole *h)
{
	char *uri = g_strdup_printf("redis://127.0.0.1:%d?connect-timeout=" CONNECT_TIMEOUT, h->port);
	dlock_client *client;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	g_free(uri);
	return client;
}

static void test_acquire_canceled_while_connecting_returns_ecanceled(void **state)
{
	black_hole h;
	dlock_client *client;
	call c = { 0 };
	pthread_t thread;
	int64_t since;

	(void)state;
	black_hole_open(&h);
	client = client_on(&h);
	assert_int_equal(dlock_lock_new(client, "cancel-code/cancel", &c.lock), DLOCK_OK);
	pthread_create(&thread, NULL, acquire_thread, &c);
	/* Well inside the connect, well before its timeout. */
	g_usleep(300 * 1000);
	assert_true(__atomic_load_n(&c.entered, __ATOMIC_SEQ_CST));
	since = test_now_ms();
	assert_int_equal(dlock_lock_cancel(c.lock), DLOCK_OK);
	pthread_join(thread, NULL);
	report("canceled", &c);
	assert_int_equal(c.rc, DLOCK_ECANCELED);
	assert_true(strlen(c.message) > 0);
	assert_returned_at_once(&c, since);
	dlock_lock_free(c.lock);
	dlock_client_free(client);
	black_hole_close(&h);
}

static void test_acquire_in_flight_when_its_handle_is_freed_returns_ecanceled(void **state)
{
	black_hole h;
	dlock_client *client;
	call c = { 0 };
	pthread_t thread;
	int64_t since, took;

	(void)state;
	black_hole_open(&h);
	client = client_on(&h);
	assert_int_equal(dlock_lock_new(client, "cancel-code/free", &c.lock), DLOCK_OK);
	pthread_create(&thread, NULL, acquire_thread, &c);
	g_usleep(300 * 1000);
	assert_true(__atomic_load_n(&c.entered, __ATOMIC_SEQ_CST));
	/* Waits for the acquire in flight, as dlock.h says -- which the
	 * free's cancel ends at once. */
	since = test_now_ms();
	dlock_lock_free(c.lock);
	took = test_now_ms() - since;
	pthread_join(thread, NULL);
	report("handle freed", &c);
	assert_int_equal(c.rc, DLOCK_ECANCELED);
	assert_returned_at_once(&c, since);
	print_message("dlock_lock_free took %" PRId64 " ms\n", took);
	assert_true(took <= 300 + test_slack(300));
	dlock_client_free(client);
	black_hole_close(&h);
}

typedef struct freer {
	dlock_lock *lock;
	int done;
} freer;

static void *free_thread(void *data)
{
	freer *f = data;

	dlock_lock_free(f->lock);
	__atomic_store_n(&f->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void *release_thread(void *data)
{
	call *c = data;

	__atomic_store_n(&c->entered, 1, __ATOMIC_SEQ_CST);
	c->rc = dlock_release(c->lock);
	return NULL;
}

/*
 * dlock_held() and dlock_fencing_token() are not failing calls: on a
 * handle whose free is under way they answer 0 and leave this thread's
 * last error message alone ("valid until this thread's next failing dlock
 * call").  The free is kept under way by a release in flight, which waits
 * on a frozen server (a release cannot be canceled).
 */
static void test_held_on_a_handle_being_freed_keeps_the_last_error_message(void **state)
{
	test_redis *r = test_redis_start(NULL, NULL, false);
	char *uri = test_redis_uri(r, "?command-timeout=3s");
	dlock_client *client;
	dlock_lock *bad = NULL;
	call c = { 0 };
	freer f = { 0 };
	pthread_t releaser, freeing;
	char before[512];

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "cancel-code/held", &c.lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(c.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_acquire(c.lock, 0), DLOCK_OK);
	test_redis_signal(r, SIGSTOP);
	pthread_create(&releaser, NULL, release_thread, &c);
	g_usleep(300 * 1000);
	assert_true(__atomic_load_n(&c.entered, __ATOMIC_SEQ_CST));
	/* The free waits for the release stuck on the frozen server. */
	f.lock = c.lock;
	pthread_create(&freeing, NULL, free_thread, &f);
	g_usleep(300 * 1000);
	assert_false(__atomic_load_n(&f.done, __ATOMIC_SEQ_CST));

	assert_int_equal(dlock_lock_new(client, "a/../b", &bad), DLOCK_EINVAL);
	g_strlcpy(before, dlock_last_error_message(), sizeof(before));
	assert_true(strlen(before) > 0);
	assert_int_equal(dlock_held(c.lock), 0);
	assert_int_equal(dlock_fencing_token(c.lock), 0);
	assert_false(__atomic_load_n(&f.done, __ATOMIC_SEQ_CST));
	print_message("after dlock_held: %s\n", dlock_last_error_message());
	assert_string_equal(dlock_last_error_message(), before);

	pthread_join(releaser, NULL);
	pthread_join(freeing, NULL);
	test_redis_signal(r, SIGCONT);
	dlock_client_free(client);
	g_free(uri);
	test_redis_stop(r);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_acquire_canceled_while_connecting_returns_ecanceled),
		cmocka_unit_test(test_acquire_in_flight_when_its_handle_is_freed_returns_ecanceled),
		cmocka_unit_test(test_held_on_a_handle_being_freed_keeps_the_last_error_message),
	};

	(void)argc;
	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("cancel-code", tests, NULL, NULL));
}
