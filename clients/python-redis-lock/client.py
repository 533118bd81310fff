"""fencecheck lock-client adapter (protocol v1, docs/client-protocol.md) around PyPI's
python-redis-lock 4.0.1 (`redis_lock.Lock`) on one Redis, used as its README shows:
`Lock(conn, name, expire=..., auto_renewal=True)`, `acquire()`, `release()`. Started by
the `python-redis-lock` launcher beside it, under the venv `setup.sh` makes.

What the library does, read from redis_lock/__init__.py 4.0.1, and so what this
adapter reports:
- The Redis key is the library's own, `lock:<name>` (the `<name>` being the `lock`
  the worker sends, unchanged), and its value the lock's `id`: 18 random bytes,
  base64 (`id=` is not given: the library chooses, as in its README). `acquire()` loops
  `SET lock:<name> <id> NX EX <expire>`, waiting on a `BLPOP lock-signal:<name>`
  between tries. The answer's `entry` is that key, `value` the id, and `token` the id
  too: the only thing the library gives its user that changes per grant, a string with
  no order.
- `expire` is whole seconds (the TTL rounded, at least 1). `auto_renewal=True` starts a
  thread that calls `extend()` every 2/3 of it; an `extend()` that finds the key no
  longer ours raises `NotAcquired` in that thread, which ends it: the library never
  tells its user that the lock was lost, so no `session-lost` is ever sent. There is
  no session (`session: 0`).
- `release()` deletes the key (and signals waiters) only if it still holds our id, and
  raises `NotAcquired` otherwise: answered `ok: false`.

Ground truth: each critical-section entry and exit is logged to stderr (the worker's
`worker-<id>.client.log`) as `critical-section enter <key> <id>` and
`critical-section exit <key> <id>` — enter when `acquire()` returned True, exit when
`release` is asked for — so a run's counts can be checked against what the library
did, not what the harness saw.
"""
import os
import sys

# The protocol loop, shared by the Python adapters, is in clients/python/: found from
# this file's own path, so the adapter runs from any working directory.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import fencecheck_client  # noqa: E402

import redis  # noqa: E402
import redis_lock  # noqa: E402

log = fencecheck_client.logger("python-redis-lock adapter")


class Adapter:
    def __init__(self):
        self.conn = None
        self.expire = None
        self.lock = None

    def open(self, req):
        if req.get("service") != "redis":
            raise ValueError(f"python-redis-lock speaks to one Redis, not {req.get('service')!r}")
        endpoints = req["endpoints"]
        if len(endpoints) != 1:
            raise ValueError(f"python-redis-lock uses one Redis, given {len(endpoints)}")
        host, port = endpoints[0].rsplit(":", 1)
        self.close_client()
        # The README's `StrictRedis()`, on the worker's endpoint.
        self.conn = redis.StrictRedis(host=host, port=int(port))
        # A connection that cannot be made is an answer to `open`, not a surprise later.
        self.conn.ping()
        self.expire = max(1, round(req["ttl_ms"] / 1000))
        log(f"open: {host}:{port}, expire {self.expire} s, auto_renewal")
        return {"session": 0}

    def acquire(self, req):
        if self.conn is None:
            raise RuntimeError("acquire before open")
        name = req["lock"]
        lock = redis_lock.Lock(self.conn, name, expire=self.expire, auto_renewal=True)
        log(f"acquire: {name}")
        # Blocking, no timeout: waits as long as the library does.
        if not lock.acquire():
            raise RuntimeError(f"Lock.acquire returned False for {name}")
        self.lock = lock
        key = "lock:" + name  # the key the library wrote (its `_name`)
        log(f"critical-section enter {key} {lock.id}")
        return {"token": lock.id, "entry": key, "value": lock.id}

    def release(self, _req):
        lock, self.lock = self.lock, None
        if lock is None:
            raise RuntimeError("release without a held lock")
        log(f"critical-section exit {lock._name} {lock.id}")
        # Stops the renewal thread, then deletes the key only if it still holds our id.
        lock.release()
        log(f"released {lock._name}")
        return {}

    def close(self, _req):
        self.close_client()
        log("closed")
        return {}

    def close_client(self):
        lock, self.lock = self.lock, None
        if lock is not None:
            log(f"critical-section exit {lock._name} {lock.id}")
            try:
                lock.release()
            except Exception as e:  # noqa: BLE001 - a lock already lost
                log(f"release at close: {type(e).__name__}: {e}")
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception as e:  # noqa: BLE001 - closing a dead connection
                log(f"close: {e}")
            self.conn = None


def main():
    fencecheck_client.serve(Adapter(), f"python-redis-lock {redis_lock.__version__}", log)


if __name__ == "__main__":
    main()
