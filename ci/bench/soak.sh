#!/usr/bin/env bash
# Soak: scenarios/mixed.toml (3 members, every fault kind) for a long run with many
# workers on the process backend, the harness's own memory sampled as it goes.
# Figures, never pass/fail (exit 2 only when the soak could not run or measure):
#   - harness RSS (VmRSS) every --interval seconds → rss.csv; min/max/median, and
#     whether every sample after the first minute is within 20 % of the median;
#   - events per second (history events / run duration);
#   - time from the end of the workload window to the verdict (heal + checks +
#     report), and the checks + report part alone;
#   - report.html render time in headless Chromium (the page's own
#     data-render-ms, as reports/README.md measures it; 3 loads).
#
#   ci/bench/soak.sh [--minutes 30] [--workers 32] [--interval 10] [--out DIR]
#
# Uses target/release/fencecheck (or $FENCECHECK_BIN): build it first with
# `cargo build --release -p fencecheck`.
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
  echo "usage: ci/bench/soak.sh [--minutes N] [--workers N] [--interval SECONDS] [--out DIR]" >&2
  exit 2
}
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }

MINUTES=30 WORKERS=32 INTERVAL=10 OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) [ $# -ge 2 ] && is_int "$2" || usage; MINUTES=$2; shift 2 ;;
    --workers) [ $# -ge 2 ] && is_int "$2" || usage; WORKERS=$2; shift 2 ;;
    --interval) [ $# -ge 2 ] && is_int "$2" || usage; INTERVAL=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; OUT=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "soak.sh: unknown argument: $1" >&2; usage ;;
  esac
done
BIN="${FENCECHECK_BIN:-target/release/fencecheck}"
[ -x "$BIN" ] || { echo "soak.sh: $BIN missing: cargo build --release -p fencecheck" >&2; exit 2; }
for tool in jq python3 chromium; do
  command -v "$tool" >/dev/null || { echo "soak.sh: $tool is needed" >&2; exit 2; }
done
OUT="${OUT:-runs/bench-soak-$(date -u +%Y-%m-%dT%H%M%SZ)}"
[ -e "$OUT" ] && { echo "soak.sh: $OUT already exists" >&2; exit 2; }
mkdir -p "$OUT"
RUN="$OUT/run"

# Every stderr line of the harness with the CLOCK_MONOTONIC time it was read (the
# clock report.json uses), and a last "EOF" line when the harness closes stderr,
# i.e. exits (its children log to files of their own).
stamp() {
  python3 -u -c '
import sys, time
now = lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC)
for line in sys.stdin:
    print(now(), line, end="", flush=True)
print(now(), "EOF", flush=True)'
}

echo "soak: mixed.toml, ${MINUTES} min, ${WORKERS} workers, process backend → $OUT"
"$BIN" scenario scenarios/mixed.toml --duration "${MINUTES}m" --workers "$WORKERS" \
  --backend process --out "$RUN" >"$OUT/verdict.txt" 2> >(stamp >"$OUT/stderr.ts") &
PID=$!
trap 'kill -INT "$PID" 2>/dev/null || true' INT TERM
# The forked shell becomes the harness when it execs: wait for that (bounded), so
# the RSS sampled is the harness's.
for _ in $(seq 1 50); do
  grep -q "scenario" "/proc/$PID/cmdline" 2>/dev/null && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
grep -q "scenario" "/proc/$PID/cmdline" 2>/dev/null \
  || { echo "soak.sh: pid $PID did not become the harness" >&2; kill -INT "$PID" 2>/dev/null || true; exit 2; }

# Sample until the harness exits; bounded by the run length plus 15 minutes for
# start-up, heal, checks and report.
echo "elapsed_s,rss_kb" >"$OUT/rss.csv"
T0=$SECONDS
DEADLINE=$((SECONDS + MINUTES * 60 + 900))
next=0
while kill -0 "$PID" 2>/dev/null; do
  if [ "$SECONDS" -ge "$DEADLINE" ]; then
    echo "soak.sh: harness still running after the deadline; interrupting it" >&2
    kill -INT "$PID" || true
    break
  fi
  el=$((SECONDS - T0))
  if [ "$el" -ge "$next" ]; then
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$PID/status" 2>/dev/null || true)
    [ -n "$rss" ] && echo "$el,$rss" >>"$OUT/rss.csv"
    next=$((next + INTERVAL))
  fi
  sleep 0.5   # the sampling tick, not a readiness wait
done
rc=0
wait "$PID" || rc=$?
trap - INT TERM
# The stamper ends when it reads EOF; wait for its last line (bounded).
for _ in $(seq 1 100); do grep -q ' EOF$' "$OUT/stderr.ts" 2>/dev/null && break; sleep 0.1; done
echo "harness exit code $rc (0 = every expectation met)"
[ -f "$RUN/report.json" ] || { echo "soak.sh: no report.json in $RUN" >&2; cat "$OUT/stderr.ts" >&2; exit 2; }

# --- figures ---------------------------------------------------------------
R="$RUN/report.json"
events=$(jq '.stats.events' "$R")
dur=$(jq '.run.duration_s' "$R")
t_end=$(jq '.run.time_end_ns' "$R")
t_exit=$(awk '$2 == "EOF" {print $1}' "$OUT/stderr.ts")
t_check=$(awk '/checking the recorded history/ {print $1; exit}' "$OUT/stderr.ts")

python3 - "$OUT/rss.csv" "$events" "$dur" "$t_end" "$t_check" "$t_exit" "$INTERVAL" <<'PY' | tee "$OUT/figures.txt"
import csv, statistics, sys
path, events, dur, t_end, t_check, t_exit, interval = sys.argv[1:]
rows = [(int(r["elapsed_s"]), int(r["rss_kb"])) for r in csv.DictReader(open(path))]
after = [kb for s, kb in rows if s >= 60]
allkb = [kb for _, kb in rows]
med = statistics.median(after) if after else float("nan")
lo, hi = (min(after), max(after)) if after else (0, 0)
flat = bool(after) and all(abs(kb - med) <= 0.2 * med for kb in after)
mb = lambda kb: f"{kb/1024:.1f} MB"
print(f"rss samples       {len(rows)} every {interval} s ({len(after)} after the first minute)")
print(f"rss overall       min {mb(min(allkb))}  max {mb(max(allkb))}")
print(f"rss after 1 min   min {mb(lo)}  median {mb(med)}  max {mb(hi)}  "
      f"({(lo/med-1)*100:+.1f} % .. {(hi/med-1)*100:+.1f} % of the median)")
print(f"rss flat within 20 % of the median after the first minute: {'yes' if flat else 'NO'}")
print(f"events            {events} in {float(dur):.0f} s = {int(events)/float(dur):.1f} events/s")
t_end, t_exit = int(t_end), int(t_exit)
print(f"end of run → verdict       {(t_exit - t_end)/1e9:.2f} s (heal, final reads, checks, report)")
if t_check:
    print(f"checks + report            {(t_exit - int(t_check))/1e9:.2f} s")
PY

for i in 1 2 3; do
  start=$(date +%s%N)
  dom=$(timeout 120 chromium --headless --no-sandbox --disable-gpu --window-size=1400,2400 \
        --dump-dom "file://$(realpath "$RUN/report.html")" 2>/dev/null || true)
  wall=$(( ($(date +%s%N) - start) / 1000000 ))
  attr() { grep -o "$1=\"[^\"]*\"" <<<"$dom" | head -1 | cut -d'"' -f2; }
  echo "report.html load $i: rendered=$(attr data-rendered) render-ms=$(attr data-render-ms)" \
       "ops=$(attr data-ops) errors=$(attr data-errors) chromium wall ${wall} ms" | tee -a "$OUT/figures.txt"
done
echo "report.html size $(du -h "$RUN/report.html" | cut -f1)" | tee -a "$OUT/figures.txt"
echo "files: $OUT/{rss.csv,figures.txt,verdict.txt,stderr.ts}, run in $RUN"
