/* SPDX-License-Identifier: MIT */
/*
 * ZooKeeper servers whose names resolve only after a session opened.  A
 * worker process gets a private mount namespace whose /etc/hosts it
 * rewrites (nsswitch.conf "hosts: files", no DNS), and uses a zk:// URI
 * naming servers it cannot resolve yet; once their names resolve, the
 * session must use them -- when it has no server yet, and when the one it
 * had dies while it holds a lock: names are looked up again, not left
 * out for the session's lifetime.
 *
 * The namespace needs root (CI runs the tests as root); without it the
 * test fails, it never skips.
 */
#include <inttypes.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-util.h"
#include "test-zk.h"

/* ---- the worker (in its own mount namespace) ------------------------------ */

static char *hosts_file;

static void die(const char *what)
{
	printf("error %s\n", what);
	fflush(stdout);
	exit(1);
}

/* Rewrite the hosts file in place: the bind mount keeps its inode. */
static void write_hosts(const char *text)
{
	FILE *f = fopen(hosts_file, "w");

	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		die("writing the hosts file");
}

static void private_hosts(void)
{
	char *dir, *nss;
	GError *error = NULL;

	if (unshare(CLONE_NEWNS) != 0)
		die("unshare(CLONE_NEWNS)");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		die("making / private");
	dir = g_dir_make_tmp("dlock-late-names-XXXXXX", NULL);
	if (!dir)
		die("making a temporary directory");
	hosts_file = g_build_filename(dir, "hosts", NULL);
	nss = g_build_filename(dir, "nsswitch.conf", NULL);
	if (!g_file_set_contents(nss, "hosts: files\n", -1, &error))
		die("writing nsswitch.conf");
	write_hosts("127.0.0.1 localhost\n");
	if (mount(nss, "/etc/nsswitch.conf", NULL, MS_BIND, NULL) != 0)
		die("bind-mounting nsswitch.conf");
	if (mount(hosts_file, "/etc/hosts", NULL, MS_BIND, NULL) != 0)
		die("bind-mounting hosts");
	g_free(nss);
	g_free(dir);
}

static void wait_for_line(const char *word)
{
	char line[64];

	if (!fgets(line, sizeof(line), stdin) || strncmp(line, word, strlen(word)) != 0)
		die("no go from the test");
}

static void say(const char *what, int rc, int64_t ms)
{
	printf("%s %d %" PRId64 " %s\n", what, rc, ms, rc ? dlock_last_error_message() : "");
	fflush(stdout);
}

static int64_t timed_acquire(dlock_lock *lock, int64_t wait_ms, int *ret_rc)
{
	int64_t t0 = test_now_ms();

	*ret_rc = dlock_acquire(lock, wait_ms);
	return test_now_ms() - t0;
}

/*
 * "names URI NAMES": acquire once before the names resolve ("before RC
 * MS"), then on "resolve" from stdin add NAMES (space-separated, all for
 * 127.0.0.1) to the hosts file and acquire again, trying again while
 * unavailable for up to 30 s ("after RC MS").
 */
static int worker_names(const char *uri, const char *names)
{
	dlock_client *client;
	dlock_lock *lock;
	char *text;
	int64_t ms;
	int rc;

	private_hosts();
	if (dlock_client_new(uri, &client) != DLOCK_OK || dlock_lock_new(client, "late-names", &lock) != DLOCK_OK)
		die("building the client");
	ms = timed_acquire(lock, 3000, &rc);
	say("before", rc, ms);
	if (rc == DLOCK_OK)
		dlock_release(lock);
	wait_for_line("resolve");
	text = g_strdup_printf("127.0.0.1 localhost\n127.0.0.1 %s\n", names);
	write_hosts(text);
	g_free(text);
	/* As a program would: again while no server is reachable (each
	 * attempt bounded by the connect timeout), for up to 30 s. */
	ms = 0;
	do {
		ms += timed_acquire(lock, 30000 - ms, &rc);
	} while (rc == DLOCK_EUNAVAILABLE && ms < 30000);
	say("after", rc, ms);
	if (rc == DLOCK_OK)
		dlock_release(lock);
	dlock_lock_free(lock);
	dlock_client_free(client);
	return 0;
}

typedef struct states {
	int count[4]; /* atomic, by dlock_state */
} states;

static void count_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	states *st = user_data;

	(void)lock;
	if (state >= 0 && state < 4)
		g_atomic_int_inc(&st->count[state]);
}

static bool settled(void *arg)
{
	states *st = arg;

	return g_atomic_int_get(&st->count[DLOCK_STATE_RECONNECTED]) > 0 ||
	       g_atomic_int_get(&st->count[DLOCK_STATE_LOST]) > 0;
}

/*
 * "hold URI NAMES": hold a lock (print "held"); on "resolve" from stdin
 * add NAMES to the hosts file ("resolved"); on "report" wait up to 20 s
 * for RECONNECTED or LOST and print "states S R L held=H".
 */
static int worker_hold(const char *uri, const char *names)
{
	dlock_client *client;
	dlock_lock *lock;
	states st = { { 0 } };
	char *text;

	private_hosts();
	if (dlock_client_new(uri, &client) != DLOCK_OK || dlock_lock_new(client, "late-names-held", &lock) != DLOCK_OK ||
	    dlock_lock_set_state_callback(lock, count_state, &st) != DLOCK_OK ||
	    dlock_acquire(lock, 20000) != DLOCK_OK)
		die("holding the lock");
	printf("held\n");
	fflush(stdout);
	wait_for_line("resolve");
	text = g_strdup_printf("127.0.0.1 localhost\n127.0.0.1 %s\n", names);
	write_hosts(text);
	g_free(text);
	printf("resolved\n");
	fflush(stdout);
	wait_for_line("report");
	test_wait_until(settled, &st, 20000);
	printf("states %d %d %d held=%d\n", g_atomic_int_get(&st.count[DLOCK_STATE_SUSPENDED]),
	       g_atomic_int_get(&st.count[DLOCK_STATE_RECONNECTED]),
	       g_atomic_int_get(&st.count[DLOCK_STATE_LOST]), dlock_held(lock));
	fflush(stdout);
	dlock_release(lock);
	dlock_lock_free(lock);
	dlock_client_free(client);
	return 0;
}

/* ---- the tests -------------------------------------------------------------- */

static void read_result(pid_t pid, int fd, const char *what, char *line, size_t len)
{
	if (!test_read_line(fd, line, len, 60000)) {
		int status = 0;

		/* How the worker ended, if it did (a worker still running when
		 * the wait ran out is killed). */
		if (waitpid(pid, &status, WNOHANG) != pid) {
			kill(pid, SIGKILL);
			fail_msg("the worker gave no '%s' line in time", what);
		}
		fail_msg("the worker gave no '%s' line: it %s %d", what,
		         WIFSIGNALED(status) ? "was killed by signal" : "exited with status",
		         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	}
	if (strncmp(line, "error", 5) == 0)
		fail_msg("the worker could not set up: %s", line);
	if (strncmp(line, what, strlen(what)) != 0)
		fail_msg("expected '%s', the worker said: %s", what, line);
}

/*
 * The server that runs is named by a name that does not resolve when the
 * session opens; the only other one is an address where nothing listens.
 * The first acquire finds no server (the session keeps connecting to the
 * closed port); once the name resolves, the same session finds the live
 * server and the next acquire is granted.
 */
static void test_server_whose_name_resolves_late_is_used(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	int closed_fd, closed = test_closed_port(&closed_fd);
	char *uri = g_strdup_printf("zk://127.0.0.1:%d,zk-late.dlock.test:%d?connect-timeout=1s&session-timeout=4s",
	                            closed, zk->servers[0].port);
	const char *args[] = { "names", uri, "zk-late.dlock.test", NULL };
	char line[1024];
	int fd_in, fd_out, rc;
	long long ms;
	pid_t pid;

	if (geteuid() != 0)
		fail_msg("this test needs root to give a worker a private mount namespace with hosts "
		         "files of its own (CI runs it as root); run it as root");
	pid = test_spawn_worker_io(args, &fd_in, &fd_out);
	read_result(pid, fd_out, "before", line, sizeof(line));
	print_message("worker: %s\n", line);
	assert_int_equal(sscanf(line, "before %d %lld", &rc, &ms), 2);
	assert_int_equal(rc, DLOCK_EUNAVAILABLE);

	assert_true(test_write_str(fd_in, "resolve\n"));
	read_result(pid, fd_out, "after", line, sizeof(line));
	print_message("worker: %s\n", line);
	assert_int_equal(sscanf(line, "after %d %lld", &rc, &ms), 2);
	assert_int_equal(rc, DLOCK_OK);
	close(fd_in);
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd_out);
	close(closed_fd);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_zk_stop(zk);
	g_free(uri);
}

/*
 * A session of a 3-server ensemble, two of whose names do not resolve
 * when it opens, holds a lock through the one server it has.  The names
 * resolve later; then that server dies.  The session must move to the
 * others and keep its hold (SUSPENDED, then RECONNECTED), not lose it
 * for want of a server it can name.
 */
static void test_session_moves_to_servers_resolved_after_it_opened(void **state)
{
	test_zk *zk = test_zk_start(3, 200, 30000);
	char *uri = g_strdup_printf("zk://127.0.0.1:%d,zk-b.dlock.test:%d,zk-c.dlock.test:%d?session-timeout=6s",
	                            zk->servers[0].port, zk->servers[1].port, zk->servers[2].port);
	const char *args[] = { "hold", uri, "zk-b.dlock.test zk-c.dlock.test", NULL };
	char line[256];
	int fd_in, fd_out, suspended, reconnected, lost, held;
	pid_t pid;

	if (geteuid() != 0)
		fail_msg("this test needs root to give a worker a private mount namespace with hosts "
		         "files of its own (CI runs it as root); run it as root");
	pid = test_spawn_worker_io(args, &fd_in, &fd_out);
	read_result(pid, fd_out, "held", line, sizeof(line));
	assert_true(test_write_str(fd_in, "resolve\n"));
	read_result(pid, fd_out, "resolved", line, sizeof(line));
	/* The only server the session has goes. */
	test_zk_signal(zk, 0, SIGKILL);
	assert_true(test_write_str(fd_in, "report\n"));
	read_result(pid, fd_out, "states", line, sizeof(line));
	print_message("worker: %s\n", line);
	assert_int_equal(sscanf(line, "states %d %d %d held=%d", &suspended, &reconnected, &lost, &held), 4);
	assert_int_equal(lost, 0);
	assert_int_equal(reconnected, 1);
	assert_int_equal(held, 1);
	close(fd_in);
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd_out);
	assert_int_equal(test_zk_leftover_nodes(zk, "/dlock"), 0);
	test_zk_stop(zk);
	g_free(uri);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_server_whose_name_resolves_late_is_used),
		cmocka_unit_test(test_session_moves_to_servers_resolved_after_it_opened),
	};

	test_init(argv[0]);
	if (argc >= 5 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "names") == 0)
		return worker_names(argv[3], argv[4]);
	if (argc >= 5 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "hold") == 0)
		return worker_hold(argv[3], argv[4]);
	return test_zk_finish(cmocka_run_group_tests_name("zk-resolve", tests, NULL, NULL));
}
