#!/usr/bin/env bash
# The shrink figure (docs/figures.md, "Shrink"): `fencecheck shrink` on a failing
# scenario with 12 planned faults of which one matters (ci/bench/shrink-12.toml),
# with the defaults (10 runs per candidate, kept at 8 failures, a 20-minute
# budget); then the result run on 10 seeds no shrink run used, counting the runs
# that fail the same way (exit 1 with fencing_violations unmet).
#
#   ci/bench/shrink.sh [SCENARIO.toml] [--backend process] [--out DIR]
#
# Prints and writes to DIR/results.txt: faults before and after, candidates and
# runs, wall time, the rate shrink measured, and the rate of the 10 fresh runs.
# Uses target/release/fencecheck (or $FENCECHECK_BIN).
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
  echo "usage: ci/bench/shrink.sh [SCENARIO.toml] [--backend auto|process|docker] [--out DIR]" >&2
  exit 2
}

FILE=ci/bench/shrink-12.toml BACKEND=process OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) [ $# -ge 2 ] || usage; BACKEND=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; OUT=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "shrink.sh: unknown option: $1" >&2; usage ;;
    *) [ -f "$1" ] || { echo "shrink.sh: no such scenario file: $1" >&2; exit 2; }
       FILE=$1; shift ;;
  esac
done
case "$BACKEND" in auto|process|docker) ;; *) echo "shrink.sh: bad --backend $BACKEND" >&2; usage ;; esac
BIN="${FENCECHECK_BIN:-target/release/fencecheck}"
[ -x "$BIN" ] || { echo "shrink.sh: $BIN missing: cargo build --release -p fencecheck" >&2; exit 2; }
command -v jq >/dev/null || { echo "shrink.sh: jq is needed" >&2; exit 2; }
OUT="${OUT:-runs/bench-shrink-$(date -u +%Y-%m-%dT%H%M%SZ)}"
mkdir -p "$OUT"
NAME=$(basename "$FILE" .toml)
RESULT="$OUT/$NAME-shrunk.toml"

# Faults as `validate --schedule` plans them (the file's own seed).
planned() { "$BIN" validate --schedule "$1" | grep -c '^  #' || true; }

t0=$(date +%s)
rc=0
"$BIN" shrink "$FILE" --backend "$BACKEND" --out "$RESULT" --work "$OUT/work" || rc=$?
wall=$(( $(date +%s) - t0 ))
[ "$rc" -eq 0 ] || { echo "shrink.sh: fencecheck shrink exited $rc" >&2; exit "$rc"; }

runs=$(wc -l <"$OUT/work/shrink.jsonl")
candidates=$(jq -s 'map(.candidate) | unique | length' "$OUT/work/shrink.jsonl")
measured=$(grep -m1 '^# Reproduction:' "$RESULT" | sed 's/^# //')

# The result again, on seeds no shrink run used.
again=0
for seed in $(seq 700001 700010); do
  dir="$OUT/again/seed-$seed"
  r=0
  "$BIN" scenario "$RESULT" --seed "$seed" --backend "$BACKEND" --quiet --out "$dir" >/dev/null || r=$?
  if [ "$r" -eq 1 ] && jq -e '.expectations[] | select(.name == "fencing_violations" and .met == false)' \
      "$dir/report.json" >/dev/null; then
    again=$((again + 1))
  fi
done

{
  echo "scenario:            $FILE"
  echo "faults before:       $(planned "$FILE") planned ($(grep -c '^\[\[fault\]\]' "$FILE") [[fault]] tables)"
  echo "faults after:        $(planned "$RESULT") ($(grep -c '^\[\[fault\]\]' "$RESULT") [[fault]] tables)"
  echo "candidates, runs:    $candidates candidates, $runs runs"
  echo "wall time:           ${wall}s"
  echo "shrink measured:     $measured"
  echo "10 fresh runs:       $again of 10 failed the same way (seeds 700001-700010)"
  echo "sentence:            $(sed -n 2p "$RESULT" | sed 's/^# //')"
} | tee "$OUT/results.txt"
