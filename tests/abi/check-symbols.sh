#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The shared library exports dlock_ symbols only, and every function the
# header declares.
# usage: check-symbols.sh LIBRARY HEADER
set -eu
lib=$1
header=$2
# Every defined dynamic symbol, whatever its type (T, D, B, R, V, W, and
# also i for ifuncs, u for unique globals), less the few the linker itself
# may add, matched by exact name.
exported=$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' |
	grep -vxE '_init|_fini|__bss_start|_edata|_end' | sort -u)
others=$(grep -v '^dlock_' <<<"$exported" || true)
if [[ -n "$others" ]]; then
	echo "FAIL - symbols outside the dlock_ namespace are exported:"
	echo "$others"
	exit 1
fi
echo "ok - only dlock_ symbols are exported ($(wc -l <<<"$exported") symbols)"
declared=$(grep -oE 'DLOCK_API [^;(]*\b(dlock_[a-z_]+)\(' "$header" | grep -oE 'dlock_[a-z_]+\($' | tr -d '(' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [[ -n "$missing" ]]; then
	echo "FAIL - declared in dlock.h but not exported:"
	echo "$missing"
	exit 1
fi
echo "ok - every function dlock.h declares is exported ($(wc -l <<<"$declared") functions)"
