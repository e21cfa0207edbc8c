#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turn the Redis backend's Lua scripts into what the server is sent.

A script file is Lua as the server runs it, plus what the server need not
see: lines that are only a comment (`--` after optional blanks) and empty
lines are left out, and a line `--@include NAME` stands for the lines of
the file NAME of the same folder (the shared prelude, queue.lua).  So the
files read, diff and lint as Lua while the server gets compact text.

A script names its keys and arguments once, in order, on the lines
`--@keys NAME...` and `--@argv NAME...`, and its code (the prelude's too)
reads them as KEYS.NAME and ARGV.NAME, which become KEYS[i] and ARGV[i].
A script that indexes KEYS or ARGV by number, or reads a name it does not
declare, is refused.  The C side gets the same names from the header:
for the script of SCRIPT_ACQUIRE, ACQUIRE_KEY_LOCK ... and
ACQUIRE_ARG_TOKEN ..., indices into one array of words (the keys, then
the arguments), ACQUIRE_KEYS and ACQUIRE_WORDS its counts; and the tables
of every script's counts, which the senders pass the server.

  embed.py c OUT.c OUT.h DIR ENUM=FILE...   the C tables and the header
  embed.py lua OUTDIR DIR FILE...           each script whole, comments
                                            kept, names resolved (luacheck)
"""
import hashlib
import os
import re
import sys

INCLUDE = re.compile(r'^--@include (\S+)$')
DECLARE = re.compile(r'^--@(keys|argv)((?:\s+[a-z_][a-z0-9_]*)+)\s*$')
NAMED = re.compile(r'\b(KEYS|ARGV)\.([A-Za-z_]\w*)')
NUMBERED = re.compile(r'\b(KEYS|ARGV)\s*\[')


def fail(message):
    sys.exit(f'embed.py: {message}')


def assemble(folder, name, keep=False, seen=()):
    """The script NAME with its includes; without keep, only its code."""
    if name in seen:
        fail(f'{name} includes itself')
    out = []
    with open(os.path.join(folder, name), encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip('\n')
            m = INCLUDE.match(line)
            code = line.split('--', 1)[0]
            if NUMBERED.search(code):
                fail(f'{name}:{number}: KEYS and ARGV are read by name (KEYS.lock), not by number')
            if m:
                out.append(assemble(folder, m.group(1), keep, seen + (name,)))
            elif keep or (line.strip() and not line.lstrip().startswith('--')):
                out.append(line + '\n')
    return ''.join(out)


def declarations(folder, name):
    """The script's declared names: {'keys': [...], 'argv': [...]}."""
    found = {'keys': [], 'argv': []}
    with open(os.path.join(folder, name), encoding='utf-8') as f:
        for line in f:
            m = DECLARE.match(line.rstrip('\n'))
            if m:
                if found[m.group(1)]:
                    fail(f'{name}: two --@{m.group(1)} lines')
                found[m.group(1)] = m.group(2).split()
    for kind, names in found.items():
        if len(set(names)) != len(names):
            fail(f'{name}: a name repeated in --@{kind}')
    return found


def resolve(name, text, declared):
    """text with KEYS.NAME and ARGV.NAME made KEYS[i] and ARGV[i]."""
    def index(m):
        names = declared['keys' if m.group(1) == 'KEYS' else 'argv']
        if m.group(2) not in names:
            fail(f'{name} reads {m.group(1)}.{m.group(2)}, which its --@{m.group(1).lower()} '
                 'line does not declare')
        return f'{m.group(1)}[{names.index(m.group(2)) + 1}]'
    return NAMED.sub(index, text)


def script(folder, name, keep=False):
    declared = declarations(folder, name)
    return resolve(name, assemble(folder, name, keep), declared), declared


def c_bytes(text):
    data = text.encode('utf-8') + b'\0'
    rows = []
    for i in range(0, len(data), 16):
        rows.append('\t' + ' '.join(f'0x{b:02x},' for b in data[i:i + 16]))
    return '\n'.join(rows)


def header_enum(enum, name, declared):
    """The C names of one script's words, as an enum."""
    prefix = enum[len('SCRIPT_'):] + '_'
    keys, argv = declared['keys'], declared['argv']
    rows = [f'\t{prefix}KEY_{k.upper()} = {i},\n' for i, k in enumerate(keys)]
    rows += [f'\t{prefix}ARG_{a.upper()} = {len(keys) + i},\n' for i, a in enumerate(argv)]
    rows.append(f'\t{prefix}KEYS = {len(keys)},\n\t{prefix}WORDS = {len(keys) + len(argv)},\n')
    return f'\n/* {name}: its KEYS, then its ARGV, in one array of words. */\nenum {{\n{"".join(rows)}}};\n'


def write_c(out, out_h, folder, pairs):
    made = '/* Made by embed.py from the Lua files of src/redis/lua: do not edit. */\n'
    parts = [made, '#include "internal.h"\n']
    header = [made, '#ifndef DLOCK_REDIS_SCRIPTS_LUA_H\n#define DLOCK_REDIS_SCRIPTS_LUA_H\n']
    names = []
    for pair in pairs:
        enum, name = pair.split('=', 1)
        text, declared = script(folder, name)
        ident = re.sub(r'\W', '_', name[:-len('.lua')]) + '_lua'
        sha = hashlib.sha1(text.encode('utf-8')).hexdigest()
        parts.append(f'\n/* {name} */\nstatic const char {ident}[] = {{\n{c_bytes(text)}\n}};\n')
        names.append((enum, ident, sha, declared))
        header.append(header_enum(enum, name, declared))
    header.append('\n#endif\n')
    parts.append('\nconst char *const dlock__redis_script_text[SCRIPT_COUNT] = {\n')
    parts += [f'\t[{enum}] = {ident},\n' for enum, ident, _, _ in names]
    parts.append('};\n\nconst char *const dlock__redis_script_sha1[SCRIPT_COUNT] = {\n')
    parts += [f'\t[{enum}] = "{sha}",\n' for enum, _, sha, _ in names]
    parts.append('};\n\nconst int dlock__redis_script_keys[SCRIPT_COUNT] = {\n')
    parts += [f'\t[{enum}] = {len(d["keys"])},\n' for enum, _, _, d in names]
    parts.append('};\n\nconst int dlock__redis_script_words[SCRIPT_COUNT] = {\n')
    parts += [f'\t[{enum}] = {len(d["keys"]) + len(d["argv"])},\n' for enum, _, _, d in names]
    parts.append('};\n')
    with open(out, 'w', encoding='utf-8') as f:
        f.write(''.join(parts))
    with open(out_h, 'w', encoding='utf-8') as f:
        f.write(''.join(header))


def write_lua(outdir, folder, names):
    os.makedirs(outdir, exist_ok=True)
    for name in names:
        with open(os.path.join(outdir, name), 'w', encoding='utf-8') as f:
            f.write(script(folder, name, keep=True)[0])


def main(argv):
    if len(argv) >= 5 and argv[0] == 'c':
        write_c(argv[1], argv[2], argv[3], argv[4:])
    elif len(argv) >= 4 and argv[0] == 'lua':
        write_lua(argv[1], argv[2], argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main(sys.argv[1:])
