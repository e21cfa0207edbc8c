#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Interoperability peer for dlock's ZooKeeper leader election tests: one
participant of kazoo's Election.

    kazoo_election_peer.py --server ADDR --resource /PATH --id ID

Prints "leader ID" when it leads; then leads until a line comes on stdin,
gives leadership up and prints "resigned".

kazoo's Election is a kazoo Lock, which sees only its own "__lock__"
nodes: dlock honours a kazoo leader (it reads those nodes), but a kazoo
participant does not wait for a dlock leader.  The lock node is a
container that the server may remove between kazoo's ensure_path and its
create (NoNodeError): retry with a new Election, as the read-write peer
does.
"""
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

CREATE_ATTEMPTS = 5


def lead(ident):
    print("leader %s" % ident, flush=True)
    sys.stdin.readline()


def main(argv):
    opts = dict(zip(argv[1::2], argv[2::2]))
    if not {"--server", "--resource", "--id"} <= opts.keys():
        print(__doc__, file=sys.stderr)
        return 64
    client = KazooClient(hosts=opts["--server"])
    client.start(timeout=15)
    for attempt in range(CREATE_ATTEMPTS):
        election = client.Election(opts["--resource"], opts["--id"])
        try:
            election.run(lead, opts["--id"])
            break
        except NoNodeError:
            if attempt == CREATE_ATTEMPTS - 1:
                raise
    print("resigned", flush=True)
    client.stop()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
