#!/usr/bin/env bash
# The nightly job: every shipped scenario on etcd 3.5 and on etcd 3.4 (they behave
# differently), then the lock-client adapters' scenarios, with a seed derived from
# the date (so a night's run can be reproduced exactly, and every night explores a
# new schedule). All run dirs go
# under one folder with an index.html per etcd version; the job ends with the
# summaries and fails if any expectation was unmet or any run could not run.
#
# Every suite also writes JUnit XML next to its summary (junit-<suite>.xml), and
# appends its verdict table to $GITHUB_STEP_SUMMARY when that is set.
#
#   ci/nightly.sh [OUT_DIR]        (default: runs/nightly-YYYY-MM-DD)
#   FENCECHECK_SHARD=I/N ci/nightly.sh [OUT_DIR]
#       only part I of N of every suite (`fencecheck suite --shard I/N`); the
#       nightly workflow runs one shard per matrix job.
#   ci/nightly.sh merge OUT_DIR SHARD_OUT_DIR...
#       one index.html and one JUnit file per suite from the shards' directories
#       (`fencecheck suite --merge`); runs nothing, needs no services.
set -uo pipefail
cd "$(dirname "$0")/.."

SUITES="etcd-3.5 etcd-3.4 clients"

if [ "${1:-}" = "merge" ]; then
  shift
  OUT="${1:?usage: ci/nightly.sh merge OUT_DIR SHARD_OUT_DIR...}"
  shift
  [ "$#" -gt 0 ] || { echo "ci/nightly.sh merge: no shard directories" >&2; exit 2; }
  cargo build --release --quiet || exit 2
  BIN=target/release/fencecheck
  mkdir -p "$OUT"
  status=0
  for s in $SUITES; do
    dirs=()
    for d in "$@"; do dirs+=("$d/$s"); done
    echo "== merging $s from $# shards =="
    "$BIN" suite --merge "${dirs[@]}" --out "$OUT/$s" --junit "$OUT/junit-$s.xml" \
      | tee "$OUT/summary-$s.txt"
    rc=${PIPESTATUS[0]}
    [ "$rc" -gt "$status" ] && status=$rc
  done
  echo
  for s in $SUITES; do echo "  $s: $OUT/$s/index.html"; done
  exit "$status"
fi

DAY="$(date -u +%Y-%m-%d)"
SEED="${FENCECHECK_SEED:-$(date -u +%Y%m%d)}"
OUT="${1:-runs/nightly-$DAY}"
SHARD=()
if [ -n "${FENCECHECK_SHARD:-}" ]; then
  SHARD=(--shard "$FENCECHECK_SHARD")
fi
mkdir -p "$OUT"

ci/bootstrap.sh
cargo build --release --quiet || exit 2
BIN=target/release/fencecheck

status=0
for etcd in 3.5 3.4; do
  echo "== etcd $etcd, seed $SEED${FENCECHECK_SHARD:+, shard $FENCECHECK_SHARD} =="
  "$BIN" suite scenarios/ "${SHARD[@]}" --seed "$SEED" --etcd "$etcd" --out "$OUT/etcd-$etcd" \
    --junit "$OUT/junit-etcd-$etcd.xml" --quiet \
    | tee "$OUT/summary-etcd-$etcd.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" -gt "$status" ] && status=$rc
done

# The lock-client adapters (scenarios/clients/) bring their own service versions.
echo "== lock-client adapters, seed $SEED${FENCECHECK_SHARD:+, shard $FENCECHECK_SHARD} =="
"$BIN" suite scenarios/clients/ "${SHARD[@]}" --seed "$SEED" --out "$OUT/clients" \
  --junit "$OUT/junit-clients.xml" --quiet \
  | tee "$OUT/summary-clients.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -gt "$status" ] && status=$rc

echo
echo "nightly $DAY (seed $SEED): reports under $OUT"
for etcd in 3.5 3.4; do
  echo "  etcd $etcd: $OUT/etcd-$etcd/index.html"
done
echo "  clients: $OUT/clients/index.html"
exit "$status"
