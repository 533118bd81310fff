"""The protocol side of the Python lock-client adapters (docs/client-protocol.md, v1),
so that each adapter under clients/ holds only its library's calls.

An adapter makes an object with `open`, `acquire`, `release` and `close`, each taking
the request (a dict) and returning the answer's fields (a dict), or raising: every
exception becomes an `ok: false` answer, never a crash. `serve(adapter, library)`
sends the hello, answers requests from stdin until it closes, then calls
`adapter.close` so the library lets go of the service before the process exits.
`send` is for events (`session-lost`), which a library reports on its own thread.

Imported by path: each adapter puts this directory on sys.path relative to its own
file, so it runs as `clients/<name>/client.py` from any working directory.
"""
import json
import sys
import threading

_out = threading.Lock()


def logger(name):
    """A function that writes one line, prefixed with `name`, to stderr (the worker's
    client log)."""

    def log(msg):
        print(f"{name}: {msg}", file=sys.stderr, flush=True)

    return log


def send(obj):
    """One JSON line on stdout. One writer at a time: a library's thread (a listener,
    a refresher) may send while the main thread answers, and a line must stay whole."""
    with _out:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def serve(adapter, library, log):
    """Hello, then one answer per request line until stdin closes."""
    send({"fencecheck_client": 1, "library": library})
    ops = {"open": adapter.open, "acquire": adapter.acquire,
           "release": adapter.release, "close": adapter.close}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            rid, op = req["id"], req["op"]
        except (ValueError, KeyError, TypeError) as e:
            log(f"ignoring a line that is not a request ({e}): {line.strip()[:200]}")
            continue
        try:
            if op not in ops:
                raise ValueError(f"unknown op {op!r}")
            send({"id": rid, "ok": True, **ops[op](req)})
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            log(f"{op} failed: {type(e).__name__}: {e}")
            send({"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}"})
    log("stdin closed: exiting")
    adapter.close({})
