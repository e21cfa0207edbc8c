#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/bench.sh [--quick] — dlock against the raw server floor and
# against peer libraries, side by side in one run.
#
# Builds dlock-bench, starts throwaway servers on free loopback ports — one
# redis-server, three more as Redlock masters, a 3-master Redis Cluster, a
# master with one replica, one ZooKeeper server, one 3-node ZooKeeper
# ensemble — and a file-backend directory, then runs every mode of
# dlock-bench (latency, handoff, throughput, waiters, fifo, readers,
# semaphore, failover)
# on each (on Redlock: the redlock mode and handoff; versus: one server
# against the cluster, and the replicated master without and with
# min-replicas=1), and the peer drivers of
# bench/peers/ (redis-py and tooz on Redis; kazoo and Curator on
# ZooKeeper) on the same servers with the same counts.  Writes
# docs/bench/results.json (machine, versions, every result),
# docs/bench/results.md (tables of ratios, the targets judged from
# the run) and PNG plots, through scripts/bench-report.py.  Two runs, say
# before and after a change, compare with
# scripts/bench-report.py compare BEFORE/results.json AFTER/results.json.  Stops every server it started,
# by PID, on exit.
#
#   --quick   small counts, about two minutes: a smoke check of the whole
#             pipeline, not numbers to quote.
#
# The full run takes about 15 minutes on a 2-core machine.  It is never
# part of the test suite.  Environment: DLOCK_BENCH_PEERS=DIR runs the
# peer drivers from DIR instead of bench/peers/; DLOCK_BENCH_OUT=DIR writes
# the results to DIR instead of docs/bench/.

set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
DLOCK_SCRIPT_NAME=bench.sh
quick=0
for arg in "$@"; do
	case $arg in
	--quick) quick=1 ;;
	-h | --help)
		sed -n '3,30p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "usage: scripts/bench.sh [--quick]" >&2
		exit 64
		;;
	esac
done

# shellcheck source=scripts/lib/deps.sh
source "$root/scripts/lib/deps.sh"
# gnuplot-nox draws the plots; python3-tooz is the tooz peer; libslf4j-java
# gives the Curator peer its slf4j-simple logger.
dlock_install_packages "${DLOCK_PACKAGES[@]}" gnuplot-nox python3-tooz libslf4j-java
dlock_meson_setup build >/dev/null
meson compile -C build dlock-bench >/dev/null

PY=/usr/bin/python3 # Debian's, which sees the peers' packages
bench=$root/build/dlock-bench
report=$root/scripts/bench-report.py
peers_dir=${DLOCK_BENCH_PEERS:-$root/bench/peers}
out_dir=${DLOCK_BENCH_OUT:-$root/docs/bench}

# ---- counts ----------------------------------------------------------------
# Latency: rounds x pairs per subject, per backend kind; peers get the same
# total (rounds x pairs) and the same warm-up.
if ((quick)); then
	outer_rounds=1
	lat_redis=(2 300 300) lat_zk=(2 100 200) lat_file=(2 500 500) # rounds count warmup
	handoffs=20
	tp_rounds=1 tp_seconds=1 tp_threads=4 tp_resources=2
	waiter_handoffs=40
	fifo_waiters=8 fifo_trials=1
	reader_list=1,16 reader_pairs=100
	failovers=1
else
	outer_rounds=2
	lat_redis=(10 1000 1000) lat_zk=(5 300 1000) lat_file=(10 2000 1000)
	handoffs=200
	# Throughput is the most sensitive to other load on the machine: more,
	# shorter rounds, and the report takes the median over rounds.
	tp_rounds=4 tp_seconds=3 tp_threads=4 tp_resources=2
	waiter_handoffs=300
	fifo_waiters=16 fifo_trials=3
	reader_list=1,16,64 reader_pairs=1000
	failovers=5
fi
waiter_list=1,4,16,64

# ---- placement -----------------------------------------------------------------
# Loopback latency on a small machine depends mostly on where the processes
# run.  With two or more cores the servers (redis-server and every
# ZooKeeper JVM) run on CPU 1 and every client (dlock-bench with its floor,
# its worker processes, every peer driver) on CPU 0: a client never
# competes with its server for a core, as over a network, and every subject
# gets the same placement.  Within latency and handoff, dlock and its floor
# run in one dlock-bench process, interleaved round by round, so drift
# (other load, the JIT) hits both alike; peers alternate with dlock runs.
cores=$(nproc)
if ((cores >= 2)); then
	srv=(taskset -c 1)
	cli=(taskset -c 0)
	placement="Servers (redis-server, every ZooKeeper JVM) pinned to CPU 1, every client process (dlock-bench, its workers, the peer drivers) to CPU 0 (taskset)."
else
	srv=()
	cli=()
	placement="One core: nothing pinned."
fi

# shellcheck source=scripts/lib/servers.sh
source "$root/scripts/lib/servers.sh"
dlock_servers_init dlock-bench
dlock_server_prefix=("${srv[@]}")
tmp=$DLOCK_SERVERS_TMP
trap 'exit 130' INT TERM

log() { printf 'bench.sh: [%4ds] %s\n' "$SECONDS" "$*" >&2; }
fail() {
	log "$*"
	exit 1
}
notes=$tmp/notes.txt
: >"$notes"
note() {
	printf '%s\n' "$*" >>"$notes"
	log "$*"
}

# Free loopback ports, all different: Redis, ZooKeeper, 3 x (client, peer,
# election) for the ensemble, 3 Redlock masters, 3 x (client, bus) for the
# cluster, a master and its replica.
mapfile -t ports < <(dlock_free_ports 22)

# ---- servers -------------------------------------------------------------------
# The JVMs first (they take longest), Redis while they start.
redis_port=${ports[0]}
zk_port=${ports[1]}
dlock_zk_start zk "$zk_port"
zk3_ports=("${ports[2]}" "${ports[3]}" "${ports[4]}")
zk3_servers=""
for i in 0 1 2; do
	zk3_servers+="server.$((i + 1))=127.0.0.1:${ports[5 + 2 * i]}:${ports[6 + 2 * i]}"$'\n'
done
for i in 0 1 2; do
	dlock_zk_start "zk3-$((i + 1))" "${zk3_ports[i]}" 2000 "$((i + 1))" "$zk3_servers"
done
dlock_redis_start redis "$redis_port" || fail "redis-server did not start"
rl_ports=("${ports[11]}" "${ports[12]}" "${ports[13]}")
for i in 0 1 2; do
	dlock_redis_start "redlock-$((i + 1))" "${rl_ports[i]}" || fail "a Redlock master did not start"
done
# A Redis Cluster of three masters, and a master with one replica that it
# syncs at once (for min-replicas=1).
cl_ports=("${ports[14]}" "${ports[16]}" "${ports[18]}")
dlock_redis_cluster_start cluster "${ports[14]}:${ports[15]}" "${ports[16]}:${ports[17]}" \
	"${ports[18]}:${ports[19]}" || fail "the Redis Cluster did not form"
repl_port=${ports[20]}
dlock_redis_start replicated "$repl_port" --repl-diskless-sync-delay 0 ||
	fail "the replicated master did not start"
dlock_redis_replica_start replica "${ports[21]}" "$repl_port" || fail "the replica did not start"
dlock_zk_wait zk || fail "ZooKeeper did not start"
dlock_zk_wait zk3-1 zk3-2 zk3-3 || fail "the ZooKeeper ensemble elected no leader"
zk_version=$(dlock_zk_4lw "$zk_port" srvr | sed -n 's/^Zookeeper version: //p')

files=$tmp/files
mkdir -m 700 "$files"

declare -A uri server
uri[redis]="redis://127.0.0.1:$redis_port"
uri[zk]="zk://127.0.0.1:$zk_port"
uri[zk3]="zk://127.0.0.1:${zk3_ports[0]},127.0.0.1:${zk3_ports[1]},127.0.0.1:${zk3_ports[2]}"
uri[file]="file://$files"
uri[redlock]="redis://127.0.0.1:${rl_ports[0]},127.0.0.1:${rl_ports[1]},127.0.0.1:${rl_ports[2]}"
uri[cluster]="redis+cluster://127.0.0.1:${cl_ports[0]},127.0.0.1:${cl_ports[1]},127.0.0.1:${cl_ports[2]}"
uri[replicated]="redis://127.0.0.1:$repl_port"
# An election's failover waits out a lease or a session: short ones.
uri[redis-ttl2s]="${uri[redis]}?ttl=2s"
uri[zk-session4s]="${uri[zk]}?session-timeout=4s"
server[redis]="127.0.0.1:$redis_port"
server[zk]="127.0.0.1:$zk_port"
server[zk3]="127.0.0.1:${zk3_ports[0]},127.0.0.1:${zk3_ports[1]},127.0.0.1:${zk3_ports[2]}"
declare -A peers
peers[redis]="redis-py tooz"
peers[zk]="kazoo curator"
peers[zk3]="kazoo curator"
peers[file]=""
peers[redlock]=""
backends=(redis zk zk3 file)

log "machine: $(uname -m), $cores cores; servers up: Redis $redis_port, Redlock ${rl_ports[*]}, cluster ${cl_ports[*]}, master $repl_port with replica ${ports[21]}, ZooKeeper $zk_port, ensemble ${zk3_ports[*]}"

# ---- runs ------------------------------------------------------------------------
results=$tmp/results.jsonl
: >"$results"
failed=0

# run_dlock ROUND MODE BACKEND ARGS... — one dlock-bench run, its results
# tagged with the round.
run_dlock() {
	local round=$1 mode=$2 backend=$3
	shift 3
	local part=$tmp/part.jsonl
	: >"$part"
	log "dlock-bench $mode on $backend (round $round)"
	if "${cli[@]}" "$bench" "$mode" "${uri[$backend]}" --label "$backend" --json "$part" "$@"; then
		$PY "$report" tag "round=$round" <"$part" >>"$results"
	else
		note "dlock-bench $mode on $backend (round $round) failed; see its message above"
		failed=1
	fi
}

declare -A peer_file peer_missing
peer_file[redis-py]=redispy_peer.py
peer_file[tooz]=tooz_peer.py
peer_file[kazoo]=kazoo_peer.py
peer_file[curator]=curator-peer.sh

# run_peer PEER ROUND MODE BACKEND ARGS... — one peer driver run on the
# backend's server; a missing driver or a failed run is noted, not fatal.
run_peer() {
	local peer=$1 round=$2 mode=$3 backend=$4
	shift 4
	local file=$peers_dir/${peer_file[$peer]} out
	local -a cmd
	if [[ ! -f "$file" ]]; then
		if [[ -z "${peer_missing[$peer]:-}" ]]; then
			peer_missing[$peer]=1
			note "peer $peer: driver missing ($file)"
		fi
		return 0
	fi
	if [[ "$file" == *.py ]]; then
		cmd=("$PY" "$file")
	else
		cmd=("$file")
	fi
	log "peer $peer $mode on $backend (round $round)"
	if out=$("${cli[@]}" timeout 900 "${cmd[@]}" "$mode" --server "${server[$backend]}" "$@" \
		2>"$tmp/peer.err"); then
		if ! printf '%s\n' "$out" | tail -n 1 |
			$PY "$report" tag "backend=$backend" "round=$round" source=peer >>"$results"; then
			note "peer $peer: $mode on $backend (round $round) printed no JSON result"
		fi
	else
		note "peer $peer: $mode on $backend (round $round) failed: $(tail -n 1 "$tmp/peer.err")"
	fi
}

latency_args() { # BACKEND -> rounds count warmup
	case $1 in
	redis) echo "${lat_redis[@]}" ;;
	zk | zk3) echo "${lat_zk[@]}" ;;
	file) echo "${lat_file[@]}" ;;
	esac
}

start_time=$SECONDS

# Latency: dlock, floor and round trip inside one process; peers between.
for b in "${backends[@]}"; do
	read -r rounds count warmup <<<"$(latency_args "$b")"
	for round in $(seq "$outer_rounds"); do
		run_dlock "$round" latency "$b" --rounds "$rounds" --count "$count" --warmup "$warmup"
		for p in ${peers[$b]}; do
			run_peer "$p" "$round" latency "$b" --resource "bench-$p-latency-$round" \
				--warmup "$warmup" --count $((rounds * count))
		done
	done
done

# Redlock: dlock on the Redlock URI beside dlock on its first
# master, the Redlock floor with and without its fencing round, and the
# single-master floor, interleaved in one process.
read -r rounds count warmup <<<"$(latency_args redis)"
for round in $(seq "$outer_rounds"); do
	run_dlock "$round" redlock redlock --rounds "$rounds" --count "$count" --warmup "$warmup"
done

# Redis topologies: dlock on one server against dlock on the cluster, and
# on the replicated master without and with min-replicas=1; pairs and
# handoffs, interleaved in one process (versus).
# run_versus ROUND NAME LABELS URI... — one versus run, its results tagged
# with the round, NAME the comparison's name (the backend in results).
run_versus() {
	local round=$1 name=$2 labels=$3
	shift 3
	local part=$tmp/part.jsonl
	: >"$part"
	log "dlock-bench versus: $name (round $round)"
	if "${cli[@]}" "$bench" versus "$@" --labels "$labels" --label "$name" --json "$part" \
		--rounds "$rounds" --count "$count" --warmup "$warmup" --handoffs "$handoffs"; then
		$PY "$report" tag "round=$round" <"$part" >>"$results"
	else
		note "dlock-bench versus: $name (round $round) failed; see its message above"
		failed=1
	fi
}
read -r rounds count warmup <<<"$(latency_args redis)"
for round in $(seq "$outer_rounds"); do
	run_versus "$round" cluster one,cluster "${uri[redis]}" "${uri[cluster]}"
	run_versus "$round" min-replicas none,min-replicas=1 "${uri[replicated]}" \
		"${uri[replicated]}?min-replicas=1"
done

# Handoff: to a waiter in another process (on Redlock too, beside one
# master).
for b in "${backends[@]}" redlock; do
	for round in $(seq "$outer_rounds"); do
		run_dlock "$round" handoff "$b" --count "$handoffs"
		for p in ${peers[$b]}; do
			run_peer "$p" "$round" handoff "$b" --resource "bench-$p-handoff-$round" --count "$handoffs"
		done
	done
done

# Throughput: one process of T threads (the peers' shape), then dlock only
# with the same threads split over two processes.
for b in "${backends[@]}"; do
	for round in $(seq "$tp_rounds"); do
		run_dlock "$round" throughput "$b" --procs 1 --threads "$tp_threads" \
			--resources "$tp_resources" --seconds "$tp_seconds"
		for p in ${peers[$b]}; do
			run_peer "$p" "$round" throughput "$b" --resource-prefix "bench-$p-tp-$round" \
				--resources "$tp_resources" --threads "$tp_threads" --seconds "$tp_seconds"
		done
	done
	if ((!quick)); then
		run_dlock 1 throughput "$b" --procs 2 --threads $((tp_threads / 2)) \
			--resources "$tp_resources" --seconds "$tp_seconds"
	fi
done

# Waiters: 1, 4, 16, 64 waiters with server work and client CPU per
# handoff.
for b in "${backends[@]}"; do
	run_dlock 1 waiters "$b" --waiters "$waiter_list" --count "$waiter_handoffs"
done

# FIFO: waiters in separate processes, grant order against arrival order.
for b in "${backends[@]}"; do
	run_dlock 1 fifo "$b" --waiters "$fifo_waiters" --count "$fifo_trials"
done

# Readers: read pairs as readers pile up, then R readers with one writer.
for b in "${backends[@]}"; do
	run_dlock 1 readers "$b" --waiters "$reader_list" --count "$reader_pairs" --seconds "$tp_seconds"
done

# Semaphores: a permit of 4 beside the mutex and its floor,
# interleaved; then 4 permits under 8 threads.
for b in "${backends[@]}"; do
	read -r rounds count warmup <<<"$(latency_args "$b")"
	run_dlock 1 semaphore "$b" --rounds "$rounds" --count "$count" --warmup "$warmup" \
		--seconds "$tp_seconds"
done

# Election failover: a leader killed (lease, session, kernel)
# and a leader resigning, to the next leader.
for b in redis-ttl2s zk-session4s file; do
	run_dlock 1 failover "$b" --count "$failovers"
done

log "measured in $((SECONDS - start_time)) s"

# ---- report ------------------------------------------------------------------
$PY "$report" build --lines "$results" --notes "$notes" --out "$out_dir" \
	--setting "quick=$quick" \
	--setting "placement=$placement" \
	--setting "zookeeper_server=$zk_version" \
	--setting "outer_rounds=$outer_rounds" \
	--setting "latency_redis=${lat_redis[0]} rounds x ${lat_redis[1]} pairs, warm-up ${lat_redis[2]}" \
	--setting "latency_zk=${lat_zk[0]} rounds x ${lat_zk[1]} pairs, warm-up ${lat_zk[2]} and >= 2 s" \
	--setting "latency_file=${lat_file[0]} rounds x ${lat_file[1]} pairs, warm-up ${lat_file[2]}" \
	--setting "handoffs=$handoffs" \
	--setting "redlock=3 masters, rounds and pairs as latency_redis" \
	--setting "topologies=a 3-master cluster (cluster-node-timeout 1000), a master with one replica; rounds and pairs as latency_redis, $handoffs handoffs" \
	--setting "throughput=$tp_rounds rounds of $tp_threads threads, $tp_resources resources, $tp_seconds s after 1 s warm-up" \
	--setting "waiters=$waiter_list, $waiter_handoffs handoffs each, hold 1 ms" \
	--setting "fifo=$fifo_waiters waiter processes, $fifo_trials trials" \
	--setting "readers=$reader_list readers, $reader_pairs read pairs each, mix $tp_seconds s" \
	--setting "semaphore=4 permits, rounds and pairs as latency; 8 threads $tp_seconds s, hold 1 ms" \
	--setting "failover=$failovers rounds each; Redis ttl 2 s, ZooKeeper session timeout 4 s" \
	--setting "zookeeper=tickTime 2000, JVM -Xms32m -Xmx256m -XX:+UseSerialGC"
log "wrote $out_dir/results.json, results.md and plots"
exit "$failed"
