#!/usr/bin/env bash
# How often a scenario does what it is meant to, over seeds 1..N: the rates of
# docs/track-record.md. One run at a time on the process backend (the debug
# binary: cargo build -p fencecheck first).
#
#   ci/rates.sh SCENARIO N HIT DETAIL LABEL
#
# HIT is a jq condition on the run's report.json, with `$rc` (the run's exit
# code) and `$unmet` (its unmet expectations' names, comma-joined); DETAIL a jq
# string shown for each run. Prints one line per run, then
# `<scenario>: LABEL on H/N seeds`. A run that is not a hit is kept (its folder
# printed); the others are removed.
set -uo pipefail
[ $# -eq 5 ] || { echo "usage: ci/rates.sh SCENARIO N HIT DETAIL LABEL" >&2; exit 2; }
file="$1" n="$2" hit="$3" detail="$4" label="$5"
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/target/debug/fencecheck"
[ -x "$bin" ] || { echo "no $bin: cargo build -p fencecheck first" >&2; exit 2; }
command -v jq >/dev/null || { echo "no jq: apt-get install jq" >&2; exit 2; }
[ -f "$file" ] || { echo "no scenario $file" >&2; exit 2; }
work="$(mktemp -d)"
kept="$(mktemp -d)"
trap 'rm -rf "$work"; rmdir "$kept" 2>/dev/null' EXIT
name="$(basename "$file" .toml)"
hits=0
for seed in $(seq 1 "$n"); do
  out="$work/$name-$seed"
  "$bin" scenario "$file" --backend process --seed "$seed" --quiet --out "$out" \
    >/dev/null 2>"$work/stderr"
  rc=$?
  # `|`-separated: an empty field (nothing unmet) must stay a field.
  line="$(jq -r --argjson rc "$rc" \
    '(.expectations | map(select(.met | not) | .name) | join(",")) as $unmet
     | [(if ('"$hit"') then "1" else "0" end), $unmet, ('"$detail"'),
        (.inconclusive // "")] | join("|")' "$out/report.json" 2>"$work/jq")"
  [ -n "$line" ] || line="0||no report ($(tail -n 1 "$work/stderr" "$work/jq" | tr '\n' ' '))|"
  IFS='|' read -r h unmet what inconclusive <<<"$line"
  echo "$name seed $seed: exit $rc, unmet [$unmet], $what${inconclusive:+, inconclusive: $inconclusive}"
  if [ "$h" = 1 ]; then
    hits=$((hits + 1))
    rm -rf "$out"
  elif [ -d "$out" ]; then
    mv "$out" "$kept/" && echo "  kept: $kept/$(basename "$out")"
  fi
done
echo "$name: $label on $hits/$n seeds"
