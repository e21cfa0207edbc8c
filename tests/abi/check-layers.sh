#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The layers of src/ hold: hiredis is included under src/redis only and
# the ZooKeeper client under src/zk only; src/kit, the bottom layer,
# includes nothing of src/common (the core and its seam, backend.h) and no
# backend; src/common names no backend and calls no recipe (src/recipes,
# the election: the core reaches it only through the hooks it sets on its
# handle), and a recipe reaches the core through recipe.h alone; a backend
# includes neither another backend's headers nor core.h, the core's
# private structures; the library takes its mutexes at a rank
# (src/kit/mutex.h); the command includes only the public header.  The build gives each folder only its own include path,
# but both clients' headers sit in the system include path too, so the
# build alone cannot refuse a stray include: this check does.
# usage: check-layers.sh SRC_DIR
set -eu
cd "$1"
failed=0

# includes DIR PATTERN — the #include lines under DIR matching PATTERN.
includes() {
	grep -rnE "^\s*#\s*include\s*[<\"]($2)" --include='*.c' --include='*.h' "$1" || true
}

check() { # WHAT FOUND
	if [[ -n "$2" ]]; then
		echo "FAIL - $1:"
		echo "$2"
		failed=1
	else
		echo "ok - $1"
	fi
}

check "hiredis is included under src/redis only" \
	"$(includes . 'hiredis' | grep -v '^\./redis/' || true)"
check "the ZooKeeper client is included under src/zk only" \
	"$(includes . 'zookeeper' | grep -v '^\./zk/' || true)"
check "src/kit includes no header of src/common and no backend's" \
	"$(includes kit '(backend|core|config)\.h|(redis|zk|file)[/.]|\.\./')"
check "src/common calls no recipe and includes nothing of src/recipes" \
	"$(grep -rnE 'dlock__election_|#\s*include\s*[<"][^">]*recipes/' --include='*.c' --include='*.h' common || true)"
check "src/recipes reaches the core through recipe.h alone (not core.h or backend.h)" \
	"$(includes recipes '[^">]*(core|backend)\.h|(redis|zk|file)[/.]|\.\./')"
check "src/common names no backend" \
	"$(includes common '(redis|zk|file)[/.]|\.\./')"
for b in redis zk file; do
	check "src/$b includes no other backend's header and not core.h" \
		"$(includes "$b" '\.\./|core\.h|(redis|zk|file)/|(redis|zk|file)\.h' | grep -v "#\s*include\s*\"$b\.h\"" || true)"
done
check "the library takes its mutexes at a rank (src/kit/mutex.h), never g_mutex_lock() bare" \
	"$(grep -rnE '\bg_mutex_(lock|trylock|unlock)\s*\(' --include='*.c' --include='*.h' . | grep -v '^\./kit/mutex\.[ch]:' | grep -v '^\./cli/' || true)"
check "src/cli includes no header of the library but dlock.h (and its own cli.h)" \
	"$(includes cli '[^">]*"' | grep -v '"dlock\.h"\|"cli\.h"' || true)"
exit "$failed"
