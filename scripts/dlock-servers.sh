#!/usr/bin/env bash
#
# scripts/dlock-servers.sh — the main job again, with a configuration file
# that routes resources to backends: jobs/* to a throwaway redis-server,
# strong/* to a throwaway ZooKeeper server (both started here on free
# loopback ports in a temporary directory, stopped by PID on exit),
# everything else to the file backend.  Installs what is missing and
# builds first.

set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
DLOCK_SCRIPT_NAME=dlock-servers.sh
# shellcheck source=scripts/lib/deps.sh
source "$root/scripts/lib/deps.sh"
dlock_install_packages "${DLOCK_PACKAGES[@]}" >&2
dlock_meson_setup build >/dev/null
meson compile -C build dlock:executable >/dev/null

tmp=$(mktemp -d)
server=
zk_server=
cleanup() {
	[[ -n "$server" ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
	[[ -n "$zk_server" ]] && kill "$zk_server" 2>/dev/null && wait "$zk_server" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
server=$!
for _ in $(seq 100); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.05
done
zk_port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$tmp/zk/data"
printf 'tickTime=2000\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n' \
	"$tmp/zk/data" "$zk_port" >"$tmp/zk/zoo.cfg"
java -Xms32m -Xmx256m -XX:+UseSerialGC \
	-cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar \
	org.apache.zookeeper.server.quorum.QuorumPeerMain "$tmp/zk/zoo.cfg" >"$tmp/zk/zk.log" 2>&1 &
zk_server=$!
for _ in $(seq 300); do
	(exec 3<>"/dev/tcp/127.0.0.1/$zk_port" && echo srvr >&3 && grep -q Mode <&3) 2>/dev/null && break
	sleep 0.1
done
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
set -x
build/dlock run -c "$tmp/dlock.conf" jobs/nightly-report -- sh -c 'echo "running: $DLOCK_RESOURCE on $DLOCK_BACKEND, fencing token $DLOCK_FENCING_TOKEN"; sleep 1' &
sleep 0.5
build/dlock status -c "$tmp/dlock.conf" jobs/nightly-report || true
wait $!
build/dlock run -c "$tmp/dlock.conf" strong/ledger-compaction -- sh -c 'echo "running: $DLOCK_RESOURCE on $DLOCK_BACKEND, fencing token $DLOCK_FENCING_TOKEN"'
build/dlock run -c "$tmp/dlock.conf" cleanup -- sh -c 'echo "running: $DLOCK_RESOURCE on $DLOCK_BACKEND, fencing token $DLOCK_FENCING_TOKEN"'
