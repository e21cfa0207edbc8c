#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Peer driver: redis-py's redis.lock.Lock, as Redis(...).lock(name, timeout=30)
with its default blocking behaviour (a waiter retries SET NX every
sleep=0.1 s, which is what handoff and contended throughput measure).

    bench/peers/redispy_peer.py latency    --server 127.0.0.1:PORT --resource NAME --warmup N --count N
    bench/peers/redispy_peer.py throughput --server 127.0.0.1:PORT --resource-prefix NAME --resources R --threads T --seconds S
    bench/peers/redispy_peer.py handoff    --server 127.0.0.1:PORT --resource NAME --count N
    bench/peers/redispy_peer.py try|hold   --server 127.0.0.1:PORT --resource NAME

The Redis key of a lock is NAME itself.  Throughput threads share one
Redis client (thread-safe, with its connection pool).  Prints one JSON line;
see peer_common.py for the workloads.  Needs Debian's python3-redis.
"""
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import redis  # noqa: E402

from peer_common import ACQUIRE_TIMEOUT, PeerError, main  # noqa: E402

LOCK_TTL = 30  # seconds, the lock's expiry in Redis


class Lock:
    def __init__(self, client, name):
        self.name = name
        self.lock = client.lock(name, timeout=LOCK_TTL)

    def acquire(self):
        if not self.lock.acquire(blocking_timeout=ACQUIRE_TIMEOUT):
            raise PeerError(f"acquire {self.name}: not acquired within {ACQUIRE_TIMEOUT:g} s")

    def try_acquire(self):
        return self.lock.acquire(blocking=False)

    def release(self):
        self.lock.release()


class Backend:
    peer = "redis-py"

    @staticmethod
    def connect(server):
        host, _, port = server.rpartition(":")
        client = redis.Redis(host=host, port=int(port), socket_connect_timeout=10)
        client.ping()
        return client

    new_lock = Lock

    @staticmethod
    def cleanup(client, names):
        pass  # a released lock leaves no key

    @staticmethod
    def close(client):
        client.close()


if __name__ == "__main__":
    sys.exit(main(Backend()))
