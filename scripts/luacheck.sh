#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/luacheck.sh — lint the Redis backend's Lua scripts with luacheck
# (Debian's lua-check): each script of src/redis/lua whole, the shared
# prelude it includes in place (src/redis/lua/embed.py), by the rules of
# src/redis/lua/luacheckrc.  Exits non-zero on any warning, or when
# luacheck is missing.

set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lua=$root/src/redis/lua

if ! command -v luacheck >/dev/null 2>&1; then
	echo "luacheck.sh: luacheck is not on PATH (Debian package lua-check)" >&2
	exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
scripts=()
for f in "$lua"/*.lua; do
	# queue.lua, fence.lua and member.lua are preludes: checked inside each
	# script that includes them.
	[[ $(basename "$f") == queue.lua || $(basename "$f") == fence.lua || $(basename "$f") == member.lua ]] || scripts+=("$(basename "$f")")
done
python3 "$lua/embed.py" lua "$out" "$lua" "${scripts[@]}"
cd "$out"
luacheck --config "$lua/luacheckrc" --no-color "${scripts[@]}"
