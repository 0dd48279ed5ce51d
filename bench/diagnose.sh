#!/usr/bin/env bash
# How fast diagnosis reads history at production scale. A real 60 s recording of this host
# with 500 processes in 50 cgroups (sleepers, one of them throttled for 10 s in each minute:
# an episode a minute, more than a busy host has) is cycled into a 1 h and a 24 h store
# (crates/diagnose/examples/synth_store). Timed: `jitterscope diagnose` over 1 h (target
# < 2 s) and over a 10-minute window in the middle of the 24 h store (target < 1 s, issue 46),
# `jitterscope events` over the 24 h (target < 2 s), and the largest resident memory of each
# (target < 256 MiB). Writes a Markdown section for docs/BENCHMARKS.md (bench/run.sh calls
# this and embeds it). Alone:
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
#   DIAG_CGROUPS      cgroups the sleepers are spread over (default 50)
#   DIAG_SECONDS      length of the source recording (default 60)
#   DIAG_RUNS         timed runs of each query (default 5)
#   BENCH_KEEP=1      keep the temporary directory
#
# Without root it prints "SKIPPED: <reason>", writes a section saying so and exits 0. The
# sleepers, the cgroups, the recorder and the temporary stores are removed on exit, Ctrl-C
# included.
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
NCG=${DIAG_CGROUPS:-50}

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
CGDIRS=()
cleanup() {
    [ -n "$REC" ] && kill "$REC" 2>/dev/null || true
    ((${#SLEEPERS[@]})) && kill "${SLEEPERS[@]}" 2>/dev/null || true
    [ -n "${BURST:-}" ] && kill "$BURST" 2>/dev/null || true
    wait 2>/dev/null || true
    # Children first: a cgroup with a live task or a child cgroup cannot be removed.
    local i
    for ((i = ${#CGDIRS[@]} - 1; i >= 0; i--)); do
        rmdir "${CGDIRS[$i]}" 2>/dev/null || true
    done
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

# The cgroup hierarchies to spread the sleepers over: v1 cpu and memory where mounted (as
# on this machine), else the v2 root.
HIER=()
for h in /sys/fs/cgroup/cpu /sys/fs/cgroup/memory; do
    [ -e "$h/cgroup.procs" ] && HIER+=("$h")
done
((${#HIER[@]})) || HIER=(/sys/fs/cgroup)
for h in "${HIER[@]}"; do
    mkdir -p "$h/jitterscope-bench"
    CGDIRS+=("$h/jitterscope-bench")
    for i in $(seq "$NCG"); do
        mkdir -p "$h/jitterscope-bench/svc-$i"
        CGDIRS+=("$h/jitterscope-bench/svc-$i")
    done
done
# The throttled one: 10 ms per 100 ms.
q=/sys/fs/cgroup/cpu/jitterscope-bench/svc-1
if [ -e "$q/cpu.cfs_quota_us" ]; then
    echo 10000 >"$q/cpu.cfs_quota_us"
elif [ -e /sys/fs/cgroup/jitterscope-bench/svc-1/cpu.max ]; then
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    echo +cpu >/sys/fs/cgroup/jitterscope-bench/cgroup.subtree_control 2>/dev/null || true
    q=/sys/fs/cgroup/jitterscope-bench/svc-1
    echo "10000 100000" >"$q/cpu.max" 2>/dev/null || true
fi
join() { local h; for h in "${HIER[@]}"; do echo "$2" >"$h/jitterscope-bench/svc-$1/cgroup.procs"; done; }

have=$(nprocs)
extra=${DIAG_PROCS:-$((500 > have ? 500 - have : 0))}
say "starting $extra sleeping processes in $NCG cgroups ($have running)"
n=0
for _ in $(seq "$extra"); do
    sleep 3600 &
    SLEEPERS+=($!)
    join $((n % NCG + 1)) $!
    n=$((n + 1))
done
procs=$(nprocs)
say "recording ${SECONDS_REC} s with $procs processes"
"$JITTERSCOPE" record --dir "$TMP/src" --duration "${SECONDS_REC}s" 2>"$TMP/record.log" &
REC=$!
# An incident in each minute the store repeats: 10 s of a busy loop in the throttled cgroup.
sleep 20
sh -c 'sleep 0.1; exec timeout 10 sh -c "while :; do :; done"' &
BURST=$!
join 1 "$BURST"
wait "$BURST" 2>/dev/null || true
BURST=
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
# Largest resident memory (MiB) of one run of a command.
peak() {
    local out=$1; shift
    /usr/bin/time -f %M -o "$TMP/time.txt" "$@" >"$out"
    awk '{printf "%.0f", $1 / 1024}' "$TMP/time.txt"
}
# A 10-minute window in the middle of the day.
m_from=$(( (h24_from + h24_to) / 2 ))
m_to=$((m_from + 600))
say "timing diagnose over 1 h ($RUNS runs)"
diag=$(timed "$TMP/diag.json" "$JITTERSCOPE" diagnose --dir "$TMP/h1" --from "$h1_from" --to "$h1_to" --json)
diag_rss=$(peak "$TMP/diag.json" "$JITTERSCOPE" diagnose --dir "$TMP/h1" --from "$h1_from" --to "$h1_to" --json)
say "timing diagnose over 10 minutes of the 24 h store ($RUNS runs)"
diag10=$(timed "$TMP/diag10.json" "$JITTERSCOPE" diagnose --dir "$TMP/h24" --from "$m_from" --to "$m_to" --json)
diag10_rss=$(peak "$TMP/diag10.json" "$JITTERSCOPE" diagnose --dir "$TMP/h24" --from "$m_from" --to "$m_to" --json)
say "timing events over 24 h ($RUNS runs)"
ev=$(timed "$TMP/events.json" "$JITTERSCOPE" events --dir "$TMP/h24" --from "$h24_from" --to "$h24_to" --json)
ev_rss=$(peak "$TMP/events.json" "$JITTERSCOPE" events --dir "$TMP/h24" --from "$h24_from" --to "$h24_to" --json)
nproc_rec=$(python3 -c "import json;print(json.load(open('$TMP/diag.json'))['samples'])")
findings=$(python3 -c "import json;print(len(json.load(open('$TMP/diag.json'))['findings']))")
findings10=$(python3 -c "import json;print(len(json.load(open('$TMP/diag10.json'))['findings']))")
events=$(python3 -c "import json;print(len(json.load(open('$TMP/events.json'))))")
ncg_rec=$("$JITTERSCOPE" dump --dir "$TMP/src" --select 'cgroup.*.memory.usage_bytes' --format csv 2>/dev/null \
    | cut -d, -f2 | grep 'jitterscope-bench/svc-' | sort -u | wc -l || true)
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v < t) ? "met" : "missed" }'; }
worst_rss=$(printf '%s\n' "$diag_rss" "$diag10_rss" "$ev_rss" | sort -n | tail -1)

printf '| `diagnose` over 1 h with %s processes < 2 s | %s s | **%s** |\n' "$procs" "$diag" "$(verdict "$diag" 2)" >>"$TARGETS"
printf '| `diagnose` of 10 minutes of a 24 h store (%s processes, %s cgroups) < 1 s | %s s | **%s** |\n' "$procs" "$NCG" "$diag10" "$(verdict "$diag10" 1)" >>"$TARGETS"
printf '| `events` over 24 h < 2 s | %s s | **%s** |\n' "$ev" "$(verdict "$ev" 2)" >>"$TARGETS"
printf '| reader RSS (diagnose, events) < 256 MiB | %s MiB | **%s** |\n' "$worst_rss" "$(verdict "$worst_rss" 256)" >>"$TARGETS"
section <<EOF2
## Diagnosis read-back

A ${SECONDS_REC} s recording of this host with ${procs} processes (${extra} extra sleepers spread
over ${NCG} cgroups; ${ncg_rec} of them in the recording's memory series), one cgroup throttled
for 10 s of the minute, every tracer and the stack sampler on, cycled into a 1 h and a 24 h
store by \`synth_store\`. Median of ${RUNS} runs, wall time, warm page cache; peak RSS of one
run (\`/usr/bin/time -f %M\`).

| query | samples | result | time | peak RSS | target |
|---|---|---|---|---|---|
| \`diagnose --from … --to … --json\` over 1 h | ${nproc_rec} | ${findings} findings | ${diag} s | ${diag_rss} MiB | < 2 s ($(verdict "$diag" 2)) |
| \`diagnose\` over 10 minutes in the middle of the 24 h store | 600 | ${findings10} findings | ${diag10} s | ${diag10_rss} MiB | < 1 s ($(verdict "$diag10" 1)) |
| \`events --from … --to … --json\` over 24 h | 86400 | ${events} episodes | ${ev} s | ${ev_rss} MiB | < 2 s ($(verdict "$ev" 2)) |

The synthesized stores repeat the same minute, so the number of findings and episodes says
nothing about the rules (one throttling episode a minute is far more than a busy host has,
which makes \`events\` slower, not faster); the time and memory are what is measured here.
EOF2
say "done: diagnose ${diag} s (1 h), ${diag10} s (10 min of 24 h), events ${ev} s; peak RSS ${worst_rss} MiB"
