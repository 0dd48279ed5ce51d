#!/usr/bin/env bash
# How many series remote write makes a receiver keep (issue 45's budget: at most 600 active and
# at most 1,000 new an hour per host at the default selection), counted by a real
# VictoriaMetrics itself: the recorder as shipped sends to one started here on loopback while
# bench/busy.sh's load runs (250 shells waking twice a second, ~50 short processes a second).
#
#   sudo JITTERSCOPE=target/release/jitterscope bash bench/cardinality.sh   # section on stdout
#
# Environment (all optional):
#   JITTERSCOPE     release binary (default target/release/jitterscope)
#   CARD_OUT        where the Markdown section goes (default stdout)
#   CARD_SECONDS    measured window after a minute of warm-up (default 600)
#   CARD_ARGS       extra `record` arguments (e.g. --remote-write-top 5)
#   CARD_COMPARE    a second binary, measured beside the first under the same load
#   BENCH_KEEP=1    keep the temporary directory
#
# The counts are the engine's: `vm_new_timeseries_created_total` from its own /metrics over the
# window (new series an hour), and the series with a point in the window's last minute
# (`count(count_over_time({__name__!=""}[1m]))`, active). Without root or victoria-metrics it
# prints "SKIPPED: <reason>" and writes a section saying so. Everything it starts is stopped on
# exit, Ctrl-C included.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${CARD_OUT:-/dev/stdout}
WINDOW=${CARD_SECONDS:-600}
WARMUP=60
read -r -a EXTRA <<<"${CARD_ARGS:-}"

say() { printf '[cardinality %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
skip() {
    echo "SKIPPED: bench/cardinality.sh: $1" >&2
    printf '## Series at the receiver\n\nNot measured: %s.\n' "$1" >"$OUT"
    exit 0
}
[ "$(id -u)" -eq 0 ] || skip "needs root (the recorder's tracers, and every process's /proc files)"
command -v victoria-metrics >/dev/null || skip "victoria-metrics is not installed (apt-get install victoria-metrics)"
[ -x "$JITTERSCOPE" ] || skip "no binary at $JITTERSCOPE (cargo build --release)"

TMP=$(mktemp -d /tmp/jitterscope-cardinality.XXXXXX)
PIDS=()
cleanup() {
    local p
    trap - EXIT INT TERM
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ "${BENCH_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_vm() {
    local port dir=$1
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    victoria-metrics -storageDataPath="$dir" -httpListenAddr="127.0.0.1:$port" \
        -retentionPeriod=1d >"$dir.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 50); do curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
    curl -fsS "http://127.0.0.1:$port/health" >/dev/null || { tail -5 "$dir.log" >&2; skip "victoria-metrics did not start"; }
    VM=http://127.0.0.1:$port
}
created() {
    curl -fsS "$1/internal/force_flush" >/dev/null 2>&1 || true
    curl -fsS "$1/metrics" | awk '$1 == "vm_new_timeseries_created_total" {print $2}'
}
query() {
    curl -fsS --get "$1/api/v1/query" --data-urlencode "query=$2" \
        | python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)'
}

# One receiver and one recorder per binary (JITTERSCOPE, and CARD_COMPARE when set: a build to
# compare with, under the same load at the same time).
BINS=("$JITTERSCOPE")
[ -n "${CARD_COMPARE:-}" ] && BINS+=("$CARD_COMPARE")
VMS=()
bash "$HERE/busy.sh" load 2>"$TMP/load.log" &
PIDS+=($!)
for i in "${!BINS[@]}"; do
    start_vm "$TMP/vm$i"
    VMS+=("$VM")
    "${BINS[$i]}" record --dir "$TMP/store$i" --remote-write "$VM/api/v1/write" --host bench \
        --duration "$((WARMUP + WINDOW + 10))s" "${EXTRA[@]}" 2>"$TMP/record$i.log" &
    PIDS+=($!)
done

say "warming up for ${WARMUP}s (load, ${#BINS[@]} recorder(s) sending to ${VMS[*]})"
sleep "$WARMUP"
N0=()
for vm in "${VMS[@]}"; do N0+=("$(created "$vm")"); done
say "measuring for ${WINDOW}s"
sleep "$WINDOW"

{
    printf '## Series at the receiver\n\n'
    printf '`bench/cardinality.sh`: the recorder (`record --remote-write`, default selection, %s)\n' \
        "${EXTRA[*]:-no extra arguments}"
    printf 'sends to a VictoriaMetrics on loopback while bench/busy.sh'"'"'s load runs (250 shells waking\n'
    printf 'twice a second, ~50 short processes a second), %s s after a minute of warm-up. Counted by\n' "$WINDOW"
    printf 'the engine: new series from its own `vm_new_timeseries_created_total`, active ones as the\n'
    printf 'series with a point in the last minute.\n\n'
    printf '| binary | active series (budget ≤ 600) | of them per-process | pids | cgroups | new series an hour (budget ≤ 1,000) | pids over the window | failures said |\n'
    printf '|---|---:|---:|---:|---:|---:|---:|---:|\n'
    for i in "${!BINS[@]}"; do
        vm=${VMS[$i]}
        n1=$(created "$vm")
        active=$(query "$vm" 'count(count_over_time({__name__!=""}[1m]))')
        procs=$(query "$vm" 'count(count_over_time({pid!=""}[1m]))')
        pids=$(query "$vm" 'count(count by (pid) (count_over_time({pid!=""}[1m])))')
        cgroups=$(query "$vm" 'count(count by (cgroup) (count_over_time({cgroup!=""}[1m])))')
        pids_window=$(query "$vm" "count(count by (pid) (count_over_time({pid!=\"\"}[${WINDOW}s])))")
        failed=$(grep -c 'remote write: http' "$TMP/record$i.log" || true)
        new=$(awk -v a="${N0[$i]}" -v b="$n1" 'BEGIN { printf "%.0f", b - a }')
        new_per_h=$(awk -v n="$new" -v w="$WINDOW" 'BEGIN { printf "%.0f", n * 3600 / w }')
        say "${BINS[$i]}: active $active ($procs per-process, $pids pids, $cgroups cgroups); $new new in ${WINDOW}s = $new_per_h an hour"
        printf '| `%s` | %s | %s | %s | %s | %s (%s in %s s) | %s | %s |\n' "${BINS[$i]##*/}" \
            "$active" "$procs" "$pids" "$cgroups" "$new_per_h" "$new" "$WINDOW" "$pids_window" "$failed"
    done
} >"$OUT"
