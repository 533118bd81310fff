#!/usr/bin/env bash
# The zoo entry's rates (docs/track-record.md): how often python-etcd3-with.toml
# FAILs on the exclusion check itself (exclusion_violations the one unmet
# expectation, phantom grants found), and how often its twin
# python-etcd3-checked.toml PASSes, over seeds 1..N (default 20), one run at a
# time on the process backend. Prints one line per run and the two rates.
#
#   clients/python-etcd3/rates.sh [N]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$root/target/debug/fencecheck"
n="${1:-20}"
[ -x "$bin" ] || { echo "no $bin: cargo build -p fencecheck first" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for form in with checked; do
  hits=0
  for seed in $(seq 1 "$n"); do
    out="$work/$form-$seed"
    "$bin" scenario "$root/scenarios/clients/python-etcd3-$form.toml" --backend process \
      --seed "$seed" --quiet --out "$out" >/dev/null 2>"$work/stderr"
    rc=$?
    # `|`-separated: an empty field (nothing unmet) must stay a field, which
    # whitespace separators (tabs) would fold away.
    line="$(jq -r '[(.expectations | map(select(.met | not) | .name) | join(",")),
      (.checks.exclusion.phantom // 0 | tostring), (.checks.exclusion.acquisitions // 0 | tostring),
      (.inconclusive // "")] | join("|")' "$out/report.json" 2>/dev/null)"
    IFS='|' read -r unmet phantom acq inconclusive <<<"$line"
    case "$form" in
      with) [ "$rc" = 1 ] && [ "$unmet" = exclusion_violations ] && [ "${phantom:-0}" -gt 0 ] && hits=$((hits + 1)) ;;
      checked) [ "$rc" = 0 ] && hits=$((hits + 1)) ;;
    esac
    echo "$form seed $seed: exit $rc, unmet [$unmet], $phantom phantom of $acq acquisitions${inconclusive:+, inconclusive: $inconclusive}"
    rm -rf "$out"
  done
  case "$form" in
    with) echo "python-etcd3-with: FAIL on exclusion_violations on $hits/$n seeds" ;;
    checked) echo "python-etcd3-checked: PASS on $hits/$n seeds" ;;
  esac
done
