#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
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
check "a COMMAND that is not found gives 127" \
	test "$(status_of "$dlock" run -b "$uri" cli/status -- /nonexistent/dlock-cmd)" = 127
printf 'echo never\n' >"$tmp/not-executable"
chmod 644 "$tmp/not-executable"
check "a COMMAND that cannot be executed gives 126" \
	test "$(status_of "$dlock" run -b "$uri" cli/status -- "$tmp/not-executable")" = 126
check "and the lock is released after either" test "$(rcli exists 'dlock:{cli/status}')" = 0

"$dlock" run -b "$uri" cli/busy -- sleep 4 &
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

# ---- as flock(1) users write it: -n, -q, fractional and compound waits ----
check "-n while another run holds gives 75 (as -w 0)" \
	test "$(status_of "$dlock" run -b "$uri" -n cli/busy -- true)" = 75
"$dlock" run -b "$uri" -n cli/busy -- true 2>"$tmp/busy.err"
check "without -q, not acquired says so on stderr" grep -q "cli/busy" "$tmp/busy.err"
"$dlock" run -b "$uri" -n -q cli/busy -- true 2>"$tmp/quiet.err"
st=$?
check "-q: 75 and nothing on stderr ($(wc -c <"$tmp/quiet.err") bytes)" \
	test "$st" = 75 -a ! -s "$tmp/quiet.err"
"$dlock" run -b "$uri" -q -w 0.2 cli/busy -- true 2>"$tmp/quiet.err"
st=$?
check "-q -w 0.2 (fractional seconds): 75 and nothing on stderr" \
	test "$st" = 75 -a ! -s "$tmp/quiet.err"
"$dlock" run -b "$uri" -q -w 1m30x cli/busy -- true 2>"$tmp/quiet.err"
st=$?
check "-q keeps a usage error's message (64)" \
	bash -c '[[ $1 = 64 ]] && grep -q "is not a duration" "$2"' _ "$st" "$tmp/quiet.err"
check "-w 0.1s (a fraction with a unit) times out with 75" \
	test "$(status_of "$dlock" run -b "$uri" -w 0.1s cli/busy -- true)" = 75
check "-w 1m30s and -t 1.5s are durations (runs while free)" \
	test "$(status_of "$dlock" run -b "$uri" -w 1m30s -t 1.5s cli/compound -- true)" = 0
started=$(date +%s%N)
check "-n wins over a later -w, as in flock(1): 75 at once" \
	test "$(status_of "$dlock" run -b "$uri" -n -w 5 cli/busy -- true)" = 75
elapsed_ms=$((($(date +%s%N) - started) / 1000000))
check "and did not wait the 5 s ($elapsed_ms ms)" test "$elapsed_ms" -lt 2500
check "-w 30s1m (units out of order) is a usage error" \
	test "$(status_of "$dlock" run -b "$uri" -w 30s1m cli/busy -- true)" = 64

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
mkdir -m 0700 "$fdir"
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

# ---- every signal dlock can take reaches COMMAND; dlock keeps the lock ----
# A COMMAND that notes each signal it gets (one name a line) and exits 3
# on SIGTERM; it says it is ready once its handlers are in place.
cat >"$tmp/sigrec.py" <<'PY'
import os, signal, sys, time
out = sys.argv[1]
names = {int(s): s.name for s in signal.Signals}
def name(n):
    if signal.SIGRTMIN <= n <= signal.SIGRTMAX:
        return "RTMIN+%d" % (n - signal.SIGRTMIN)
    return names.get(n, str(n))[3:]
def note(n, frame):
    with open(out, "a") as f:
        f.write(name(n) + "\n")
for s in sys.argv[2:]:
    n = signal.SIGRTMIN + int(s[6:]) if s.startswith("RTMIN+") else int(getattr(signal, "SIG" + s))
    signal.signal(n, note)
signal.signal(signal.SIGTERM, lambda n, f: sys.exit(3))
open(out + ".ready", "w").close()
while True:
    time.sleep(0.02)
PY
proc_state() { # PID -> R, S, T, Z..., or nothing once gone
	awk '{print $3}' "/proc/$1/stat" 2>/dev/null
}
child_of() { # PID -> its one child's PID
	cat "/proc/$1/task/$1/children" 2>/dev/null | awk '{print $1}'
}
forwarded="USR1 QUIT USR2 ALRM HUP INT PIPE WINCH URG CONT VTALRM PROF IO PWR XCPU XFSZ STKFLT RTMIN+0 RTMIN+1 RTMIN+5"
rm -f "$tmp/sigs" "$tmp/sigs.ready"
# shellcheck disable=SC2086  # one argument per signal
"$dlock" run -b "$uri" cli/signals -- /usr/bin/python3 "$tmp/sigrec.py" "$tmp/sigs" $forwarded &
runner=$!
for _ in $(seq 200); do [[ -e "$tmp/sigs.ready" ]] && break; sleep 0.05; done
for sig in $forwarded; do
	if [[ $sig = RTMIN+* ]]; then kill -s "$(( $(kill -l RTMIN) + ${sig#RTMIN+} ))" "$runner" 2>/dev/null || kill -"$sig" "$runner"
	else kill -"$sig" "$runner"; fi
	for _ in $(seq 60); do grep -qx "$sig" "$tmp/sigs" 2>/dev/null && break; sleep 0.05; done
	state=$(proc_state "$runner")
	check "SIG$sig to dlock run reaches COMMAND; dlock keeps running and the lock (dlock: ${state:-gone})" \
		bash -c 'grep -qx "$1" "$2" && test "$3" = S -o "$3" = R && test "$4" = 1' _ \
		"$sig" "$tmp/sigs" "$state" "$(rcli exists 'dlock:{cli/signals}')"
done
check "each signal reached COMMAND once ($(sort "$tmp/sigs" | uniq -d | tr '\n' ' '))" \
	test -z "$(sort "$tmp/sigs" | uniq -d)"
kill -TERM "$runner"
wait "$runner"
st=$?
check "then SIGTERM: COMMAND's status (status $st), and the key is gone at once" \
	test "$st" = 3 -a "$(rcli exists 'dlock:{cli/signals}')" = 0

# A COMMAND that dies of SIGUSR1 (its default): dlock releases at once and
# exits 128+10, instead of dying of it and leaving the key to its TTL.
"$dlock" run -b "$uri" cli/usr1 -- sleep 30 &
runner=$!
for _ in $(seq 100); do [[ -n "$(child_of "$runner")" && "$(rcli exists 'dlock:{cli/usr1}')" = 1 ]] && break; sleep 0.05; done
sleep 0.1
kill -USR1 "$runner"
wait "$runner"
st=$?
check "SIGUSR1 that kills COMMAND: exit 138 (status $st) and the key is gone at once (pttl $(rcli pttl 'dlock:{cli/usr1}'))" \
	test "$st" = 138 -a "$(rcli exists 'dlock:{cli/usr1}')" = 0

# Job control by kill: SIGTSTP stops COMMAND, then dlock (so a shell sees
# the job stopped); SIGCONT continues both.  Monitor mode (set -m) puts
# each job in a process group of its own whose parent, this shell, is in
# the same session: in an orphaned process group (as a test runner may
# start this script in) the kernel drops stop signals.
set -m
"$dlock" run -b "$uri" cli/tstp -- sh -c 'while :; do sleep 0.05; done' &
runner=$!
for _ in $(seq 100); do [[ -n "$(child_of "$runner")" ]] && break; sleep 0.05; done
cmd=$(child_of "$runner")
kill -TSTP "$runner"
for _ in $(seq 100); do [[ "$(proc_state "$runner")$(proc_state "$cmd")" = TT ]] && break; sleep 0.05; done
check "SIGTSTP to dlock stops COMMAND and dlock (states $(proc_state "$runner") $(proc_state "$cmd"))" \
	test "$(proc_state "$runner")$(proc_state "$cmd")" = TT
kill -CONT "$runner"
for _ in $(seq 100); do [[ "$(proc_state "$runner")" != T && "$(proc_state "$cmd")" != T ]] && break; sleep 0.05; done
check "SIGCONT to dlock continues both (states $(proc_state "$runner") $(proc_state "$cmd"))" \
	bash -c 'test "$1" != T -a "$2" != T -a -n "$1" -a -n "$2"' _ "$(proc_state "$runner")" "$(proc_state "$cmd")"
check "and the lock is still held" test "$(rcli exists 'dlock:{cli/tstp}')" = 1
kill -TERM "$runner"
wait "$runner"

# A COMMAND that ignores SIGTSTP keeps running: dlock must not stop
# either, or its lease (1 s here) would run out under COMMAND.
"$dlock" run -b "$uri" -t 1s cli/tstp-ignored -- sh -c 'trap "" TSTP; while :; do sleep 0.05; done' &
runner=$!
for _ in $(seq 100); do [[ -n "$(child_of "$runner")" ]] && break; sleep 0.05; done
cmd=$(child_of "$runner")
kill -TSTP "$runner"
sleep 2.5
check "SIGTSTP ignored by COMMAND: dlock keeps running (state $(proc_state "$runner")) and renewing (key $(rcli exists 'dlock:{cli/tstp-ignored}'))" \
	test "$(proc_state "$runner")" != T -a "$(rcli exists 'dlock:{cli/tstp-ignored}')" = 1
# That stop request is not followed later: COMMAND stopped and continued
# by kill (or a debugger) leaves dlock running and the lease renewed.
kill -STOP "$cmd"
for _ in $(seq 100); do [[ "$(proc_state "$cmd")" = T ]] && break; sleep 0.05; done
sleep 0.5
state_then=$(proc_state "$runner")
kill -CONT "$cmd"
sleep 1.5
check "COMMAND stopped by kill after an ignored SIGTSTP: dlock keeps running (state $state_then) and the lock stays (key $(rcli exists 'dlock:{cli/tstp-ignored}'))" \
	test "$state_then" != T -a "$(rcli exists 'dlock:{cli/tstp-ignored}')" = 1
kill -CONT "$runner" 2>/dev/null
kill -TERM "$runner"
wait "$runner"
set +m

# From a terminal: ^C reaches COMMAND once (the terminal signals the whole
# foreground process group, so dlock does not send it again); ^Z stops
# COMMAND and dlock, which the shell sees as a stopped job.  The shell is
# a small one: session leader on a pty, dlock its foreground job.
rm -f "$tmp/tty-sigs"*
cat >"$tmp/minishell.py" <<'PY'
import os, signal, sys, time
out = sys.argv[1]
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    os.tcsetpgrp(0, os.getpgrp())
    signal.signal(signal.SIGTTOU, signal.SIG_DFL)
    os.execv(sys.argv[2], sys.argv[2:])
os.setpgid(pid, pid)
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
os.tcsetpgrp(0, pid)
_, st = os.waitpid(pid, os.WUNTRACED)
with open(out + ".stopped", "w") as f:
    f.write(str(os.WSTOPSIG(st)) if os.WIFSTOPPED(st) else "exited")
while not os.path.exists(out + ".cont"):
    time.sleep(0.02)
os.tcsetpgrp(0, pid)
os.killpg(pid, signal.SIGCONT)
time.sleep(0.2)
os.kill(pid, signal.SIGTERM)
_, st = os.waitpid(pid, 0)
with open(out + ".status", "w") as f:
    f.write(str(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)))
PY
tty_out=$(/usr/bin/python3 - "$dlock" "$uri" "$tmp/sigrec.py" "$tmp/tty-sigs" "$tmp/minishell.py" <<'PY'
import os, pty, signal, sys, time
dlock, uri, rec, out, shell = sys.argv[1:6]
pid, fd = pty.fork()
if pid == 0:
    os.execv("/usr/bin/python3", ["python3", shell, out, dlock, "run", "-b", uri, "cli/tty", "--",
                                  "/usr/bin/python3", rec, out, "INT", "CONT"])
def until(cond, secs=5):
    end = time.time() + secs
    while time.time() < end and not cond():
        time.sleep(0.02)
    return cond()
def count(name):
    try:
        return open(out).read().split().count(name)
    except FileNotFoundError:
        return 0
def read(path):
    return open(path).read() if os.path.exists(path) else "none"
# Generous bounds: on a loaded machine three Python programs and dlock
# start here one after another.
if not until(lambda: os.path.exists(out + ".ready"), 30):
    print("ready=no")
os.write(fd, b"\x03")
until(lambda: count("INT") >= 1, 10)
time.sleep(0.5)
print("ints=%d" % count("INT"))
os.write(fd, b"\x1a")
until(lambda: os.path.exists(out + ".stopped"), 10)
time.sleep(0.1)
print("stopped=" + read(out + ".stopped"))
open(out + ".cont", "w").close()
until(lambda: os.path.exists(out + ".status"), 10)
time.sleep(0.1)
print("status=" + read(out + ".status"))
if not os.path.exists(out + ".status"):
    os.kill(pid, signal.SIGKILL) # the terminal's hang-up ends the job
os.waitpid(pid, 0)
PY
)
check "terminal ^C reaches COMMAND once ($(echo $tty_out))" grep -qx "ints=1" <<<"$tty_out"
check "terminal ^Z stops the job: the shell sees dlock stopped by SIGTSTP" grep -qx "stopped=$(kill -l TSTP)" <<<"$tty_out"
check "then continued and SIGTERM: COMMAND's status" grep -qx "status=3" <<<"$tty_out"
check "and the lock is released" test "$(rcli exists 'dlock:{cli/tty}')" = 0

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

# ---- other signals while waiting ----
# Any signal whose default action would end dlock ends the wait the same
# way; one that would not (SIGWINCH) leaves it waiting.
signal_while_waiting redis "$uri" USR1 138 subscribed
signal_while_waiting file "file://$tmp/sigwait" QUIT 131 watching_file
signal_while_waiting redis "$uri" RTMIN+3 $((128 + $(kill -l RTMIN) + 3)) subscribed
"$dlock" run -b "$uri" cli/winch-wait -- sleep 30 &
holder=$!
for _ in $(seq 100); do [[ "$(rcli exists 'dlock:{cli/winch-wait}')" = 1 ]] && break; sleep 0.05; done
rm -f "$tmp/marker"
"$dlock" run -b "$uri" -w 20s cli/winch-wait -- touch "$tmp/marker" &
waiter=$!
for _ in $(seq 100); do subscribed "$waiter" cli/winch-wait && break; sleep 0.05; done
kill -WINCH "$waiter"
kill -CONT "$waiter"
sleep 0.5
state=$(awk '{print $3}' "/proc/$waiter/stat" 2>/dev/null)
check "SIGWINCH and SIGCONT while waiting change nothing (waiter: ${state:-gone})" \
	test -n "$state" -a "$state" != Z -a "$state" != T
kill -TERM "$holder"
wait "$holder"
wait "$waiter"
st=$?
check "and the waiter runs COMMAND once the holder is gone (status $st)" test "$st" = 0 -a -e "$tmp/marker"

# No descriptor left for the thread that watches for signals while waiting
# (only 0-2 open, at most 6 allowed: the signalfd and the loss pipe take
# three): dlock must refuse to wait deaf to signals, exiting 71 (EX_OSERR).
# (LeakSanitizer, in a sanitizer build, needs a descriptor of its own at exit.)
rm -f "$tmp/marker"
mkdir -m 0700 "$tmp/nofd"
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

# ---- a loss found only at release ----
# COMMAND removes the key itself and exits at once: no renewal sees it,
# the release finds another owner (none).  dlock exits 70 and says so.
"$dlock" run -b "$uri" cli/lost-at-release -- \
	redis-cli -p "$port" -a s3cret --no-auth-warning del 'dlock:{cli/lost-at-release}' >/dev/null 2>"$tmp/lost-release.err"
st=$?
check "a loss found at release exits 70 (status $st)" test "$st" = 70
check "and says the lock was lost ($(head -c 300 "$tmp/lost-release.err"))" \
	grep -q "lock on cli/lost-at-release was lost" "$tmp/lost-release.err"
"$dlock" run -b "$uri" --on-lost=ignore cli/lost-at-release -- sh -c \
	"redis-cli -p $port -a s3cret --no-auth-warning del 'dlock:{cli/lost-at-release}' >/dev/null; exit 5" 2>"$tmp/lost-release.err"
st=$?
check "with --on-lost=ignore: COMMAND's status (status $st)" test "$st" = 5
check "and a warning that the lock was lost ($(head -c 300 "$tmp/lost-release.err"))" \
	grep -q "warning: lock on cli/lost-at-release was lost" "$tmp/lost-release.err"
"$dlock" elect -b "$uri" --id lost-1 cli/lost-at-release -- \
	redis-cli -p "$port" -a s3cret --no-auth-warning del 'dlock:{cli/lost-at-release}' >/dev/null 2>"$tmp/lost-release.err"
st=$?
check "elect: leadership lost, found at the resignation, exits 70 (status $st)" test "$st" = 70
check "and says leadership was lost ($(head -c 300 "$tmp/lost-release.err"))" \
	grep -q "leadership of cli/lost-at-release was lost" "$tmp/lost-release.err"

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

# ---- malformed command lines ----
# Each exits 64 with a line naming what was wrong (then the usage).
usage_case() { # PATTERN ARG... — exit 64 and a first line matching PATTERN
	local pattern=$1 out st
	shift
	out=$("$dlock" "$@" 2>&1 >/dev/null)
	st=$?
	check "dlock $* -> 64, '$pattern' (status $st: $(head -n 1 <<<"$out"))" \
		bash -c 'test "$1" = 64 && head -n 1 <<<"$2" | grep -q -- "$3"' _ "$st" "$out" "$pattern"
}
usage_case "no subcommand given"
usage_case "unknown subcommand 'lock'" lock x -- true
usage_case "unknown subcommand 'RUN'" RUN x -- true
usage_case "'-b' goes after the subcommand" -b "$uri" run x -- true
usage_case "unknown option '--bogus'" --bogus
usage_case "no RESOURCE given" run
usage_case "no RESOURCE given" status
usage_case "no -- COMMAND after RESOURCE 'cli/x'" run cli/x
usage_case "'true' after RESOURCE 'cli/x': expected --" run cli/x true
usage_case "no COMMAND given after --" run cli/x --
usage_case "COMMAND is an empty string" run cli/x -- ''
usage_case "unknown option '--foo'" run --foo cli/x -- true
usage_case "unknown option '-Q'" run -Q cli/x -- true
usage_case "option '-w' needs a value" run -w
usage_case "option '--wait' needs a value" elect --wait
usage_case "option '--json' takes no value" status --json=1 cli/x
usage_case "unexpected argument 'y' after RESOURCE 'x'" status x y
usage_case "option -E applies to run and elect only" status -E 3 cli/x
usage_case "option --on-lost applies to run and elect only" status --on-lost=term cli/x
usage_case "option -w applies to run and elect only" status -w 1s cli/x
usage_case "option --json applies to status only" run --json cli/x -- true
usage_case "option --id applies to elect only" run --id a cli/x -- true
usage_case "option --permits applies to run only" elect --permits 3 cli/x -- true
usage_case "-E: '300' is not an exit status" run -E 300 cli/x -- true
usage_case "--on-lost: 'kill' is neither term nor ignore" run --on-lost=kill cli/x -- true
usage_case "-w: '-5' is not a duration" run -w -5 cli/x -- true
usage_case "-w: '1.5ms' is not a duration" run -w 1.5ms cli/x -- true
usage_case "-w: '1m30' is not a duration" run -w 1m30 cli/x -- true
usage_case "option -n applies to run and elect only" status -n cli/x
usage_case "option -q applies to run and elect only" status -q cli/x
usage_case "'-n' goes after the subcommand" -n run cli/x -- true

# ---- -t TTL: a lease length, on backends with leases only ----
usage_case "-t: '0' is not a lease length" run -b "$uri" -t 0 cli/x -- true
usage_case "-t: '0ms' is not a lease length" run -b "$uri" -t 0ms cli/x -- true
usage_case "-t: 'forever' is not a duration" run -b "$uri" -t forever cli/x -- true
usage_case "ttl 50 ms is outside the range" run -b "$uri" -t 50ms cli/x -- true
ttl_case() { # LABEL PATTERN ARG... — a TTL for a backend without leases: exit 78,
	# naming that backend, and COMMAND never runs
	local label=$1 pattern=$2 out st
	shift 2
	rm -f "$tmp/ttl-marker"
	out=$("$dlock" "$@" -- touch "$tmp/ttl-marker" 2>&1 >/dev/null)
	st=$?
	check "$label: -t refused with 78, naming the backend; COMMAND not run (status $st: $out)" \
		bash -c 'test "$1" = 78 && grep -q "has no leases" <<<"$2" && grep -q -- "$3" <<<"$2" && test ! -e "$4"' \
		_ "$st" "$out" "$pattern" "$tmp/ttl-marker"
}
mkdir -m 0700 "$tmp/ttl-locks"
ttl_case "file, run" "file://$tmp/ttl-locks" run -b "file://$tmp/ttl-locks" -t 10s cli/ttl
ttl_case "file, elect" "file://$tmp/ttl-locks" elect -b "file://$tmp/ttl-locks" -t 10s cli/ttl
DLOCK_DIR=$tmp/ttl-locks ttl_case "the default file backend" "file://$tmp/ttl-locks" run -t 10s cli/ttl
usage_case "option -t applies to run and elect only" status -t 10s cli/x

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

# ---- -t on ZooKeeper: no leases there ----
ttl_case "ZooKeeper, a URI" "zk://127.0.0.1:$zk_port" run -b "zk://127.0.0.1:$zk_port" -t 10s cli/ttl
ttl_case "ZooKeeper, routed by the configuration" "backend 'strong'" run -c "$tmp/both.conf" -t 10s strong/ttl
ttl_case "ZooKeeper, elect" "zk://127.0.0.1:$zk_port" elect -b "zk://127.0.0.1:$zk_port" -t 10s cli/ttl
check "-t on a route to Redis is taken: the key's lease is 5 s" \
	test "$("$dlock" run -c "$tmp/both.conf" -t 5s fast/ttl -- redis-cli -p "$port" -a s3cret --no-auth-warning pttl 'dlock:{fast/ttl}' | awk '{print ($1 > 4000 && $1 <= 5000)}')" = 1

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

# ---- dlock status --json: one shape on every backend ----
# The same keys on file, Redis, Redlock and ZooKeeper, free, locked and
# led, with null where a backend knows no value: a script reading .leader
# or .holder_pid works whichever backend a route picks.
dlock_redis_start redlock3-again "${rl_ports[1]}" --requirepass s3cret ||
	{ echo "the third Redlock master did not start again"; failed=$((failed + 1)); }
declare -A shape_uri=([file]="file://$tmp/locks" [redis]="$uri" [redlock]="$rl_uri"
	[zk]="zk://127.0.0.1:$zk_port")
for b in file redis redlock zk; do
	u=${shape_uri[$b]}
	"$dlock" status -b "$u" --json cli/shape-free >"$tmp/shape-$b-free.json"
	"$dlock" run -b "$u" cli/shape-lock -- sh -c "'$dlock' status -b '$u' --json cli/shape-lock" \
		>"$tmp/shape-$b-lock.json"
	"$dlock" elect -b "$u" --id shape-1 cli/shape-elect -- sh -c "'$dlock' status -b '$u' --json cli/shape-elect" \
		>"$tmp/shape-$b-elect.json"
done
shape_out=$(/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
backends = ["file", "redis", "redlock", "zk"]
want_leader = {"free": None, "lock": None, "elect": "shape-1"}
def shape(o):
    """Its keys, and the keys of the elements of its arrays (holders,
    masters), each array's only where it has elements."""
    out = {"": set(o)}
    for k, v in o.items():
        if isinstance(v, list) and v:
            out[k] = set().union(*(set(x) for x in v))
    return out
bad = []
for state, leader in want_leader.items():
    shapes = {}
    for b in backends:
        try:
            o = json.load(open("%s/shape-%s-%s.json" % (tmp, b, state)))
        except Exception as e:
            bad.append("%s %s: not JSON (%s)" % (b, state, e))
            continue
        shapes[b] = shape(o)
        if o.get("leader", "missing") != leader:
            bad.append("%s %s: leader %r, want %r" % (b, state, o.get("leader", "missing"), leader))
        if state != "free" and not isinstance(o.get("holder_pid"), int) and (b, state) != ("zk", "elect"):
            bad.append("%s %s: holder_pid %r" % (b, state, o.get("holder_pid")))
    for level in set().union(*shapes.values()):
        union = set().union(*(sh.get(level, set()) for sh in shapes.values()))
        for b, sh in shapes.items():
            if level in sh and sh[level] != union:
                bad.append("%s %s lacks %s%s" % (b, state, level + "[]." if level else "",
                                                 sorted(union - sh[level])))
print("\n".join(bad) if bad else "same")
PY
)
check "status --json has the same keys on every backend, and .leader ($(echo $shape_out))" \
	test "$shape_out" = same
# A peer's lock on Redis (redis-py's SET NX PX value) is its holder, not a
# leader: only ZooKeeper's elections store bare ids.
rcli set 'dlock:{cli/shape-peer}' peer-token px 10000 >/dev/null
check "a peer's lock on Redis: holder is its value, leader and holder_pid are null" \
	/usr/bin/python3 -c 'import json,sys; o=json.loads(sys.argv[1]); assert o["holder"]=="peer-token" and o["leader"] is None and o["holder_pid"] is None, o' \
	"$("$dlock" status -b "$uri" --json cli/shape-peer)"
check "and the text names no leader" \
	bash -c '! grep -q "^leader:" <<<"$1" && grep -qx "holder:   peer-token" <<<"$1"' _ "$("$dlock" status -b "$uri" cli/shape-peer)"
check "status of a ZooKeeper election names the leader" \
	grep -qx "leader:   shape-1" <<<"$("$dlock" elect -b "zk://127.0.0.1:$zk_port" --id shape-1 cli/shape-elect -- "$dlock" status -b "zk://127.0.0.1:$zk_port" cli/shape-elect)"

echo "${passed} passed, ${failed} failed"
[[ "$failed" = 0 ]]
