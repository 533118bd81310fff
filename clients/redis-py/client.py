#!/usr/bin/python3
"""fencecheck lock-client adapter (protocol v1, docs/client-protocol.md) around
redis-py's `Lock` on one Redis (Debian's python3-redis).

What the library does, read from redis/lock.py, and so what this adapter reports:
- `r.lock(name, timeout=ttl)` and `acquire(token=owner)` loop on
  `SET name owner NX PX ttl` every 0.1 s until it succeeds. The lock's "token" is
  that value: the `owner` the worker gives (redis-py would otherwise make a random
  uuid1 hex). It is a string with no order; `token` reports it as the library gives
  it, `entry` is the key and `value` the owner value stored there.
- There is no session (`session: 0`) and nothing renews the key by itself; a user
  whose work may outlast the TTL calls `lock.reacquire()`. This adapter does so
  every third of the TTL while it holds. A renewal that finds the key no longer
  ours raises LockNotOwnedError, which is only logged: the library never tells its
  user unprompted that the lock was lost, so no `session-lost` is ever sent.
"""
import os
import sys
import threading

# The protocol loop, shared by the Python adapters, is in clients/python/: found from
# this file's own path, so the adapter runs from any working directory.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import fencecheck_client  # noqa: E402

import redis
from redis.exceptions import LockNotOwnedError

log = fencecheck_client.logger("redis-py adapter")


class Refresher(threading.Thread):
    """Calls `lock.reacquire()` every `period` s until stopped or the key is no
    longer ours. A daemon: a call stuck on a cut connection must not keep the
    adapter alive."""

    def __init__(self, lock, period):
        super().__init__(daemon=True)
        self.lock = lock
        self.period = period
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(self.period):
            try:
                self.lock.reacquire()
            except LockNotOwnedError as e:
                log(f"reacquire: {e}; the library does not tell its user otherwise")
                return
            except Exception as e:  # noqa: BLE001 - logged; the hold goes on as for a user
                log(f"reacquire failed: {type(e).__name__}: {e}")


class Adapter:
    def __init__(self):
        self.redis = None
        self.ttl_s = None
        self.lock = None
        self.refresher = None

    def open(self, req):
        if req.get("service") != "redis":
            raise ValueError(f"redis-py's Lock speaks to one Redis, not {req.get('service')!r}")
        endpoints = req["endpoints"]
        if len(endpoints) != 1:
            raise ValueError(f"redis-py's Lock uses one Redis, given {len(endpoints)}")
        host, port = endpoints[0].rsplit(":", 1)
        self.close_client()
        self.redis = redis.Redis(host=host, port=int(port))
        # A connection that cannot be made is an answer to `open`, not a surprise later.
        self.redis.ping()
        self.ttl_s = req["ttl_ms"] / 1000
        log(f"open: {host}:{port}, lock TTL {self.ttl_s} s")
        return {"session": 0}

    def acquire(self, req):
        if self.redis is None:
            raise RuntimeError("acquire before open")
        name, owner = req["lock"], req.get("owner")
        # thread_local=False: the refresher thread renews with the token this
        # thread acquired (redis-py keeps it per thread by default).
        lock = self.redis.lock(name, timeout=self.ttl_s, thread_local=False)
        log(f"acquire: {name} as {owner}")
        # blocking_timeout None: retry until it succeeds, as long as the library does.
        # No owner given: redis-py makes its own random value (uuid1 hex).
        if not lock.acquire(token=owner):
            raise RuntimeError(f"Lock.acquire returned False for {name}")
        self.lock = lock
        owner = lock.local.token.decode()
        self.refresher = Refresher(lock, max(self.ttl_s / 3, 0.1))
        self.refresher.start()
        log(f"acquired {name} with token {owner}")
        return {"token": owner, "entry": name, "value": owner}

    def release(self, _req):
        self.stop_refresher()
        lock, self.lock = self.lock, None
        if lock is None:
            raise RuntimeError("release without a held lock")
        # Deletes the key only if it still holds our value; raises otherwise.
        lock.release()
        log(f"released {lock.name}")
        return {}

    def close(self, _req):
        self.close_client()
        log("closed")
        return {}

    def stop_refresher(self):
        if self.refresher is not None:
            self.refresher.stop.set()
            self.refresher = None

    def close_client(self):
        self.stop_refresher()
        self.lock = None
        if self.redis is not None:
            try:
                self.redis.close()
            except Exception as e:  # noqa: BLE001 - closing a dead connection
                log(f"close: {e}")
            self.redis = None


def main():
    fencecheck_client.serve(Adapter(), f"redis-py {redis.__version__}", log)


if __name__ == "__main__":
    main()
