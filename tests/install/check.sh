# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# The install tests' one assertion, sourced by test-install.sh and
# test-deb.sh: check NAME COMMAND... prints "ok - NAME" when COMMAND
# succeeds, else "FAIL - NAME" and sets failed=1 (the caller exits with it).
failed=0
check() {
	local name=$1
	shift
	if "$@"; then
		echo "ok - $name"
	else
		echo "FAIL - $name"
		failed=1
	fi
}
