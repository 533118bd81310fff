#!/usr/bin/python3
"""Drives two go-etcd-mutex adapters by hand against a real etcd, without the
fencecheck worker: the adapter's own check that it speaks the protocol and
that the library behaves as the scenarios assume.

    clients/go-etcd-mutex/handtest.py [path/to/etcd]

Starts etcd (default: fencecheck's cached 3.5, else /usr/bin/etcd) on free
ports with a temporary data dir, then: A and B open 2 s sessions on one lock;
A holds; B waits; A is frozen (SIGSTOP) past its TTL; B must be granted with
larger tokens; A, woken, must report session-lost; A reopens and locks again.
Then a waiter frozen past its TTL while it waits (see waiter_expires).
Exits 1 on the first thing that does not hold. Kills what it starts.
"""
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTER = os.path.join(HERE, "bin", "go-etcd-mutex")
LOCK = "fencecheck/lock/handtest"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        hello = self.line(30)
        if hello.get("fencecheck_client") != 1:
            fail(f"{name}: hello {hello}")
        print(f"{name}: hello {hello}")

    def _read(self):
        for raw in self.p.stdout:
            self.lines.put(json.loads(raw))
        self.lines.put(None)

    def line(self, timeout):
        try:
            v = self.lines.get(timeout=timeout)
        except queue.Empty:
            fail(f"{self.name}: nothing within {timeout} s")
        if v is None:
            fail(f"{self.name}: exited ({self.p.wait()})")
        return v

    def send(self, op, **fields):
        rid = self.next_id
        self.next_id += 1
        self.p.stdin.write((json.dumps(dict(id=rid, op=op, **fields)) + "\n").encode())
        self.p.stdin.flush()
        return rid

    def answer(self, rid, timeout):
        deadline = time.monotonic() + timeout
        while True:
            v = self.line(max(0.1, deadline - time.monotonic()))
            if "event" in v:
                self.events.append(v)
                print(f"{self.name}: event {v}")
                continue
            if v.get("id") != rid:
                fail(f"{self.name}: answer {v} to request {rid}")
            print(f"{self.name}: {v}")
            return v

    def call(self, op, timeout=10, **fields):
        v = self.answer(self.send(op, **fields), timeout)
        if not v.get("ok"):
            fail(f"{self.name}: {op} failed: {v}")
        return v

    def wait_event(self, timeout):
        if self.events:
            return self.events.pop(0)
        v = self.line(timeout)
        if "event" not in v:
            fail(f"{self.name}: expected an event, got {v}")
        print(f"{self.name}: event {v}")
        return v

    def stop(self):
        try:
            self.p.send_signal(signal.SIGCONT)
            self.p.kill()
        except ProcessLookupError:
            pass
        self.p.wait()


def start_etcd(binary):
    client, peer = free_port(), free_port()
    url_c, url_p = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    log = open(os.path.join(TMP, "etcd.log"), "w")
    p = subprocess.Popen([binary, "--name", "m0", "--data-dir", os.path.join(TMP, "etcd"),
                          "--listen-client-urls", url_c, "--advertise-client-urls", url_c,
                          "--listen-peer-urls", url_p, "--initial-advertise-peer-urls", url_p,
                          "--initial-cluster", f"m0={url_p}"], stdout=log, stderr=log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", client), timeout=0.5).close()
            return p, f"127.0.0.1:{client}"
        except OSError:
            time.sleep(0.1)
    p.kill()
    fail(f"etcd did not listen on {client} within 20 s")


def waiter_expires(ep, procs):
    """etcd 3.4's Mutex.Lock does not look at its own key again after waiting:
    a waiter whose session expires while it waits is still granted once the
    keys before it are gone, with its key deleted, at the same moment as the
    next waiter, and both get the same Header().Revision."""
    lock = LOCK + "-waiter"
    a, b, c = Adapter("A2"), Adapter("B2"), Adapter("C2")
    procs += [a, b, c]
    for x in (a, b, c):
        x.call("open", service="etcd", endpoints=[ep], ttl_ms=2000)
    a.call("acquire", lock=lock)
    rb = b.send("acquire", lock=lock)
    time.sleep(0.5)
    rc = c.send("acquire", lock=lock)
    time.sleep(0.5)
    b.p.send_signal(signal.SIGSTOP)  # B waits, frozen past its TTL
    time.sleep(4)
    b.p.send_signal(signal.SIGCONT)
    if b.wait_event(10).get("event") != "session-lost":
        fail("B2 did not report its session lost")
    a.call("release")
    gb, gc = b.answer(rb, 10), c.answer(rc, 10)
    if not (gb.get("ok") and gc.get("ok")):
        fail(f"B2 {gb} / C2 {gc}: expected both granted (etcd 3.4 Mutex)")
    if gb["tokens"]["create_revision"] is not None or "revision" in gb:
        fail(f"B2's key should be gone: {gb}")
    if gb["token"] != gc["token"]:
        fail(f"B2 and C2 should share a header revision: {gb} / {gc}")
    print(f"waiter expired while waiting: B2 and C2 both granted, header revision {gb['token']} twice, "
          f"B2's key gone")
    for x in (a, b, c):
        x.call("close")


def main():
    default = os.path.expanduser("~/.cache/fencecheck/etcd-3.5/etcd")
    binary = sys.argv[1] if len(sys.argv) > 1 else (default if os.path.exists(default) else "/usr/bin/etcd")
    print("etcd:", subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split("\n")[0])
    etcd, ep = start_etcd(binary)
    procs = []
    try:
        a = Adapter("A"); procs.append(a)
        b = Adapter("B"); procs.append(b)
        sa = a.call("open", service="etcd", endpoints=[ep], ttl_ms=2000)["session"]
        b.call("open", service="etcd", endpoints=[ep], ttl_ms=2000)
        ga = a.call("acquire", lock=LOCK)
        if ga["entry"] != f"{LOCK}/{sa:x}" or ga["revision"] != ga["tokens"]["create_revision"]:
            fail(f"A's grant does not name its key and create revision: {ga}")
        rb = b.send("acquire", lock=LOCK)
        time.sleep(1)
        if not b.lines.empty():
            fail(f"B was answered while A held the lock: {b.lines.get()}")
        # A frozen past its 2 s TTL, as a GC pause would: the lease expires,
        # etcd deletes A's key, B's Lock returns.
        a.p.send_signal(signal.SIGSTOP)
        gb = b.answer(rb, 10)
        if not gb.get("ok"):
            fail(f"B's acquire failed: {gb}")
        a.p.send_signal(signal.SIGCONT)
        ev = a.wait_event(10)
        if ev.get("event") != "session-lost" or ev.get("session") != sa:
            fail(f"A's event is not its session-lost: {ev}")
        for name in ("token", "tokens.create_revision", "tokens.header_revision"):
            pa, pb = ga, gb
            for part in name.split("."):
                pa, pb = pa[part], pb[part]
            if not pb > pa:
                fail(f"B's {name} {pb} is not above A's {pa}")
        print(f"tokens: A header {ga['token']} create {ga['revision']}; "
              f"B header {gb['token']} create {gb['revision']}")
        b.call("release")
        a.call("open", service="etcd", endpoints=[ep], ttl_ms=2000)
        ga2 = a.call("acquire", lock=LOCK)
        if not ga2["token"] > gb["token"]:
            fail(f"A's second grant {ga2} is not above B's {gb}")
        a.call("release")
        a.call("close")
        b.call("close")
        waiter_expires(ep, procs)
        print("OK")
    finally:
        for p in procs:
            p.stop()
        etcd.kill()
        etcd.wait()


if __name__ == "__main__":
    TMP = tempfile.mkdtemp(prefix="go-etcd-mutex-handtest.")
    try:
        main()
    finally:
        if os.environ.get("KEEP"):
            print("logs in", TMP)
        else:
            shutil.rmtree(TMP, ignore_errors=True)
