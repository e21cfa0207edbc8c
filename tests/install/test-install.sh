#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# dlock as a library is installed and used: meson install into a staging
# directory, then programs built against it as their authors would --
# with pkg-config (shared and static) and with CMake (dlock::dlock and
# dlock::dlock_static) -- take and release a lock; pkg-config's --cflags
# carry nothing of dlock's own dependencies; the command finds the library
# through its run path; the man pages are installed, the library's with a
# page for every function name.  The GLib adapter, dlock-glib.h, builds
# with pkg-config's dlock-glib.
# usage: test-install.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
source=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/install/check.sh
source "$(dirname "${BASH_SOURCE[0]}")/check.sh"
option() { # NAME -> the build's value of meson option NAME
	meson introspect "$build" --buildoptions |
		python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$1"
}

prefix=$(option prefix)
libdir=$(option libdir)
includedir=$(option includedir)
dest=$tmp/stage
root=$dest$prefix
if ! meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log"
	echo "FAIL - meson install"
	exit 1
fi
echo "ok - meson install into a staging directory"
for f in "$includedir/dlock.h" "$includedir/dlock-glib.h" "$libdir/pkgconfig/dlock-glib.pc" "$libdir/libdlock.so.0" "$libdir/libdlock.a" "$libdir/pkgconfig/dlock.pc" \
	"$libdir/cmake/dlock/dlockConfig.cmake" "$libdir/cmake/dlock/dlockConfigVersion.cmake" \
	bin/dlock share/man/man1/dlock.1; do
	check "installed: $f" test -e "$root/$f"
done
locks=$tmp/locks
mkdir -m 700 "$locks"

# ---- pkg-config ----
# As a staged install is used: the .pc file's paths under the staging
# directory (PKG_CONFIG_SYSROOT_DIR), nothing else changed.
pc() { PKG_CONFIG_SYSROOT_DIR=$dest pkg-config "$@"; }
export PKG_CONFIG_PATH=$root/$libdir/pkgconfig
cflags=$(pc --cflags dlock)
check "pkg-config --cflags has only dlock's include path ($cflags)" \
	bash -c '! grep -qE "glib|hiredis|zookeeper|-D" <<<"$1"' _ "$cflags"
check "pkg-config --cflags names the staged include directory" grep -q -- "-I$root/$includedir" <<<"$cflags"
cc -o "$tmp/shared" "$source/tests/install/consumer.c" $cflags $(pc --libs dlock) 2>"$tmp/cc.log" ||
	cat "$tmp/cc.log"
check "a program built with pkg-config runs against the shared library" \
	env LD_LIBRARY_PATH="$root/$libdir" "$tmp/shared" "$locks"
check "and needs libdlock.so.0" bash -c 'readelf -d "$1" | grep -q "NEEDED.*libdlock.so.0"' _ "$tmp/shared"
# Static: the archive by name, then what pkg-config --static adds.
static_libs=$(pc --static --libs dlock | tr ' ' '\n' | grep -vx -- '-ldlock' | tr '\n' ' ')
cc -o "$tmp/static" "$source/tests/install/consumer.c" $cflags "$root/$libdir/libdlock.a" $static_libs \
	2>"$tmp/cc.log" || cat "$tmp/cc.log"
check "a program linked with the static library and pkg-config --static runs" "$tmp/static" "$locks"
check "and needs no libdlock.so" bash -c '! readelf -d "$1" | grep -q "NEEDED.*libdlock"' _ "$tmp/static"
# The GLib adapter: header only, GIO through dlock-glib.pc's Requires.
# The system's GIO is not under the staging directory, so here the .pc
# files name the staged prefix instead of a sysroot's.
mkdir "$tmp/pc"
for f in dlock dlock-glib; do
	sed "s|^prefix=.*|prefix=$root|" "$root/$libdir/pkgconfig/$f.pc" >"$tmp/pc/$f.pc"
done
check "dlock-glib.pc requires dlock and gio-unix-2.0" \
	bash -c '[[ "$(PKG_CONFIG_PATH=$1 pkg-config --print-requires dlock-glib | sort | paste -sd " ")" == "dlock gio-unix-2.0" ]]' _ "$tmp/pc"
cc -std=c11 -pedantic -Wall -Wextra -Werror -o "$tmp/glib" "$source/tests/install/consumer-glib.c" \
	$(PKG_CONFIG_PATH=$tmp/pc pkg-config --cflags --libs dlock-glib) 2>"$tmp/cc.log" || cat "$tmp/cc.log"
check "a GLib program built with pkg-config's dlock-glib runs" \
	env LD_LIBRARY_PATH="$root/$libdir" "$tmp/glib" "$locks"

# ---- CMake ----
mkdir -p "$tmp/cmake-src"
cp "$source/tests/install/consumer.c" "$tmp/cmake-src/"
cat >"$tmp/cmake-src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(dlock 0.1 CONFIG REQUIRED)
add_executable(consumer_shared consumer.c)
target_link_libraries(consumer_shared PRIVATE dlock::dlock)
add_executable(consumer_static consumer.c)
target_link_libraries(consumer_static PRIVATE dlock::dlock_static)
CMAKE
if cmake -S "$tmp/cmake-src" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$root" >"$tmp/cmake.log" 2>&1 &&
	cmake --build "$tmp/cmake-build" >>"$tmp/cmake.log" 2>&1; then
	echo "ok - find_package(dlock CONFIG) and a build with both targets"
else
	cat "$tmp/cmake.log"
	echo "FAIL - find_package(dlock CONFIG) and a build with both targets"
	failed=1
fi
check "dlock::dlock: the program runs" env LD_LIBRARY_PATH="$root/$libdir" "$tmp/cmake-build/consumer_shared" "$locks"
check "dlock::dlock_static: the program runs" "$tmp/cmake-build/consumer_static" "$locks"
check "find_package(dlock 9) refuses this version" bash -c '
	mkdir -p "$1/v9" && sed "s/dlock 0.1 CONFIG/dlock 9 CONFIG/" "$1/cmake-src/CMakeLists.txt" >"$1/v9/CMakeLists.txt" &&
	cp "$1/cmake-src/consumer.c" "$1/v9/" &&
	! cmake -S "$1/v9" -B "$1/v9-build" -DCMAKE_PREFIX_PATH="$2" >/dev/null 2>&1' _ "$tmp" "$root"

# ---- the command ----
runpath=$(readelf -d "$root/bin/dlock" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
if [[ "$prefix" == /usr ]]; then
	check "the command under /usr has no run path" test -z "$runpath"
else
	check "the command finds the library in $prefix/$libdir by its run path ($runpath)" \
		test "$runpath" = "$prefix/$libdir"
fi
check "the staged command runs" env LD_LIBRARY_PATH="$root/$libdir" "$root/bin/dlock" --version
# The page's title line, with the version filled in (no man(1) needed).
version=$(meson introspect "$build" --projectinfo | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
check "dlock(1) is installed, its version ($version) filled in" \
	grep -q "^\.TH DLOCK 1 .*\"dlock $version\"" "$root/share/man/man1/dlock.1"
# The library's pages: a group page, and the one-line pages that lead the
# group's other names to it (".so man3/PAGE", relative to the man root).
man3=$root/share/man/man3
check "dlock_acquire(3) is installed, its version ($version) filled in" \
	grep -q "^\.TH dlock_acquire 3 .*\"dlock $version\"" "$man3/dlock_acquire.3"
check "dlock(3) is installed" test -f "$man3/dlock.3"
target=$(sed -n 's/^\.so //p' "$man3/dlock_info_holder_pid.3" 2>/dev/null)
check "dlock_info_holder_pid(3) is a link page (to ${target:-nothing})" test -n "$target"
check "the page it leads to, share/man/$target, is installed" test -f "$root/share/man/$target"
dangling=$(cd "$root/share/man" 2>/dev/null && sed -n 's/^\.so //p' man3/*.3 | sort -u |
	while read -r t; do test -f "$t" || echo "$t"; done | paste -sd " ")
check "every man3 link page leads to an installed page${dangling:+ (missing: $dangling)}" test -z "$dangling"
exit "$failed"
