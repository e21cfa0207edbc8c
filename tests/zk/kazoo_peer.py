#!/usr/bin/python3
"""A kazoo peer for dlock's ZooKeeper interoperability tests.

usage: kazoo_peer.py HOSTS PATH try|hold

The lock is kazoo's Lock on PATH, told to see Curator-format nodes
("-lock-") as contenders too, as dlock's README says to configure it.

try:  acquire without blocking; print "acquired" (then release) or "busy".
hold: acquire without blocking; print "held <node>" or "busy"; when held,
      wait for a line on stdin, release, print "released".
"""
import sys

from kazoo.client import KazooClient


def main():
    hosts, path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=10)
    lock = zk.Lock(path, "kazoo-peer", extra_lock_patterns=["-lock-"])
    got = lock.acquire(blocking=False)
    if mode == "try":
        print("acquired" if got else "busy", flush=True)
        if got:
            lock.release()
    elif mode == "hold":
        print("held " + lock.node if got else "busy", flush=True)
        if got:
            sys.stdin.readline()
            lock.release()
            print("released", flush=True)
    else:
        print("unknown mode " + mode, flush=True)
        return 64
    zk.stop()
    zk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
