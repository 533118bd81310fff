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
n="${1:-20}"
"$root/ci/rates.sh" "$root/scenarios/clients/tooz-etcd3gw-untold.toml" "$n" \
  '$rc == 1 and $unmet == "untold_holders" and (.findings.liveness.untold_holders // 0) > 0' \
  '"\(.findings.liveness.untold_holders // 0) untold of \(.findings.unsafe_window.holds // 0) holds outliving their session, \(.stats.keepalive_lost // 0) session losses reported"' \
  "FAIL on untold_holders"
"$root/ci/rates.sh" "$root/scenarios/clients/tooz-redis-told.toml" "$n" '$rc == 0' \
  '"\(.findings.liveness.untold_holders // 0) untold, \(.stats.keepalive_lost // 0) session losses reported"' \
  "PASS"
