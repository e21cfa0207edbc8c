#!/usr/bin/env bash
#
# scripts/bench.sh — build dlock and run dlock-bench against a throwaway
# redis-server on a free loopback port.  Ratios, not absolute numbers, are
# what carries over between machines: each figure is dlock against the
# floor measured in the same run.
#
# Placement dominates loopback latency on a small machine, so the latency
# mode runs twice: client and server pinned to one core (every CPU cycle
# dlock adds shows), and to two different cores.

set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
DLOCK_SCRIPT_NAME=bench.sh
# shellcheck source=scripts/lib/deps.sh
source "$root/scripts/lib/deps.sh"
dlock_install_packages "${DLOCK_PACKAGES[@]}"
dlock_meson_setup build >/dev/null
meson compile -C build dlock-bench >/dev/null

tmp=$(mktemp -d)
server_pid=
cleanup() {
	[[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
	/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.05
done

uri="redis://127.0.0.1:$port"
cores=$(nproc)
echo "machine: $(uname -m), $cores cores; $(redis-server --version | cut -d' ' -f3)"
echo
echo "== latency, client and server on one core"
taskset -pc 0 "$server_pid" >/dev/null
taskset -c 0 build/dlock-bench latency "$uri" 10 2000
if ((cores > 1)); then
	echo
	echo "== latency, client and server on different cores"
	taskset -pc 1 "$server_pid" >/dev/null
	taskset -c 0 build/dlock-bench latency "$uri" 10 2000
fi
echo
echo "== handoff to a waiter in another process"
taskset -pc 0-$((cores - 1)) "$server_pid" >/dev/null
build/dlock-bench handoff "$uri" 50
