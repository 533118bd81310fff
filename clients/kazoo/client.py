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
  loss makes a fresh client instead (`fresh`) or answers kazoo's new session
  (`kept`), so each `open` answer names the session used.

Two forms (`--form`), two ways kazoo users write it:
- `fresh` (the default): a new `zk.Lock` for every acquisition, a new client after a
  loss.
- `kept`: python-zk/kazoo#282's usage. One KazooClient for the adapter's life (kazoo
  recovers from an expiry by itself, with a new session, which `open` waits for and
  names) and one `Lock` object per lock path, kept and acquired again and again.
  Once kazoo has said LOST during a hold, the hold is over: kazoo's own docs say
  "its certain that the lock ... has been lost", so the lock is not released. The
  kept `Lock` still says `is_acquired`, and its next `acquire()` retries for ever
  (`_inner_acquire` raises ForceRetryError while `is_acquired`; the retry has no
  limit): the worker waits on a lock nobody holds.
"""
import logging
import os
import sys
import time

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
        # How many times kazoo said LOST: a hold that began before the last one is over.
        self.losses = 0
        self.id = None
        self.zk = KazooClient(hosts=",".join(endpoints), timeout=ttl_s)
        self.zk.add_listener(self.on_state)
        # The worker waits 10 s for `open`: give up before that, with an answer.
        self.zk.start(timeout=8)
        self.id = self.zk.client_id[0]

    def on_state(self, state):
        # kazoo calls this on its own thread; it must not block.
        log(f"session {self.id}: state {state}")
        if state == KazooState.LOST and not self.closing:
            self.losses += 1
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

    def renewed(self, wait_s):
        """The session kazoo made by itself after a loss, once connected (`kept`)."""
        deadline = time.monotonic() + wait_s
        while not self.zk.connected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"kazoo did not reconnect within {wait_s} s")
            time.sleep(0.05)
        new = self.zk.client_id[0]
        if new != self.id:
            log(f"kazoo's new session {new} (was {self.id})")
            self.id = new
            self.lost_sent = False
        return new


class Adapter:
    def __init__(self, form):
        self.form = form
        self.session = None
        self.lock = None
        # `kept`: one Lock object per lock path, and the LOST count at its grant.
        self.locks = {}
        self.losses_at_grant = 0

    def open(self, req):
        if req.get("service") != "zookeeper":
            raise ValueError(f"kazoo speaks to ZooKeeper, not {req.get('service')!r}")
        if self.form == "kept" and self.session is not None:
            # The worker's open after a loss: the same client, kazoo's own new session.
            return {"session": self.session.renewed(8)}
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
        if self.form == "kept":
            if path not in self.locks:
                self.locks[path] = zk.Lock(path, identifier=os.environ.get("FENCECHECK_WORKER", ""))
            lock = self.locks[path]
            self.losses_at_grant = self.session.losses
        else:
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
        if self.form == "kept" and self.session.losses != self.losses_at_grant:
            # kazoo said LOST during the hold: the lock is gone, nothing to release.
            log(f"not releasing {lock.path}/{node}: kazoo said LOST during the hold")
            return {}
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
        self.locks = {}
        if self.session is not None:
            self.session.close()
            self.session = None


FORMS = ("fresh", "kept")


def form_from(argv):
    """`--form fresh|kept`; `fresh` when not given."""
    if len(argv) == 0:
        return "fresh"
    if len(argv) == 2 and argv[0] == "--form" and argv[1] in FORMS:
        return argv[1]
    sys.exit(f"usage: client.py [--form {'|'.join(FORMS)}] (got {argv})")


def main():
    # kazoo logs what its connection does (suspended, expired, reconnected): keep it.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    form = form_from(sys.argv[1:])
    fencecheck_client.serve(Adapter(form), f"kazoo {kazoo.__version__} Lock ({form})", log)


if __name__ == "__main__":
    main()
