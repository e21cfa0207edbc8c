/* SPDX-License-Identifier: MIT */
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
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
	"usage: dlock run [-c CONFIG] [-b BACKEND|URI] [-w WAIT|-n] [-q] [-t TTL] [-E CODE]\n"
	"                 [-s|-x|--permits N] [--on-lost=term|ignore] RESOURCE -- COMMAND [ARG...]\n"
	"       dlock elect [-c CONFIG] [-b BACKEND|URI] [-w WAIT|-n] [-q] [-t TTL] [-E CODE]\n"
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
	"  -w, --wait DURATION   how long to wait for the lock: 250ms, 1.5s, 1m30s; a\n"
	"                        bare number is seconds (0.5); 0 tries once (default:\n"
	"                        the configuration's [defaults] wait, else forever)\n"
	"  -n, --nonblock        try once: the same as -w 0 (as flock -n)\n"
	"  -q, --quiet           no message when the lock is not acquired in time:\n"
	"                        only the exit status says so (as flock -q)\n"
	"  -t, --ttl DURATION    lease length on Redis, 100ms to 7 days (default: the\n"
	"                        backend's ttl, 30s); refused (78) on backends\n"
	"                        without leases (ZooKeeper, file)\n"
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
	"environment and no descriptor but 0, 1 and 2.  Signals sent to dlock are\n"
	"passed on to it (the terminal's reach it directly); dlock releases the\n"
	"lock when COMMAND exits.  ^Z stops both (a stopped dlock does not renew\n"
	"the lease).  If dlock is killed, COMMAND gets SIGTERM.  Before the lock is\n"
	"acquired, a signal that would end dlock ends the wait: dlock exits 128+N\n"
	"and COMMAND never runs.\n"
	"\n"
	"With elect, COMMAND also gets DLOCK_LEADER_ID, and leadership lost is lock\n"
	"lost: COMMAND is stopped as --on-lost says and dlock exits 70.\n"
	"\n"
	"Exit status: COMMAND's (128+N if killed by signal N, or if signal N came\n"
	"while waiting); 75 not acquired in time; 69 backend unavailable; 70 lock\n"
	"lost; 77 credentials or permission refused by the backend; 78\n"
	"configuration error; 64 usage error (the message says what was wrong).\n"
	"\n"
	"Examples:\n"
	"  dlock run nightly-report -- ./report.sh\n"
	"  dlock run -w 0 -E 0 backup -- ./backup.sh       # skip if already running\n"
	"  dlock run -s dataset -- ./read-dataset          # many readers at once\n"
	"  dlock run --permits 4 ingest -- ./ingest        # at most 4 at once\n"
	"  dlock run -b redis://127.0.0.1:6379 -t 10s jobs/import -- ./import\n"
	"  dlock elect --id web-1 scheduler -- ./scheduler # one active scheduler\n"
	"  dlock status --json nightly-report\n";

/* Say what was wrong with the command line, then how it goes; exit 64. */
__attribute__((format(printf, 1, 2), noreturn))
static void die_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "dlock: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n%s", usage_text);
	exit(EXIT_USAGE);
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
	/* -q: not getting the lock in time is said by the exit status alone. */
	if (!(o->quiet && (rc == DLOCK_EBUSY || rc == DLOCK_ETIMEDOUT)))
		fprintf(stderr, "dlock: %s: %s: %s\n", what, dlock_strerror(rc), dlock_last_error_message());
	return exit_for(rc, o);
}

/* The subcommands an option belongs to. */
enum {
	FOR_RUN = 1 << 0,
	FOR_ELECT = 1 << 1,
	FOR_STATUS = 1 << 2,
};

static const struct option long_options[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "backend", required_argument, NULL, 'b' },
	{ "wait", required_argument, NULL, 'w' },
	{ "nonblock", no_argument, NULL, 'n' },
	{ "quiet", no_argument, NULL, 'q' },
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

/* The option as the user should read its name, and where it applies. */
static const struct {
	int c;
	const char *name;
	unsigned where;
	const char *where_text;
} option_uses[] = {
	{ 'w', "-w", FOR_RUN | FOR_ELECT, "run and elect" },
	{ 'n', "-n", FOR_RUN | FOR_ELECT, "run and elect" },
	{ 'q', "-q", FOR_RUN | FOR_ELECT, "run and elect" },
	{ 't', "-t", FOR_RUN | FOR_ELECT, "run and elect" },
	{ 'E', "-E", FOR_RUN | FOR_ELECT, "run and elect" },
	{ 'L', "--on-lost", FOR_RUN | FOR_ELECT, "run and elect" },
	{ 's', "-s", FOR_RUN, "run" },
	{ 'x', "-x", FOR_RUN, "run" },
	{ 'P', "--permits", FOR_RUN, "run" },
	{ 'I', "--id", FOR_ELECT, "elect" },
	{ 'j', "--json", FOR_STATUS, "status" },
};

/* Refuse option c in a subcommand it does not belong to. */
static void check_applies(int c, unsigned subcommand)
{
	for (size_t i = 0; i < sizeof(option_uses) / sizeof(option_uses[0]); i++)
		if (option_uses[i].c == c && !(option_uses[i].where & subcommand))
			die_usage("option %s applies to %s only", option_uses[i].name, option_uses[i].where_text);
}

/*
 * What getopt_long() refused, said in the command's own words (its own
 * messages would name "run" as the program).  arg is the element that
 * held the option.
 */
static void die_bad_option(int c, const char *arg)
{
	bool is_long = strncmp(arg, "--", 2) == 0;
	size_t name_len = is_long ? strcspn(arg, "=") : 0;

	if (c == ':') {
		if (is_long)
			die_usage("option '%.*s' needs a value", (int)name_len, arg);
		die_usage("option '-%c' needs a value", optopt);
	}
	if (!is_long)
		die_usage("unknown option '-%c'", optopt);
	for (const struct option *lo = long_options; lo->name; lo++) {
		/* getopt takes an unambiguous prefix: --js for --json. */
		if (strncmp(lo->name, arg + 2, name_len - 2) != 0)
			continue;
		if (lo->has_arg == no_argument && arg[name_len] == '=')
			die_usage("option '--%s' takes no value", lo->name);
		if (strlen(lo->name) != name_len - 2)
			die_usage("option '%.*s' is ambiguous", (int)name_len, arg);
	}
	die_usage("unknown option '%.*s'", (int)name_len, arg);
}

/* A lease length: a duration above 0, which the library would take for
 * "the backend's default"; the library checks the range. */
static void parse_ttl(const char *text, cli_options *o)
{
	if (dlock_parse_duration(text, &o->ttl_ms) != DLOCK_OK)
		die_usage("-t: %s", dlock_last_error_message());
	if (o->ttl_ms <= 0)
		die_usage("-t: '%s' is not a lease length: leases last from 100ms to 7 days", text);
	o->ttl_given = true;
	o->ttl_text = text;
}

/* The options and operands of subcommand (FOR_RUN, _ELECT or _STATUS),
 * from argv[1] on (argv[0] is the subcommand's name). */
static void parse_args(int argc, char **argv, unsigned subcommand, cli_options *o)
{
	bool run = subcommand != FOR_STATUS;
	bool nonblock = false;
	int c;

	/* '+': stop at the first non-option, so COMMAND's own options stay its;
	 * ':': a missing value comes back as ':', and opterr 0 keeps getopt's
	 * own messages out (die_bad_option() says it). */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:c:b:w:nqt:E:sxh", long_options, NULL)) != -1) {
		char *end;
		long code;

		if (c == '?' || c == ':')
			die_bad_option(c, argv[optind - 1]);
		check_applies(c, subcommand);
		switch (c) {
		case 'c':
			o->config = optarg;
			break;
		case 'b':
			o->backend = optarg;
			break;
		case 'w':
			if (dlock_parse_duration(optarg, &o->wait_ms) != DLOCK_OK)
				die_usage("-w: %s", dlock_last_error_message());
			o->wait_given = true;
			break;
		case 'n':
			nonblock = true;
			break;
		case 'q':
			o->quiet = true;
			break;
		case 't':
			parse_ttl(optarg, o);
			break;
		case 'E':
			code = strtol(optarg, &end, 10);
			if (*end || end == optarg || code < 0 || code > 255)
				die_usage("-E: '%s' is not an exit status (0-255)", optarg);
			o->busy_code = (int)code;
			break;
		case 'L':
			if (strcmp(optarg, "term") != 0 && strcmp(optarg, "ignore") != 0)
				die_usage("--on-lost: '%s' is neither term nor ignore", optarg);
			o->on_lost_ignore = strcmp(optarg, "ignore") == 0;
			break;
		case 'I':
			o->id = optarg;
			break;
		case 's':
		case 'x':
			o->shared = c == 's';
			break;
		case 'P':
			code = strtol(optarg, &end, 10);
			if (*end || end == optarg || code < 1 || code > (long)DLOCK_PERMITS_MAX)
				die_usage("--permits: '%s' is not a number of permits (1-%u)", optarg,
				          DLOCK_PERMITS_MAX);
			o->permits = (uint32_t)code;
			break;
		case 'j':
			o->json = true;
			break;
		case 'h':
			printf("%s\n%s", usage_text, help_text);
			exit(0);
		default:
			die_usage("option '%s' is not understood", argv[optind - 1]);
		}
	}
	/* -n wins over -w, in either order, as with flock(1). */
	if (nonblock) {
		o->wait_ms = 0;
		o->wait_given = true;
	}
	if (optind >= argc)
		die_usage("no RESOURCE given");
	o->resource = argv[optind++];
	if (!run) {
		if (optind < argc)
			die_usage("unexpected argument '%s' after RESOURCE '%s'", argv[optind], o->resource);
		return;
	}
	if (optind >= argc)
		die_usage("no -- COMMAND after RESOURCE '%s'", o->resource);
	if (strcmp(argv[optind], "--") != 0)
		die_usage("'%s' after RESOURCE '%s': expected -- and then COMMAND (options go before RESOURCE)",
		          argv[optind], o->resource);
	if (++optind >= argc)
		die_usage("no COMMAND given after --");
	if (!*argv[optind])
		die_usage("COMMAND is an empty string");
	o->command = argv + optind;
}

/*
 * Whether the handle's backend keeps its holds as leases, which a TTL
 * sets the length of: the Redis family (redis://, redis+unix:// and the
 * like).  The library takes a TTL on every backend and ignores it where
 * there are no leases, so that a program need not know where a resource
 * is routed; the command refuses it there instead, as the backend
 * refuses a ?ttl= in its URI, since a user who types -t expects it to
 * mean something.
 */
static bool has_leases(const dlock_lock *lock)
{
	const char *uri = dlock_lock_backend_uri(lock);

	return uri && strncmp(uri, "redis", 5) == 0;
}

/* Say that -t means nothing on the handle's backend; exit 78, as for a
 * ?ttl= in its URI. */
static int refuse_ttl(const dlock_lock *lock, const cli_options *o)
{
	fprintf(stderr, "dlock: %s: -t %s: backend '%s' (%s) has no leases: a hold there lasts "
	        "until it is released or its holder is gone; -t applies to Redis backends only\n",
	        o->resource, o->ttl_text, dlock_lock_backend_name(lock), dlock_lock_backend_uri(lock));
	return EXIT_CONFIG;
}

int cli_open(const cli_options *o, dlock_client **ret_client, dlock_lock **ret_lock,
             dlock_election **ret_election)
{
	bool backend_is_uri = o->backend && strstr(o->backend, "://");
	const char *spec = backend_is_uri ? o->backend : o->config;
	dlock_election *election = NULL;
	dlock_client *client;
	dlock_lock *lock = NULL; /* untouched by a failed dlock_lock_new() */
	int rc, code = 0;

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
	if (rc == DLOCK_OK && o->ttl_given) {
		if (has_leases(lock))
			rc = dlock_lock_set_ttl(lock, o->ttl_ms);
		else
			code = refuse_ttl(lock, o);
	}
	if (rc == DLOCK_OK && !code && o->shared)
		rc = dlock_lock_set_mode(lock, DLOCK_MODE_READ);
	if (rc == DLOCK_OK && !code && o->permits > 0)
		rc = dlock_lock_set_permits(lock, o->permits);
	if (rc != DLOCK_OK)
		code = cli_fail(rc, o->resource, o);
	if (code) {
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

/* Whether arg is one of the subcommands' options (-b, --wait=1s, ...). */
static bool is_option(const char *arg)
{
	size_t len;

	if (arg[0] != '-' || !arg[1])
		return false;
	if (arg[1] != '-')
		return strchr("cbwnqtEsx", arg[1]) != NULL;
	len = strcspn(arg + 2, "=");
	for (const struct option *lo = long_options; lo->name; lo++)
		if (strlen(lo->name) == len && strncmp(lo->name, arg + 2, len) == 0)
			return true;
	return false;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		unsigned subcommand;
	} subcommands[] = { { "run", FOR_RUN }, { "elect", FOR_ELECT }, { "status", FOR_STATUS } };
	const char *name = argc >= 2 ? argv[1] : NULL;

	if (!name)
		die_usage("no subcommand given (run, elect or status)");
	if (strcmp(name, "--version") == 0) {
		printf("dlock %s\n", dlock_version());
		return 0;
	}
	if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
		printf("%s\n%s", usage_text, help_text);
		return 0;
	}
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
		unsigned subcommand = subcommands[i].subcommand;
		cli_options o = { .busy_code = EXIT_TEMPFAIL, .elect = subcommand == FOR_ELECT };

		if (strcmp(name, subcommands[i].name) != 0)
			continue;
		parse_args(argc - 1, argv + 1, subcommand, &o);
		return subcommand == FOR_STATUS ? cli_status(&o) : cli_run(&o);
	}
	if (is_option(name))
		die_usage("'%s' goes after the subcommand: dlock run|elect|status [OPTIONS] ...", name);
	if (name[0] == '-')
		die_usage("unknown option '%s'", name);
	die_usage("unknown subcommand '%s' (run, elect or status)", name);
}
