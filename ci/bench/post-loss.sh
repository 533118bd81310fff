#!/usr/bin/env bash
# The post-loss action window over seeds: each scenario run with seeds 1..N; per
# scenario, over every unsafe hold of every run (report.json,
# findings.unsafe_window): how long the old holder kept using the storage after the
# service had moved on (window p50 / p90 / max), how many said they had lost the lock
# before letting go (post_loss.told) and how long after the service (believed p50 /
# max), and the writes before and after they knew, by what the fence did with them.
#
#   ci/bench/post-loss.sh SCENARIO.toml... [--seeds N] [--out DIR]
#
# Defaults: 10 seeds, process backend, one run at a time. Uses target/release/fencecheck
# if built, else target/debug/fencecheck (or $FENCECHECK_BIN).
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=10 OUT="" FILES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) SEEDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -*) echo "post-loss.sh: unknown option $1" >&2; exit 2 ;;
    *) [ -f "$1" ] || { echo "post-loss.sh: no such scenario file: $1" >&2; exit 2; }
       FILES+=("$1"); shift ;;
  esac
done
[ ${#FILES[@]} -gt 0 ] || { echo "usage: ci/bench/post-loss.sh SCENARIO.toml... [--seeds N] [--out DIR]" >&2; exit 2; }
BIN="${FENCECHECK_BIN:-}"
if [ -z "$BIN" ]; then
  BIN=target/release/fencecheck
  [ -x "$BIN" ] || BIN=target/debug/fencecheck
fi
[ -x "$BIN" ] || { echo "post-loss.sh: no fencecheck binary (cargo build first)" >&2; exit 2; }
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
for f in "${FILES[@]}"; do
  name="$(basename "$f" .toml)"
  for seed in $(seq 1 "$SEEDS"); do
    # Each run's own output kept beside its directory: a run that ended early says why.
    "$BIN" scenario "$f" --backend process --seed "$seed" --quiet --out "$OUT/$name-$seed" \
      >"$OUT/$name-$seed.out" 2>&1 || true
  done
  python3 - "$OUT" "$name" "$SEEDS" <<'PY'
import json, sys, statistics
out, name, seeds = sys.argv[1], sys.argv[2], int(sys.argv[3])
win, bel = [], []
told = untold = passed = 0
before = {"writes_refused": 0, "writes_accepted": 0}
after = dict(before)
for s in range(1, seeds + 1):
    try:
        r = json.load(open(f"{out}/{name}-{s}/report.json"))
    except OSError:
        print(f"  seed {s}: no report (see {out}/{name}-{s}.out)")
        continue
    passed += bool(r.get("passed"))
    u = r["findings"]["unsafe_window"]
    p = u.get("post_loss", {})
    told += p.get("told", 0); untold += p.get("untold", 0)
    for w in u["windows"]:
        win.append(w["window_ms"])
        t = w.get("client_told_ns")
        if t is not None:
            bel.append(max(0, t - w["session_ended_ns"]) / 1e6)
    for k in before:
        before[k] += p.get("before", {}).get(k, 0)
        after[k] += p.get("after", {}).get(k, 0)
def q(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round((len(xs) - 1) * f))] if xs else 0
print(f"{name}: {passed}/{seeds} runs met their expectations; {len(win)} unsafe holds")
print(f"  window after the service moved on: p50 {q(win,.5):.0f} ms, p90 {q(win,.9):.0f} ms, max {q(win,1):.0f} ms")
print(f"  said they had lost the lock before letting go: {told} of {told+untold}; "
      f"believed p50 {q(bel,.5):.0f} ms, max {q(bel,1):.0f} ms after the service")
print(f"  writes before they knew: {before['writes_refused']} refused, {before['writes_accepted']} accepted; "
      f"after: {after['writes_refused']} refused, {after['writes_accepted']} accepted")
PY
done
echo "run directories: $OUT"
