#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# dlock-glib.h compiles alone with gio-unix-2.0's flags, as strict C11 and
# as C++, with every warning an error, and dlock.h stays free of GLib.
# usage: check-glib-header.sh GENERATED_INCLUDE_DIR SOURCE_INCLUDE_DIR
set -eu
gen=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2207  # pkg-config's output is words
gio=($(pkg-config --cflags gio-unix-2.0))
cat >"$tmp/a.c" <<'C'
#include <dlock-glib.h>
int main(void)
{
	GError *error = NULL;
	g_set_error_literal(&error, DLOCK_GLIB_ERROR, DLOCK_EINVAL, "x");
	g_clear_error(&error);
	return dlock_glib_attach(NULL, NULL) != 0 || dlock_glib_acquire_finish(NULL, NULL, NULL, NULL);
}
C
sed 's/NULL/nullptr/g' "$tmp/a.c" >"$tmp/b.cc"
cc -std=c11 -pedantic -Werror -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-fsyntax-only -I"$src" -I"$gen" "${gio[@]}" "$tmp/a.c"
echo "ok - dlock-glib.h compiles alone as C11 -pedantic -Werror"
c++ -std=c++11 -pedantic -Werror -Wall -Wextra -fsyntax-only -I"$src" -I"$gen" "${gio[@]}" "$tmp/b.cc"
echo "ok - dlock-glib.h compiles alone as C++11 -pedantic -Werror"
if grep -nE '#\s*include\s*[<"](glib|gio)' "$gen/dlock.h"; then
	echo "FAIL - dlock.h includes GLib"
	exit 1
fi
echo "ok - dlock.h includes no GLib header"
