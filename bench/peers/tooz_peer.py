#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Peer driver: tooz's Redis driver with default settings:
get_coordinator('redis://HOST:PORT', member_id), start(), get_lock(name),
acquire()/release().  Underneath it is redis-py's Lock (so waiters poll
every 0.1 s too), plus tooz's own bookkeeping.

    bench/peers/tooz_peer.py latency    --server 127.0.0.1:PORT --resource NAME --warmup N --count N
    bench/peers/tooz_peer.py throughput --server 127.0.0.1:PORT --resource-prefix NAME --resources R --threads T --seconds S
    bench/peers/tooz_peer.py handoff    --server 127.0.0.1:PORT --resource NAME --count N
    bench/peers/tooz_peer.py try|hold   --server 127.0.0.1:PORT --resource NAME

The Redis key of a lock is "b'_tooz'_NAME_lock" (sic: this tooz formats
its bytes namespace with %s), held with a 30 s expiry; start() also sets a
heartbeat key "_tooz_beats:MEMBER" that stop() deletes.  Acquire passes
blocking=ACQUIRE_TIMEOUT, tooz's documented way of saying "block, but at
most this many seconds"; it is the same blocking path as blocking=True.

Throughput threads share ONE coordinator.  tooz does not promise a
coordinator is thread-safe in general, but on the lock path of the Redis
driver it is: the redis-py client underneath is thread-safe with its
connection pool, each thread gets its own lock objects from get_lock(), and
the coordinator's set of held locks is only added to and discarded from.
One coordinator per service process is also how tooz is meant to be used.

Prints one JSON line; see peer_common.py.  Needs Debian's python3-tooz.
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from tooz import coordination  # noqa: E402

from peer_common import ACQUIRE_TIMEOUT, PeerError, main  # noqa: E402


class Lock:
    def __init__(self, coordinator, name):
        self.name = name
        self.lock = coordinator.get_lock(name)

    def acquire(self):
        if not self.lock.acquire(blocking=ACQUIRE_TIMEOUT):
            raise PeerError(f"acquire {self.name}: not acquired within {ACQUIRE_TIMEOUT:g} s")

    def try_acquire(self):
        return self.lock.acquire(blocking=False)

    def release(self):
        if not self.lock.release():
            raise PeerError(f"release {self.name}: tooz says the lock was not held")


class Backend:
    peer = "tooz"

    @staticmethod
    def connect(server):
        member_id = f"bench-peer-{os.getpid()}".encode()
        coordinator = coordination.get_coordinator(f"redis://{server}", member_id)
        coordinator.start()
        return coordinator

    new_lock = Lock

    @staticmethod
    def cleanup(coordinator, names):
        pass  # a released lock leaves no key; stop() deletes the member's heartbeat key

    @staticmethod
    def close(coordinator):
        coordinator.stop()


if __name__ == "__main__":
    sys.exit(main(Backend()))
