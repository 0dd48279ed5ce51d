#!/usr/bin/env bash
# Side-by-side benchmark of `jitterscope record` against atop and sysstat's sadc, on a quiet host
# and on a busy one (bench/busy.sh, with below when installed), a saturation run,
# a read-back test on a synthesized 24 h store, the BPF tracers' overhead (bench/tracers.sh) and
# the stack sampler's against `perf record` (bench/profile.sh) and remote write's cost
# (bench/fleet.sh), fleet queries over ClickHouse (bench/fleet_query.sh), the ClickHouse pusher's
# cost (bench/fleet_pusher.sh), the recorder's memory across an episode close (bench/memory.sh).
# Writes docs/BENCHMARKS.md.
#
#   sudo make bench                      # or:
#   sudo JITTERSCOPE=target/release/jitterscope bash bench/run.sh
#
# Environment (all optional):
#   JITTERSCOPE     release binary (default target/release/jitterscope)
#   BENCH_SECONDS   length of the side-by-side window (default 60)
#   STRESS_SECONDS  length of the saturation run (default 40)
#   EXTRA_PROCS     extra sleeping processes during the run (default 300)
#   SYNTH_HOURS     length of the synthesized store for read-back (default 24)
#   READ_RUNS       timed runs per read-back query (default 10)
#   STRESS_MEM      memory limit of the stress cgroup (default 1G)
#   BENCH_OUT       report path (default docs/BENCHMARKS.md in the repository)
#   BENCH_KEEP=1    keep the temporary directory (stores, raw files, logs)
#   SYNTH_STORE     prebuilt synth_store example binary (default: built with cargo)
#   BUSY_*, BELOW   the busy-host side by side, see bench/busy.sh (BUSY_SECONDS defaults to
#                   BENCH_SECONDS)
#   BENCH_BELOW=0   do not build below when it is missing (by default it is built once into
#                   /opt/below: clang-16 from apt, then `cargo install --locked below`, ~10 min)
#   TRACER_*, MADVISE_OPS, ...   the tracer overhead section, see bench/tracers.sh
#   PROFILE_*       the stack sampler section, see bench/profile.sh
#   FLEET_*         remote write's cost and recovery, see bench/fleet.sh
#   FLEETQ_*        fleet episodes over ClickHouse, see bench/fleet_query.sh
#   FLEETP_*        the ClickHouse pusher's cost, see bench/fleet_pusher.sh
#   MEM_*           the recorder's memory across an episode close, see bench/memory.sh
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/proc.sh"
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
BENCH_SECONDS=${BENCH_SECONDS:-60}
STRESS_SECONDS=${STRESS_SECONDS:-40}
EXTRA_PROCS=${EXTRA_PROCS:-300}
SYNTH_HOURS=${SYNTH_HOURS:-24}
READ_RUNS=${READ_RUNS:-10}
STRESS_MEM=${STRESS_MEM:-1G}
OUT=${BENCH_OUT:-$REPO/docs/BENCHMARKS.md}
WARMUP=3

say() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (atop, sadc -S XALL, cgroups, /proc of all processes)"
case $JITTERSCOPE in /*) ;; *) [ -e "$JITTERSCOPE" ] || JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
[ -x "$JITTERSCOPE" ] || die "no executable at $JITTERSCOPE (build with: cargo build --release -p jitterscope)"
JITTERSCOPE=$(realpath "$JITTERSCOPE")
# The tree as of the start (others may commit while this runs); the binary's own build time too.
GIT_REV=$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)
BIN_MTIME=$(date -u -r "$JITTERSCOPE" '+%Y-%m-%d %H:%M:%S UTC')

# ---------------------------------------------------------------------------------------------
# Tools
find_sadc() {
    local p
    for p in /usr/lib/sysstat/sadc /usr/libexec/sysstat/sadc /usr/lib64/sa/sadc /usr/lib/sa/sadc; do
        [ -x "$p" ] && { echo "$p"; return 0; }
    done
    command -v sadc || true
}
need=()
command -v atop >/dev/null || need+=(atop)
[ -n "$(find_sadc)" ] || need+=(sysstat)
command -v stress-ng >/dev/null || need+=(stress-ng)
if ((${#need[@]})); then
    say "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
SADC=$(find_sadc)
[ -n "$SADC" ] || die "sadc not found after installing sysstat"
# below, the peer the busy host is also judged against (issue 23). Its BPF code needs clang 15 or
# newer, which bookworm has as clang-16 beside its default clang 14; cargo finds it as `clang` on
# a PATH of its own. A failed build is said and the run goes on without below.
if [ "${BENCH_BELOW:-1}" = 1 ] && [ -z "${BELOW:-}" ] && ! command -v below >/dev/null &&
    [ ! -x /opt/below/bin/below ]; then
    say "building below into /opt/below (once; BENCH_BELOW=0 skips it)"
    CLANG16=$(mktemp -d)
    if { command -v clang-16 >/dev/null ||
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-16 >/dev/null; } &&
        ln -s "$(command -v clang-16)" "$CLANG16/clang" &&
        PATH=$CLANG16:$PATH cargo install -q --locked below --root /opt/below >"$CLANG16/build.log" 2>&1; then
        say "below built: /opt/below/bin/below"
    else
        say "below did not build (the busy section says it is missing): $(tail -1 "$CLANG16/build.log" 2>/dev/null)"
    fi
    rm -rf "$CLANG16"
fi
ATOP_VERSION=$(atop -V 2>&1 | awk '/Version/ {print $2; exit}')
SYSSTAT_VERSION=$("$SADC" -V 2>&1 | awk '/version/ {print $3; exit}')
STRESS_VERSION=$(stress-ng --version 2>&1 | awk '{print $3; exit}')

# ---------------------------------------------------------------------------------------------
# State and cleanup
TMP=$(mktemp -d /tmp/jitterscope-bench.XXXXXX)
SLEEPERS=()
RUNNING=()          # recorders and stressors started by this script
CGDIR=""
STOPPED_SERVICES=()

cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    for p in "${RUNNING[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    if [ -n "$CGDIR" ] && [ -d "$CGDIR" ]; then
        for p in $(cat "$CGDIR/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    fi
    if ((${#SLEEPERS[@]})); then kill -TERM "${SLEEPERS[@]}" 2>/dev/null || true; fi
    for p in "${RUNNING[@]}" "${SLEEPERS[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ -n "$CGDIR" ] && [ -d "$CGDIR" ]; then
        for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$CGDIR" 2>/dev/null && break; sleep 0.5; done
        [ -d "$CGDIR" ] && say "warning: could not remove cgroup $CGDIR"
    fi
    for p in "${STOPPED_SERVICES[@]}"; do
        say "restarting $p"
        if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl start "$p" || true
        else service "$p" start >/dev/null 2>&1 || true; fi
    done
    if [ "${BENCH_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# atop's own daemon (and atopacctd) must not run alongside: stop them, restart them at the end.
# Judge by live processes (zombies ignored), not by `service ... status`, which some init scripts
# answer with 0 whatever the state.
live() { ps -C "$1" -o pid=,stat= 2>/dev/null | awk '$2 !~ /^Z/ {print $1}'; }
for pair in atop:atop atopacct:atopacctd; do
    svc=${pair%%:*}; proc=${pair##*:}
    [ -n "$(live "$proc")" ] || continue
    say "stopping the $svc service for the duration"
    if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl stop "$svc" || true
    else service "$svc" stop >/dev/null 2>&1 || true; fi
    STOPPED_SERVICES+=("$svc")
done
sleep 0.5
for name in atop atopacctd sadc; do
    if [ -n "$(live "$name")" ]; then
        die "a $name process is already running (pid $(live "$name" | tr '\n' ' ')); stop it first"
    fi
done

# ---------------------------------------------------------------------------------------------
# Measurement helpers

# CPU ticks (utime+stime+cutime+cstime, /proc/<pid>/stat fields 14-17) of a process and all its
# live descendants; reaped children are in cutime/cstime.
tree_ticks() {
    cat /proc/[0-9]*/stat 2>/dev/null | awk -v root="$1" '
        { pid = $1; s = $0; sub(/^.*\) /, "", s); n = split(s, f, " ")
          if (n < 15) next
          ppid[pid] = f[2]; ticks[pid] = f[12] + f[13] + f[14] + f[15] }
        END {
          total = 0
          for (p in ticks) {
            q = p; hops = 0
            while (q != "" && q != 0 && q != root && hops < 64) { q = ppid[q]; hops++ }
            if (q == root) total += ticks[p]
          }
          print total
        }'
}
now_s() { echo "$EPOCHREALTIME"; }
bytes_of() { find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
calc() { awk "BEGIN { printf \"%s\", $* }"; }
f2() { awk -v x="$1" 'BEGIN { printf "%.2f", x }'; }
f3() { awk -v x="$1" 'BEGIN { printf "%.3f", x }'; }
HZ=$(getconf CLK_TCK)
# host /proc/stat cpu line: user nice system idle iowait irq softirq steal
host_cpu() { awk '/^cpu / {print $2, $3, $4, $5, $6, $7, $8, $9; exit}' /proc/stat; }

stop_wait() { # pid signal
    kill -"$2" "$1" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    wait "$1" 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------------
# 1. Extra sleeping processes
say "starting $EXTRA_PROCS sleeping processes"
for _ in $(seq "$EXTRA_PROCS"); do sleep 86400 & SLEEPERS+=($!); done
sleep 1

# ---------------------------------------------------------------------------------------------
# 2. Side by side
say "side by side for ${BENCH_SECONDS}s: jitterscope record, atop -w, sadc -S XALL (1 s interval)"
declare -A PID START T0 T1 K0 K1 B0 B1
"$JITTERSCOPE" record --dir "$TMP/js" --interval 1s </dev/null >"$TMP/js.out" 2>"$TMP/js.log" &
PID[js]=$!; START[js]=$(now_s)
atop -w "$TMP/atop.raw" 1 </dev/null >"$TMP/atop.out" 2>"$TMP/atop.log" &
PID[atop]=$!; START[atop]=$(now_s)
"$SADC" -S XALL 1 "$TMP/sa.file" </dev/null >"$TMP/sadc.out" 2>"$TMP/sadc.log" &
PID[sadc]=$!; START[sadc]=$(now_s)
RUNNING+=("${PID[js]}" "${PID[atop]}" "${PID[sadc]}")
OUTPATH_js=$TMP/js; OUTPATH_atop=$TMP/atop.raw; OUTPATH_sadc=$TMP/sa.file
TOOLS=(js atop sadc)

sleep "$WARMUP"
for t in "${TOOLS[@]}"; do
    kill -0 "${PID[$t]}" 2>/dev/null || { cat "$TMP/$t.log" >&2; die "$t exited early"; }
done
PROCS_DURING=$(nprocs)
HOSTCPU0=$(host_cpu)
for t in "${TOOLS[@]}"; do
    p=OUTPATH_$t; T0[$t]=$(now_s); K0[$t]=$(tree_ticks "${PID[$t]}"); B0[$t]=$(bytes_of "${!p}")
done
sleep "$BENCH_SECONDS"
for t in "${TOOLS[@]}"; do
    p=OUTPATH_$t; T1[$t]=$(now_s); K1[$t]=$(tree_ticks "${PID[$t]}"); B1[$t]=$(bytes_of "${!p}")
done
HOSTCPU1=$(host_cpu)
PROCS_END=$(nprocs)
# Other `sleep` processes on the host (not started by this script) inflate the process count.
OTHER_SLEEPS=$(ps -C sleep -o pid= | awk -v mine=" ${SLEEPERS[*]} " 'index(mine, " " $1 " ") == 0 {n++} END {print n + 0}')
declare -A STOP_T
stop_wait "${PID[js]}" INT;   STOP_T[js]=$(now_s)
stop_wait "${PID[atop]}" TERM; STOP_T[atop]=$(now_s)
stop_wait "${PID[sadc]}" TERM; STOP_T[sadc]=$(now_s)
RUNNING=()

declare -A CPU CPU_LIFE BYTES MBH MBH_GROWTH
for t in "${TOOLS[@]}"; do
    p=OUTPATH_$t
    CPU[$t]=$(calc "(${K1[$t]} - ${K0[$t]}) / $HZ / (${T1[$t]} - ${T0[$t]}) * 100")
    CPU_LIFE[$t]=$(calc "${K1[$t]} / $HZ / (${T1[$t]} - ${START[$t]}) * 100")
    BYTES[$t]=$(bytes_of "${!p}")
    MBH[$t]=$(calc "${BYTES[$t]} / (${STOP_T[$t]} - ${START[$t]}) * 3600 / 1e6")
    MBH_GROWTH[$t]=$(calc "(${B1[$t]} - ${B0[$t]}) / (${T1[$t]} - ${T0[$t]}) * 3600 / 1e6")
    say "$t: cpu $(f3 "${CPU[$t]}")% of one core (lifetime $(f3 "${CPU_LIFE[$t]}")%), ${BYTES[$t]} bytes -> $(f2 "${MBH[$t]}") MB/hour (steady growth $(f2 "${MBH_GROWTH[$t]}"))"
done
read -r u0 n0 s0 i0 w0 q0 sq0 st0 <<<"$HOSTCPU0"
read -r u1 n1 s1 i1 w1 q1 sq1 st1 <<<"$HOSTCPU1"
HOST_BUSY=$(calc "(($u1+$n1+$s1+$q1+$sq1+$st1)-($u0+$n0+$s0+$q0+$sq0+$st0)) / (($u1+$n1+$s1+$i1+$w1+$q1+$sq1+$st1)-($u0+$n0+$s0+$i0+$w0+$q0+$sq0+$st0)) * 100")

# Samples each tool wrote, and what our recorder says about itself.
JS_FROM=${START[js]%.*}
"$JITTERSCOPE" dump --dir "$TMP/js" --from "$JS_FROM" --to now --format csv \
    --select 'self.cpu_pct,self.collect_ms,self.collector.*,self.proc_listing_skipped,self.processes_carried_forward,self.processes_stat_carried_forward,procs.count' >"$TMP/js-self.csv"
JS_SAMPLES=$("$JITTERSCOPE" dump --dir "$TMP/js" --from "$JS_FROM" --to now --select self.lateness_ms --format json | wc -l)
JS_SELF_CPU=$(awk -F, '$2 == "self.cpu_pct" && $3 != "" {s += $3; n++} END {printf "%.3f", n ? s / n : 0}' "$TMP/js-self.csv")
JS_COLLECT_MS=$(awk -F, '$2 == "self.collect_ms" && $3 != "" {s += $3; n++} END {printf "%.2f", n ? s / n : 0}' "$TMP/js-self.csv")
# How much of the per-process work the recorder could skip in this run (it depends on the host:
# a host that forks every second always lists /proc, busy processes are always read afresh).
JS_SKIPPED=$(awk -F, '$2 == "self.proc_listing_skipped" && $3 != "" {s += $3; n++} END {printf "%d of %d", s, n}' "$TMP/js-self.csv")
JS_CARRIED=$(awk -F, '$2 == "self.processes_carried_forward" && $3 != "" {s += $3; n++} END {printf "%.0f", n ? s / n : 0}' "$TMP/js-self.csv")
JS_STAT_CARRIED=$(awk -F, '$2 == "self.processes_stat_carried_forward" && $3 != "" {s += $3; n++} END {printf "%.0f", n ? s / n : 0}' "$TMP/js-self.csv")
JS_PROCS=$(awk -F, '$2 == "procs.count" && $3 != "" {s += $3; n++} END {printf "%.0f", n ? s / n : 0}' "$TMP/js-self.csv")
JS_COLLECTORS=$(awk -F, '$2 ~ /^self\.collector\./ && $3 != "" {s[$2] += $3; n[$2]++}
    END {for (k in s) printf "%.3f %s\n", s[k] / n[k], k}' "$TMP/js-self.csv" | sort -rn | head -8)
JS_SERIES=$("$JITTERSCOPE" dump --dir "$TMP/js" --from "$JS_FROM" --to now --format csv | awk -F, 'NR > 1 {t[$1]++} END {for (k in t) if (t[k] > m) m = t[k]; print m + 0}')
ATOP_SAMPLES=$(atop -r "$TMP/atop.raw" -P CPU 2>/dev/null | awk '$1 == "CPU" {n++} END {print n + 0}' || echo "?")
SADC_SAMPLES=$(sadf -p "$TMP/sa.file" -- -u 2>/dev/null | awk '/%user/ {n++} END {print n + 0}' || echo "?")
BYTES_PER_SAMPLE_JS=$(calc "${BYTES[js]} / ($JS_SAMPLES > 0 ? $JS_SAMPLES : 1)")

# ---------------------------------------------------------------------------------------------
# 2b. The same side by side on a busy host: several hundred processes that each run a little
# every second and ~50 short processes a second (bench/busy.sh), with jitterscope's breakdown
# and below when it is installed. The sleepers go first: the busy run makes its own host.
if ((${#SLEEPERS[@]})); then
    kill -TERM "${SLEEPERS[@]}" 2>/dev/null || true
    for p in "${SLEEPERS[@]}"; do wait "$p" 2>/dev/null || true; done
    SLEEPERS=()
fi
say "busy host side by side (bench/busy.sh)"
JITTERSCOPE=$JITTERSCOPE BUSY_OUT="$TMP/busy.md" BUSY_TARGETS="$TMP/busy-targets.md" \
    BUSY_SECONDS=${BUSY_SECONDS:-$BENCH_SECONDS} bash "$HERE/busy.sh"
BUSY_SECTION=$(cat "$TMP/busy.md")
BUSY_TARGET_ROWS=$(cat "$TMP/busy-targets.md" 2>/dev/null || true)

# 2c. Remote write: a recorder sending to VictoriaMetrics next to one that does not, the
# sender thread's own CPU, and the receiver stopped for 30 s.
say "remote write side by side (bench/fleet.sh)"
JITTERSCOPE=$JITTERSCOPE FLEET_OUT="$TMP/fleet.md" FLEET_TARGETS="$TMP/fleet-targets.md" \
    FLEET_SECONDS=${FLEET_SECONDS:-$BENCH_SECONDS} bash "$HERE/fleet.sh"
FLEET_SECTION=$(cat "$TMP/fleet.md")
FLEET_TARGET_ROWS=$(cat "$TMP/fleet-targets.md" 2>/dev/null || true)
say "fleet episodes over ClickHouse (bench/fleet_query.sh)"
JITTERSCOPE=$JITTERSCOPE FLEETQ_OUT="$TMP/fleetq.md" FLEETQ_TARGETS="$TMP/fleetq-targets.md" \
    bash "$HERE/fleet_query.sh"
FLEET_SECTION+=$'\n\n'$(cat "$TMP/fleetq.md")
FLEET_TARGET_ROWS+=$'\n'$(cat "$TMP/fleetq-targets.md" 2>/dev/null || true)
say "the ClickHouse pusher side by side (bench/fleet_pusher.sh)"
JITTERSCOPE=$JITTERSCOPE FLEETP_OUT="$TMP/fleetp.md" bash "$HERE/fleet_pusher.sh"
FLEET_SECTION+=$'\n\n'$(cat "$TMP/fleetp.md")
say "the recorder's memory across an episode close (bench/memory.sh)"
JITTERSCOPE=$JITTERSCOPE MEM_OUT="$TMP/memory.md" bash "$HERE/memory.sh"
FLEET_SECTION+=$'\n\n'$(cat "$TMP/memory.md")

# ---------------------------------------------------------------------------------------------
# 3. Saturation: memory-limited cgroup thrashing with stress-ng --vm, plus stress-ng --cpu
say "saturation run for ${STRESS_SECONDS}s"
if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
    CGDIR=/sys/fs/cgroup/memory/jitterscope-bench.$$
    mkdir "$CGDIR"
    echo "$STRESS_MEM" >"$CGDIR/memory.limit_in_bytes"
    CG_KIND="cgroup v1 memory.limit_in_bytes=$STRESS_MEM"
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo +memory >/sys/fs/cgroup/cgroup.subtree_control
    CGDIR=/sys/fs/cgroup/jitterscope-bench.$$
    mkdir "$CGDIR"
    echo "$STRESS_MEM" >"$CGDIR/memory.max"
    echo 0 >"$CGDIR/memory.swap.max" 2>/dev/null || true
    CG_KIND="cgroup v2 memory.max=$STRESS_MEM"
else
    die "no memory cgroup controller (v1 or v2) to confine stress-ng --vm"
fi
"$JITTERSCOPE" record --dir "$TMP/js-stress" --interval 1s </dev/null >/dev/null 2>"$TMP/js-stress.log" &
SPID=$!; RUNNING+=("$SPID"); SSTART=$(now_s)
sleep "$WARMUP"
kill -0 "$SPID" 2>/dev/null || { cat "$TMP/js-stress.log" >&2; die "recorder exited early"; }
SK0=$(tree_ticks "$SPID"); ST0=$(now_s); SHOST0=$(host_cpu)
bash -c 'echo $$ >"$1/cgroup.procs" && exec stress-ng --vm 2 --vm-bytes 90% --vm-keep --timeout "$2"s' \
    _ "$CGDIR" "$STRESS_SECONDS" >"$TMP/stress-vm.log" 2>&1 &
VMPID=$!; RUNNING+=("$VMPID")
stress-ng --cpu 2 --timeout "${STRESS_SECONDS}s" >"$TMP/stress-cpu.log" 2>&1 &
CPUPID=$!; RUNNING+=("$CPUPID")
wait "$VMPID" || true
wait "$CPUPID" || true
SK1=$(tree_ticks "$SPID"); ST1=$(now_s); SHOST1=$(host_cpu)
sleep 2
stop_wait "$SPID" INT
RUNNING=()
OOM_KILLS=$(awk '/oom_kill / {print $2}' "$CGDIR/memory.oom_control" "$CGDIR/memory.events" 2>/dev/null | head -1 || true)
for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$CGDIR" 2>/dev/null && break; sleep 0.5; done
[ -d "$CGDIR" ] || CGDIR=""

read -r u0 n0 s0 i0 w0 q0 sq0 st0 <<<"$SHOST0"
read -r u1 n1 s1 i1 w1 q1 sq1 st1 <<<"$SHOST1"
STRESS_TOTAL=$(calc "($u1+$n1+$s1+$i1+$w1+$q1+$sq1+$st1)-($u0+$n0+$s0+$i0+$w0+$q0+$sq0+$st0)")
STRESS_BUSY=$(calc "(($u1+$n1+$s1+$q1+$sq1+$st1)-($u0+$n0+$s0+$q0+$sq0+$st0)) / $STRESS_TOTAL * 100")
STRESS_SYS=$(calc "(($s1+$q1+$sq1)-($s0+$q0+$sq0)) / $STRESS_TOTAL * 100")
STRESS_CPU=$(calc "($SK1 - $SK0) / $HZ / ($ST1 - $ST0) * 100")

"$JITTERSCOPE" dump --dir "$TMP/js-stress" --from "${SSTART%.*}" --to now \
    --select 'self.lateness_ms,self.ticks_missed,self.samples_dropped' --format json >"$TMP/js-stress.json"
# Only samples taken while the stressors ran (with one sample of margin on each side).
read -r GAP_MAX_MS LATE_MAX_MS NSTRESS MISSED DROPPED < <(
    awk -v a="$ST0" -v b="$ST1" '
        { ts = ""; if (match($0, /"ts_ns":[0-9]+/)) ts = substr($0, RSTART + 8, RLENGTH - 8)
          late = 0; if (match($0, /"self.lateness_ms":[-0-9.eE+]+/)) late = substr($0, RSTART + 19, RLENGTH - 19) + 0
          miss = 0; if (match($0, /"self.ticks_missed":[0-9.eE+]+/)) miss = substr($0, RSTART + 19, RLENGTH - 19) + 0
          drop = 0; if (match($0, /"self.samples_dropped":[0-9.eE+]+/)) drop = substr($0, RSTART + 22, RLENGTH - 22) + 0
          t = ts / 1e9
          if (t < a - 1.5 || t > b + 1.5) next
          n++
          if (prev != "") { g = (t - prev) * 1000; if (g > gmax) gmax = g }
          prev = t
          if (late > lmax) lmax = late
          if (miss > mmax) mmax = miss
          if (drop > dmax) dmax = drop
        }
        END { printf "%.1f %.1f %d %d %d\n", gmax, lmax, n, mmax, dmax }' "$TMP/js-stress.json")
say "saturation: max gap ${GAP_MAX_MS} ms, max lateness ${LATE_MAX_MS} ms, ${NSTRESS} samples, recorder cpu $(f3 "$STRESS_CPU")%, host busy $(f2 "$STRESS_BUSY")% (kernel $(f2 "$STRESS_SYS")%)"

# ---------------------------------------------------------------------------------------------
# 4. Read-back from a synthesized 24 h store
if [ -n "${SYNTH_STORE:-}" ]; then
    SYNTH=$SYNTH_STORE
else
    say "building the synth_store example"
    (cd "$REPO" && cargo build --release -q -p jitterscope-diagnose --example synth_store)
    SYNTH=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/synth_store
    case $SYNTH in /*) ;; *) SYNTH=$REPO/$SYNTH ;; esac
fi
say "synthesizing a ${SYNTH_HOURS} h store from the ${BENCH_SECONDS} s recording"
"$SYNTH" "$TMP/js" "$TMP/js24" "$SYNTH_HOURS" >"$TMP/synth.out"
kv() { awk -F= -v k="$1" '$1 == k {print $2}' "$TMP/synth.out"; }
SYN_RECORDS=$(kv records); SYN_BYTES=$(kv bytes); SYN_MBH=$(kv mb_per_hour)
SYN_RATIO=$(kv compression_ratio); SYN_SRC=$(kv source_samples); SYN_PAYLOAD=$(kv source_payload_bytes_avg)
SYN_WRITE_S=$(kv write_seconds)
FIRST=$(kv first_ts_ns); LAST=$(kv last_ts_ns)
MID=$(( (FIRST + (LAST - FIRST) / 2) / 1000000000 ))
MID_TO=$((MID + 60))

HAVE_HYPERFINE=0
command -v hyperfine >/dev/null && HAVE_HYPERFINE=1
time_read() { # label, then command; prints the median ms
    local label=$1; shift
    if [ "$HAVE_HYPERFINE" = 1 ]; then
        hyperfine -N --warmup 1 --runs "$READ_RUNS" --export-json "$TMP/hf-$label.json" "$*" >/dev/null 2>&1
        awk '/"median"/ {gsub(/[^0-9.eE-]/, "", $2); printf "%.1f", $2 * 1000; exit}' "$TMP/hf-$label.json"
    else
        local i s e
        "$@" >/dev/null
        for i in $(seq "$READ_RUNS"); do
            s=$(date +%s%N); "$@" >/dev/null; e=$(date +%s%N); echo $(( (e - s) / 1000 ))
        done | sort -n | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m / 1000}'
    fi
}
say "timing one-minute reads from the middle of the store"
READ_ALL_MS=$(time_read all "$JITTERSCOPE" dump --dir "$TMP/js24" --from "$MID" --to "$MID_TO" --format csv)
READ_CG_MS=$(time_read cgroup "$JITTERSCOPE" dump --dir "$TMP/js24" --from "$MID" --to "$MID_TO" --format csv --select 'cgroup.*')
READ_ONE_MS=$(time_read one "$JITTERSCOPE" dump --dir "$TMP/js24" --from "$MID" --to "$MID_TO" --format csv --select self.lateness_ms)
READ_ALL_ROWS=$("$JITTERSCOPE" dump --dir "$TMP/js24" --from "$MID" --to "$MID_TO" --format csv | wc -l)
READ_CG_ROWS=$("$JITTERSCOPE" dump --dir "$TMP/js24" --from "$MID" --to "$MID_TO" --format csv --select 'cgroup.*' | wc -l)
READ_SAMPLES=$("$JITTERSCOPE" dump --dir "$TMP/js24" --from "$MID" --to "$MID_TO" --format json --select self.lateness_ms | wc -l)
READ_METHOD=$([ "$HAVE_HYPERFINE" = 1 ] && echo "hyperfine -N, 1 warm-up + $READ_RUNS runs, median" || echo "date +%s%N around $READ_RUNS runs after 1 warm-up, median")
say "read 1 min: all series ${READ_ALL_MS} ms ($READ_ALL_ROWS rows), cgroup.* ${READ_CG_MS} ms ($READ_CG_ROWS rows), one series ${READ_ONE_MS} ms; 24 h store ${SYN_BYTES} bytes = ${SYN_MBH} MB/hour"
# Ten minutes of stack samples from the middle of the store as folded stacks (the recording ran
# the sampler, so every synthesized sample carries a one-second slice of stacks).
FLAME_TO=$((MID + 600))
if "$JITTERSCOPE" flame --dir "$TMP/js24" --from "$MID" --to "$FLAME_TO" --folded >"$TMP/flame10.folded" 2>"$TMP/flame10.log"; then
    FLAME10_MS=$(time_read flame10 "$JITTERSCOPE" flame --dir "$TMP/js24" --from "$MID" --to "$FLAME_TO" --folded)
    FLAME10_LINES=$(wc -l <"$TMP/flame10.folded")
    FLAME10_SAMPLES=$(awk '{s += $NF} END {print s + 0}' "$TMP/flame10.folded")
    OK_FLAME=$(awk -v m="$FLAME10_MS" 'BEGIN { print (m < 1000) ? "**met**" : "**missed**" }')
    FLAME10="$FLAME10_MS ms ($FLAME10_LINES folded lines, $FLAME10_SAMPLES stack samples)"
    say "flame --folded over 10 min: ${FLAME10_MS} ms ($FLAME10_LINES lines, $FLAME10_SAMPLES samples)"
else
    FLAME10="n/a: $(tail -1 "$TMP/flame10.log")"
    OK_FLAME="n/a"
    say "flame over 10 min: $FLAME10"
fi

# ---------------------------------------------------------------------------------------------
# 5. BPF tracer overhead: fixed-work workloads with and without the tracers, their map memory
# (bench/tracers.sh; it cleans up after itself and says SKIPPED when it cannot measure).
# Twice: as shipped (the on-demand tracers wait detached for their symptom, and some workloads
# are such symptoms; each workload first runs 3 s untimed so that they are in the state it puts
# them in, and the first starts 4 s after the recorder, past its first census look), and with
# them attached for the whole run (their full cost).
JITTERSCOPE=$JITTERSCOPE TRACER_OUT=$TMP/tracers.md TRACER_TARGETS=$TMP/tracers-targets.md \
    TRACER_LABEL="default, tracers on demand" TRACER_LEAD_IN=3 TRACER_SETTLE=4 bash "$HERE/tracers.sh"
JITTERSCOPE=$JITTERSCOPE TRACER_OUT=$TMP/tracers-always.md TRACER_TARGETS=$TMP/tracers-always-targets.md \
    TRACER_LABEL="--on-demand-tracers always" TRACER_WITH_ARGS="--on-demand-tracers always" TRACER_STATS=0 \
    bash "$HERE/tracers.sh"
# The census's own cost: all tracers on demand either way, the census at one interval in two
# against none; scaled to its default of one interval in sixty (cost is linear in attached time).
JITTERSCOPE=$JITTERSCOPE TRACER_OUT=$TMP/tracers-census.md TRACER_TARGETS=$TMP/tracers-census-targets.md \
    TRACER_LABEL="the census (--census-every 1s against 0s, scaled to 60s)" \
    TRACER_WITHOUT_ARGS="--census-every 0s" TRACER_WITH_ARGS="--census-every 1s" TRACER_STATS=0 \
    TRACER_SCALE=0.0333 TRACER_SCALE_NOTE="the census measured at one interval in two (--census-every 1s), scaled to its default, one in sixty (2/60)" \
    bash "$HERE/tracers.sh"
TRACER_SECTION="$(cat "$TMP/tracers.md")

$(cat "$TMP/tracers-always.md")

$(cat "$TMP/tracers-census.md")"
TRACER_TARGET_ROWS="$(cat "$TMP/tracers-targets.md")
$(cat "$TMP/tracers-always-targets.md")
$(cat "$TMP/tracers-census-targets.md")"

# ---------------------------------------------------------------------------------------------
# 6. Stack sampler: `record` with and without it against `perf record -F 99 -g -a`, side by side
# under a mixed load (bench/profile.sh; it cleans up after itself and says SKIPPED when it cannot
# measure).
JITTERSCOPE=$JITTERSCOPE PROFILE_OUT=$TMP/profile.md PROFILE_TARGETS=$TMP/profile-targets.md \
    bash "$HERE/profile.sh"
PROFILE_SECTION=$(cat "$TMP/profile.md")

# ---------------------------------------------------------------------------------------------
# Diagnosis read-back: diagnose over 1 h and over 10 minutes of a 24 h store, 500 processes in
# 50 cgroups; events over 24 h; the readers' peak RSS (bench/diagnose.sh).
say "diagnosis read-back (bench/diagnose.sh)"
JITTERSCOPE=$JITTERSCOPE SYNTH_STORE=$SYNTH DIAGNOSE_OUT="$TMP/diagnose.md" \
    DIAGNOSE_TARGETS="$TMP/diagnose-targets.md" bash "$HERE/diagnose.sh"
DIAGNOSE_SECTION=$(cat "$TMP/diagnose.md")
PROFILE_TARGET_ROWS=$(cat "$TMP/profile-targets.md")
DIAGNOSE_TARGET_ROWS=$(cat "$TMP/diagnose-targets.md" 2>/dev/null || true)

# False alarms on a busy, healthy host: the 10-minute soak (bench/soak.sh).
say "false alarms (bench/soak.sh)"
JITTERSCOPE=$JITTERSCOPE SOAK_OUT="$TMP/soak.md" SOAK_TARGETS="$TMP/soak-targets.md" \
    bash "$HERE/soak.sh"
SOAK_SECTION=$(cat "$TMP/soak.md")
SOAK_TARGET_ROWS=$(cat "$TMP/soak-targets.md" 2>/dev/null || true)

# memleak: census speed and the target's slowdown while it is read (bench/memleak.sh).
say "memleak census (bench/memleak.sh)"
JITTERSCOPE=$JITTERSCOPE MEMLEAK_OUT="$TMP/memleak.md" MEMLEAK_TARGETS="$TMP/memleak-targets.md" \
    bash "$HERE/memleak.sh"
MEMLEAK_SECTION=$(cat "$TMP/memleak.md")
MEMLEAK_TARGET_ROWS=$(cat "$TMP/memleak-targets.md" 2>/dev/null || true)

# The views: what serve's first screen and a selection cost over an hour (bench/views.sh).
say "views read-back (bench/views.sh)"
JITTERSCOPE=$JITTERSCOPE SYNTH_STORE=${SYNTH_STORE:-} VIEWS_OUT="$TMP/views.md" \
    bash "$HERE/views.sh"
VIEWS_SECTION=$(cat "$TMP/views.md")

# serve under load: 200 heavy requests and 1000 idle sockets on a 24 h store (bench/serve.sh).
say "serve under load (bench/serve.sh)"
JITTERSCOPE=$JITTERSCOPE SYNTH_STORE=${SYNTH_STORE:-} SERVE_OUT="$TMP/serve.md" \
    SERVE_TARGETS="$TMP/serve-targets.md" bash "$HERE/serve.sh"
SERVE_SECTION=$(cat "$TMP/serve.md")
SERVE_TARGET_ROWS=$(cat "$TMP/serve-targets.md" 2>/dev/null || true)

# ---------------------------------------------------------------------------------------------
# 7. Report
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
met() { case $1 in *n/a*) echo "n/a"; return;; esac; awk "BEGIN { print (($1) ? \"**met**\" : \"**missed**\") }"; }
R_CPU=$(ratio "${CPU[js]}" "${CPU[atop]}")
R_BYTES=$(ratio "${MBH[js]}" "${MBH[atop]}")
R_BYTES24=$(ratio "$SYN_MBH" "${MBH[atop]}")
R_CPU_SADC=$(ratio "${CPU[sadc]}" "${CPU[atop]}")
R_BYTES_SADC=$(ratio "${MBH[sadc]}" "${MBH[atop]}")
OK_CPU=$(met "$R_CPU <= 0.25")
OK_BYTES=$(met "$R_BYTES <= 0.1")
OK_BYTES24=$(met "$R_BYTES24 <= 0.1")
OK_READ=$(met "$READ_ALL_MS < 50 && $READ_CG_MS < 50")
OK_GAP=$(met "$GAP_MAX_MS <= 1500")
CPU_SHORT=$(awk -v a="${CPU[js]}" -v b="${CPU[atop]}" 'BEGIN { t = b / 4; if (a > t) printf "%.3f points (%.1fx the allowed %.3f%%)", a - t, a / t, t; else printf "within by %.3f points", t - a }')
if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then ATOP_CG="v2 only (none here: this host's controllers are v1)"; else ATOP_CG="v2 only"; fi
CGROUP_COUNT=$(find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | wc -l)
JS_VERSION=$("$JITTERSCOPE" --version 2>/dev/null | awk '{print $2}')
CPU_MODEL=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)

mkdir -p "$(dirname "$OUT")"
{
cat <<EOF
# Benchmarks

Generated by \`bench/run.sh\` — do not edit by hand; re-run it instead. Numbers are from one run
on one host, as measured.

## How to run

\`\`\`sh
cargo build --release -p jitterscope
sudo make bench                                   # = JITTERSCOPE=target/release/jitterscope bash bench/run.sh
sudo BENCH_SECONDS=300 BENCH_KEEP=1 bash bench/run.sh   # longer window, keep the raw files
\`\`\`

Needs root. Installs \`atop sysstat stress-ng\` (and \`bpftool\` for the tracer section,
\`linux-perf\` for the stack sampler section) with apt if missing (\`hyperfine\` is used if present),
and builds below into /opt/below once if it is missing (\`BENCH_BELOW=0\` skips it).
Starts ${EXTRA_PROCS} extra \`sleep\` processes, stops atop's own services for the duration, and
removes everything it created (processes, the stress cgroup, temporary stores) on exit.

## Method

- **Side by side**: \`jitterscope record --interval 1s\`, \`atop -w <file> 1\` and
  \`sadc -S XALL 1 <file>\` start together and run at the same time, at their default priorities
  (atop and jitterscope: nice −20 and mlock; sadc: nice 0). After a ${WARMUP} s warm-up a window of
  ${BENCH_SECONDS} s is measured.
- **CPU % of one core** = (utime + stime + cutime + cstime of the recorder and of all its live
  descendants, \`/proc/<pid>/stat\` fields 14–17, at the end of the window − at its start) ÷ the
  window's wall time. Clock ticks are 1/${HZ} s, so over ${BENCH_SECONDS} s the resolution is
  $(calc "100 / $HZ / $BENCH_SECONDS" | awk '{printf "%.3f", $1}') % of a core. The lifetime figure
  (start-up included) is given too. Work the kernel does on a recorder's behalf in other contexts
  (e.g. process accounting records written by exiting processes for atop) is not counted.
- **MB/hour** = final size of the recorder's output (atop's raw file, sadc's data file, the whole
  jitterscope store directory: segments, indexes, lock file) ÷ the recorder's run time × 3600,
  with MB = 10⁶ bytes. Headers and one-off start-up records are therefore included, which slightly
  favours nobody. The "steady growth" column is the growth during the measured window only.
- **Saturation**: a second recorder runs while \`stress-ng --vm 2 --vm-bytes 90% --vm-keep\` runs
  inside a memory cgroup limited to ${STRESS_MEM} (${CG_KIND%% *} here; no swap, so the workers are
  OOM-killed and restarted in a loop) and \`stress-ng --cpu 2\` runs outside it, for
  ${STRESS_SECONDS} s. Max gap is the largest difference of \`ts_ns\` between consecutive samples taken
  while the stressors ran (\`jitterscope dump --select self.lateness_ms --format json\`); lateness is
  how late the recorder woke up against its schedule (\`self.lateness_ms\`).
- **Read-back**: \`crates/diagnose/examples/synth_store.rs\` cycles the real samples of the
  ${BENCH_SECONDS} s recording into a ${SYNTH_HOURS} h store (one sample per second, re-stamped
  \`ts_ns\` and \`mono_ns\`, product codec and store writer at default settings). Then
  \`jitterscope dump --from T --to T+60s --format csv >/dev/null\` with T in the middle of the store is
  timed (${READ_METHOD}; page cache warm), once for all series and once with \`--select 'cgroup.*'\`;
  and \`jitterscope flame --from T --to T+10m --folded >/dev/null\` (ten minutes of one-second
  slices of stack samples, each slice as the recording's sampler cut it).

## Host

| | |
|---|---|
| date | $(date -u '+%Y-%m-%d %H:%M UTC') |
| kernel | $(uname -r) |
| CPUs | $(nproc) ($CPU_MODEL) |
| memory | $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) |
| processes during the run | $PROCS_DURING at the start of the window, $PROCS_END at its end ($EXTRA_PROCS of them sleepers started by this script; $OTHER_SLEEPS other \`sleep\` processes were already on the host) |
| cgroup directories | $CGROUP_COUNT under /sys/fs/cgroup |
| host CPU busy during the window | $(f2 "$HOST_BUSY") % |
| jitterscope | $JS_VERSION (tree at git $GIT_REV when the run started; binary built $BIN_MTIME) |
| peers | atop $ATOP_VERSION, sysstat $SYSSTAT_VERSION, stress-ng $STRESS_VERSION |

## Side by side on a quiet host, 1 s interval, ${BENCH_SECONDS} s window

| tool | CPU % of one core | (lifetime) | MB/hour | (steady growth) | CPU vs atop | bytes vs atop | samples | per-process | cgroups |
|---|---:|---:|---:|---:|---:|---:|---:|---|---|
| jitterscope record | $(f3 "${CPU[js]}") | $(f3 "${CPU_LIFE[js]}") | $(f2 "${MBH[js]}") | $(f2 "${MBH_GROWTH[js]}") | $R_CPU | $R_BYTES | $JS_SAMPLES | yes | yes (v1 and v2) |
| atop -w | $(f3 "${CPU[atop]}") | $(f3 "${CPU_LIFE[atop]}") | $(f2 "${MBH[atop]}") | $(f2 "${MBH_GROWTH[atop]}") | 1.00 | 1.00 | $ATOP_SAMPLES | yes | $ATOP_CG |
| sadc -S XALL | $(f3 "${CPU[sadc]}") | $(f3 "${CPU_LIFE[sadc]}") | $(f2 "${MBH[sadc]}") | $(f2 "${MBH_GROWTH[sadc]}") | $R_CPU_SADC | $R_BYTES_SADC | $SADC_SAMPLES | no | no |

Bytes written: jitterscope ${BYTES[js]}, atop ${BYTES[atop]}, sadc ${BYTES[sadc]}
(jitterscope: $(f2 "$BYTES_PER_SAMPLE_JS") bytes per stored sample of ${JS_SERIES} series each).

jitterscope's own view of the same run: \`self.cpu_pct\` mean $JS_SELF_CPU %, \`self.collect_ms\` mean
$JS_COLLECT_MS ms per sample. Work it could skip, which depends on the host (see README): the /proc
listing was skipped in $JS_SKIPPED samples (no fork on the host since the previous sample); of
$JS_PROCS processes per sample on average, $JS_CARRIED had a main thread that had not run (status
carried forward) and $JS_STAT_CARRIED were single-threaded, idle and unchanged in RSS (stat carried
forward too). A host that forks every second, or whose processes are busy, does not get these
savings. Costliest collectors (mean ms per sample, \`self.collector.<collector>_ms\`):

\`\`\`
$JS_COLLECTORS
\`\`\`

$BUSY_SECTION

$FLEET_SECTION

## Saturation (${STRESS_SECONDS} s, both cores busy)

| | |
|---|---|
| host CPU busy / in kernel (system+irq+softirq) | $(f2 "$STRESS_BUSY") % / $(f2 "$STRESS_SYS") % |
| OOM kills in the stress cgroup | ${OOM_KILLS:-unknown} |
| samples taken during the run | $NSTRESS |
| **max gap between consecutive samples** | **$GAP_MAX_MS ms** (target ≤ 1500 ms) |
| max lateness (\`self.lateness_ms\`) | $LATE_MAX_MS ms |
| ticks missed / samples dropped | $MISSED / $DROPPED |
| recorder CPU % of one core during the run | $(f3 "$STRESS_CPU") |

## Read-back from a ${SYNTH_HOURS} h store

| | |
|---|---|
| store | $SYN_RECORDS samples (cycled from $SYN_SRC real ones, mean payload $SYN_PAYLOAD bytes before compression), $SYN_BYTES bytes on disk, written in $SYN_WRITE_S s |
| **bytes/hour of the format at scale** | **$SYN_MBH MB/hour** (compression ${SYN_RATIO}x; $R_BYTES24 of atop's) |
| **one minute, all series, CSV** | **$READ_ALL_MS ms** ($READ_ALL_ROWS lines, $READ_SAMPLES samples) |
| **one minute, \`--select 'cgroup.*'\`, CSV** | **$READ_CG_MS ms** ($READ_CG_ROWS lines) |
| one minute, \`--select self.lateness_ms\` (decompress + decode every sample, almost no output) | $READ_ONE_MS ms |
| **ten minutes of stack samples, \`flame --folded\`** | **$FLAME10** |

$TRACER_SECTION

$PROFILE_SECTION

$DIAGNOSE_SECTION

$SOAK_SECTION

$MEMLEAK_SECTION

$VIEWS_SECTION

$SERVE_SECTION

## Targets

| target | measured | |
|---|---|---|
| recorder CPU ≤ 1/4 of atop's on the quiet host, with all processes and cgroups | $(f3 "${CPU[js]}") % vs atop $(f3 "${CPU[atop]}") % = $R_CPU | $OK_CPU |
| bytes/hour ≤ 0.1× atop's raw file (quiet host, ${BENCH_SECONDS} s scaled) | $(f2 "${MBH[js]}") vs $(f2 "${MBH[atop]}") MB/hour = $R_BYTES | $OK_BYTES |
| bytes/hour ≤ 0.1× atop's raw file (${SYNTH_HOURS} h store) | $SYN_MBH vs $(f2 "${MBH[atop]}") MB/hour = $R_BYTES24 | $OK_BYTES24 |
| reading one minute back from a ${SYNTH_HOURS} h store < 50 ms | $READ_ALL_MS ms (all), $READ_CG_MS ms (cgroup.*) | $OK_READ |
| max sample gap under saturation ≤ 1.5 s | $GAP_MAX_MS ms | $OK_GAP |
| \`flame\` over a 10-minute window < 1 s (${SYNTH_HOURS} h store) | $FLAME10 | $OK_FLAME |
$BUSY_TARGET_ROWS
$FLEET_TARGET_ROWS
$TRACER_TARGET_ROWS
$PROFILE_TARGET_ROWS
$DIAGNOSE_TARGET_ROWS
$SOAK_TARGET_ROWS
$MEMLEAK_TARGET_ROWS
$SERVE_TARGET_ROWS

CPU against the target: $CPU_SHORT.
EOF
} >"$OUT"
say "wrote $OUT"
