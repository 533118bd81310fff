#!/usr/bin/env bash
# The zoo entry's rates (docs/track-record.md): how often tooz-etcd3gw-untold.toml
# FAILs on the untold-holder finding itself (`untold_holders` the one unmet
# expectation, untold holders found), and how often its twin tooz-redis-told.toml
# PASSes, over seeds 1..N (default 20), one run at a time on the process backend.
# Prints one line per run and the two rates.
#
#   clients/tooz/rates.sh [N]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$root/target/debug/fencecheck"
n="${1:-20}"
[ -x "$bin" ] || { echo "no $bin: cargo build -p fencecheck first" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for scenario in tooz-etcd3gw-untold tooz-redis-told; do
  hits=0
  for seed in $(seq 1 "$n"); do
    out="$work/$scenario-$seed"
    "$bin" scenario "$root/scenarios/clients/$scenario.toml" --backend process \
      --seed "$seed" --quiet --out "$out" >/dev/null 2>"$work/stderr"
    rc=$?
    # `|`-separated: an empty field (nothing unmet) must stay a field.
    line="$(jq -r '[(.expectations | map(select(.met | not) | .name) | join(",")),
      (.findings.liveness.untold_holders // 0 | tostring),
      (.findings.unsafe_window.holds // 0 | tostring),
      (.stats.keepalive_lost // 0 | tostring),
      (.inconclusive // "")] | join("|")' "$out/report.json" 2>/dev/null)"
    IFS='|' read -r unmet untold unsafe lost inconclusive <<<"$line"
    case "$scenario" in
      tooz-etcd3gw-untold) [ "$rc" = 1 ] && [ "$unmet" = untold_holders ] && [ "${untold:-0}" -gt 0 ] && hits=$((hits + 1)) ;;
      tooz-redis-told) [ "$rc" = 0 ] && hits=$((hits + 1)) ;;
    esac
    echo "$scenario seed $seed: exit $rc, unmet [$unmet], $untold untold of $unsafe holds outliving their session, $lost session losses reported${inconclusive:+, inconclusive: $inconclusive}"
    rm -rf "$out"
  done
  case "$scenario" in
    tooz-etcd3gw-untold) echo "tooz-etcd3gw-untold: FAIL on untold_holders on $hits/$n seeds" ;;
    tooz-redis-told) echo "tooz-redis-told: PASS on $hits/$n seeds" ;;
  esac
done
