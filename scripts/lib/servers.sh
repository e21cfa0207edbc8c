# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# scripts/lib/servers.sh — throwaway servers for the scripts and the cli
# test: free loopback ports, redis-server and standalone ZooKeeper (one
# server or an ensemble) in a temporary directory, stopped by PID on exit.
# Sourced, never run.
#
#   dlock_servers_init [PREFIX]      make the temporary directory
#                                    ($DLOCK_SERVERS_TMP) and install the
#                                    EXIT trap that stops every server
#                                    started here and removes it
#   dlock_free_ports N               print N distinct free loopback ports
#   dlock_redis_start NAME PORT [ARG...]
#                                    redis-server on PORT (no persistence,
#                                    data and log in $DLOCK_SERVERS_TMP/NAME),
#                                    extra ARGs passed on; returns once it
#                                    answers PING
#   dlock_redis_cluster_start NAME PORT:BUS_PORT...
#                                    a Redis Cluster of one master per
#                                    PORT (nodes NAME-1, NAME-2, ...; an
#                                    explicit cluster bus port each, their
#                                    own nodes.conf), the slots split
#                                    evenly, formed by CLUSTER ADDSLOTSRANGE
#                                    and MEET; returns once every node says
#                                    cluster_state:ok
#   dlock_redis_replica_start NAME PORT MASTER_PORT
#                                    redis-server on PORT replicating the
#                                    one on MASTER_PORT; returns once the
#                                    replica acknowledges a write (WAIT)
#   dlock_zk_start NAME PORT [TICK_MS [MYID SERVER_LINES]]
#                                    a ZooKeeper JVM, zoo.cfg and log in
#                                    $DLOCK_SERVERS_TMP/NAME; returns at once
#   dlock_zk_wait NAME...            until each of these answers srvr with a
#                                    mode (an ensemble: one is the leader)
#   dlock_zk_4lw PORT WORD           a four-letter word's answer, within 3 s
#
# The servers' PIDs are in dlock_server_pid[NAME], their logs in
# dlock_server_log[NAME].  Set the array dlock_server_prefix (e.g.
# (taskset -c 1)) to run every server under a command.  A server that does
# not come up makes the start or wait function print its name and the end
# of its log on stderr and return 1.  The servers are background jobs of
# the calling shell: wait for other jobs by PID, never with a bare wait.

declare -gA dlock_server_pid=() dlock_server_log=() dlock_server_port=()
declare -ga dlock_server_prefix=()
DLOCK_SERVERS_TMP=

# Debian's layout: the server jar (its manifest names the rest), and log4j
# through slf4j, configured from /etc/zookeeper/conf.
DLOCK_ZK_CLASSPATH=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar

# Bounds: Redis answers within 0.1 s, a ZooKeeper server within 0.5 s and
# an ensemble elects a leader within 2 s; these only matter when something
# is wrong.
DLOCK_REDIS_START_S=10
# A cluster says cluster_state:ok about 2.5 s after forming (a master
# waits 2 s after its start); a replica acknowledges within 0.2 s when its
# master syncs without delay.
DLOCK_REDIS_CLUSTER_START_S=30
DLOCK_REDIS_REPLICA_START_S=30
DLOCK_ZK_START_S=60
DLOCK_SERVER_STOP_S=10

dlock_servers_init() {
	DLOCK_SERVERS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/${1:-dlock-servers}.XXXXXX")
	trap dlock_servers_cleanup EXIT
}

# shellcheck disable=SC2317  # called by the EXIT trap
dlock_servers_cleanup() {
	local name pid i alive
	{ set +x; } 2>/dev/null # a script tracing its commands need not trace this
	for name in "${!dlock_server_pid[@]}"; do
		pid=${dlock_server_pid[$name]}
		# A stopped process acts on nothing but SIGKILL.
		kill -CONT "$pid" 2>/dev/null || true
		kill -TERM "$pid" 2>/dev/null || true
	done
	for ((i = 0; i < DLOCK_SERVER_STOP_S * 10; i++)); do
		alive=0
		for name in "${!dlock_server_pid[@]}"; do
			kill -0 "${dlock_server_pid[$name]}" 2>/dev/null && alive=1
		done
		((alive)) || break
		sleep 0.1
	done
	for name in "${!dlock_server_pid[@]}"; do
		pid=${dlock_server_pid[$name]}
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	dlock_server_pid=()
	if [[ -n "$DLOCK_SERVERS_TMP" ]]; then
		rm -rf -- "$DLOCK_SERVERS_TMP"
	fi
}

dlock_free_ports() {
	"${DLOCK_PYTHON:-/usr/bin/python3}" - "$1" <<'EOF'
import socket
import sys

# Held together until all are chosen, so they differ.
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
EOF
}

# dlock_server_failed NAME WHY — say which server did not come up, and the
# end of its log.
dlock_server_failed() {
	local log=${dlock_server_log[$1]:-}
	printf '%s: %s did not come up (%s); the end of %s:\n' \
		"${DLOCK_SCRIPT_NAME:-dlock}" "$1" "$2" "${log:-its log}" >&2
	if [[ -n "$log" && -f "$log" ]]; then
		tail -n 20 "$log" >&2
	fi
	return 1
}

dlock_redis_start() {
	local name=$1 port=$2 dir reply i
	shift 2
	dir=$DLOCK_SERVERS_TMP/$name
	mkdir -p "$dir"
	dlock_server_log[$name]=$dir/redis.log
	dlock_server_port[$name]=$port
	"${dlock_server_prefix[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' \
		--appendonly no --dir "$dir" "$@" </dev/null >"$dir/redis.log" 2>&1 &
	dlock_server_pid[$name]=$!
	for ((i = 0; i < DLOCK_REDIS_START_S * 20; i++)); do
		if ! kill -0 "${dlock_server_pid[$name]}" 2>/dev/null; then
			dlock_server_failed "$name" "redis-server on port $port exited"
			return 1
		fi
		# With a password it answers NOAUTH: up all the same.
		reply=$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null) || true
		if [[ "$reply" == PONG || "$reply" == NOAUTH* ]]; then
			return 0
		fi
		sleep 0.05
	done
	dlock_server_failed "$name" "no answer to PING on port $port within $DLOCK_REDIS_START_S s"
}

# dlock_redis_ask PORT ARG... — one command to the redis-server on PORT,
# its answer on stdout (empty when none came within 3 s).
dlock_redis_ask() {
	local port=$1
	shift
	timeout 3 redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null || true
}

dlock_redis_cluster_start() {
	local name=$1 spec port i n first_port first_bus from to ok
	shift
	local -a ports=() buses=() names=()
	for spec in "$@"; do
		ports+=("${spec%%:*}")
		buses+=("${spec##*:}")
	done
	n=${#ports[@]}
	for ((i = 0; i < n; i++)); do
		names+=("$name-$((i + 1))")
		# The default bus port (client port + 10000) may be another
		# process's: every node gets the free one it was given.  The
		# node timeout is short, as the tests' clusters have it.
		dlock_redis_start "${names[i]}" "${ports[i]}" --cluster-enabled yes \
			--cluster-config-file "nodes-${ports[i]}.conf" --cluster-port "${buses[i]}" \
			--cluster-node-timeout 1000 || return 1
	done
	# Slots split evenly, then every node meets the first (the bus port
	# named, since it is not the default).
	for ((i = 0; i < n; i++)); do
		from=$((16384 * i / n))
		to=$((16384 * (i + 1) / n - 1))
		if [[ "$(dlock_redis_ask "${ports[i]}" CLUSTER ADDSLOTSRANGE "$from" "$to")" != OK ]]; then
			dlock_server_failed "${names[i]}" "CLUSTER ADDSLOTSRANGE $from $to refused"
			return 1
		fi
	done
	first_port=${ports[0]}
	first_bus=${buses[0]}
	for ((i = 1; i < n; i++)); do
		if [[ "$(dlock_redis_ask "${ports[i]}" CLUSTER MEET 127.0.0.1 "$first_port" "$first_bus")" != OK ]]; then
			dlock_server_failed "${names[i]}" "CLUSTER MEET refused"
			return 1
		fi
	done
	for ((i = 0; i < DLOCK_REDIS_CLUSTER_START_S * 10; i++)); do
		ok=1
		for port in "${ports[@]}"; do
			if [[ "$(dlock_redis_ask "$port" CLUSTER INFO)" != *cluster_state:ok* ]]; then
				ok=0
				break
			fi
		done
		((ok)) && return 0
		sleep 0.1
	done
	dlock_server_failed "${names[0]}" "no cluster_state:ok on every node within $DLOCK_REDIS_CLUSTER_START_S s"
}

dlock_redis_replica_start() {
	local name=$1 port=$2 master=$3 i
	dlock_redis_start "$name" "$port" --replicaof 127.0.0.1 "$master" || return 1
	# A linked replica is not yet one that acknowledges: wait until a write
	# on the master is acknowledged by WAIT on the same connection.
	for ((i = 0; i < DLOCK_REDIS_REPLICA_START_S * 10; i++)); do
		if [[ "$(printf 'SET dlock-servers:probe 1\nWAIT 1 100\nDEL dlock-servers:probe\n' |
			timeout 3 redis-cli -h 127.0.0.1 -p "$master" 2>/dev/null | sed -n 2p)" == 1 ]]; then
			return 0
		fi
		sleep 0.1
	done
	dlock_server_failed "$name" "no acknowledged write (WAIT 1) on its master within $DLOCK_REDIS_REPLICA_START_S s"
}

# zoo.cfg as tests/helpers/test-zk-server.c writes it, and the same JVM
# command line (without -Xmx the JVM reserves a heap of several GB).
dlock_zk_start() {
	local name=$1 port=$2 tick=${3:-2000} myid=${4:-} servers=${5:-} dir
	dir=$DLOCK_SERVERS_TMP/$name
	mkdir -p "$dir/data"
	cat >"$dir/zoo.cfg" <<EOF
tickTime=$tick
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
EOF
	if [[ -n "$myid" ]]; then
		printf 'initLimit=10\nsyncLimit=5\n%s' "$servers" >>"$dir/zoo.cfg"
		echo "$myid" >"$dir/data/myid"
	fi
	dlock_server_log[$name]=$dir/zk.log
	dlock_server_port[$name]=$port
	"${dlock_server_prefix[@]}" java -Xms32m -Xmx256m -XX:+UseSerialGC "-Dzookeeper.log.dir=$dir" \
		-Dzookeeper.root.logger=INFO,CONSOLE -cp "$DLOCK_ZK_CLASSPATH" \
		org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" </dev/null >"$dir/zk.log" 2>&1 &
	dlock_server_pid[$name]=$!
}

# A frozen JVM still accepts connections: the answer is bounded.
dlock_zk_4lw() {
	timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' _ "$1" "$2" \
		2>/dev/null || true
}

# dlock_zk_mode NAME — what the server answers to srvr after "Mode: ".
dlock_zk_mode() {
	dlock_zk_4lw "${dlock_server_port[$1]}" srvr | sed -n 's/^Mode: //p'
}

dlock_zk_wait() {
	local name mode modes i
	for ((i = 0; i < DLOCK_ZK_START_S * 4; i++)); do
		modes=" "
		for name in "$@"; do
			if ! kill -0 "${dlock_server_pid[$name]}" 2>/dev/null; then
				dlock_server_failed "$name" "ZooKeeper on port ${dlock_server_port[$name]} exited"
				return 1
			fi
			mode=$(dlock_zk_mode "$name")
			modes+="${mode:-none} "
		done
		if [[ "$modes" != *" none "* ]] && { (($# == 1)) || [[ "$modes" == *" leader "* ]]; }; then
			return 0
		fi
		sleep 0.25
	done
	for name in "$@"; do
		dlock_server_failed "$name" "no leader among $* within $DLOCK_ZK_START_S s" || true
	done
	return 1
}
