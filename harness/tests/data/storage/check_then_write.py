#!/usr/bin/python3
# An example fenced storage as a team might write it, speaking fencecheck's storage
# protocol (docs/storage-protocol.md): one POST endpoint, JSON in and out, HTTP/1.1
# keep-alive. It claims `monotonic` fencing: a write is accepted iff its token is
# >= the highest token the key has seen, and a read with a higher token raises it.
#
# The bug (the default): a write *checks* the token, then does a little work
# (`--work-ms`, 10 ms: validation, a call to another service…) and only then stores
# the value and raises the token — without holding the key across the two. Two
# requests can interleave there: a stale holder's write that passed its check
# before the next holder's read raised the token still lands after that read,
# and the next holder's increment, computed from what it read, overwrites it: an
# increment is lost, and the history is not linearizable under the rule the
# storage claims. Only timing finds it: the stale write must be between its check
# and its store when the next holder reads.
#
# `--correct` is its twin: the same work, with every request to a key under one
# per-key lock (a read cannot slip between a write's check and its store).
# Nothing else differs.
#
#   check_then_write.py [--correct] [--listen 127.0.0.1:0] [--work-ms 10]
#
# It prints `listening on HOST:PORT` once it accepts connections (port 0 picks a
# free one). State is in memory: start a new one for every run.
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("--correct", action="store_true")
p.add_argument("--listen", default="127.0.0.1:0")
p.add_argument("--work-ms", type=float, default=10.0)
args = p.parse_args()

cells = {}  # key -> {"value": int|None, "token": int|None}
seq = [0]
state = threading.Lock()  # guards the dict and seq, never held across the work
key_locks = {}


def key_lock(key):
    with state:
        return key_locks.setdefault(key, threading.Lock())


def cell(key):
    return cells.setdefault(key, {"value": None, "token": None})


def answer(verdict, c):
    with state:
        seq[0] += 1
        return {"verdict": verdict, "value": c["value"], "token": c["token"], "seq": seq[0]}


def read(req):
    key, token = req["key"], req.get("token")
    with state:
        c = cell(key)
        if token is not None and (c["token"] is None or token > c["token"]):
            c["token"] = token
        snap = dict(c)
    return answer("ok", snap)


def check(c, token):
    return token is not None and (c["token"] is None or token >= c["token"])


def write(req):
    key, token, val = req["key"], req.get("token"), req["val"]
    if token is None:
        raise ValueError("a write needs a `token` when fencing is Monotonic")
    with state:
        ok = check(cell(key), token)
        snap = dict(cell(key))
    if not ok:
        return answer("rejected-stale", snap)
    time.sleep(args.work_ms / 1000.0)  # the work between the check and the store
    with state:
        c = cell(key)
        c["value"] = val
        c["token"] = max(token, c["token"] or token)
        snap = dict(c)
    return answer("accepted", snap)


def atomic(op):
    def run(req):
        with key_lock(req["key"]):
            return op(req)
    return run


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        try:
            n = int(self.headers.get("content-length", "0"))
            req = json.loads(self.rfile.read(n))
            if req["op"] == "read":
                out, status = (atomic(read) if args.correct else read)(req), 200
            elif req["op"] == "write":
                out, status = (atomic(write) if args.correct else write)(req), 200
            else:
                out, status = {"error": "unknown op %r" % req["op"]}, 400
        except (ValueError, KeyError, TypeError) as e:
            out, status = {"error": str(e)}, 400
        body = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):  # quiet: one line per request is noise here
        pass


host, port = args.listen.rsplit(":", 1)
srv = ThreadingHTTPServer((host, int(port)), Handler)
srv.daemon_threads = True
print("listening on %s:%d" % srv.server_address[:2], flush=True)
srv.serve_forever()
