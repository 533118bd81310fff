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
n="${1:-20}"
detail='"\(.findings.liveness.stuck_waits // 0) stuck waits"'
"$root/ci/rates.sh" "$root/scenarios/zoo/kazoo-282.toml" "$n" \
  '$rc == 1 and $unmet == "stuck_waits" and (.findings.liveness.stuck_waits // 0) > 0' \
  "$detail" "FAIL on stuck_waits"
"$root/ci/rates.sh" "$root/scenarios/zoo/kazoo-282-fresh-lock.toml" "$n" '$rc == 0' "$detail" "PASS"
