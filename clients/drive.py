#!/usr/bin/python3
"""Drives a lock-client adapter by hand, against a real service this script starts,
speaking docs/client-protocol.md as the worker would, and checks the answers against
the service itself. For testing an adapter without the harness:

    clients/drive.py etcd        # clients/python-etcd3/client.py on a fresh etcd
    clients/drive.py zookeeper   # clients/kazoo/client.py on a fresh ZooKeeper
    clients/drive.py redis       # clients/redis-py/client.py on a fresh redis-server
    clients/drive.py etcd --adapter path/to/other/client   # any adapter for that service

Two adapters contend for one lock; the holder is SIGSTOPped (its process group, as
the harness pauses a worker) past the TTL while the other takes over; then it wakes.
Exit 0 when every check holds, 1 with the failed check otherwise. The service and the
adapters are always stopped; their logs stay in the temp dir printed on failure.
"""
import argparse
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
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = {"etcd": "python-etcd3", "zookeeper": "kazoo", "redis": "redis-py"}
LOCKS = {"etcd": "fencecheck/lock/k3", "zookeeper": "/fencecheck/locks/k3",
         "redis": "fencecheck:lock:k3"}
TTL_MS = 2000


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)
    print(f"ok   {what}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll(what, deadline_s, f):
    """f() until it returns something truthy, or fail after deadline_s."""
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        try:
            v = f()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - the service is not up yet
            last = e
        time.sleep(0.1)
    raise Failed(f"{what}: not within {deadline_s} s (last error: {last})")


# ---- services -----------------------------------------------------------------

def start_service(kind, tmp):
    """Starts the service on a free port; returns (Popen, endpoint, inspector)."""
    port = free_port()
    log = open(os.path.join(tmp, f"{kind}.log"), "wb")
    if kind == "etcd":
        import etcd3
        binary = os.path.expanduser("~/.cache/fencecheck/etcd-3.5/etcd")
        if not os.access(binary, os.X_OK):
            binary = "/usr/bin/etcd"
        peer = free_port()
        url, purl = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{peer}"
        argv = [binary, "--name", "d", "--data-dir", os.path.join(tmp, "etcd"),
                "--listen-client-urls", url, "--advertise-client-urls", url,
                "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                "--initial-cluster", f"d={purl}"]
        proc = subprocess.Popen(argv, stdout=log, stderr=log)
        c = etcd3.client(host="127.0.0.1", port=port, timeout=2)
        poll("etcd serving", 20, lambda: c.status())
        return proc, f"127.0.0.1:{port}", c
    if kind == "zookeeper":
        from kazoo.client import KazooClient
        cp = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
        # tickTime 500 ms: sessions of 1 s to 10 s can be negotiated (a 2 s TTL).
        argv = ["/usr/bin/java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", cp,
                "org.apache.zookeeper.server.ZooKeeperServerMain", str(port),
                os.path.join(tmp, "zk"), "500"]
        proc = subprocess.Popen(argv, stdout=log, stderr=log)
        zk = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10)

        def up():
            zk.start(timeout=1)
            return True
        poll("ZooKeeper serving", 30, up)
        return proc, f"127.0.0.1:{port}", zk
    if kind == "redis":
        import redis
        argv = ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", tmp]
        proc = subprocess.Popen(argv, stdout=log, stderr=log)
        r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        poll("redis serving", 10, lambda: r.ping())
        return proc, f"127.0.0.1:{port}", r
    raise SystemExit(f"unknown service {kind!r}")


def stored(kind, svc, grant):
    """What the service holds at the grant's entry: (value bytes or None,
    revision or None, lease or None); None when the entry is gone."""
    entry = grant["entry"]
    if kind == "etcd":
        value, meta = svc.get(entry)
        return None if value is None else (value, meta.create_revision, meta.lease_id)
    if kind == "zookeeper":
        stat = svc.exists(entry)
        return None if stat is None else (None, stat.czxid, None)
    value = svc.get(entry)
    return None if value is None else (value, None, None)


def held_by(kind, svc, grant):
    """Whether the service's entry is still this grant (etcd and Redis reuse one
    key for every grant: the value and revision tell them apart)."""
    s = stored(kind, svc, grant)
    if s is None:
        return False
    value, rev, _ = s
    if kind == "etcd":
        return value == uuid.UUID(grant["value"]).bytes and rev == grant.get("revision")
    if kind == "redis":
        return value.decode() == grant["value"]
    return True


def check_entry(kind, svc, grant, who):
    s = stored(kind, svc, grant)
    check(s is not None, f"{who}'s entry {grant['entry']} exists in the service")
    value, rev, lease = s
    if kind == "etcd":
        check(value == uuid.UUID(grant["value"]).bytes,
              f"{who}'s value {grant['value']} is the uuid stored at the key")
        check(rev == grant.get("revision"), f"{who}'s revision {rev} is the key's CreateRevision")
        check(lease == grant["token"], f"{who}'s token {grant['token']} is the key's lease")
    elif kind == "zookeeper":
        check(rev == grant.get("revision"), f"{who}'s revision {rev} is the node's czxid")
        check(grant["token"] == int(grant["entry"][-10:]),
              f"{who}'s token {grant['token']} is the node's sequence number")
    else:
        check(value.decode() == grant["value"] == grant["token"],
              f"{who}'s token {grant['token']} is the value stored at the key")


# ---- adapters -----------------------------------------------------------------

class Client:
    """One adapter process, in its own process group (as under a worker, whose
    group the harness SIGSTOPs), stderr to a log file."""

    def __init__(self, argv, name, tmp):
        self.name = name
        self.log_path = os.path.join(tmp, f"{name}.client.log")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(self.log_path, "wb"), start_new_session=True,
            env={**os.environ, "FENCECHECK_WORKER": name})
        self.lines = queue.Queue()
        self.events = []
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.put(raw.decode())
        self.lines.put(None)

    def line(self, timeout):
        """The next protocol line as JSON, or None on timeout; events are kept
        aside. Fails on EOF or a line that is not JSON."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            try:
                raw = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if raw is None:
                raise Failed(f"{self.name}: adapter closed stdout (exit {self.proc.poll()})")
            try:
                obj = json.loads(raw)
            except ValueError:
                raise Failed(f"{self.name}: not a protocol line: {raw[:200]!r}")
            if "event" in obj:
                print(f"     {self.name} event: {obj}", flush=True)
                self.events.append(obj)
                continue
            return obj

    def send(self, op, **fields):
        rid = self.next_id
        self.next_id += 1
        self.proc.stdin.write((json.dumps({"id": rid, "op": op, **fields}) + "\n").encode())
        self.proc.stdin.flush()
        return rid

    def answer(self, rid, timeout):
        a = self.line(timeout)
        if a is None:
            raise Failed(f"{self.name}: no answer to request {rid} within {timeout} s")
        check(a.get("id") == rid and isinstance(a.get("ok"), bool),
              f"{self.name}: answer to {rid} has its id and ok: {a}")
        return a

    def request(self, op, timeout=10, **fields):
        return self.answer(self.send(op, **fields), timeout)

    def signal(self, sig):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self):
        self.signal(signal.SIGCONT)
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
        self.proc.wait()


# ---- the run ------------------------------------------------------------------

def acquire_fields(kind, who):
    f = {"lock": LOCKS[kind]}
    if kind == "redis":
        f["owner"] = f"{who}-{uuid.uuid4().hex[:8]}"
    return f


def granted(a, who):
    check(a["ok"] is True, f"{who} granted: {a}")
    check("token" in a and isinstance(a.get("entry"), str), f"{who}'s grant has token and entry")
    return a


def run(kind, adapter, tmp):
    proc, endpoint, svc = start_service(kind, tmp)
    clients = []
    try:
        a, b, c = (Client([adapter], n, tmp) for n in ("a", "b", "c"))
        clients += [a, b, c]
        for cl in clients:
            hello = cl.line(30)
            check(hello is not None and hello.get("fencecheck_client") == 1
                  and isinstance(hello.get("library"), str),
                  f"{cl.name}: hello {hello}")

        # Misuse gets an answer with ok false, not a crash.
        check(c.request("bogus")["ok"] is False, "c: an unknown op is answered ok false")
        check(c.request("acquire", **acquire_fields(kind, "c"))["ok"] is False,
              "c: acquire before open is answered ok false")
        check(c.request("open", service="nosuch", endpoints=[endpoint], ttl_ms=TTL_MS)["ok"]
              is False, "c: open of another service is answered ok false")
        c.proc.stdin.close()
        check(c.proc.wait(10) == 0, "c: exits 0 when stdin closes")

        opened = {}
        for cl in (a, b):
            o = cl.request("open", service=kind, endpoints=[endpoint], ttl_ms=TTL_MS)
            check(o["ok"] is True and isinstance(o.get("session"), int),
                  f"{cl.name}: open gives a session {o.get('session')}")
            opened[cl.name] = o["session"]
        if kind == "zookeeper":
            check(opened["a"] != opened["b"] and 0 not in opened.values(),
                  "the two sessions are distinct ZooKeeper sessions")

        ga = granted(a.request("acquire", **acquire_fields(kind, "a")), "a")
        check_entry(kind, svc, ga, "a")

        rid_b = b.send("acquire", **acquire_fields(kind, "b"))
        check(b.line(1.5) is None, "b waits while a holds")
        check(a.request("release")["ok"] is True, "a releases")
        check(not held_by(kind, svc, ga), "a's grant is gone from the service")
        gb = granted(b.answer(rid_b, 10), "b")
        check_entry(kind, svc, gb, "b")
        if gb.get("revision") is not None:
            check(gb["revision"] > ga["revision"], "b's revision is after a's")

        # The holder b is frozen past its TTL; a must get the lock meanwhile.
        t0 = time.monotonic()
        b.signal(signal.SIGSTOP)
        rid_a = a.send("acquire", **acquire_fields(kind, "a"))
        ga2 = granted(a.answer(rid_a, 20), "a (b frozen)")
        took = time.monotonic() - t0
        check(took >= TTL_MS / 1000 * 0.9, f"a was granted {took:.1f} s into b's pause")
        check_entry(kind, svc, ga2, "a (after b's pause)")
        check(not held_by(kind, svc, gb), "b's grant is gone from the service")
        b.signal(signal.SIGCONT)

        if kind == "zookeeper":
            poll("b's session-lost event", 15, lambda: b.events or b.line(0.2) or b.events)
            ev = b.events[0]
            check(ev.get("session") == opened["b"] and isinstance(ev.get("reason"), str),
                  f"b says session-lost for its session {opened['b']}")
        else:
            b.line(3)
            check(not b.events, "b sends no session-lost (the library never tells)")
        rb = b.request("release")
        print(f"     b's release after its loss: {rb}", flush=True)
        if kind != "zookeeper":
            check(rb["ok"] is False, "b's release of a lock it lost says so (ok false)")
        check_entry(kind, svc, ga2, "a (after b's late release)")

        # Token order, what a fence on it would see: a finding, not a check.
        for name in sorted({"token", *ga2.get("tokens", {})}):
            t = [g["token"] if name == "token" else g.get("tokens", {}).get(name)
                 for g in (ga, gb, ga2)]
            order = ("increasing" if all(isinstance(x, int) for x in t) and t == sorted(t)
                     and len(set(t)) == 3 else "NOT increasing")
            print(f"     {name} over the three grants: {t} -> {order}", flush=True)

        o = b.request("open", service=kind, endpoints=[endpoint], ttl_ms=TTL_MS)
        check(o["ok"] is True, f"b reopens: session {o.get('session')}")
        if kind == "zookeeper":
            check(o["session"] != opened["b"], "b's new session is a new one")
        check(a.request("release")["ok"] is True, "a releases")
        for cl in (a, b):
            check(cl.request("close")["ok"] is True, f"{cl.name} closes")
            cl.proc.stdin.close()
            check(cl.proc.wait(10) == 0, f"{cl.name} exits 0 when stdin closes")
    finally:
        for cl in clients:
            cl.stop()
        try:
            (svc.stop() if kind == "zookeeper" else svc.close())
        except Exception:  # noqa: BLE001 - the service goes next anyway
            pass
        proc.kill()
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("service", choices=sorted(ADAPTERS))
    ap.add_argument("--adapter", help="adapter command (default: the shipped one)")
    args = ap.parse_args()
    adapter = os.path.abspath(args.adapter or os.path.join(HERE, ADAPTERS[args.service],
                                                           "client.py"))
    tmp = tempfile.mkdtemp(prefix=f"drive-{args.service}-")
    try:
        run(args.service, adapter, tmp)
    except Failed as e:
        print(f"FAIL {e}\n     logs: {tmp}", file=sys.stderr)
        sys.exit(1)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"all checks hold ({args.service}, {adapter})")


if __name__ == "__main__":
    main()
