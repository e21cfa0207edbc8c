#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every public function in dlock.h says which threads may call it, in the
# fixed words the header's conventions define: the comment block right
# above its prototype (one block may serve a group of prototypes that
# follow it directly) contains "Safe from any thread", "Not while" or
# "From the callback thread".
# usage: check-thread-docs.sh DLOCK_H
set -eu
header=$1
awk '
	function finish_comment() {
		attached = buf
		gsub(/[ \t]+/, " ", attached)
		in_comment = 0
	}
	in_comment {
		line = $0
		sub(/^[ \t]*\*[ \t]?/, "", line) # the leading " * " of a block
		buf = buf " " line
		if (index($0, "*/"))
			finish_comment()
		next
	}
	/^[ \t]*\/\*/ {
		buf = $0
		in_comment = 1
		if (index($0, "*/"))
			finish_comment()
		next
	}
	/^DLOCK_API / {
		name = $0
		sub(/\(.*/, "", name)
		sub(/.*[ *]/, "", name)
		total++
		if (attached !~ /Safe from any thread|Not while|From the callback thread/) {
			printf "FAIL - %s: its comment does not say which threads may call it\n", name
			failed++
		}
		continued = $0 !~ /;[ \t]*$/
		next
	}
	continued {
		continued = $0 !~ /;[ \t]*$/
		next
	}
	{ attached = "" }
	END {
		if (total == 0) {
			print "FAIL - no DLOCK_API prototype found"
			exit 1
		}
		if (failed)
			exit 1
		printf "ok - all %d public functions say which threads may call them\n", total
	}
' "$header"
