/* SPDX-License-Identifier: MIT */
/*
 * bench.h — what the files of dlock-bench share.
 *
 * dlock-bench measures dlock against the floor of its backend (the least
 * any lock on that server can cost) in one process, so that the ratios
 * hold on a noisy machine.  The files, by job:
 *
 *   dlock-bench.c     main: options, usage, dispatch to a mode
 *   target.c          the backend under test, parsed from its dlock URI
 *   stats.c           samples, percentiles, result lines (text and JSON)
 *   rounds.c          warm-up and interleaved rounds of uncontended pairs
 *   proc.c            clock, pipes with timeouts, worker processes
 *   floor.c           backend -> floor; clean-up of what dlock keeps
 *   floor-redis.c     bare hiredis: SET NX PX + compare-and-delete; PING;
 *                     pub/sub handoff
 *   floor-zk.c        bare ZooKeeper C client: create, get_children,
 *                     delete; exists; predecessor-watch handoff
 *   floor-file.c      bare fcntl(F_OFD_SETLK) lock and unlock;
 *                     F_OFD_SETLKW handoff
 *   floor-redlock.c   bare hiredis on several masters at once: dlock's
 *                     Redlock scripts, with and without the fencing round
 *   server-stats.c    server work: Redis INFO commandstats, ZooKeeper mntr
 *   mode-latency.c    uncontended acquire+release pairs
 *   mode-throughput.c acquisitions per second, threads x processes
 *   mode-handoff.c    release-to-acquire time across processes
 *   mode-waiters.c    handoffs among 1..64 waiters, with server work
 *                     and client CPU time
 *   mode-fifo.c       grant order against arrival order
 *   mode-redlock.c    Redlock beside one master and beside both floors
 *   mode-semaphore.c  a semaphore's permit beside the mutex and its floor;
 *                     N permits under 2N contenders
 *   mode-failover.c   an election's leader killed, or resigning: the
 *                     time without a leader
 *   mode-versus.c     the same pairs and handoffs on two or more URIs
 *                     (one server, a cluster, min-replicas), interleaved
 *
 * Nothing here pins threads or processes: scripts/bench.sh does (taskset).
 */
#ifndef DLOCK_BENCH_H
#define DLOCK_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dlock.h"

/* Exit code of a usage error (sysexits.h); any other failure exits 1. */
#define BENCH_EX_USAGE 64

/* Bounds for anything that waits on another process or a server, so no
 * run hangs forever. */
#define BENCH_ACQUIRE_WAIT_MS 60000
#define BENCH_PIPE_TIMEOUT_MS 120000

/* Worker processes (this program re-executed) talk to the parent through
 * these two descriptors. */
#define BENCH_FD_OUT 3 /* worker -> parent */
#define BENCH_FD_IN 4  /* parent -> worker */

#define BENCH_MAX_HOSTS 8
#define BENCH_MAX_WAITER_SETS 16
#define BENCH_MAX_URIS 8 /* versus */

/* ---- the backend under test (target.c) ---- */

typedef enum bench_kind { BENCH_REDIS, BENCH_ZK, BENCH_FILE } bench_kind;

typedef struct bench_target {
	bench_kind kind;
	bool cluster;          /* redis+cluster://: the hosts are seeds */
	const char *uri;       /* as given: what dlock_client_new() gets */
	const char *label;     /* "redis", "zk", "file", or --label */
	int n_hosts;
	char host[BENCH_MAX_HOSTS][64];
	int port[BENCH_MAX_HOSTS];
	char hosts[512];       /* ZooKeeper connect string without chroot */
	char dir[4096];        /* file backend directory */
} bench_target;

int bench_target_parse(const char *uri, const char *label, bench_target *ret);

/* ---- options (dlock-bench.c) ---- */

typedef struct bench_opts {
	const char *mode;
	bench_target target;
	const char *json_path;  /* NULL: no JSON Lines output */
	int rounds;             /* latency: rounds of COUNT pairs per subject */
	int count;              /* latency: pairs per round; handoff/waiters: handoffs */
	int warmup;             /* latency: pairs discarded first (each subject) */
	int threads, procs, resources;
	double seconds;         /* throughput: measured time after 1 s warm-up */
	int hold_us;            /* waiters: how long each holder keeps the lock */
	int n_waiter_sets;
	int waiters[BENCH_MAX_WAITER_SETS];
	bool waiters_given;     /* --waiters on the command line */
	/* versus: every URI (the first is target's) and its --labels name */
	int n_uris;
	const char *uris[BENCH_MAX_URIS];
	char labels[BENCH_MAX_URIS][64];
	int handoffs;           /* versus: handoffs per URI */
} bench_opts;

/* ---- clock and processes (proc.c) ---- */

int64_t bench_now_ns(void);
void bench_sleep_ns(int64_t ns);
/* Print "dlock-bench: " and the message on stderr and exit 1. */
void bench_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* The same for a failed dlock call: adds the code and the library's detail. */
void bench_fail_dlock(const char *what, int rc) __attribute__((noreturn));
/* Read or write exactly len bytes; -1 on error, end of file or timeout. */
int bench_read_full(int fd, void *buf, size_t len, int timeout_ms);
int bench_write_full(int fd, const void *buf, size_t len);

typedef struct bench_worker {
	pid_t pid;
	int out_fd; /* read what the worker writes on BENCH_FD_OUT */
	int in_fd;  /* write what the worker reads on BENCH_FD_IN */
} bench_worker;

/* Start this program with argv (argv[0] is the hidden mode), descriptors
 * 3 and 4 connected to the pipes of *ret and nothing else inherited. */
void bench_worker_start(char *const argv[], bench_worker *ret);
/* Close the pipes and reap the worker, killing it after timeout_ms.
 * Returns its exit status (as waitpid), or -1 if it had to be killed. */
int bench_worker_finish(bench_worker *w, int timeout_ms);

/* A resource name unique to this run: "bench/<what>/<pid>". */
void bench_resource(char *buf, size_t len, const char *what, pid_t pid);
/* A new client of uri and a lock handle on resource; with connect, one
 * round trip (a query), so that the connection or session is up before
 * anything is measured. */
void bench_lock_open(const char *uri, const char *resource, bool connect, dlock_client **client,
                     dlock_lock **lock);

/* ---- samples and results (stats.c) ---- */

typedef struct bench_samples {
	int64_t *ns;
	size_t n, cap;
} bench_samples;

typedef struct bench_summary {
	size_t n;
	double mean_us, p50_us, p90_us, p99_us, p999_us, min_us, max_us;
} bench_summary;

void bench_samples_add(bench_samples *s, int64_t ns);
void bench_samples_free(bench_samples *s);
/* Sorts the samples.  All zero for none. */
bench_summary bench_summarize(bench_samples *s);

/* One result: a JSON object built key by key, printed as one line. */
typedef struct bench_result {
	char buf[4096];
	size_t len;
} bench_result;

void bench_result_begin(bench_result *r, const bench_opts *o, const char *mode, const char *subject);
void bench_result_str(bench_result *r, const char *key, const char *value);
void bench_result_int(bench_result *r, const char *key, int64_t value);
void bench_result_num(bench_result *r, const char *key, double value);
void bench_result_summary(bench_result *r, const bench_summary *s);
/* Append the line to --json FILE, if given. */
void bench_result_emit(bench_result *r, const bench_opts *o);

/* The human-readable table rows. */
void bench_print_header(void);
void bench_print_row(const char *name, const bench_summary *s);

/* ---- interleaved rounds (rounds.c) ---- */

/* One uncontended dlock acquire+release on lock; exits on failure. */
void bench_dlock_pair(dlock_lock *lock);
/* The same pair with the calls that do not block, on a handle-owned
 * lock: each done is waited for on this thread -- signaled from the
 * callback thread (DLOCK_DELIVER_THREAD), or dispatched here after a
 * poll() of the client's event fd when fd >= 0 (DLOCK_DELIVER_DISPATCH),
 * as an event loop would. */
void bench_dlock_pair_async(dlock_lock *lock, dlock_client *client, int fd);
/* A handle of client on resource owned by the handle, for those calls. */
dlock_lock *bench_owned_handle(dlock_client *client, const char *resource);
/* One operation of subject, measured by bench_rounds(). */
typedef void (*bench_run_fn)(void *ctx, int subject);
/* The warm-up (at least --warmup operations of each subject, and at least
 * 2 s on ZooKeeper, 0.2 s elsewhere), then --rounds rounds of --count
 * operations of each of the n subjects, the order reversed every other
 * round; each duration goes to samples[subject]. */
void bench_rounds(const bench_opts *o, const int *subjects, int n, bench_run_fn run, void *ctx,
                  bench_samples *samples);

/* ---- floors (floor-*.c) ---- */

/*
 * The least a lock on the backend's server costs: the same round trips
 * and operations as dlock's path with nothing of dlock's.  Each call exits
 * the program on failure with a message.
 *
 * A floor names its key, node or file after an id (the pid of the
 * process that owns it); the owner creates what the floor needs (the
 * ZooKeeper parent) and removes it on close.  A worker process opens the
 * same floor by the owner's id, as a non-owner, for the handoff floor.
 */
typedef struct bench_floor bench_floor;
struct bench_floor {
	/* One uncontended acquire+release pair. */
	void (*pair)(bench_floor *f);
	/* The same pair with the requests pipelined where the server allows
	 * it (ZooKeeper: create and get_children in flight together); NULL
	 * where pair is already the least (Redis, file). */
	void (*pair_pipelined)(bench_floor *f);
	/* The pair with a fencing token drawn (Redis: SET NX PX and INCR in
	 * one script); NULL where pair draws one already or none is drawn. */
	void (*pair_fenced)(bench_floor *f);
	/* One round trip to the server; NULL where there is none (file). */
	void (*rtt)(bench_floor *f);
	/* The bare handoff.  hold: take the lock, which must be free.
	 * unhold: release it so that a waiter is notified (Redis: the
	 * compare-and-delete script also PUBLISHes).  wait_acquire, in the
	 * waiter's process: queue behind the holder, sleep until the
	 * server's notification (a message on the release channel; the watch
	 * on the predecessor node; a blocking F_OFD_SETLKW), take the lock
	 * and return the time it was taken (bench_now_ns()), released again. */
	void (*hold)(bench_floor *f);
	void (*unhold)(bench_floor *f);
	int64_t (*wait_acquire)(bench_floor *f);
	/* How many wait on dlock's lock of resource, as the server shows it
	 * (Redis: see bench_redis_queued(); ZooKeeper: the children of the
	 * lock node but the holder), with *how naming what was counted; NULL
	 * where the server cannot tell (file). */
	int (*queued)(bench_floor *f, const char *resource, const char **how);
	/* Remove what the floor created and free it: bench_floor_close(). */
	void (*close)(bench_floor *f);
	void *impl;
};

/* Open the floor of t's backend; a floor still open when the program
 * exits (a failure) is closed then. */
bench_floor *bench_floor_open(const bench_target *t, int id, bool owner);
void bench_floor_close(bench_floor *f);
bench_floor *bench_floor_redis_open(const bench_target *t, int id, bool owner);
bench_floor *bench_floor_zk_open(const bench_target *t, int id, bool owner);
bench_floor *bench_floor_file_open(const bench_target *t, int id, bool owner);
/* The floor of a Redlock URI (several Redis hosts): dlock's own Redlock
 * scripts sent to every master at once by bare hiredis; pair leaves the
 * fencing round out, pair_fenced has it (floor-redlock.c). */
bench_floor *bench_floor_redlock_open(const bench_target *t, int id, bool owner);
/* Whether the floor's copies of dlock's Redlock scripts are the texts
 * dlock loaded on t's first master (true only after dlock has acquired
 * and released there). */
bool bench_redlock_scripts_match(const bench_target *t);

/* A printable holder-like token of the size dlock writes, so that the
 * floor moves as many bytes as dlock does. */
void bench_token(char *buf, size_t len);

/* Remove what dlock keeps after the last release of the bench's resource
 * names: Redis fencing counters, lock files.  (ZooKeeper removes dlock's
 * container nodes by itself.)  The bench's names are its own, so nothing
 * anyone else uses goes. */
void bench_forget(const bench_target *t, const char *const *resources, int n);
void bench_floor_redis_forget(const bench_target *t, const char *const *resources, int n);

/* dlock's waiters on resource as Redis shows them (default key format):
 * the entries of the wait queue dlock:{R}:q where that key exists (*how
 * "queue"), else the subscribers of the release channel
 * dlock:{R}:released, on which a dlock without a queue waits (*how
 * "channel"); -1 on an unexpected reply. */
struct redisContext;
struct redisReply;
int bench_redis_queued(struct redisContext *c, const char *resource, const char **how);
/* A connection to t's host i (5 s to connect, 30 s per command); exits on
 * failure. */
struct redisContext *bench_redis_connect(const bench_target *t, int i);
/* r, which must be a reply of type want; exits naming what otherwise. */
struct redisReply *bench_redis_must(struct redisContext *c, int want, struct redisReply *r,
                                    const char *what);
/* SCRIPT LOAD body, its SHA1 into sha. */
void bench_redis_load(struct redisContext *c, const char *body, char *sha, size_t len);

/* ---- server work (server-stats.c) ---- */

typedef struct bench_server_stats {
	bool valid;
	/* Redis: sum of calls= and usec= over every cmdstat_ line but INFO. */
	double redis_calls, redis_usec;
	/* ZooKeeper, summed over the servers of the connect string. */
	double zk_packets_received, zk_packets_sent;
	double zk_watch_deleted, zk_watch_changed, zk_watch_children, zk_watch_created;
	double zk_watches; /* watches set now (zk_watch_count) */
} bench_server_stats;

/* How many waiters the server sees queued on resource: entries of the
 * wait queue or subscribers of the release channel (Redis, see
 * bench_redis_queued()), watches set (ZooKeeper: each waiter watches one
 * node); -1 where it cannot tell. */
int bench_server_waiters(const bench_target *t, const char *resource);

/* Read the counters now; valid is false for the file backend. */
void bench_server_stats_read(const bench_target *t, bench_server_stats *ret);
/* Add the deltas (after - before) / n to r as "<counter>_per_<unit>"
 * (unit: handoff, pair), print them too. */
void bench_server_stats_report(const bench_target *t, const bench_server_stats *before,
                               const bench_server_stats *after, double n, const char *unit,
                               bench_result *r);

/* ---- modes (mode-*.c) ---- */

int bench_latency(const bench_opts *o);
int bench_throughput(const bench_opts *o);
int bench_handoff(const bench_opts *o);
int bench_waiters(const bench_opts *o);
int bench_fifo(const bench_opts *o);
int bench_readers(const bench_opts *o);
int bench_redlock(const bench_opts *o);
int bench_semaphore(const bench_opts *o);
int bench_failover(const bench_opts *o);
int bench_versus(const bench_opts *o);

/* The handoff of mode-handoff.c, which the versus mode shares.  A
 * handoff-waiter worker for count handoffs of resource; it writes one
 * int64 when ready, then one per handoff (bench_handoff_dlock()). */
#define BENCH_HANDOFF_WARMUP 5 /* handoffs first, not counted */
void bench_handoff_waiter_start(const char *uri, const char *resource, int count, bench_worker *ret);
/* One handoff of lock, which this process holds, to w's waiter: let it
 * queue, leave it 25 ms to be asleep on the lock (measuring round trips
 * into rtt and rtt_idle meanwhile where floor is given, measure true and
 * the floor has them), release, and take the lock back once the waiter
 * has had it.  Returns release -> the waiter's acquisition, in ns. */
int64_t bench_handoff_dlock(dlock_lock *lock, bench_worker *w, bench_floor *floor, bench_samples *rtt,
                            bench_samples *rtt_idle, bool measure);
/* Reap a waiter; exits the program unless it exited cleanly. */
void bench_handoff_finish(bench_worker *w, const char *who);

/* A READ handle on resource, tried once (taken and released); NULL when
 * the backend has no shared holds. */
dlock_lock *bench_read_handle(dlock_client *client, const char *resource);

/* Hidden modes: the worker processes, with their positional arguments. */
int bench_throughput_worker(int argc, char **argv);
int bench_handoff_worker(int argc, char **argv);
int bench_handoff_floor_worker(int argc, char **argv);
int bench_waiters_worker(int argc, char **argv);
int bench_fifo_worker(int argc, char **argv);
int bench_failover_worker(int argc, char **argv);

#endif /* DLOCK_BENCH_H */
