#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/test.sh — the project's one test command (CI runs it through
# .ci/run).  Works from any directory; needs root, or sudo, only when
# Debian packages are missing.
#
#   1. installs the missing Debian packages (scripts/lib/deps.sh);
#   2. build/      — plain build, -Dwerror=true, every test suite (the
#                    torture and stress suites included); then the README's
#                    commands (scripts/dlock.sh, dlock-servers.sh,
#                    run-example.sh), and luacheck over the Redis scripts
#                    (scripts/luacheck.sh);
#   3. build-asan/ — AddressSanitizer + UndefinedBehaviorSanitizer build,
#                    every test suite again (the stress suite as it is, the
#                    torture suite with 7 s per backend instead of 20-35)
#                    but the Sentinel and Cluster helpers' own checks and
#                    their failover tests (suite failover), the install
#                    tests and the ZooKeeper peers' test;
#   4. build/ again — the unit, redis and file suites under valgrind, but
#                    the Sentinel and Cluster suites (their time is real
#                    failovers') and the tests whose time is waiting out
#                    injected faults or for leaders, grants and losses
#                    (suite valgrind-slow);
#   5. build-fuzz/ — the libFuzzer harnesses of tests/fuzz/, 10 s each
#                    (scripts/fuzz.sh; one test per harness in the counts),
#                    built before 4 and run while 4 runs.
#
# --quick skips 3, 4 and 5.  Every pass runs even when an earlier one failed
# (a pass whose build failed runs no tests); the exit status is non-zero
# if any step failed.  The last line is "test.sh: N passed, N failed,
# N skipped", counted over every pass.

set -uo pipefail

usage() {
	cat <<'EOF'
usage: scripts/test.sh [--quick]

Installs missing Debian packages, builds dlock with meson and runs every
test suite: a plain build (build/), a sanitizer build (build-asan/), the
unit, redis and file suites under valgrind, and the fuzz harnesses.

  --quick   only the plain build and its tests (no sanitizers, no valgrind,
            no fuzzing)
  -h, --help
EOF
}

quick=0
for arg in "$@"; do
	case $arg in
	--quick) quick=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		usage >&2
		exit 64
		;;
	esac
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 1
cd "$root" || exit 1

DLOCK_SCRIPT_NAME=test.sh
# shellcheck source=scripts/lib/deps.sh
source "$root/scripts/lib/deps.sh"

# ---------------------------------------------------------------------------
# Steps and their bookkeeping

step_names=()
step_results=()
step_times=()
tests_passed=0
tests_failed=0
tests_skipped=0
failed_tests=()
failure_excerpts=()
any_failed=0
started=$SECONDS

banner() {
	printf '\n==== %s ====\n' "$*"
}

record() { # NAME RESULT SECONDS
	step_names+=("$1")
	step_results+=("$2")
	step_times+=("$3")
	if [[ "$2" != ok ]]; then
		any_failed=1
	fi
}

# step NAME COMMAND... — run a command as one step; return its status.
step() {
	local name=$1 t0=$SECONDS rc
	shift
	banner "$name"
	"$@"
	rc=$?
	if ((rc == 0)); then
		record "$name" ok $((SECONDS - t0))
	else
		record "$name" FAILED $((SECONDS - t0))
		dlock_log "step failed (exit status $rc): $name"
	fi
	return "$rc"
}

# not_run NAME — a step that could not run because an earlier one failed.
not_run() {
	record "$1" "NOT RUN" 0
}

# test_step NAME BUILDDIR [MESON-TEST-ARG...] — run meson test as one step
# and add its counts to the totals.  The caller sets any environment the
# tests need as assignments before the call.
test_step() {
	local name=$1 dir=$2 t0=$SECONDS rc log counts
	shift 2
	banner "$name"
	log=$(mktemp) || return 1
	meson test -C "$dir" --no-rebuild --print-errorlogs "$@" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	# meson's closing summary: "Ok:  N", "Expected Fail:  N", "Fail:  N",
	# "Unexpected Pass:  N", "Skipped:  N", "Timeout:  N".
	counts=$(awk '
		/^Ok:/              { ok += $2; seen = 1 }
		/^Expected Fail:/   { ok += $3; seen = 1 }
		/^Fail:/            { bad += $2; seen = 1 }
		/^Unexpected Pass:/ { bad += $3; seen = 1 }
		/^Timeout:/         { bad += $2; seen = 1 }
		/^Skipped:/         { skip += $2; seen = 1 }
		END { if (seen) printf "%d %d %d\n", ok, bad, skip }' "$log")
	# Each failed test's own line, "12/87 dlock:redis / redis-deadlines
	# FAIL 9.1s ...", so that the summary names it (meson prints it
	# twice: as it ends and again under "Summary of Failures").
	local line
	while IFS= read -r line; do
		failed_tests+=("$name: $line")
	done < <(awk '$1 ~ /^[0-9]+\/[0-9]+$/ && / (FAIL|TIMEOUT|UNEXPECTEDPASS) / {
		sub(/^ +/, ""); gsub(/ +/, " "); if (!seen[$0]++) print }' "$log")
	rm -f "$log"
	if [[ -z "$counts" ]]; then
		dlock_log "$name: meson test printed no summary (no tests ran?)"
		((rc == 0)) && rc=1
	else
		local ok bad skip
		read -r ok bad skip <<<"$counts"
		tests_passed=$((tests_passed + ok))
		tests_failed=$((tests_failed + bad))
		tests_skipped=$((tests_skipped + skip))
		if ((ok + bad == 0)); then
			dlock_log "$name: no test ran"
			((rc == 0)) && rc=1
		fi
	fi
	if ((rc == 0)); then
		record "$name" ok $((SECONDS - t0))
	else
		record "$name" FAILED $((SECONDS - t0))
		dlock_log "step failed: $name (logs: $dir/meson-logs/)"
		# The telling lines of each failed test, shown again at the very
		# end: a CI page shows only the last lines of the output.
		while IFS= read -r line; do
			failure_excerpts+=("$line")
		done < <(python3 "$root/scripts/lib/test_excerpt.py" "$dir/meson-logs/testlog.json" 6)
	fi
	return "$rc"
}

# fuzz_start SECONDS / fuzz_step NAME — run the fuzz harnesses in the
# background (built first, in the foreground) while the valgrind pass runs
# in the foreground: each harness is one process on one core, and
# valgrind's tests spend most of their time waiting on servers and
# timeouts.  fuzz_step waits for the run and counts it as one step; each
# harness counts as one test.
fuzz_pid=
fuzz_log=
fuzz_started=0
fuzz_start() {
	fuzz_started=$SECONDS
	fuzz_log=$(mktemp) || return 1
	"$root/scripts/fuzz.sh" --seconds "$1" >"$fuzz_log" 2>&1 &
	fuzz_pid=$!
}

fuzz_step() {
	local name=$1 rc counts
	banner "$name"
	if [[ -z "$fuzz_pid" ]]; then
		record "$name" FAILED 0
		dlock_log "step failed: $name (not started)"
		return 1
	fi
	wait "$fuzz_pid"
	rc=$?
	cat "$fuzz_log"
	counts=$(awk '/^fuzz.sh: [0-9]+ passed, [0-9]+ failed$/ { print $2, $4 }' "$fuzz_log" | tail -n 1)
	rm -f "$fuzz_log"
	if [[ -n "$counts" ]]; then
		local ok bad
		read -r ok bad <<<"$counts"
		tests_passed=$((tests_passed + ok))
		tests_failed=$((tests_failed + bad))
	elif ((rc == 0)); then
		rc=1
	fi
	if ((rc == 0)); then
		record "$name" ok $((SECONDS - fuzz_started))
	else
		record "$name" FAILED $((SECONDS - fuzz_started))
		dlock_log "step failed: $name (logs: build-fuzz/fuzz-*.log)"
	fi
	return "$rc"
}

summary() {
	local i n=${#step_names[@]} nfailed=0 elapsed=$((SECONDS - started))
	printf '\n==== summary ====\n'
	for ((i = 0; i < n; i++)); do
		printf '  %-8s %-52s %5ss\n' "${step_results[i]}" "${step_names[i]}" "${step_times[i]}"
		[[ "${step_results[i]}" != ok ]] && nfailed=$((nfailed + 1))
	done
	if ((any_failed)); then
		printf 'test.sh: FAILED: %d of %d steps did not pass (%dm%02ds)\n' \
			"$nfailed" "$n" $((elapsed / 60)) $((elapsed % 60))
	else
		printf 'test.sh: all %d steps passed%s (%dm%02ds)\n' "$n" \
			"$( ((quick)) && printf ' (--quick: no sanitizer, valgrind or fuzz pass)')" \
			$((elapsed / 60)) $((elapsed % 60))
	fi
	for ((i = 0; i < ${#failed_tests[@]}; i++)); do
		printf '  failed: %s\n' "${failed_tests[i]}"
	done
	# At most 18 lines of why, so that the counts stay in a short tail.
	for ((i = 0; i < ${#failure_excerpts[@]} && i < 18; i++)); do
		printf '%s\n' "${failure_excerpts[i]}"
	done
	printf 'test.sh: %d passed, %d failed, %d skipped\n' \
		"$tests_passed" "$tests_failed" "$tests_skipped"
}

# ---------------------------------------------------------------------------
# 1. Packages

# shellcheck disable=SC2317  # called through step
check_redis_server() {
	if command -v redis-server >/dev/null 2>&1; then
		return 0
	fi
	dlock_log "redis-server is not on PATH: the redis suite cannot pass"
	return 1
}

if ! step "install missing Debian packages" dlock_install_packages "${DLOCK_PACKAGES[@]}"; then
	summary
	exit 1
fi
# shellcheck disable=SC2317  # called through step
check_zookeeper_server() {
	if [[ -f /usr/share/java/zookeeper.jar ]] && command -v java >/dev/null 2>&1; then
		return 0
	fi
	dlock_log "no ZooKeeper server (/usr/share/java/zookeeper.jar) or no java: the zk suite cannot pass"
	return 1
}

# The redis and zk suites fail without their servers; say why up front.
# Never skipped.
step "redis-server present" check_redis_server
step "ZooKeeper server present" check_zookeeper_server

# lean_build — what the main job's packages (DLOCK_BUILD_PACKAGES) give:
# configured where pkg-config sees every .pc file of this machine but
# cmocka's, as on a machine without the test toolchain, the build leaves
# the tests out by itself, and the command builds and runs.
# shellcheck disable=SC2317  # called through step
lean_build() {
	local pcdir dir rc=0
	pcdir=$(mktemp -d) || return 1
	for dir in $(pkg-config --variable pc_path pkg-config | tr ':' ' '); do
		[[ -d "$dir" ]] || continue
		find "$dir" -maxdepth 1 -name '*.pc' ! -name 'cmocka.pc' -exec ln -sf {} "$pcdir/" \;
	done
	rm -rf build-lean
	PKG_CONFIG_LIBDIR=$pcdir meson setup build-lean -Dbench=false >/dev/null || rc=1
	if ((rc == 0)) && [[ -e build-lean/tests ]]; then
		dlock_log "build-lean: the tests were configured without cmocka"
		rc=1
	fi
	if ((rc == 0)); then
		meson compile -C build-lean dlock:executable >/dev/null &&
			build-lean/src/cli/dlock --version || rc=1
	fi
	rm -rf "$pcdir"
	return "$rc"
}

# serve_servers — the README's development servers: scripts/dlock-servers.sh
# --serve prints its servers' URIs, a lock is taken on each, and SIGTERM
# stops both servers and removes their directory.
# shellcheck disable=SC2317  # called through step
serve_servers() {
	local out pid i redis zk tmpdir rc=0
	out=$(mktemp) || return 1
	scripts/dlock-servers.sh --serve >"$out" 2>&1 &
	pid=$!
	for ((i = 0; i < 1200; i++)); do
		grep -q '^ready:' "$out" && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	redis=$(sed -n 's/^redis: //p' "$out")
	zk=$(sed -n 's/^zookeeper: //p' "$out")
	tmpdir=$(sed -n 's/^config: //p' "$out")
	tmpdir=${tmpdir%/dlock.conf}
	if [[ -z "$redis" || -z "$zk" || -z "$tmpdir" ]]; then
		cat "$out"
		dlock_log "dlock-servers.sh --serve printed no URIs"
		rc=1
	else
		build/src/cli/dlock run -w 10 -b "$redis" serve/check -- true || rc=1
		build/src/cli/dlock run -w 10 -b "$zk" serve/check -- true || rc=1
	fi
	kill -TERM "$pid" 2>/dev/null
	for ((i = 0; i < 300; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		dlock_log "dlock-servers.sh --serve did not stop on SIGTERM"
		kill -KILL "$pid" 2>/dev/null
		rc=1
	elif [[ -n "$tmpdir" && -e "$tmpdir" ]]; then
		dlock_log "dlock-servers.sh --serve left $tmpdir behind"
		rc=1
	elif [[ -n "$redis" ]] && build/src/cli/dlock status -b "$redis?connect-timeout=1s" serve/check >/dev/null 2>&1; then
		dlock_log "the Redis server of dlock-servers.sh --serve still answers"
		rc=1
	fi
	rm -f "$out"
	return "$rc"
}

# ---------------------------------------------------------------------------
# 2. Plain build, every suite

plain_ok=0
if step "configure build/" dlock_meson_setup build \
	-Dwerror=true -Db_sanitize=none -Db_lundef=true -Dtests=enabled -Dbench=true &&
	step "build build/" meson compile -C build; then
	plain_ok=1
	test_step "tests build/ (all suites)" build
	# The README's commands, as a user on a fresh machine runs them: the
	# main job on the embedded default, the routed job on throwaway
	# servers, the C example.
	step "README: scripts/dlock.sh (the main job)" scripts/dlock.sh
	step "README: scripts/dlock-servers.sh" scripts/dlock-servers.sh
	step "README: scripts/dlock-servers.sh --serve" serve_servers
	step "README: scripts/run-example.sh" scripts/run-example.sh
	step "lean build: the command without cmocka (build-lean/)" lean_build
	step "luacheck: the Redis scripts (src/redis/lua)" scripts/luacheck.sh
else
	not_run "tests build/ (all suites)"
	not_run "README: scripts/dlock.sh (the main job)"
	not_run "README: scripts/dlock-servers.sh"
	not_run "README: scripts/dlock-servers.sh --serve"
	not_run "README: scripts/run-example.sh"
	not_run "lean build: the command without cmocka (build-lean/)"
	not_run "luacheck: the Redis scripts (src/redis/lua)"
fi

if ((!quick)); then
	# -----------------------------------------------------------------------
	# 3. Sanitizer build, every suite

	if step "configure build-asan/" dlock_meson_setup build-asan \
		-Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dtests=enabled -Dbench=false &&
		step "build build-asan/" meson compile -C build-asan; then
		# tests/lsan.supp says which leak of the ZooKeeper C client is
		# not ours, and why it needs the slow unwinder to be told apart.
		asan=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0
		lsan=suppressions=$root/tests/lsan.supp:print_suppressions=1
		# The invariant stress suite (tests/stress/) is among them: its
		# threads racing cancels against grants are where memory errors
		# of give-up paths show.
		ASAN_OPTIONS=$asan LSAN_OPTIONS=$lsan UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
			test_step "tests build-asan/ (all suites but torture, ASan+UBSan)" build-asan \
			--no-suite torture --no-suite helper-check --no-suite install --no-suite peers \
			--no-suite failover --no-suite plain-only --timeout-multiplier 2
		# The torture run again with sanitized workers, shorter: the plain
		# pass already spent its minute per backend, and ASan would double it.
		DLOCK_TORTURE_DURATION=7 ASAN_OPTIONS=$asan LSAN_OPTIONS=$lsan \
			UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
			test_step "tests build-asan/ (torture, 7 s per backend, ASan+UBSan)" build-asan \
			--suite torture --timeout-multiplier 2
	else
		not_run "tests build-asan/ (all suites but torture, ASan+UBSan)"
		not_run "tests build-asan/ (torture, 7 s per backend, ASan+UBSan)"
	fi

	# -----------------------------------------------------------------------
	# 4. valgrind over the plain build: unit, redis and file suites; and,
	# meanwhile, 5. the fuzz harnesses (built first).

	fuzz_ok=0
	if step "build build-fuzz/ (clang, libFuzzer)" "$root/scripts/fuzz.sh" --build-only &&
		fuzz_start 10; then
		fuzz_ok=1
	fi
	if ((plain_ok)); then
		# Forked children (the fork test) exit without freeing what the
		# parent's threads owned: only the test processes themselves count.
		wrapper='valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=1 --trace-children=no --child-silent-after-fork=yes --num-callers=30'
		if [[ -f /usr/share/glib-2.0/valgrind/glib.supp ]]; then
			wrapper+=' --suppressions=/usr/share/glib-2.0/valgrind/glib.supp'
		fi
		# The C library's own faults in name resolution (see the file).
		wrapper+=" --suppressions=$root/tests/valgrind.supp"
		# valgrind does not know futex_waitv: the file backend's one-wake
		# tests cannot assert it there (they fail without it elsewhere).
		G_SLICE=always-malloc G_DEBUG=gc-friendly DLOCK_TEST_NO_FUTEX=valgrind \
			test_step "tests build/ (unit, redis, file) under valgrind" build \
			--suite unit --suite redis --suite file --no-suite sentinel --no-suite cluster \
			--no-suite valgrind-slow \
			--wrapper "$wrapper" \
			--timeout-multiplier 4
	else
		not_run "tests build/ (unit, redis, file) under valgrind"
	fi

	# -----------------------------------------------------------------------
	# 5. Fuzzing, started above: every harness of tests/fuzz/ for 10 s; a
	# crash, leak, sanitizer report or an input slower than 2 s fails the
	# step.

	if ((fuzz_ok)); then
		fuzz_step "fuzz build-fuzz/ (libFuzzer, 10 s per harness)"
	else
		not_run "fuzz build-fuzz/ (libFuzzer, 10 s per harness)"
	fi
fi

summary
exit "$any_failed"
