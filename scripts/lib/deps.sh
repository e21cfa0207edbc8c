# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# shellcheck disable=SC2034  # the package lists are used by the scripts that source this file
#
# scripts/lib/deps.sh — shared by the scripts of scripts/.
#
# Installs the Debian packages the project needs, and configures a meson
# build directory.  Sourced, never run: it defines functions and package
# lists and changes nothing by itself.

# What building the library and the dlock command needs, and nothing
# more: scripts/dlock.sh installs only these.
DLOCK_BUILD_PACKAGES=(
	build-essential meson ninja-build pkg-config       # toolchain
	libglib2.0-dev libhiredis-dev libzookeeper-mt-dev  # the library's clients
)

# The servers that scripts/dlock-servers.sh and run-example.sh start on
# loopback ports, as the tests do.  A new backend adds its server here.
DLOCK_SERVER_PACKAGES=(
	redis-server redis-tools                           # Redis: server, CLI
	zookeeper                                          # ZooKeeper: server (and a JVM)
)

# What the tests need besides, one group per line (with cmocka found the
# build adds the test programs).
DLOCK_TEST_PACKAGES=(
	libcmocka-dev                                      # the test programs
	python3-redis                                      # Redis peer (redis-py)
	python3-kazoo libcurator-recipes-java default-jdk-headless  # ZooKeeper peers: kazoo, Curator (javac for its driver)
	valgrind g++ binutils lua-check                    # checks: valgrind pass, C++ header test, nm in the abi test, luacheck
	cmake                                              # the installed CMake package's test (tests/install)
	dpkg-dev debhelper lintian                         # the Debian packages' test (tests/install/test-deb.sh)
	groff-base                                         # the man(3) pages' check: groff -ww warnings (tests/abi)
	clang-14 libclang-rt-14-dev                        # fuzzing: clang -fsanitize=fuzzer (scripts/fuzz.sh)
)

# Every package the build and the tests need.
DLOCK_PACKAGES=("${DLOCK_BUILD_PACKAGES[@]}" "${DLOCK_SERVER_PACKAGES[@]}" "${DLOCK_TEST_PACKAGES[@]}")

dlock_log() {
	printf '%s: %s\n' "${DLOCK_SCRIPT_NAME:-dlock}" "$*" >&2
}

# dlock_missing_packages PKG... — print the packages that are not installed.
dlock_missing_packages() {
	local pkg status
	for pkg in "$@"; do
		status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
		if [[ "$status" != installed ]]; then
			printf '%s\n' "$pkg"
		fi
	done
}

# dlock_install_packages PKG... — install those of PKG that are missing.
# Runs apt-get update once, and only if something is missing.  Needs root
# (or sudo without a password) when something is missing.
dlock_install_packages() {
	local -a missing sudo=()
	if ! command -v dpkg-query >/dev/null 2>&1; then
		dlock_log "dpkg-query not found: this script installs packages on Debian only;"
		dlock_log "install these yourself: $*"
		return 1
	fi
	mapfile -t missing < <(dlock_missing_packages "$@")
	if ((${#missing[@]} == 0)); then
		return 0
	fi
	if ((EUID != 0)); then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			dlock_log "missing packages: ${missing[*]}"
			dlock_log "run as root: apt-get install --no-install-recommends ${missing[*]}"
			return 1
		fi
	fi
	dlock_log "installing missing packages: ${missing[*]}"
	"${sudo[@]}" apt-get update -q </dev/null || return 1
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null || return 1
	mapfile -t missing < <(dlock_missing_packages "${missing[@]}")
	if ((${#missing[@]} != 0)); then
		dlock_log "still missing after apt-get install: ${missing[*]}"
		return 1
	fi
}

# dlock_meson_setup DIR [MESON-OPTION...] — configure DIR with exactly these
# options: reconfigure an existing build directory in place (fast, keeps
# the objects), start over if that fails, and replace a directory that is
# not a meson build directory.
dlock_meson_setup() {
	local dir=$1
	shift
	if [[ -f "$dir/meson-private/coredata.dat" ]]; then
		if meson setup --reconfigure "$dir" "$@"; then
			return 0
		fi
		dlock_log "reconfiguring $dir failed; configuring it afresh"
		meson setup --wipe "$dir" "$@"
		return
	fi
	if [[ -e "$dir" ]]; then
		dlock_log "removing $dir (not a usable meson build directory)"
		rm -rf -- "$dir"
	fi
	meson setup "$dir" "$@"
}
