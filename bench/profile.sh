#!/usr/bin/env bash
# Cost of jitterscope's always-on stack sampler against `perf record`, side by side in one run:
# the CPU time and the bytes written of `jitterscope record --profile-hz 99` (user stacks copied
# and unwound with .eh_frame, the default) and of the same with `--profile-stack 0` (frame
# pointers only) against the same recorder with `--profile-hz 0` (the differences are the
# sampler alone), against `perf record -F 99 -g -a` (the same sampling: cpu-clock at 99 Hz per
# CPU with kernel and user call chains, all processes) and against
# `perf record -F 99 --call-graph dwarf -a` (the peer that gives the same whole user stacks),
# under a mixed load on every CPU; the sampler's health as its own
# store reports it; and how fast `jitterscope flame` reads the window back. Writes a Markdown
# section for docs/BENCHMARKS.md (bench/run.sh calls this and embeds it). Alone:
#
#   sudo JITTERSCOPE=target/release/jitterscope bash bench/profile.sh          # section on stdout
#   sudo PROFILE_SECONDS=300 BENCH_KEEP=1 bash bench/profile.sh                # longer, keep the files
#
# Environment (all optional):
#   JITTERSCOPE         release binary (default target/release/jitterscope)
#   PROFILE_OUT         where to write the Markdown section (default stdout)
#   PROFILE_TARGETS     where to write rows for the report's "Targets" table (default: nowhere)
#   PROFILE_SECONDS     length of the measured window (default 60)
#   PROFILE_WARMUP      seconds between the start of the recorders and the window (default 5)
#   PROFILE_HZ          the sampler's and perf's frequency per CPU (default 99)
#   PROFILE_PERF_Z=0    do not also run `perf record -z` (compressed; for information only)
#   PROFILE_FLAME_RUNS  timed runs of `flame --folded` over the window (default 5)
#   PROFILE_CPU_LOAD    stress-ng --cpu-load of the 2 CPU workers, % (default 40)
#   PROFILE_STATS, PROFILE_EXECS   the syscall part of the load: stat() calls every 10 ms and
#                       fork+exec per second (defaults below)
#   PROFILE_PYTHON      the CPython of the load's Python part (default /usr/bin/python3.11; "" for none):
#                       nested functions busy a quarter of the time, whose interpreter frames the
#                       sampler reads at each of its samples
#   BENCH_KEEP=1        keep the temporary directory (stores, perf.data, logs)
#
# Without root (or when perf_event sampling is not possible here) it prints "SKIPPED: <reason>",
# writes a section saying so and exits 0. Everything it starts (recorders, perf, the load, files)
# is removed on exit, Ctrl-C included.
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
OUT=${PROFILE_OUT:-/dev/stdout}
TARGETS_OUT=${PROFILE_TARGETS:-/dev/null}
WINDOW=${PROFILE_SECONDS:-60}
WARMUP=${PROFILE_WARMUP:-5}
PHZ=${PROFILE_HZ:-99}
PERF_Z=${PROFILE_PERF_Z:-1}
FLAME_RUNS=${PROFILE_FLAME_RUNS:-5}
CPU_LOAD=${PROFILE_CPU_LOAD:-40}
STATS=${PROFILE_STATS:-1000}      # stat() of missing names per 10 ms tick (~100k/s)
EXECS=${PROFILE_EXECS:-20}        # fork+exec of /bin/true per second
BYTES_RATIO_TARGET=10             # sampler bytes/hour <= 1/10 of perf.data's
DWARF_CPU_TARGET=0.3              # sampler with stack copies: % of one core at most
DWARF_BYTES_TARGET=2              # ... and at most this many times the frame-pointer sampler's bytes
POLL=0.25                         # seconds between reads of perf.data's size in the window

say() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { say "error: $*"; exit 1; }
calc() { awk "BEGIN { printf \"%s\", $* }"; }
f1() { awk -v x="$1" 'BEGIN { printf "%.1f", x }'; }
f2() { awk -v x="$1" 'BEGIN { printf "%.2f", x }'; }
f3() { awk -v x="$1" 'BEGIN { printf "%.3f", x }'; }

title="## Stack sampler overhead against \`perf record\`"
skip() { # reason: no measurement possible; say so in the report and succeed
    say "SKIPPED: $*"
    printf '%s\n\nSKIPPED: %s\n' "$title" "$*" >"$OUT"
    printf '| stack sampler CPU ≤ perf record -F %s -g -a | SKIPPED: %s | n/a |\n' "$PHZ" "$*" >"$TARGETS_OUT"
    printf '| stack sampler bytes/hour ≤ 1/%s of perf.data | SKIPPED: %s | n/a |\n' "$BYTES_RATIO_TARGET" "$*" >>"$TARGETS_OUT"
    exit 0
}

[ "$(id -u)" = 0 ] || skip "not root: system-wide perf_event sampling (all processes, kernel stacks) needs root"
case $JITTERSCOPE in /*) ;; *) [ -e "$JITTERSCOPE" ] || JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
[ -x "$JITTERSCOPE" ] || die "no executable at $JITTERSCOPE (build with: cargo build --release -p jitterscope)"
JITTERSCOPE=$(realpath "$JITTERSCOPE")
GIT_REV=$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)
BIN_MTIME=$(date -u -r "$JITTERSCOPE" '+%Y-%m-%d %H:%M UTC')

# ---------------------------------------------------------------------------------------------
# Tools (installed the way bench/run.sh installs its own; perf is Debian's linux-perf)
need=()
command -v stress-ng >/dev/null || need+=(stress-ng)
command -v perf >/dev/null || need+=(linux-perf)
if ((${#need[@]})); then
    say "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null ||
        say "warning: could not install ${need[*]}"
fi
command -v stress-ng >/dev/null || die "stress-ng not found"
command -v perl >/dev/null || die "perl not found (the syscall part of the load is a perl loop)"
command -v perf >/dev/null || skip "perf not found (apt-get install linux-perf failed): no reference to compare with"

# ---------------------------------------------------------------------------------------------
# State and cleanup
TMP=$(mktemp -d /tmp/jitterscope-bench-profile.XXXXXX)
declare -A PID=()     # running recorders and perf, by side
LOAD_PIDS=()          # the load (each its own process group)

cleanup() {
    local rc=$? p s
    trap - EXIT INT TERM
    for p in "${LOAD_PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
    for s in "${!PID[@]}"; do kill -INT "${PID[$s]}" 2>/dev/null || true; done
    for p in "${LOAD_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    for s in "${!PID[@]}"; do
        for _ in $(seq 100); do kill -0 "${PID[$s]}" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "${PID[$s]}" 2>/dev/null || true
        wait "${PID[$s]}" 2>/dev/null || true
    done
    if [ "${BENCH_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Background jobs get their own process group, so the load and all its children can be ended
# together (and a Ctrl-C reaches this script, whose cleanup ends them).
set -m

# Is system-wide sampling with call chains possible at all (and is -z)?
perf record -F "$PHZ" -g -a -o "$TMP/probe.data" -- sleep 0.2 >"$TMP/probe.log" 2>&1 ||
    skip "perf_event sampling is not available here (\`perf record -F $PHZ -g -a\`: $(grep -v '^\[' "$TMP/probe.log" | head -3 | tr '\n' ' ' | sed 's/ *$//' | head -c 300))"
HAVE_Z=0
if [ "$PERF_Z" = 1 ] && perf record -z -F "$PHZ" -g -a -o "$TMP/probe-z.data" -- sleep 0.2 >"$TMP/probe-z.log" 2>&1; then HAVE_Z=1; fi
rm -f "$TMP"/probe*.data*
PERF_VERSION=$(perf --version 2>/dev/null | awk '{print $3; exit}')
STRESS_VERSION=$(stress-ng --version 2>&1 | awk '{print $3; exit}')

# ---------------------------------------------------------------------------------------------
# Measurement helpers
HZ=$(getconf CLK_TCK)
ticks() { awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }
# On-CPU nanoseconds of each live thread of a process, summed by thread name: "name ns" lines.
thread_ns() {
    local t
    for t in /proc/"$1"/task/*; do
        printf '%s\t%s\n' "$(cat "$t/comm" 2>/dev/null)" "$(cut -d' ' -f1 "$t/schedstat" 2>/dev/null)"
    done | awk -F'\t' '$2 != "" {s[$1] += $2} END {for (k in s) printf "%s\t%d\n", k, s[k]}' | sort
}
size_of() { stat -c %s "$1" 2>/dev/null || echo 0; }
dir_bytes() { du -sb "$1" 2>/dev/null | cut -f1; }
host_cpu() { awk '/^cpu / {print $2, $3, $4, $5, $6, $7, $8, $9; exit}' /proc/stat; }
median() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) print ""; else printf "%s", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
stop_side() { # side signal; stops it, waits for it, records STOP_T
    kill -"$2" "${PID[$1]}" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "${PID[$1]}" 2>/dev/null || break; sleep 0.1; done
    kill -0 "${PID[$1]}" 2>/dev/null && say "warning: $1 did not stop within 30 s; killing it"
    kill -KILL "${PID[$1]}" 2>/dev/null || true
    wait "${PID[$1]}" 2>/dev/null || true
    unset "PID[$1]"
}
# Children's user+system seconds (bash's `times`, second line) into CHILD_CPU. Must run in this
# shell: around the `wait` that reaps perf, the difference is perf's CPU time over its whole life.
child_cpu() {
    times >"$TMP/times"
    CHILD_CPU=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }; printf "%.3f", t }' "$TMP/times")
}

# ---------------------------------------------------------------------------------------------
# The load: user time on both CPUs, plus system calls and process churn
mkdir -p "$TMP/enoent"
say "load: stress-ng --cpu 2 --cpu-load $CPU_LOAD; perl: $STATS stat() every 10 ms, $EXECS fork+exec/s"
stress-ng --cpu 2 --cpu-load "$CPU_LOAD" --timeout 0 >"$TMP/stress.log" 2>&1 &
LOAD_PIDS+=($!)
perl -MTime::HiRes=sleep -e '
    my ($d, $n, $execs) = @ARGV;
    my $every = $execs > 0 ? int(100 / $execs) || 1 : 0;
    for (my $i = 1; ; $i++) {
        stat("$d/missing-" . ($_ % 1000)) for 1 .. $n;
        system("/bin/true") if $every && $i % $every == 0;
        sleep(0.01);
    }' "$TMP/enoent" "$STATS" "$EXECS" >"$TMP/perl.log" 2>&1 &
LOAD_PIDS+=($!)
PYTHON=${PROFILE_PYTHON-/usr/bin/python3.11}
PY_PID=""
if [ -n "$PYTHON" ] && [ -x "$PYTHON" ]; then
    say "load: $PYTHON running handle → parse → score, busy 25 ms of every 100 ms"
    "$PYTHON" -c '
import time
def score(n):
    return sum(i * i for i in range(n))
def parse(n):
    return score(n)
def handle():
    t = time.monotonic()
    while time.monotonic() - t < 0.025:
        parse(2000)
while True:
    handle()
    time.sleep(0.075)
' >"$TMP/python.log" 2>&1 &
    LOAD_PIDS+=($!); PY_PID=$!
else
    PYTHON=""
fi
sleep 2
for p in "${LOAD_PIDS[@]}"; do kill -0 "$p" 2>/dev/null || { cat "$TMP/stress.log" "$TMP/perl.log" "$TMP/python.log" >&2 2>/dev/null; die "the load exited at start"; }; done

# ---------------------------------------------------------------------------------------------
# The recorders, started together
SIDES=(a b g f c e)
((HAVE_Z)) && SIDES+=(d)
declare -A START STOP_T T0 T1 K0 K1 B0 B1 OUTP
say "starting A (--profile-hz 0), B (--profile-hz $PHZ), G (B without Python frames), F (frame pointers), C (perf record)$( ((HAVE_Z)) && echo ", D (perf record -z)"); ${WARMUP} s warm-up, ${WINDOW} s window"
"$JITTERSCOPE" record --interval 1s --no-tracers --profile-hz 0 --dir "$TMP/a" </dev/null >/dev/null 2>"$TMP/a.log" &
PID[a]=$!; START[a]=$EPOCHREALTIME; OUTP[a]=$TMP/a
"$JITTERSCOPE" record --interval 1s --no-tracers --profile-hz "$PHZ" --dir "$TMP/b" </dev/null >/dev/null 2>"$TMP/b.log" &
PID[b]=$!; START[b]=$EPOCHREALTIME; OUTP[b]=$TMP/b
"$JITTERSCOPE" record --interval 1s --no-tracers --profile-hz "$PHZ" --no-profile-python --dir "$TMP/g" </dev/null >/dev/null 2>"$TMP/g.log" &
PID[g]=$!; START[g]=$EPOCHREALTIME; OUTP[g]=$TMP/g
"$JITTERSCOPE" record --interval 1s --no-tracers --profile-hz "$PHZ" --profile-stack 0 --dir "$TMP/f" </dev/null >/dev/null 2>"$TMP/f.log" &
PID[f]=$!; START[f]=$EPOCHREALTIME; OUTP[f]=$TMP/f
perf record -F "$PHZ" -g -a -o "$TMP/perf.data" </dev/null >/dev/null 2>"$TMP/c.log" &
PID[c]=$!; START[c]=$EPOCHREALTIME; OUTP[c]=$TMP/perf.data
perf record -F "$PHZ" --call-graph dwarf -a -o "$TMP/perf-dwarf.data" </dev/null >/dev/null 2>"$TMP/e.log" &
PID[e]=$!; START[e]=$EPOCHREALTIME; OUTP[e]=$TMP/perf-dwarf.data
if ((HAVE_Z)); then
    perf record -z -F "$PHZ" -g -a -o "$TMP/perf-z.data" </dev/null >/dev/null 2>"$TMP/d.log" &
    PID[d]=$!; START[d]=$EPOCHREALTIME; OUTP[d]=$TMP/perf-z.data
fi
for s in a b g f; do
    for _ in $(seq 300); do
        grep -q 'recording every' "$TMP/$s.log" 2>/dev/null && break
        kill -0 "${PID[$s]}" 2>/dev/null || { cat "$TMP/$s.log" >&2; die "recorder $s exited at start"; }
        sleep 0.1
    done
    grep -q 'recording every' "$TMP/$s.log" || { cat "$TMP/$s.log" >&2; die "recorder $s did not start within 30 s"; }
done
if ! grep -q 'profile: sampling stacks' "$TMP/b.log"; then
    why=$(sed -n 's/.*profile: not running: //p' "$TMP/b.log" | sed -n 1p)
    skip "the recorder's stack sampler did not start: ${why:-$(tail -2 "$TMP/b.log" | tr '\n' ' ')}"
fi
# Everything runs in its own process group now; no job-status chatter from here on.
set +m
grep -q 'profile:' "$TMP/a.log" && die "recorder A runs a profiler with --profile-hz 0: $(grep 'profile:' "$TMP/a.log" | head -1)"
sleep "$WARMUP"
for s in "${SIDES[@]}"; do
    kill -0 "${PID[$s]}" 2>/dev/null || { cat "$TMP/$s.log" >&2; die "$s exited during the warm-up"; }
done
[ "$(thread_ns "${PID[b]}" | awk -F'\t' '$1 == "profiler"' | wc -l)" = 1 ] || say "warning: no thread named profiler in recorder B"

# ---------------------------------------------------------------------------------------------
# The window
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
HOST0=$(host_cpu)
for s in "${SIDES[@]}"; do thread_ns "${PID[$s]}" >"$TMP/$s-threads0"; done
for s in "${SIDES[@]}"; do
    T0[$s]=$EPOCHREALTIME; K0[$s]=$(ticks "${PID[$s]}")
    case $s in a|b|f|g) B0[$s]=$(dir_bytes "${OUTP[$s]}") ;; *) B0[$s]=$(size_of "${OUTP[$s]}") ;; esac
done
WS=${T0[a]}
# perf.data's size through the window: perf writes a CPU's ring out when it is half full (all
# rings at each wake-up), so the file grows in steps; "time size" lines.
: >"$TMP/c.sizes"; : >"$TMP/d.sizes"; : >"$TMP/e.sizes"
end_us=$(( ${WS/./} + WINDOW * 1000000 ))
while (( ${EPOCHREALTIME/./} < end_us )); do
    echo "$EPOCHREALTIME $(size_of "${OUTP[c]}")" >>"$TMP/c.sizes"
    echo "$EPOCHREALTIME $(size_of "${OUTP[e]}")" >>"$TMP/e.sizes"
    if ((HAVE_Z)); then echo "$EPOCHREALTIME $(size_of "${OUTP[d]}")" >>"$TMP/d.sizes"; fi
    sleep "$POLL"
done
for s in "${SIDES[@]}"; do
    T1[$s]=$EPOCHREALTIME; K1[$s]=$(ticks "${PID[$s]}")
    case $s in a|b|f|g) B1[$s]=$(dir_bytes "${OUTP[$s]}") ;; *) B1[$s]=$(size_of "${OUTP[$s]}") ;; esac
done
for s in "${SIDES[@]}"; do thread_ns "${PID[$s]}" >"$TMP/$s-threads1"; done
HOST1=$(host_cpu)
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
WE=${T1[a]}
OTHER_JS=$(pgrep -x jitterscope 2>/dev/null | grep -cvxE "${PID[a]}|${PID[b]}|${PID[f]}|${PID[g]}" || true)
OTHER_PERF=$(pgrep -x perf 2>/dev/null | grep -cvxE "${PID[c]}|${PID[e]}${PID[d]:+|${PID[d]}}" || true)

# Stop: perf first (SIGINT: it writes what its rings still hold, then the header's feature
# sections and build-ids), then the recorders; the load last.
declare -A LIFE_CPU EXIT_CPU
for s in c e d a b g f; do
    [ -n "${PID[$s]:-}" ] || continue
    child_cpu; c0=$CHILD_CPU
    STOP_T[$s]=$EPOCHREALTIME
    stop_side "$s" INT
    child_cpu; LIFE_CPU[$s]=$(calc "$CHILD_CPU - $c0")
    EXIT_CPU[$s]=$(calc "${LIFE_CPU[$s]} - ${K1[$s]} / $HZ")
done
for p in "${LOAD_PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
for p in "${LOAD_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
LOAD_PIDS=()

# ---------------------------------------------------------------------------------------------
# Results
declare -A CPU MBH_WIN MBH_LIFE FINAL
for s in "${SIDES[@]}"; do
    CPU[$s]=$(calc "(${K1[$s]} - ${K0[$s]}) / $HZ / (${T1[$s]} - ${T0[$s]}) * 100")
    case $s in a|b|f|g) FINAL[$s]=$(dir_bytes "${OUTP[$s]}") ;; *) FINAL[$s]=$(size_of "${OUTP[$s]}") ;; esac
    MBH_WIN[$s]=$(calc "(${B1[$s]} - ${B0[$s]}) / (${T1[$s]} - ${T0[$s]}) * 3600 / 1e6")
    MBH_LIFE[$s]=$(calc "${FINAL[$s]} / (${STOP_T[$s]} - ${START[$s]}) * 3600 / 1e6")
done
SAMPLER_CPU=$(calc "${CPU[b]} - ${CPU[a]}")
SAMPLER_MBH=$(calc "${MBH_WIN[b]} - ${MBH_WIN[a]}")
SAMPLER_MBH_LIFE=$(calc "${MBH_LIFE[b]} - ${MBH_LIFE[a]}")
FP_CPU=$(calc "${CPU[f]} - ${CPU[a]}")
PY_CPU=$(calc "${CPU[b]} - ${CPU[g]}")
PY_MBH=$(calc "${MBH_WIN[b]} - ${MBH_WIN[g]}")
FP_MBH=$(calc "${MBH_WIN[f]} - ${MBH_WIN[a]}")
FP_MBH_LIFE=$(calc "${MBH_LIFE[f]} - ${MBH_LIFE[a]}")

# perf.data's steady rate. Bytes of sample data written by the stop = the header's feature
# offset (data offset + data size; the feature sections and build-ids follow, written at exit).
# The window's first step of the file's size is a moment at which everything sampled until then
# was in the file (a wake-up drains every CPU's ring); its time is taken as the middle between
# the poll before the step and the poll that saw it. Rate = bytes from that step to the stop ÷
# the time between them: neither the start-up records (mmaps of every process) nor what was
# still in the rings at the start of the window count. Without a step, the window start's size.
declare -A FEAT STEADY STEADY_FROM
perf_steady() { # side
    local s=$1 feat step t0 s0
    feat=$(perf report --header-only -i "${OUTP[$s]}" 2>/dev/null | awk '/# feat offset/ && !f {print $NF; f = 1}')
    FEAT[$s]=${feat:-${FINAL[$s]}}
    step=$(awk -v pt="${T0[$s]}" -v ps="${B0[$s]}" '$2 > ps {printf "%.6f %d\n", (pt + $1) / 2, $2; exit} {pt = $1; ps = $2}' "$TMP/$s.sizes")
    if [ -n "$step" ]; then read -r t0 s0 <<<"$step"; STEADY_FROM[$s]=step
    else t0=${T0[$s]}; s0=${B0[$s]}; STEADY_FROM[$s]=start; fi
    STEADY[$s]=$(calc "(${FEAT[$s]} - $s0) / (${STOP_T[$s]} - $t0) * 3600 / 1e6")
}
for s in c d e; do [ -n "${K0[$s]:-}" ] && perf_steady "$s"; done
PERF_STEPS=$(awk 'NR > 1 && $2 > ps {n++} {ps = $2} END {print n + 0}' "$TMP/c.sizes")
PERF_SAMPLES=$(sed -n 's/.*(\([0-9]*\) samples).*/\1/p' "$TMP/c.log" | tail -1)
PERF_SAMPLES_PER_S=$([ -n "$PERF_SAMPLES" ] && calc "$PERF_SAMPLES / (${STOP_T[c]} - ${START[c]})" || echo "")
PERF_LOST=$(perf report --stats -i "${OUTP[c]}" 2>/dev/null | awk '/LOST_SAMPLES events:|^ *LOST events:/ {s += $(NF - 1) + 0} END {print s + 0}' || echo "?")

R_BYTES=$(awk -v a="$SAMPLER_MBH" -v b="${STEADY[c]}" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }')
OK_BYTES=$(awk -v a="$SAMPLER_MBH" -v b="${STEADY[c]}" -v t="$BYTES_RATIO_TARGET" 'BEGIN { print (a * t <= b) ? "**met**" : "**missed**" }')

# Where B's extra CPU goes: its threads' on-CPU time (schedstat) over the window.
thread_delta() { # side -> "name pct" lines
    join -t $'\t' "$TMP/$1-threads0" "$TMP/$1-threads1" |
        awk -F'\t' -v w="$(calc "${T1[$1]} - ${T0[$1]}")" '{printf "%s\t%.4f\n", $1, ($3 - $2) / 1e9 / w * 100}'
}
declare -A SCPU
for s in "${SIDES[@]}"; do
    thread_delta "$s" >"$TMP/$s-threads"
    SCPU[$s]=$(awk -F'\t' '{s += $2} END {printf "%.3f", s}' "$TMP/$s-threads")
done
SAMPLER_SCPU=$(f3 "$(calc "${SCPU[b]} - ${SCPU[a]}")")
FP_SCPU=$(f3 "$(calc "${SCPU[f]} - ${SCPU[a]}")")
PY_SCPU=$(f3 "$(calc "${SCPU[b]} - ${SCPU[g]}")")
OK_DWARF_CPU=$(awk -v a="$SAMPLER_SCPU" -v t="$DWARF_CPU_TARGET" 'BEGIN { print (a <= t) ? "**met**" : "**missed**" }')
R_DWARF_BYTES=$(awk -v a="$SAMPLER_MBH" -v b="$FP_MBH" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
OK_DWARF_BYTES=$(awk -v a="$SAMPLER_MBH" -v b="$FP_MBH" -v t="$DWARF_BYTES_TARGET" 'BEGIN { print (b > 0 && a <= t * b) ? "**met**" : "**missed**" }')
R_DWARF_PERF_CPU=$(awk -v a="$SAMPLER_SCPU" -v b="${SCPU[e]}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
R_DWARF_PERF_BYTES=$(awk -v a="$SAMPLER_MBH" -v b="${STEADY[e]}" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print "n/a" }')
# perf record's CPU is often below one clock tick over the window: the ratio and the verdict use
# the on-CPU nanoseconds (schedstat) of both, which /proc/<pid>/stat's ticks agree with above that.
R_CPU=$(awk -v a="$SAMPLER_SCPU" -v b="${SCPU[c]}" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "n/a" }')
OK_CPU=$(awk -v a="$SAMPLER_SCPU" -v b="${SCPU[c]}" 'BEGIN { print (a <= b) ? "**met**" : "**missed**" }')
PROFILER_PCT=$(awk -F'\t' '$1 == "profiler" {print $2}' "$TMP/b-threads")
THREAD_TABLE=$(join -t $'\t' -a 1 -a 2 -e "–" -o 0,1.2,2.2 "$TMP/a-threads" "$TMP/b-threads" |
    awk -F'\t' 'function f(x) { return x == "–" ? x : sprintf("%.3f", x) } {printf "| %s | %s | %s |\n", $1, f($2), f($3)}')

# What perf's samples cost to name, the work the sampler does as it goes: \`perf script\` over
# the whole perf.data (it names every frame of every sample), as CPU time per second recorded.
say "perf script over perf.data"
child_cpu; c0=$CHILD_CPU; t0=$EPOCHREALTIME
perf script -i "${OUTP[c]}" >/dev/null 2>"$TMP/script.log" || say "warning: perf script failed: $(tail -1 "$TMP/script.log")"
child_cpu
SCRIPT_CPU=$(calc "$CHILD_CPU - $c0"); SCRIPT_WALL=$(calc "$EPOCHREALTIME - $t0")
SCRIPT_PCT=$(calc "$SCRIPT_CPU / (${STOP_T[c]} - ${START[c]}) * 100")

# The sampler's health, from B's store, over the window.
FROM=${WS%.*}; TO=${WE%.*}
"$JITTERSCOPE" dump --dir "$TMP/b" --from "$FROM" --to "$TO" --select 'profile.*' --format csv >"$TMP/b-profile.csv"
col() { awk -F, -v k="$1" '$2 == k && $3 != "" {print $3}' "$TMP/b-profile.csv"; }
SLICES=$(col profile.samples_per_s | wc -l)
SPS_MED=$(col profile.samples_per_s | median)
SPS_MEAN=$(col profile.samples_per_s | awk '{s += $1} END {printf "%.1f", NR ? s / NR : 0}')
read -r SPS_MIN SPS_MAX < <(col profile.samples_per_s | awk 'NR == 1 || $1 < lo {lo = $1} NR == 1 || $1 > hi {hi = $1} END {print lo + 0, hi + 0}')
LOST=$(col profile.lost_per_s | awk '{s += $1} END {printf "%.0f", s}')
DROPPED=$(col profile.dropped_per_s | awk '{s += $1} END {printf "%.0f", s}')
KPCT_MED=$(col profile.kernel_pct | median)
STACKS_MED=$(col profile.stacks | median)
NCPU=$(nproc)
EXPECT=$((PHZ * NCPU))

# The Python part of the load: how many of its samples carry its interpreter frames.
PY_ROW=""
if [ -n "$PY_PID" ]; then
    "$JITTERSCOPE" flame --dir "$TMP/b" --from "$FROM" --to "$TO" --folded --pid "$PY_PID" >"$TMP/py-folded" 2>/dev/null || true
    PY_ALL=$(awk '{s += $NF} END {print s + 0}' "$TMP/py-folded")
    PY_NESTED=$(awk '/py:handle_.*;py:parse_.*;py:score_/ {s += $NF} END {print s + 0}' "$TMP/py-folded")
    PY_ROW="| samples of the Python part with its frames (\`py:handle;py:parse;py:score\`) | **$PY_NESTED** of $PY_ALL |"
fi

# Reading the window back.
say "timing flame --folded over the ${WINDOW} s window"
FLAME=("$JITTERSCOPE" flame --dir "$TMP/b" --from "$FROM" --to "$TO" --folded)
"${FLAME[@]}" >"$TMP/folded" 2>"$TMP/flame.log" || { cat "$TMP/flame.log" >&2; die "flame --folded failed"; }
FOLDED_LINES=$(wc -l <"$TMP/folded")
FOLDED_SAMPLES=$(awk '{s += $NF} END {print s + 0}' "$TMP/folded")
FLAME_MS=$(for _ in $(seq "$FLAME_RUNS"); do
    s0=$(date +%s%N); "${FLAME[@]}" >/dev/null 2>&1; s1=$(date +%s%N); echo $(( (s1 - s0) / 1000 ))
done | median | awk '{printf "%.1f", $1 / 1000}')
TOPF=$("$JITTERSCOPE" top-functions --dir "$TMP/b" --from "$FROM" --to "$TO" -n 5 2>&1 | head -30 || true)

read -r u0 n0 s0 i0 w0 q0 sq0 st0 <<<"$HOST0"
read -r u1 n1 s1 i1 w1 q1 sq1 st1 <<<"$HOST1"
HTOT=$(calc "($u1+$n1+$s1+$i1+$w1+$q1+$sq1+$st1)-($u0+$n0+$s0+$i0+$w0+$q0+$sq0+$st0)")
HOST_BUSY=$(calc "(($u1+$n1+$s1+$q1+$sq1+$st1)-($u0+$n0+$s0+$q0+$sq0+$st0)) / $HTOT * 100")
HOST_SYS=$(calc "(($s1+$q1+$sq1)-($s0+$q0+$sq0)) / $HTOT * 100")
HOST_STEAL=$(calc "($st1 - $st0) / $HTOT * 100")

say "CPU % of one core (stat; schedstat): A $(f3 "${CPU[a]}"); ${SCPU[a]}, B $(f3 "${CPU[b]}"); ${SCPU[b]} (profiler thread ${PROFILER_PCT:-?}), sampler B−A $(f3 "$SAMPLER_CPU"); $SAMPLER_SCPU, perf $(f3 "${CPU[c]}"); ${SCPU[c]}$( ((HAVE_Z)) && echo ", perf -z $(f3 "${CPU[d]}"); ${SCPU[d]}"); perf script $(f2 "$SCRIPT_CPU") s CPU = $(f3 "$SCRIPT_PCT") % of the recorded time"
say "Python frames (B − G): CPU $(f3 "$PY_CPU"); $PY_SCPU, MB/hour $(f3 "$PY_MBH")"
say "MB/hour: sampler $(f3 "$SAMPLER_MBH") (window), perf.data $(f2 "${STEADY[c]}") steady / $(f2 "${MBH_LIFE[c]}") lifetime$( ((HAVE_Z)) && echo ", perf -z $(f2 "${STEADY[d]}") steady"); ratio $R_BYTES"
say "health: $SLICES slices, samples/s mean $SPS_MEAN median $SPS_MED (perf ${PERF_SAMPLES_PER_S:-?}, at most $EXPECT), lost $LOST, dropped $DROPPED, kernel $KPCT_MED %; flame ${FLAME_MS} ms, $FOLDED_LINES folded lines"

# ---------------------------------------------------------------------------------------------
# Report
WIN_S=$(f1 "$(calc "$WE - $WS")")
ROW_D=""
if ((HAVE_Z)); then
    ROW_D="| D | \`perf record -z -F $PHZ -g -a\` (zstd; information only) | $(f3 "${CPU[d]}") | ${SCPU[d]} | $(f3 "${MBH_WIN[d]}") | $(f3 "${STEADY[d]}") | $(f3 "${MBH_LIFE[d]}") |"
fi
{
cat <<EOF
$title

Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -r), $NCPU CPUs; jitterscope at git $GIT_REV
(binary built $BIN_MTIME); perf $PERF_VERSION; stress-ng $STRESS_VERSION.

**Method.** These start together and run side by side under the same load; after a ${WARMUP} s
warm-up a window of ${WIN_S} s is measured:

- A: \`jitterscope record --interval 1s --no-tracers --profile-hz 0\` (the recorder without its sampler),
- B: \`jitterscope record --interval 1s --no-tracers --profile-hz $PHZ\` (the same with it, at its
  default: 8 KiB of user stack copied per sample and unwound with .eh_frame): **the sampler's cost is
  B − A**,
- G: B with \`--no-profile-python\` (no interpreter frames): **B − G is what reading Python frames costs**,
- F: the same with \`--profile-stack 0\` (frame pointers only, as before DWARF unwinding): F − A,
- C: \`perf record -F $PHZ -g -a -o perf.data\`, the reference: the same cpu-clock sampling at $PHZ Hz per
  CPU with kernel and user call chains of every process, written raw to a file.
- E: \`perf record -F $PHZ --call-graph dwarf -a\`, the peer that gives the same whole user stacks (8 KiB
  stack copies, unwound by \`perf report\` later).
$( ((HAVE_Z)) && echo "- D: \`perf record -z\` with the same options as C (zstd-compressed perf.data), for information.")

Load through the window: \`stress-ng --cpu 2 --cpu-load $CPU_LOAD\` (user time on both CPUs) and a perl
loop doing $STATS \`stat()\` of missing names every 10 ms and $EXECS fork+exec of \`/bin/true\` per second
(kernel time, process churn: new processes whose stacks must be read and named)$([ -n "$PYTHON" ] && echo ", and
\`$PYTHON\` running nested Python functions 25 ms of every 100 ms (the sampler reads its interpreter
frames at each of its samples, in BPF, and names their code objects)").
CPU % of one core = utime + stime of the process (all its threads: the thread-group leader's
\`/proc/<pid>/stat\`) at the end of the window − at its start, ÷ the window; ticks are 1/${HZ} s, so the
resolution is $(calc "100 / $HZ / $WINDOW" | awk '{printf "%.3f", $1}') % of a core; the schedstat column is the same from the on-CPU nanoseconds of
each live thread (\`/proc/<pid>/task/*/schedstat\`), for figures below a tick. The cost of taking the samples in the kernel (the
timer interrupt, walking the stacks) is charged to the interrupted tasks, not to the sampler, and
is the same for B and C. Bytes: for A and B the store directory (\`du -sb\`; the store flushes
every sample) at the end of the window − at its start. perf buffers samples in per-CPU rings
and writes them out when one is half full, so its file grows in steps ($PERF_STEPS during this
window); its steady rate is the sample data written from the window's first step (sizes read
every ${POLL} s) to its graceful stop (SIGINT right after the window, which writes out the rings;
data end = the header's feature offset, \`perf report --header-only\`) ÷ that time: it leaves out
the records perf synthesizes at start (a mmap of every process) and the build-ids it appends at
exit$([ "${STEADY_FROM[c]}" = start ] && echo " (this run: no step in the window, so from the window start's size, which counts what was still in the rings then as the window's)"). Its lifetime rate (final file ÷ run time, start-up and exit included) is given too.
MB = 10⁶ bytes.

| | | CPU % of one core | (schedstat) | MB/hour (window growth) | MB/hour (steady) | MB/hour (lifetime) |
|---|---|---:|---:|---:|---:|---:|
| A | \`record --profile-hz 0\` | $(f3 "${CPU[a]}") | ${SCPU[a]} | $(f3 "${MBH_WIN[a]}") | | $(f3 "${MBH_LIFE[a]}") |
| B | \`record --profile-hz $PHZ\` | $(f3 "${CPU[b]}") | ${SCPU[b]} | $(f3 "${MBH_WIN[b]}") | | $(f3 "${MBH_LIFE[b]}") |
| **B − A** | **the stack sampler** | **$(f3 "$SAMPLER_CPU")** | **$SAMPLER_SCPU** | **$(f3 "$SAMPLER_MBH")** | | $(f3 "$SAMPLER_MBH_LIFE") |
| G | \`record --profile-hz $PHZ --no-profile-python\` | $(f3 "${CPU[g]}") | ${SCPU[g]} | $(f3 "${MBH_WIN[g]}") | | $(f3 "${MBH_LIFE[g]}") |
| B − G | Python frames | $(f3 "$PY_CPU") | $PY_SCPU | $(f3 "$PY_MBH") | | |
| F | \`record --profile-hz $PHZ --profile-stack 0\` | $(f3 "${CPU[f]}") | ${SCPU[f]} | $(f3 "${MBH_WIN[f]}") | | $(f3 "${MBH_LIFE[f]}") |
| F − A | the sampler with frame pointers only | $(f3 "$FP_CPU") | $FP_SCPU | $(f3 "$FP_MBH") | | $(f3 "$FP_MBH_LIFE") |
| C | \`perf record -F $PHZ -g -a\` | $(f3 "${CPU[c]}") | **${SCPU[c]}** | $(f3 "${MBH_WIN[c]}") | **$(f3 "${STEADY[c]}")** | $(f3 "${MBH_LIFE[c]}") |
| E | \`perf record -F $PHZ --call-graph dwarf -a\` | $(f3 "${CPU[e]}") | ${SCPU[e]} | $(f3 "${MBH_WIN[e]}") | $(f3 "${STEADY[e]}") | $(f3 "${MBH_LIFE[e]}") |
$ROW_D

Sampler against perf: CPU $(f3 "$SAMPLER_CPU") % vs $(f3 "${CPU[c]}") % of a core (schedstat: $SAMPLER_SCPU % vs ${SCPU[c]} %, ratio $R_CPU; the target is judged on these, as perf's
CPU time over the window is often below one tick); bytes
$(f3 "$SAMPLER_MBH") vs $(f2 "${STEADY[c]}") MB/hour (ratio $R_BYTES, target ≤ 1/$BYTES_RATIO_TARGET). perf also spent
$(f2 "${EXIT_CPU[c]}") s of CPU after the window, at its exit (writing out the rings, build-ids; not in the
window's figure)$( ((HAVE_Z)) && echo ", perf -z $(f2 "${EXIT_CPU[d]}") s"), perf --call-graph dwarf $(f2 "${EXIT_CPU[e]}") s.

With whole user stacks (B) against frame pointers only (F): the sampler's CPU $SAMPLER_SCPU % vs $FP_SCPU % of
a core (target ≤ $DWARF_CPU_TARGET %: $OK_DWARF_CPU), its bytes $(f3 "$SAMPLER_MBH") vs $(f3 "$FP_MBH") MB/hour
(ratio $R_DWARF_BYTES, target ≤ $DWARF_BYTES_TARGET: $OK_DWARF_BYTES). Against the peer that gives the same stacks,
\`perf record --call-graph dwarf\`: CPU ratio $R_DWARF_PERF_CPU (on-CPU, window), bytes ratio $R_DWARF_PERF_BYTES
($(f2 "${STEADY[e]}") MB/hour of raw stack copies, before \`perf report\` unwinds them). The stack copy
is the kernel's (a bounded memcpy at each sample, charged to the sampled task like the
frame-pointer walk); the sampled process is never stopped or read from afterwards.

\`perf record\` only copies the raw samples (addresses) to its file; naming the frames is left to
\`perf script\`/\`perf report\` later, while the sampler names them as it goes and keeps only
aggregated, named stacks. For comparison, \`perf script\` over this run's perf.data (every sample
with its frames named, output discarded) took $(f2 "$SCRIPT_CPU") s of CPU ($(f1 "$SCRIPT_WALL") s wall) for
$(f1 "$(calc "${STOP_T[c]} - ${START[c]}")") s recorded: $(f3 "$SCRIPT_PCT") % of a core for as long as perf records (not in the target).

Where the recorders' time went over the window, % of one core per thread (\`/proc/<pid>/task/*/schedstat\`,
on-CPU time; the \`profiler\` thread drains the rings every 250 ms, names the frames and cuts a slice
per sample; the other threads of B also encode, compress and write the slices):

| thread | A | B |
|---|---:|---:|
${THREAD_TABLE}

### Sampler health (B's store, ${SLICES} one-second slices in the window)

| | |
|---|---|
| samples/s, mean; median (min–max) | **$SPS_MEAN**; $(f1 "${SPS_MED:-0}") ($(f1 "${SPS_MIN:-0}")–$(f1 "${SPS_MAX:-0}")); at most $PHZ Hz × $NCPU CPUs = $EXPECT |
| lost (ring full), total | **$LOST** |
| dropped (unparsable, past the bound of distinct stacks), total | $DROPPED |
| busy samples in the kernel (\`profile.kernel_pct\`), median | $(f1 "${KPCT_MED:-0}") % |
| distinct stacks per slice (\`profile.stacks\`), median | ${STACKS_MED:-?} |
$PY_ROW
| perf over the same run (warm-up included) | ${PERF_SAMPLES:-?} samples in $(f1 "$(calc "${STOP_T[c]} - ${START[c]}")") s = **$([ -n "$PERF_SAMPLES_PER_S" ] && f1 "$PERF_SAMPLES_PER_S" || echo "?")/s**, lost $PERF_LOST |

The reference for the rate is perf's, sampling the same way at the same time: what the kernel's
cpu-clock timers delivered. Below $EXPECT with no loss on either side means fewer timer expiries
were sampled, not samples dropped.

### Reading the window back

\`jitterscope flame --dir B --from <window start> --to <window end> --folded\`: **$FLAME_MS ms**
(median of $FLAME_RUNS runs, page cache warm), $FOLDED_LINES folded lines, $FOLDED_SAMPLES samples.
\`jitterscope top-functions\` over the same window:

\`\`\`
$TOPF
\`\`\`

Host during the window: $(f1 "$HOST_BUSY") % busy, $(f1 "$HOST_SYS") % in the kernel (system + irq +
softirq), $(f1 "$HOST_STEAL") % steal; load average $LOAD0 at the start, $LOAD1 at the end (a
$NCPU-CPU VM shared with other work); $OTHER_JS other \`jitterscope\` and $OTHER_PERF other \`perf\` processes were running.
EOF
} >"$OUT"

printf '| stack sampler CPU ≤ perf record -F %s -g -a | %s %% of one core (record with − without sampler) vs perf %s %%; on-CPU (schedstat) %s vs %s %% = %s× | %s |\n' \
    "$PHZ" "$(f3 "$SAMPLER_CPU")" "$(f3 "${CPU[c]}")" "$SAMPLER_SCPU" "${SCPU[c]}" "$R_CPU" "$OK_CPU" >"$TARGETS_OUT"
printf '| stack sampler bytes/hour ≤ 1/%s of perf.data | %s vs %s MB/hour = %s | %s |\n' \
    "$BYTES_RATIO_TARGET" "$(f3 "$SAMPLER_MBH")" "$(f2 "${STEADY[c]}")" "$R_BYTES" "$OK_BYTES" >>"$TARGETS_OUT"
printf '| stack sampler with DWARF unwinding ≤ %s %% of one core | %s %% (on-CPU, record with − without sampler) | %s |\n' \
    "$DWARF_CPU_TARGET" "$SAMPLER_SCPU" "$OK_DWARF_CPU" >>"$TARGETS_OUT"
printf '| stack sampler bytes with DWARF unwinding ≤ %s× frame pointers only | %s vs %s MB/hour = %s× | %s |\n' \
    "$DWARF_BYTES_TARGET" "$(f3 "$SAMPLER_MBH")" "$(f3 "$FP_MBH")" "$R_DWARF_BYTES" "$OK_DWARF_BYTES" >>"$TARGETS_OUT"
say "profile section written"
