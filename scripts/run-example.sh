#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
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

dlock_install_packages "${DLOCK_BUILD_PACKAGES[@]}" "${DLOCK_SERVER_PACKAGES[@]}"
dlock_meson_setup build
meson compile -C build dlock-example

# --- a throwaway Redis server ------------------------------------------------

# shellcheck source=scripts/lib/servers.sh
source "$root/scripts/lib/servers.sh"
dlock_servers_init dlock-example
trap 'exit 130' INT
trap 'exit 143' TERM

port=$(dlock_free_ports 1)
if ! dlock_redis_start redis "$port"; then
	dlock_log "could not start redis-server on a free loopback port"
	exit 1
fi
dlock_log "redis-server (pid ${dlock_server_pid[redis]}) listening on 127.0.0.1:$port"

# --- the example ---------------------------------------------------------------

status=0
build/dlock-example "redis://127.0.0.1:$port" example/report || status=$?
dlock_log "dlock-example exited with status $status"
exit "$status"
