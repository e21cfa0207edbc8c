#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# dlock.h compiles alone, as strict C11 and as C++, with every warning an
# error: it needs no other header and no configuration.
# usage: check-header.sh INCLUDE_DIR (the directory of the generated dlock.h)
set -eu
inc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include <dlock.h>\nint main(void) { return dlock_version() == 0; }\n' >"$tmp/a.c"
printf '#include <dlock.h>\nint main() { dlock_client *c = nullptr; return dlock_client_new(nullptr, &c) == DLOCK_OK ? 0 : 1; }\n' >"$tmp/b.cc"
cc -std=c11 -pedantic -Werror -Wall -Wextra -fsyntax-only -I"$inc" "$tmp/a.c"
echo "ok - dlock.h compiles alone as C11 -pedantic -Werror"
c++ -std=c++11 -pedantic -Werror -Wall -Wextra -fsyntax-only -I"$inc" "$tmp/b.cc"
echo "ok - dlock.h compiles alone as C++11 -pedantic -Werror"
if grep -nE '#\s*include\s*[<"](glib|gio|hiredis|zookeeper)' "$inc/dlock.h"; then
	echo "FAIL - dlock.h includes a dependency's header"
	exit 1
fi
echo "ok - dlock.h includes only standard headers"
if grep -nE '@[A-Za-z0-9_]+@' "$inc/dlock.h"; then
	echo "FAIL - dlock.h keeps a placeholder of dlock.h.in"
	exit 1
fi
echo "ok - dlock.h has every placeholder of dlock.h.in filled in"
