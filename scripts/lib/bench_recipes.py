# SPDX-License-Identifier: MIT
"""bench_recipes.py -- the part of the benchmark report about semaphores
and leader election: a semaphore's permit beside the mutex
and its floor on each backend, N permits under 2N threads, and an
election's failover (a leader killed, a leader resigning) by backend.

Used by scripts/bench-report.py; standard library only.
"""
from bench_results import combine, num, ratio, select, table, times, us

BACKENDS = ["redis", "zk", "zk3", "file"]
FAILOVER = [("redis-ttl2s", "Redis, lease 2 s", "the lease (2 s) and a waiter's backoff (≤ 1 s)"),
            ("zk-session4s", "ZooKeeper, session 4 s",
             "the session timeout (4 s), which the server rounds up to its next tick (2 s)"),
            ("file", "file", "none: the kernel drops the lock; a waiter's nap (≤ 200 ms)")]


def _semaphore(res):
    rows, contended = [], []
    for b in BACKENDS:
        p = {s: combine(select(res, mode="semaphore", backend=b, subject=s))
             for s in ("semaphore", "mutex", "floor")}
        if not p["semaphore"]:
            continue
        rows.append([b, p["semaphore"]["count"], us(p["semaphore"].get("mean_us")),
                     us(p["mutex"].get("mean_us") if p["mutex"] else None),
                     us(p["floor"].get("mean_us") if p["floor"] else None),
                     times(ratio(p["semaphore"].get("mean_us"),
                                 p["mutex"].get("mean_us") if p["mutex"] else None)),
                     times(ratio(p["semaphore"].get("mean_us"),
                                 p["floor"].get("mean_us") if p["floor"] else None))])
        for r in select(res, mode="semaphore", backend=b, subject="contended"):
            contended.append([b, r.get("permits"), r.get("threads"), r.get("hold_us"),
                              num(r.get("acquisitions_per_s"), 0), r.get("most_holders")])
    return rows, contended


def section(res):
    """The markdown of the semaphore and election measurements."""
    rows, contended = _semaphore(res)
    fo = [(b, what, bound, {s: combine(select(res, mode="failover", backend=b, subject=s))
                            for s in ("killed", "resigned")}) for b, what, bound in FAILOVER]
    if not rows and not any(p["killed"] for _, _, _, p in fo):
        return []
    md = ["\n## Semaphores and leader election\n"]
    if rows:
        md.append("### A semaphore's permit, uncontended\n")
        md.append(table(["backend", "n", "semaphore (4)", "mutex", "floor", "/ mutex", "/ floor"],
                        rows))
        md.append("\nOne dlock-bench process per backend: acquire + release of a permit of a "
                  "semaphore of 4, of a lock, and of the floor the lock is measured against "
                  "(fenced on Redis, pipelined on ZooKeeper), interleaved round by round.")
    if contended:
        md.append("\n### N permits, 2N contenders\n")
        md.append(table(["backend", "permits", "threads", "hold µs", "acquisitions/s",
                         "most holders at once"], contended))
    frows = []
    for _, what, bound, p in fo:
        k, r = p["killed"], p["resigned"]
        if k:
            frows.append([what, k["count"], us(k.get("mean_us")), us(k.get("p99_us")),
                          us(r.get("mean_us") if r else None), bound])
    if frows:
        md.append("\n### Election failover\n")
        md.append(table(["backend", "rounds", "leader killed → next leads (mean)", "max-ish (p99)",
                         "leader resigns → next leads", "bound"], frows))
        md.append("\nA leader in another process is killed with SIGKILL while a participant waits "
                  "in its campaign; then a leader resigns while another waits.")
    return md
