#!/usr/bin/python3
"""A redis-py peer for dlock's interoperability tests (key-format=plain).

usage: interop.py PORT NAME try|hold

try:  acquire without blocking; print "acquired" (then release) or "busy".
hold: acquire without blocking; print "held" or "busy"; when held, wait
      for a line on stdin, release, print "released".
"""
import sys

import redis


def main():
    port, name, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    lock = client.lock(name, timeout=30)
    got = lock.acquire(blocking=False)
    if mode == "try":
        print("acquired" if got else "busy", flush=True)
        if got:
            lock.release()
    elif mode == "hold":
        print("held" if got else "busy", flush=True)
        if got:
            sys.stdin.readline()
            lock.release()
            print("released", flush=True)
    else:
        print("unknown mode " + mode, flush=True)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main())
