#!/usr/bin/env bash
# How fast diagnosis reads history: `jitterscope diagnose` over 1 h of 1 s samples of a host
# with 500 processes (target < 2 s) and `jitterscope events` over 24 h (target < 5 s). The
# stores are synthesized (crates/diagnose/examples/synth_store) from a real 60 s recording made
# while DIAG_PROCS extra processes sleep. Writes a Markdown section for docs/BENCHMARKS.md
# (bench/run.sh calls this and embeds it). Alone:
#
#   sudo JITTERSCOPE=target/release/jitterscope SYNTH_STORE=target/release/examples/synth_store \
#       bash bench/diagnose.sh
#
# Environment (all optional):
#   JITTERSCOPE       release binary (default target/release/jitterscope)
#   SYNTH_STORE       synth_store example binary (default: built with cargo)
#   DIAGNOSE_OUT      where to write the Markdown section (default stdout)
#   DIAGNOSE_TARGETS  where to write rows for the report's "Targets" table (default: nowhere)
#   DIAG_PROCS        extra sleeping processes while recording (default: up to 500 in all)
#   DIAG_SECONDS      length of the source recording (default 60)
#   DIAG_RUNS         timed runs of each query (default 5)
#   BENCH_KEEP=1      keep the temporary directory
#
# Without root it prints "SKIPPED: <reason>", writes a section saying so and exits 0. The
# sleepers, the recorder and the temporary stores are removed on exit, Ctrl-C included.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/proc.sh"
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${DIAGNOSE_OUT:-/dev/stdout}
TARGETS=${DIAGNOSE_TARGETS:-/dev/null}
SECONDS_REC=${DIAG_SECONDS:-60}
RUNS=${DIAG_RUNS:-5}

say() { printf '[diagnose bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
section() { cat >"$OUT"; }

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED: needs root (the recorder reads every process)" >&2
    printf '## Diagnosis read-back\n\nSKIPPED: not run as root.\n' | section
    exit 0
fi

TMP=$(mktemp -d /var/tmp/jitterscope-diag-bench.XXXXXX)
SLEEPERS=()
REC=
cleanup() {
    [ -n "$REC" ] && kill "$REC" 2>/dev/null || true
    ((${#SLEEPERS[@]})) && kill "${SLEEPERS[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    [ "${BENCH_KEEP:-0}" = 1 ] && say "kept $TMP" || rm -rf "$TMP"
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
extra=${DIAG_PROCS:-$((500 > have ? 500 - have : 0))}
say "starting $extra sleeping processes ($have running)"
for _ in $(seq "$extra"); do
    sleep 3600 &
    SLEEPERS+=($!)
done
procs=$(nprocs)
say "recording ${SECONDS_REC} s with $procs processes"
"$JITTERSCOPE" record --dir "$TMP/src" --duration "${SECONDS_REC}s" 2>"$TMP/record.log" &
REC=$!
wait "$REC" || true
REC=
kill "${SLEEPERS[@]}" 2>/dev/null || true
wait 2>/dev/null || true
SLEEPERS=()

say "synthesizing 1 h and 24 h stores"
"$SYNTH" "$TMP/src" "$TMP/h1" 1 >"$TMP/h1.out"
"$SYNTH" "$TMP/src" "$TMP/h24" 24 >"$TMP/h24.out"
kv() { grep "^$2=" "$1" | cut -d= -f2; }
h1_from=$(( $(kv "$TMP/h1.out" first_ts_ns) / 1000000000 - 1 ))
h1_to=$(( $(kv "$TMP/h1.out" last_ts_ns) / 1000000000 + 1 ))
h24_from=$(( $(kv "$TMP/h24.out" first_ts_ns) / 1000000000 - 1 ))
h24_to=$(( $(kv "$TMP/h24.out" last_ts_ns) / 1000000000 + 1 ))

# Median wall time of $RUNS runs of a command, in seconds.
timed() {
    local out=$1; shift
    local t=()
    for _ in $(seq "$RUNS"); do
        local s e
        s=$(date +%s.%N)
        "$@" >"$out"
        e=$(date +%s.%N)
        t+=("$(echo "$e - $s" | bc -l)")
    done
    printf '%s\n' "${t[@]}" | sort -g | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}'
}
say "timing diagnose over 1 h ($RUNS runs)"
diag=$(timed "$TMP/diag.json" "$JITTERSCOPE" diagnose --dir "$TMP/h1" --from "$h1_from" --to "$h1_to" --json)
say "timing events over 24 h ($RUNS runs)"
ev=$(timed "$TMP/events.json" "$JITTERSCOPE" events --dir "$TMP/h24" --from "$h24_from" --to "$h24_to" --json)
nproc_rec=$(python3 -c "import json;print(json.load(open('$TMP/diag.json'))['samples'])")
findings=$(python3 -c "import json;print(len(json.load(open('$TMP/diag.json'))['findings']))")
events=$(python3 -c "import json;print(len(json.load(open('$TMP/events.json'))))")
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v < t) ? "met" : "missed" }'; }

printf '| `diagnose` over 1 h with %s processes < 2 s | %s s | **%s** |\n' "$procs" "$diag" "$(verdict "$diag" 2)" >>"$TARGETS"
printf '| `events` over 24 h < 5 s | %s s | **%s** |\n' "$ev" "$(verdict "$ev" 5)" >>"$TARGETS"
section <<EOF2
## Diagnosis read-back

A ${SECONDS_REC} s recording of this host with ${procs} processes (${extra} extra sleepers), every
tracer and the stack sampler on, cycled into a 1 h and a 24 h store by \`synth_store\`. Median of
${RUNS} runs, wall time, warm page cache.

| query | samples | result | time | target |
|---|---|---|---|---|
| \`diagnose --from … --to … --json\` over 1 h | ${nproc_rec} | ${findings} findings | ${diag} s | < 2 s ($(verdict "$diag" 2)) |
| \`events --from … --to … --json\` over 24 h | 86400 | ${events} episodes | ${ev} s | < 5 s ($(verdict "$ev" 5)) |

The synthesized stores repeat the same minute, so the number of findings and episodes says
nothing about the rules; the time is what is measured here.
EOF2
say "done: diagnose ${diag} s, events ${ev} s"
