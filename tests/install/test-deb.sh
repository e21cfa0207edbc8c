#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian packages of debian/ are built and used: a copy of the source
# tree (the files git knows, or the tree without its build directories)
# goes through dpkg-buildpackage -b without the project's tests; then
# lintian passes them, each file is in its package, the dependencies are
# the intended ones, apt would install the three packages, and a program
# built against the unpacked -dev package runs, as does the packaged
# command.  Nothing is installed on the machine: the packages are only
# unpacked into a temporary directory, removed at the end.
# usage: test-deb.sh SOURCE_DIR VERSION (VERSION: meson.build's)
# shellcheck disable=SC2016,SC2317  # bash -c scripts read their own $1; check calls the helpers
set -u
if (($# != 2)); then
	echo "usage: test-deb.sh SOURCE_DIR VERSION" >&2
	exit 64
fi
source=$1
version=$2
# shellcheck source=tests/install/check.sh
source "$(dirname "${BASH_SOURCE[0]}")/check.sh"
fatal() { # NAME [LOG]: a step everything after depends on failed
	[[ $# -gt 1 && -f "$2" ]] && tail -n 40 "$2"
	echo "FAIL - $1"
	exit 1
}

missing=()
for tool in dpkg-buildpackage dh lintian dpkg-deb dpkg-architecture apt-get readelf pkg-config cc; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
((${#missing[@]} == 0)) ||
	fatal "not found: ${missing[*]} (DLOCK_TEST_PACKAGES of scripts/lib/deps.sh has their packages)"
[[ -f "$source/debian/control" ]] || fatal "no debian/control in $source"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The tools' own temporary files go there too (lintian leaves some).
mkdir "$tmp/tmp"
export TMPDIR=$tmp/tmp
# dpkg-buildpackage writes the packages next to the tree it builds.
tree=$tmp/dlock
mkdir "$tree"

# ---- a copy of the source tree ----
# In a git checkout, the files git tracks or would track (not those it
# ignores, such as build/); elsewhere, as from a tarball, the whole tree
# but .git and meson build directories (those holding a build.ninja).
if top=$(git -C "$source" rev-parse --show-toplevel 2>/dev/null) &&
	[[ "$top" -ef "$source" ]]; then
	git -C "$source" ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do
			# A tracked file deleted in the work tree is not copied.
			[[ -e "$source/$f" || -L "$source/$f" ]] && printf '%s\0' "$f"
		done | tar -C "$source" --null -T - -cf - | tar -C "$tree" -xf - ||
		fatal "copy the files git knows of $source"
else
	tar -C "$source" --exclude=./.git --exclude-tag-all=build.ninja -cf - . | tar -C "$tree" -xf - ||
		fatal "copy $source"
fi
echo "ok - a copy of the source tree"

deb_version=$(cd "$tree" && dpkg-parsechangelog -S Version)
check "debian/changelog's version ($deb_version) is meson.build's ($version)" \
	bash -c '[[ "$1" == "$2" || "$1" == "$2"[+~]* ]]' _ "$deb_version" "$version"

# ---- the build ----
# nocheck: the project's tests are not run in the package build (rules
# leaves them out too).  Check level 4: a symbol or library that
# debian/libdlock0.symbols does not describe fails the build.
if (cd "$tree" && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS \
	DEB_BUILD_OPTIONS="nocheck parallel=2" DPKG_GENSYMBOLS_CHECK_LEVEL=4 \
	dpkg-buildpackage -us -uc -b) >"$tmp/build.log" 2>&1; then
	echo "ok - dpkg-buildpackage -us -uc -b"
else
	fatal "dpkg-buildpackage -us -uc -b" "$tmp/build.log"
fi
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
lib=usr/lib/$ma
declare -A deb
for pkg in libdlock0 libdlock-dev dlock; do
	deb[$pkg]=$tmp/${pkg}_${deb_version}_$arch.deb
	[[ -f "${deb[$pkg]}" ]] || fatal "built: ${deb[$pkg]##*/}"
done
echo "ok - built: libdlock0, libdlock-dev and dlock"
changes=$tmp/dlock_${deb_version}_$arch.changes

# ---- lintian ----
if lintian --fail-on error,warning --display-info "$changes" >"$tmp/lintian.log" 2>&1; then
	echo "ok - lintian: no error or warning"
else
	echo "FAIL - lintian: errors or warnings"
	failed=1
fi
# The informational tags too (and its complaint about root).
sed 's/^/# lintian: /' "$tmp/lintian.log"

# ---- each file in its package ----
# The files and links of a package, without ./ and without directories.
contents() {
	dpkg-deb -c "${deb[$1]}" | awk '{ print $6 }' | sed 's|^\./||' | grep -v -e '/$' -e '^$'
}
for pkg in libdlock0 libdlock-dev dlock; do
	contents "$pkg" >"$tmp/$pkg.list"
done
has() { grep -qx -- "$2" "$tmp/$1.list"; } # PKG PATH
only() { # PKG ERE...: every file of PKG matches one of them (or is its doc)
	local pkg=$1 re
	shift
	local -a args=()
	for re in "$@" "usr/share/doc/$pkg/.*"; do
		args+=(-e "^$re\$")
	done
	! grep -Ev "${args[@]}" "$tmp/$pkg.list" | sed 's/^/# also in the package: /' | grep .
}
check "libdlock0: libdlock.so.0 and the library it names" \
	bash -c 'grep -qx "$1/libdlock.so.0" "$2" && grep -qx "$1/libdlock.so.0\..*" "$2"' _ "$lib" "$tmp/libdlock0.list"
check "libdlock0: nothing but the shared library" only libdlock0 "$lib/libdlock\.so\.0(\..*)?"
check "libdlock.so.0 in no other package" \
	bash -c '! grep -q "libdlock\.so\.0" "$1" "$2"' _ "$tmp/libdlock-dev.list" "$tmp/dlock.list"
for f in usr/include/dlock.h usr/include/dlock-glib.h "$lib/pkgconfig/dlock-glib.pc" "$lib/libdlock.so" "$lib/libdlock.a" "$lib/pkgconfig/dlock.pc" \
	"$lib/cmake/dlock/dlockConfig.cmake" "$lib/cmake/dlock/dlockConfigVersion.cmake" \
	usr/share/man/man3/dlock_acquire.3.gz; do
	check "libdlock-dev: $f" has libdlock-dev "$f"
done
for f in usr/bin/dlock usr/share/man/man1/dlock.1.gz; do
	check "dlock: $f" has dlock "$f"
done
check "dlock: nothing but the command and its page" only dlock usr/bin/dlock "usr/share/man/man1/dlock\.1\.gz"
check "no file in two packages" \
	bash -c '! sort "$@" | grep -v "^usr/share/doc/" | uniq -d | grep .' _ "$tmp"/*.list

# ---- control fields ----
field() { dpkg-deb -f "${deb[$1]}" "$2"; } # PKG FIELD
relations() { field "$1" Depends | sed 's/, /\n/g'; } # PKG -> one relation a line
check "Sections: libs, libdevel, utils" \
	test "$(field libdlock0 Section) $(field libdlock-dev Section) $(field dlock Section)" = "libs libdevel utils"
check "Multi-Arch: same for the library and its -dev" \
	test "$(field libdlock0 Multi-Arch) $(field libdlock-dev Multi-Arch)" = "same same"
check "libdlock0 depends on the clients' libraries" \
	bash -c 'grep -q "^libglib2\.0-0\b" <<<"$1" && grep -q "^libhiredis[0-9.]* " <<<"$1" &&
		grep -q "^libzookeeper-mt[0-9]" <<<"$1"' _ "$(relations libdlock0)"
for rel in "libdlock0 (= $deb_version)" libglib2.0-dev libhiredis-dev libzookeeper-mt-dev; do
	check "libdlock-dev depends on $rel" grep -qxF -- "$rel" <(relations libdlock-dev)
done
check "dlock depends on libdlock0 (>= a version of its symbols file)" \
	grep -qE '^libdlock0 \(>= [0-9][^)]*\)$' <(relations dlock)
check "dlock depends on no -dev package" bash -c '! grep -q -- "-dev" <<<"$1"' _ "$(relations dlock)"
# The symbols file libdlock0 ships names each function of src/dlock.map
# with its version node, and no other.
dpkg-deb -I "${deb[libdlock0]}" symbols >"$tmp/symbols" 2>/dev/null
check "libdlock0's symbols file says Build-Depends-Package: libdlock-dev" \
	grep -qx '\* Build-Depends-Package: libdlock-dev' "$tmp/symbols"
sed -n 's/^ \(dlock_[A-Za-z0-9_]*@DLOCK_[0-9.]*\) .*/\1/p' "$tmp/symbols" | sort >"$tmp/symbols.packaged"
awk '/^DLOCK_[0-9.]+ *\{/ { node = $1 } /^[ \t]+dlock_[A-Za-z0-9_]+;/ { sub(/;.*/, ""); print $1 "@" node }' \
	"$tree/src/dlock.map" | sort >"$tmp/symbols.map"
check "libdlock0's symbols file: the functions of src/dlock.map, each at its version ($(wc -l <"$tmp/symbols.map"))" \
	bash -c 'test -s "$1" && diff "$1" "$2"' _ "$tmp/symbols.map" "$tmp/symbols.packaged"

# ---- apt would install them ----
# A simulation: nothing is installed, apt writes no cache.
if apt-get install -s -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= \
	"${deb[libdlock0]}" "${deb[libdlock-dev]}" "${deb[dlock]}" >"$tmp/apt.log" 2>&1; then
	echo "ok - apt-get install -s: the three packages and their dependencies resolve"
else
	cat "$tmp/apt.log"
	echo "FAIL - apt-get install -s: the three packages and their dependencies resolve"
	failed=1
fi

# ---- the unpacked packages in use ----
root=$tmp/root
for pkg in libdlock0 libdlock-dev dlock; do
	dpkg -x "${deb[$pkg]}" "$root" || fatal "dpkg -x ${deb[$pkg]##*/}"
done
# The man(3) pages that are only a .so request (one per function but
# the page's own) became symlinks to a page that is there.
check "libdlock-dev: the man(3) link pages are symlinks ($(find "$root/usr/share/man/man3" -type l 2>/dev/null | wc -l))" bash -c '
	links=0
	for f in "$1"/*.3.gz; do
		if [[ -L "$f" ]]; then
			links=$((links + 1))
			[[ -f "$f" ]] || { echo "# a link to nothing: $f"; exit 1; }
		elif zcat "$f" | head -n 1 | grep -q "^\.so "; then
			echo "# not a symlink: $f"
			exit 1
		fi
	done
	((links > 0))' _ "$root/usr/share/man/man3"
locks=$tmp/locks
mkdir -m 700 "$locks"
pc() { PKG_CONFIG_SYSROOT_DIR=$root PKG_CONFIG_PATH=$root/$lib/pkgconfig pkg-config "$@"; }
cflags=$(pc --cflags dlock)
check "pkg-config --cflags names the unpacked include directory ($cflags)" \
	grep -q -- "-I$root/usr/include" <<<"$cflags"
# shellcheck disable=SC2046,SC2086  # pkg-config's output is words
cc -o "$tmp/shared" "$source/tests/install/consumer.c" $cflags $(pc --libs dlock) 2>"$tmp/cc.log" ||
	cat "$tmp/cc.log"
check "a program built with pkg-config runs against the packaged library" \
	env LD_LIBRARY_PATH="$root/$lib" "$tmp/shared" "$locks"
static_libs=$(pc --static --libs dlock | tr ' ' '\n' | grep -vx -- '-ldlock' | tr '\n' ' ')
# shellcheck disable=SC2086  # words too
cc -o "$tmp/static" "$source/tests/install/consumer.c" $cflags "$root/$lib/libdlock.a" $static_libs \
	2>"$tmp/cc.log" || cat "$tmp/cc.log"
check "a program linked with the packaged static library runs" "$tmp/static" "$locks"
# dlock-glib.pc requires the system's GIO, not under the unpacked tree:
# the .pc files name that tree as their prefix instead of a sysroot.
mkdir "$tmp/pc"
for f in dlock dlock-glib; do
	sed "s|^prefix=.*|prefix=$root/usr|" "$root/$lib/pkgconfig/$f.pc" >"$tmp/pc/$f.pc"
done
# shellcheck disable=SC2046  # words too
cc -o "$tmp/glib" "$source/tests/install/consumer-glib.c" \
	$(PKG_CONFIG_PATH=$tmp/pc pkg-config --cflags --libs dlock-glib) 2>"$tmp/cc.log" || cat "$tmp/cc.log"
check "a GLib program built with the packaged dlock-glib.pc runs" \
	env LD_LIBRARY_PATH="$root/$lib" "$tmp/glib" "$locks"
check "the packaged command has no run path" \
	bash -c '! readelf -d "$1" | grep -qE "\((RUNPATH|RPATH)\)"' _ "$root/usr/bin/dlock"
out=$(env LD_LIBRARY_PATH="$root/$lib" "$root/usr/bin/dlock" --version 2>&1)
check "the packaged command runs: dlock --version ($out)" grep -qx "dlock $version" <<<"$out"
exit "$failed"
