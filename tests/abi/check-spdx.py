#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every source file of the tree names its licence (LICENSE, MIT).

Usage: check-spdx.py SOURCE-ROOT

Walks the source tree (not build directories, not the fuzzers' corpus)
and fails, naming each one, on a C source or header, header template,
Lua script, Python or shell script, Java peer, meson file or man page
source (man1 or man3) without an "SPDX-License-Identifier: MIT" line among
its first three lines; in debian/, on the files whose formats take
comments (control, rules, the debhelper lists).  debian/copyright is the
licence statement itself; debian/changelog and debian/source/format have
no room for a comment.
"""

import os
import sys

TAG = "SPDX-License-Identifier: MIT"
SUFFIXES = (".c", ".h", ".h.in", ".lua", ".py", ".sh", ".java", ".1.in", ".3.in", ".cmake.in", ".map")
NAMES = ("meson.build", "meson_options.txt", "luacheckrc")
TOP = ("include", "src", "tests", "bench", "scripts", "examples", "docs", "cmake", "debian")
DEBIAN_NAMES = ("control", "rules")
DEBIAN_SUFFIXES = (".install", ".symbols", ".links", ".manpages", ".docs")


def wanted(top, name):
    if top == "debian":
        return name in DEBIAN_NAMES or name.endswith(DEBIAN_SUFFIXES)
    return name.endswith(SUFFIXES) or name in NAMES


def sources(root):
    for name in NAMES:
        if os.path.isfile(os.path.join(root, name)):
            yield name
    for top in TOP:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(folder, root)
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and
                             not (rel == "tests/fuzz" and d == "corpus"))
            if top == "debian":
                # Not the packages' staging trees a build leaves there.
                dirs[:] = [d for d in dirs if rel == "debian" and d == "source"]
            for name in sorted(files):
                if wanted(top, name):
                    yield os.path.join(rel, name)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 64
    root = sys.argv[1]
    missing, seen = [], 0
    for rel in sources(root):
        seen += 1
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            head = [f.readline() for _ in range(3)]
        if not any(TAG in line for line in head):
            missing.append(rel)
    for rel in missing:
        print(f"check-spdx: {rel}: no '{TAG}' line among its first three")
    if not os.path.isfile(os.path.join(root, "LICENSE")):
        print("check-spdx: no LICENSE file at the top of the tree")
        missing.append("LICENSE")
    print(f"check-spdx: {seen} files, {len(missing)} without their licence")
    return 1 if missing or seen == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
