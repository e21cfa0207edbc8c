# SPDX-License-Identifier: MIT
"""bench_results.py -- reading the results of scripts/bench.sh: selecting
and combining the rounds of one measurement, and the formatting the
report's tables share.  Used by scripts/bench-report.py and
bench_handoff.py; standard library only.
"""


# ---------------------------------------------------------------- aggregation

def select(results, **want):
    return [r for r in results if all(r.get(k) == v for k, v in want.items())]


def combine(recs):
    """One summary from the rounds of one measurement."""
    if not recs:
        return None
    out = {"rounds": len(recs)}
    n = [max(int(r.get("count", 1) or 1), 1) for r in recs]
    for key in ("mean_us", "p50_us", "p99_us", "p999_us"):
        vals = [(r[key], w) for r, w in zip(recs, n) if r.get(key) is not None]
        if vals:
            out[key] = sum(v * w for v, w in vals) / sum(w for _, w in vals)
    out["count"] = sum(n)
    rates = sorted(r["ops_per_s"] for r in recs if r.get("ops_per_s") is not None)
    if rates:
        mid = len(rates) // 2
        out["ops_per_s"] = rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2
        out["ops_per_s_min"], out["ops_per_s_max"] = rates[0], rates[-1]
    for key in recs[0]:
        if key.endswith("_per_handoff"):
            vals = [r[key] for r in recs if r.get(key) is not None]
            if vals:
                out[key] = sum(vals) / len(vals)
    return out


def latency(results, backend, subject):
    return combine(select(results, mode="latency", backend=backend, subject=subject))


def handoff(results, backend, subject):
    return combine(select(results, mode="handoff", backend=backend, subject=subject))


def throughput(results, backend, subject, procs=1):
    recs = [r for r in select(results, mode="throughput", backend=backend, subject=subject)
            if int(r.get("procs", 1)) == procs]
    return combine(recs)


def waiters(results, backend):
    rows = {}
    for r in select(results, mode="waiters", backend=backend, subject="dlock"):
        rows.setdefault(int(r["waiters"]), []).append(r)
    return {w: combine(recs) for w, recs in sorted(rows.items())}


# ---------------------------------------------------------------- formatting

def us(v):
    if v is None:
        return "–"
    if v >= 10000:
        return f"{v / 1000:.1f} ms"
    if v >= 1000:
        return f"{v / 1000:.2f} ms"
    return f"{v:.1f} µs"


def num(v, digits=2):
    return "–" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def times(v):
    return "–" if v is None else f"{v:.2f}×"


def table(header, rows, left=1):
    """Markdown table; the first `left` columns align left, the rest right."""
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def verdict(ok):
    return "**met**" if ok else "**missed**"
