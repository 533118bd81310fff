#!/usr/bin/python3
"""Drives two go-leaderelection adapters by hand against a real kube-apiserver 1.20.2 on
etcd 3.4.23 (started with `HOLD=1 ci/kube-apiserver-smoke.sh`), without the fencecheck
worker: the adapter's check that it speaks the protocol, and a measurement of how long
client-go's old leader keeps believing it leads after the next one started.

    clients/go-leaderelection/handtest.py [ROUNDS] [TTL_MS]     (default 4 rounds, 3000 ms)

Each round: the holder leads; the other waits and is not answered; the holder is frozen
(SIGSTOP, as the harness pauses a worker) until the other is granted, then woken; it must
report session-lost; the new holder's grant must carry a larger resourceVersion and
leaseTransitions + 1, and be the Lease's holder in the apiserver. The woken one opens
again and waits: the roles swap. Then as many rounds of a partition: the holder's own
proxy to the apiserver drops everything until the holder reports session-lost and the
other is granted (which comes first, and the gap, is measured). Last, a release hands
over at once (not after the lease duration). Exits 1 on the first thing that does not hold; kills what it starts.
"""
import json
import os
import queue
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ADAPTER = os.path.join(HERE, "bin", "go-leaderelection")
LOCK = "default/fencecheck-handtest"


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


class Adapter:
    def __init__(self, name):
        self.name = name
        self.log = open(os.path.join(TMP, name + ".log"), "w")
        self.p = subprocess.Popen([ADAPTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, env=dict(os.environ, FENCECHECK_WORKER=name))
        self.lines = queue.Queue()
        self.events = []
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()
        hello, _ = self.line(30)
        if hello.get("fencecheck_client") != 1:
            fail(f"{name}: hello {hello}")
        print(f"{name}: hello {hello}")

    def _read(self):
        # Each line with when it arrived: the measurement is taken here.
        for raw in self.p.stdout:
            self.lines.put((json.loads(raw), time.monotonic()))
        self.lines.put((None, time.monotonic()))

    def line(self, timeout):
        try:
            v, at = self.lines.get(timeout=timeout)
        except queue.Empty:
            fail(f"{self.name}: nothing within {timeout} s")
        if v is None:
            fail(f"{self.name}: exited ({self.p.wait()})")
        return v, at

    def owner(self):
        """A new holder identity, in the harness's `<worker>:<pid>:<session>:0` form."""
        self.acquires = getattr(self, "acquires", 0) + 1
        return f"{self.name}:{self.p.pid}:{self.acquires}:0"

    def send(self, op, **fields):
        rid = self.next_id
        self.next_id += 1
        self.p.stdin.write((json.dumps(dict(id=rid, op=op, **fields)) + "\n").encode())
        self.p.stdin.flush()
        return rid

    def answer(self, rid, timeout):
        """(answer, arrival time)."""
        deadline = time.monotonic() + timeout
        while True:
            v, at = self.line(max(0.1, deadline - time.monotonic()))
            if "event" in v:
                self.events.append((v, at))
                print(f"{self.name}: event {v}")
                continue
            if v.get("id") != rid:
                fail(f"{self.name}: answer {v} to request {rid}")
            print(f"{self.name}: {v}")
            return v, at

    def call(self, op, timeout=10, **fields):
        v, at = self.answer(self.send(op, **fields), timeout)
        if not v.get("ok"):
            fail(f"{self.name}: {op} failed: {v}")
        return v, at

    def wait_event(self, timeout):
        if self.events:
            return self.events.pop(0)
        v, at = self.line(timeout)
        if "event" not in v:
            fail(f"{self.name}: expected an event, got {v}")
        print(f"{self.name}: event {v}")
        return v, at

    def stop(self):
        try:
            self.p.send_signal(signal.SIGCONT)
            self.p.kill()
        except ProcessLookupError:
            pass
        self.p.wait()


class Proxy:
    """A TCP proxy in front of the apiserver for one adapter; cut() makes it a black hole
    (connections stay open, bytes are dropped both ways), as a partition does."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.cut_now = False
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.srv.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            c, _ = self.srv.accept()
            u = socket.create_connection(self.upstream)
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a, b):
        try:
            while data := a.recv(65536):
                if not self.cut_now:
                    b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def start_apiserver():
    """HOLD=1 ci/kube-apiserver-smoke.sh in its own process group; returns (Popen, env)."""
    log = open(os.path.join(TMP, "smoke.log"), "w+")
    p = subprocess.Popen(["bash", os.path.join(ROOT, "ci", "kube-apiserver-smoke.sh")],
                         env=dict(os.environ, HOLD="1"), stdout=log, stderr=log,
                         start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if p.poll() is not None:
            log.seek(0)
            fail(f"kube-apiserver-smoke.sh exited {p.returncode}:\n{log.read()}")
        log.seek(0)
        for line in log.read().splitlines():
            if line.startswith("· holding: "):
                path = line.split()[2].rstrip(";")
                env = dict(kv.split("=", 1) for kv in open(path).read().split())
                return p, env
        time.sleep(0.1)
    fail("kube-apiserver-smoke.sh did not hold within 90 s")


def read_lease(env):
    ctx = ssl.create_default_context(cafile=env["KUBE_CA"])
    ns, name = LOCK.split("/")
    req = urllib.request.Request(
        f"{env['KUBE_ENDPOINT']}/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
        headers={"Authorization": "Bearer " + env["KUBE_TOKEN"]})
    with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
        return json.load(r)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    ttl_ms = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    api, env = start_apiserver()
    print("apiserver:", env["KUBE_ENDPOINT"])
    procs = []
    try:
        ep = env["KUBE_ENDPOINT"].removeprefix("https://")
        host, port = ep.rsplit(":", 1)
        opened = dict(service="kubernetes", ttl_ms=ttl_ms,
                      bearer_token=env["KUBE_TOKEN"], ca_pem=open(env["KUBE_CA"]).read())
        a, b = Adapter("A"), Adapter("B")
        procs += [a, b]
        # Each through its own proxy. The smoke script's certificate is for IP:127.0.0.1,
        # the proxies' address too, so no tls_server_name is sent (the harness's is for
        # the name "kubernetes" and sends it).
        for x in (a, b):
            x.proxy = Proxy((host, int(port)))
            x.opened = dict(opened, endpoints=[x.proxy.addr])
            x.call("open", **x.opened)
        holder, waiter = a, b
        grant, _ = holder.call("acquire", lock=LOCK, owner=holder.owner())
        rows = []
        for r in range(rounds):
            rid = waiter.send("acquire", lock=LOCK, owner=waiter.owner())
            time.sleep(ttl_ms / 1000)  # a whole lease duration: the waiter must not get it
            if not waiter.lines.empty():
                fail(f"{waiter.name} was answered while {holder.name} led: {waiter.lines.get()}")
            t_stop = time.monotonic()
            holder.p.send_signal(signal.SIGSTOP)
            g2, t_grant = waiter.answer(rid, 30)
            if not g2.get("ok"):
                fail(f"{waiter.name}'s acquire failed: {g2}")
            holder.p.send_signal(signal.SIGCONT)
            t_cont = time.monotonic()
            ev, t_lost = holder.wait_event(30)
            if ev.get("event") != "session-lost":
                fail(f"{holder.name}'s event is not session-lost: {ev}")
            lease = read_lease(env)
            if lease["spec"]["holderIdentity"] != g2["value"]:
                fail(f"the Lease's holder {lease['spec']['holderIdentity']} is not {g2['value']}")
            if not g2["revision"] > grant["revision"]:
                fail(f"{waiter.name}'s resourceVersion {g2['revision']} is not above {grant['revision']}")
            if g2["token"] != grant["token"] + 1:
                fail(f"{waiter.name}'s leaseTransitions {g2['token']} is not {grant['token']} + 1")
            row = dict(round=r, stopped_to_grant=t_grant - t_stop, grant_to_lost=t_lost - t_grant,
                       woken_to_lost=t_lost - t_cont)
            rows.append(row)
            print("round {round}: frozen {stopped_to_grant:.2f} s until the other was granted; "
                  "old leader told it lost {grant_to_lost:.2f} s after the new grant, "
                  "{woken_to_lost:.2f} s after it woke".format(**row))
            holder.call("open", **holder.opened)
            holder, waiter, grant = waiter, holder, g2
        # A partition of the holder from the apiserver: it stops leading by its own renew
        # deadline, the other starts after the lease duration; measured, not assumed.
        gaps = []
        for r in range(rounds):
            rid = waiter.send("acquire", lock=LOCK, owner=waiter.owner())
            time.sleep(ttl_ms / 1000)
            holder.proxy.cut_now = True
            t_cut = time.monotonic()
            ev, t_lost = holder.wait_event(30)
            g2, t_grant = waiter.answer(rid, 30)
            if ev.get("event") != "session-lost" or not g2.get("ok"):
                fail(f"partition: {holder.name} {ev}, {waiter.name} {g2}")
            holder.proxy.cut_now = False
            gaps.append(t_grant - t_lost)
            print(f"partition {r}: {holder.name} told it lost {t_lost - t_cut:.2f} s after the cut, "
                  f"{waiter.name} granted {t_grant - t_cut:.2f} s after it: "
                  f"{t_grant - t_lost:.2f} s with no leader")
            holder.call("open", **holder.opened)
            holder, waiter, grant = waiter, holder, g2
        # A release hands over at once: ReleaseOnCancel clears the holder.
        rid = waiter.send("acquire", lock=LOCK, owner=waiter.owner())
        time.sleep(0.5)
        _, t_rel = holder.call("release")
        g3, t_g3 = waiter.answer(rid, 30)
        print(f"release: {waiter.name} granted {t_g3 - t_rel:.2f} s after {holder.name}'s release answer "
              f"(leaseTransitions {g3['token']}, resourceVersion {g3['revision']})")
        if t_g3 - t_rel > ttl_ms / 1000:
            fail("a release did not hand over before the lease duration")
        waiter.call("release")
        a.call("close")
        b.call("close")
        wl = sorted(x["woken_to_lost"] for x in rows)
        gl = sorted(x["grant_to_lost"] for x in rows)
        print(f"ttl {ttl_ms} ms (renew deadline {ttl_ms * 2 // 3} ms, retry {ttl_ms // 6} ms), {rounds} rounds: "
              f"old leader still leading after the new grant: {min(gl):.2f}-{max(gl):.2f} s; "
              f"after waking: {min(wl):.2f}-{max(wl):.2f} s; under a partition, from the old one's "
              f"loss to the new grant: {min(gaps):.2f}-{max(gaps):.2f} s")
        print("OK")
    finally:
        for p in procs:
            p.stop()
        os.killpg(api.pid, signal.SIGTERM)
        api.wait()


if __name__ == "__main__":
    TMP = tempfile.mkdtemp(prefix="go-leaderelection-handtest.")
    try:
        main()
    finally:
        if os.environ.get("KEEP"):
            print("logs in", TMP)
        else:
            shutil.rmtree(TMP, ignore_errors=True)
