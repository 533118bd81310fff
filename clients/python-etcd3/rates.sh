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
n="${1:-20}"
for form in with checked; do
  hit='$rc == 0'
  label=PASS
  if [ "$form" = with ]; then
    hit='$rc == 1 and $unmet == "exclusion_violations" and (.checks.exclusion.phantom // 0) > 0'
    label="FAIL on exclusion_violations"
  fi
  "$root/ci/rates.sh" "$root/scenarios/clients/python-etcd3-$form.toml" "$n" "$hit" \
    '"\(.checks.exclusion.phantom // 0) phantom of \(.checks.exclusion.acquisitions // 0) acquisitions"' \
    "$label"
done
