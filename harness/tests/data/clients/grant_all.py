#!/usr/bin/python3
# A protocol-correct client that grants everything (the doc's minimal client);
# its argument picks one way to break the protocol:
#   crash-mid-hold  exits right after answering its first acquire
#   not-json        answers `open` with a line that is not JSON
#   version         says hello with protocol version 2
#   never-answers   says hello, then reads requests and answers none
import json, os, sys

mode = sys.argv[1] if len(sys.argv) > 1 else ""

def send(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()

send({"fencecheck_client": 2 if mode == "version" else 1, "library": "grant-all " + mode})
for line in sys.stdin:
    req = json.loads(line)
    if mode == "never-answers":
        continue
    if req["op"] == "open":
        if mode == "not-json":
            print("session opened, all good", flush=True)
            continue
        send({"id": req["id"], "ok": True, "session": 0})
    elif req["op"] == "acquire":
        send({"id": req["id"], "ok": True, "token": 1, "entry": req["lock"]})
        if mode == "crash-mid-hold":
            sys.stderr.write("crashing mid-hold on purpose\n")
            os._exit(3)
    else:
        send({"id": req["id"], "ok": True})
