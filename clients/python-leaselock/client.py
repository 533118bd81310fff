"""fencecheck lock-client adapter (protocol v1, docs/client-protocol.md) around the
official Kubernetes Python client's leader election (PyPI `kubernetes` 37.0.2:
`kubernetes.leaderelection` — `LeaderElection` on an `electionconfig.Config` with a
`resourcelock.leaselock.LeaseLock`), as a Python controller runs it. Started by the
`python-leaselock` launcher beside it, under the venv `setup.sh` makes.

What the library does, read from its 37.0.2 sources, and so what this adapter reports:
- `LeaderElection.run()` blocks: it loops `try_acquire_or_renew` every `retry_period`
  until it takes the Lease, starts `onstarted_leading` in a thread of its own, renews
  until a round of renewals has not succeeded for `renew_deadline`, then calls
  `onstopped_leading` and returns. The adapter runs it in a thread per acquire.
- Expiry is judged by this elector's **wall clock** (`time.time()`): another holder's
  Lease is expired when `lease_duration` has passed since this elector last saw the
  record change, by `time.time()`; so are the renew deadline and its retries.
- `LeaseLock` writes holderIdentity, leaseDurationSeconds, acquireTime and renewTime
  and **never leaseTransitions**: the field stays what it was (absent on a Lease this
  library created). The `token` is leaseTransitions all the same (what the Lease offers
  a user); a scenario fences on `tokens.resource_version` instead.
- `Config` refuses (with `sys.exit`) a `retry_period` or `renew_deadline` below 1 s,
  and `lease_duration` must be whole seconds; `open` refuses such timing with the
  library's own words instead of exiting.
- There is no release: no `ReleaseOnCancel`, no stop, nothing that ends `run()` but a
  failed renewal. `release` therefore does what client-go's release does, by hand: it
  fences off this elector's lock object (no write of it goes out any more; its
  renewals fail and its thread ends by its renew deadline, told nothing) and writes the
  Lease with an empty holder, a 1 s duration and the transitions kept.
- Nothing in the library bounds a request's time (no `_request_timeout` on the lock's
  calls), and an error that is not an `ApiException` (a refused connection) ends
  `run()` with that exception: before leading the acquire fails with it; while leading
  it is what the program sees of its lost leadership, sent as `session-lost`.
"""
import logging
import os
import sys
import tempfile
import threading
from datetime import datetime, timezone

# The protocol loop, shared by the Python adapters, is in clients/python/: found from
# this file's own path, so the adapter runs from any working directory.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import fencecheck_client  # noqa: E402

import kubernetes  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402
from kubernetes.leaderelection import electionconfig, leaderelection  # noqa: E402
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock  # noqa: E402

log = fencecheck_client.logger("python-leaselock adapter")

# open, release and close have 10 s each in the worker; the adapter's own calls are
# bounded below that.
CALL_TIMEOUT = 8


class Election:
    """One `LeaderElection.run()` in its thread: started by acquire, ended by the
    library (a failed renewal, an exception) or fenced off by release/close."""

    def __init__(self, identity, ns, name):
        self.identity, self.ns, self.name = identity, ns, name
        self.started = threading.Event()
        self.done = threading.Event()
        # Held around every write of this elector's lock and around the release's
        # write, so that no renewal of it lands after the release.
        self.write = threading.Lock()
        self.stopping = False
        self.grant = None
        self.error = None


class RecordingLeases:
    """The Lease API given to `LeaseLock` (its `api_instance`): the library's own
    `CoordinationV1Api`, with its two writes looked at to keep what the apiserver
    answered to the first successful one — the write that took the Lease (`LeaseLock`
    keeps the created Lease but drops the answer to a replace). Read back with a get
    instead, it could already be the first renewal's: the renew loop starts at once.
    Once the election is stopping, writes are refused as the apiserver would refuse
    them (`ApiException`, which `LeaseLock` reports as a failed write)."""

    def __init__(self, api, election):
        self.api = api
        self.el = election

    def read_namespaced_lease(self, name, namespace, **kw):
        return self.api.read_namespaced_lease(name, namespace, **kw)

    def create_namespaced_lease(self, namespace, body, **kw):
        return self._write(lambda: self.api.create_namespaced_lease(namespace, body, **kw))

    def replace_namespaced_lease(self, name, namespace, body, **kw):
        return self._write(
            lambda: self.api.replace_namespaced_lease(name=name, namespace=namespace, body=body, **kw))

    def _write(self, call):
        with self.el.write:
            if self.el.stopping:
                raise ApiException(status=0, reason="released: the adapter stopped this elector")
            got = call()
            if self.el.grant is None:
                self.el.grant = got
            return got


class Adapter:
    def __init__(self):
        self.api_client = None
        self.api = None
        self.ca_file = None
        self.timing = None
        self.opened = 0
        self.acquires = 0
        self.el = None

    def open(self, req):
        if req.get("service") != "kubernetes":
            raise ValueError(f"python-leaselock speaks to kubernetes, not {req.get('service')!r}")
        endpoints = req.get("endpoints") or []
        if len(endpoints) != 1:
            raise ValueError(f"open with {len(endpoints)} endpoints: the client takes one apiserver")
        token, ca_pem = req.get("bearer_token"), req.get("ca_pem")
        if not token or not ca_pem:
            raise ValueError("open without bearer_token or ca_pem")
        ttl_ms = int(req.get("ttl_ms", 0))
        # LeaseLock writes int(str(lease_duration)): whole seconds only.
        if ttl_ms < 1000 or ttl_ms % 1000:
            raise ValueError(f"ttl_ms {ttl_ms}: the library's lease_duration is whole seconds")
        lease = ttl_ms // 1000
        renew = req.get("renew_deadline_ms", ttl_ms * 2 // 3) / 1000
        retry = req.get("retry_period_ms", max(1000, ttl_ms // 6)) / 1000
        try:
            # Config's own checks (it calls sys.exit on a bad value): done here so a
            # timing the library refuses fails the open, not the adapter.
            electionconfig.Config(object(), lease, renew, retry, lambda: None, None)
        except SystemExit as e:
            raise ValueError(f"electionconfig.Config refuses lease {lease} s, renew deadline "
                             f"{renew} s, retry {retry} s: {e}") from None
        self.close_client()
        # What a kubeconfig gives a Python program: the server, a bearer token, the CA
        # (ssl_ca_cert is a file path) and the name the serving certificate is for
        # (tls-server-name: the proxy's address is not in the certificate).
        # The file goes in the working directory, which fencecheck makes the run
        # directory: a client killed by a fault (SIGKILL, no close) leaves it
        # there, in the run's own record, rather than in /tmp, where nothing would
        # remove it.
        worker = os.environ.get("FENCECHECK_WORKER", "x")
        fd, self.ca_file = tempfile.mkstemp(
            prefix=f"python-leaselock-ca.worker-{worker}.", suffix=".pem", dir=os.getcwd())
        with os.fdopen(fd, "w") as f:
            f.write(ca_pem)
        cfg = k8s.Configuration(
            host="https://" + endpoints[0],
            api_key={"BearerToken": token},
            api_key_prefix={"BearerToken": "Bearer"},
            ssl_ca_cert=self.ca_file,
            tls_server_name=req.get("tls_server_name") or None,
        )
        self.api_client = k8s.ApiClient(cfg)
        self.api = k8s.CoordinationV1Api(self.api_client)
        self.timing = (lease, renew, retry)
        self.opened += 1
        log(f"open {self.opened}: {cfg.host} (certificate checked for "
            f"{req.get('tls_server_name')!r}), lease {lease} s, renew deadline {renew} s, "
            f"retry {retry} s")
        # No session in the service: an elector's term lives in the Lease it writes.
        return {"session": 0}

    def acquire(self, req):
        if self.api is None:
            raise RuntimeError("acquire before open")
        if self.el is not None:
            if not self.el.done.is_set() and not self.el.stopping:
                raise RuntimeError("acquire while an elector still runs (release first)")
            self.el = None
        lock_name = req.get("lock") or ""
        ns, _, name = lock_name.rpartition("/")
        ns = ns or "default"
        if not name:
            raise ValueError(f"lock {lock_name!r} is not namespace/name")
        self.acquires += 1
        # The identity is the owner the worker gives (the harness reads which worker
        # and session hold the Lease off it); without one, a new candidate identity
        # per acquire, as a restarted controller pod is.
        identity = req.get("owner") or (
            f"{os.environ.get('FENCECHECK_WORKER', '')}-{os.getpid()}-{self.opened}-{self.acquires}")
        el = Election(identity, ns, name)
        lock = LeaseLock(name, ns, identity)
        # LeaseLock builds its CoordinationV1Api on the default configuration; this
        # client's is given instead (as set_default would), wrapped to see the writes.
        lock.api_instance = RecordingLeases(self.api, el)
        lease, renew, retry = self.timing
        config = electionconfig.Config(
            lock, lease, renew, retry,
            onstarted_leading=lambda: self.started(el),
            onstopped_leading=lambda: self.stopped(el, "onstopped_leading: no renewal "
                                                   f"succeeded within {renew} s"))
        elector = leaderelection.LeaderElection(config)
        self.el = el
        log(f"{identity}: electing on lease {ns}/{name}")
        threading.Thread(target=self.run, args=(el, elector), daemon=True,
                         name=f"elector-{identity}").start()
        while not el.started.wait(0.2):
            if el.done.is_set():
                self.el = None
                raise RuntimeError(f"LeaderElection.run ended without leading: {el.error!r}")
        l = el.grant
        if l is None or l.spec is None or l.spec.holder_identity != identity:
            raise RuntimeError(f"{identity}: leading, but no write of ours was seen ({l})")
        transitions = l.spec.lease_transitions or 0
        rv = l.metadata.resource_version
        answer = {
            # What the Lease offers; Python's LeaseLock never moves it.
            "token": transitions,
            "tokens": {"lease_transitions": transitions, "resource_version": rv},
            # The Lease's name: what the harness's watch of the namespace records.
            "entry": name,
            "value": identity,
        }
        # resourceVersion is opaque to clients; on etcd it is the write's revision.
        try:
            answer["revision"] = answer["tokens"]["resource_version"] = int(rv)
        except (TypeError, ValueError):
            log(f"{identity}: resourceVersion {rv!r} is not an integer")
        log(f"{identity}: leading {ns}/{name}: resourceVersion {rv}, leaseTransitions "
            f"{l.spec.lease_transitions}")
        return answer

    def run(self, el, elector):
        try:
            elector.run()
            log(f"{el.identity}: LeaderElection.run returned")
        except BaseException as e:  # noqa: BLE001 - what ended run() is the finding
            el.error = e
            log(f"{el.identity}: LeaderElection.run raised {type(e).__name__}: {e}")
            if el.started.is_set():
                self.stopped(el, f"LeaderElection.run raised {type(e).__name__}: {e}")
        finally:
            el.done.set()

    def started(self, el):
        # The library's own thread; the work it guards is the worker's.
        log(f"{el.identity}: onstarted_leading")
        el.started.set()

    def stopped(self, el, why):
        if el.stopping:
            log(f"{el.identity}: stopped leading (released): {why}")
            return
        log(f"{el.identity}: stopped leading unprompted: lost ({why})")
        fencecheck_client.send({"event": "session-lost", "session": 0,
                                "reason": f"{why} ({el.identity})"})

    def release(self, _req):
        if self.el is None:
            raise RuntimeError("release without a lock held")
        el, self.el = self.el, None
        self.let_go(el)
        return {}

    def let_go(self, el):
        """client-go's release, by hand (37.0.2 has none): this elector's lock object
        writes no more, then the Lease, if still ours, gets an empty holder, a 1 s
        duration and its transitions kept. Not ours any more: nothing to do (client-go
        checks its last observed record the same way)."""
        with el.write:
            el.stopping = True
            if not el.started.is_set():
                return
            l = self.api.read_namespaced_lease(el.name, el.ns, _request_timeout=CALL_TIMEOUT)
            holder = l.spec.holder_identity if l.spec else None
            if holder != el.identity:
                log(f"{el.identity}: release: the Lease is {holder!r}'s now; nothing to release")
                return
            now = datetime.now(timezone.utc)
            l.spec.holder_identity = ""
            l.spec.lease_duration_seconds = 1
            l.spec.acquire_time = now
            l.spec.renew_time = now
            done = self.api.replace_namespaced_lease(el.name, el.ns, l,
                                                     _request_timeout=CALL_TIMEOUT)
            log(f"{el.identity}: released {el.ns}/{el.name} at resourceVersion "
                f"{done.metadata.resource_version}")

    def close(self, _req):
        self.close_client()
        log("closed")
        return {}

    def close_client(self):
        el, self.el = self.el, None
        if el is not None:
            try:
                self.let_go(el)
            except Exception as e:  # noqa: BLE001 - the Lease expires by itself
                log(f"{el.identity}: release at close failed: {type(e).__name__}: {e}")
        if self.api_client is not None:
            try:
                self.api_client.close()
            except Exception as e:  # noqa: BLE001 - closing a dead pool
                log(f"close: {e}")
            self.api_client = self.api = None
        if self.ca_file is not None:
            try:
                os.unlink(self.ca_file)
            except OSError as e:
                log(f"close: cannot remove {self.ca_file}: {e}")
            self.ca_file = None


def main():
    # The library logs through `logging` ("leaderelection"); to stderr, the client log.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    fencecheck_client.serve(Adapter(), f"kubernetes (Python client) {kubernetes.__version__} "
                            "leaderelection LeaseLock", log)


if __name__ == "__main__":
    main()
