#!/usr/bin/env bash
# The zoo entry's rates (docs/track-record.md): how often scenarios/zoo/kazoo-282.toml
# FAILs on the liveness expectation alone (stuck_waits the one unmet expectation,
# a worker found waiting >= 10 s on a free lock), and how often its twin
# kazoo-282-fresh-lock.toml PASSes, over seeds 1..N (default 20), one run at a
# time on the process backend. Prints one line per run and the two rates; the run
# directory of every run that missed (no detection, or a twin that did not pass)
# is kept and named.
#
#   clients/kazoo/rates.sh [N]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$root/target/debug/fencecheck"
n="${1:-20}"
[ -x "$bin" ] || { echo "no $bin: cargo build -p fencecheck first" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
kept_dir="$(mktemp -d)"
for form in kept fresh; do
  file="$root/scenarios/zoo/kazoo-282.toml"
  [ "$form" = fresh ] && file="$root/scenarios/zoo/kazoo-282-fresh-lock.toml"
  hits=0
  for seed in $(seq 1 "$n"); do
    out="$work/$form-$seed"
    "$bin" scenario "$file" --backend process --seed "$seed" --quiet --out "$out" \
      >/dev/null 2>"$work/stderr"
    rc=$?
    # `|`-separated: an empty field (nothing unmet) must stay a field.
    line="$(jq -r '[(.expectations | map(select(.met | not) | .name) | join(",")),
      (.findings.liveness.stuck_waits // 0 | tostring), (.inconclusive // "")] | join("|")' \
      "$out/report.json" 2>/dev/null)"
    IFS='|' read -r unmet stuck inconclusive <<<"$line"
    hit=0
    case "$form" in
      kept) [ "$rc" = 1 ] && [ "$unmet" = stuck_waits ] && [ "${stuck:-0}" -gt 0 ] && hit=1 ;;
      fresh) [ "$rc" = 0 ] && hit=1 ;;
    esac
    hits=$((hits + hit))
    echo "$form seed $seed: exit $rc, unmet [$unmet], $stuck stuck waits${inconclusive:+, inconclusive: $inconclusive}"
    if [ "$hit" = 1 ]; then
      rm -rf "$out"
    else
      mv "$out" "$kept_dir/" && echo "  kept: $kept_dir/$(basename "$out")"
    fi
  done
  case "$form" in
    kept) echo "kazoo-282: FAIL on stuck_waits on $hits/$n seeds" ;;
    fresh) echo "kazoo-282-fresh-lock: PASS on $hits/$n seeds" ;;
  esac
done
