#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The one-line link pages of the man(3) pages, from their NAME sections.

Usage: man-links.py --list PAGE...
       man-links.py OUTDIR PAGE...

A page's NAME section names its functions, "a, b, c \\- what they do".
The first name is the page itself (its file is NAME.3 or NAME.3.in); every
other name gets a page NAME.3 in OUTDIR holding ".so man3/FIRST.3", so that
"man 3 NAME" finds the page that documents it.  --list prints the link
pages' file names, one a line, for the build to declare them.
"""

import os
import re
import sys


def page_names(path):
    """The names of a page's NAME section, the page's own first."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if re.match(r'\.SH\s+"?NAME"?\s*$', line))
    except StopIteration:
        raise SystemExit(f"man-links: {path}: no NAME section")
    text = []
    for line in lines[start + 1:]:
        if line.startswith((".SH", ".SS")):
            break
        if not line.startswith('.\\"'):
            text.append(line)
    joined = " ".join(text)
    if "\\-" not in joined:
        raise SystemExit(f"man-links: {path}: the NAME line has no '\\-' before its description")
    names = [n.strip() for n in joined.split("\\-", 1)[0].split(",")]
    for n in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n):
            raise SystemExit(f"man-links: {path}: '{n}' in the NAME line is not a name")
    own = os.path.basename(path)
    own = own[:-len(".in")] if own.endswith(".in") else own
    if own != names[0] + ".3":
        raise SystemExit(f"man-links: {path}: the first name '{names[0]}' is not the page's ({own})")
    return names


def links(pages):
    """(link file name, target) for every name but each page's first."""
    seen = {}
    out = []
    for page in pages:
        names = page_names(page)
        for n in names:
            if n in seen:
                raise SystemExit(f"man-links: '{n}' is named by {seen[n]} and {page}")
            seen[n] = page
        out += [(n + ".3", names[0] + ".3") for n in names[1:]]
    return out


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 64
    if argv[1] == "--list":
        for name, _ in links(argv[2:]):
            print(name)
        return 0
    outdir = argv[1]
    for name, target in links(argv[2:]):
        with open(os.path.join(outdir, name), "w", encoding="utf-8") as f:
            f.write(f".so man3/{target}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
