#!/usr/bin/python3
"""fencecheck lock-client adapter (protocol v1, docs/client-protocol.md) around
kazoo's `Lock` on ZooKeeper (Debian's python3-kazoo).

What the library does, read from kazoo/recipe/lock.py, and so what this adapter
reports:
- `zk.Lock(path)` creates an ephemeral sequential child `<path>/<uuid hex>__lock__<seq>`
  and holds once no contender has a lower sequence number. `lock.node` is that
  child's name: `entry` is `<path>/<lock.node>`.
- It gives its user no token. What a kazoo user has at hand is the child's name,
  hence its sequence number (the ten digits at its end): that is the `token`. The
  node's czxid, which a user gets only by asking (`zk.exists(entry)`), is read once
  after the grant and given as `revision` and as `tokens.czxid`.
- The session is kazoo's: `session` is `zk.client_id[0]`. A listener on the client
  sends `session-lost` when kazoo reports `KazooState.LOST` (the session expired
  or was closed under it). kazoo then starts a new session by itself; `open` after a
  loss makes a fresh client instead, so each `open` answer names the session used.
"""
import logging
import os
import sys

# The protocol loop, shared by the Python adapters, is in clients/python/: found from
# this file's own path, so the adapter runs from any working directory.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import fencecheck_client  # noqa: E402

import kazoo
from kazoo.client import KazooClient, KazooState

log = fencecheck_client.logger("kazoo adapter")


class Session:
    """One KazooClient and the session it opened. The listener knows whether the
    loss is ours (close) or the library's news."""

    def __init__(self, endpoints, ttl_s):
        self.closing = False
        self.lost_sent = False
        self.id = None
        self.zk = KazooClient(hosts=",".join(endpoints), timeout=ttl_s)
        self.zk.add_listener(self.on_state)
        # The worker waits 10 s for `open`: give up before that, with an answer.
        self.zk.start(timeout=8)
        self.id = self.zk.client_id[0]

    def on_state(self, state):
        # kazoo calls this on its own thread; it must not block.
        log(f"session {self.id}: state {state}")
        if state == KazooState.LOST and not self.closing and not self.lost_sent:
            self.lost_sent = True
            fencecheck_client.send({"event": "session-lost", "session": self.id,
                                    "reason": "kazoo reported KazooState.LOST"})

    def close(self):
        self.closing = True
        try:
            self.zk.stop()
            self.zk.close()
        except Exception as e:  # noqa: BLE001 - closing a dead connection
            log(f"close: {e}")


class Adapter:
    def __init__(self):
        self.session = None
        self.lock = None

    def open(self, req):
        if req.get("service") != "zookeeper":
            raise ValueError(f"kazoo speaks to ZooKeeper, not {req.get('service')!r}")
        self.close_session()
        ttl_s = req["ttl_ms"] / 1000
        self.session = Session(req["endpoints"], ttl_s)
        # kazoo logs the timeout the ensemble negotiated (INFO, below).
        log(f"open: session {self.session.id} on {req['endpoints']}, "
            f"session timeout asked {ttl_s} s")
        return {"session": self.session.id}

    def acquire(self, req):
        if self.session is None:
            raise RuntimeError("acquire before open")
        zk = self.session.zk
        path = req["lock"]
        # The identifier is the node's data (`lock.contenders()` lists it).
        lock = zk.Lock(path, identifier=os.environ.get("FENCECHECK_WORKER", ""))
        log(f"acquire: {path}")
        # Blocks as long as kazoo does (no timeout), through its own retries.
        if not lock.acquire():
            raise RuntimeError(f"Lock.acquire returned False for {path}")
        self.lock = lock
        entry = f"{path}/{lock.node}"
        seq = int(lock.node[-10:])
        answer = {"token": seq, "tokens": {"sequence": seq}, "entry": entry}
        try:
            stat = zk.exists(entry)
            if stat is not None:
                answer["revision"] = stat.czxid
                answer["tokens"]["czxid"] = stat.czxid
            else:
                log(f"acquire: {entry} is gone right after the grant")
        except Exception as e:  # noqa: BLE001 - the czxid is optional
            log(f"acquire: cannot stat {entry}: {e}")
        log(f"acquired {entry}: sequence {seq}, czxid {answer.get('revision')}")
        return answer

    def release(self, _req):
        lock, self.lock = self.lock, None
        if lock is None:
            raise RuntimeError("release without a held lock")
        node = lock.node
        # kazoo deletes its node (a node already gone counts as released).
        if not lock.release():
            raise RuntimeError(f"Lock.release returned False for {lock.path}/{node}")
        log(f"released {lock.path}/{node}")
        return {}

    def close(self, _req):
        self.close_session()
        log("closed")
        return {}

    def close_session(self):
        self.lock = None
        if self.session is not None:
            self.session.close()
            self.session = None


def main():
    # kazoo logs what its connection does (suspended, expired, reconnected): keep it.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    fencecheck_client.serve(Adapter(), f"kazoo {kazoo.__version__}", log)


if __name__ == "__main__":
    main()
