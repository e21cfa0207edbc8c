#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Interoperability peer for dlock's ZooKeeper read-write lock tests: one
hold of kazoo's ReadLock or WriteLock, told to see dlock's and Curator's
nodes as docs/zookeeper.md ("Peers") says (writers: "__WRIT__",
"__READ__", "-lock-"; readers: "__WRIT__", "-lock-").

    kazoo_rw_peer.py try|hold read|write --server ADDR --resource /PATH

try:  acquire without waiting; print "acquired" (then release) or "busy".
hold: acquire without waiting; print "held" or "busy"; when held, wait
      for a line on stdin, release, print "released".

Only tries: kazoo 2.8.0 (Debian's) deadlocks a reader queued before a
writer (fixed in 2.9.0), so this peer never queues.

The lock node is a container: the server may remove it, empty, between
kazoo's ensure_path and its create, which then raises NoNodeError.  A
kazoo user sharing locks with dlock or Curator retries with a new lock
object, and so does this peer.
"""
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

WRITER_PATTERNS = ["__WRIT__", "__READ__", "-lock-"]
READER_PATTERNS = ["__WRIT__", "-lock-"]
CREATE_ATTEMPTS = 5  # the lock node reaped under kazoo's create, each time


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 64
    mode, kind = argv[1], argv[2]
    opts = dict(zip(argv[3::2], argv[4::2]))
    client = KazooClient(hosts=opts["--server"])
    client.start(timeout=15)
    path = opts["--resource"]
    for attempt in range(CREATE_ATTEMPTS):
        if kind == "read":
            lock = client.ReadLock(path, "kazoo-rw-peer", extra_lock_patterns=READER_PATTERNS)
        else:
            lock = client.WriteLock(path, "kazoo-rw-peer", extra_lock_patterns=WRITER_PATTERNS)
        try:
            got = lock.acquire(blocking=False)
            break
        except NoNodeError:
            if attempt == CREATE_ATTEMPTS - 1:
                raise
    print("busy" if not got else "held" if mode == "hold" else "acquired", flush=True)
    if got:
        if mode == "hold":
            sys.stdin.readline()
        lock.release()
        if mode == "hold":
            print("released", flush=True)
    client.stop()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
