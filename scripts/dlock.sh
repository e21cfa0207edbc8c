#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/dlock.sh — set up and run the dlock command on a fresh Debian
# machine: installs the missing packages, builds, and runs
#
#     build/src/cli/dlock ARGS...
#
# With no ARGS it shows the main job on the embedded default (the file
# backend, no server needed): a command run under a lock, the lock's
# status while it runs, and the status after it finished.

set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
DLOCK_SCRIPT_NAME=dlock.sh
# shellcheck source=scripts/lib/deps.sh
source "$root/scripts/lib/deps.sh"
# Only what building the library and the command needs: no test toolchain,
# no servers (the file backend needs none).
dlock_install_packages "${DLOCK_BUILD_PACKAGES[@]}" >&2
dlock_meson_setup build >/dev/null
meson compile -C build dlock:executable >/dev/null
# The command as the build leaves it (src/cli/meson.build).
dlock=build/src/cli/dlock

if (($# > 0)); then
	exec "$dlock" "$@"
fi

set -x
"$dlock" run nightly-report -- sh -c \
	'echo "report running under the lock: resource $DLOCK_RESOURCE, fencing token $DLOCK_FENCING_TOKEN, backend $DLOCK_BACKEND"; sleep 2' &
sleep 0.5
"$dlock" status nightly-report || true
rc=0
"$dlock" run -w 0 nightly-report -- echo "not reached: the lock is held" || rc=$?
# 75: not acquired in time (EX_TEMPFAIL); anything else is a failure here.
[[ $rc == 75 ]] || exit 1
echo "second run refused with status $rc"
wait $!
"$dlock" status nightly-report
