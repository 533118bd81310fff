#!/usr/bin/env bash
# The zoo entry's rates (docs/track-record.md): how often etcd-3.4-late-grant.toml
# finds late grants (exit 0 with `late_grants >=1` met: grants told after their
# lease was revoked, not caught by the client, not told after a fault of its own)
# and how often its twin etcd-3.5-late-grant.toml PASSes with none, over seeds
# 1..N (default 20), one run at a time on the process backend. Prints one line per
# run and the two rates.
#
#   scenarios/zoo/etcd-late-grant-rates.sh [N]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$root/target/debug/fencecheck"
n="${1:-20}"
[ -x "$bin" ] || { echo "no $bin: cargo build -p fencecheck first" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for v in 3.4 3.5; do
  hits=0
  total_late=0
  for seed in $(seq 1 "$n"); do
    out="$work/$v-$seed"
    "$bin" scenario "$root/scenarios/zoo/etcd-$v-late-grant.toml" --backend process \
      --seed "$seed" --quiet --out "$out" >/dev/null 2>"$work/stderr"
    rc=$?
    line="$(jq -r '.findings.grant_validity as $g | [
      (.expectations | map(select(.met | not) | .name) | join(",")),
      (($g.after_session_end // 0) - ($g.caught_by_client // 0) - ($g.during_client_fault // 0) | tostring),
      ($g.grants // 0 | tostring), (.inconclusive // "")] | join("|")' "$out/report.json" 2>/dev/null)"
    IFS='|' read -r unmet late grants inconclusive <<<"$line"
    late="${late:-0}"
    total_late=$((total_late + late))
    [ "$rc" = 0 ] && { [ "$v" = 3.5 ] || [ "$late" -gt 0 ]; } && hits=$((hits + 1))
    echo "etcd $v seed $seed: exit $rc, unmet [$unmet], $late late grants of $grants${inconclusive:+, inconclusive: $inconclusive}"
    rm -rf "$out"
  done
  case "$v" in
    3.4) echo "etcd-3.4-late-grant: late grants found on $hits/$n seeds ($total_late in all)" ;;
    3.5) echo "etcd-3.5-late-grant: PASS on $hits/$n seeds" ;;
  esac
done
