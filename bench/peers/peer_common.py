# SPDX-License-Identifier: MIT
"""Shared harness of the Python peer drivers (redispy_peer.py, tooz_peer.py,
kazoo_peer.py): the command line, the three workloads and the JSON output.

A driver supplies a backend object with:

    peer                      name printed in the JSON ("redis-py", ...)
    connect(server)           -> client, shared by all threads of a process
    new_lock(client, name)    -> object with acquire(), try_acquire() and
                                 release(); acquire() blocks, raising
                                 PeerError when it has waited
                                 ACQUIRE_TIMEOUT seconds in vain;
                                 try_acquire() does not wait and returns
                                 whether it got the lock
    cleanup(client, names)    remove what locks on these names left behind
    close(client)

and calls main(backend).  Each thread gets lock objects of its own.

Command line (identical for every peer, the Java one included):

    PEER latency    --server ADDR --resource NAME --warmup N --count N
    PEER throughput --server ADDR --resource-prefix NAME --resources R
                    --threads T --seconds S
    PEER handoff    --server ADDR --resource NAME --count N
    PEER try        --server ADDR --resource NAME
    PEER hold       --server ADDR --resource NAME

try and hold are for the interoperability tests (tests/redis/test-redis-interop.c,
tests/zk/test-zk-interop.c), which read the peer's stdout line by line:
  try:  acquire without waiting; print "acquired" (then release) or "busy".
  hold: acquire without waiting; print "held" or "busy"; when held, wait
        for a line on stdin, release, print "released".
They leave whatever the lock left on the server to the test, which
inspects it.

The hidden mode "handoff-waiter --server ADDR --resource NAME" is the other
process of handoff, started by the driver itself.
"""
import contextlib
import json
import subprocess
import sys
import threading
import time

ACQUIRE_TIMEOUT = 30.0  # seconds; any blocking acquire longer than this fails
HANDOFF_HOLD = 0.020  # the holder keeps the lock this long so the waiter blocks
WARMUP_SECONDS = 1.0  # throughput: not counted

USAGE = """usage: PEER latency    --server ADDR --resource NAME --warmup N --count N
       PEER throughput --server ADDR --resource-prefix NAME --resources R --threads T --seconds S
       PEER handoff    --server ADDR --resource NAME --count N
       PEER try|hold   --server ADDR --resource NAME"""

# mode -> {option: (type, minimum)}
MODES = {
    "latency": {"server": (str, None), "resource": (str, None),
                "warmup": (int, 0), "count": (int, 1)},
    "throughput": {"server": (str, None), "resource-prefix": (str, None),
                   "resources": (int, 1), "threads": (int, 1),
                   "seconds": (float, 0.001)},
    "handoff": {"server": (str, None), "resource": (str, None),
                "count": (int, 1)},
    "handoff-waiter": {"server": (str, None), "resource": (str, None)},
    "try": {"server": (str, None), "resource": (str, None)},
    "hold": {"server": (str, None), "resource": (str, None)},
}

# Modes that clean up the locks' leftovers on the server at the end.
CLEANUP_MODES = ("latency", "throughput", "handoff")


class PeerError(Exception):
    pass


class UsageError(Exception):
    pass


@contextlib.contextmanager
def step(what):
    """Name the step in whatever escapes from it."""
    try:
        yield
    except PeerError:
        raise
    except Exception as e:
        raise PeerError(f"{what}: {describe(e)}") from e


def describe(e):
    return str(e) if isinstance(e, PeerError) else f"{type(e).__name__}: {e}"


def parse_args(argv):
    if not argv or argv[0] not in MODES:
        raise UsageError(f"unknown mode {argv[0]!r}" if argv else "no mode")
    mode, spec, opts = argv[0], MODES[argv[0]], {}
    rest = argv[1:]
    while rest:
        if len(rest) < 2 or not rest[0].startswith("--") or rest[0][2:] not in spec:
            raise UsageError(f"unexpected argument {rest[0]!r} for {mode}")
        name, text = rest[0][2:], rest[1]
        kind, minimum = spec[name]
        try:
            value = kind(text)
        except ValueError:
            raise UsageError(f"--{name}: not a number: {text!r}") from None
        if minimum is not None and value < minimum:
            raise UsageError(f"--{name}: must be at least {minimum}")
        opts[name] = value
        rest = rest[2:]
    missing = [f"--{name}" for name in spec if name not in opts]
    if missing:
        raise UsageError(f"{mode}: missing {' '.join(missing)}")
    return mode, opts


def summary(samples_ns):
    """mean and percentiles in microseconds; percentile q is the sorted
    sample at index floor(n*q), clamped to n-1."""
    s = sorted(samples_ns)
    n = len(s)

    def pct(q):
        return round(s[min(int(n * q), n - 1)] / 1000.0, 1)

    return {"mean_us": round(sum(s) / n / 1000.0, 1), "p50_us": pct(0.50),
            "p99_us": pct(0.99), "p999_us": pct(0.999)}


def emit(record):
    print(json.dumps(record), flush=True)


def latency(backend, client, o):
    lock = backend.new_lock(client, o["resource"])
    with step("warm-up acquire/release"):
        for _ in range(o["warmup"]):
            lock.acquire()
            lock.release()
    samples = []
    with step("measured acquire/release"):
        for _ in range(o["count"]):
            t0 = time.monotonic_ns()
            lock.acquire()
            lock.release()
            samples.append(time.monotonic_ns() - t0)
    emit({"peer": backend.peer, "mode": "latency", "count": o["count"],
          **summary(samples)})


def throughput(backend, client, o):
    n_threads, n_res = o["threads"], o["resources"]
    names = [f"{o['resource-prefix']}/{r}" for r in range(n_res)]
    counts = [0] * n_threads
    stop = threading.Event()
    errors = []

    def worker(i):
        # Thread i visits resources i, i+1, i+2, ... (mod R).
        try:
            locks = [backend.new_lock(client, name) for name in names]
            k = i
            while not stop.is_set():
                lock = locks[k % n_res]
                k += 1
                lock.acquire()
                lock.release()
                counts[i] += 1
        except Exception as e:
            errors.append(f"thread {i}: {describe(e)}")
            stop.set()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True)
               for i in range(n_threads)]
    for t in threads:
        t.start()
    stop.wait(WARMUP_SECONDS)
    ops0, t0 = sum(counts), time.monotonic_ns()
    stop.wait(o["seconds"])
    ops1, t1 = sum(counts), time.monotonic_ns()
    stop.set()
    for t in threads:
        t.join(ACQUIRE_TIMEOUT + 10)
    if errors:
        raise PeerError("; ".join(errors))
    if any(t.is_alive() for t in threads):
        raise PeerError("a thread did not finish")
    seconds = o["seconds"]
    emit({"peer": backend.peer, "mode": "throughput", "threads": n_threads,
          "resources": n_res,
          "seconds": int(seconds) if seconds == int(seconds) else seconds,
          "ops": ops1 - ops0,
          "ops_per_s": round((ops1 - ops0) / ((t1 - t0) / 1e9), 1)})


def handoff(backend, client, o):
    """The holder (this process) and a waiter (this script re-run with the
    hidden mode handoff-waiter) pass the lock back and forth.  Per round:
    the holder writes "go", the waiter blocks in acquire, the holder waits
    HANDOFF_HOLD, notes the time and releases; the waiter notes the time it
    got the lock, releases and writes that time back; the holder takes the
    lock again, uncontended, before the next "go"."""
    lock = backend.new_lock(client, o["resource"])
    with step("holder acquire"):
        lock.acquire()
    waiter = subprocess.Popen(
        [sys.executable, sys.argv[0], "handoff-waiter",
         "--server", o["server"], "--resource", o["resource"]],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    held = True
    try:
        def from_waiter():
            line = waiter.stdout.readline()
            if not line:
                raise PeerError("the waiter process ended early "
                                f"(exit status {waiter.wait()})")
            return line.strip()

        if from_waiter() != "ready":
            raise PeerError("the waiter did not say ready")
        samples = []
        for i in range(o["count"]):
            waiter.stdin.write("go\n")
            waiter.stdin.flush()
            time.sleep(HANDOFF_HOLD)
            t_release = time.monotonic_ns()
            with step("holder release"):
                lock.release()
            held = False
            reply = from_waiter()
            if not reply.isdigit():
                raise PeerError(f"the waiter said {reply!r}")
            samples.append(int(reply) - t_release)
            if i + 1 < o["count"]:
                with step("holder re-acquire"):
                    lock.acquire()
                held = True
        waiter.stdin.close()
        if waiter.wait(ACQUIRE_TIMEOUT) != 0:
            raise PeerError(f"the waiter exited with {waiter.returncode}")
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
        if held:
            with step("holder release"):
                lock.release()
    emit({"peer": backend.peer, "mode": "handoff", "count": o["count"],
          **summary(samples)})


def handoff_waiter(backend, client, o):
    lock = backend.new_lock(client, o["resource"])
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        with step("waiter acquire"):
            lock.acquire()
        t_acquired = time.monotonic_ns()
        with step("waiter release"):
            lock.release()
        print(t_acquired, flush=True)


def try_lock(backend, client, o):
    """The lock of the resource, and whether acquiring it without waiting
    got it."""
    lock = backend.new_lock(client, o["resource"])
    with step("try acquire"):
        return lock, lock.try_acquire()


def try_once(backend, client, o):
    lock, got = try_lock(backend, client, o)
    print("acquired" if got else "busy", flush=True)
    if got:
        with step("release"):
            lock.release()


def hold(backend, client, o):
    lock, got = try_lock(backend, client, o)
    print("held" if got else "busy", flush=True)
    if got:
        sys.stdin.readline()
        with step("release"):
            lock.release()
        print("released", flush=True)


def names_used(mode, o):
    if mode == "throughput":
        return [f"{o['resource-prefix']}/{r}" for r in range(o["resources"])]
    return [o["resource"]]


def main(backend):
    try:
        mode, o = parse_args(sys.argv[1:])
    except UsageError as e:
        print(f"{backend.peer}: {e}\n{USAGE}", file=sys.stderr)
        return 64
    run = {"latency": latency, "throughput": throughput, "handoff": handoff,
           "handoff-waiter": handoff_waiter, "try": try_once, "hold": hold}[mode]
    client, status = None, 0
    try:
        with step(f"connect to {o['server']}"):
            client = backend.connect(o["server"])
        run(backend, client, o)
    except Exception as e:
        print(f"{backend.peer}: {mode}: {describe(e)}", file=sys.stderr)
        status = 1
    if client is not None:
        try:
            if mode in CLEANUP_MODES:  # the handoff holder cleans up after both
                with step("cleanup"):
                    backend.cleanup(client, names_used(mode, o))
            with step("close"):
                backend.close(client)
        except Exception as e:
            print(f"{backend.peer}: {mode}: {describe(e)}", file=sys.stderr)
            status = 1
    return status
