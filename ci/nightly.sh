#!/usr/bin/env bash
# The nightly job: every shipped scenario on etcd 3.5 and on etcd 3.4 (they behave
# differently), then the lock-client adapters' scenarios, then the zoo of
# published lock bugs (scenarios/zoo/: each pins the versions it needs), then the kubernetes
# backend on a local single-node cluster of its own (`fencecheck cluster up`: the
# scenarios that need a cluster, scenarios/kubernetes/, and one of each lock
# system with --backend kubernetes), with a seed derived from
# the date (so a night's run can be reproduced exactly, and every night explores a
# new schedule). All run dirs go
# under one folder with an index.html per etcd version; the job ends with the
# summaries and fails if any expectation was unmet or any run could not run.
#
# Every suite also writes JUnit XML next to its summary (junit-<suite>.xml), and
# appends its verdict table to $GITHUB_STEP_SUMMARY when that is set.
#
# After each suite, every run that failed (exit 1: report.json says passed false)
# is shrunk (`fencecheck shrink RUN_DIR`) to the smallest scenario found that still
# fails the same way; the result is kept beside the run's report as
# <run dir>/shrunk.toml (its candidates and logs in <run dir>/shrink/). A shrink
# never changes the job's status: it is a reading aid for a failure already counted.
#   FENCECHECK_SHRINK_BUDGET   wall time per failing run (default 10m)
#   FENCECHECK_SHRINK_TOTAL    for all of them together (default 60m)
#   FENCECHECK_SHRINK=0        no shrinking
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

SUITES="etcd-3.5 etcd-3.4 clients zoo kubernetes"

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

# Every suite runs: every system, fault and adapter (ci/bootstrap.sh --help).
ci/bootstrap.sh --all || exit 2
cargo build --release --quiet || exit 2
BIN=target/release/fencecheck

# Seconds in a humantime duration such as 10m, 90s or 1h (what shrink's --budget
# takes); anything else is refused here, before a night's runs.
seconds() {
  case "$1" in
    *h) echo $(( ${1%h} * 3600 )) ;;
    *m) echo $(( ${1%m} * 60 )) ;;
    *s) echo $(( ${1%s} )) ;;
    *) echo "ci/nightly.sh: cannot read the duration $1 (expected e.g. 10m, 90s, 1h)" >&2; exit 2 ;;
  esac
}
SHRINK_EACH=$(seconds "${FENCECHECK_SHRINK_BUDGET:-10m}") || exit 2
SHRINK_LEFT=$(seconds "${FENCECHECK_SHRINK_TOTAL:-60m}") || exit 2

# Shrinks every failed run of a suite directory, each within its budget and all
# within what is left of the total.
shrink_failures() {
  [ "${FENCECHECK_SHRINK:-1}" = "0" ] && return 0
  local report dir budget t0 rc
  for report in "$1"/*/report.json; do
    [ -f "$report" ] || continue
    python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("passed") is False else 1)' \
      "$report" || continue
    dir=$(dirname "$report")
    budget=$(( SHRINK_EACH < SHRINK_LEFT ? SHRINK_EACH : SHRINK_LEFT ))
    if [ "$budget" -lt 60 ]; then
      echo "shrink: total budget spent; $dir not shrunk"
      continue
    fi
    echo "== shrinking $dir (budget ${budget}s) =="
    t0=$(date +%s)
    rc=0
    "$BIN" shrink "$dir" --budget "${budget}s" --out "$dir/shrunk.toml" --work "$dir/shrink" \
      --quiet || rc=$?
    SHRINK_LEFT=$(( SHRINK_LEFT - ($(date +%s) - t0) ))
    case "$rc" in
      0) echo "shrink: $dir/shrunk.toml" ;;
      1) echo "shrink: $dir does not fail reliably enough to shrink" ;;
      *) echo "shrink: could not shrink $dir (exit $rc)" ;;
    esac
  done
}

status=0
for etcd in 3.5 3.4; do
  echo "== etcd $etcd, seed $SEED${FENCECHECK_SHARD:+, shard $FENCECHECK_SHARD} =="
  "$BIN" suite scenarios/ "${SHARD[@]}" --seed "$SEED" --etcd "$etcd" --out "$OUT/etcd-$etcd" \
    --junit "$OUT/junit-etcd-$etcd.xml" --quiet \
    | tee "$OUT/summary-etcd-$etcd.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" -gt "$status" ] && status=$rc
  shrink_failures "$OUT/etcd-$etcd"
done

# The lock-client adapters (scenarios/clients/) bring their own service versions.
echo "== lock-client adapters, seed $SEED${FENCECHECK_SHARD:+, shard $FENCECHECK_SHARD} =="
"$BIN" suite scenarios/clients/ "${SHARD[@]}" --seed "$SEED" --out "$OUT/clients" \
  --junit "$OUT/junit-clients.xml" --quiet \
  | tee "$OUT/summary-clients.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -gt "$status" ] && status=$rc
shrink_failures "$OUT/clients"

# The zoo: each scenario reproduces a published bug in the version it names and
# expects what that bug does (an unmet expectation is the bug gone or moved).
# With each scenario's own seed: some reproduce in most seeds, not all (their
# rates in docs/track-record.md), and a night's news must be a change, not a draw.
echo "== the zoo of published lock bugs, their own seeds${FENCECHECK_SHARD:+, shard $FENCECHECK_SHARD} =="
"$BIN" suite scenarios/zoo/ "${SHARD[@]}" --out "$OUT/zoo" \
  --junit "$OUT/junit-zoo.xml" --quiet \
  | tee "$OUT/summary-zoo.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -gt "$status" ] && status=$rc

# The kubernetes backend, on a local cluster of this job's own (its state in a
# temporary directory, taken down however the job ends).
echo "== kubernetes backend on a local cluster, seed $SEED${FENCECHECK_SHARD:+, shard $FENCECHECK_SHARD} =="
KSTATE="$(mktemp -d)"
trap '"$BIN" cluster down --dir "$KSTATE" >/dev/null 2>&1; rm -rf "$KSTATE"' EXIT
if "$BIN" cluster up --dir "$KSTATE"; then
  KUBECONFIG="$KSTATE/kubeconfig" "$BIN" suite scenarios/kubernetes/ scenarios/pause.toml \
    scenarios/zk-pause.toml scenarios/redis-pause.toml scenarios/kill.toml scenarios/k8s-lease-pause.toml \
    "${SHARD[@]}" --seed "$SEED" --backend kubernetes --out "$OUT/kubernetes" \
    --junit "$OUT/junit-kubernetes.xml" --quiet \
    | tee "$OUT/summary-kubernetes.txt"
  rc=${PIPESTATUS[0]}
  # A failed run is shrunk on the same cluster.
  KUBECONFIG="$KSTATE/kubeconfig" shrink_failures "$OUT/kubernetes"
else
  echo "the local cluster did not come up: the kubernetes suite did not run"
  rc=2
fi
[ "$rc" -gt "$status" ] && status=$rc
"$BIN" cluster down --dir "$KSTATE" >/dev/null || true

echo
echo "nightly $DAY (seed $SEED): reports under $OUT"
for etcd in 3.5 3.4; do
  echo "  etcd $etcd: $OUT/etcd-$etcd/index.html"
done
echo "  clients: $OUT/clients/index.html"
echo "  zoo: $OUT/zoo/index.html"
echo "  kubernetes: $OUT/kubernetes/index.html"
exit "$status"
