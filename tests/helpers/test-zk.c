/*
 * ZooKeeper servers for the integration tests.  See test-zk.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <zookeeper/zookeeper.h>

#include "test-zk.h"

#define CLASSPATH                                                                           \
	"/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:" \
	"/usr/share/java/log4j-1.2.jar"

/* Log tails of stopped servers, printed by test_zk_finish() on failure. */
static GPtrArray *saved_logs;

static int free_port(void)
{
	int fd;
	int port = test_closed_port(&fd);

	close(fd);
	return port;
}

static char *java_binary(void)
{
	const char *env = getenv("DLOCK_TEST_JAVA");
	char *found;

	if (env && *env)
		return g_strdup(env);
	found = g_find_program_in_path("java");
	if (found)
		return found;
	if (g_file_test("/usr/bin/java", G_FILE_TEST_IS_EXECUTABLE))
		return g_strdup("/usr/bin/java");
	fail_msg("cannot start ZooKeeper: no java in PATH or /usr/bin (install zookeeper)");
	return NULL;
}

static char *server_log(const test_zk_server *s)
{
	return g_build_filename(s->dir, "zk.log", NULL);
}

static void save_log(const test_zk_server *s)
{
	char *path = server_log(s);
	char *text = NULL;

	if (g_file_get_contents(path, &text, NULL, NULL)) {
		size_t len = strlen(text);

		if (!saved_logs)
			saved_logs = g_ptr_array_new_with_free_func(g_free);
		g_ptr_array_add(saved_logs, g_strdup_printf("---- %s, port %d (tail) ----\n%s", path, s->port,
		                                            len > 3000 ? text + len - 3000 : text));
	}
	g_free(text);
	g_free(path);
}

static void write_config(test_zk *z, int i)
{
	test_zk_server *s = &z->servers[i];
	char *data = g_build_filename(s->dir, "data", NULL);
	GString *cfg = g_string_new(NULL);
	char *path = g_build_filename(s->dir, "zoo.cfg", NULL);

	g_mkdir_with_parents(data, 0700);
	g_string_append_printf(cfg,
	                       "tickTime=%d\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"
	                       "admin.enableServer=false\n4lw.commands.whitelist=*\nmaxClientCnxns=0\n"
	                       "minSessionTimeout=%d\n",
	                       z->tick_ms, data, s->port, 2 * z->tick_ms);
	if (z->max_session_ms > 0)
		g_string_append_printf(cfg, "maxSessionTimeout=%d\n", z->max_session_ms);
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

static void launch(test_zk_server *s)
{
	char *java = java_binary();
	char *cfg = g_build_filename(s->dir, "zoo.cfg", NULL);
	char *logdir = g_strdup_printf("-Dzookeeper.log.dir=%s", s->dir);
	char *log = server_log(s);
	const char *argv[] = { java, "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC",
	                       "-Dznode.container.checkIntervalMs=500", logdir, "-cp", CLASSPATH,
	                       "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg, NULL };
	pid_t parent = getpid();
	int fd;

	/* Opened before fork(): only async-signal-safe calls in the child. */
	fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	s->pid = fork();
	assert_true(s->pid >= 0);
	if (s->pid == 0) {
		sigset_t none;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(126);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(fd);
	g_free(java);
	g_free(cfg);
	g_free(logdir);
	g_free(log);
}

char *test_zk_4lw(test_zk *z, int i, const char *word, int64_t timeout_ms)
{
	struct sockaddr_in addr = { 0 };
	int64_t until = test_now_ms() + timeout_ms;
	GString *out = g_string_new(NULL);
	struct pollfd p;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	bool ok = false;

	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)z->servers[i].port);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 && errno != EINPROGRESS)
		goto out;
	p.fd = fd;
	p.events = POLLOUT;
	if (poll(&p, 1, (int)timeout_ms) != 1 || (p.revents & (POLLERR | POLLHUP)))
		goto out;
	if (write(fd, word, strlen(word)) != (ssize_t)strlen(word))
		goto out;
	for (;;) {
		char buf[4096];
		int64_t left = until - test_now_ms();
		ssize_t n;

		if (left <= 0)
			goto out;
		p.events = POLLIN;
		if (poll(&p, 1, (int)left) != 1)
			goto out;
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EAGAIN)
			continue;
		if (n <= 0)
			break;
		g_string_append_len(out, buf, n);
	}
	ok = out->len > 0;
out:
	close(fd);
	return g_string_free(out, !ok);
}

long long test_zk_mntr(test_zk *z, int i, const char *key)
{
	char *text = test_zk_4lw(z, i, "mntr", 5000);
	char **lines;
	long long value = -1;

	if (!text)
		return -1;
	lines = g_strsplit(text, "\n", -1);
	for (int k = 0; lines[k]; k++) {
		char *tab = strchr(lines[k], '\t');

		if (tab && (size_t)(tab - lines[k]) == strlen(key) && strncmp(lines[k], key, strlen(key)) == 0)
			value = g_ascii_strtoll(tab + 1, NULL, 10);
	}
	g_strfreev(lines);
	g_free(text);
	return value;
}

/* "leader", "follower", "standalone", or NULL. */
static char *mode_of(test_zk *z, int i)
{
	char *text, *mode = NULL, *at;

	if (z->servers[i].pid <= 0)
		return NULL;
	text = test_zk_4lw(z, i, "srvr", 1000);
	if (text && (at = strstr(text, "Mode: "))) {
		char *end = strchr(at, '\n');

		mode = g_strndup(at + 6, end ? (size_t)(end - at - 6) : strlen(at + 6));
	}
	g_free(text);
	return mode;
}

static bool exited(test_zk_server *s)
{
	int status;

	if (s->pid > 0 && waitpid(s->pid, &status, WNOHANG) == s->pid) {
		s->pid = 0;
		return true;
	}
	return s->pid <= 0;
}

/* Wait until every running server has a mode (an ensemble: a leader). */
static bool serving(test_zk *z, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + timeout_ms;

	while (test_now_ms() < until) {
		bool all = true, leader = z->count == 1;

		for (int i = 0; i < z->count; i++) {
			char *mode;

			if (z->servers[i].pid <= 0)
				continue;
			if (exited(&z->servers[i]))
				return false;
			mode = mode_of(z, i);
			if (!mode)
				all = false;
			else if (strcmp(mode, "leader") == 0)
				leader = true;
			g_free(mode);
		}
		if (all && leader)
			return true;
		g_usleep(50000);
	}
	return false;
}

test_zk *test_zk_start(int count, int tick_ms, int max_session_ms)
{
	test_zk *z = g_new0(test_zk, 1);

	assert_true(count == 1 || count == 3);
	z->count = count;
	z->tick_ms = tick_ms;
	z->max_session_ms = max_session_ms;
	z->dir = g_dir_make_tmp("dlock-test-zk-XXXXXX", NULL);
	assert_non_null(z->dir);
	for (int attempt = 0; attempt < 5; attempt++) {
		for (int i = 0; i < count; i++) {
			test_zk_server *s = &z->servers[i];

			s->port = free_port();
			s->peer_port = count > 1 ? free_port() : 0;
			s->election_port = count > 1 ? free_port() : 0;
			g_free(s->dir);
			s->dir = g_strdup_printf("%s/server%d", z->dir, i + 1);
		}
		for (int i = 0; i < count; i++)
			write_config(z, i);
		for (int i = 0; i < count; i++)
			launch(&z->servers[i]);
		if (serving(z, 30000))
			return z;
		for (int i = 0; i < count; i++) {
			save_log(&z->servers[i]);
			test_zk_signal(z, i, SIGKILL);
		}
	}
	fail_msg("ZooKeeper did not start (logs follow at the end)");
	return NULL;
}

static void close_inspect(test_zk *z)
{
	if (z->inspect) {
		zookeeper_close(z->inspect);
		z->inspect = NULL;
	}
}

void test_zk_signal(test_zk *z, int i, int sig)
{
	test_zk_server *s = &z->servers[i];
	int status;

	if (s->pid <= 0)
		return;
	if (sig != SIGKILL && sig != SIGTERM) {
		kill(s->pid, sig);
		return;
	}
	close_inspect(z);
	kill(s->pid, SIGCONT); /* a stopped JVM would not act on SIGTERM */
	kill(s->pid, sig);
	for (int k = 0; k < 500; k++) {
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			s->pid = 0;
			return;
		}
		g_usleep(10000);
	}
	kill(s->pid, SIGKILL);
	waitpid(s->pid, &status, 0);
	s->pid = 0;
}

static void remove_tree(const char *dir)
{
	GDir *d = g_dir_open(dir, 0, NULL);
	const char *name;

	if (d) {
		while ((name = g_dir_read_name(d))) {
			char *path = g_build_filename(dir, name, NULL);

			if (g_file_test(path, G_FILE_TEST_IS_DIR) && !g_file_test(path, G_FILE_TEST_IS_SYMLINK))
				remove_tree(path);
			else
				g_unlink(path);
			g_free(path);
		}
		g_dir_close(d);
	}
	g_rmdir(dir);
}

void test_zk_restart_server(test_zk *z, int i, bool wipe)
{
	test_zk_server *s = &z->servers[i];

	test_zk_signal(z, i, SIGKILL);
	if (wipe) {
		char *data = g_build_filename(s->dir, "data", NULL);

		remove_tree(data);
		g_free(data);
		write_config(z, i);
	}
	for (int attempt = 0; attempt < 50; attempt++) {
		launch(s);
		if (serving(z, 30000))
			return;
		test_zk_signal(z, i, SIGKILL);
		g_usleep(100000);
	}
	save_log(s);
	fail_msg("ZooKeeper server %d did not start again", i + 1);
}

int test_zk_leader(test_zk *z, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + timeout_ms;

	if (z->count == 1)
		return 0;
	while (test_now_ms() < until) {
		for (int i = 0; i < z->count; i++) {
			char *mode = mode_of(z, i);
			bool leader = mode && strcmp(mode, "leader") == 0;

			g_free(mode);
			if (leader)
				return i;
		}
		g_usleep(50000);
	}
	return -1;
}

char *test_zk_hosts(const test_zk *z)
{
	GString *s = g_string_new(NULL);

	for (int i = 0; i < z->count; i++)
		g_string_append_printf(s, "%s127.0.0.1:%d", i ? "," : "", z->servers[i].port);
	return g_string_free(s, FALSE);
}

char *test_zk_uri(const test_zk *z, const char *suffix)
{
	char *hosts = test_zk_hosts(z);
	char *uri = g_strconcat("zk://", hosts, suffix ? suffix : "", NULL);

	g_free(hosts);
	return uri;
}

void test_zk_stop(test_zk *z)
{
	if (!z)
		return;
	close_inspect(z);
	for (int i = 0; i < z->count; i++) {
		test_zk_signal(z, i, SIGTERM);
		save_log(&z->servers[i]);
		g_free(z->servers[i].dir);
	}
	remove_tree(z->dir);
	g_free(z->dir);
	g_free(z);
}

/* ---- inspection session ---- */

static void discard_log(const char *message)
{
	(void)message;
}

static void ignore_events(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
}

static zhandle_t *inspect(test_zk *z)
{
	char *hosts;
	sigset_t all, old;
	int64_t until;

	if (z->inspect && zoo_state(z->inspect) == ZOO_CONNECTED_STATE)
		return z->inspect;
	if (z->inspect && is_unrecoverable(z->inspect) == ZINVALIDSTATE)
		close_inspect(z);
	if (!z->inspect) {
		hosts = test_zk_hosts(z);
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		z->inspect = zookeeper_init2(hosts, ignore_events, 10000, NULL, NULL, 0, discard_log);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		g_free(hosts);
		assert_non_null(z->inspect);
	}
	until = test_now_ms() + 20000;
	while (zoo_state(z->inspect) != ZOO_CONNECTED_STATE && test_now_ms() < until)
		g_usleep(10000);
	if (zoo_state(z->inspect) != ZOO_CONNECTED_STATE)
		fail_msg("the inspection session could not connect to ZooKeeper");
	return z->inspect;
}

static bool retry(test_zk *z, int rc)
{
	if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZSESSIONEXPIRED ||
	    rc == ZINVALIDSTATE) {
		if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE)
			close_inspect(z);
		g_usleep(100000);
		return true;
	}
	return false;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

char **test_zk_children(test_zk *z, const char *path)
{
	for (int attempt = 0; attempt < 200; attempt++) {
		struct String_vector v = { 0 };
		int rc = zoo_get_children(inspect(z), path, 0, &v);
		char **list;

		if (retry(z, rc))
			continue;
		if (rc == ZNONODE)
			return NULL;
		if (rc != ZOK)
			fail_msg("get_children %s: %s", path, zerror(rc));
		list = g_new0(char *, v.count + 1);
		for (int i = 0; i < v.count; i++)
			list[i] = g_strdup(v.data[i]);
		deallocate_String_vector(&v);
		qsort(list, g_strv_length(list), sizeof(char *), cmp_str);
		return list;
	}
	fail_msg("get_children %s: ZooKeeper did not answer", path);
	return NULL;
}

bool test_zk_exists(test_zk *z, const char *path)
{
	for (int attempt = 0; attempt < 200; attempt++) {
		struct Stat st;
		int rc = zoo_exists(inspect(z), path, 0, &st);

		if (retry(z, rc))
			continue;
		return rc == ZOK;
	}
	fail_msg("exists %s: ZooKeeper did not answer", path);
	return false;
}

char *test_zk_get(test_zk *z, const char *path, int64_t *ret_czxid)
{
	for (int attempt = 0; attempt < 200; attempt++) {
		static char buf[65536];
		int len = sizeof(buf) - 1;
		struct Stat st;
		int rc = zoo_get(inspect(z), path, 0, buf, &len, &st);

		if (retry(z, rc))
			continue;
		if (rc != ZOK)
			return NULL;
		if (ret_czxid)
			*ret_czxid = st.czxid;
		return g_strndup(buf, len > 0 ? (size_t)len : 0);
	}
	fail_msg("get %s: ZooKeeper did not answer", path);
	return NULL;
}

int test_zk_delete(test_zk *z, const char *path)
{
	for (int attempt = 0; attempt < 200; attempt++) {
		int rc = zoo_delete(inspect(z), path, -1);

		if (!retry(z, rc))
			return rc;
	}
	fail_msg("delete %s: ZooKeeper did not answer", path);
	return -1;
}

int test_zk_create(test_zk *z, const char *path, const char *data)
{
	for (int attempt = 0; attempt < 200; attempt++) {
		int rc = zoo_create(inspect(z), path, data, data ? (int)strlen(data) : -1, &ZOO_OPEN_ACL_UNSAFE,
		                    0, NULL, 0);

		if (!retry(z, rc))
			return rc;
	}
	fail_msg("create %s: ZooKeeper did not answer", path);
	return -1;
}

static bool lock_node_name(const char *name)
{
	size_t len = strlen(name);

	if (len < 10)
		return false;
	for (size_t i = len - 10; i < len; i++)
		if (name[i] < '0' || name[i] > '9')
			return false;
	return true;
}

long long test_zk_leftover_nodes(test_zk *z, const char *path)
{
	char **children = test_zk_children(z, path);
	long long found = 0;

	for (int i = 0; children && children[i]; i++) {
		char *child = strcmp(path, "/") == 0 ? g_strconcat("/", children[i], NULL)
		                                     : g_strconcat(path, "/", children[i], NULL);

		if (lock_node_name(children[i])) {
			fprintf(stderr, "left over: %s\n", child);
			found++;
		}
		found += test_zk_leftover_nodes(z, child);
		g_free(child);
	}
	g_strfreev(children);
	return found;
}

int test_zk_finish(int failures)
{
	if (failures && saved_logs)
		for (guint i = 0; i < saved_logs->len; i++)
			fprintf(stderr, "%s\n", (char *)saved_logs->pdata[i]);
	if (saved_logs)
		g_ptr_array_unref(saved_logs);
	saved_logs = NULL;
	return failures;
}
