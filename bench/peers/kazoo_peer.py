#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Peer driver: kazoo's lock recipe, KazooClient(hosts=ADDR).Lock(path,
"kazoo-peer", extra_lock_patterns=["-lock-"]), on ZooKeeper: told to see
Curator-format nodes ("-lock-", which dlock's are) as contenders too, as
dlock's README says to configure it.

    bench/peers/kazoo_peer.py latency    --server 127.0.0.1:P1[,127.0.0.1:P2...] --resource NAME --warmup N --count N
    bench/peers/kazoo_peer.py throughput --server 127.0.0.1:P1[,...] --resource-prefix NAME --resources R --threads T --seconds S
    bench/peers/kazoo_peer.py handoff    --server 127.0.0.1:P1[,...] --resource NAME --count N
    bench/peers/kazoo_peer.py try|hold   --server 127.0.0.1:P1[,...] --resource /PATH

The lock of NAME is the node /bench-peers/NAME, or NAME itself if it is an
absolute path (the interoperability tests lock dlock's own nodes, /dlock/...).
The recipe creates it (and its parents) as persistent nodes and a
sequential ephemeral child per acquire.  At the end of a benchmark mode the
driver deletes those persistent nodes again, as far up as /bench-peers,
wherever they have no children left.  Throughput threads share one
KazooClient (thread-safe), each with its own Lock objects.  Prints one JSON
line; see peer_common.py.  Needs Debian's python3-kazoo.
"""
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import LockTimeout, NoNodeError, NotEmptyError  # noqa: E402

from peer_common import ACQUIRE_TIMEOUT, PeerError, main  # noqa: E402

ROOT = "/bench-peers"
CONNECT_TIMEOUT = 15  # seconds
CREATE_ATTEMPTS = 5  # the lock node reaped under the create, each time


def lock_path(name):
    if name.startswith("/"):
        return name
    return f"{ROOT}/{name.strip('/')}"


class Lock:
    """A lock node under /dlock is a container, which the server may remove,
    empty, between the recipe's ensure_path and its create: that create
    raises NoNodeError, and the acquisition is tried again with a new
    recipe object (the old one believes the path exists)."""

    def __init__(self, client, name):
        self.client = client
        self.path = lock_path(name)
        self.lock = self.new_recipe()

    def new_recipe(self):
        return self.client.Lock(self.path, "kazoo-peer", extra_lock_patterns=["-lock-"])

    def attempt(self, **kwargs):
        for left in range(CREATE_ATTEMPTS - 1, -1, -1):
            try:
                return self.lock.acquire(**kwargs)
            except NoNodeError:
                if not left:
                    raise
                self.lock = self.new_recipe()

    def acquire(self):
        try:
            self.attempt(timeout=ACQUIRE_TIMEOUT)
        except LockTimeout:
            raise PeerError(f"acquire {self.path}: not acquired within {ACQUIRE_TIMEOUT:g} s") from None

    def try_acquire(self):
        return self.attempt(blocking=False)

    def release(self):
        if not self.lock.release():
            raise PeerError(f"release {self.path}: the lock was not held")


class Backend:
    peer = "kazoo"

    @staticmethod
    def connect(server):
        client = KazooClient(hosts=server)
        client.start(timeout=CONNECT_TIMEOUT)
        return client

    new_lock = Lock

    @staticmethod
    def cleanup(client, names):
        """Delete each lock node and its empty parents up to ROOT; a node
        still in use (children left) is left alone."""
        for name in names:
            path = lock_path(name)
            while path.startswith(ROOT):
                try:
                    client.delete(path)
                except NoNodeError:
                    pass
                except NotEmptyError:
                    break
                path = path.rsplit("/", 1)[0]

    @staticmethod
    def close(client):
        client.stop()
        client.close()


if __name__ == "__main__":
    sys.exit(main(Backend()))
