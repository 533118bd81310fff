#!/usr/bin/env python3
"""Time to ready and harness memory per backend (issue #20's figures).

Runs one scenario on each backend given, N times each, one run at a time, and
prints per run: the seconds from the start of `fencecheck scenario` until it says
its workers contend (every member and the storage ready: the time to ready of the
run), the whole run's seconds, and the harness process's own peak resident memory
(VmHWM of its /proc/PID/status, read until it exits: on the process backend the
members are its children but not counted here). For kubernetes it adds, from the
run directory's kubernetes.json, each pod's time from creation to running and to
serving. Medians per backend at the end.

  ci/bench/backends.py [--runs 3] [--scenario scenarios/pause.toml]
                       [--duration 3s] [--bin target/release/fencecheck]
                       [process docker kubernetes]

kubernetes needs a cluster (`fencecheck cluster up`, or KUBECONFIG); docker an
engine. Images are built by a first, uncounted run per backend.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def peak_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def one(binary, scenario, backend, duration, out):
    cmd = [binary, "scenario", scenario, "--backend", backend,
           "--duration", duration, "--out", out]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    ready = None
    peak = 0
    os.set_blocking(p.stderr.fileno(), False)
    buf = ""
    while p.poll() is None:
        hwm = peak_kib(p.pid)
        if hwm:
            peak = max(peak, hwm)
        try:
            chunk = p.stderr.read()
        except (BlockingIOError, TypeError):
            chunk = None
        if chunk:
            buf += chunk
            if ready is None and "contending for" in buf:
                ready = time.monotonic() - t0
        time.sleep(0.05)
    # The harness has exited: its own time ends here (a process it left behind
    # may hold the pipe open a while longer; what is in it now is enough).
    total = time.monotonic() - t0
    try:
        buf += p.stderr.read() or ""
    except (BlockingIOError, TypeError):
        pass
    if ready is None and "contending for" in buf:
        ready = total
    pods = None
    k = os.path.join(out, "kubernetes.json")
    if os.path.exists(k):
        with open(k) as f:
            pods = json.load(f).get("ready")
    return {"exit": p.returncode, "ready_s": ready, "total_s": total,
            "peak_mib": peak / 1024, "pods": pods}


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--runs", type=int, default=3)
    a.add_argument("--scenario", default="scenarios/pause.toml")
    a.add_argument("--duration", default="3s")
    a.add_argument("--bin", default="target/release/fencecheck")
    a.add_argument("backends", nargs="*", default=["process", "docker", "kubernetes"])
    o = a.parse_args()
    summary = {}
    with tempfile.TemporaryDirectory() as tmp:
        for b in o.backends:
            one(o.bin, o.scenario, b, o.duration, os.path.join(tmp, f"{b}-warm"))
            rows = []
            for i in range(o.runs):
                r = one(o.bin, o.scenario, b, o.duration, os.path.join(tmp, f"{b}-{i}"))
                rows.append(r)
                pods = ""
                if r["pods"]:
                    pods = " pods " + ", ".join(
                        f"{p['pod']} {p['running_ms']}/{p['serving_ms']} ms" for p in r["pods"])
                ready = "-" if r["ready_s"] is None else f"{r['ready_s']:.2f}"
                print(f"{b:<10} run {i}: exit {r['exit']} ready {ready} s, total "
                      f"{r['total_s']:.1f} s, harness peak {r['peak_mib']:.0f} MiB{pods}",
                      flush=True)
            ok = [r for r in rows if r["ready_s"] is not None]
            if ok:
                summary[b] = (statistics.median(r["ready_s"] for r in ok),
                              statistics.median(r["total_s"] for r in ok),
                              statistics.median(r["peak_mib"] for r in ok))
    print("\nbackend    median ready   median total   median harness peak")
    for b, (r, t, m) in summary.items():
        print(f"{b:<10} {r:>9.2f} s   {t:>9.1f} s   {m:>10.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
