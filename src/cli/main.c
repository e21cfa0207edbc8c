/*
 * dlock — run a command while holding a distributed lock, or show who
 * holds one.  Uses only the public header.
 *
 *   dlock run [-c CONFIG] [-b BACKEND|URI] [-w WAIT] [-t TTL] [-E CODE]
 *             [--on-lost=term|ignore] RESOURCE -- COMMAND [ARG...]
 *   dlock status [-c CONFIG] [-b BACKEND|URI] [--json] RESOURCE
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"

/* sysexits.h values, spelled out as the contract of the command. */
enum {
	EXIT_USAGE = 64,
	EXIT_UNAVAILABLE = 69,
	EXIT_LOST = 70,
	EXIT_OSERR = 71,
	EXIT_SOFTWARE = 70,
	EXIT_TEMPFAIL = 75,
	EXIT_CONFIG = 78,
};

#define KILL_GRACE_MS 10000

typedef struct options {
	const char *config;
	const char *backend;
	int64_t wait_ms;
	bool wait_given;
	int64_t ttl_ms;
	int busy_code;
	bool on_lost_ignore;
	bool json;
	const char *resource;
	char **command;
} options;

static const char usage_text[] =
	"usage: dlock run [-c CONFIG] [-b BACKEND|URI] [-w WAIT] [-t TTL] [-E CODE]\n"
	"                 [--on-lost=term|ignore] RESOURCE -- COMMAND [ARG...]\n"
	"       dlock status [-c CONFIG] [-b BACKEND|URI] [--json] RESOURCE\n"
	"       dlock --help | --version\n";

static const char help_text[] =
	"Run a command while holding a lock, or show who holds one.\n"
	"\n"
	"  run       acquire RESOURCE, run COMMAND while keeping the lock alive,\n"
	"            release it when COMMAND exits, and exit with its status\n"
	"  status    print whether RESOURCE is held and by whom (exit 0 free, 1 held)\n"
	"\n"
	"Options:\n"
	"  -c, --config FILE     configuration file (default: $DLOCK_CONFIG)\n"
	"  -b, --backend NAME|URI  a backend of the configuration, or a URI\n"
	"                        (redis://host:port, redis+unix:///path, ...)\n"
	"  -w, --wait DURATION   how long to wait for the lock: 250ms, 10s, 2m; a bare\n"
	"                        number is seconds; 0 tries once (default: the\n"
	"                        configuration's [defaults] wait, else forever)\n"
	"  -t, --ttl DURATION    lease length on lease backends (Redis)\n"
	"  -E, --busy-exit CODE  exit status when the lock is not acquired in time\n"
	"                        (default 75)\n"
	"      --on-lost=term|ignore  when the lock is lost while COMMAND runs: send it\n"
	"                        SIGTERM, then SIGKILL after 10 s, and exit 70 (term,\n"
	"                        the default), or only warn (ignore)\n"
	"      --json            status as one JSON object\n"
	"\n"
	"COMMAND gets DLOCK_RESOURCE, DLOCK_FENCING_TOKEN and DLOCK_BACKEND in its\n"
	"environment and no descriptor but 0, 1 and 2.  SIGINT, SIGTERM and SIGHUP\n"
	"are passed on to it; if dlock dies, COMMAND gets SIGTERM.  Before the lock\n"
	"is acquired they end the wait: dlock exits 128+N and COMMAND never runs.\n"
	"\n"
	"Exit status: COMMAND's (128+N if killed by signal N, or if signal N came\n"
	"while waiting); 75 not acquired in time; 69 backend unavailable; 70 lock\n"
	"lost; 78 configuration error; 64 usage error.\n"
	"\n"
	"Examples:\n"
	"  dlock run nightly-report -- ./report.sh\n"
	"  dlock run -w 0 -E 0 backup -- ./backup.sh       # skip if already running\n"
	"  dlock run -b redis://127.0.0.1:6379 -t 10s jobs/import -- ./import\n"
	"  dlock status --json nightly-report\n";

static void die_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "dlock: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n%s", usage_text);
	exit(EXIT_USAGE);
}

/* Durations as the library reads them: 250ms, 10s, 2m, 1h, bare seconds. */
static bool parse_duration(const char *text, int64_t *ret_ms)
{
	char *end;
	long long value;
	int64_t unit = 1000;

	if (!text || text[0] < '0' || text[0] > '9')
		return false;
	errno = 0;
	value = strtoll(text, &end, 10);
	if (errno)
		return false;
	if (strcmp(end, "ms") == 0)
		unit = 1;
	else if (strcmp(end, "s") == 0 || *end == '\0')
		unit = 1000;
	else if (strcmp(end, "m") == 0)
		unit = 60000;
	else if (strcmp(end, "h") == 0)
		unit = 3600000;
	else
		return false;
	if (value > INT64_MAX / unit)
		return false;
	*ret_ms = value * unit;
	return true;
}

/* The exit status for a library failure. */
static int exit_for(int rc, const options *o)
{
	switch (rc) {
	case DLOCK_EBUSY:
	case DLOCK_ETIMEDOUT:
		return o->busy_code;
	case DLOCK_EUNAVAILABLE:
	case DLOCK_EBACKEND:
		return EXIT_UNAVAILABLE;
	case DLOCK_ECONFIG:
		return EXIT_CONFIG;
	case DLOCK_EINVAL:
		return EXIT_USAGE;
	case DLOCK_ELOST:
		return EXIT_LOST;
	default:
		return EXIT_SOFTWARE;
	}
}

static int fail(int rc, const char *what, const options *o)
{
	fprintf(stderr, "dlock: %s: %s: %s\n", what, dlock_strerror(rc), dlock_last_error_message());
	return exit_for(rc, o);
}

static void parse_args(int argc, char **argv, bool run, options *o)
{
	static const struct option long_options[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "backend", required_argument, NULL, 'b' },
		{ "wait", required_argument, NULL, 'w' },
		{ "ttl", required_argument, NULL, 't' },
		{ "busy-exit", required_argument, NULL, 'E' },
		{ "on-lost", required_argument, NULL, 'L' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	/* '+': stop at the first non-option, so COMMAND's own options stay its. */
	while ((c = getopt_long(argc, argv, "+c:b:w:t:E:h", long_options, NULL)) != -1) {
		char *end;
		long code;

		switch (c) {
		case 'c':
			o->config = optarg;
			break;
		case 'b':
			o->backend = optarg;
			break;
		case 'w':
			if (!run || !parse_duration(optarg, &o->wait_ms))
				die_usage(run ? "-w: '%s' is not a duration (250ms, 10s, 2m)" : "-w: '%s': run only", optarg);
			o->wait_given = true;
			break;
		case 't':
			if (!run || !parse_duration(optarg, &o->ttl_ms))
				die_usage(run ? "-t: '%s' is not a duration (250ms, 10s, 2m)" : "-t: '%s': run only", optarg);
			break;
		case 'E':
			code = strtol(optarg, &end, 10);
			if (!run || *end || end == optarg || code < 0 || code > 255)
				die_usage("-E: '%s' is not an exit status (0-255)", optarg);
			o->busy_code = (int)code;
			break;
		case 'L':
			if (!run || (strcmp(optarg, "term") != 0 && strcmp(optarg, "ignore") != 0))
				die_usage("--on-lost: '%s' is neither term nor ignore", optarg);
			o->on_lost_ignore = strcmp(optarg, "ignore") == 0;
			break;
		case 'j':
			if (run)
				die_usage("--json%s: status only", "");
			o->json = true;
			break;
		case 'h':
			printf("%s\n%s", usage_text, help_text);
			exit(0);
		default:
			fprintf(stderr, "%s", usage_text);
			exit(EXIT_USAGE);
		}
	}
	if (optind >= argc)
		die_usage("no RESOURCE given%s", "");
	o->resource = argv[optind++];
	if (!run) {
		if (optind < argc)
			die_usage("unexpected argument '%s'", argv[optind]);
		return;
	}
	if (optind >= argc || strcmp(argv[optind], "--") != 0)
		die_usage("expected RESOURCE -- COMMAND [ARG...]%s", "");
	if (++optind >= argc)
		die_usage("no COMMAND given after --%s", "");
	o->command = argv + optind;
}

/* Build the client and the lock as -c / -b / $DLOCK_CONFIG say. */
static int open_lock(const options *o, dlock_client **ret_client, dlock_lock **ret_lock)
{
	bool backend_is_uri = o->backend && strstr(o->backend, "://");
	const char *spec = backend_is_uri ? o->backend : o->config;
	dlock_client *client;
	dlock_lock *lock = NULL; /* untouched by a failed dlock_lock_new() */
	int rc;

	rc = dlock_client_new(spec, &client);
	if (rc != DLOCK_OK)
		return fail(rc, "configuration", o);
	rc = dlock_lock_new(client, o->resource, &lock);
	if (rc == DLOCK_OK && o->backend && !backend_is_uri) {
		rc = dlock_lock_set_backend(lock, o->backend);
		if (rc == DLOCK_EINVAL)
			rc = DLOCK_ECONFIG; /* an unknown backend name is a configuration error */
	}
	if (rc == DLOCK_OK && o->ttl_ms > 0)
		rc = dlock_lock_set_ttl(lock, o->ttl_ms);
	if (rc != DLOCK_OK) {
		int code = fail(rc, o->resource, o);

		dlock_lock_free(lock);
		dlock_client_free(client);
		return code;
	}
	*ret_client = client;
	*ret_lock = lock;
	return 0;
}

/* ---- status ----------------------------------------------------------- */

static void json_string(const char *s)
{
	putchar('"');
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static int cmd_status(int argc, char **argv)
{
	options o = { .busy_code = EXIT_TEMPFAIL };
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;
	int rc, locked;

	parse_args(argc, argv, false, &o);
	if ((rc = open_lock(&o, &client, &lock)) != 0)
		return rc;
	rc = dlock_lock_query(lock, &info);
	if (rc != DLOCK_OK) {
		rc = fail(rc, o.resource, &o);
		dlock_lock_free(lock);
		dlock_client_free(client);
		return rc;
	}
	locked = dlock_info_locked(info);
	if (o.json) {
		printf("{\"resource\":");
		json_string(o.resource);
		printf(",\"held\":%s,\"holder\":", locked ? "true" : "false");
		json_string(dlock_info_holder(info));
		if (dlock_info_holder_pid(info) > 0) {
			printf(",\"holder_host\":");
			json_string(dlock_info_holder_host(info));
			printf(",\"holder_pid\":%" PRId64 ",\"holder_tid\":%" PRId64 ",\"holder_since_ms\":%" PRId64,
			       dlock_info_holder_pid(info), dlock_info_holder_tid(info),
			       dlock_info_holder_since_ms(info));
		}
		printf(",\"expires_in_ms\":%" PRId64 ",\"fencing_token\":%" PRIu64 ",\"backend\":",
		       dlock_info_expires_in_ms(info), dlock_info_fencing_token(info));
		json_string(dlock_info_backend(info));
		printf("}\n");
	} else {
		printf("resource: %s\n", o.resource);
		printf("held:     %s\n", locked ? "yes" : "no");
		if (locked)
			printf("holder:   %s\n", dlock_info_holder(info));
		if (locked && dlock_info_expires_in_ms(info) >= 0)
			printf("expires:  in %" PRId64 " ms\n", dlock_info_expires_in_ms(info));
		if (dlock_info_fencing_token(info))
			printf("fencing:  %" PRIu64 " (latest token)\n", dlock_info_fencing_token(info));
		printf("backend:  %s\n", dlock_info_backend(info));
	}
	dlock_info_free(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
	return locked ? 1 : 0;
}

/* ---- run -------------------------------------------------------------- */

static int lost_pipe[2] = { -1, -1 };

/* Runs on the library's callback thread: hand the news to the main loop. */
static void on_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	char c = (char)state;

	(void)lock;
	(void)user_data;
	if (write(lost_pipe[1], &c, 1) < 0)
		return;
}

/* In the child, before exec: nothing but 0-2 stays open. */
static void close_other_descriptors(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *entry;

	if (!dir) {
		for (int fd = 3; fd < 65536; fd++)
			close(fd);
		return;
	}
	while ((entry = readdir(dir))) {
		int fd = atoi(entry->d_name);

		if (fd > 2 && fd != dirfd(dir))
			close(fd);
	}
	closedir(dir);
}

static pid_t start_command(const options *o, dlock_lock *lock, const sigset_t *saved_mask)
{
	const char *backend = dlock_lock_backend_uri(lock);
	pid_t parent = getpid();
	char token[32];
	pid_t pid;

	/* Read before fork: in the child every call on the lock is refused. */
	snprintf(token, sizeof(token), "%" PRIu64, dlock_fencing_token(lock));
	pid = fork();
	if (pid != 0)
		return pid;
	/* Never run without the lock: die with dlock. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(EXIT_SOFTWARE);
	setenv("DLOCK_RESOURCE", o->resource, 1);
	setenv("DLOCK_FENCING_TOKEN", token, 1);
	setenv("DLOCK_BACKEND", backend ? backend : "", 1);
	close_other_descriptors();
	signal(SIGPIPE, SIG_DFL);
	sigprocmask(SIG_SETMASK, saved_mask, NULL);
	execvp(o->command[0], o->command);
	fprintf(stderr, "dlock: cannot run %s: %s\n", o->command[0], strerror(errno));
	_exit(errno == ENOENT ? 127 : 126);
}

/*
 * While dlock_acquire() waits, the main thread cannot read the signalfd:
 * this thread does, and turns SIGINT, SIGTERM or SIGHUP into a cancel of
 * the wait.  A cancel only ends acquires already waiting, and the signal
 * may come just before the main thread enters dlock_acquire(), so the
 * thread cancels again every CANCEL_REPEAT_MS until it is told to stop.
 */
#define CANCEL_REPEAT_MS 50

typedef struct wait_guard {
	dlock_lock *lock;
	int sfd;
	int stop[2];
	pthread_t thread;
	int signo; /* the signal that canceled the wait, 0 if none; read after join */
} wait_guard;

static void *guard_main(void *data)
{
	wait_guard *g = data;

	for (;;) {
		struct pollfd fds[2] = { { .fd = g->sfd, .events = POLLIN }, { .fd = g->stop[0], .events = POLLIN } };
		struct signalfd_siginfo si;

		if (poll(fds, 2, g->signo ? CANCEL_REPEAT_MS : -1) < 0 && errno != EINTR)
			break;
		if (fds[1].revents)
			break;
		if (g->signo) {
			dlock_lock_cancel(g->lock);
			continue;
		}
		if (!(fds[0].revents & POLLIN) || read(g->sfd, &si, sizeof(si)) != sizeof(si))
			continue;
		if (si.ssi_signo == SIGCHLD)
			continue; /* no child yet */
		g->signo = (int)si.ssi_signo;
		dlock_lock_cancel(g->lock);
	}
	return NULL;
}

/*
 * Acquire, canceled by SIGINT, SIGTERM or SIGHUP; *ret_signo says which.
 * Without its guard thread no signal could stop the wait, so when that
 * cannot be started nothing is tried: *ret_errno says why (else 0).
 */
static int acquire_interruptible(dlock_lock *lock, int sfd, int64_t wait_ms, int *ret_signo,
                                 int *ret_errno)
{
	wait_guard g = { .lock = lock, .sfd = sfd };
	int rc;

	*ret_signo = 0;
	*ret_errno = 0;
	if (pipe2(g.stop, O_CLOEXEC) != 0) {
		*ret_errno = errno;
		return DLOCK_OK;
	}
	if ((*ret_errno = pthread_create(&g.thread, NULL, guard_main, &g)) != 0) {
		close(g.stop[0]);
		close(g.stop[1]);
		return DLOCK_OK;
	}
	rc = dlock_acquire(lock, wait_ms);
	if (write(g.stop[1], "x", 1) != 1)
		pthread_cancel(g.thread);
	pthread_join(g.thread, NULL);
	close(g.stop[0]);
	close(g.stop[1]);
	*ret_signo = g.signo;
	return rc;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int cmd_run(int argc, char **argv)
{
	options o = { .busy_code = EXIT_TEMPFAIL };
	sigset_t handled, saved;
	dlock_client *client;
	dlock_lock *lock;
	int64_t kill_at = -1;
	bool lost = false;
	int status = 0, rc, sfd, signo, err;
	pid_t child;

	parse_args(argc, argv, true, &o);
	/* Signals go through a signalfd; library threads block them all. */
	sigemptyset(&handled);
	sigaddset(&handled, SIGINT);
	sigaddset(&handled, SIGTERM);
	sigaddset(&handled, SIGHUP);
	sigaddset(&handled, SIGCHLD);
	sigprocmask(SIG_BLOCK, &handled, &saved);
	sfd = signalfd(-1, &handled, SFD_CLOEXEC);
	if (sfd < 0 || pipe2(lost_pipe, O_CLOEXEC) != 0) {
		fprintf(stderr, "dlock: %s\n", strerror(errno));
		return EXIT_SOFTWARE;
	}

	if ((rc = open_lock(&o, &client, &lock)) != 0)
		return rc;
	if (!o.wait_given)
		o.wait_ms = dlock_client_default_wait_ms(client);
	dlock_lock_set_state_callback(lock, on_state, NULL);
	rc = acquire_interruptible(lock, sfd, o.wait_ms, &signo, &err);
	if (err != 0) {
		fprintf(stderr, "dlock: %s: cannot watch for signals while waiting for the lock: %s\n",
		        o.resource, strerror(err));
		dlock_lock_free(lock);
		dlock_client_free(client);
		return EXIT_OSERR;
	}
	if (signo) {
		/* Asked to stop before COMMAND started: it never runs. */
		fprintf(stderr, "dlock: %s: %s while waiting for the lock; not running %s\n", o.resource,
		        strsignal(signo), o.command[0]);
		if (rc == DLOCK_OK)
			dlock_release(lock);
		dlock_lock_free(lock);
		dlock_client_free(client);
		return 128 + signo;
	}
	if (rc != DLOCK_OK) {
		rc = fail(rc, o.resource, &o);
		dlock_lock_free(lock);
		dlock_client_free(client);
		return rc;
	}

	child = start_command(&o, lock, &saved);
	if (child < 0) {
		fprintf(stderr, "dlock: fork: %s\n", strerror(errno));
		dlock_release(lock);
		dlock_lock_free(lock);
		dlock_client_free(client);
		return EXIT_SOFTWARE;
	}

	for (;;) {
		struct pollfd fds[2] = { { .fd = sfd, .events = POLLIN }, { .fd = lost_pipe[0], .events = POLLIN } };
		int timeout = kill_at < 0 ? -1 : (int)(kill_at - now_ms() > 0 ? kill_at - now_ms() : 0);
		struct signalfd_siginfo si;
		bool done = false;

		if (poll(fds, 2, timeout) < 0 && errno != EINTR)
			break;
		if (kill_at >= 0 && now_ms() >= kill_at) {
			kill(child, SIGKILL);
			kill_at = -1;
		}
		if (fds[1].revents & POLLIN) {
			char state;

			if (read(lost_pipe[0], &state, 1) == 1 && state == DLOCK_STATE_LOST && !lost) {
				lost = true;
				if (o.on_lost_ignore) {
					fprintf(stderr, "dlock: warning: lock on %s was lost; %s keeps running\n",
					        o.resource, o.command[0]);
				} else {
					fprintf(stderr, "dlock: lock on %s was lost; stopping %s\n", o.resource, o.command[0]);
					kill(child, SIGTERM);
					kill_at = now_ms() + KILL_GRACE_MS;
				}
			}
		}
		if (!(fds[0].revents & POLLIN))
			continue;
		while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
			if (si.ssi_signo == SIGCHLD) {
				if (waitpid(child, &status, WNOHANG) == child)
					done = true;
			} else {
				kill(child, (int)si.ssi_signo);
			}
			break;
		}
		if (done)
			break;
	}

	rc = dlock_release(lock);
	if (rc == DLOCK_ELOST)
		lost = true;
	dlock_lock_free(lock);
	dlock_client_free(client);
	if (lost && !o.on_lost_ignore)
		return EXIT_LOST;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
		printf("dlock %s\n", dlock_version());
		return 0;
	}
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("%s\n%s", usage_text, help_text);
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "run") == 0)
		return cmd_run(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "status") == 0)
		return cmd_status(argc - 1, argv + 1);
	fprintf(stderr, "%s", usage_text);
	return EXIT_USAGE;
}
