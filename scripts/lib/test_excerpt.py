#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Print the telling lines of each failed test of a meson test run.

Usage: test_excerpt.py TESTLOG.JSON [LINES-PER-TEST]

scripts/test.sh calls it after a step that failed, so that the last
lines of its output, the part a CI page shows, say why each test failed:
a cmocka assertion and its source line, a torture run's findings, a
sanitizer's or valgrind's first report, or a timeout.
"""

import json
import re
import sys

# What makes a line worth showing, in the order of preference.
TELLING = [
    re.compile(r"^\[\s*(ERROR|LINE|FAILED)\s*\]"),  # cmocka
    re.compile(r"^torture: ([A-Z][A-Z ]{2,}|.*FAILED)"),  # torture findings
    re.compile(r"ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:|^SUMMARY: "),
    re.compile(r"^==\d+== (Invalid|Conditional|Syscall param|Mismatched)|definitely lost in"),
    re.compile(r"\b(error|Failure!|assert(ion)?|failed)\b", re.IGNORECASE),
]
BAD = {"FAIL", "TIMEOUT", "UNEXPECTEDPASS", "ERROR"}


def telling_lines(text, limit):
    lines = (text or "").splitlines()
    picked = []
    for pattern in TELLING:
        for i, line in enumerate(lines):
            if len(picked) >= limit:
                break
            if pattern.search(line) and (i, line) not in picked:
                picked.append((i, line))
    return [line for _, line in sorted(picked)]


def main():
    if len(sys.argv) < 2:
        sys.stderr.write(__doc__)
        return 64
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    try:
        with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
            results = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        print(f"  (no test log to excerpt: {e})")
        return 0
    for r in results:
        if r.get("result") not in BAD:
            continue
        text = (r.get("stdout") or "") + "\n" + (r.get("stderr") or "")
        lines = telling_lines(text, limit)
        if not lines:
            tail = [l for l in text.splitlines() if l.strip()][-limit:]
            lines = tail
        print(f"  why {r['name']} ({r['result']}, {r.get('duration', 0):.1f}s):")
        for line in lines:
            print(f"    {line[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
