#!/usr/bin/env bash
# The zoo entry's rates (docs/track-record.md): how often
# scenarios/zoo/client-go-release-on-cancel.toml finds two leaders at once (exit 0
# with `exclusion_violations >=1` met: overlapping holds with both terms alive at
# the apiserver) and how often its twin scenarios/zoo/client-go-step-down.toml
# (no ReleaseOnCancel) PASSes, over seeds 1..N (default 20), one run at a time on
# the process backend. Prints one line per run and the two rates.
#
#   clients/go-leaderelection/rates.sh [N]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$root/target/debug/fencecheck"
n="${1:-20}"
[ -x "$bin" ] || { echo "no $bin: cargo build -p fencecheck first" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for form in release-on-cancel step-down; do
  hits=0
  for seed in $(seq 1 "$n"); do
    out="$work/$form-$seed"
    "$bin" scenario "$root/scenarios/zoo/client-go-$form.toml" --backend process \
      --seed "$seed" --quiet --out "$out" >/dev/null 2>"$work/stderr"
    rc=$?
    line="$(jq -r '[(.expectations | map(select(.met | not) | .name) | join(",")),
      (.checks.exclusion.unexplained_overlaps // 0 | tostring),
      (.checks.exclusion.acquisitions // 0 | tostring),
      (.checks.counter.lost // 0 | tostring), (.inconclusive // "")] | join("|")' \
      "$out/report.json" 2>/dev/null)"
    IFS='|' read -r unmet overlaps acq lost inconclusive <<<"$line"
    case "$form" in
      release-on-cancel) [ "$rc" = 0 ] && [ "${overlaps:-0}" -gt 0 ] && hits=$((hits + 1)) ;;
      step-down) [ "$rc" = 0 ] && hits=$((hits + 1)) ;;
    esac
    echo "$form seed $seed: exit $rc, unmet [$unmet], $overlaps overlaps with both terms alive, $acq acquisitions, $lost lost${inconclusive:+, inconclusive: $inconclusive}"
    rm -rf "$out"
  done
  case "$form" in
    release-on-cancel) echo "client-go-release-on-cancel: two leaders found on $hits/$n seeds" ;;
    step-down) echo "client-go-step-down: PASS on $hits/$n seeds" ;;
  esac
done
