#!/usr/bin/python3
# A small correct client around redis-py's Lock (Debian's python3-redis), for
# the harness's own tests; the shipped adapter lives under clients/. redis-py's
# token is the lock's value: here the owner the worker hands over (a random
# UUID otherwise) — no order at all. It has no session and never says a lock
# is lost.
import json, sys
import redis

def send(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()

send({"fencecheck_client": 1, "library": "redis-py " + redis.__version__})
r, ttl, lock = None, 2.0, None
for line in sys.stdin:
    req = json.loads(line)
    rid, op = req["id"], req["op"]
    try:
        if op == "open":
            host, port = req["endpoints"][0].rsplit(":", 1)
            r = redis.Redis(host=host, port=int(port), socket_timeout=5)
            ttl = req["ttl_ms"] / 1000
            send({"id": rid, "ok": True, "session": 0})
        elif op == "acquire":
            lock = r.lock(req["lock"], timeout=ttl, sleep=0.05)
            lock.acquire(blocking=True, token=req["owner"])
            token = lock.local.token.decode()
            send({"id": rid, "ok": True, "token": token, "entry": req["lock"], "value": token})
        elif op == "release":
            if lock is not None:
                try:
                    lock.release()
                finally:
                    lock = None
            send({"id": rid, "ok": True})
        else:
            send({"id": rid, "ok": True})
    except Exception as e:  # the library's errors are answers, not crashes
        print(f"{op}: {e!r}", file=sys.stderr, flush=True)
        send({"id": rid, "ok": False, "error": repr(e)})
