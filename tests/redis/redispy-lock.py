"""redis-py's Lock, as a peer of dlock's key-format=plain.

usage: redispy-lock.py PORT NAME hold SECONDS | try
  hold: acquire (blocking), print "held", sleep, release
  try:  acquire without blocking, print "acquired" (then release) or "busy"
"""
import sys
import time

import redis

port, name, action = int(sys.argv[1]), sys.argv[2], sys.argv[3]
client = redis.Redis(host="127.0.0.1", port=port)
lock = client.lock(name, timeout=30)
if action == "hold":
    lock.acquire(blocking=True)
    print("held", flush=True)
    time.sleep(float(sys.argv[4]))
    lock.release()
elif action == "try":
    if lock.acquire(blocking=False):
        print("acquired", flush=True)
        lock.release()
    else:
        print("busy", flush=True)
