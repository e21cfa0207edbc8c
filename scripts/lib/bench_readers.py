# SPDX-License-Identifier: MIT
"""bench_readers.py -- the part of the benchmark report about read-write
locks: an uncontended READ acquire+release beside the mutex
and the floor, measured in the latency mode's rounds; the readers mode's
read pair as readers pile up (latency and server work per pair) and R
readers with one writer (reads and writes per second).

Used by scripts/bench-report.py; standard library only.
"""
from bench_results import combine, latency, num, ratio, select, table, times, us

BACKENDS = ["redis", "zk", "zk3", "file"]


def _readers(results, backend, part):
    rows = {}
    for r in select(results, mode="readers", backend=backend, subject="dlock", part=part):
        rows.setdefault(int(r["readers"]), []).append(r)
    return {n: recs for n, recs in sorted(rows.items())}


def _work(rec):
    """Server work per read pair, as text: Redis commands or ZooKeeper packets."""
    if rec.get("redis_calls_per_pair") is not None:
        return f"{num(rec['redis_calls_per_pair'], 1)} command calls"
    if rec.get("zk_packets_received_per_pair") is not None:
        return f"{num(rec['zk_packets_received_per_pair'], 1)} packets in"
    return "–"


def section(res):
    """The markdown of the read-write lock measurements."""
    md = ["\n## Read-write locks\n"]
    rows = []
    for b in BACKENDS:
        d, rd, f = latency(res, b, "dlock"), latency(res, b, "dlock-read"), latency(res, b, "floor")
        if not rd:
            if d:
                rows.append([b, "no shared holds", us(d.get("mean_us")), "–", "–"])
            continue
        rows.append([b, us(rd.get("mean_us")), us(d and d.get("mean_us")),
                     times(ratio(rd.get("mean_us"), f and f.get("mean_us"))),
                     times(ratio(d and d.get("mean_us"), f and f.get("mean_us")))])
    if rows:
        md.append("### Uncontended acquire + release, READ beside the mutex\n")
        md.append(table(["backend", "READ mean", "mutex mean", "READ / floor", "mutex / floor"], rows))
        md.append("\nREAD pairs run in the latency mode's rounds, interleaved with the mutex, the floor "
                  "and the round trip (see the latency tables below for the floors).")
    rows = []
    for b in BACKENDS:
        if select(res, mode="readers", backend=b, part="unsupported"):
            rows.append([b, "–", "no shared holds", "–", "–", "–"])
            continue
        pairs, mixes = _readers(res, b, "read-pair"), _readers(res, b, "mix")
        for n in sorted(set(pairs) | set(mixes)):
            p = combine(pairs.get(n, []))
            m = mixes.get(n, [{}])[0]
            rows.append([b, n, us(p and p.get("mean_us")), _work(pairs.get(n, [{}])[0]),
                         num(m.get("reads_per_s"), 0), num(m.get("writes_per_s"), 0)])
    if rows:
        md.append("\n### Readers piling up, and a writer among them\n")
        md.append(table(["backend", "readers R", "read pair mean (R-1 others hold)",
                         "server work per read pair", "reads/s (R readers + 1 writer)", "writes/s"],
                        rows, left=1))
        md.append("\nThe read pair is one reader's READ acquire+release while R-1 other readers "
                  "(each its own client) hold; its server work should not grow with R.  The mix is R "
                  "reader threads and one writer thread, each its own client, looping acquire + "
                  "release on one resource: writes/s near 0 means readers keep the writer out (the "
                  "file backend's kernel order allows it; Redis and ZooKeeper serve arrival order).")
    return md
