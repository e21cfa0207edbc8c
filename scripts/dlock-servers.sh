#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/dlock-servers.sh — the main job again, with a configuration file
# that routes resources to backends: jobs/* to a throwaway redis-server,
# strong/* to a throwaway ZooKeeper server (both started here on free
# loopback ports in a temporary directory, stopped by PID on exit),
# everything else to the file backend.  Installs what is missing and
# builds first.
#
# With --serve it runs no job: it starts the two servers, prints their URIs
# and the configuration file, and keeps them until it is interrupted (^C,
# SIGTERM), for trying dlock, or developing against it, with real servers.

set -euo pipefail

serve=0
case ${1:-} in
--serve) serve=1 ;;
'') ;;
-h | --help)
	echo "usage: scripts/dlock-servers.sh [--serve]"
	exit 0
	;;
*)
	echo "usage: scripts/dlock-servers.sh [--serve]" >&2
	exit 64
	;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
DLOCK_SCRIPT_NAME=dlock-servers.sh
# shellcheck source=scripts/lib/deps.sh
source "$root/scripts/lib/deps.sh"
dlock_install_packages "${DLOCK_BUILD_PACKAGES[@]}" "${DLOCK_SERVER_PACKAGES[@]}" >&2
dlock_meson_setup build >/dev/null
meson compile -C build dlock:executable >/dev/null
# The command as the build leaves it (src/cli/meson.build).
dlock=build/src/cli/dlock

# shellcheck source=scripts/lib/servers.sh
source "$root/scripts/lib/servers.sh"
dlock_servers_init dlock-servers
tmp=$DLOCK_SERVERS_TMP
mapfile -t ports < <(dlock_free_ports 2)
port=${ports[0]}
zk_port=${ports[1]}
dlock_zk_start zk "$zk_port" # the JVM takes longest: start it first
dlock_redis_start redis "$port"
dlock_zk_wait zk
mkdir -m 0700 "$tmp/locks"
cat >"$tmp/dlock.conf" <<CONF
[defaults]
backend = local          ; used when no route matches
wait = 30s               ; default wait of the dlock command when -w is not given

[backend local]
url = file://$tmp/locks

[backend cache]
url = redis://127.0.0.1:$port/0?ttl=10s

[backend strong]
url = zk://127.0.0.1:$zk_port/?session-timeout=10s

[route jobs]
match = jobs/*
backend = cache

[route strong]
match = strong/*
backend = strong
CONF
echo "== $tmp/dlock.conf"
cat "$tmp/dlock.conf"
echo
if ((serve)); then
	cat <<SERVE
redis: redis://127.0.0.1:$port
zookeeper: zk://127.0.0.1:$zk_port
config: $tmp/dlock.conf
try: $dlock run -b redis://127.0.0.1:$port jobs/x -- echo held
ready: ^C stops both servers and removes $tmp
SERVE
	# A sleep in the background, so that the trap runs as the signal lands.
	sleeper=
	trap '[[ -n $sleeper ]] && kill "$sleeper" 2>/dev/null; exit 0' INT TERM
	while :; do
		sleep 3600 &
		sleeper=$!
		wait "$sleeper" || true
	done
fi
set -x
"$dlock" run -c "$tmp/dlock.conf" jobs/nightly-report -- sh -c 'echo "running: $DLOCK_RESOURCE on $DLOCK_BACKEND, fencing token $DLOCK_FENCING_TOKEN"; sleep 1' &
sleep 0.5
"$dlock" status -c "$tmp/dlock.conf" jobs/nightly-report || true
wait $!
"$dlock" run -c "$tmp/dlock.conf" strong/ledger-compaction -- sh -c 'echo "running: $DLOCK_RESOURCE on $DLOCK_BACKEND, fencing token $DLOCK_FENCING_TOKEN"'
"$dlock" run -c "$tmp/dlock.conf" cleanup -- sh -c 'echo "running: $DLOCK_RESOURCE on $DLOCK_BACKEND, fencing token $DLOCK_FENCING_TOKEN"'
