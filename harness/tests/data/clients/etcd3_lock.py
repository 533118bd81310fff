#!/usr/bin/python3
# A small correct client around python-etcd3's Lock (Debian's python3-etcd3),
# for the harness's own tests; the shipped adapter lives under clients/.
# python-etcd3 has no session: every acquisition takes a lease of its own,
# and it never says when a lock is lost. The token it gives is none; the lock
# key's CreateRevision, read right after the grant, is offered in `tokens`.
import json, sys
import etcd3

def send(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()

send({"fencecheck_client": 1, "library": "python-etcd3 " + etcd3.__version__})
client, ttl, lock = None, 2, None
for line in sys.stdin:
    req = json.loads(line)
    rid, op = req["id"], req["op"]
    try:
        if op == "open":
            host, port = req["endpoints"][0].rsplit(":", 1)
            client = etcd3.client(host=host, port=int(port), timeout=5)
            ttl = max(1, req["ttl_ms"] // 1000)
            send({"id": rid, "ok": True, "session": 0})
        elif op == "acquire":
            lock = etcd3.Lock(req["lock"], ttl=ttl, etcd_client=client)
            lock.acquire(timeout=None)
            _, meta = client.get(lock.key)
            rev = meta.create_revision if meta is not None else None
            send({"id": rid, "ok": True, "token": None, "tokens": {"create_revision": rev},
                  "entry": lock.key, "value": lock.uuid.hex(), "revision": rev})
        elif op == "release":
            if lock is not None:
                lock.release()
                lock = None
            send({"id": rid, "ok": True})
        else:
            send({"id": rid, "ok": True})
    except Exception as e:  # the library's errors are answers, not crashes
        print(f"{op}: {e!r}", file=sys.stderr, flush=True)
        send({"id": rid, "ok": False, "error": repr(e)})
