/* SPDX-License-Identifier: MIT */
/*
 * ZooKeeper servers for the integration tests: start, stop, signal and
 * restart them, and ask them four-letter words.  See test-zk-server.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "test-zk-server.h"
#include "test-zk-inspect.h"

/* Debian's layout: the server jar (its manifest names the rest), and
 * log4j through slf4j, configured from /etc/zookeeper/conf. */
#define CLASSPATH                                                                           \
	"/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:" \
	"/usr/share/java/log4j-1.2.jar"

/* Bounds: a server answers within half a second and an ensemble elects a
 * leader within two, so these only matter when something is wrong. */
#define START_TIMEOUT_MS 30000
#define STOP_TIMEOUT_MS 5000

/* Log tails of stopped servers, printed by test_zk_finish() on failure:
 * the directories are gone by then. */

/* The JVM to run the servers with. */
static char *java_binary(void)
{
	const char *env = getenv("DLOCK_TEST_JAVA");
	char *found;

	if (env && *env) {
		if (g_file_test(env, G_FILE_TEST_IS_EXECUTABLE))
			return g_strdup(env);
		fail_msg("cannot start ZooKeeper: DLOCK_TEST_JAVA does not name an executable");
	}
	found = g_find_program_in_path("java");
	if (found)
		return found;
	if (g_file_test("/usr/bin/java", G_FILE_TEST_IS_EXECUTABLE))
		return g_strdup("/usr/bin/java");
	fail_msg("cannot start ZooKeeper: java is neither in PATH nor /usr/bin (install zookeeper or "
	         "set DLOCK_TEST_JAVA)");
	return NULL;
}

static test_zk_server *server(test_zk *z, int i)
{
	assert_true(i >= 0 && i < z->count);
	return &z->servers[i];
}

static char *server_file(const test_zk_server *s, const char *name)
{
	return g_build_filename(s->dir, name, NULL);
}

/* The end of the server's log, or NULL. */
static char *log_tail(const test_zk_server *s)
{
	char *path = server_file(s, "zk.log");
	char *tail = test_log_tail(path, s->port);

	g_free(path);
	return tail;
}

static void save_log(const test_zk_server *s)
{
	test_logs_keep(log_tail(s));
}

/* Write server i's zoo.cfg, and create its data directory (with myid in an
 * ensemble) if it is missing. */
static void write_config(test_zk *z, int i)
{
	test_zk_server *s = server(z, i);
	char *data = server_file(s, "data");
	char *path = server_file(s, "zoo.cfg");
	GString *cfg = g_string_new(NULL);

	assert_int_equal(g_mkdir_with_parents(data, 0700), 0);
	g_string_append_printf(cfg,
	                       "tickTime=%d\n"
	                       "dataDir=%s\n"
	                       "clientPort=%d\n"
	                       "clientPortAddress=127.0.0.1\n"
	                       "admin.enableServer=false\n"
	                       "4lw.commands.whitelist=*\n"
	                       "maxClientCnxns=0\n",
	                       z->tick_ms, data, s->port);
	if (z->max_session_ms > 0)
		g_string_append_printf(cfg, "minSessionTimeout=%d\nmaxSessionTimeout=%d\n", 2 * z->tick_ms,
		                       z->max_session_ms);
	if (z->count > 1) {
		char *myid = g_build_filename(data, "myid", NULL);
		char *id = g_strdup_printf("%d\n", i + 1);

		g_string_append(cfg, "initLimit=10\nsyncLimit=5\n");
		for (int k = 0; k < z->count; k++)
			g_string_append_printf(cfg, "server.%d=127.0.0.1:%d:%d\n", k + 1, z->servers[k].peer_port,
			                       z->servers[k].election_port);
		assert_true(g_file_set_contents(myid, id, -1, NULL));
		g_free(myid);
		g_free(id);
	}
	assert_true(g_file_set_contents(path, cfg->str, -1, NULL));
	g_string_free(cfg, TRUE);
	g_free(path);
	g_free(data);
}

/* Start server i's JVM; its output goes to zk.log in its directory. */
static void launch(test_zk *z, int i)
{
	test_zk_server *s = server(z, i);
	char *java = java_binary();
	char *cfg = server_file(s, "zoo.cfg");
	char *log = server_file(s, "zk.log");
	char *log_dir = g_strdup_printf("-Dzookeeper.log.dir=%s", s->dir);
	/* The configuration in /etc/zookeeper/conf names no appender unless
	 * zookeeper.root.logger says which: without it the log is empty. */
	const char *argv[] = { java, "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC",
	                       "-Dznode.container.checkIntervalMs=500", log_dir,
	                       "-Dzookeeper.root.logger=INFO,CONSOLE", "-cp", CLASSPATH,
	                       "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg, NULL };
	pid_t parent = getpid();
	unsigned int max_fd = 1024;
	struct rlimit lim;
	int fd, devnull;

	if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
		max_fd = lim.rlim_cur < 65536 ? (unsigned int)lim.rlim_cur : 65536;
	/* Opened before fork(): the child of a multithreaded process may
	 * only make async-signal-safe calls before exec. */
	fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_true(devnull >= 0);
	s->pid = fork();
	assert_true(s->pid >= 0);
	if (s->pid == 0) {
		sigset_t none;

		/* The server dies with the test, whatever kills the test. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* The parent may have died before prctl() took effect. */
		if (getppid() != parent)
			_exit(126);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		dup2(devnull, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		/* Nothing else of the test's goes to the server: the ZooKeeper
		 * C client opens its sockets and pipe without close-on-exec,
		 * and a connection the JVM inherited would stay open after
		 * the test closed it. */
		if (close_range(3, UINT_MAX, 0) != 0)
			for (unsigned int k = 3; k < max_fd; k++)
				close((int)k);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(devnull);
	close(fd);
	g_free(java);
	g_free(cfg);
	g_free(log);
	g_free(log_dir);
}

/* Whether server i has exited (then reaped: pid 0) or was not running. */
static bool gone(test_zk *z, int i)
{
	test_zk_server *s = server(z, i);
	int status;

	if (s->pid > 0 && waitpid(s->pid, &status, WNOHANG) == s->pid)
		s->pid = 0;
	return s->pid <= 0;
}

/* Send sig to server only (or every server if only is -1), after SIGCONT
 * (a stopped JVM acts on nothing but SIGKILL), and reap it: SIGKILL once
 * STOP_TIMEOUT_MS have passed. */
static void kill_servers(test_zk *z, int only, int sig)
{
	int64_t until = test_now_ms() + STOP_TIMEOUT_MS;
	bool waiting = true;

	for (int i = 0; i < z->count; i++) {
		if ((only < 0 || i == only) && z->servers[i].pid > 0) {
			kill(z->servers[i].pid, SIGCONT);
			kill(z->servers[i].pid, sig);
		}
	}
	while (waiting && test_now_ms() < until) {
		waiting = false;
		for (int i = 0; i < z->count; i++)
			if ((only < 0 || i == only) && !gone(z, i))
				waiting = true;
		if (waiting)
			g_usleep(10000);
	}
	for (int i = 0; i < z->count; i++) {
		test_zk_server *s = &z->servers[i];
		int status;

		if ((only < 0 || i == only) && s->pid > 0) {
			kill(s->pid, SIGKILL);
			waitpid(s->pid, &status, 0);
			s->pid = 0;
		}
	}
}

/* ---- four-letter words ---- */

/* Wait until fd is ready for events (or has an error to report), at
 * most until the deadline. */
static bool wait_fd(int fd, short events, int64_t until)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		int64_t left = until - test_now_ms();
		int n;

		if (left <= 0)
			return false;
		n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
		if (n > 0)
			return true;
		if (n < 0 && errno != EINTR)
			return false;
	}
}

char *test_zk_4lw(test_zk *z, int i, const char *word, int64_t timeout_ms)
{
	test_zk_server *s = server(z, i);
	int64_t until = test_now_ms() + timeout_ms;
	struct sockaddr_in addr = { 0 };
	size_t len = strlen(word), sent = 0;
	GString *out = g_string_new(NULL);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)s->port);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* Non-blocking throughout: a frozen JVM still completes connections
	 * (the kernel does) but never answers. */
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		int err = 0;
		socklen_t err_len = sizeof(err);

		if (errno != EINPROGRESS || !wait_fd(fd, POLLOUT, until) ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0 || err != 0)
			goto fail;
	}
	while (sent < len) {
		ssize_t n = send(fd, word + sent, len - sent, MSG_NOSIGNAL);

		if (n > 0)
			sent += (size_t)n;
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && errno == EAGAIN && wait_fd(fd, POLLOUT, until))
			continue;
		else
			goto fail;
	}
	/* The server closes the connection after the answer. */
	for (;;) {
		char buf[4096];
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n > 0)
			g_string_append_len(out, buf, n);
		else if (n == 0)
			break;
		else if (errno == EINTR)
			continue;
		else if (errno == EAGAIN) {
			if (!wait_fd(fd, POLLIN, until))
				goto fail;
		} else
			break; /* a reset: what came is the answer */
	}
	close(fd);
	if (out->len == 0)
		goto none;
	return g_string_free(out, FALSE);
fail:
	close(fd);
none:
	g_string_free(out, TRUE);
	return NULL;
}

long long test_zk_mntr(test_zk *z, int i, const char *key)
{
	char *text = test_zk_4lw(z, i, "mntr", 5000);
	size_t key_len = strlen(key);
	long long value = -1;
	char **lines;

	if (!text)
		return -1;
	lines = g_strsplit(text, "\n", -1);
	for (int k = 0; lines[k]; k++) {
		if (strncmp(lines[k], key, key_len) == 0 && lines[k][key_len] == '\t') {
			const char *digits = lines[k] + key_len + 1;
			char *end;
			long long v = g_ascii_strtoll(digits, &end, 10);

			if (end != digits)
				value = v;
			break;
		}
	}
	g_strfreev(lines);
	g_free(text);
	return value;
}

/* What server i answers to "srvr" after "Mode: " ("standalone",
 * "leader", "follower"), or NULL: not running, not serving (no quorum),
 * or silent for timeout_ms. */
static char *mode_of(test_zk *z, int i, int64_t timeout_ms)
{
	char *text, *at, *mode = NULL;

	if (server(z, i)->pid <= 0)
		return NULL;
	text = test_zk_4lw(z, i, "srvr", timeout_ms);
	if (text && (at = strstr(text, "Mode: "))) {
		at += strlen("Mode: ");
		mode = g_strndup(at, strcspn(at, "\r\n"));
	}
	g_free(text);
	return mode;
}

enum { UP, EXITED, SILENT };

/*
 * Wait until server only (or, if only is -1, every running server, one of
 * them the leader of an ensemble) answers "srvr" with a mode.  EXITED as
 * soon as one of them exits (most likely a port taken meanwhile), SILENT
 * after timeout_ms.
 */
static int wait_up(test_zk *z, int only, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + timeout_ms;

	for (;;) {
		bool all = true, leader = z->count == 1 || only >= 0;

		for (int i = 0; i < z->count; i++) {
			char *mode;

			if (only >= 0 && i != only)
				continue;
			if (only < 0 && z->servers[i].pid <= 0)
				continue;
			if (gone(z, i))
				return EXITED;
			mode = mode_of(z, i, 1000);
			if (!mode)
				all = false;
			else if (strcmp(mode, "leader") == 0)
				leader = true;
			g_free(mode);
		}
		if (all && leader)
			return UP;
		if (test_now_ms() >= until)
			return SILENT;
		g_usleep(50000);
	}
}

/* Print the log of every server now: the test fails without a
 * test_zk_stop(). */
static void print_logs(test_zk *z)
{
	for (int i = 0; i < z->count; i++) {
		char *tail = log_tail(&z->servers[i]);

		if (tail)
			fprintf(stderr, "%s\n", tail);
		g_free(tail);
	}
}

test_zk *test_zk_start(int count, int tick_ms, int max_session_ms)
{
	int result = SILENT;
	test_zk *z;

	assert_true(count == 1 || count == 3);
	assert_true(tick_ms > 0);
	g_free(java_binary()); /* fails the test now if there is none */
	z = g_new0(test_zk, 1);
	z->count = count;
	z->tick_ms = tick_ms;
	z->max_session_ms = max_session_ms;
	z->dir = g_dir_make_tmp("dlock-test-zk-XXXXXX", NULL);
	assert_non_null(z->dir);
	for (int i = 0; i < count; i++)
		z->servers[i].dir = g_strdup_printf("%s/server%d", z->dir, i + 1);

	/* The ports were free a moment ago; another process may take one
	 * before the servers bind it (the server exits then), so try a few
	 * sets.  Silence gets one more chance: a taken quorum port may only
	 * show as an election that never ends. */
	for (int attempt = 0, silent = 0; attempt < 5 && silent < 2; attempt++) {
		int fds[3 * TEST_ZK_MAX_SERVERS];
		int n = 0;

		/* Held together until all are chosen, so they differ. */
		for (int i = 0; i < count; i++) {
			test_zk_server *s = &z->servers[i];
			char *data = server_file(s, "data");

			s->port = test_closed_port(&fds[n++]);
			s->peer_port = count > 1 ? test_closed_port(&fds[n++]) : 0;
			s->election_port = count > 1 ? test_closed_port(&fds[n++]) : 0;
			test_remove_tree(data);
			g_free(data);
		}
		while (n > 0)
			close(fds[--n]);
		for (int i = 0; i < count; i++)
			write_config(z, i);
		for (int i = 0; i < count; i++)
			launch(z, i);
		result = wait_up(z, -1, START_TIMEOUT_MS);
		if (result == UP)
			return z;
		kill_servers(z, -1, SIGKILL);
		if (result == SILENT)
			silent++;
	}
	print_logs(z);
	test_remove_tree(z->dir);
	fail_msg("ZooKeeper (%d server%s) did not start: %s (log above)", count, count > 1 ? "s" : "",
	         result == SILENT ? "no answer to srvr within 30 s" : "a server exited");
	return NULL;
}

void test_zk_stop(test_zk *z)
{
	if (!z)
		return;
	/* Closing the session talks to a server: thaw a frozen one. */
	for (int i = 0; i < z->count; i++)
		if (z->servers[i].pid > 0)
			kill(z->servers[i].pid, SIGCONT);
	test_zk_inspect_close(z);
	kill_servers(z, -1, SIGTERM);
	for (int i = 0; i < z->count; i++) {
		save_log(&z->servers[i]);
		g_free(z->servers[i].dir);
	}
	test_remove_tree(z->dir);
	g_free(z->dir);
	g_free(z);
}

char *test_zk_hosts(const test_zk *z)
{
	GString *hosts = g_string_new(NULL);

	for (int i = 0; i < z->count; i++)
		g_string_append_printf(hosts, "%s127.0.0.1:%d", i ? "," : "", z->servers[i].port);
	return g_string_free(hosts, FALSE);
}

char *test_zk_uri(const test_zk *z, const char *suffix)
{
	char *hosts = test_zk_hosts(z);
	char *uri = g_strconcat("zk://", hosts, suffix ? suffix : "", NULL);

	g_free(hosts);
	return uri;
}

/* Whether the process is stopped (state T in /proc/PID/stat). */
static bool stopped(pid_t pid)
{
	char *path = g_strdup_printf("/proc/%d/stat", (int)pid);
	char *text = NULL, *end;
	bool is = false;

	/* "PID (COMM) STATE ...": COMM may hold anything but not end it. */
	if (g_file_get_contents(path, &text, NULL, NULL) && (end = strrchr(text, ')')))
		is = end[1] == ' ' && end[2] == 'T';
	g_free(text);
	g_free(path);
	return is;
}

void test_zk_signal(test_zk *z, int i, int sig)
{
	test_zk_server *s = server(z, i);

	if (sig == SIGKILL || sig == SIGTERM) {
		kill_servers(z, i, sig);
		/* It reconnects on its next use, to a server that is up. */
		test_zk_inspect_close(z);
		return;
	}
	assert_true(s->pid > 0);
	if (sig == SIGSTOP && !stopped(s->pid)) {
		int64_t until = test_now_ms() + STOP_TIMEOUT_MS;
		int status;

		assert_int_equal(kill(s->pid, sig), 0);
		/* kill() returns before the JVM's threads have all stopped,
		 * and one still running could answer meanwhile: return once
		 * waitpid() reports the whole process stopped. */
		while (test_now_ms() < until) {
			pid_t r = waitpid(s->pid, &status, WUNTRACED | WNOHANG);

			if (r == s->pid && WIFSTOPPED(status))
				return;
			if (r == s->pid) {
				s->pid = 0;
				fail_msg("ZooKeeper server %d exited instead of stopping", i + 1);
			}
			g_usleep(1000);
		}
		fail_msg("ZooKeeper server %d did not stop within %d s", i + 1, STOP_TIMEOUT_MS / 1000);
	}
	assert_int_equal(kill(s->pid, sig), 0);
}

void test_zk_restart_server(test_zk *z, int i, bool wipe)
{
	test_zk_server *s = server(z, i);
	int result = SILENT;
	char *tail;

	test_zk_signal(z, i, SIGKILL);
	if (wipe) {
		char *data = server_file(s, "data");

		test_remove_tree(data);
		g_free(data);
	}
	write_config(z, i);
	/* The old process is gone, but give the port a moment if something
	 * else grabbed it meanwhile (the server exits then). */
	for (int attempt = 0; attempt < 50; attempt++) {
		launch(z, i);
		result = wait_up(z, i, START_TIMEOUT_MS);
		if (result == UP)
			return;
		kill_servers(z, i, SIGKILL);
		if (result == SILENT)
			break;
		g_usleep(100000);
	}
	tail = log_tail(s);
	if (tail)
		fprintf(stderr, "%s\n", tail);
	g_free(tail);
	fail_msg("ZooKeeper server %d did not start again on port %d: %s (log above)", i + 1, s->port,
	         result == SILENT ? "no answer to srvr within 30 s" : "it exited");
}

int test_zk_leader(test_zk *z, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + timeout_ms;

	if (z->count == 1)
		return 0;
	for (;;) {
		for (int i = 0; i < z->count; i++) {
			int64_t left = until - test_now_ms();
			char *mode = mode_of(z, i, left < 100 ? 100 : left > 1000 ? 1000 : left);
			bool leader = mode && strcmp(mode, "leader") == 0;

			g_free(mode);
			if (leader)
				return i;
		}
		if (test_now_ms() >= until)
			return -1;
		g_usleep(50000);
	}
}

int test_zk_finish(int failures)
{
	return test_logs_finish(failures);
}
