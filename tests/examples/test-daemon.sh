#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# An example daemon (examples/glib-daemon, examples/poll-daemon) on the
# file backend, in a directory of its own: it holds its three locks while
# it runs and exits 0 after --for with every one free; a lock file removed
# under it is reported lost and the lock taken again; SIGTERM ends it
# cleanly; bad arguments exit 64.  Its lines begin with its name.
# usage: test-daemon.sh DAEMON DLOCK_COMMAND
# shellcheck disable=SC2016,SC2317  # bash -c scripts read their own $1; check calls the helpers
set -u
daemon=$1
dlock=$2
prog=$(basename "$daemon")
tmp=$(mktemp -d)
pid=
trap '[[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
# shellcheck source=tests/install/check.sh
source "$(dirname "${BASH_SOURCE[0]}")/../install/check.sh"
dir=$tmp/locks
mkdir -m 700 "$dir"
log=$tmp/log

held() { # NAME: whether the dlock command sees NAME held
	"$dlock" status -b "file://$dir" "$1" >/dev/null
	[[ $? == 1 ]]
}
free_now() { # NAME: whether the dlock command sees NAME free
	"$dlock" status -b "file://$dir" "$1" >/dev/null
}
logged() { # COUNT ERE: wait up to 10 s until the log has COUNT lines matching ERE
	local i
	for ((i = 0; i < 200; i++)); do
		(($(grep -cE -- "$2" "$log") >= $1)) && return 0
		sleep 0.05
	done
	cat "$log"
	return 1
}

# ---- three locks for 2 seconds ----
"$daemon" --uri "file://$dir" --for 2 alpha beta gamma >"$log" 2>&1 &
pid=$!
check "it holds its three locks" logged 3 "^$prog: holding "
for name in alpha beta gamma; do
	check "dlock status sees $name held" held "$name"
done
wait "$pid"
status=$?
pid=
check "it exits 0 after --for ($status)" test "$status" = 0
check "it released the three" logged 3 "^$prog: released "
for name in alpha beta gamma; do
	check "$name is free after it" free_now "$name"
done

# ---- a lock lost, taken again; stopped by SIGTERM ----
# The default backend: the file backend in $DLOCK_DIR.
DLOCK_DIR=$dir "$daemon" lost-one >"$log" 2>&1 &
pid=$!
check "it holds lost-one" logged 1 "^$prog: holding lost-one"
rm -f "$dir/r-lost-one"
check "it reports the removed lock file as lost" logged 1 "^$prog: lost lost-one"
check "and takes the lock again" logged 2 "^$prog: holding lost-one"
check "dlock status sees lost-one held again" held lost-one
kill -TERM "$pid"
wait "$pid"
status=$?
pid=
check "SIGTERM: it exits 0 ($status)" test "$status" = 0
check "lost-one is free after it" free_now lost-one

# ---- bad arguments ----
"$daemon" --uri "file://$dir" >"$log" 2>&1
status=$?
check "no NAME: exit 64 ($status) with a message" bash -c '[[ $1 == 64 ]] && grep -q "no lock NAME" "$2"' _ "$status" "$log"
"$daemon" --for=soon x >"$log" 2>&1
status=$?
check "--for not a number: exit 64 ($status)" test "$status" = 64
"$daemon" --uri "file://$dir" fine 'bad//name' >"$log" 2>&1
status=$?
check "an invalid NAME: exit 64 ($status) with dlock's message" bash -c '[[ $1 == 64 ]] && grep -q "bad//name: ." "$2"' _ "$status" "$log"
check "and the lock it had started on is free" free_now fine
"$daemon" --uri "nosuch://x" x >"$log" 2>&1
status=$?
check "an unknown backend: exit 1 ($status) with dlock's message" bash -c '[[ $1 == 1 ]] && grep -q . "$2"' _ "$status" "$log"
exit "$failed"
