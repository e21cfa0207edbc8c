# SPDX-License-Identifier: MIT
"""bench_handoff.py -- the part of the benchmark report about the wait
queue's handoff (one notification per handoff): its targets, each a ratio of two figures
measured in the same run and judged here, never by hand; the FIFO check;
and the comparison of two runs (before and after a change).

Used by scripts/bench-report.py; standard library only.
"""
from bench_results import handoff, latency, ratio, select, table, times, us, verdict, waiters

WORK_64_TO_1 = 1.25         # Redis server work per handoff, 64 waiters / 1
LATENCY_64_TO_1 = 1.5       # Redis handoff latency (mean), 64 waiters / 1
HANDOFF_TO_FLOOR = 1.0      # Redis handoff / the bare pub/sub handoff: strictly below
ZK_TO_FLOOR = 0.9           # ZooKeeper uncontended / the sequential floor
ZK_TO_CURATOR = 1.0         # ZooKeeper uncontended / Curator's: strictly below
ZK_TO_PIPELINED = 1.05      # ZooKeeper uncontended / the pipelined floor
REDIS_UNCONTENDED = 1.1     # Redis uncontended / its floor


def _row(label, backend, value, detail, limit, strict=False):
    """A target row: (label, backend, measured text, verdict, value)."""
    if value is None:
        return [label, backend, detail or "not measured", "–", None]
    ok = value < limit if strict else value <= limit
    return [label, backend, f"{times(value)} ({detail})", verdict(ok), value]


def _info(label, backend, value, detail):
    """A figure with no target, shown beside the targets."""
    if value is None:
        return [label, backend, detail or "not measured", "–", None]
    return [label, backend, f"{times(value)} ({detail})", "(no target)", value]


def _ends(rows, key):
    """(value at W=1, at W=64, 'a → b' text) of a key of the waiters
    rows, or Nones: the targets compare exactly these two."""
    lo, hi = (rows.get(w, {}).get(key) for w in (1, 64))
    if lo is None or hi is None:
        return None, None, None
    return lo, hi, f"{lo:.1f} → {hi:.1f}"


def _means(a, b):
    """'x vs y, mean; p50 ratio' of two summaries, or None."""
    if not a or not b:
        return None
    text = f"{us(a['mean_us'])} vs {us(b['mean_us'])}, mean"
    p50 = ratio(a.get("p50_us"), b.get("p50_us"))
    return text + (f"; p50 {times(p50)}" if p50 is not None else "")


def fifo(results, backend):
    """The FIFO trials of a backend: {W: {trials, in_order, inversions,
    max_inversions, arrival, orders}}."""
    out = {}
    for r in select(results, mode="fifo", backend=backend, subject="dlock"):
        w = out.setdefault(int(r["waiters"]), {"trials": 0, "in_order": 0, "inversions": 0,
                                                "max_inversions": 0, "arrival": set(), "orders": []})
        w["trials"] += 1
        w["in_order"] += r.get("in_order") == "yes"
        w["inversions"] += int(r.get("inversions", 0))
        w["max_inversions"] += int(r.get("max_inversions", 0))
        w["arrival"].add(r.get("arrival", "?"))
        w["orders"].append(r.get("grant_order", ""))
    return dict(sorted(out.items()))


def target_rows(res):
    """Every row of the targets table, with its value (the ratio) last."""
    rows = []

    w = waiters(res, "redis")
    lo, hi, text = _ends(w, "redis_calls_per_handoff")
    rows.append(_row(f"Redis server work per handoff at 64 waiters ≤ {WORK_64_TO_1}× at 1", "redis",
                     ratio(hi, lo), text and f"command calls {text}", WORK_64_TO_1))
    lo, hi, text = _ends(w, "mean_us")
    rows.append(_row(f"Redis handoff latency at 64 waiters ≤ {LATENCY_64_TO_1}× at 1", "redis",
                     ratio(hi, lo), text and f"mean µs {text}", LATENCY_64_TO_1))
    lo, hi, text = _ends(w, "cpu_us_per_handoff")
    rows.append(_info("Client CPU per handoff, 64 waiters / 1", "redis", ratio(hi, lo), text and f"µs {text}"))

    d, f = handoff(res, "redis", "dlock"), handoff(res, "redis", "floor")
    rows.append(_row("Redis handoff (1 waiter) below the bare pub/sub handoff floor", "redis",
                     ratio(d and d.get("mean_us"), f and f.get("mean_us")),
                     _means(d, f), HANDOFF_TO_FLOOR, True))

    d, f = latency(res, "redis", "dlock"), latency(res, "redis", "floor")
    rows.append(_row(f"Uncontended Redis unchanged: ≤ {REDIS_UNCONTENDED}× its floor", "redis",
                     ratio(d and d.get("mean_us"), f and f.get("mean_us")),
                     _means(d, f), REDIS_UNCONTENDED))
    g = latency(res, "redis", "floor-fenced")
    rows.append(_info("Uncontended Redis / the fenced floor (SET NX PX + INCR in one script)", "redis",
                      ratio(d and d.get("mean_us"), g and g.get("mean_us")), _means(d, g)))
    rows.append(_info("The fenced floor / the plain floor: what drawing a token costs", "redis",
                      ratio(g and g.get("mean_us"), f and f.get("mean_us")), _means(g, f)))

    for b in ("zk", "zk3"):
        d = latency(res, b, "dlock")
        for subject, label, limit, strict in (
                ("floor", f"ZooKeeper uncontended ≤ {ZK_TO_FLOOR}× the sequential floor", ZK_TO_FLOOR, False),
                ("curator", "ZooKeeper uncontended below Curator's", ZK_TO_CURATOR, True),
                ("floor-pipelined", f"ZooKeeper uncontended ≤ {ZK_TO_PIPELINED}× the pipelined floor",
                 ZK_TO_PIPELINED, False)):
            o = latency(res, b, subject)
            rows.append(_row(label, b, ratio(d and d.get("mean_us"), o and o.get("mean_us")), _means(d, o),
                             limit, strict))

    for b in ("redis", "zk", "zk3"):
        label = "Grants in arrival order"
        trials = fifo(res, b)
        if not trials:
            rows.append([label, b, "not measured", "–", None])
            continue
        inv = sum(t["inversions"] for t in trials.values())
        n = sum(t["trials"] for t in trials.values())
        arrival = sorted(set().union(*(t["arrival"] for t in trials.values())))
        text = (f"{inv} inversions in {n} trials of "
                + ", ".join(f"{w} waiters" for w in trials) + f"; arrival told by {', '.join(arrival)}")
        rows.append([label, b, text, verdict(inv == 0), inv])

    for b in ("zk", "zk3", "file"):
        rows_w = waiters(res, b)
        lo, hi, text = _ends(rows_w, "cpu_us_per_handoff")
        rows.append(_info("Client CPU per handoff, 64 waiters / 1", b, ratio(hi, lo), text and f"µs {text}"))
        lo, hi, text = _ends(rows_w, "mean_us")
        rows.append(_info("Handoff latency, 64 waiters / 1", b, ratio(hi, lo), text and f"mean µs {text}"))
    return rows


def section(res):
    """The markdown of the handoff targets and the FIFO check."""
    md = ["\n## Targets (one notification per handoff)\n"]
    rows = target_rows(res)
    md.append(table(["target", "backend", "measured", "result"], [r[:4] for r in rows], left=3))
    md.append("\nEvery ratio is of two figures from the same run: the waiters mode's W=64 and W=1 "
              "(shown as W=1 → W=64) "
              "(server work from the server's counters, handoff latency as the mean; client CPU is "
              "user + system time of the waiters' process and the holder's over the same window); "
              "the handoff mode's dlock and bare pub/sub handoffs, interleaved in one process; the "
              "latency mode's dlock, sequential floor (create, get_children, delete, each after the "
              "previous answer) and pipelined floor (create and get_children in flight together, "
              "then delete), interleaved in one process, and Curator's run alternating with it.  "
              "Judged on means, as the targets' ratios are; the p50 ratio is shown beside them, "
              "since on a shared machine a few slow outliers move a mean.  \"Below\" is strict.  "
              "Rows marked (no target) are shown for comparison.")

    md.append("\n## Grant order (FIFO)\n")
    trs = []
    for b in ("redis", "zk", "zk3", "file"):
        for w, t in fifo(res, b).items():
            trs.append([b, w, t["trials"], "yes" if t["inversions"] == 0 else "no",
                        f"{t['in_order']} of {t['trials']}",
                        f"{t['inversions']} of {t['max_inversions']}", ", ".join(sorted(t["arrival"])),
                        "; ".join(t["orders"])])
    if trs:
        md.append(table(["backend", "waiters", "trials", "in order", "trials in order",
                         "inversions (of possible)", "arrival told by", "grant order per trial"], trs,
                        left=1))
    md.append("\nW waiters, each its own process and client, queue one at a time on a lock the "
              "parent holds: waiter i is told to acquire only once the server shows waiter i-1 "
              "queued — `queue`: the entries of dlock's Redis wait queue `dlock:{R}:q`; `channel`: "
              "the subscribers of the release channel, where there is no queue (the count must hold "
              "50 ms); `children`: the nodes under the ZooKeeper lock node; `delay`: 200 ms between "
              "arrivals where the server shows none (the file backend).  Then the parent releases; "
              "the grant order is the order of the waiters' acquire times (the holds cannot "
              "overlap), written as arrival numbers.  An inversion is a pair granted in the "
              "opposite order of arrival.")
    return md


def compare(before_doc, after_doc):
    """Markdown comparing two results.json documents, row by row."""
    before, after = before_doc["results"], after_doc["results"]
    md = [f"# dlock benchmark: before ({before_doc['versions'].get('dlock_commit')}, "
          f"{before_doc['generated']}) and after ({after_doc['versions'].get('dlock_commit')}, "
          f"{after_doc['generated']})\n"]
    rows = []
    for rb, ra in zip(target_rows(before), target_rows(after)):
        rows.append([ra[0], ra[1], rb[2], rb[3], ra[2], ra[3]])
    md.append(table(["target", "backend", "before", "", "after", ""], rows, left=2))
    md.append("")
    trs = []
    for b in ("redis", "zk", "zk3", "file"):
        wb, wa = waiters(before, b), waiters(after, b)
        for w in sorted(set(wb) | set(wa)):
            x, y = wb.get(w) or {}, wa.get(w) or {}
            key = {"redis": "redis_calls_per_handoff", "file": None}.get(b, "zk_packets_received_per_handoff")
            work = [f"{r[key]:.1f}" if key and r.get(key) is not None else "–" for r in (x, y)]
            cpu = [us(r.get("cpu_us_per_handoff")) for r in (x, y)]
            trs.append([b, w, us(x.get("mean_us")), us(y.get("mean_us")), work[0], work[1], cpu[0], cpu[1]])
    md.append(table(["backend", "waiters", "handoff before", "after", "server work before", "after",
                     "client CPU before", "after"], trs, left=1))
    md.append("\nServer work: Redis command calls, ZooKeeper packets received, per handoff.  Two runs "
              "are two moments of the machine: the ratios inside each run are the robust figures.")
    return "\n".join(md) + "\n"
