#!/usr/bin/python3
# A small correct client around kazoo's Lock (Debian's python3-kazoo), for the
# harness's own tests; the shipped adapter lives under clients/. kazoo gives no
# token; the lock node's czxid, read right after the grant, is offered in
# `tokens`. KazooState.LOST is reported as `session-lost`.
import json, sys, threading
import kazoo
from kazoo.client import KazooClient, KazooState

out = threading.Lock()

def send(o):
    with out:
        sys.stdout.write(json.dumps(o) + "\n")
        sys.stdout.flush()

send({"fencecheck_client": 1, "library": "kazoo " + getattr(kazoo, "__version__", "?")})
zk, lock = None, None

def listener(state):
    if state == KazooState.LOST and zk is not None:
        send({"event": "session-lost", "session": zk.client_id[0] if zk.client_id else 0,
              "reason": "KazooState.LOST"})

for line in sys.stdin:
    req = json.loads(line)
    rid, op = req["id"], req["op"]
    try:
        if op == "open":
            if zk is not None:
                zk.stop()
                zk.close()
            zk = KazooClient(hosts=",".join(req["endpoints"]), timeout=req["ttl_ms"] / 1000)
            zk.add_listener(listener)
            zk.start(timeout=8)
            send({"id": rid, "ok": True, "session": zk.client_id[0]})
        elif op == "acquire":
            lock = zk.Lock(req["lock"])
            lock.acquire(blocking=True)
            entry = req["lock"] + "/" + lock.node
            stat = zk.exists(entry)
            czxid = stat.czxid if stat is not None else None
            send({"id": rid, "ok": True, "token": None, "tokens": {"czxid": czxid},
                  "entry": entry, "revision": czxid})
        elif op == "release":
            if lock is not None:
                lock.release()
                lock = None
            send({"id": rid, "ok": True})
        elif op == "close":
            if zk is not None:
                zk.stop()
                zk.close()
                zk = None
            send({"id": rid, "ok": True})
        else:
            send({"id": rid, "ok": False, "error": "unknown op " + op})
    except Exception as e:  # the library's errors are answers, not crashes
        print(f"{op}: {e!r}", file=sys.stderr, flush=True)
        send({"id": rid, "ok": False, "error": repr(e)})
