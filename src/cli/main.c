/*
 * dlock — run a command while holding a distributed lock, or show who
 * holds one.  This file reads the command line, builds the client and the
 * lock, maps library failures to exit statuses and dispatches to run.c or
 * status.c (cli.h lists the files).
 *
 *   dlock run [-c CONFIG] [-b BACKEND|URI] [-w WAIT] [-t TTL] [-E CODE]
 *             [-s|-x|--permits N] [--on-lost=term|ignore] RESOURCE -- COMMAND [ARG...]
 *   dlock elect [-c CONFIG] [-b BACKEND|URI] [-w WAIT] [-t TTL] [-E CODE]
 *               [--id ID] [--on-lost=term|ignore] NAME -- COMMAND [ARG...]
 *   dlock status [-c CONFIG] [-b BACKEND|URI] [--json] RESOURCE
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
	"usage: dlock run [-c CONFIG] [-b BACKEND|URI] [-w WAIT] [-t TTL] [-E CODE]\n"
	"                 [-s|-x|--permits N] [--on-lost=term|ignore] RESOURCE -- COMMAND [ARG...]\n"
	"       dlock elect [-c CONFIG] [-b BACKEND|URI] [-w WAIT] [-t TTL] [-E CODE]\n"
	"                   [--id ID] [--on-lost=term|ignore] NAME -- COMMAND [ARG...]\n"
	"       dlock status [-c CONFIG] [-b BACKEND|URI] [--json] RESOURCE\n"
	"       dlock --help | --version\n";

static const char help_text[] =
	"Run a command while holding a lock, or show who holds one.\n"
	"\n"
	"  run       acquire RESOURCE, run COMMAND while keeping the lock alive,\n"
	"            release it when COMMAND exits, and exit with its status\n"
	"  elect     campaign for leadership of NAME with the others that run\n"
	"            dlock elect NAME; run COMMAND while this one leads\n"
	"  status    print whether RESOURCE is held and by whom, and the leader\n"
	"            of an election (exit 0 free, 1 held)\n"
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
	"  -s, --shared          a shared (read) hold: other -s runs share the lock,\n"
	"                        -x runs wait for them all (as flock -s)\n"
	"  -x, --exclusive       an exclusive hold (the default)\n"
	"      --permits N       take one of N permits of a semaphore: up to N runs\n"
	"                        at once; every run on RESOURCE must give the same N\n"
	"      --id ID           elect: this participant's id (default <host>-<pid>)\n"
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
	"With elect, COMMAND also gets DLOCK_LEADER_ID, and leadership lost is lock\n"
	"lost: COMMAND is stopped as --on-lost says and dlock exits 70.\n"
	"\n"
	"Exit status: COMMAND's (128+N if killed by signal N, or if signal N came\n"
	"while waiting); 75 not acquired in time; 69 backend unavailable; 70 lock\n"
	"lost; 77 credentials or permission refused by the backend; 78\n"
	"configuration error; 64 usage error.\n"
	"\n"
	"Examples:\n"
	"  dlock run nightly-report -- ./report.sh\n"
	"  dlock run -w 0 -E 0 backup -- ./backup.sh       # skip if already running\n"
	"  dlock run -s dataset -- ./read-dataset          # many readers at once\n"
	"  dlock run --permits 4 ingest -- ./ingest        # at most 4 at once\n"
	"  dlock run -b redis://127.0.0.1:6379 -t 10s jobs/import -- ./import\n"
	"  dlock elect --id web-1 scheduler -- ./scheduler # one active scheduler\n"
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
static int exit_for(int rc, const cli_options *o)
{
	switch (rc) {
	case DLOCK_EBUSY:
	case DLOCK_ETIMEDOUT:
		return o->busy_code;
	case DLOCK_EUNAVAILABLE:
	case DLOCK_EBACKEND:
		return EXIT_UNAVAILABLE;
	case DLOCK_EACCES:
		return EXIT_NOPERM;
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

int cli_fail(int rc, const char *what, const cli_options *o)
{
	fprintf(stderr, "dlock: %s: %s: %s\n", what, dlock_strerror(rc), dlock_last_error_message());
	return exit_for(rc, o);
}

static void parse_args(int argc, char **argv, bool run, cli_options *o)
{
	static const struct option long_options[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "backend", required_argument, NULL, 'b' },
		{ "wait", required_argument, NULL, 'w' },
		{ "ttl", required_argument, NULL, 't' },
		{ "busy-exit", required_argument, NULL, 'E' },
		{ "on-lost", required_argument, NULL, 'L' },
		{ "shared", no_argument, NULL, 's' },
		{ "exclusive", no_argument, NULL, 'x' },
		{ "permits", required_argument, NULL, 'P' },
		{ "json", no_argument, NULL, 'j' },
		{ "id", required_argument, NULL, 'I' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	/* '+': stop at the first non-option, so COMMAND's own options stay its. */
	while ((c = getopt_long(argc, argv, "+c:b:w:t:E:sxh", long_options, NULL)) != -1) {
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
				die_usage(run ? "-w: '%s' is not a duration (250ms, 10s, 2m)" : "-w: '%s': run and elect only", optarg);
			o->wait_given = true;
			break;
		case 't':
			if (!run || !parse_duration(optarg, &o->ttl_ms))
				die_usage(run ? "-t: '%s' is not a duration (250ms, 10s, 2m)" : "-t: '%s': run and elect only", optarg);
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
		case 'I':
			if (!o->elect)
				die_usage("--id %s: elect only", optarg);
			o->id = optarg;
			break;
		case 's':
		case 'x':
			if (!run || o->elect)
				die_usage("-%s: run only", c == 's' ? "s" : "x");
			o->shared = c == 's';
			break;
		case 'P':
			code = strtol(optarg, &end, 10);
			if (!run || o->elect || *end || end == optarg || code < 1 || code > (long)DLOCK_PERMITS_MAX)
				die_usage(o->elect ? "--permits %s: run only"
				                   : "--permits: '%s' is not a number of permits (1-65536)", optarg);
			o->permits = (uint32_t)code;
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

int cli_open(const cli_options *o, dlock_client **ret_client, dlock_lock **ret_lock,
             dlock_election **ret_election)
{
	bool backend_is_uri = o->backend && strstr(o->backend, "://");
	const char *spec = backend_is_uri ? o->backend : o->config;
	dlock_election *election = NULL;
	dlock_client *client;
	dlock_lock *lock = NULL; /* untouched by a failed dlock_lock_new() */
	int rc;

	rc = dlock_client_new(spec, &client);
	if (rc != DLOCK_OK)
		return cli_fail(rc, "configuration", o);
	if (o->elect) {
		rc = dlock_election_new(client, o->resource, o->id, &election);
		lock = dlock_election_lock(election);
	} else {
		rc = dlock_lock_new(client, o->resource, &lock);
	}
	if (rc == DLOCK_OK && o->backend && !backend_is_uri) {
		rc = dlock_lock_set_backend(lock, o->backend);
		if (rc == DLOCK_EINVAL)
			rc = DLOCK_ECONFIG; /* an unknown backend name is a configuration error */
	}
	if (rc == DLOCK_OK && o->ttl_ms > 0)
		rc = dlock_lock_set_ttl(lock, o->ttl_ms);
	if (rc == DLOCK_OK && o->shared)
		rc = dlock_lock_set_mode(lock, DLOCK_MODE_READ);
	if (rc == DLOCK_OK && o->permits > 0)
		rc = dlock_lock_set_permits(lock, o->permits);
	if (rc != DLOCK_OK) {
		int code = cli_fail(rc, o->resource, o);

		if (election)
			dlock_election_free(election);
		else
			dlock_lock_free(lock);
		dlock_client_free(client);
		return code;
	}
	*ret_client = client;
	*ret_lock = lock;
	if (ret_election)
		*ret_election = election;
	return 0;
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
	if (argc >= 2 && (strcmp(argv[1], "run") == 0 || strcmp(argv[1], "elect") == 0 ||
	                  strcmp(argv[1], "status") == 0)) {
		bool run = strcmp(argv[1], "status") != 0;
		cli_options o = { .busy_code = EXIT_TEMPFAIL, .elect = strcmp(argv[1], "elect") == 0 };

		parse_args(argc - 1, argv + 1, run, &o);
		return run ? cli_run(&o) : cli_status(&o);
	}
	fprintf(stderr, "%s", usage_text);
	return EXIT_USAGE;
}
