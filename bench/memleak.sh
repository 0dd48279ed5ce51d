#!/usr/bin/env bash
# `jitterscope memleak`: string-census throughput (MiB/s of scanned memory, target >= 500) and
# the slowdown of the target while it is scanned (target <= 5%). Writes a Markdown section for
# docs/BENCHMARKS.md (bench/run.sh calls this and embeds it). Alone:
#
#   sudo JITTERSCOPE=target/release/jitterscope bash bench/memleak.sh
#
# The target is a python3 process holding MEMLEAK_MIB (default 512) MiB of text-like records in
# its heap, that meanwhile runs a worst case for a reader of /proc/<pid>/mem: a loop that maps
# and unmaps 1 MiB buffers (each one takes the mmap lock for writing, the lock a census read
# holds for reading), reporting how many it did per 100 ms. Its rate during the census is
# compared with its rate in the seconds before. Environment (optional):
#   JITTERSCOPE      release binary (default target/release/jitterscope)
#   MEMLEAK_OUT      where to write the Markdown section (default stdout)
#   MEMLEAK_TARGETS  where to write rows for the report's "Targets" table (default: nowhere)
#   MEMLEAK_MIB      MiB of records in the target (default 512)
#   MEMLEAK_RUNS     censuses timed (default 3)
# Without root or python3 it says "SKIPPED: <reason>", writes a section saying so and exits 0.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${MEMLEAK_OUT:-/dev/stdout}
TARGETS=${MEMLEAK_TARGETS:-/dev/null}
MIB=${MEMLEAK_MIB:-512}
RUNS=${MEMLEAK_RUNS:-3}
say() { printf '[memleak bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
skip() {
    echo "SKIPPED: $1" >&2
    printf '## memleak: census speed and target slowdown\n\nSKIPPED: %s.\n' "$1" >"$OUT"
    exit 0
}
[ "$(id -u)" = 0 ] || skip "needs root (reads another process's memory)"
command -v python3 >/dev/null || skip "python3 is not installed"

TMP=$(mktemp -d /var/tmp/jitterscope-memleak-bench.XXXXXX)
TARGET=
cleanup() {
    [ -n "$TARGET" ] && kill "$TARGET" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "starting a python3 target with $MIB MiB of records"
python3 -u -c "
import mmap, time, sys
n = $MIB * 1024 * 1024 // 128
keep = [b'jitterscope.bench.session{id=%d,user=u%d,path=/api/v1/items}' % (i, i % 977) + bytes(40) for i in range(n)]
print('ready', flush=True)
while True:
    t = time.monotonic(); k = 0
    while time.monotonic() - t < 0.1:
        m = mmap.mmap(-1, 1 << 20); m[0] = 1; m[-1] = 1; m.close(); k += 1
    print('%.3f %d' % (time.time(), k), flush=True)
" >"$TMP/target.log" &
TARGET=$!
for _ in $(seq 600); do grep -q ready "$TMP/target.log" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$TMP/target.log" || skip "the python3 target did not start"
sleep 3

rates=()
slow=()
for r in $(seq "$RUNS"); do
    s=$(date +%s.%N)
    "$JITTERSCOPE" memleak --pid "$TARGET" --snapshot "$TMP/snap.json" --budget 4GiB >/dev/null
    e=$(date +%s.%N)
    # The census speed as memleak measured it (the second, full reading of a 2-reading run).
    "$JITTERSCOPE" memleak --pid "$TARGET" --compare "$TMP/snap.json" --budget 4GiB --json >"$TMP/r.json"
    rates+=("$(python3 -c "import json;print('%.0f' % json.load(open('$TMP/r.json'))['census_mib_per_s'])")")
    bytes=$(python3 -c "import json;print(json.load(open('$TMP/r.json'))['census_bytes'])")
    # Target rate in the 3 s before the snapshot vs during it.
    slow+=("$(awk -v s="$s" -v e="$e" '
        NR > 1 && $1 >= s - 3 && $1 < s { b += $2; nb++ }
        NR > 1 && $1 >= s && $1 <= e { d += $2; nd++ }
        END { if (nb && nd) printf "%.1f", 100 * (1 - (d / nd) / (b / nb)); else print "n/a" }' "$TMP/target.log")")
    say "run $r: census ${rates[-1]} MiB/s over $((bytes / 1048576)) MiB, target slowdown ${slow[-1]} %"
    sleep 3
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
RATE=$(med "${rates[@]}")
SLOW=$(med "${slow[@]}")
verdict() { awk -v v="$1" -v t="$2" -v dir="$3" 'BEGIN { if (v == "n/a") print "n/a"; else if ((dir == "ge" && v >= t) || (dir == "le" && v <= t)) print "met"; else print "missed" }'; }
printf '| `memleak` string census ≥ 500 MiB/s | %s MiB/s | **%s** |\n' "$RATE" "$(verdict "$RATE" 500 ge)" >>"$TARGETS"
printf '| `memleak` target slowdown during a scan ≤ 5 %% | %s %% | **%s** |\n' "$SLOW" "$(verdict "$SLOW" 5 le)" >>"$TARGETS"
cat >"$OUT" <<EOF2
## memleak: census speed and target slowdown

A python3 target holding ${MIB} MiB of text-like records, running a loop that maps and unmaps
1 MiB buffers meanwhile (each takes its mmap lock for writing, the lock a read of
/proc/<pid>/mem holds for reading). \`memleak --snapshot\` reads it whole, ${RUNS} times; the
census speed is what \`memleak\` measured, the slowdown is the target's mmap/munmap rate during
the snapshot against the 3 s before. Median of ${RUNS} runs.

| census speed | target slowdown during the scan | runs (MiB/s; slowdown %) |
|---|---|---|
| ${RATE} MiB/s | ${SLOW} % | ${rates[*]}; ${slow[*]} |
EOF2
say "done: census ${RATE} MiB/s, slowdown ${SLOW} %"
