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
n="${1:-20}"
detail='"\(.checks.exclusion.unexplained_overlaps // 0) overlaps with both terms alive, \(.checks.exclusion.acquisitions // 0) acquisitions, \(.checks.counter.lost // 0) lost"'
"$root/ci/rates.sh" "$root/scenarios/zoo/client-go-release-on-cancel.toml" "$n" \
  '$rc == 0 and (.checks.exclusion.unexplained_overlaps // 0) > 0' "$detail" "two leaders found"
"$root/ci/rates.sh" "$root/scenarios/zoo/client-go-step-down.toml" "$n" '$rc == 0' "$detail" "PASS"
