/* SPDX-License-Identifier: MIT */
/*
 * fork() while threads take and release file locks.  A child of a
 * multithreaded process runs only the forking thread, and until it execs
 * it may call only async-signal-safe functions: the backend's fork
 * handler, which closes the child's copies of lock file descriptors, must
 * never wait for a lock or allocate.  Children that exit at once, exec at
 * once or linger must neither hang nor keep a lock their parent took.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-util.h"

#define LOCK_THREADS 4
#define RESOURCES 2          /* two threads contend for each: waits too */
#define HANG_MS 5000         /* a child alive this long after a quick exit hangs */
#define MAX_CHILDREN 256

static char *dir;
static char *uri;

/* ---- the worker: lock threads and a forking thread ------------------- */

typedef struct storm {
	const char *uri;
	int linger_ms;            /* how long a lingering child lives */
	atomic_bool stop;
	atomic_long rounds;
	atomic_long failures;
} storm;

static void *lock_thread(void *data)
{
	storm *s = data;
	static atomic_int next;
	char name[32];
	dlock_client *client;
	dlock_lock *lock;

	snprintf(name, sizeof(name), "fork/r%d", atomic_fetch_add(&next, 1) % RESOURCES);
	if (dlock_client_new(s->uri, &client) != DLOCK_OK || dlock_lock_new(client, name, &lock) != DLOCK_OK) {
		atomic_fetch_add(&s->failures, 1);
		return NULL;
	}
	while (!atomic_load(&s->stop)) {
		int rc = dlock_acquire(lock, 2000);

		if (rc != DLOCK_OK || dlock_release(lock) != DLOCK_OK) {
			printf("failure %s %s\n", dlock_code_name(rc), dlock_last_error_message());
			fflush(stdout);
			atomic_fetch_add(&s->failures, 1);
		}
		atomic_fetch_add(&s->rounds, 1);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	return NULL;
}

/* In the child: async-signal-safe calls only, then gone. */
static void child_body(int how, int linger_ms)
{
	struct timespec ts = { linger_ms / 1000, (long)(linger_ms % 1000) * 1000000 };

	switch (how) {
	case 0:
		_exit(0);
	case 1:
		execl("/bin/true", "true", (char *)NULL);
		_exit(127);
	default:
		/* Without exec its descriptor copies live on: only the
		 * fork handler closes them. */
		nanosleep(&ts, NULL);
		_exit(0);
	}
}

typedef struct child {
	pid_t pid;
	int64_t born_ms;
	int how;
} child;

/* Reap what has ended; count a child that outlived its bound as hung
 * (and kill it).  Returns how many are still running. */
static int reap(child *kids, int n, int linger_ms, long *hangs)
{
	int live = 0;

	for (int i = 0; i < n; i++) {
		int64_t bound = HANG_MS + (kids[i].how == 2 ? linger_ms : 0);
		int st;

		if (waitpid(kids[i].pid, &st, WNOHANG) == kids[i].pid)
			continue;
		if (test_now_ms() - kids[i].born_ms > test_slack(bound)) {
			printf("hang pid %d (%s)\n", (int)kids[i].pid,
			       kids[i].how == 0 ? "exit" : kids[i].how == 1 ? "exec" : "linger");
			fflush(stdout);
			(*hangs)++;
			kill(kids[i].pid, SIGKILL);
			waitpid(kids[i].pid, &st, 0);
			continue;
		}
		kids[live++] = kids[i];
	}
	return live;
}

/*
 * forkstorm URI MS LINGER_MS: lock threads on RESOURCES names and a thread
 * that forks without pause for MS ms (0: until killed), its children
 * exiting, exec'ing or lingering LINGER_MS in turn.  Prints "ready" once
 * forks and locks overlap, then "forks F rounds R hangs H failures X".
 */
static int worker_storm(const char *worker_uri, int ms, int linger_ms)
{
	storm s = { .uri = worker_uri, .linger_ms = linger_ms };
	pthread_t threads[LOCK_THREADS];
	child kids[MAX_CHILDREN];
	long forks = 0, hangs = 0;
	int64_t end = ms > 0 ? test_now_ms() + ms : INT64_MAX;
	int n = 0;

	setpgid(0, 0); /* the test finds lingering children by this group */
	for (int i = 0; i < LOCK_THREADS; i++)
		pthread_create(&threads[i], NULL, lock_thread, &s);
	while (test_now_ms() < end) {
		pid_t pid;
		int how = (int)(forks % 3);

		n = reap(kids, n, linger_ms, &hangs);
		if (n == MAX_CHILDREN) {
			usleep(1000);
			continue;
		}
		pid = fork();
		if (pid == 0)
			child_body(how, linger_ms);
		if (pid < 0) {
			usleep(1000);
			continue;
		}
		kids[n++] = (child){ pid, test_now_ms(), how };
		if (++forks == 50) {
			printf("ready\n");
			fflush(stdout);
		}
	}
	atomic_store(&s.stop, true);
	for (int i = 0; i < LOCK_THREADS; i++)
		pthread_join(threads[i], NULL);
	while (n > 0) {
		n = reap(kids, n, linger_ms, &hangs);
		usleep(1000);
	}
	printf("forks %ld rounds %ld hangs %ld failures %ld\n", forks, atomic_load(&s.rounds), hangs,
	       atomic_load(&s.failures));
	fflush(stdout);
	return hangs == 0 && atomic_load(&s.failures) == 0 ? 0 : 1;
}

static int worker_main(int argc, char **argv)
{
	if (argc == 6 && strcmp(argv[2], "forkstorm") == 0)
		return worker_storm(argv[3], atoi(argv[4]), atoi(argv[5]));
	fprintf(stderr, "unknown worker\n");
	return 2;
}

/* ---- the tests --------------------------------------------------------- */

/* The worker's last line: forks, lock rounds, hung children, failures. */
static void read_summary(int fd, long *forks, long *rounds, long *hangs, long *failures)
{
	char line[256];

	for (;;) {
		assert_true(test_read_line(fd, line, sizeof(line), test_slack(30000)));
		print_message("worker: %s\n", line);
		if (sscanf(line, "forks %ld rounds %ld hangs %ld failures %ld", forks, rounds, hangs,
		           failures) == 4)
			return;
	}
}

static void test_forks_during_lock_traffic_never_hang(void **state)
{
	const char *args[] = { "forkstorm", uri, "3000", "20", NULL };
	long forks = 0, rounds = 0, hangs = -1, failures = -1;
	int fd;
	pid_t pid = test_spawn_worker(args, &fd);

	(void)state;
	read_summary(fd, &forks, &rounds, &hangs, &failures);
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd);
	assert_int_equal(hangs, 0);
	assert_int_equal(failures, 0);
	/* Enough of both to overlap many times (thousands, natively). */
	assert_true(forks >= 50);
	assert_true(rounds >= 50);
}

static void test_children_forked_amid_lock_traffic_keep_no_lock_when_the_parent_dies(void **state)
{
	/* Children linger well past the wait below, at any speed. */
	char *linger = g_strdup_printf("%d", 4000 * test_slack_factor());
	const char *args[] = { "forkstorm", uri, "0", linger, NULL };
	dlock_client *client;
	dlock_lock *locks[RESOURCES];
	char line[64];
	int fd;
	pid_t pid = test_spawn_worker(args, &fd);

	(void)state;
	assert_true(test_read_line(fd, line, sizeof(line), test_slack(20000)));
	assert_string_equal(line, "ready");
	usleep(500 * 1000); /* more forks while locks come and go */
	kill(pid, SIGKILL);
	test_wait_worker(pid);
	close(fd);
	/* Lingering children of the dead worker still live (its group). */
	assert_int_equal(kill(-pid, 0), 0);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	for (int i = 0; i < RESOURCES; i++) {
		char name[32];
		int64_t t0 = test_now_ms();

		snprintf(name, sizeof(name), "fork/r%d", i);
		assert_int_equal(dlock_lock_new(client, name, &locks[i]), DLOCK_OK);
		/* The kernel dropped the dead worker's locks at once; a child's
		 * copy of a locked description would keep one while it lingers. */
		if (dlock_acquire(locks[i], test_slack(1000)) != DLOCK_OK)
			fail_msg("%s is still held %" PRId64 " ms after its holder died, while the holder's "
			         "children live", name, test_now_ms() - t0);
	}
	assert_int_equal(kill(-pid, 0), 0); /* still alive: the check meant something */
	kill(-pid, SIGKILL);
	g_free(linger);
	for (int i = 0; i < RESOURCES; i++) {
		assert_int_equal(dlock_release(locks[i]), DLOCK_OK);
		dlock_lock_free(locks[i]);
	}
	dlock_client_free(client);
}

/* ---- calls in a child on the parent's handles ---------------------------- */

#define CHILD_FORKS 300

typedef struct busy {
	dlock_lock *lock;         /* owned by the handle: shared by the threads */
	dlock_election *election;
	atomic_bool stop;
} busy;

/* Calls on the shared handles without pause, so that their mutexes are
 * often held by some thread when another one forks. */
static void *busy_thread(void *data)
{
	busy *b = data;

	while (!atomic_load(&b->stop)) {
		if (dlock_acquire(b->lock, 0) == DLOCK_OK)
			dlock_release(b->lock);
		if (dlock_election_campaign(b->election, 0) == DLOCK_OK)
			dlock_election_resign(b->election);
		dlock_election_set_callback(b->election, NULL, NULL);
	}
	return NULL;
}

static void noop_event(dlock_election *e, dlock_election_event event, const char *id, void *data)
{
	(void)e;
	(void)event;
	(void)id;
	(void)data;
}

/* In the child: each call on the parent's objects is refused; write 'y'
 * to fd if all were, 'n' if not (the exit status is the tool's under
 * valgrind, which counts what the parent's threads owned as the child's
 * leaks).  A call that waits for a mutex some thread of the parent held
 * at the fork never returns: the alarm ends the child. */
static void child_calls(busy *b, int fd)
{
	dlock_info *info;
	bool refused;

	alarm((unsigned)test_slack_factor() * 2);
	refused = dlock_acquire(b->lock, 0) == DLOCK_ECANCELED &&
	          dlock_release(b->lock) == DLOCK_ECANCELED &&
	          dlock_lock_query(b->lock, &info) == DLOCK_ECANCELED &&
	          dlock_election_campaign(b->election, 0) == DLOCK_ECANCELED &&
	          dlock_election_resign(b->election) == DLOCK_ECANCELED &&
	          dlock_election_set_callback(b->election, noop_event, NULL) == DLOCK_ECANCELED;
	if (write(fd, refused ? "y" : "n", 1) != 1)
		_exit(4);
	_exit(0);
}

/*
 * A child forked while other threads make calls on the same handles and
 * election: its own calls on them fail with DLOCK_ECANCELED (a child
 * touches nothing of the parent's), and they return -- none waits for a
 * mutex that a thread of the parent held at the fork and that no thread
 * of the child will ever let go.
 */
static void test_calls_in_a_child_forked_amid_calls_are_refused_at_once(void **state)
{
	busy b = { 0 };
	pthread_t threads[LOCK_THREADS];
	dlock_client *client;
	int hung = 0, answered_wrong = 0, children = test_under_valgrind() ? 60 : CHILD_FORKS;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "fork/calls", &b.lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(b.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "fork/elect", "p", &b.election), DLOCK_OK);
	for (int i = 0; i < LOCK_THREADS; i++)
		assert_int_equal(pthread_create(&threads[i], NULL, busy_thread, &b), 0);
	/* Under valgrind, whose every child starts slowly, fewer: it checks
	 * their memory, the plain and sanitizer passes the race. */
	for (int i = 0; i < children; i++) {
		int fds[2], st;
		char answer = 0;
		pid_t pid;

		assert_int_equal(pipe(fds), 0);
		pid = fork();
		if (pid == 0)
			child_calls(&b, fds[1]);
		assert_true(pid > 0);
		close(fds[1]);
		assert_int_equal(waitpid(pid, &st, 0), pid);
		if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
			hung++;
		else if (read(fds[0], &answer, 1) != 1 || answer != 'y')
			answered_wrong++;
		close(fds[0]);
	}
	atomic_store(&b.stop, true);
	for (int i = 0; i < LOCK_THREADS; i++)
		pthread_join(threads[i], NULL);
	print_message("%d children: %d hung in a call, %d got another answer than DLOCK_ECANCELED\n",
	              children, hung, answered_wrong);
	assert_int_equal(hung, 0);
	assert_int_equal(answered_wrong, 0);
	dlock_election_free(b.election);
	dlock_lock_free(b.lock);
	dlock_client_free(client);
}

static int setup(void **state)
{
	(void)state;
	test_file_dir_make("dlock-file-fork", &dir, &uri);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	test_file_dir_remove(dir);
	g_free(dir);
	g_free(uri);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forks_during_lock_traffic_never_hang),
		cmocka_unit_test(test_children_forked_amid_lock_traffic_keep_no_lock_when_the_parent_dies),
		cmocka_unit_test(test_calls_in_a_child_forked_amid_calls_are_refused_at_once),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return worker_main(argc, argv);
	return cmocka_run_group_tests_name("file-fork", tests, setup, teardown);
}
