#!/usr/bin/env bash
# Read-back cost of the views: what the web UI's first screen and a selection cost `serve`
# over an hour of a 500-process host, and what `replay --json-once` costs at one point of it.
# No target is set for these (issues 8 and 9 give none); the numbers are reported.
#
#   sudo JITTERSCOPE=target/release/jitterscope SYNTH_STORE=target/release/examples/synth_store \
#       bash bench/views.sh
#
#   VIEWS_OUT       where the markdown section goes (default stdout)
#   VIEWS_SECONDS   length of the source recording (default 30)
#   VIEWS_RUNS      runs per query, median reported (default 5)
#
# Without root it prints "SKIPPED: <reason>" and writes a section saying so. The sleepers, the
# recorder, the server and the temporary stores are removed on exit, Ctrl-C included.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/proc.sh"
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${VIEWS_OUT:-/dev/stdout}
SECONDS_REC=${VIEWS_SECONDS:-30}
RUNS=${VIEWS_RUNS:-5}

say() { printf '[views bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
section() { cat >"$OUT"; }

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED: needs root (the recorder reads every process)" >&2
    printf '## Views read-back\n\nSKIPPED: not run as root.\n' | section
    exit 0
fi

TMP=$(mktemp -d /var/tmp/jitterscope-views-bench.XXXXXX)
SLEEPERS=()
PIDS=()
cleanup() {
    ((${#PIDS[@]})) && kill "${PIDS[@]}" 2>/dev/null || true
    ((${#SLEEPERS[@]})) && kill "${SLEEPERS[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${SYNTH_STORE:-}" ]; then
    SYNTH=$SYNTH_STORE
else
    (cd "$REPO" && cargo build --release -q -p jitterscope-diagnose --example synth_store)
    SYNTH=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/synth_store
    case $SYNTH in /*) ;; *) SYNTH=$REPO/$SYNTH ;; esac
fi

have=$(nprocs)
extra=$((500 > have ? 500 - have : 0))
for _ in $(seq "$extra"); do
    sleep 3600 &
    SLEEPERS+=($!)
done
procs=$(nprocs)
say "recording ${SECONDS_REC} s with $procs processes"
"$JITTERSCOPE" record --dir "$TMP/src" --duration "${SECONDS_REC}s" 2>"$TMP/record.log"
kill "${SLEEPERS[@]}" 2>/dev/null || true
wait 2>/dev/null || true
SLEEPERS=()
say "synthesizing a 1 h store"
"$SYNTH" "$TMP/src" "$TMP/h1" 1 >"$TMP/h1.out"
kv() { grep "^$2=" "$1" | cut -d= -f2; }
from=$(( $(kv "$TMP/h1.out" first_ts_ns) / 1000000000 - 1 ))
to=$(( $(kv "$TMP/h1.out" last_ts_ns) / 1000000000 + 1 ))
mid=$(( (from + to) / 2 ))

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$JITTERSCOPE" serve --dir "$TMP/h1" --listen "127.0.0.1:$port" --metrics-max-age 0 2>"$TMP/serve.log" &
PIDS+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/api/v1/range" >/dev/null && break; sleep 0.1; done

# Median seconds of $RUNS fetches of a URL (the first, cold, run is not counted).
fetch() {
    curl -sf -o /dev/null "$1"
    for _ in $(seq "$RUNS"); do curl -sf -o /dev/null -w '%{time_total}\n' "$1"; done |
        sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'
}
base="http://127.0.0.1:$port"
# The UI's charts, as app.js asks for them on a 1200-pixel-wide chart.
panels=("cpu.sys_pct,cpu.usr_pct" "runqlat.p99_usec" "cgroup.*.cpu.throttled_pct&top=6"
    "reclaim.stalls_per_s,reclaim.allocstall_per_s" "irq.tlb_per_s"
    "psi.cpu.some_pct,psi.memory.some_pct,psi.io.some_pct" "proc.*.rss_bytes&top=6")
total=0
rows=""
for p in "${panels[@]}"; do
    t=$(fetch "$base/api/v1/series?select=$p&from=$from&to=$to&points=600")
    total=$(echo "$total + $t" | bc -l)
    rows+="| \`series?select=${p}\` over 1 h | ${t} s |"$'\n'
done
# The same seven as the page asks for them: all at once. Wall time until the last answers.
par=$( { for _ in $(seq "$RUNS"); do
    s=$(date +%s.%N)
    for p in "${panels[@]}"; do
        curl -sf -o /dev/null "$base/api/v1/series?select=$p&from=$from&to=$to&points=600" &
    done
    wait
    e=$(date +%s.%N)
    echo "$e - $s" | bc -l; done; } | sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}')
ev=$(fetch "$base/api/v1/events?from=$from&to=$to")
fi1=$(fetch "$base/api/v1/findings?from=$((mid - 30))&to=$((mid + 30))")
fl1=$(fetch "$base/api/v1/flame?from=$((mid - 30))&to=$((mid + 30))")
met=$(fetch "$base/metrics")
lines=$(curl -sf "$base/metrics" | wc -l)
rep=$( { for _ in $(seq "$RUNS"); do
    s=$(date +%s.%N); "$JITTERSCOPE" replay --dir "$TMP/h1" --at "$mid" --json-once >/dev/null; e=$(date +%s.%N)
    echo "$e - $s" | bc -l; done; } | sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}')

section <<EOF2
## Views read-back

A ${SECONDS_REC} s recording of this host with ${procs} processes (tracers and the stack sampler
on), cycled into a 1 h store by \`synth_store\`, served by \`jitterscope serve\`. Median of ${RUNS}
requests after one warm-up, \`curl\` total time over loopback. No target is set for these.

| request | time |
|---|---|
${rows}| all seven charts, one after another (sum) | $(printf '%.3f' "$total") s |
| all seven charts, asked at once as the page does (wall) | ${par} s |
| \`events\` over 1 h | ${ev} s |
| \`findings\` of a 1 min selection (10 min baseline) | ${fi1} s |
| \`flame\` of a 1 min selection | ${fl1} s |
| \`/metrics\` (${lines} lines, top 20 processes) | ${met} s |
| \`replay --at … --json-once\` (one screen, its episodes and findings) | ${rep} s |
EOF2
say "done: first screen ${par} s (sequential $(printf '%.3f' "$total") s), findings ${fi1} s, flame ${fl1} s, metrics ${met} s, replay ${rep} s"
