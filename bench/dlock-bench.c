/* SPDX-License-Identifier: MIT */
/*
 * dlock-bench: what a lock costs, how fast a waiter gets it, and what
 * happens when many wait — measured side by side with the floor of the
 * same server in one run, so that the ratios hold on a noisy machine.
 *
 * This file reads the command line and hands over to a mode (mode-*.c).
 * The hidden modes tp-worker, handoff-waiter, handoff-floor-waiter,
 * waiters-child and fifo-waiter are this program re-executed as a worker process by the
 * modes themselves.
 * scripts/bench.sh runs every mode on every backend, with the peers, and
 * writes docs/bench/.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void usage(FILE *out)
{
	fputs("usage: dlock-bench MODE URI [OPTION...]\n"
	      "\n"
	      "Modes:\n"
	      "  latency     uncontended acquire+release pairs: dlock, the floor (the backend's bare\n"
	      "              lock; on ZooKeeper also its pipelined form, on Redis its fenced form)\n"
	      "              and one round trip; dlock's pair without a waiting thread (done on\n"
	      "              the callback thread, and dispatched after a poll()) against dlock's,\n"
	      "              interleaved round by round; mean, p50, p99, p99.9 and the ratios to\n"
	      "              the floors\n"
	      "  throughput  PROCS processes x THREADS threads over RESOURCES resources, each thread\n"
	      "              acquiring and releasing its own handle: acquisitions per second\n"
	      "  handoff     time from a holder's release to the acquisition by a waiter in another\n"
	      "              process, interleaved with the same handoff through the floor (Redis\n"
	      "              pub/sub message, ZooKeeper predecessor watch, blocking F_OFD_SETLKW),\n"
	      "              with round trips measured in the same run\n"
	      "  waiters     W waiters (each its own client) + the holder on one resource: handoff\n"
	      "              latency, server work and client CPU time per handoff, for each W of\n"
	      "              --waiters\n"
	      "  fifo        W waiters in separate processes queue one after another (each only once\n"
	      "              the server shows the previous one queued), then the holder releases:\n"
	      "              grant order against arrival order, inversions counted\n"
	      "  readers     read-write locks, for each R of --waiters: the READ acquire+release of\n"
	      "              one reader while R-1 others hold (latency, server work per pair), then\n"
	      "              R readers and one writer looping for --seconds (reads/s, writes/s)\n"
	      "  redlock     a Redlock URI only: uncontended pairs of dlock on it, dlock on its first\n"
	      "              master alone, the Redlock floor with and without its fencing round,\n"
	      "              the single-master floor and the round trips, interleaved as latency;\n"
	      "              ratio redlock/single and the fencing round's cost\n"
	      "  semaphore   a permit of a semaphore of 4 beside the mutex and its floor, interleaved\n"
	      "              as latency (ratio semaphore/mutex); then 4 permits under 8 threads for\n"
	      "              --seconds holding --hold us: acquisitions/s, the most holders at once\n"
	      "  failover    an election: its leader in another process killed (SIGKILL) while a\n"
	      "              participant waits, and a leader resigning: time to the next leader,\n"
	      "              --count rounds of each (default 5)\n"
	      "  versus      two or more URIs (dlock-bench versus URI URI... --labels A,B...), e.g.\n"
	      "              one server against a cluster, or without and with min-replicas=1:\n"
	      "              uncontended pairs on each, interleaved as latency, then handoffs to a\n"
	      "              waiter process on each, interleaved; ratios to the first URI\n"
	      "\n", out);
	fputs("URI (what dlock_client_new() gets; the floor follows from the scheme):\n"
	      "  redis://HOST:PORT            floor: SET NX PX + compare-and-delete EVALSHA, and\n"
	      "                               fenced (SET NX PX + INCR in one EVALSHA); PING\n"
	      "  redis://HOST:PORT,HOST:PORT[,...]  (Redlock) floor: dlock's Redlock scripts sent to\n"
	      "                               every master at once by bare hiredis, fenced (with the\n"
	      "                               fencing round) and plain; PING to every master at once\n"
	      "  redis+cluster://HOST:PORT[,...]  versus only (no floor: the bare client would need\n"
	      "                               dlock's routing)\n"
	      "  zk://HOST:PORT[,HOST:PORT]   floor: create ephemeral-sequential + get_children +\n"
	      "                               delete, each after the previous answer, and pipelined\n"
	      "                               (create and get_children in flight together); exists\n"
	      "  file:///DIR                  floor: fcntl(F_OFD_SETLK) lock + unlock; no round trip\n"
	      "\n"
	      "Options (defaults in brackets):\n"
	      "  --rounds N      latency, redlock, versus: rounds [10]\n"
	      "  --count N       latency, redlock, versus: pairs per round per subject [2000]; handoff: handoffs [200];\n"
	      "                  waiters: handoffs per W [300]; fifo: trials per W [3];\n"
	      "                  readers: read pairs per R [1000]\n"
	      "  --warmup N      latency, redlock, versus: pairs of each subject not measured; on ZooKeeper the\n"
	      "                  warm-up also lasts at least 2 s [2000 on ZooKeeper, else 1000]\n"
	      "  --threads T     throughput: threads per process [4]\n"
	      "  --procs P       throughput: processes [1]\n"
	      "  --resources R   throughput: resources the threads spread over [4]\n"
	      "  --seconds S     throughput, semaphore: measured seconds, after a 1 s warm-up [5]\n"
	      "  --waiters LIST  waiters: comma-separated waiter counts [1,4,16,64]; fifo: [16];\n"
	      "                  readers: reader counts [1,16,64]\n"
	      "  --hold-us N     waiters, semaphore: how long each holder keeps the lock [1000]\n"
	      "  --handoffs N    versus: handoffs per URI [200]\n"
	      "  --label NAME    the backend's name in results [redis, redis-cluster, zk or file]\n"
	      "  --labels LIST   versus: comma-separated names of the URIs, the subjects in results\n"
	      "                  [uri1,uri2,...]\n"
	      "  --json FILE     append one JSON object per result to FILE (JSON Lines):\n"
	      "                  {\"mode\":..,\"backend\":..,\"subject\":\"dlock|floor|rtt|...\",...}\n"
	      "  -h, --help      this text\n"
	      "\n"
	      "Resources are named bench/<mode>/<pid>...; dlock-bench removes what it creates.\n"
	      "It pins nothing: run it under taskset for placement (scripts/bench.sh does).\n"
	      "Exit status: 0, 1 on a failed measurement, 64 on a usage error.\n",
	      out);
}

static int bad_usage(const char *fmt, const char *arg)
{
	fputs("dlock-bench: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\nTry 'dlock-bench --help'.\n", stderr);
	return BENCH_EX_USAGE;
}

/* A positive int option, or -1. */
static int positive(const char *text)
{
	char *end;
	long v = strtol(text, &end, 10);

	return *text && !*end && v > 0 && v <= 1000000000 ? (int)v : -1;
}

static int parse_waiters(const char *text, bench_opts *o)
{
	char copy[256], *save = NULL;

	if (strlen(text) >= sizeof(copy))
		return -1;
	strcpy(copy, text);
	o->n_waiter_sets = 0;
	for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		int w = positive(p);

		if (w < 0 || w > 1000 || o->n_waiter_sets == BENCH_MAX_WAITER_SETS)
			return -1;
		o->waiters[o->n_waiter_sets++] = w;
	}
	return o->n_waiter_sets > 0 ? 0 : -1;
}

/* versus: --labels, one distinct name per URI; uri1, uri2... if none. */
static int parse_labels(const char *text, bench_opts *o)
{
	char copy[BENCH_MAX_URIS * 64], *save = NULL;
	int n = 0;

	if (!text) {
		for (int k = 0; k < o->n_uris; k++)
			snprintf(o->labels[k], sizeof(o->labels[k]), "uri%d", k + 1);
		return 0;
	}
	if (strlen(text) >= sizeof(copy))
		return -1;
	strcpy(copy, text);
	for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		if (n == o->n_uris || strlen(p) >= sizeof(o->labels[0]))
			return -1;
		for (int k = 0; k < n; k++)
			if (strcmp(o->labels[k], p) == 0)
				return -1;
		strcpy(o->labels[n++], p);
	}
	return n == o->n_uris ? 0 : -1;
}

/* versus: two or more URIs, each one the bench understands. */
static int versus_args(bench_opts *o, const char *labels)
{
	for (int k = 1; k < o->n_uris; k++) {
		bench_target t;

		if (bench_target_parse(o->uris[k], NULL, &t) != 0)
			return BENCH_EX_USAGE;
	}
	if (o->n_uris < 2)
		return bad_usage("%s", "versus: expected two or more URIs");
	if (parse_labels(labels, o) != 0)
		return bad_usage("--labels '%s': expected one distinct name per URI, comma-separated",
		                 labels);
	if (o->count < 0)
		o->count = 2000;
	if (o->handoffs < 0)
		o->handoffs = 200;
	return bench_versus(o);
}

int main(int argc, char **argv)
{
	enum { OPT_ROUNDS = 256, OPT_COUNT, OPT_WARMUP, OPT_THREADS, OPT_PROCS, OPT_RESOURCES,
	       OPT_SECONDS, OPT_WAITERS, OPT_HOLD, OPT_HANDOFFS, OPT_LABEL, OPT_LABELS, OPT_JSON };
	static const struct option longopts[] = {
		{ "rounds", required_argument, NULL, OPT_ROUNDS },
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "warmup", required_argument, NULL, OPT_WARMUP },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "procs", required_argument, NULL, OPT_PROCS },
		{ "resources", required_argument, NULL, OPT_RESOURCES },
		{ "seconds", required_argument, NULL, OPT_SECONDS },
		{ "waiters", required_argument, NULL, OPT_WAITERS },
		{ "hold-us", required_argument, NULL, OPT_HOLD },
		{ "handoffs", required_argument, NULL, OPT_HANDOFFS },
		{ "label", required_argument, NULL, OPT_LABEL },
		{ "labels", required_argument, NULL, OPT_LABELS },
		{ "json", required_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bench_opts o = { .rounds = 10, .count = -1, .warmup = -1, .threads = 4, .procs = 1,
		         .resources = 4, .seconds = 5, .hold_us = 1000, .handoffs = -1 };
	const char *label = NULL, *labels = NULL;
	int opt;

	/* A closed socket must not kill the program (hiredis writes with
	 * write()); workers inherit this through exec. */
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2 && strcmp(argv[1], "tp-worker") == 0)
		return bench_throughput_worker(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "handoff-waiter") == 0)
		return bench_handoff_worker(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "handoff-floor-waiter") == 0)
		return bench_handoff_floor_worker(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "waiters-child") == 0)
		return bench_waiters_worker(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "fifo-waiter") == 0)
		return bench_fifo_worker(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "failover-leader") == 0)
		return bench_failover_worker(argc - 1, argv + 1);
	parse_waiters("1,4,16,64", &o);

	while ((opt = getopt_long(argc, argv, "+h", longopts, NULL)) != -1 || optind < argc) {
		int v = 0;

		if (opt == -1) {
			/* A positional argument: options may follow it. */
			if (!o.mode)
				o.mode = argv[optind++];
			else if (!o.target.uri)
				o.target.uri = o.uris[o.n_uris++] = argv[optind++];
			else if (strcmp(o.mode, "versus") == 0 && o.n_uris < BENCH_MAX_URIS)
				o.uris[o.n_uris++] = argv[optind++];
			else
				return bad_usage("unexpected argument '%s'", argv[optind]);
			continue;
		}
		if (opt >= OPT_ROUNDS && opt <= OPT_HANDOFFS && opt != OPT_SECONDS && opt != OPT_WAITERS &&
		    (v = positive(optarg)) < 0)
			return bad_usage("'%s' is not a positive number", optarg);
		switch (opt) {
		case 'h':
			usage(stdout);
			return 0;
		case OPT_ROUNDS: o.rounds = v; break;
		case OPT_COUNT: o.count = v; break;
		case OPT_WARMUP: o.warmup = v; break;
		case OPT_THREADS: o.threads = v; break;
		case OPT_PROCS: o.procs = v; break;
		case OPT_RESOURCES: o.resources = v; break;
		case OPT_HOLD: o.hold_us = v; break;
		case OPT_HANDOFFS: o.handoffs = v; break;
		case OPT_SECONDS:
			o.seconds = strtod(optarg, NULL);
			if (!(o.seconds > 0 && o.seconds <= 3600))
				return bad_usage("--seconds '%s': expected a number of seconds, > 0", optarg);
			break;
		case OPT_WAITERS:
			if (parse_waiters(optarg, &o) != 0)
				return bad_usage("--waiters '%s': expected a list such as 1,4,16,64", optarg);
			o.waiters_given = true;
			break;
		case OPT_LABEL: label = optarg; break;
		case OPT_LABELS: labels = optarg; break;
		case OPT_JSON: o.json_path = optarg; break;
		default:
			usage(stderr);
			return BENCH_EX_USAGE;
		}
	}
	if (!o.mode || !o.target.uri)
		return bad_usage("%s", "expected MODE and URI");
	if (bench_target_parse(o.target.uri, label, &o.target) != 0)
		return BENCH_EX_USAGE;
	if (o.warmup < 0)
		o.warmup = o.target.kind == BENCH_ZK ? 2000 : 1000;
	if (o.procs > 64 || o.threads > 256 || o.resources > 1000)
		return bad_usage("%s", "at most 64 processes of 256 threads, over 1000 resources");
	if (strcmp(o.mode, "versus") == 0)
		return versus_args(&o, labels);
	if (o.target.cluster)
		return bad_usage("'%s': a Redis Cluster is measured by the versus mode only", o.target.uri);
	if (strcmp(o.mode, "latency") == 0) {
		if (o.count < 0)
			o.count = 2000;
		return bench_latency(&o);
	}
	if (strcmp(o.mode, "redlock") == 0) {
		if (o.count < 0)
			o.count = 2000;
		return bench_redlock(&o);
	}
	if (strcmp(o.mode, "throughput") == 0)
		return bench_throughput(&o);
	if (strcmp(o.mode, "semaphore") == 0) {
		if (o.count < 0)
			o.count = 1000;
		return bench_semaphore(&o);
	}
	if (strcmp(o.mode, "failover") == 0) {
		if (o.count < 0)
			o.count = 5;
		return bench_failover(&o);
	}
	if (strcmp(o.mode, "handoff") == 0) {
		if (o.count < 0)
			o.count = 200;
		return bench_handoff(&o);
	}
	if (strcmp(o.mode, "waiters") == 0) {
		if (o.count < 0)
			o.count = 300;
		return bench_waiters(&o);
	}
	if (strcmp(o.mode, "readers") == 0) {
		if (o.count < 0)
			o.count = 1000;
		if (!o.waiters_given) {
			o.n_waiter_sets = 0;
			parse_waiters("1,16,64", &o);
		}
		return bench_readers(&o);
	}
	if (strcmp(o.mode, "fifo") == 0) {
		if (o.count < 0)
			o.count = 3;
		if (!o.waiters_given)
			parse_waiters("16", &o);
		return bench_fifo(&o);
	}
	return bad_usage("unknown mode '%s'", o.mode);
}
