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
n="${1:-20}"
# Grants told after their lease was revoked, not caught by the client, not told
# after a fault of its own.
late='(.findings.grant_validity as $g | ($g.after_session_end // 0) - ($g.caught_by_client // 0) - ($g.during_client_fault // 0))'
detail='"\('"$late"') late grants of \(.findings.grant_validity.grants // 0)"'
"$root/ci/rates.sh" "$root/scenarios/zoo/etcd-3.4-late-grant.toml" "$n" \
  '$rc == 0 and '"$late"' > 0' "$detail" "late grants found"
"$root/ci/rates.sh" "$root/scenarios/zoo/etcd-3.5-late-grant.toml" "$n" '$rc == 0' "$detail" "PASS"
