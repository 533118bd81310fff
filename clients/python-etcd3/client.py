#!/usr/bin/python3
"""fencecheck lock-client adapter (protocol v1, docs/client-protocol.md) around
python-etcd3's `Lock` (Debian's python3-etcd3).

What the library does, read from etcd3/locks.py, and so what this adapter reports:
- `Lock(name, ttl)` writes the key `/locks/<name>` (its `lock_prefix` is prepended to
  the name it is given) with the value `uuid.uuid1().bytes` (16 raw bytes), in a
  transaction `create_revision(key) == 0`, attached to a lease it grants itself for
  every attempt. There is no session: `open` answers `session: 0`.
- It hands its user no revision. What a user has at hand is the lock's lease
  (`lock.lease.id`): that is the `token`. The key's CreateRevision is read once after
  the grant (an extra `get`, as a careful user might do) and given as `revision` and
  as `tokens.create_revision`, so a scenario can fence on it instead.
- Nothing renews the lease by itself; its documentation has the user call
  `lock.refresh()`. This adapter does so every third of the TTL while it holds, as
  a user with work longer than the TTL must. A refresh that finds the lease gone is
  only logged: the library has no way to tell its user that the lock was lost, so
  no `session-lost` is ever sent.

How the lock is taken, `--form` (one adapter, three usages of the same library):
- `wait` (the default): `lock.acquire(timeout=None)`, looped around Debian's
  tenacity 8 (see `wait_for`): waits as long as it takes.
- `checked`: `if not lock.acquire(): fail` — the library's default 10 s timeout,
  its result checked, as a careful user does. Run under PyPI's etcd3 0.12.0
  (`./pypi`, the venv setup.sh makes), whose pinned tenacity 6.1.0 it works with.
- `with`: `with client.lock(name, ttl=...):` as the library's README shows it,
  entered here (`__enter__`) on `acquire` and left (`__exit__`) on `release`.
  0.12.0's `__enter__` ignores what `acquire()` returned: after its 10 s timeout
  the body runs *without* the lock (kragniz/python-etcd3#599). The adapter
  answers what the body's user believes: granted, with the lock's own key and
  uuid, and the lease (none when it was not acquired) as the token. No refresh:
  the README's `with` form does none.
"""
import math
import os
import sys
import threading
import uuid

# The protocol loop, shared by the Python adapters, is in clients/python/: found from
# this file's own path, so the adapter runs from any working directory.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import fencecheck_client  # noqa: E402

import etcd3

log = fencecheck_client.logger("python-etcd3 adapter")


class Refresher(threading.Thread):
    """Calls `lock.refresh()` every `period` s until stopped. A daemon: a refresh
    stuck behind a cut connection must not keep the adapter alive."""

    def __init__(self, lock, period):
        super().__init__(daemon=True)
        self.lock = lock
        self.period = period
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(self.period):
            try:
                answers = self.lock.refresh()
                ttl = answers[0].TTL if answers else 0
                if ttl <= 0:
                    log(f"refresh: lease {self.lock.lease.id} is gone (TTL {ttl}); "
                        "the library does not tell its user")
                    return
            except Exception as e:  # noqa: BLE001 - logged; the hold goes on as for a user
                log(f"refresh failed: {type(e).__name__}: {e}")


FORMS = ("wait", "checked", "with")


def form_from(argv):
    """`--form wait|checked|with` (default `wait`)."""
    if len(argv) == 0:
        return "wait"
    if len(argv) == 2 and argv[0] == "--form" and argv[1] in FORMS:
        return argv[1]
    sys.exit(f"usage: client.py [--form {'|'.join(FORMS)}] (got {argv})")


class Adapter:
    def __init__(self, form="wait"):
        self.form = form
        self.client = None
        self.ttl_s = 60
        self.lock = None
        self.refresher = None

    def open(self, req):
        if req.get("service") != "etcd":
            raise ValueError(f"python-etcd3 speaks to etcd, not {req.get('service')!r}")
        endpoints = req["endpoints"]
        # python-etcd3 0.12 talks to one endpoint (no fail-over): the first one.
        host, port = endpoints[0].rsplit(":", 1)
        self.close_client()
        self.client = etcd3.client(host=host, port=int(port))
        # Lock takes whole seconds; never round a TTL down to nothing.
        self.ttl_s = max(1, math.ceil(req["ttl_ms"] / 1000))
        log(f"open: client for {host}:{port} (of {endpoints}), lock TTL {self.ttl_s} s")
        return {"session": 0}

    def acquire(self, req):
        if self.client is None:
            raise RuntimeError("acquire before open")
        name = req["lock"]
        lock = self.client.lock(name, ttl=self.ttl_s)
        log(f"acquire ({self.form}): {name} -> key {lock.key} value {lock.uuid.hex()} (uuid "
            f"{uuid.UUID(bytes=lock.uuid)})")
        if self.form == "with":
            # What `with client.lock(...):` does on entry; the body runs next.
            lock.__enter__()
            if lock.lease is None:
                log(f"acquire (with): {lock.key}: entering the body WITHOUT the lock "
                    "(acquire() timed out and __enter__ ignored it)")
        elif self.form == "checked":
            if not lock.acquire():
                raise RuntimeError(f"{lock.key}: not acquired within the library's 10 s")
        else:
            self.wait_for(lock)
        self.lock = lock
        lease = lock.lease.id if lock.lease is not None else None
        answer = {
            "token": lease,
            "tokens": {"lease": lease},
            "entry": lock.key,
            # The stored value is the uuid's 16 raw bytes, not text: as lowercase
            # hex, the form the harness gives a value that is not UTF-8.
            "value": lock.uuid.hex(),
        }
        try:
            value, meta = self.client.get(lock.key)
            if value == lock.uuid:
                answer["revision"] = meta.create_revision
                answer["tokens"]["create_revision"] = meta.create_revision
            else:
                log(f"acquire: {lock.key} no longer holds our uuid right after the grant")
        except Exception as e:  # noqa: BLE001 - the revision is optional
            log(f"acquire: cannot read {lock.key}'s CreateRevision: {e}")
        if self.form != "with":
            self.refresher = Refresher(lock, max(self.ttl_s / 3, 0.2))
            self.refresher.start()
        log(f"acquired {lock.key}: lease {lease}, revision {answer.get('revision')}")
        return answer

    def wait_for(self, lock):
        """`lock.acquire(timeout=None)` (the library's default gives up after 10 s;
        the protocol wants the library's waiting, not a deadline), made to work.

        python-etcd3 0.12.0 hands tenacity a wait callback of tenacity's old API,
        `wait(previous_attempt_number, delay_since_first_attempt)`; Debian 12's
        tenacity 8 calls `wait(retry_state)`, so the first retry raises TypeError:
        an uncontended acquire works, a contended one fails at once. A user has to
        loop around it; so does this adapter, waiting as the library meant to: for
        an event on the key (bounded, since a delete between the failed transaction
        and the watch would otherwise be missed, a race the library has too)."""
        warned = False
        while True:
            try:
                if lock.acquire(timeout=None):
                    return
                raise RuntimeError(f"Lock.acquire returned False for {lock.key}")
            except TypeError as e:
                if "delay_since_first_attempt" not in str(e):
                    raise
                if not warned:
                    log(f"acquire: Lock.acquire raised {e} (python-etcd3's wait "
                        "callback predates tenacity 8): retrying it in a loop")
                    warned = True
            try:
                self.client.watch_once(lock.key, timeout=1)
            except etcd3.exceptions.WatchTimedOut:
                pass

    def release(self, _req):
        self.stop_refresher()
        lock, self.lock = self.lock, None
        if lock is None:
            raise RuntimeError("release without a held lock")
        if self.form == "with":
            # Leaving the body: `__exit__` releases, and says nothing when the
            # key was not ours (it never was, after a timed-out entry).
            lock.__exit__(None, None, None)
            log(f"left the with-body of {lock.key}")
            return {}
        # Lock.release deletes the key only if it still holds our uuid.
        if not lock.release():
            raise RuntimeError(f"{lock.key} no longer held this lock's uuid")
        log(f"released {lock.key}")
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
        if self.client is not None:
            try:
                self.client.close()
            except Exception as e:  # noqa: BLE001 - closing a dead channel
                log(f"close: {e}")
            self.client = None


def main():
    form = form_from(sys.argv[1:])
    fencecheck_client.serve(Adapter(form), f"python-etcd3 {etcd3.__version__} ({form})", log)


if __name__ == "__main__":
    main()
