/* SPDX-License-Identifier: MIT */
/*
 * Name resolution obeys the caller's deadline.  A worker process gets a
 * private mount namespace in which /etc/resolv.conf names a loopback DNS
 * server that never answers (a UDP socket the worker binds and never
 * reads), then acquires on redis:// and zk:// URIs naming a host only that
 * server could resolve.  Each acquire must return within its own deadline,
 * a second caller on the same client must not queue behind the first, and
 * freeing the client must not wait for the resolver.  A ZooKeeper ensemble
 * in which one server's name never resolves is served by the others.
 *
 * The namespace needs root (CI runs the tests as root); without it the
 * test fails, it never skips.
 *
 * A cancel, a free of the handle or of the client must wake an acquire
 * that is waiting for that resolver at once, not when the lookup's time
 * (the connect timeout) runs out.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-util.h"
#include "test-zk.h"

#define NAME "never-answers.example"
#define FIRST_WAIT_MS 1500
#define SECOND_WAIT_MS 200

/* ---- the worker (in its own mount namespace) -------------------------- */

static void die(const char *what)
{
	printf("error %s: %s\n", what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static void write_file(const char *path, const char *text)
{
	GError *error = NULL;

	if (!g_file_set_contents(path, text, -1, &error)) {
		printf("error writing %s: %s\n", path, error->message);
		fflush(stdout);
		exit(1);
	}
}

/* Bind UDP port 53 on some loopback address and never read from it. */
static int silent_dns_server(char *addr, size_t len)
{
	for (int i = 0; i < 50; i++) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(53) };
		int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

		g_snprintf(addr, len, "127.%d.%d.%d", 100 + g_random_int_range(0, 100),
		           g_random_int_range(1, 250), g_random_int_range(1, 250));
		inet_pton(AF_INET, addr, &sa.sin_addr);
		if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		if (fd >= 0)
			close(fd);
	}
	die("binding UDP port 53 on a loopback address");
	return -1;
}

static void private_resolver(void)
{
	char addr[32], *dir, *conf, *nss, *text;

	if (unshare(CLONE_NEWNS) != 0)
		die("unshare(CLONE_NEWNS)");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		die("making / private");
	silent_dns_server(addr, sizeof(addr));
	dir = g_dir_make_tmp("dlock-resolve-XXXXXX", NULL);
	if (!dir)
		die("making a temporary directory");
	conf = g_build_filename(dir, "resolv.conf", NULL);
	nss = g_build_filename(dir, "nsswitch.conf", NULL);
	text = g_strdup_printf("nameserver %s\noptions timeout:5 attempts:3\n", addr);
	write_file(conf, text);
	write_file(nss, "hosts: files dns\n");
	if (mount(conf, "/etc/resolv.conf", NULL, MS_BIND, NULL) != 0)
		die("bind-mounting resolv.conf");
	if (mount(nss, "/etc/nsswitch.conf", NULL, MS_BIND, NULL) != 0)
		die("bind-mounting nsswitch.conf");
	/* The mounts keep the files; the directory can go now. */
	unlink(conf);
	unlink(nss);
	rmdir(dir);
	g_free(text);
	g_free(conf);
	g_free(nss);
	g_free(dir);
}

static int probe_done;

/* A plain getaddrinfo() of the name, which must still be stuck when the
 * worker ends: proof that the resolver really does not answer. */
static void *probe_thread(void *data)
{
	struct addrinfo *res = NULL;

	(void)data;
	if (getaddrinfo(NAME, "80", NULL, &res) == 0)
		freeaddrinfo(res);
	__atomic_store_n(&probe_done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

typedef struct timed_call {
	dlock_lock *lock;
	int64_t wait_ms;
	int rc;
	int64_t elapsed_ms;
} timed_call;

static void *timed_acquire(void *data)
{
	timed_call *c = data;
	int64_t start = test_now_ms();

	c->rc = dlock_acquire(c->lock, c->wait_ms);
	c->elapsed_ms = test_now_ms() - start;
	return NULL;
}

/* One acquire with a generous wait on a URI where only some servers'
 * names resolve. */
static int worker_ensemble(const char *uri)
{
	timed_call call = { 0 };
	dlock_client *client;

	private_resolver();
	if (dlock_client_new(uri, &client) != DLOCK_OK ||
	    dlock_lock_new(client, "resolve/ensemble", &call.lock) != DLOCK_OK) {
		printf("error client %s: %s\n", uri, dlock_last_error_message());
		fflush(stdout);
		return 1;
	}
	call.wait_ms = 20000;
	timed_acquire(&call);
	printf("acquire %d %" PRId64 " %s\n", call.rc, call.elapsed_ms,
	       call.rc ? dlock_last_error_message() : "");
	fflush(stdout);
	if (call.rc == DLOCK_OK)
		dlock_release(call.lock);
	dlock_lock_free(call.lock);
	dlock_client_free(client);
	_exit(0);
}

static int worker_main(const char *uri)
{
	timed_call first = { 0 }, second = { 0 };
	pthread_t probe, thread;
	dlock_client *client;
	int64_t start;

	private_resolver();
	pthread_create(&probe, NULL, probe_thread, NULL);
	pthread_detach(probe);

	if (dlock_client_new(uri, &client) != DLOCK_OK ||
	    dlock_lock_new(client, "resolve/first", &first.lock) != DLOCK_OK ||
	    dlock_lock_new(client, "resolve/second", &second.lock) != DLOCK_OK) {
		printf("error client %s: %s\n", uri, dlock_last_error_message());
		fflush(stdout);
		return 1;
	}
	first.wait_ms = FIRST_WAIT_MS;
	second.wait_ms = SECOND_WAIT_MS;
	pthread_create(&thread, NULL, timed_acquire, &first);
	g_usleep(100 * 1000);
	/* While the first call resolves, a second one on the same client. */
	timed_acquire(&second);
	printf("second %d %" PRId64 " %s\n", second.rc, second.elapsed_ms, dlock_last_error_message());
	fflush(stdout);
	pthread_join(thread, NULL);
	printf("first %d %" PRId64 "\n", first.rc, first.elapsed_ms);
	fflush(stdout);

	start = test_now_ms();
	dlock_lock_free(first.lock);
	dlock_lock_free(second.lock);
	dlock_client_free(client);
	printf("free %" PRId64 " probe %d\n", test_now_ms() - start,
	       __atomic_load_n(&probe_done, __ATOMIC_SEQ_CST));
	fflush(stdout);
	/* The probe is still stuck in getaddrinfo(): do not wait for it. */
	_exit(0);
}

/* How long after the cancel (or free) call the acquire returned. */
typedef struct canceled_call {
	timed_call call;
	int64_t returned_ms;
} canceled_call;

static void *acquire_then_note(void *data)
{
	canceled_call *c = data;

	timed_acquire(&c->call);
	__atomic_store_n(&c->returned_ms, test_now_ms(), __ATOMIC_SEQ_CST);
	return NULL;
}

/*
 * An acquire with a long wait, stuck resolving: interrupted after 300 ms by
 * way (dlock_lock_cancel, dlock_lock_free or dlock_client_free, from this
 * thread).  Prints "<way> <rc> <ms until the acquire returned> <ms the
 * interrupting call took>".
 */
static void interrupt_case(const char *uri, const char *way)
{
	canceled_call c = { 0 };
	dlock_client *client;
	pthread_t thread;
	int64_t start, took;

	if (dlock_client_new(uri, &client) != DLOCK_OK ||
	    dlock_lock_new(client, "resolve/interrupted", &c.call.lock) != DLOCK_OK) {
		printf("error client %s: %s\n", uri, dlock_last_error_message());
		fflush(stdout);
		exit(1);
	}
	c.call.wait_ms = 20000;
	pthread_create(&thread, NULL, acquire_then_note, &c);
	g_usleep(300 * 1000);
	start = test_now_ms();
	if (strcmp(way, "cancel") == 0) {
		dlock_lock_cancel(c.call.lock);
	} else if (strcmp(way, "lockfree") == 0) {
		dlock_lock_free(c.call.lock);
		c.call.lock = NULL;
	} else {
		dlock_client_free(client);
		client = NULL;
	}
	took = test_now_ms() - start;
	pthread_join(thread, NULL);
	printf("%s %d %" PRId64 " %" PRId64 "\n", way, c.call.rc,
	       __atomic_load_n(&c.returned_ms, __ATOMIC_SEQ_CST) - start, took);
	fflush(stdout);
	dlock_lock_free(c.call.lock);
	dlock_client_free(client);
}

static int worker_interrupt(const char *uri)
{
	private_resolver();
	interrupt_case(uri, "cancel");
	interrupt_case(uri, "lockfree");
	interrupt_case(uri, "clientfree");
	/* Lookups abandoned in the C library: do not wait for them. */
	_exit(0);
}

/* ---- the tests -------------------------------------------------------- */

static void read_result(int fd, const char *what, char *line, size_t len)
{
	/* Generous: the code before the fix took 20 s per call. */
	if (!test_read_line(fd, line, len, 90000))
		fail_msg("the worker gave no '%s' line", what);
	if (strncmp(line, "error", 5) == 0)
		fail_msg("the worker could not set up: %s", line);
	if (strncmp(line, what, strlen(what)) != 0)
		fail_msg("expected '%s', the worker said: %s", what, line);
}

static void check_timely(const char *who, int rc, int64_t elapsed_ms, int64_t wait_ms)
{
	print_message("%s acquire (wait %" PRId64 " ms): %s after %" PRId64 " ms\n", who, wait_ms,
	              dlock_strerror(rc), elapsed_ms);
	if (rc != DLOCK_ETIMEDOUT && rc != DLOCK_EUNAVAILABLE)
		fail_msg("%s acquire returned %s, expected a timeout or unavailable", who, dlock_strerror(rc));
	if (elapsed_ms > wait_ms + test_slack(300))
		fail_msg("%s acquire with wait %" PRId64 " ms took %" PRId64 " ms", who, wait_ms, elapsed_ms);
}

static void run_case(const char *uri)
{
	const char *args[] = { uri, NULL };
	char line[1024];
	int fd, rc;
	long long elapsed, free_ms;
	int probe;
	pid_t pid;

	if (geteuid() != 0)
		fail_msg("this test needs root to give a worker a private mount namespace with a "
		         "resolver that never answers (CI runs it as root); run it as root");
	pid = test_spawn_worker(args, &fd);

	read_result(fd, "second", line, sizeof(line));
	assert_int_equal(sscanf(line, "second %d %lld", &rc, &elapsed), 2);
	print_message("  %s\n", line);
	check_timely("second (concurrent)", rc, elapsed, SECOND_WAIT_MS);

	read_result(fd, "first", line, sizeof(line));
	assert_int_equal(sscanf(line, "first %d %lld", &rc, &elapsed), 2);
	check_timely("first", rc, elapsed, FIRST_WAIT_MS);

	read_result(fd, "free", line, sizeof(line));
	assert_int_equal(sscanf(line, "free %lld probe %d", &free_ms, &probe), 2);
	print_message("client free took %lld ms\n", free_ms);
	assert_int_equal(probe, 0); /* the resolver really never answered */
	assert_true(free_ms < test_slack(1000));
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd);
}

static void need_root(void)
{
	if (geteuid() != 0)
		fail_msg("this test needs root to give a worker a private mount namespace with a "
		         "resolver that never answers (CI runs it as root); run it as root");
}

/* The connect timeout (4 s) bounds the lookup; the interrupt comes
 * 300 ms into it and must end it at once. */
static void run_interrupt_case(const char *uri)
{
	const char *ways[] = { "cancel", "lockfree", "clientfree" };
	const char *args[] = { "interrupt", uri, NULL };
	char line[1024];
	long long returned, took;
	int fd, rc;
	pid_t pid;

	need_root();
	pid = test_spawn_worker(args, &fd);
	for (int i = 0; i < 3; i++) {
		char way[32];

		read_result(fd, ways[i], line, sizeof(line));
		print_message("  %s\n", line);
		assert_int_equal(sscanf(line, "%31s %d %lld %lld", way, &rc, &returned, &took), 4);
		if (rc != DLOCK_ECANCELED)
			fail_msg("%s: the acquire returned %s, expected DLOCK_ECANCELED", way, dlock_strerror(rc));
		if (returned > test_slack(300))
			fail_msg("%s: the acquire returned %lld ms after it, not at once", way, returned);
		if (took > test_slack(300))
			fail_msg("%s: the call took %lld ms", way, took);
	}
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd);
}

static void test_redis_cancel_or_free_wakes_an_acquire_resolving_at_once(void **state)
{
	(void)state;
	run_interrupt_case("redis://" NAME ":6379?connect-timeout=4s");
}

static void test_zk_cancel_or_free_wakes_an_acquire_resolving_at_once(void **state)
{
	(void)state;
	run_interrupt_case("zk://" NAME ":2181?connect-timeout=4s");
}

static void test_redis_acquire_obeys_deadline_when_resolver_never_answers(void **state)
{
	(void)state;
	run_case("redis://" NAME ":6379?connect-timeout=30s");
}

static void test_zk_acquire_obeys_deadline_when_resolver_never_answers(void **state)
{
	(void)state;
	run_case("zk://" NAME ":2181?connect-timeout=30s");
}

static void test_zk_ensemble_with_one_unresolvable_name_is_served_by_the_others(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 0);
	char *hosts = test_zk_hosts(zk);
	char *uri = g_strdup_printf("zk://" NAME ":2181,%s?connect-timeout=30s", hosts);
	const char *args[] = { "ensemble", uri, NULL };
	char line[1024];
	long long elapsed;
	int fd, rc;
	pid_t pid;

	(void)state;
	if (geteuid() != 0)
		fail_msg("this test needs root to give a worker a private mount namespace with a "
		         "resolver that never answers (CI runs it as root); run it as root");
	pid = test_spawn_worker(args, &fd);
	read_result(fd, "acquire", line, sizeof(line));
	print_message("  %s\n", line);
	assert_int_equal(sscanf(line, "acquire %d %lld", &rc, &elapsed), 2);
	assert_int_equal(rc, DLOCK_OK);
	/* 100 ms of grace for the stuck name, then a session on the rest. */
	assert_true(elapsed < 100 + test_slack(2000));
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd);
	g_free(uri);
	g_free(hosts);
	test_zk_stop(zk);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redis_acquire_obeys_deadline_when_resolver_never_answers),
		cmocka_unit_test(test_zk_acquire_obeys_deadline_when_resolver_never_answers),
		cmocka_unit_test(test_zk_ensemble_with_one_unresolvable_name_is_served_by_the_others),
		cmocka_unit_test(test_redis_cancel_or_free_wakes_an_acquire_resolving_at_once),
		cmocka_unit_test(test_zk_cancel_or_free_wakes_an_acquire_resolving_at_once),
	};

	test_init(argv[0]);
	if (argc >= 4 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "ensemble") == 0)
		return worker_ensemble(argv[3]);
	if (argc >= 4 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "interrupt") == 0)
		return worker_interrupt(argv[3]);
	if (argc >= 3 && strcmp(argv[1], "--worker") == 0)
		return worker_main(argv[2]);
	return test_zk_finish(cmocka_run_group_tests_name("resolve-deadline", tests, NULL, NULL));
}
