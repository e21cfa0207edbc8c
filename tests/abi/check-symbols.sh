#!/usr/bin/env bash
# The shared library exports dlock_ symbols only, and every function the
# header declares.
# usage: check-symbols.sh LIBRARY HEADER
set -eu
lib=$1
header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ { print $3 }' | sort -u)
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
