#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs the Curator peer driver (CuratorPeer.java beside this script) in
# Java's source-file mode on Debian's jars; see that file for what it
# measures.  Usage, with ADDR a ZooKeeper connect string 127.0.0.1:P[,...]:
#
#   bench/peers/curator-peer.sh latency    --server ADDR --resource NAME --warmup N --count N
#   bench/peers/curator-peer.sh throughput --server ADDR --resource-prefix NAME --resources R --threads T --seconds S
#   bench/peers/curator-peer.sh handoff    --server ADDR --resource NAME --count N
#
# Needs libcurator-recipes-java, libslf4j-java and a JDK 11+ (java on PATH,
# or set JAVA).  The jars' own manifests pull in the rest of their classpath.
# CURATOR_PEER_SOURCE names another driver to run on the same classpath
# (the tests' tests/zk/peers/CuratorRwPeer.java).
set -eu
here=$(dirname "$0")
jars=/usr/share/java
cp=
for jar in curator-recipes curator-framework curator-client zookeeper zookeeper-jute guava slf4j-api slf4j-simple; do
	if [ ! -f "$jars/$jar.jar" ]; then
		echo "curator-peer.sh: missing $jars/$jar.jar (apt-get install libcurator-recipes-java libslf4j-java)" >&2
		exit 1
	fi
	cp=${cp:+$cp:}$jars/$jar.jar
done
exec "${JAVA:-java}" -Xms64m -Xmx256m -XX:+UseSerialGC -cp "$cp" "${CURATOR_PEER_SOURCE:-$here/CuratorPeer.java}" "$@"
