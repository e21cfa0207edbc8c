#!/usr/bin/env bash
#
# The dlock command, run as a user would: exit statuses, the child's
# environment and descriptors, signals, lock loss, configuration errors
# and status output.  Starts its own redis-server (with a password, so
# that its absence from the child's environment and from status output
# is checked) and a ZooKeeper server (for routing) on free loopback
# ports; stops them by PID.
#
# usage: test-cli.sh PATH/TO/dlock

set -u
dlock=$1
passed=0
failed=0
# shellcheck source=scripts/lib/servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/servers.sh"
dlock_servers_init dlock-test-cli
tmp=$DLOCK_SERVERS_TMP

check() { # NAME CONDITION-COMMAND...
	local name=$1
	shift
	if "$@"; then
		passed=$((passed + 1))
		echo "ok - $name"
	else
		failed=$((failed + 1))
		echo "FAIL - $name"
	fi
}

# A free port, and a password-protected server on it.
command -v redis-server >/dev/null || { echo "redis-server not found"; echo "0 passed, 1 failed"; exit 1; }
port=$(dlock_free_ports 1)
dlock_redis_start redis "$port" --requirepass s3cret || { echo "0 passed, 1 failed"; exit 1; }
rcli() { redis-cli -p "$port" -a s3cret --no-auth-warning "$@"; }
uri="redis://:s3cret@127.0.0.1:$port"

status_of() { # CMD... -> prints exit status
	"$@" >/dev/null 2>&1
	echo $?
}

# ---- exit statuses ----
check "command's exit status is passed through" \
	test "$(status_of "$dlock" run -b "$uri" cli/status -- sh -c 'exit 7')" = 7
check "command killed by signal N gives 128+N" \
	test "$(status_of "$dlock" run -b "$uri" cli/status -- sh -c 'kill -KILL $$')" = 137

"$dlock" run -b "$uri" cli/busy -- sleep 3 &
holder=$!
for _ in $(seq 100); do [[ "$(rcli exists 'dlock:{cli/busy}')" = 1 ]] && break; sleep 0.05; done
check "-w 0 while another run holds gives 75" \
	test "$(status_of "$dlock" run -b "$uri" -w 0 cli/busy -- true)" = 75
check "-E 9 changes the not-acquired status to 9" \
	test "$(status_of "$dlock" run -b "$uri" -w 0 -E 9 cli/busy -- true)" = 9
started=$(date +%s%N)
check "-w 300ms times out with 75" \
	test "$(status_of "$dlock" run -b "$uri" -w 300ms cli/busy -- true)" = 75
elapsed_ms=$((($(date +%s%N) - started) / 1000000))
check "-w 300ms waited at least 300 ms and not much more ($elapsed_ms ms)" \
	test "$elapsed_ms" -ge 300 -a "$elapsed_ms" -lt 2000

# ---- status ----
out=$("$dlock" status -b "$uri" cli/busy)
st=$?
check "status exits 1 while held" test "$st" = 1
check "status names the holder's pid" grep -q "pid=$holder" <<<"$out"
check "status output has no password" bash -c "! grep -q s3cret <<<\"\$1\"" _ "$out"
json=$("$dlock" status -b "$uri" --json cli/busy)
check "status --json is one parseable object with held=true and the pid" \
	/usr/bin/python3 -c 'import json,sys; o=json.loads(sys.argv[1]); assert o["held"] is True and o["holder_pid"]==int(sys.argv[2]) and "s3cret" not in sys.argv[1]' "$json" "$holder"
wait "$holder"
check "status exits 0 when free" test "$(status_of "$dlock" status -b "$uri" cli/busy)" = 0
check "the lock key is gone after run" test "$(rcli exists 'dlock:{cli/busy}')" = 0

# ---- shared and exclusive runs (file backend) ----
fdir="$tmp/rw-locks"
mkdir -p "$fdir"
furi="file://$fdir"
"$dlock" run -b "$furi" -s cli/rw -- sh -c 'touch '"$tmp"'/r1; sleep 2' &
r1=$!
"$dlock" run -b "$furi" --shared cli/rw -- sh -c 'touch '"$tmp"'/r2; sleep 2' &
r2=$!
for _ in $(seq 100); do [[ -e "$tmp/r1" && -e "$tmp/r2" ]] && break; sleep 0.05; done
check "two dlock run -s hold the lock at once" test -e "$tmp/r1" -a -e "$tmp/r2"
json=$("$dlock" status -b "$furi" --json cli/rw)
check "status --json says shared and lists both readers" \
	/usr/bin/python3 -c 'import json,sys; o=json.loads(sys.argv[1]); assert o["mode"]=="shared" and sorted(h["pid"] for h in o["holders"])==sorted(int(p) for p in sys.argv[2:])' "$json" "$r1" "$r2"
check "status names the readers" bash -c "grep -q 'pid=$r1' <<<\"\$1\" && grep -q 'pid=$r2' <<<\"\$1\"" _ "$("$dlock" status -b "$furi" cli/rw)"
check "-x -w 0 while readers hold gives 75" test "$(status_of "$dlock" run -b "$furi" -x -w 0 cli/rw -- true)" = 75
started=$(date +%s%N)
"$dlock" run -b "$furi" -x cli/rw -- true
xs=$?
elapsed_ms=$((($(date +%s%N) - started) / 1000000))
check "-x waits for the readers, then runs (status $xs, $elapsed_ms ms)" test "$xs" = 0 -a "$elapsed_ms" -ge 500
wait "$r1" "$r2"
check "status --json of a free lock says free with no holders" \
	/usr/bin/python3 -c 'import json,sys; o=json.loads(sys.argv[1]); assert o["mode"]=="free" and o["holders"]==[] and o["held"] is False' "$("$dlock" status -b "$furi" --json cli/rw)"
check "-s with status is a usage error" test "$(status_of "$dlock" status -s -b "$furi" cli/rw)" = 64
"$dlock" run -b "$uri" -s cli/rw-redis -- sh -c 'touch '"$tmp"'/rr; sleep 2' &
rr=$!
for _ in $(seq 100); do [[ -e "$tmp/rr" ]] && break; sleep 0.05; done
check "-s on Redis shares with a reader that holds it" \
	test "$(status_of "$dlock" run -b "$uri" -s -w 0 cli/rw-redis -- true)" = 0
check "-x -w 0 on Redis while a reader holds gives 75" \
	test "$(status_of "$dlock" run -b "$uri" -x -w 0 cli/rw-redis -- true)" = 75
wait "$rr"

# ---- the child's environment and descriptors ----
env_out=$("$dlock" run -b "$uri" cli/env -- sh -c 'echo "R=$DLOCK_RESOURCE"; echo "B=$DLOCK_BACKEND"; echo "T=$DLOCK_FENCING_TOKEN"; env')
check "DLOCK_RESOURCE is the resource" grep -qx "R=cli/env" <<<"$env_out"
check "DLOCK_BACKEND is the URI without the password" grep -qx "B=redis://127.0.0.1:$port" <<<"$env_out"
check "no password anywhere in the child's environment" bash -c "! grep -q s3cret <<<\"\$1\"" _ "$env_out"
t1=$(sed -n 's/^T=//p' <<<"$env_out")
t2=$("$dlock" run -b "$uri" cli/env -- sh -c 'echo $DLOCK_FENCING_TOKEN')
check "DLOCK_FENCING_TOKEN increases across runs ($t1 < $t2)" test "$t1" -gt 0 -a "$t2" -gt "$t1"
# Every descriptor past 2 in the child: a leaked socket or lock file would
# show here (the listing's own descriptor is gone by the time it is read).
fds_out=$("$dlock" run -b "$uri" cli/fds -- /usr/bin/python3 -c '
import os
extra = []
for f in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink("/proc/self/fd/" + f)
    except FileNotFoundError:
        continue
    if int(f) > 2:
        extra.append(f + "=" + target)
print("extra:" + " ".join(extra))')
check "the child inherits no descriptor but 0-2 ($fds_out)" test "$fds_out" = "extra:"

# ---- signals ----
"$dlock" run -b "$uri" cli/term -- sh -c 'trap "echo got-term >'"$tmp"'/term; exit 3" TERM; while :; do sleep 0.05; done' &
runner=$!
for _ in $(seq 100); do [[ "$(rcli exists 'dlock:{cli/term}')" = 1 ]] && break; sleep 0.05; done
sleep 0.2
kill -TERM "$runner"
wait "$runner"
st=$?
check "SIGTERM to dlock run reaches the command (status $st)" test -f "$tmp/term" -a "$st" = 3
check "and the lock is released" test "$(rcli exists 'dlock:{cli/term}')" = 0

"$dlock" run -b "$uri" cli/orphan -- sh -c 'echo $$ >'"$tmp"'/child; exec sleep 30' &
runner=$!
for _ in $(seq 100); do [[ -s "$tmp/child" ]] && break; sleep 0.05; done
sleep 0.2
child=$(cat "$tmp/child")
kill -KILL "$runner"
wait "$runner" 2>/dev/null
gone=no
for _ in $(seq 100); do
	state=$(awk '{print $3}' "/proc/$child/stat" 2>/dev/null)
	[[ -z "$state" || "$state" = Z ]] && { gone=yes; break; }
	sleep 0.05
done
check "kill -9 of dlock run makes the command exit" test "$gone" = yes

# ---- a signal while waiting ----
# A waiter that gets SIGTERM or SIGINT before it has the lock stops
# waiting, exits 128+N at once, and never runs COMMAND (even once the
# holder goes away).  On the file backend and on Redis.
mkdir -m 0700 "$tmp/sigwait"
watching_file() { # PID RESOURCE: the file waiter has the lock file open
	ls -l /proc/"$1"/fd 2>/dev/null | grep -q "/sigwait/r-"
}
subscribed() { # PID RESOURCE: the Redis waiter listens for the release
	[[ "$(rcli pubsub numsub "dlock:{$2}:released" | sed -n 2p)" = 1 ]]
}
has_exited() { # PID
	local state
	state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)
	[[ -z "$state" || "$state" = Z ]]
}
signal_while_waiting() { # LABEL URI SIGNAL STATUS WAITING-CONDITION
	local label=$1 b=$2 sig=$3 want=$4 waiting=$5 res="cli/sigwait-$3"
	local holder waiter started elapsed_ms st exited=no
	rm -f "$tmp/marker"
	"$dlock" run -b "$b" "$res" -- sleep 30 &
	holder=$!
	for _ in $(seq 100); do
		"$dlock" status -b "$b" "$res" >/dev/null 2>&1
		[[ $? = 1 ]] && break
		sleep 0.05
	done
	"$dlock" run -b "$b" -w 10s "$res" -- touch "$tmp/marker" &
	waiter=$!
	for _ in $(seq 100); do "$waiting" "$waiter" "$res" && break; sleep 0.05; done
	started=$(date +%s%N)
	kill -"$sig" "$waiter"
	for _ in $(seq 60); do has_exited "$waiter" && { exited=yes; break; }; sleep 0.05; done
	elapsed_ms=$((($(date +%s%N) - started) / 1000000))
	kill -TERM "$holder"
	wait "$holder"
	wait "$waiter"
	st=$?
	check "$label: SIG$sig while waiting exits $want within 3 s (status $st, exited: $exited after $elapsed_ms ms)" \
		test "$exited" = yes -a "$st" = "$want"
	check "$label: COMMAND never ran after SIG$sig" test ! -e "$tmp/marker"
}
signal_while_waiting file "file://$tmp/sigwait" TERM 143 watching_file
signal_while_waiting file "file://$tmp/sigwait" INT 130 watching_file
signal_while_waiting redis "$uri" TERM 143 subscribed
signal_while_waiting redis "$uri" INT 130 subscribed

# No descriptor left for the thread that watches for signals while waiting
# (only 0-2 open, at most 6 allowed: the signalfd and the loss pipe take
# three): dlock must refuse to wait deaf to signals, exiting 71 (EX_OSERR).
# (LeakSanitizer, in a sanitizer build, needs a descriptor of its own at exit.)
rm -f "$tmp/marker"
mkdir -p "$tmp/nofd"
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 /usr/bin/python3 -c '
import os, resource, sys
os.closerange(3, 65536)
resource.setrlimit(resource.RLIMIT_NOFILE, (6, 6))
os.execv(sys.argv[1], sys.argv[1:])' "$dlock" run -b "file://$tmp/nofd" -w 0 cli/nofd -- \
	touch "$tmp/marker" 2>"$tmp/nofd.err"
st=$?
check "no descriptor for the signal watcher: exit 71 (status $st: $(head -c 200 "$tmp/nofd.err"))" \
	test "$st" = 71
check "no descriptor for the signal watcher: the message says so" \
	grep -q "cannot watch for signals" "$tmp/nofd.err"
check "no descriptor for the signal watcher: COMMAND never ran" test ! -e "$tmp/marker"

# ---- lock loss ----
"$dlock" run -b "$uri" -t 300ms cli/lost -- sh -c 'trap "exit 0" TERM; while :; do sleep 0.05; done' 2>"$tmp/lost.err" &
runner=$!
for _ in $(seq 100); do [[ "$(rcli exists 'dlock:{cli/lost}')" = 1 ]] && break; sleep 0.05; done
rcli del 'dlock:{cli/lost}' >/dev/null
wait "$runner"
st=$?
check "a lock lost while the command runs stops it and exits 70 (status $st)" test "$st" = 70
check "and says so on stderr" grep -q "lost" "$tmp/lost.err"

# ---- errors ----
cat >"$tmp/bad.conf" <<CONF
[backend cache]
url = $uri
ttl = 10ms
CONF
"$dlock" run -c "$tmp/bad.conf" cli/x -- true 2>"$tmp/bad.err"
st=$?
check "a configuration error exits 78" test "$st" = 78
check "and names the file, group and key" grep -q "bad.conf.*\[backend cache\].*ttl" "$tmp/bad.err"
check "an unreachable backend exits 69" \
	test "$(status_of "$dlock" run -b "redis://127.0.0.1:1?connect-timeout=500ms" cli/x -- true)" = 69
check "a usage error exits 64" test "$(status_of "$dlock" run cli/x)" = 64
# Repeated: a failure path that touched uninitialised memory crashed
# only some of the time.
for _ in 1 2 3 4 5; do
	check "an invalid resource name is a usage error for run" \
		test "$(status_of "$dlock" run -b "$uri" 'a//b' -- true)" = 64
	check "an invalid resource name is a usage error for status" \
		test "$(status_of "$dlock" status -b "$uri" 'a/../b')" = 64
done

# ---- routing by configuration ----
cat >"$tmp/route.conf" <<CONF
[defaults]
backend = main
wait = 5s

[backend main]
url = $uri

[backend other]
url = $uri
prefix = other:

[route special]
match = special/*
backend = other
CONF
routed=$("$dlock" run -c "$tmp/route.conf" special/job -- sh -c "redis-cli -p $port -a s3cret --no-auth-warning exists 'other:{special/job}'")
check "a route sends special/* to its backend" test "$routed" = 1
plain=$(DLOCK_CONFIG="$tmp/route.conf" "$dlock" run plain/job -- sh -c "redis-cli -p $port -a s3cret --no-auth-warning exists 'dlock:{plain/job}'")
check "\$DLOCK_CONFIG is read and unrouted names use the default backend" test "$plain" = 1

# Resources split between a Redis backend and the file backend.
mkdir -m 0700 "$tmp/locks"
cat >"$tmp/mixed.conf" <<CONF
[defaults]
backend = local

[backend local]
url = file://$tmp/locks

[backend fast]
url = $uri

[route fast]
match = fast/*
backend = fast
CONF
in_redis=$("$dlock" run -c "$tmp/mixed.conf" fast/job -- sh -c "redis-cli -p $port -a s3cret --no-auth-warning exists 'dlock:{fast/job}'; ls '$tmp/locks' | wc -l")
check "fast/* is locked in Redis and leaves no lock file" test "$(echo $in_redis)" = "1 0"
in_file=$("$dlock" run -c "$tmp/mixed.conf" local/job -- sh -c "redis-cli -p $port -a s3cret --no-auth-warning exists 'dlock:{local/job}'; ls '$tmp/locks'")
check "other names are locked in a file of the file backend" test "$(echo $in_file)" = "0 r-local%2Fjob"
check "status of a file lock names the file backend" \
	grep -q "backend:  file://$tmp/locks" <<<"$("$dlock" status -c "$tmp/mixed.conf" local/job)"

# ---- routing between Redis and ZooKeeper --------------------------------
zk_port=$(dlock_free_ports 1)
dlock_zk_start zk "$zk_port" 200
zk_up=no
dlock_zk_wait zk && zk_up=yes
check "a ZooKeeper server started for the routing checks" test "$zk_up" = yes
# zk_children PATH — the children of PATH, or "none" if it does not exist
zk_children() {
	/usr/bin/python3 - "$zk_port" "$1" <<'PY'
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
zk = KazooClient(hosts="127.0.0.1:" + sys.argv[1])
zk.start(timeout=10)
try:
    print(len(zk.get_children(sys.argv[2])))
except NoNodeError:
    print("none")
zk.stop()
PY
}
export -f zk_children
export zk_port
cat >"$tmp/both.conf" <<CONF
[defaults]
backend = local

[backend local]
url = file://$tmp/locks

[backend fast]
url = $uri

[backend strong]
url = zk://127.0.0.1:$zk_port?session-timeout=4s

[route fast]
match = fast/*
backend = fast

[route strong]
match = strong/*
backend = strong
CONF
strong=$("$dlock" run -c "$tmp/both.conf" strong/job -- bash -c "redis-cli -p $port -a s3cret --no-auth-warning exists 'dlock:{strong/job}'; zk_children /dlock/strong/job; echo \$DLOCK_BACKEND")
check "strong/* is locked in ZooKeeper, not in Redis" test "$(echo $strong)" = "0 1 zk://127.0.0.1:$zk_port?session-timeout=4s"
fast=$("$dlock" run -c "$tmp/both.conf" fast/job2 -- bash -c "redis-cli -p $port -a s3cret --no-auth-warning exists 'dlock:{fast/job2}'; zk_children /dlock/fast/job2")
check "fast/* is locked in Redis, not in ZooKeeper" test "$(echo $fast)" = "1 none"
left=$(zk_children /dlock/strong/job)
check "no node is left under the ZooKeeper lock after the run ($left)" test "$left" = 0 -o "$left" = none
zk_status=$("$dlock" run -c "$tmp/both.conf" strong/held -- sh -c "$dlock status -c $tmp/both.conf strong/held; echo status=\$?")
check "status of a ZooKeeper lock names the holder and exits 1" \
	grep -q "pid=" <<<"$zk_status"
check "status of a ZooKeeper lock exits 1 while held" grep -q "status=1" <<<"$zk_status"
t1=$("$dlock" run -c "$tmp/both.conf" strong/tokens -- sh -c 'echo $DLOCK_FENCING_TOKEN')
t2=$("$dlock" run -c "$tmp/both.conf" strong/tokens -- sh -c 'echo $DLOCK_FENCING_TOKEN')
check "ZooKeeper fencing tokens increase across runs ($t1 < $t2)" test "$t1" -lt "$t2"
busy=$("$dlock" run -c "$tmp/both.conf" strong/busy -- sh -c "$dlock run -c $tmp/both.conf -w 0 strong/busy -- true; echo \$?")
check "-w 0 while another dlock run holds a ZooKeeper lock -> 75" test "$busy" = 75

# ---- what the servers refuse: credentials (77) and settings (78) ----
refused() { # LABEL STATUS WORD CMD... : the exit status, and WORD in the message
	local label=$1 want=$2 word=$3 st
	shift 3
	"$@" >/dev/null 2>"$tmp/refused.err"
	st=$?
	check "$label exits $want (status $st)" test "$st" = "$want"
	check "$label: the message says '$word'" grep -qi "$word" "$tmp/refused.err"
	check "$label: the message has no password" bash -c '! grep -q "s3cret\|wr0ng" "$1"' _ "$tmp/refused.err"
}
rcli acl setuser cli-noscript on '>cli-pw' '~*' '&*' '+@all' -eval -evalsha >/dev/null
refused "no password for a server that needs one" 77 "password" \
	"$dlock" run -w 0 -b "redis://127.0.0.1:$port" cli/refused -- true
refused "status without a password" 77 "password" "$dlock" status -b "redis://127.0.0.1:$port" cli/refused
refused "a wrong password" 77 "password" "$dlock" run -w 0 -b "redis://:wr0ng@127.0.0.1:$port" cli/refused -- true
refused "a wrong ACL password" 77 "cli-noscript" \
	"$dlock" run -w 0 -b "redis://cli-noscript:wr0ng@127.0.0.1:$port" cli/refused -- true
refused "an ACL user refused the scripts" 77 "evalsha" \
	"$dlock" run -w 0 -b "redis://cli-noscript:cli-pw@127.0.0.1:$port" cli/refused -- true
refused "a database the server does not have" 78 "database 99" \
	"$dlock" run -w 0 -b "redis://:s3cret@127.0.0.1:$port/99" cli/refused -- true
if [[ "$zk_up" = yes ]]; then
	refused "a ZooKeeper chroot that does not exist" 78 "chroot" \
		"$dlock" run -w 0 -b "zk://127.0.0.1:$zk_port/no-such-chroot" cli/refused -- true
fi
check "no URI without a host crashes: redis:// exits 78" \
	test "$(status_of "$dlock" run -b "redis://" cli/refused -- true)" = 78
check "a refused run leaves no key" test "$(rcli exists 'dlock:{cli/refused}')" = 0

# ---- Redlock: three masters with the same password ----
mapfile -t rl_ports < <(dlock_free_ports 2)
dlock_redis_start redlock2 "${rl_ports[0]}" --requirepass s3cret &&
	dlock_redis_start redlock3 "${rl_ports[1]}" --requirepass s3cret || { echo "Redlock masters did not start"; failed=$((failed + 1)); }
rl_uri="redis://:s3cret@127.0.0.1:$port,127.0.0.1:${rl_ports[0]},127.0.0.1:${rl_ports[1]}"
rl_json=$("$dlock" run -b "$rl_uri" cli/redlock -- sh -c "$dlock status -b '$rl_uri' --json cli/redlock; echo \$PPID")
rl_pid=${rl_json##*$'\n'}
check "Redlock status --json: held by the run, and each of the 3 masters names it" \
	/usr/bin/python3 -c 'import json,sys; o=json.loads(sys.argv[1].splitlines()[0]); p=int(sys.argv[2]); assert o["held"] is True and o["holder_pid"]==p and len(o["masters"])==3 and all(m["reachable"] and "pid=%d " % p in m["holder"] and m["fencing_token"]==o["fencing_token"] for m in o["masters"]) and "s3cret" not in sys.argv[1]' "$rl_json" "$rl_pid"
cat >"$tmp/redlock.conf" <<CONF
[backend quorum]
url = $rl_uri
ttl = 10s

[route all]
match = *
backend = quorum
CONF
rl_keys=$("$dlock" run -c "$tmp/redlock.conf" cli/redlock-conf -- sh -c "for p in $port ${rl_ports[*]}; do redis-cli -p \$p -a s3cret --no-auth-warning pttl 'dlock:{cli/redlock-conf}'; done")
check "a configuration file's url with several hosts locks all three masters, with its ttl" \
	/usr/bin/python3 -c 'import sys; t=[int(x) for x in sys.argv[1].split()]; assert len(t)==3 and all(5000 < x <= 10000 for x in t)' "$rl_keys"
kill "${dlock_server_pid[redlock3]}"
wait "${dlock_server_pid[redlock3]}" 2>/dev/null
rl_text=$("$dlock" run -b "$rl_uri?master-timeout=300ms" cli/redlock -- sh -c "$dlock status -b '$rl_uri?master-timeout=300ms' cli/redlock")
check "Redlock with one master down: held, and that master shown unreachable" \
	bash -c 'grep -q "^held:     yes" <<<"$1" && grep -q "^master 127.0.0.1:$2: unreachable" <<<"$1"' _ "$rl_text" "${rl_ports[1]}"
check "Redlock: nothing left on the masters still up" \
	test "$(rcli exists 'dlock:{cli/redlock}')$(redis-cli -p "${rl_ports[0]}" -a s3cret --no-auth-warning exists 'dlock:{cli/redlock}')" = 00

# ---- dlock run --permits: a semaphore on the file backend ----
"$dlock" run -b "$furi" --permits 2 cli/sem -- sh -c "touch $tmp/p1; sleep 30" &
p1=$!
"$dlock" run -b "$furi" --permits 2 cli/sem -- sh -c "touch $tmp/p2; sleep 30" &
p2=$!
for _ in $(seq 100); do [[ -e "$tmp/p1" && -e "$tmp/p2" ]] && break; sleep 0.05; done
check "two dlock run --permits 2 run at once" test -e "$tmp/p1" -a -e "$tmp/p2"
check "a third with -w 0 exits 75" test "$(status_of "$dlock" run -b "$furi" --permits 2 -w 0 cli/sem -- true)" = 75
check "another number of permits while in use is a usage error, naming both" \
	bash -c 'out=$("$@" 2>&1); test $? = 64 && grep -q "in use with 2 permits; this handle asks for 3" <<<"$out"' _ \
	"$dlock" run -b "$furi" --permits 3 -w 0 cli/sem -- true
sem_status=$("$dlock" status -b "$furi" cli/sem)
check "status says 2 of 2 permits are taken and lists both holders" \
	bash -c 'grep -q "^permits:  2 of 2 taken" <<<"$1" && grep -q "pid=$2 " <<<"$1" && grep -q "pid=$3 " <<<"$1"' _ "$sem_status" "$p1" "$p2"
check "status --json has the permits" \
	/usr/bin/python3 -c 'import json,sys; o=json.loads(sys.argv[1]); assert o["permits"] == 2 and o["mode"] == "shared" and len(o["holders"]) == 2' "$("$dlock" status -b "$furi" --json cli/sem)"
kill "$p1" "$p2"
wait "$p1" "$p2" 2>/dev/null
check "--permits 0 is a usage error" test "$(status_of "$dlock" run -b "$furi" --permits 0 cli/sem -- true)" = 64
check "--permits with -s is a usage error" test "$(status_of "$dlock" run -b "$furi" --permits 2 -s cli/sem -- true)" = 64

# ---- dlock elect: one participant runs COMMAND while it leads ----
"$dlock" elect -b "$uri" --id web-1 cli/elect -- sh -c "echo \"\$DLOCK_LEADER_ID \$DLOCK_FENCING_TOKEN\" >$tmp/leader1; sleep 30" 2>/dev/null &
e1=$!
for _ in $(seq 100); do [[ -s "$tmp/leader1" ]] && break; sleep 0.05; done
check "elect runs COMMAND while leading, with DLOCK_LEADER_ID" grep -q "^web-1 [0-9]" "$tmp/leader1"
check "status names the leader" grep -qx "leader:   web-1" <<<"$("$dlock" status -b "$uri" cli/elect)"
check "status --json has the leader" \
	/usr/bin/python3 -c 'import json,sys; assert json.loads(sys.argv[1])["leader"] == "web-1"' "$("$dlock" status -b "$uri" --json cli/elect)"
check "another participant with -w 0 exits 75" \
	test "$(status_of "$dlock" elect -b "$uri" -w 0 --id web-2 cli/elect -- true)" = 75
"$dlock" elect -b "$uri" --id web-2 cli/elect -- sh -c "echo \"\$DLOCK_LEADER_ID \$DLOCK_FENCING_TOKEN\" >$tmp/leader2" &
e2=$!
for _ in $(seq 100); do [[ "$(rcli zcard 'dlock:{cli/elect}:q')" = 1 ]] && break; sleep 0.05; done
kill -TERM "$e1"
wait "$e1"
wait "$e2"
st=$?
check "when the leader stops, the waiting participant leads and runs (status $st)" \
	bash -c 'test "$1" = 0 && grep -q "^web-2 [0-9]" "$2"' _ "$st" "$tmp/leader2"
read -r _ lt1 <"$tmp/leader1"
read -r _ lt2 <"$tmp/leader2"
check "the next leader's token is larger ($lt1 < $lt2)" test "$lt1" -lt "$lt2"
check "--id outside elect is a usage error" test "$(status_of "$dlock" run --id x cli/elect -- true)" = 64
"$dlock" elect -b "$uri" -t 1s --id web-3 cli/elect-lost -- sleep 30 2>"$tmp/elect-lost.err" &
e3=$!
for _ in $(seq 100); do [[ "$(rcli exists 'dlock:{cli/elect-lost}')" = 1 ]] && break; sleep 0.05; done
rcli del 'dlock:{cli/elect-lost}' >/dev/null
wait "$e3"
st=$?
check "leadership lost while COMMAND runs stops it and exits 70 (status $st)" test "$st" = 70
check "and says leadership was lost" grep -q "leadership of cli/elect-lost was lost" "$tmp/elect-lost.err"
check "elect leaves no key" test "$(rcli exists 'dlock:{cli/elect}' 'dlock:{cli/elect}:q' 'dlock:{cli/elect-lost}')" = 0

echo "${passed} passed, ${failed} failed"
[[ "$failed" = 0 ]]
