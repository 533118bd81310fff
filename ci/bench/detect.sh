#!/usr/bin/env bash
# Detection figures for negative controls: each scenario run with seeds 1..N; a
# seed "detects" when the run exits 0 (every expectation met — for a negative
# control, that the violation it expects was found). Per scenario: seeds detected
# / N, the seeds that missed, and the median time from the run's start to the
# first fencing violation (stale write accepted) and to the first fresh-rejected
# write (report.json: run.time_origin_ns, checks.fencing.violations[].stale.time_ns,
# checks.fencing.fresh_rejected_examples[].time_ns).
#
#   ci/bench/detect.sh SCENARIO.toml... [--seeds N] [--backend process] [--etcd 3.5|3.4]
#                      [--jobs J] [--out DIR]
#
# (The nightly runs every scenario on etcd 3.5 and on 3.4: measure both.)
# Defaults: 20 seeds, process backend, 1 run at a time (each run's timing is part
# of what is measured; --jobs 2 halves the wall time on a loaded machine at the
# cost of more contention). Uses target/release/fencecheck (or $FENCECHECK_BIN).
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
  echo "usage: ci/bench/detect.sh SCENARIO.toml... [--seeds N] [--backend auto|process|docker] [--etcd 3.5|3.4] [--jobs J] [--out DIR]" >&2
  exit 2
}
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }

SEEDS=20 BACKEND=process ETCD="" JOBS=1 OUT="" FILES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) [ $# -ge 2 ] && is_int "$2" || usage; SEEDS=$2; shift 2 ;;
    --backend) [ $# -ge 2 ] || usage; BACKEND=$2; shift 2 ;;
    --etcd) [ $# -ge 2 ] || usage; ETCD=$2; shift 2 ;;
    --jobs) [ $# -ge 2 ] && is_int "$2" || usage; JOBS=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; OUT=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "detect.sh: unknown option: $1" >&2; usage ;;
    *) [ -f "$1" ] || { echo "detect.sh: no such scenario file: $1" >&2; exit 2; }
       FILES+=("$1"); shift ;;
  esac
done
[ ${#FILES[@]} -gt 0 ] || usage
case "$BACKEND" in auto|process|docker) ;; *) echo "detect.sh: bad --backend $BACKEND" >&2; usage ;; esac
case "$ETCD" in ""|3.5|3.4) ;; *) echo "detect.sh: bad --etcd $ETCD" >&2; usage ;; esac
ETCD_ARGS=()
[ -n "$ETCD" ] && ETCD_ARGS=(--etcd "$ETCD")
BIN="${FENCECHECK_BIN:-target/release/fencecheck}"
[ -x "$BIN" ] || { echo "detect.sh: $BIN missing: cargo build --release -p fencecheck" >&2; exit 2; }
command -v jq >/dev/null || { echo "detect.sh: jq is needed" >&2; exit 2; }
"$BIN" validate "${FILES[@]}" >/dev/null || { echo "detect.sh: invalid scenario" >&2; exit 2; }
OUT="${OUT:-runs/bench-detect-$(date -u +%Y-%m-%dT%H%M%SZ)}"
mkdir -p "$OUT"
RESULTS="$OUT/results.tsv"
printf 'scenario\tseed\trc\tdetected\tstale_accepted\tfresh_rejected\toverlaps\tt_first_violation_s\tt_first_fresh_rejected_s\twall_s\n' >"$RESULTS"

# One run: its row goes to its own file, merged at the end (jobs run concurrently).
one() {
  local file=$1 seed=$2 name dir rc=0 t0 wall
  name=$(basename "$file" .toml)
  dir="$OUT/$name/seed-$seed"
  rm -rf "$dir"
  t0=$(date +%s%N)
  # A hard bound per run: the scenarios are ≤ 30 s; 5 minutes means the harness hung.
  timeout --signal=INT --kill-after=30 300 \
    "$BIN" scenario "$file" --seed "$seed" --backend "$BACKEND" "${ETCD_ARGS[@]}" --quiet --out "$dir" \
    >"$dir.verdict.txt" 2>&1 || rc=$?
  wall=$(( ($(date +%s%N) - t0) / 1000000 ))
  local row
  if [ -f "$dir/report.json" ]; then
    row=$(jq -r --arg s "$name" --argjson seed "$seed" --argjson rc "$rc" --argjson wall "$wall" '
      .run.time_origin_ns as $o
      | def first_s(xs): ([xs[]?.time_ns] | min) as $m | if $m == null then "-" else (($m - $o) / 1e9 * 100 | round / 100 | tostring) end;
      [$s, $seed, $rc, (if $rc == 0 then "yes" else "no" end),
       .checks.fencing.stale_accepted, .checks.fencing.fresh_rejected, .checks.mutex.overlaps,
       first_s([.checks.fencing.violations[]?.stale]), first_s(.checks.fencing.fresh_rejected_examples),
       ($wall / 1000 * 10 | round / 10)] | @tsv' "$dir/report.json")
  else
    row=$(printf '%s\t%s\t%s\tno\t-\t-\t-\t-\t-\t%s' "$name" "$seed" "$rc" "$((wall / 1000))")
  fi
  printf '%s\n' "$row" >"$dir.row"
  printf '%s\n' "$row" | awk -F'\t' '{printf "  %-22s seed %-3s rc %s detected %-3s stale_accepted %-4s fresh_rejected %-4s first violation %s s, first fresh-rejected %s s (%s s)\n", $1,$2,$3,$4,$5,$6,$8,$9,$10}'
}

echo "detect: ${#FILES[@]} scenario(s) × seeds 1..$SEEDS, backend $BACKEND, etcd ${ETCD:-per scenario}, $JOBS at a time → $OUT"
for file in "${FILES[@]}"; do
  mkdir -p "$OUT/$(basename "$file" .toml)"
  for seed in $(seq 1 "$SEEDS"); do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    one "$file" "$seed" &
  done
done
wait || true
for file in "${FILES[@]}"; do
  for seed in $(seq 1 "$SEEDS"); do
    cat "$OUT/$(basename "$file" .toml)/seed-$seed.row"
  done
done >>"$RESULTS"

# Summary: per scenario, detected/N, missed seeds, harness errors (rc 2), medians.
echo
awk -F'\t' -v n="$SEEDS" '
  function median(list,   a, k, i, j, t) {
    k = split(list, a, " "); if (k == 0) return "-";
    for (i = 2; i <= k; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j+1] = a[j]; a[j+1] = t }
    return (k % 2) ? a[(k+1)/2] : (a[k/2] + a[k/2+1]) / 2
  }
  NR == 1 { next }
  !($1 in seen) { seen[$1] = 1; order[++m] = $1 }
  { if ($4 == "yes") det[$1]++; else miss[$1] = miss[$1] " " $2;
    if ($3 == 2) err[$1] = err[$1] " " $2;
    if ($8 != "-") tv[$1] = tv[$1] " " $8;
    if ($9 != "-") tf[$1] = tf[$1] " " $9;
    wall[$1] = wall[$1] " " $10 }
  function secs(x) { return x == "-" ? "-" : x " s" }
  END {
    printf "%-22s %9s  %-22s %-12s %21s %24s %12s\n", "scenario", "detected", "missed seeds", "errors (rc 2)", "median 1st violation", "median 1st fresh-rejected", "median wall"
    for (i = 1; i <= m; i++) { s = order[i]
      printf "%-22s %6d/%-2d  %-22s %-12s %21s %24s %12s\n", s, det[s], n,
        (miss[s] == "" ? "-" : substr(miss[s], 2)), (err[s] == "" ? "-" : substr(err[s], 2)),
        secs(median(tv[s])), secs(median(tf[s])), secs(median(wall[s])) }
  }' "$RESULTS" | tee "$OUT/summary.txt"
echo "rows: $RESULTS"
