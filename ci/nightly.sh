#!/usr/bin/env bash
# The nightly job: every shipped scenario on etcd 3.5 and on etcd 3.4 (they behave
# differently), then the lock-client adapters' scenarios, with a seed derived from
# the date (so a night's run can be reproduced exactly, and every night explores a
# new schedule). All run dirs go
# under one folder with an index.html per etcd version; the job ends with the
# summaries and fails if any expectation was unmet or any run could not run.
#
#   ci/nightly.sh [OUT_DIR]        (default: runs/nightly-YYYY-MM-DD)
set -uo pipefail
cd "$(dirname "$0")/.."

DAY="$(date -u +%Y-%m-%d)"
SEED="${FENCECHECK_SEED:-$(date -u +%Y%m%d)}"
OUT="${1:-runs/nightly-$DAY}"
mkdir -p "$OUT"

ci/bootstrap.sh
cargo build --release --quiet || exit 2
BIN=target/release/fencecheck

status=0
for etcd in 3.5 3.4; do
  echo "== etcd $etcd, seed $SEED =="
  "$BIN" suite scenarios/ --seed "$SEED" --etcd "$etcd" --out "$OUT/etcd-$etcd" --quiet \
    | tee "$OUT/summary-etcd-$etcd.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" -gt "$status" ] && status=$rc
done

# The lock-client adapters (scenarios/clients/) bring their own service versions.
echo "== lock-client adapters, seed $SEED =="
"$BIN" suite scenarios/clients/ --seed "$SEED" --out "$OUT/clients" --quiet \
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
