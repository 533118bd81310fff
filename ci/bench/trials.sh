#!/usr/bin/env bash
# Interruption trials: start `fencecheck scenario scenarios/pause.toml`, wait a
# random moment (start-up, faults, heal or checks), send SIGINT (a Ctrl-C) or
# SIGKILL to the harness, wait for it to exit, then count what it left behind,
# polling up to 30 s for things still going away:
#   - processes whose command line mentions the trial's run directory (etcd, the
#     storage, workers; any state, stopped ones (T) included);
#   - on docker, containers, networks and volumes labelled fencecheck.run=<the
#     trial's run id> (the id the harness announces before it creates anything).
# Leftovers are counted first, then removed (only the trial's own: the docker
# engine may be shared), so that the next trial starts clean.
#
#   ci/bench/trials.sh --backend process|docker [--runs 20] [--signal int|kill|both]
#                      [--min-delay S] [--max-delay S] [--seed N] [--out DIR]
#
# The delay is drawn from [--min-delay, --max-delay] (default 0..25 s: pause.toml
# runs ~21 s, so most draws land in the workload; --min-delay 20 --max-delay 22
# aims at the wind-down: heal, final reads, checks, report).
# Uses target/release/fencecheck (or $FENCECHECK_BIN). Prints one row per trial
# and a table: backend, signal, runs, runs with leftovers, leftovers.
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
  echo "usage: ci/bench/trials.sh --backend process|docker [--runs N] [--signal int|kill|both] [--min-delay S] [--max-delay S] [--seed N] [--out DIR]" >&2
  exit 2
}
is_int() { [[ "$1" =~ ^[0-9]+$ ]]; }

BACKEND="" RUNS=20 SIGNALS="int kill" MIN_DELAY=0 MAX_DELAY=25 SEED=$$ OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) [ $# -ge 2 ] || usage; BACKEND=$2; shift 2 ;;
    --runs) [ $# -ge 2 ] && is_int "$2" && [ "$2" -gt 0 ] || usage; RUNS=$2; shift 2 ;;
    --signal)
      [ $# -ge 2 ] || usage
      case "$2" in int|kill) SIGNALS=$2 ;; both) SIGNALS="int kill" ;; *) usage ;; esac
      shift 2 ;;
    --min-delay) [ $# -ge 2 ] && is_int "$2" || usage; MIN_DELAY=$2; shift 2 ;;
    --max-delay) [ $# -ge 2 ] && is_int "$2" && [ "$2" -gt 0 ] || usage; MAX_DELAY=$2; shift 2 ;;
    --seed) [ $# -ge 2 ] && is_int "$2" || usage; SEED=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; OUT=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "trials.sh: unknown argument: $1" >&2; usage ;;
  esac
done
case "$BACKEND" in process|docker) ;; *) echo "trials.sh: --backend process or docker is required" >&2; usage ;; esac
[ "$MIN_DELAY" -lt "$MAX_DELAY" ] && [ $((MAX_DELAY - MIN_DELAY)) -le 32 ] \
  || { echo "trials.sh: need --min-delay < --max-delay, at most 32 s apart" >&2; usage; }
BIN="${FENCECHECK_BIN:-target/release/fencecheck}"
[ -x "$BIN" ] || { echo "trials.sh: $BIN missing: cargo build --release -p fencecheck" >&2; exit 2; }
if [ "$BACKEND" = docker ]; then
  docker info >/dev/null 2>&1 || { echo "trials.sh: no docker engine answers" >&2; exit 2; }
fi
OUT="${OUT:-runs/bench-trials-$BACKEND-$(date -u +%Y-%m-%dT%H%M%SZ)}"
mkdir -p "$OUT"
OUT=$(realpath "$OUT")   # absolute: child command lines then carry the full path
RANDOM=$SEED             # the delays are reproducible with --seed
ROWS="$OUT/trials.tsv"
printf 'backend\tsignal\ttrial\tdelay_s\tphase\tprocs_before\texit\tprocesses\tcontainers\tnetworks\tvolumes\tgone_after_s\trun_id\tother_new_run_ids\n' >"$ROWS"
LEFT_DEADLINE=30

# Processes still alive whose command line mentions DIR ("pid:state" each).
procs_of() {
  local dir=$1 pid st
  for pid in $(pgrep -f -- "$dir/" || true); do
    [ "$pid" = "$$" ] && continue
    st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || continue
    [ "$st" = Z ] && continue   # a zombie is already dead (and reaped by init)
    echo "$pid:$st"
  done
}
docker_count() {   # KIND (ps -a | network ls | volume ls) RUN_ID
  local id=$2
  [ -n "$id" ] || { echo 0; return; }
  case "$1" in
    containers) docker ps -aq --filter "label=fencecheck.run=$id" | wc -l ;;
    networks) docker network ls -q --filter "label=fencecheck.run=$id" | wc -l ;;
    volumes) docker volume ls -q --filter "label=fencecheck.run=$id" | wc -l ;;
  esac
}
# Every fencecheck.run label value on the engine (containers, networks, volumes).
docker_run_ids() {
  [ "$BACKEND" = docker ] || return 0
  { docker ps -a --filter label=fencecheck.run --format '{{.Label "fencecheck.run"}}'
    docker network ls --filter label=fencecheck.run --format '{{.Label "fencecheck.run"}}'
    docker volume ls --filter label=fencecheck.run --format '{{.Label "fencecheck.run"}}'
  } 2>/dev/null | sort -u
}
remove_docker_run() {   # RUN_ID: this trial's objects only
  local id=$1
  [ -n "$id" ] || return 0
  docker ps -aq --filter "label=fencecheck.run=$id" | xargs -r docker rm -f >/dev/null 2>&1 || true
  docker network ls -q --filter "label=fencecheck.run=$id" | xargs -r docker network rm >/dev/null 2>&1 || true
  docker volume ls -q --filter "label=fencecheck.run=$id" | xargs -r docker volume rm -f >/dev/null 2>&1 || true
}

# What the harness was doing, from its last progress line.
phase_of() {
  case "$(grep '^· ' "$1" | tail -1)" in
    "") echo "start-up" ;;
    *"workers contending"*) echo "workload" ;;
    *"run over"*) echo "heal" ;;
    *"checking"*) echo "checks" ;;
    *) echo "start-up" ;;
  esac
}

trial() {   # SIGNAL INDEX
  local sig=$1 i=$2 dir log delay_ms pid rc phase run_id t p c n v gone before pre_ids others
  dir="$OUT/$BACKEND-$sig-$(printf %02d "$i")"
  log="$dir.stderr"
  # MIN_DELAY .. MAX_DELAY s in ms steps (two draws: $RANDOM is 15 bits).
  delay_ms=$(( MIN_DELAY * 1000 + (RANDOM * 32768 + RANDOM) % ((MAX_DELAY - MIN_DELAY) * 1000 + 1) ))
  pre_ids=$(docker_run_ids)
  # Not --quiet: the phase lines tell what the harness was doing when signalled,
  # and a docker run announces its run id before it creates anything.
  "$BIN" scenario scenarios/pause.toml --backend "$BACKEND" --out "$dir" >"$dir.stdout" 2>"$log" &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"   # the random moment is the trial
  phase=$(phase_of "$log")
  before=$(procs_of "$dir" | wc -l)   # the matcher sees the run's children (sanity)
  if kill -0 "$pid" 2>/dev/null; then
    case "$sig" in int) kill -INT "$pid" ;; kill) kill -KILL "$pid" ;; esac
  else
    phase="(had exited)"
  fi
  # Wait for the harness to exit, bounded; a harness still there after 30 s is a
  # finding (recorded), then killed so the trial can end.
  t=0
  { while kill -0 "$pid" && [ "$t" -lt 300 ]; do sleep 0.1; t=$((t + 1)); done; } 2>/dev/null
  if kill -0 "$pid" 2>/dev/null; then
    echo "  trial $i: harness $pid still running 30 s after SIG${sig^^}; killing it" >&2
    phase="$phase; HUNG after SIG${sig^^}"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rc=0; { wait "$pid"; } 2>/dev/null || rc=$?
  run_id=""
  # The run id: docker.json (written once the reaper runs, before anything else is
  # created), else the progress line that names it.
  if [ "$BACKEND" = docker ]; then
    [ -f "$dir/docker.json" ] && run_id=$(jq -r '.run_id // empty' "$dir/docker.json" 2>/dev/null || true)
    [ -n "$run_id" ] || run_id=$(grep -o '(run fc[0-9a-f]*' "$log" | head -1 | cut -c6- || true)
  fi
  # Leftovers: poll until none or the deadline; count what is there at the end.
  local start=$SECONDS
  while :; do
    p=$(procs_of "$dir" | wc -l)
    c=$(docker_count containers "$run_id" 2>/dev/null || echo 0)
    n=$(docker_count networks "$run_id" 2>/dev/null || echo 0)
    v=$(docker_count volumes "$run_id" 2>/dev/null || echo 0)
    gone=$((SECONDS - start))
    [ $((p + c + n + v)) -eq 0 ] && break
    if [ "$gone" -ge "$LEFT_DEADLINE" ]; then gone="-"; break; fi
    sleep 0.5
  done
  # Labelled objects of runs that appeared during the trial but are not this
  # trial's (a run id we could not learn, or another user of a shared engine):
  # reported, never removed.
  others=$(comm -13 <(printf '%s\n' "$pre_ids") <(docker_run_ids) | grep -vx -- "${run_id:-none}" | paste -sd, || true)
  [ -n "$others" ] && echo "  trial $i: labelled objects of other run ids appeared: $others" >&2
  if [ "$p" -gt 0 ]; then
    echo "  trial $i: processes left: $(procs_of "$dir" | tr '\n' ' ')" >&2
    ps -o pid,stat,args -p "$(procs_of "$dir" | cut -d: -f1 | paste -sd,)" >"$dir.leftovers" 2>/dev/null || true
    procs_of "$dir" | cut -d: -f1 | xargs -r kill -CONT 2>/dev/null || true
    procs_of "$dir" | cut -d: -f1 | xargs -r kill -KILL 2>/dev/null || true
  fi
  if [ $((c + n + v)) -gt 0 ]; then
    docker ps -a --filter "label=fencecheck.run=$run_id" >"$dir.docker-leftovers" 2>&1 || true
    remove_docker_run "$run_id"
  fi
  printf '%s\t%s\t%d\t%d.%03d\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n' "$BACKEND" "$sig" "$i" \
    $((delay_ms / 1000)) $((delay_ms % 1000)) "${phase:--}" "$before" "$rc" "$p" "$c" "$n" "$v" "$gone" \
    "${run_id:--}" "${others:--}" >>"$ROWS"
  printf '  %-7s SIG%-4s trial %2d  at %6.3f s  (%s, %d processes)  exit %s  left: %d processes, %d containers, %d networks, %d volumes\n' \
    "$BACKEND" "${sig^^}" "$i" "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))" \
    "${phase:--}" "$before" "$rc" "$p" "$c" "$n" "$v"
}

echo "trials: $BACKEND, signals: $SIGNALS, $RUNS runs each, delay $MIN_DELAY..$MAX_DELAY s (seed $SEED) → $OUT"
for sig in $SIGNALS; do
  for i in $(seq 1 "$RUNS"); do trial "$sig" "$i"; done
done

echo
awk -F'\t' 'NR > 1 {
    k = $1 "\t" $2; if (!(k in runs)) order[++m] = k
    runs[k]++; left = $8 + $9 + $10 + $11; total[k] += left; if (left > 0) bad[k]++
    if ($5 ~ /HUNG/) hung[k]++
  }
  END {
    printf "%-8s %-7s %5s %22s %10s %6s\n", "backend", "signal", "runs", "runs with leftovers", "leftovers", "hung"
    for (i = 1; i <= m; i++) { split(order[i], a, "\t")
      printf "%-8s %-7s %5d %22d %10d %6d\n", a[1], "SIG" toupper(a[2]), runs[order[i]], bad[order[i]], total[order[i]], hung[order[i]] }
  }' "$ROWS" | tee "$OUT/summary.txt"
echo "rows: $ROWS"
