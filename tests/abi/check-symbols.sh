#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The shared library exports dlock_ symbols only, every function the
# header declares, each with a version of the version script (src/dlock.map),
# and the script names every one of them.
# usage: check-symbols.sh LIBRARY HEADER MAP
set -eu
lib=$1
header=$2
map=$3
# Every defined dynamic symbol, whatever its type (T, D, B, R, V, W, and
# also i for ifuncs, u for unique globals), less the few the linker itself
# may add, matched by exact name; "name@@VERSION" as nm prints a versioned
# one, and the version nodes themselves (type A).
listed=$(nm -D --defined-only "$lib" | awk 'NF >= 3 && $2 != "A" { print $3 }' |
	grep -vxE '_init|_fini|__bss_start|_edata|_end' | sort -u)
exported=$(sed 's/@.*//' <<<"$listed" | sort -u)
others=$(grep -v '^dlock_' <<<"$exported" || true)
if [[ -n "$others" ]]; then
	echo "FAIL - symbols outside the dlock_ namespace are exported:"
	echo "$others"
	exit 1
fi
echo "ok - only dlock_ symbols are exported ($(wc -l <<<"$exported") symbols)"
unversioned=$(grep -vE '@@?DLOCK_[0-9.]+$' <<<"$listed" || true)
if [[ -n "$unversioned" ]]; then
	echo "FAIL - exported without a DLOCK_ version (src/dlock.map):"
	echo "$unversioned"
	exit 1
fi
echo "ok - every exported symbol has a DLOCK_ version"
declared=$(grep -oE 'DLOCK_API [^;(]*\b(dlock_[a-z_]+)\(' "$header" | grep -oE 'dlock_[a-z_]+\($' | tr -d '(' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [[ -n "$missing" ]]; then
	echo "FAIL - declared in dlock.h but not exported:"
	echo "$missing"
	exit 1
fi
echo "ok - every function dlock.h declares is exported ($(wc -l <<<"$declared") functions)"
# The names the map lists (lines "<tab>name;"), against the header's.
mapped=$(grep -oE '^\s+dlock_[a-z_]+;' "$map" | tr -d ' \t;' | sort -u)
if [[ "$mapped" != "$declared" ]]; then
	echo "FAIL - src/dlock.map and dlock.h name different functions:"
	diff <(echo "$declared") <(echo "$mapped") | sed -n 's/^</  only in dlock.h:/p; s/^>/  only in the map:/p'
	exit 1
fi
echo "ok - src/dlock.map names exactly the functions of dlock.h"
