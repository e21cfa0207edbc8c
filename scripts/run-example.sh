#!/usr/bin/env bash
#
# scripts/run-example.sh — set up and run the example program against a
# throwaway Redis server.  Works from any directory; needs root, or sudo,
# only when Debian packages are missing.
#
#   1. installs the missing Debian packages (scripts/lib/deps.sh);
#   2. builds dlock-example with meson in build/;
#   3. starts redis-server on a free loopback port in a temporary directory
#      (stopped and removed on exit);
#   4. runs build/dlock-example redis://127.0.0.1:PORT example/report and
#      exits with its status (0 done, 75 not acquired, 69 unreachable,
#      78 configuration error, 1 other).

set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

DLOCK_SCRIPT_NAME=run-example.sh
# shellcheck source=scripts/lib/deps.sh
source "$root/scripts/lib/deps.sh"

if (($# != 0)); then
	echo "usage: scripts/run-example.sh" >&2
	exit 64
fi

dlock_install_packages "${DLOCK_PACKAGES[@]}"
dlock_meson_setup build
meson compile -C build dlock-example

# --- a throwaway Redis server ------------------------------------------------

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-example.XXXXXX")
redis_pid=

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
	if [[ -n "$redis_pid" ]]; then
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
	fi
	rm -rf -- "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# port_in_use PORT — true if something accepts connections on it.
port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# start_redis PORT — start redis-server on PORT; true once this very server
# (not another one on the same port) answers.
start_redis() {
	local port=$1 i
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp" --logfile "$tmp/redis.log" --daemonize no </dev/null &
	redis_pid=$!
	for ((i = 0; i < 100; i++)); do
		if ! kill -0 "$redis_pid" 2>/dev/null; then
			wait "$redis_pid" 2>/dev/null || true
			redis_pid=
			return 1
		fi
		if redis-cli -h 127.0.0.1 -p "$port" info server 2>/dev/null |
			grep -q "^process_id:$redis_pid"$'\r'; then
			return 0
		fi
		sleep 0.05
	done
	kill "$redis_pid" 2>/dev/null || true
	wait "$redis_pid" 2>/dev/null || true
	redis_pid=
	return 1
}

port=
for _ in 1 2 3 4 5 6 7 8 9 10; do
	candidate=$((20000 + RANDOM % 30000))
	port_in_use "$candidate" && continue
	if start_redis "$candidate"; then
		port=$candidate
		break
	fi
done
if [[ -z "$port" ]]; then
	dlock_log "could not start redis-server on a free loopback port"
	[[ -f "$tmp/redis.log" ]] && tail -n 20 "$tmp/redis.log" >&2
	exit 1
fi
dlock_log "redis-server (pid $redis_pid) listening on 127.0.0.1:$port"

# --- the example ---------------------------------------------------------------

status=0
build/dlock-example "redis://127.0.0.1:$port" example/report || status=$?
dlock_log "dlock-example exited with status $status"
exit "$status"
