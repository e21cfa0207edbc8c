# SPDX-License-Identifier: MIT
"""bench_redlock.py -- the part of the benchmark report about Redlock on
several Redis masters: the redlock mode's uncontended pairs
(dlock on the Redlock URI, dlock on its first master alone, the Redlock
floor with and without its fencing round, the single-master floor, round
trips), the handoff on Redlock beside the single master's, and its
target judged from the run.

Used by scripts/bench-report.py; standard library only.
"""
from bench_results import combine, handoff, num, ratio, select, table, times, us, verdict

BACKEND = "redlock"         # the --label scripts/bench.sh gives the Redlock URI
SINGLE = "redis"            # the single-master backend of the other sections
TO_SINGLE = 1.3             # Redlock uncontended pair / one master's
TO_FLOOR = 1.1              # Redlock uncontended pair / its floor (3 parallel rounds)

SUBJECTS = ["redlock", "single", "floor-redlock", "floor-redlock-nofence", "floor-single",
            "rtt-round", "rtt"]
WHAT = {
    "redlock": "dlock, Redlock URI",
    "single": "dlock, first master alone",
    "floor-redlock": "bare hiredis, dlock's Redlock scripts, 3 rounds",
    "floor-redlock-nofence": "the same without the fencing round",
    "floor-single": "SET NX PX + compare-and-delete, first master",
    "rtt-round": "PING to every master at once",
    "rtt": "PING to the first master",
}


def _pairs(res):
    return {s: combine(select(res, mode="redlock", backend=BACKEND, subject=s)) for s in SUBJECTS}


def _mean(rec):
    return rec.get("mean_us") if rec else None


def _p50(rec):
    return rec.get("p50_us") if rec else None


def section(res):
    """The markdown of the Redlock measurements and their target."""
    p = _pairs(res)
    if not p["redlock"]:
        return []
    masters = select(res, mode="redlock", backend=BACKEND, subject="redlock")[0].get("masters", "?")
    md = [f"\n## Redlock ({masters} masters)\n",
          "### Uncontended acquire + release\n"]
    rows = []
    for s in SUBJECTS:
        r = p[s]
        if r:
            rows.append([s, WHAT[s], r["count"], us(r.get("mean_us")), us(r.get("p50_us")),
                         us(r.get("p99_us")), times(ratio(r.get("mean_us"), _mean(p["single"])))])
    md.append(table(["subject", "what", "n", "mean", "p50", "p99", "/ single"], rows, left=2))
    fence = None
    if p["floor-redlock"] and p["floor-redlock-nofence"]:
        fence = _mean(p["floor-redlock"]) - _mean(p["floor-redlock-nofence"])
    md.append("\nOne dlock-bench process runs every subject, interleaved round by round.  The "
              "masters are separate redis-servers pinned like the single one.  The fencing "
              "round's cost is floor-redlock − floor-redlock-nofence"
              + (f": {us(fence)}, {num(100 * fence / _mean(p['redlock']), 0)} % of the Redlock "
                 "pair." if fence is not None else "."))
    rows = []
    for b in (BACKEND, SINGLE):
        floor = handoff(res, b, "floor")
        for s in ("dlock", "floor"):
            h = handoff(res, b, s)
            if h:
                rows.append([b, s, h["count"], us(h.get("mean_us")), us(h.get("p50_us")),
                             us(h.get("p99_us")), times(ratio(_mean(h), _mean(floor)))])
    if rows:
        md.append("\n### Handoff, Redlock beside one master\n")
        md.append(table(["backend", "subject", "n", "mean", "p50", "p99", "/ its floor"], rows,
                        left=2))
        md.append("\nThe Redlock floor's waiter subscribes on every master's release channel and "
                  "tries again after each message; dlock's Redlock waiter does the same with a "
                  "backoff (it has no queue).")
    md.append("\n### Targets (Redlock)\n")
    value = ratio(_mean(p["redlock"]), _mean(p["single"]))
    to_floor = ratio(_mean(p["redlock"]), _mean(p["floor-redlock"]))
    rows = [["Redlock uncontended pair / one master's", f"≤ {TO_SINGLE}",
             f"{times(value)} ({us(_mean(p['redlock']))} vs {us(_mean(p['single']))}, mean)",
             verdict(value is not None and value <= TO_SINGLE)],
            ["Redlock uncontended pair / its floor (3 parallel rounds)", f"≤ {TO_FLOOR}",
             f"{times(to_floor)} mean, "
             f"{times(ratio(_p50(p['redlock']), _p50(p['floor-redlock'])))} p50 "
             f"({us(_mean(p['redlock']))} vs {us(_mean(p['floor-redlock']))}, mean)",
             verdict(to_floor is not None and to_floor <= TO_FLOOR)],
            ["Redlock floor / single-master floor", "(no target)",
             times(ratio(_mean(p["floor-redlock"]), _mean(p["floor-single"]))), "–"],
            ["round to every master / one round trip", "(no target)",
             times(ratio(_mean(p["rtt-round"]), _mean(p["rtt"]))), "–"],
            ["Redlock handoff / one master's (dlock)", "(no target)",
             times(ratio(_mean(handoff(res, BACKEND, "dlock")), _mean(handoff(res, SINGLE, "dlock")))),
             "–"],
            ["fencing round's cost", "reported", "–" if fence is None else
             f"{us(fence)}, {num(100 * fence / _mean(p['redlock']), 0)} % of the pair", "–"]]
    md.append(table(["target", "limit", "measured", "result"], rows, left=2))
    md.append("\nThe Redlock pair is 3 rounds (acquire, fencing, release) where one master's is 2 "
              "round trips, so even masters answering perfectly in parallel put the ratio at 1.5 "
              "when a round trip is network time.  On loopback a round trip is CPU time — the "
              "client's system calls and each server's script — and the masters share the "
              "servers' CPU, so a round to every master costs about the sum of one round trip "
              "each (the round row above): the figure that shows what dlock adds is the ratio to "
              "its floor.")
    return md
