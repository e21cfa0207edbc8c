#!/usr/bin/env python3
"""Turn the Redis backend's Lua scripts into what the server is sent.

A script file is Lua as the server runs it, plus what the server need not
see: lines that are only a comment (`--` after optional blanks) and empty
lines are left out, and a line `--@include NAME` stands for the lines of
the file NAME of the same folder (the shared prelude, queue.lua).  So the
files read, diff and lint as Lua while the server gets the same compact
text it always did.

  embed.py c OUT.c DIR ENUM=FILE...   the C table of texts and SHA1s
  embed.py lua OUTDIR DIR FILE...     each script whole, comments kept (luacheck)
"""
import hashlib
import os
import re
import sys

INCLUDE = re.compile(r'^--@include (\S+)$')


def assemble(folder, name, keep=False, seen=()):
    """The script NAME with its includes; without keep, only its code."""
    if name in seen:
        sys.exit(f'embed.py: {name} includes itself')
    out = []
    with open(os.path.join(folder, name), encoding='utf-8') as f:
        for line in f:
            line = line.rstrip('\n')
            m = INCLUDE.match(line)
            if m:
                out.append(assemble(folder, m.group(1), keep, seen + (name,)))
            elif keep or (line.strip() and not line.lstrip().startswith('--')):
                out.append(line + '\n')
    return ''.join(out)


def c_bytes(text):
    data = text.encode('utf-8') + b'\0'
    rows = []
    for i in range(0, len(data), 16):
        rows.append('\t' + ' '.join(f'0x{b:02x},' for b in data[i:i + 16]))
    return '\n'.join(rows)


def write_c(out, folder, pairs):
    parts = [
        f'/* Made by embed.py from the Lua files of src/redis/lua: do not edit. */\n'
        '#include "internal.h"\n'
    ]
    names = []
    for pair in pairs:
        enum, name = pair.split('=', 1)
        text = assemble(folder, name)
        ident = re.sub(r'\W', '_', name[:-len('.lua')]) + '_lua'
        sha = hashlib.sha1(text.encode('utf-8')).hexdigest()
        parts.append(f'\n/* {name} */\nstatic const char {ident}[] = {{\n{c_bytes(text)}\n}};\n')
        names.append((enum, ident, sha))
    parts.append('\nconst char *const dlock__redis_script_text[SCRIPT_COUNT] = {\n')
    parts += [f'\t[{enum}] = {ident},\n' for enum, ident, _ in names]
    parts.append('};\n\nconst char *const dlock__redis_script_sha1[SCRIPT_COUNT] = {\n')
    parts += [f'\t[{enum}] = "{sha}",\n' for enum, _, sha in names]
    parts.append('};\n')
    with open(out, 'w', encoding='utf-8') as f:
        f.write(''.join(parts))


def write_lua(outdir, folder, names):
    os.makedirs(outdir, exist_ok=True)
    for name in names:
        with open(os.path.join(outdir, name), 'w', encoding='utf-8') as f:
            f.write(assemble(folder, name, keep=True))


def main(argv):
    if len(argv) >= 4 and argv[0] == 'c':
        write_c(argv[1], argv[2], argv[3:])
    elif len(argv) >= 4 and argv[0] == 'lua':
        write_lua(argv[1], argv[2], argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main(sys.argv[1:])
