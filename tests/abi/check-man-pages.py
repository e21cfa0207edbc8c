#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The man(3) pages agree with dlock.h.

Usage: check-man-pages.py DLOCK_H PAGE...

Fails, naming the page and what is wrong, when
  - a DLOCK_API function of the header is named by no page's NAME line,
    or a NAME line names a function the header lacks;
  - a prototype or typedef in a page's SYNOPSIS differs from the header's
    declaration (token by token, DLOCK_API left out), or names a function
    or type the header does not declare;
  - a page lacks one of the sections every page has (REQUIRED);
  - a page names a DLOCK_ identifier the header does not define (a result
    code must be one of enum dlock_code's), or refers to a dlock page
    (".BR dlock_x (3)") that no page names;
  - groff -man -t -ww -z prints any warning for a page.
"""

import os
import re
import subprocess
import sys

REQUIRED = ("NAME", "SYNOPSIS", "DESCRIPTION", "RETURN VALUE", "THREAD SAFETY", "SEE ALSO")
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*|0[xX][0-9A-Fa-f]+[uUlL]*|\d+[uUlL]*|->|\S')

failures = []


def fail(where, what):
    failures.append(f"check-man-pages: {where}: {what}")


def tokens(text):
    return TOKEN.findall(text)


def declared_name(toks):
    """The name a declaration declares: a function's, a function pointer
    typedef's, or another typedef's last identifier."""
    if toks and toks[0] == "typedef":
        if "(" in toks and toks.index("(") + 2 < len(toks) and toks[toks.index("(") + 1] == "*":
            return toks[toks.index("(") + 2]
        idents = [t for t in toks if re.fullmatch(r"[A-Za-z_]\w*", t)]
        return idents[-1]
    if "(" in toks:
        return toks[toks.index("(") - 1]
    return None


def header_declarations(path):
    """({name: tokens} of functions, {name: tokens} of typedefs, all
    identifiers, result codes, text)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    code = re.sub(r"/\*.*?\*/", " ", text, flags=re.S).replace("\\\n", " ")
    code = "\n".join(line for line in code.splitlines()
                     if not line.lstrip().startswith("#")
                     and line.strip() not in ('extern "C" {', "}"))
    functions, types = {}, {}
    statement, depth = [], 0
    for tok in tokens(code):
        statement.append(tok)
        depth += tok == "{"
        depth -= tok == "}"
        if tok == ";" and depth == 0:
            if "DLOCK_API" in statement:
                toks = [t for t in statement if t != "DLOCK_API"]
                functions[declared_name(toks)] = toks
            elif statement[0] == "typedef":
                types[declared_name(statement)] = statement
            statement = []
    enum = re.search(r"typedef enum dlock_code \{(.*?)\}", code, re.S)
    codes = set(re.findall(r"\bDLOCK_\w+", enum.group(1))) if enum else set()
    identifiers = set(re.findall(r"\bDLOCK_\w+", re.sub(r"/\*.*?\*/", " ", text, flags=re.S)))
    identifiers |= set(re.findall(r"\$(DLOCK_\w+)", text))  # environment variables
    return functions, types, identifiers, codes


def macro_args(rest):
    """The arguments of a macro line, quotes removed."""
    return [a[1:-1] if a.startswith('"') else a
            for a in re.findall(r'"(?:[^"]|"")*"|\S+', rest)]


def plain(line):
    """A page line as the reader sees its text: font macros joined,
    escapes resolved."""
    m = re.match(r"\.(B|I|BI|IB|BR|RB|IR|RI)\s(.*)", line)
    if m:
        # .B and .I join their arguments with spaces, the others without.
        line = (" " if m.group(1) in ("B", "I") else "").join(macro_args(m.group(2)))
    elif line.startswith(".") or line.startswith("'"):
        return ""
    line = re.sub(r"\\f[BIRP]|\\f\(..|\\f\[\w*\]", "", line)
    line = line.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "")
    line = line.replace("\\(dq", '"').replace("\\(aq", "'").replace("\\ ", " ").replace("\\~", " ")
    return line


def sections(lines):
    out, name = {}, None
    for line in lines:
        m = re.match(r'\.SH\s+"?([^"]*)"?\s*$', line)
        if m:
            name = m.group(1).strip()
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return out


def check_page(path, functions, types, identifiers, codes, named, compared, refs):
    page = os.path.basename(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    secs = sections(lines)
    for sec in REQUIRED:
        if sec not in secs:
            fail(page, f"no {sec} section")

    # NAME: "a, b, c \- what they do"
    name_text = " ".join(l for l in secs.get("NAME", []) if not l.startswith('.\\"'))
    if "\\-" not in name_text:
        fail(page, "the NAME line has no '\\-' before its description")
    else:
        for n in (x.strip() for x in name_text.split("\\-", 1)[0].split(",")):
            if n == "dlock" and page == "dlock.3":
                continue
            if n not in functions:
                fail(page, f"NAME names {n}, which dlock.h does not declare")
            elif n in named:
                fail(page, f"NAME names {n}, which {named[n]} names too")
            else:
                named[n] = page

    # SYNOPSIS: every declaration (the .nf blocks, less preprocessor
    # lines) as the header has it.
    block, nofill = [], False
    for l in secs.get("SYNOPSIS", []):
        if l.startswith((".nf", ".fi")):
            nofill = l.startswith(".nf")
        elif nofill and not re.match(r"\.(B|I|BI|IB|BR|RB|IR|RI)?\s*#", l):
            block.append(plain(l))
    text = "\n".join(block)
    text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
    statement = []
    depth = 0
    for tok in tokens(text):
        statement.append(tok)
        depth += tok == "{"
        depth -= tok == "}"
        if tok == ";" and depth == 0:
            decl = declared_name(statement)
            known = types if statement[0] == "typedef" else functions
            shown = " ".join(statement)
            if decl is None:
                fail(page, f"SYNOPSIS: cannot read '{shown}'")
            elif decl not in known:
                fail(page, f"SYNOPSIS declares {decl}, which dlock.h does not")
            elif known[decl] != statement:
                fail(page, f"SYNOPSIS: {decl} differs from dlock.h:\n"
                           f"    page:    {shown}\n    dlock.h: {' '.join(known[decl])}")
            compared[0] += 1
            statement = []

    # References to other pages, resolved once every page's names are known.
    for ref in re.findall(r"^\.BR\s+(dlock\w*)\s+\(3\)", "\n".join(lines), re.M):
        refs.add((page, ref))

    # DLOCK_ identifiers anywhere on the page.
    for ident in sorted(set(re.findall(r"\bDLOCK_\w+(?!\?)", "\n".join(plain(l) for l in lines)))):
        if re.fullmatch(r"DLOCK_(OK|E[A-Z]+)", ident) and ident not in codes:
            fail(page, f"{ident} is not a result code of dlock.h")
        elif ident not in identifiers:
            fail(page, f"{ident} is not defined by dlock.h")

    # groff's own warnings.
    try:
        run = subprocess.run(["groff", "-man", "-t", "-Tutf8", "-ww", "-z", path],
                             capture_output=True, text=True)
    except FileNotFoundError:
        fail(page, "no groff to check the page with (Debian package groff-base)")
        return
    for warning in run.stderr.splitlines():
        fail(page, f"groff: {warning}")
    if run.returncode != 0:
        fail(page, f"groff exited with status {run.returncode}")


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 64
    functions, types, identifiers, codes = header_declarations(argv[1])
    if len(functions) < 1 or not codes:
        fail(argv[1], "no DLOCK_API function or no enum dlock_code found")
    named, compared, refs = {}, [0], set()
    for path in argv[2:]:
        check_page(path, functions, types, identifiers, codes, named, compared, refs)
    for page, ref in sorted(refs):
        if ref not in named and ref + ".3" not in map(os.path.basename, argv[2:]):
            fail(page, f"refers to {ref}(3), which no page names")
    for name in sorted(set(functions) - set(named)):
        fail(name, "no man page names it")
    for line in failures:
        print(line)
    print(f"check-man-pages: {len(argv) - 2} pages, {len(named)} of "
          f"{len(functions)} functions named, {compared[0]} SYNOPSIS declarations "
          f"compared, {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
