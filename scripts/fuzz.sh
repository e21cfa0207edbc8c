#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/fuzz.sh — build the libFuzzer harnesses of tests/fuzz/ with
# clang (-fsanitize=fuzzer,address,undefined) into build-fuzz/, and run
# each for a bounded time.  scripts/test.sh runs it with --seconds 15.
#
# The harnesses link the parsing sources of src/kit and src/common/config.c
# directly (not the shared library, whose hidden symbols they need).  Each
# run starts from the seed corpus in tests/fuzz/corpus/<harness>/ plus what
# earlier runs found (build-fuzz/corpus/<harness>/, never written into the
# tree).  A crash, leak, sanitizer report, failed check or an input
# taking over -timeout seconds fails the harness; the input is kept in
# build-fuzz/artifacts/<harness>/.
#
# The last line is "fuzz.sh: N passed, N failed" (harnesses).

set -uo pipefail

usage() {
	cat <<'USAGE'
usage: scripts/fuzz.sh [--seconds N] [--timeout S] [--build-only] [HARNESS...]

Builds the fuzz harnesses (tests/fuzz/fuzz-HARNESS.c) with clang into
build-fuzz/ and runs each for N seconds (default 20).  HARNESS: uri,
config, glob, resource, duration, token (default: all).

  --seconds N   run each harness for N seconds
  --timeout S   an input taking more than S seconds is a failure (default 2)
  --build-only  build, do not run
  -h, --help
USAGE
}

seconds=20
timeout=2
build_only=0
harnesses=()
while (($#)); do
	case $1 in
	--seconds)
		seconds=${2:-}
		shift 2 || { usage >&2; exit 64; }
		;;
	--timeout)
		timeout=${2:-}
		shift 2 || { usage >&2; exit 64; }
		;;
	--build-only)
		build_only=1
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	-*)
		usage >&2
		exit 64
		;;
	*)
		harnesses+=("$1")
		shift
		;;
	esac
done
if ! [[ "$seconds" =~ ^[0-9]+$ && "$timeout" =~ ^[0-9]+$ ]] || ((seconds < 1 || timeout < 1)); then
	usage >&2
	exit 64
fi
if ((${#harnesses[@]} == 0)); then
	harnesses=(uri config glob resource duration token)
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 1
cd "$root" || exit 1
DLOCK_SCRIPT_NAME=fuzz.sh
# shellcheck source=scripts/lib/deps.sh
source "$root/scripts/lib/deps.sh"

cc=${FUZZ_CC:-}
if [[ -z "$cc" ]]; then
	for candidate in clang-14 clang; do
		if command -v "$candidate" >/dev/null 2>&1; then
			cc=$candidate
			break
		fi
	done
fi
if [[ -z "$cc" ]]; then
	dlock_log "no clang found (Debian: apt-get install clang-14 libclang-rt-14-dev)"
	exit 1
fi

out=build-fuzz
sources=(kit/error kit/duration kit/uri kit/options kit/resource kit/holder kit/self common/config
	kit/clock)
mkdir -p "$out/obj" "$out/include" || exit 1

# dlock.h, made from include/dlock.h.in with project()'s version as
# include/meson.build makes it; replaced only when its text changes, so
# that the objects below are not rebuilt for nothing.
version=$(meson introspect --projectinfo meson.build | sed -n 's/.*"version": "\([^"]*\)".*/\1/p')
IFS=. read -r major minor patch <<<"$version"
if [[ -z "$version" || -z "$patch" ]]; then
	dlock_log "cannot read the project version from meson.build"
	exit 1
fi
sed -e "s/@DLOCK_VERSION@/$version/g" -e "s/@DLOCK_VERSION_MAJOR@/$major/g" \
	-e "s/@DLOCK_VERSION_MINOR@/$minor/g" -e "s/@DLOCK_VERSION_PATCH@/$patch/g" \
	include/dlock.h.in >"$out/include/dlock.h.new" || exit 1
if grep -nE '@[A-Za-z0-9_]+@' "$out/include/dlock.h.new"; then
	dlock_log "include/dlock.h.in has a placeholder fuzz.sh does not fill in"
	exit 1
fi
if cmp -s "$out/include/dlock.h.new" "$out/include/dlock.h"; then
	rm -f "$out/include/dlock.h.new"
else
	mv "$out/include/dlock.h.new" "$out/include/dlock.h" || exit 1
fi
read -r -a glib_flags < <(pkg-config --cflags glib-2.0) || exit 1
read -r -a glib_libs < <(pkg-config --libs glib-2.0) || exit 1
cflags=(-std=c11 -g -O1 -D_GNU_SOURCE -DDLOCK_BUILDING_LIBRARY
	-Wall -Wextra -Wno-unused-parameter -Werror
	-fno-omit-frame-pointer -fno-sanitize-recover=undefined
	-I"$out/include" -Isrc/kit -Isrc/common -Isrc "${glib_flags[@]}")

# The library sources get coverage instrumentation and the sanitizers,
# without libFuzzer's main; rebuilt only when a source or header changed.
objects=()
for s in "${sources[@]}"; do
	src=src/$s.c obj=$out/obj/${s##*/}.o
	objects+=("$obj")
	if [[ -f "$obj" && "$obj" -nt "$src" && "$obj" -nt src/kit/parse.h &&
		"$obj" -nt src/common/config.h && "$obj" -nt "$out/include/dlock.h" &&
		"$obj" -nt "$0" ]]; then
		continue
	fi
	"$cc" "${cflags[@]}" -fsanitize=fuzzer-no-link,address,undefined -c "$src" -o "$obj" || {
		dlock_log "building $src failed"
		exit 1
	}
done
for h in "${harnesses[@]}"; do
	src=tests/fuzz/fuzz-$h.c
	if [[ ! -f "$src" ]]; then
		dlock_log "no harness $src"
		exit 64
	fi
	"$cc" "${cflags[@]}" -fsanitize=fuzzer,address,undefined "$src" "${objects[@]}" \
		"${glib_libs[@]}" -o "$out/fuzz-$h" || {
		dlock_log "building $src failed"
		exit 1
	}
done
((build_only)) && exit 0

passed=0
failed=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for h in "${harnesses[@]}"; do
	corpus=$out/corpus/$h artifacts=$out/artifacts/$h log=$out/fuzz-$h.log
	mkdir -p "$corpus" "$artifacts" || exit 1
	"$out/fuzz-$h" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$artifacts/" \
		"$corpus" "tests/fuzz/corpus/$h" >"$log" 2>&1
	rc=$?
	execs=$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log" | tail -n 1)
	if ((rc == 0)); then
		passed=$((passed + 1))
		printf 'fuzz.sh: %-9s ok      %s executions in %ss\n' "$h" "${execs:-?}" "$seconds"
	else
		failed=$((failed + 1))
		printf 'fuzz.sh: %-9s FAILED  exit status %d after %s executions (log: %s)\n' \
			"$h" "$rc" "${execs:-?}" "$log"
		grep -E 'ERROR|fuzz check failed|SUMMARY|Test unit written|ALARM' "$log" | head -n 20
	fi
done
printf 'fuzz.sh: %d passed, %d failed\n' "$passed" "$failed"
((failed == 0))
