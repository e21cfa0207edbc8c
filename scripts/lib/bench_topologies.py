# SPDX-License-Identifier: MIT
"""bench_topologies.py -- the part of the benchmark report about Redis
topologies: the versus mode's comparisons of dlock on one server against
dlock on a Redis Cluster, and on one server without and with
min-replicas=1; uncontended pairs and handoffs on each, interleaved in one
process, and their ratios to the first URI of each comparison.

Used by scripts/bench-report.py; standard library only.
"""
from bench_results import combine, ratio, select, table, times, us

# The comparisons scripts/bench.sh runs (the --label of each versus run),
# in the order shown, with the reference's name in the ratio's wording and
# what the ratio means.  A comparison not named here is shown after these,
# without the sentence.
COMPARISONS = [
    ("cluster", "one server",
     "A cluster runs the same scripts on the master of the resource's slot as one server "
     "runs them, so what a pair costs beyond one server's is the client's routing: the "
     "slot of the `{R}` tag, the master that owns it, and that master's connection; a "
     "handoff adds sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH` on the slot's master) in place "
     "of `SUBSCRIBE`/`PUBLISH`.  A ratio near 1 means the routing costs nothing "
     "measurable."),
    ("min-replicas", "none",
     "Both subjects talk to the same master, which has one replica.  With "
     "`min-replicas=1` every acquire sends `WAIT 1` after its script in the same write: "
     "no extra client round trip, but the answer waits for the replica's acknowledgement, "
     "a round trip from the master to its replica and back; the release sends none.  A "
     "waiter with `min-replicas` does not take a grant from the release message but tries "
     "once more so as to wait for its own write ([Replica acknowledgement]"
     "(../redis.md#replica-acknowledgement)), so a handoff pays one more round trip "
     "and the `WAIT`.  Here the replica shares the servers' CPU on loopback; across a "
     "network its acknowledgement costs a network round trip, about one more per "
     "acquire."),
]


def _comparisons(res):
    names = []
    for r in select(res, mode="versus"):
        if r.get("backend") not in names:
            names.append(r.get("backend"))
    known = [c for c, _, _ in COMPARISONS if c in names]
    return known + [n for n in names if n not in known]


def _subjects(res, name):
    """The labels of a comparison, the first URI (position 0) first."""
    pos = {}
    for r in select(res, mode="versus", backend=name):
        pos.setdefault(r.get("subject"), int(r.get("position", 0)))
    return sorted(pos, key=lambda s: pos[s])


def _measure(res, name, subject, measure):
    return combine(select(res, mode="versus", backend=name, subject=subject, measure=measure))


def _get(rec, key):
    return rec.get(key) if rec else None


def section(res):
    """The markdown of the versus comparisons."""
    names = _comparisons(res)
    if not names:
        return []
    md = ["\n## Redis topologies\n"]
    rows, ratios, sentences = [], [], []
    for name in names:
        subjects = _subjects(res, name)
        if not subjects:
            continue
        m = {s: (_measure(res, name, s, "pair"), _measure(res, name, s, "handoff")) for s in subjects}
        for s in subjects:
            pair, hand = m[s]
            rows.append([name, s, _get(pair, "count") or "–", us(_get(pair, "mean_us")),
                         us(_get(pair, "p50_us")), us(_get(pair, "p99_us")),
                         _get(hand, "count") or "–", us(_get(hand, "mean_us")),
                         us(_get(hand, "p50_us")), us(_get(hand, "p99_us"))])
        ref = subjects[0]
        ref_name = next((r for c, r, _ in COMPARISONS if c == name), ref)
        for s in subjects[1:]:
            (pair, hand), (rpair, rhand) = m[s], m[ref]
            ratios.append([f"{s} / {ref_name}",
                           times(ratio(_get(pair, "mean_us"), _get(rpair, "mean_us"))),
                           times(ratio(_get(pair, "p50_us"), _get(rpair, "p50_us"))),
                           times(ratio(_get(hand, "mean_us"), _get(rhand, "mean_us"))),
                           times(ratio(_get(hand, "p50_us"), _get(rhand, "p50_us")))])
        sentences += [f"- **{name}.** {text}" for c, _, text in COMPARISONS if c == name]
    md.append(table(["comparison", "subject", "pairs", "pair mean", "pair p50", "pair p99",
                     "handoffs", "handoff mean", "handoff p50", "handoff p99"], rows, left=2))
    md.append("\n" + table(["ratio", "pair mean", "pair p50", "handoff mean", "handoff p50"],
                           ratios))
    md.append("\nEach comparison is one `dlock-bench versus` process per round: uncontended "
              "acquire + release pairs on each URI, interleaved round by round (which goes first "
              "alternates), then handoffs from a holder in that process to a waiter process on "
              "each URI, interleaved the same way.  `one`: the single redis-server of the other "
              "sections; `cluster`: three masters, one seed each in the URI; `none` and "
              "`min-replicas=1`: one master with one replica, the same server in both URIs.  A "
              "ratio is the second subject's figure over the first's: above 1, the second "
              "costs more.\n")
    md += sentences
    return md
