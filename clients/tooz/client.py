"""fencecheck lock-client adapter (protocol v1, docs/client-protocol.md) around
OpenStack tooz 9.1.0 (PyPI), one adapter for three of its drivers (`--driver
etcd3gw|zookeeper|redis`), used as tooz's documentation shows:
`coordination.get_coordinator(url, member_id)`, `start(start_heart=True)` (the
heartbeat thread that keeps the lock's lease or session alive),
`get_lock(name)`, `lock.acquire(blocking=True)`, `lock.release()`, `stop()`.
Started by the `tooz` launcher beside it, under the venv `setup.sh` makes.

What each driver does, read from tooz/drivers/*.py 9.1.0, and so what this
adapter reports (the name given to `get_lock` is the `lock` the worker sends,
unchanged; keys and values are tooz's own):
- etcd3gw (etcd's gRPC gateway, JSON over HTTP, PyPI `etcd3gw`): the key is
  `b"/tooz/locks" + name` (no separator: `/tooz/locksfencecheck/lock/k0`), its
  value `base64(uuid4().bytes)` as sent to the gateway, i.e. the 16 raw uuid
  bytes in etcd (`value`: their hex), put in a txn `create_revision == 0` on a
  lease of `lock_timeout` seconds granted for every attempt. The heartbeat calls
  `lease.refresh()` and ignores its answer: a refresh that finds the lease gone
  (TTL -1) leaves `lock.acquired` True; `is_still_owner()` is not implemented.
  No session: `open` answers `session: 0` (each grant is judged by its lease).
- zookeeper (kazoo 2.11.0): `kazoo.Lock(join("/", "tooz", "locks", name),
  member_id)`; kazoo's `join` takes a name that starts with `/` as absolute, so
  the worker's `/fencecheck/locks/k0` is the lock path and the entry its
  ephemeral sequential child `<uuid hex>__lock__<seq>` holding the member id.
  `lock.acquired` is kazoo's `is_acquired`, which a session expiry does not
  clear. `session` is the kazoo client's session id (tooz hands out none; it is
  read off the driver's client for the protocol only).
- redis (redis-py 8.2.0): a redis-py `Lock` on the key `_tooz_<name>_lock`
  (`_tooz_fencecheck:lock:k0_lock`) with redis-py's random token as the value,
  expiring after `lock_timeout` seconds; the heartbeat's `reacquire()` on a key
  no longer ours raises, which the driver logs as a warning and goes on:
  `lock.acquired` stays True. No session (`session: 0`).

tooz gives its user no fencing token, so `token` is null. What a careful user
can read right after the grant is offered in `tokens`: etcd3gw
`create_revision` (an extra `get` of the key) and `lease`; zookeeper `czxid`
and `sequence` (the child's ten digits); redis `owner` (the random token,
unordered).

Telling the holder: a user of tooz learns that a lock is gone only from the lock
itself. While a lock is held a watcher thread asks `lock.acquired` every half
TTL (with `--check-owner`, also `lock.is_still_owner()`, which the zookeeper and
redis drivers implement, asked once more before `release`) and sends
`session-lost` the first time the lock says it is no longer held. etcd3gw's watcher also reads the lease's TTL, for the log
only (ground truth: `lease <id> gone (TTL -1) while lock.acquired is True`).

Ground truth: every critical-section entry and exit is logged to stderr (the
worker's `worker-<id>.client.log`) as `critical-section enter <entry> <value>`
and `critical-section exit <entry> <value>` — enter when `acquire()` returned
True, exit when `release` (or `close`) is asked for.
"""
import base64
import math
import os
import sys
import threading

# The protocol loop, shared by the Python adapters, is in clients/python/: found from
# this file's own path, so the adapter runs from any working directory.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import fencecheck_client  # noqa: E402

import tooz  # noqa: E402
from tooz import coordination  # noqa: E402

log = fencecheck_client.logger("tooz adapter")

# --driver → the service it speaks to.
DRIVERS = {"etcd3gw": "etcd", "zookeeper": "zookeeper", "redis": "redis"}


def args_from(argv):
    """`--driver etcd3gw|zookeeper|redis [--check-owner]`."""
    driver, check_owner, rest = None, False, list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--driver" and rest and rest[0] in DRIVERS:
            driver = rest.pop(0)
        elif arg == "--check-owner":
            check_owner = True
        else:
            driver = None
            break
    if driver is None:
        sys.exit(f"usage: client.py --driver {'|'.join(DRIVERS)} [--check-owner] (got {argv})")
    return driver, check_owner


def coordinator_url(driver, endpoints, ttl_s):
    """The backend URL a tooz user writes, on the worker's endpoints (its proxies)."""
    if driver == "etcd3gw":
        # etcd3gw talks to one gateway endpoint (no fail-over): the first one.
        return (f"etcd3+http://{endpoints[0]}?lock_timeout={ttl_s}"
                f"&membership_timeout={ttl_s}")
    if driver == "zookeeper":
        hosts = "".join(f"&hosts={e}" for e in endpoints[1:])
        return f"zookeeper://{endpoints[0]}?timeout={ttl_s}{hosts}"
    if len(endpoints) != 1:
        raise ValueError(f"tooz's redis driver uses one Redis, given {len(endpoints)}")
    return f"redis://{endpoints[0]}?lock_timeout={ttl_s}"


class Watcher(threading.Thread):
    """Asks the held lock whether it is still held, every `period` s, until
    stopped; sends `session-lost` once when it says no. A daemon: a check stuck
    behind a cut connection must not keep the adapter alive."""

    def __init__(self, adapter, lock, period):
        super().__init__(daemon=True)
        self.adapter = adapter
        self.lock = lock
        self.period = period
        self.stop = threading.Event()
        self.lease_gone_logged = False
        self.told = False
        self.telling = threading.Lock()

    def run(self):
        while not self.stop.wait(self.period):
            held, why = self.still_held()
            if self.stop.is_set():
                return
            if not held:
                self.tell(why)
                return

    def tell(self, why):
        """`session-lost`, once per hold (the watcher and a release may both find out)."""
        with self.telling:
            if self.told:
                return
            self.told = True
        log(f"lock {self.adapter.entry} no longer held ({why}): telling the worker")
        fencecheck_client.send({"event": "session-lost", "session": self.adapter.session,
                                "reason": f"tooz: {why}"})

    def still_held(self):
        if not self.lock.acquired:
            return False, "lock.acquired is False"
        if self.adapter.check_owner:
            try:
                if not self.lock.is_still_owner():
                    return False, "lock.is_still_owner() is False"
            except tooz.NotImplemented:
                log(f"is_still_owner() is not implemented by the {self.adapter.driver} driver")
                self.adapter.check_owner = False
            except Exception as e:  # noqa: BLE001 - a check that fails says nothing
                log(f"is_still_owner() failed: {type(e).__name__}: {e}")
        if self.adapter.driver == "etcd3gw" and not self.lease_gone_logged:
            self.log_lease()
        return True, ""

    def log_lease(self):
        """Ground truth for the log only: the lease tooz's heartbeat refreshes."""
        lease = getattr(self.lock, "_lease", None)
        try:
            ttl = lease.ttl() if lease is not None else None
        except Exception as e:  # noqa: BLE001 - for the log only
            log(f"lease TTL unreadable: {type(e).__name__}: {e}")
            return
        if ttl is not None and ttl < 0:
            self.lease_gone_logged = True
            log(f"lease {lease.id} gone (TTL {ttl}) while lock.acquired is True "
                f"({self.adapter.entry}); tooz's heartbeat does not tell its user")


class Adapter:
    def __init__(self, driver, check_owner):
        self.driver = driver
        self.check_owner = check_owner
        self.coord = None
        self.session = 0
        self.ttl_s = 60
        self.lock = None
        self.entry = None
        self.value = None
        self.watcher = None

    def open(self, req):
        want = DRIVERS[self.driver]
        if req.get("service") != want:
            raise ValueError(f"tooz's {self.driver} driver speaks to {want}, not {req.get('service')!r}")
        self.close_coord()
        # tooz's timeouts are whole seconds; never round a TTL down to nothing.
        self.ttl_s = max(1, math.ceil(req["ttl_ms"] / 1000))
        url = coordinator_url(self.driver, req["endpoints"], self.ttl_s)
        member = f"fencecheck-{os.environ.get('FENCECHECK_WORKER', '')}-{os.getpid()}".encode()
        coord = coordination.get_coordinator(url, member)
        coord.start(start_heart=True)
        self.coord = coord
        self.session = 0
        if self.driver == "zookeeper":
            self.session = coord._coord.client_id[0]
        log(f"open: {url} as {member.decode()}, session {self.session}")
        return {"session": self.session}

    def acquire(self, req):
        if self.coord is None:
            raise RuntimeError("acquire before open")
        name = req["lock"]
        lock = self.coord.get_lock(name.encode())
        log(f"acquire: {name}")
        # Blocking, no timeout: waits as long as the library does.
        if not lock.acquire(blocking=True):
            raise RuntimeError(f"lock.acquire returned False for {name}")
        answer = getattr(self, f"granted_{self.driver}")(lock)
        self.lock, self.entry, self.value = lock, answer["entry"], answer["value"]
        log(f"critical-section enter {self.entry} {self.value}")
        self.watcher = Watcher(self, lock, max(self.ttl_s / 2, 0.2))
        self.watcher.start()
        return answer

    def granted_etcd3gw(self, lock):
        key = lock._key.decode()
        value = base64.b64decode(lock._uuid).hex()
        lease = lock._lease.id
        # Every token a scenario may name is always there (null when unreadable):
        # a named token missing from an answer is a protocol error.
        answer = {"token": None, "tokens": {"lease": lease, "create_revision": None},
                  "entry": key, "value": value}
        try:
            for stored, meta in self.coord.client.get(key, metadata=True):
                if stored.hex() == value:
                    answer["revision"] = int(meta["create_revision"])
                    answer["tokens"]["create_revision"] = answer["revision"]
        except Exception as e:  # noqa: BLE001 - the revision is optional
            log(f"acquire: cannot read {key}'s CreateRevision: {type(e).__name__}: {e}")
        if "revision" not in answer:
            log(f"acquire: {key} did not hold our uuid right after the grant")
        return answer

    def granted_zookeeper(self, lock):
        zlock = lock._lock
        entry = f"{zlock.path}/{zlock.node}"
        seq = int(zlock.node[-10:])
        answer = {"token": None, "tokens": {"sequence": seq, "czxid": None}, "entry": entry,
                  "value": zlock.data.decode() if isinstance(zlock.data, bytes) else zlock.data}
        try:
            stat = self.coord._coord.exists(entry)
            if stat is not None:
                answer["revision"] = stat.czxid
                answer["tokens"]["czxid"] = stat.czxid
        except Exception as e:  # noqa: BLE001 - the revision is optional
            log(f"acquire: cannot read {entry}'s czxid: {type(e).__name__}: {e}")
        return answer

    def granted_redis(self, lock):
        token = lock._lock.local.token
        owner = token.decode() if isinstance(token, bytes) else token
        return {"token": None, "tokens": {"owner": owner}, "entry": lock.name.decode(),
                "value": owner}

    def release(self, _req):
        watcher = self.watcher
        self.stop_watcher()
        lock, self.lock = self.lock, None
        if lock is None:
            raise RuntimeError("release without a held lock")
        if self.check_owner and watcher is not None:
            # The careful user asks once more at the end of its critical section,
            # before letting go: a loss the watcher had no turn to see is told now.
            held, why = watcher.still_held()
            if not held:
                watcher.tell(why)
        log(f"critical-section exit {self.entry} {self.value}")
        # etcd3gw: a txn deleting the key only if it still holds our uuid;
        # zookeeper: deletes our node; redis: redis-py's token-checked delete.
        if not lock.release():
            raise RuntimeError(f"lock.release() returned False: {self.entry} was no longer ours")
        log(f"released {self.entry}")
        return {}

    def close(self, _req):
        self.close_coord()
        log("closed")
        return {}

    def stop_watcher(self):
        if self.watcher is not None:
            self.watcher.stop.set()
            self.watcher = None

    def close_coord(self):
        self.stop_watcher()
        lock, self.lock = self.lock, None
        if lock is not None:
            log(f"critical-section exit {self.entry} {self.value}")
        if self.coord is not None:
            try:
                # Stops the heartbeat and releases what the driver still holds.
                self.coord.stop()
            except Exception as e:  # noqa: BLE001 - closing a dead connection
                log(f"stop: {type(e).__name__}: {e}")
            self.coord = None


def main():
    driver, check_owner = args_from(sys.argv[1:])
    library = f"tooz {tooz_version()} ({driver}{', check-owner' if check_owner else ''})"
    fencecheck_client.serve(Adapter(driver, check_owner), library, log)


def tooz_version():
    from importlib import metadata
    return metadata.version("tooz")


if __name__ == "__main__":
    main()
