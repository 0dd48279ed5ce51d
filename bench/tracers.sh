#!/usr/bin/env bash
# Overhead of jitterscope's BPF tracers: the runtime of workloads with a fixed amount of work while
# `jitterscope record` runs with all tracers against the same while `jitterscope record
# --no-tracers` runs, interleaved; plus the kernel memory of the tracers' maps. Both sides run the
# recorder, so the difference is the tracers alone. Writes a Markdown section for
# docs/BENCHMARKS.md (bench/run.sh calls this and embeds it). Alone:
#
#   sudo JITTERSCOPE=target/release/jitterscope bash bench/tracers.sh          # section on stdout
#   sudo TRACER_SET=lookups TRACER_WORKLOADS=stat bash bench/tracers.sh        # one tracer, one workload
#
# Environment (all optional):
#   JITTERSCOPE       release binary (default target/release/jitterscope)
#   TRACER_OUT        where to write the Markdown section (default stdout)
#   TRACER_TARGETS    where to write rows for the report's "Targets" table (default: nowhere)
#   TRACER_REPS       rounds per side (default 5); each round runs every workload once
#   TRACER_SET        tracers of the "with" side, as for `record --tracers` (default: all)
#   TRACER_WITH_ARGS  more `record` options for the "with" side (e.g. `--on-demand-tracers always`)
#   TRACER_WITHOUT_ARGS  `record` options of the "without" side instead of `--no-tracers` (e.g.
#                     `--census-every 0s` with TRACER_WITH_ARGS=`--census-every 1s`: the census's
#                     own cost, at one interval in two)
#   TRACER_SCALE      a factor from the measured slowdown to the one the target is about, with
#   TRACER_SCALE_NOTE what it stands for (the census at one interval in two, 1s, scaled to its
#                     default of one in sixty: 2/60; the cost is linear in the time attached)
#   TRACER_LABEL      what the "with" side is, for the section title and the targets rows
#   TRACER_WORKLOADS  comma-separated subset of switch,madvise,malloc,stat,reclaim (default all five)
#   TRACER_STATS=0    skip the pass that reads each tracer's in-kernel run time (bpf_stats)
#   TRACER_LEAD_IN    seconds each workload first runs untimed (default 0), so that the on-demand
#                     tracers are in the state that workload puts them in, not the one the
#                     workload before it left (a tracer attached by one storm stays attached for
#                     up to 30 s); bench/run.sh sets 3 for the as-shipped pass
#   TRACER_SETTLE     seconds between the recorder's first sample and the first workload (default
#                     1); bench/run.sh sets 4 for the as-shipped pass, past the census look that
#                     every detached on-demand tracer gets in the recorder's first seconds (its
#                     own cost is the census pass's)
#   MADVISE_OPS, MALLOC_OPS, STAT_CALLS, RECLAIM_MB, RECLAIM_PASSES, RECLAIM_LIMIT, RECLAIM_DIR,
#   SWITCH_OPS
#                     the fixed work (defaults below)
#   BENCH_KEEP=1      keep the temporary directory
#
# Without root (or when no tracer loads) it prints "SKIPPED: <reason>", writes a section saying so
# and exits 0. Everything it starts (recorders, workloads, the memory cgroup, files) is removed on
# exit, Ctrl-C included.
set -euo pipefail
export LC_ALL=C   # sort and join must agree on the order

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
REPS=${TRACER_REPS:-5}
TRACER_SET=${TRACER_SET:-}
# The context-switch storm first: tlb and madvise, attached by the TLB storms of madvise and
# malloc, stay attached 30 s after them, which in a round of back-to-back workloads would measure
# that hold rather than this workload.
WORKLOADS=${TRACER_WORKLOADS:-switch,madvise,malloc,stat,reclaim}
TRACER_STATS=${TRACER_STATS:-1}
LEAD_IN=${TRACER_LEAD_IN:-0}
OUT=${TRACER_OUT:-/dev/stdout}
TARGETS_OUT=${TRACER_TARGETS:-/dev/null}
# The fixed work of each workload, chosen for ~2.5 s each on a 2-CPU VM.
MADVISE_OPS=${MADVISE_OPS:-160}           # stress-ng --madvise 2: ~16k madvise + msync calls per op
MALLOC_OPS=${MALLOC_OPS:-1200000}         # stress-ng --malloc 2 --malloc-pthreads 2 --malloc-max 1024
STAT_CALLS=${STAT_CALLS:-6000000}         # per process, 2 processes: stat() failing with ENOENT
RECLAIM_MB=${RECLAIM_MB:-512}             # per reader, 2 readers
# The worst case for the scheduler tracepoints: every message between two processes on one CPU
# is a wake-up and a context switch (~1.5 us each here), and runqlat runs at both.
SWITCH_OPS=${SWITCH_OPS:-1500000}         # stress-ng --switch 1 on CPU 0
RECLAIM_PASSES=${RECLAIM_PASSES:-3}       # reads of each reader's file
RECLAIM_LIMIT=${RECLAIM_LIMIT:-64M}       # memory limit of the readers' cgroup
RECLAIM_DIR=${RECLAIM_DIR:-/var/tmp}      # a disk file system (not tmpfs) for the readers' files
MAP_TARGET_MIB=16
SLOWDOWN_TARGET=2
SETTLE=${TRACER_SETTLE:-1}                # seconds after the recorder's first sample

say() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { say "error: $*"; exit 1; }
calc() { awk "BEGIN { printf \"%s\", $* }"; }

title="## BPF tracer overhead${TRACER_LABEL:+: $TRACER_LABEL}"
skip() { # reason: no measurement possible; say so in the report and succeed
    say "SKIPPED: $*"
    printf '%s\n\nSKIPPED: %s\n' "$title" "$*" >"$OUT"
    printf '| BPF tracers: workload slowdown ≤ %s %%, map memory ≤ %s MiB | SKIPPED: %s | n/a |\n' \
        "$SLOWDOWN_TARGET" "$MAP_TARGET_MIB" "$*" >"$TARGETS_OUT"
    exit 0
}

[ "$(id -u)" = 0 ] || skip "not root: loading BPF tracers, the memory cgroup and bpf_stats need root"
case $JITTERSCOPE in /*) ;; *) [ -e "$JITTERSCOPE" ] || JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
[ -x "$JITTERSCOPE" ] || die "no executable at $JITTERSCOPE (build with: cargo build --release -p jitterscope)"
JITTERSCOPE=$(realpath "$JITTERSCOPE")
GIT_REV=$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)
BIN_MTIME=$(date -u -r "$JITTERSCOPE" '+%Y-%m-%d %H:%M UTC')

IFS=, read -r -a WL <<<"$WORKLOADS"
for w in "${WL[@]}"; do
    case $w in madvise|malloc|stat|reclaim|switch) ;; *) die "unknown workload '$w' (madvise, malloc, stat, reclaim, switch)" ;; esac
done
wants() { case ",$WORKLOADS," in *",$1,"*) return 0 ;; esac; return 1; }

# ---------------------------------------------------------------------------------------------
# Tools (installed the way bench/run.sh installs its own)
need=()
command -v stress-ng >/dev/null || need+=(stress-ng)
command -v bpftool >/dev/null || need+=(bpftool)
if ((${#need[@]})); then
    say "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null ||
        say "warning: could not install ${need[*]}"
fi
command -v stress-ng >/dev/null || die "stress-ng not found"
HAVE_BPFTOOL=0; command -v bpftool >/dev/null && HAVE_BPFTOOL=1
if wants stat && ! command -v perl >/dev/null; then die "perl not found (the stat workload is a perl loop)"; fi

# Which tracers load, and the most memory their maps may take.
CHECK=$("$JITTERSCOPE" tracers --check --json 2>&1 || true)
json_field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" | tr -d '"'; }
LOADING=$(printf '%s\n' "$CHECK" | awk '/"loads":true/' | json_field tracer | paste -sd, -)
NOT_LOADING=$(printf '%s\n' "$CHECK" | awk '/"loads":false/' | json_field tracer | paste -sd, -)
[ -n "$LOADING" ] || skip "no tracer loads on this host (\`jitterscope tracers --check\`: $(printf '%s' "$CHECK" | head -c 300 | tr '\n' ' '))"
WITH_ARGS=()
if [ -n "$TRACER_SET" ]; then WITH_ARGS=(--tracers "$TRACER_SET"); fi
read -r -a EXTRA <<<"${TRACER_WITH_ARGS:-}"
WITH_ARGS+=(${EXTRA[@]+"${EXTRA[@]}"})
LABEL=${TRACER_LABEL:-}
SCALE=${TRACER_SCALE:-1}
SCALE_NOTE=${TRACER_SCALE_NOTE:-}
WITHOUT_ARGS=(--no-tracers)
if [ -n "${TRACER_WITHOUT_ARGS:-}" ]; then read -r -a WITHOUT_ARGS <<<"$TRACER_WITHOUT_ARGS"; fi

# ---------------------------------------------------------------------------------------------
# State and cleanup
TMP=$(mktemp -d /tmp/jitterscope-bench-tracers.XXXXXX)
RDIR=""               # the readers' files
CGDIR=""              # the readers' memory cgroup
REC_PID=""            # the running recorder
WL_PID=""             # the running workload (its own process group)
STATS_OLD=""          # kernel.bpf_stats_enabled before we set it

cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    if [ -n "$WL_PID" ]; then kill -TERM -- "-$WL_PID" 2>/dev/null || true; fi
    if [ -n "$REC_PID" ]; then kill -INT "$REC_PID" 2>/dev/null || true; fi
    if [ -n "$CGDIR" ] && [ -d "$CGDIR" ]; then
        for p in $(cat "$CGDIR/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    fi
    if [ -n "$WL_PID" ]; then wait "$WL_PID" 2>/dev/null || true; fi
    if [ -n "$REC_PID" ]; then
        for _ in $(seq 100); do kill -0 "$REC_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$REC_PID" 2>/dev/null || true
        wait "$REC_PID" 2>/dev/null || true
    fi
    if [ -n "$STATS_OLD" ]; then echo "$STATS_OLD" >/proc/sys/kernel/bpf_stats_enabled 2>/dev/null || true; fi
    if [ -n "$CGDIR" ] && [ -d "$CGDIR" ]; then
        for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$CGDIR" 2>/dev/null && break; sleep 0.5; done
        [ -d "$CGDIR" ] && say "warning: could not remove cgroup $CGDIR"
    fi
    if [ -n "$RDIR" ]; then rm -rf "$RDIR"; fi
    if [ "${BENCH_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Background jobs get their own process group, so a workload and all its children can be ended
# together (and a Ctrl-C reaches this script, whose cleanup ends them).
set -m

# ---------------------------------------------------------------------------------------------
# Workloads
if wants reclaim; then
    fs=$(findmnt -n -o FSTYPE -T "$RECLAIM_DIR" 2>/dev/null || stat -f -c %T "$RECLAIM_DIR" 2>/dev/null || echo unknown)
    case $fs in tmpfs|ramfs|unknown) die "RECLAIM_DIR=$RECLAIM_DIR is $fs; the reclaim workload needs a disk file system" ;; esac
    avail_mb=$(df -Pm "$RECLAIM_DIR" | awk 'NR == 2 {print $4}')
    ((avail_mb > 2 * RECLAIM_MB + 512)) || die "$RECLAIM_DIR has ${avail_mb} MB free; the reclaim workload needs $((2 * RECLAIM_MB)) MB"
    RDIR=$(mktemp -d "$RECLAIM_DIR/jitterscope-bench-reclaim.XXXXXX")
    say "writing 2 x ${RECLAIM_MB} MiB to $RDIR for the reclaim workload"
    for k in 1 2; do dd if=/dev/zero of="$RDIR/f$k" bs=1M count="$RECLAIM_MB" conv=fsync status=none; done
    if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
        CGDIR=/sys/fs/cgroup/memory/jitterscope-bench-tracers.$$
        mkdir "$CGDIR"
        echo "$RECLAIM_LIMIT" >"$CGDIR/memory.limit_in_bytes"
        CG_KIND="cgroup v1, memory.limit_in_bytes=$RECLAIM_LIMIT"
    elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo +memory >/sys/fs/cgroup/cgroup.subtree_control
        CGDIR=/sys/fs/cgroup/jitterscope-bench-tracers.$$
        mkdir "$CGDIR"
        echo "$RECLAIM_LIMIT" >"$CGDIR/memory.max"
        CG_KIND="cgroup v2, memory.max=$RECLAIM_LIMIT"
    else
        die "no memory cgroup controller (v1 or v2) for the reclaim workload"
    fi
fi
mkdir -p "$TMP/enoent" "$TMP/stress"

declare -A WORK=(
    [madvise]="\`stress-ng --madvise 2 --madvise-ops $MADVISE_OPS\` (madvise with every advice, msync)"
    [malloc]="\`stress-ng --malloc 2 --malloc-pthreads 2 --malloc-max 1024 --malloc-ops $MALLOC_OPS\` (glibc's per-thread arenas trim with madvise(MADV_DONTNEED): ~16 madvise calls per op, futex)"
    [stat]="2 × $STAT_CALLS \`stat()\` of missing names (perl loop, 1000 names, ENOENT)"
    [switch]="\`stress-ng --switch 1 --switch-ops $SWITCH_OPS --taskset 0\` (two processes on one CPU passing messages through a pipe: a wake-up and a context switch per message)"
    [reclaim]="2 readers × $RECLAIM_PASSES reads of a ${RECLAIM_MB} MiB file in a ${RECLAIM_LIMIT} memory cgroup (page cache reclaimed constantly)"
)

start_workload() { # name; sets WL_PID
    case $1 in
        madvise) stress-ng --temp-path "$TMP/stress" --madvise 2 --madvise-ops "$MADVISE_OPS" ;;
        # --malloc-max 1024 keeps the heap at a steady size: with the default (65536 live
        # allocations per worker) the cost per op grows through the run and the runtime varies 2x.
        malloc) stress-ng --temp-path "$TMP/stress" --malloc 2 --malloc-pthreads 2 --malloc-max 1024 --malloc-ops "$MALLOC_OPS" ;;
        switch) stress-ng --temp-path "$TMP/stress" --switch 1 --switch-ops "$SWITCH_OPS" --taskset 0 ;;
        stat)
            for _ in 1 2; do
                perl -e 'my ($d, $n) = @ARGV; for my $i (1 .. $n) { stat("$d/missing-" . ($i % 1000)) }' \
                    "$TMP/enoent" "$STAT_CALLS" &
            done
            wait ;;
        reclaim)
            echo "$BASHPID" >"$CGDIR/cgroup.procs"
            for k in 1 2; do
                for _ in $(seq "$RECLAIM_PASSES"); do cat "$RDIR/f$k"; done >/dev/null &
            done
            wait ;;
    esac >>"$TMP/workload-$1.log" 2>&1 &
    WL_PID=$!
}

# Children's user+system seconds (bash's `times`, second line) into CHILD_CPU. `times` must run
# in this shell, not in a $(...) subshell: the workload is reaped by `wait` here, so the
# difference around it is the workload's CPU time.
child_cpu() {
    times >"$TMP/times"
    CHILD_CPU=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }; printf "%.3f", t }' "$TMP/times")
}

lead_in() { # name: the same work, untimed, stopped after LEAD_IN seconds (its process group)
    [ "$LEAD_IN" != 0 ] || return 0
    start_workload "$1"
    sleep "$LEAD_IN"
    kill -TERM -- "-$WL_PID" 2>/dev/null || true
    wait "$WL_PID" 2>/dev/null || true
    WL_PID=""
}
run_workload() { # name; sets WL_REAL WL_CPU
    local name=$1 c0 c1 t0 t1 rc=0 k
    # The readers must start from disk: drop their files' page cache (outside the timed part).
    if [ "$name" = reclaim ]; then for k in 1 2; do dd if="$RDIR/f$k" iflag=nocache count=0 status=none; done; fi
    child_cpu; c0=$CHILD_CPU; t0=$EPOCHREALTIME
    start_workload "$name"
    wait "$WL_PID" || rc=$?
    t1=$EPOCHREALTIME; child_cpu; c1=$CHILD_CPU
    WL_PID=""
    if [ "$rc" != 0 ]; then tail -5 "$TMP/workload-$name.log" >&2; die "workload $name failed (exit $rc)"; fi
    WL_REAL=$(calc "$t1 - $t0"); WL_CPU=$(calc "$c1 - $c0")
}

# ---------------------------------------------------------------------------------------------
# Recorders
start_recorder() { # mode (without|with), store dir; sets REC_PID
    local args=("${WITHOUT_ARGS[@]}") log=$2.log
    if [ "$1" = with ]; then args=(${WITH_ARGS[@]+"${WITH_ARGS[@]}"}); fi
    "$JITTERSCOPE" record --dir "$2" --interval 1s ${args[@]+"${args[@]}"} </dev/null >/dev/null 2>"$log" &
    REC_PID=$!
    for _ in $(seq 300); do
        grep -q 'recording every' "$log" 2>/dev/null && break
        kill -0 "$REC_PID" 2>/dev/null || { cat "$log" >&2; die "the recorder exited at start"; }
        sleep 0.1
    done
    grep -q 'recording every' "$log" || { cat "$log" >&2; die "the recorder did not start within 30 s"; }
    if [ "$1" = with ] && ! grep -q 'tracers running' "$log"; then cat "$log" >&2; die "the recorder started no tracer"; fi
    sleep "$SETTLE"
}
stop_recorder() {
    kill -INT "$REC_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$REC_PID" 2>/dev/null || break; sleep 0.1; done
    wait "$REC_PID" 2>/dev/null || true
    REC_PID=""
}
ticks() { awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

# The recorder's BPF objects, from its file descriptors: "map <id> <memlock>" and
# "prog <id> <run_time_ns> <run_cnt>".
bpf_fds() {
    local fds=() fd
    for fd in $(find "/proc/$1/fd" -lname 'anon_inode:bpf-map' -printf '%f\n' -o -lname 'anon_inode:bpf-prog' -printf '%f\n' 2>/dev/null); do
        [ -r "/proc/$1/fdinfo/$fd" ] && fds+=("/proc/$1/fdinfo/$fd")
    done
    ((${#fds[@]})) || return 0
    awk 'function flush() { if (m != "") print "map", m, mem + 0; else if (p != "") print "prog", p, rt + 0, rc + 0
                            m = p = ""; mem = rt = rc = 0 }
         FNR == 1 { flush() }
         /^map_id:/ {m = $2} /^prog_id:/ {p = $2} /^memlock:/ {mem = $2}
         /^run_time_ns:/ {rt = $2} /^run_cnt:/ {rc = $2}
         END { flush() }' "${fds[@]}" 2>/dev/null || true
}
# Every tracer, in `tracers` order: the columns of the tables below.
ALL_TRACERS="reclaim shrinker tlb madvise runqlat lookups mmaplock dirty"
# Map name -> tracer (names as in crates/bpf/src/bpf/*.bpf.c; data sections carry the object name).
TRACER_OF_MAP='function tracer(n) {
    if (n ~ /^reclaim/) return "reclaim"; if (n ~ /^shrink/) return "shrinker"
    if (n ~ /^tlb/) return "tlb"; if (n ~ /^madvise/) return "madvise"
    if (n ~ /^(runq|wakeup_ts)/) return "runqlat"; if (n ~ /^lookup/) return "lookups"
    if (n ~ /^mmaplock/) return "mmaplock"; if (n ~ /^dirty/) return "dirty"
    return "other" }'
map_names() { # "id name" of every map on the host
    [ "$HAVE_BPFTOOL" = 1 ] || return 0
    bpftool map show 2>/dev/null | awk '/^[0-9]+:/ { id = $1; sub(/:$/, "", id); for (i = 2; i < NF; i++) if ($i == "name") { print id, $(i + 1); break } }'
}
prog_maps() { # "prog_id map_id" of every program on the host
    [ "$HAVE_BPFTOOL" = 1 ] || return 0
    bpftool prog show 2>/dev/null | awk '/^[0-9]+:/ { id = $1; sub(/:$/, "", id) }
        /map_ids/ { for (i = 1; i < NF; i++) if ($i == "map_ids") { n = split($(i + 1), m, ","); for (j = 1; j <= n; j++) print id, m[j] } }'
}

# ---------------------------------------------------------------------------------------------
# Host context: this is a shared VM; say what else was going on.
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
OTHER_PROGS="?"
if [ "$HAVE_BPFTOOL" = 1 ]; then OTHER_PROGS=$(bpftool prog show 2>/dev/null | awk '/^[0-9]+:/ {n++} END {print n + 0}'); fi
OTHER_JS=$(pgrep -x jitterscope 2>/dev/null | wc -l || true)

# ---------------------------------------------------------------------------------------------
# A/B rounds: every round runs each workload once under one recorder; the sides alternate
# (without, with | with, without | ...) so drift over the run falls on both equally.
ROUND_SECONDS=$(( ${#WL[@]} * 3 + 3 ))
say "tracer overhead: ${REPS} rounds per side of ${WL[*]} (~$((ROUND_SECONDS * REPS * 2 + ROUND_SECONDS)) s); with tracers: ${TRACER_SET:-all that load ($LOADING)}"
: >"$TMP/results"
: >"$TMP/reccpu"
RUNNING_TRACERS=""
for r in $(seq "$REPS"); do
    if ((r % 2)); then order=(without with); else order=(with without); fi
    for mode in "${order[@]}"; do
        start_recorder "$mode" "$TMP/rec-$r-$mode"
        if [ "$mode" = with ] && [ -z "$RUNNING_TRACERS" ]; then
            RUNNING_TRACERS=$(sed -n 's/.*tracers running: //p' "$TMP/rec-$r-$mode.log" | head -1)
            # Memory of the loaded maps, as the kernel accounts it (fdinfo memlock = bpftool's).
            bpf_fds "$REC_PID" | awk '$1 == "map" {print $2, $3}' | sort >"$TMP/maps-mem"
            map_names | sort >"$TMP/map-names"
        fi
        k0=$(ticks "$REC_PID"); rt0=$EPOCHREALTIME
        line="round $r/$REPS $mode tracers:"
        for w in "${WL[@]}"; do
            lead_in "$w"
            run_workload "$w"
            echo "$w $mode $r $WL_REAL $WL_CPU" >>"$TMP/results"
            line+=" $w $(printf '%.2f' "$WL_REAL") s"
        done
        k1=$(ticks "$REC_PID"); rt1=$EPOCHREALTIME
        echo "$mode $(calc "($k1 - $k0) / $HZ / ($rt1 - $rt0) * 100")" >>"$TMP/reccpu"
        stop_recorder
        [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$TMP/rec-$r-$mode"
        say "$line"
    done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------------
# Per-tracer in-kernel cost: one more round with tracers and kernel.bpf_stats_enabled=1, which
# makes the kernel time every BPF program run (run_time_ns, run_cnt). Separate from the A/B
# rounds because the timing itself adds ~2 clock reads per program run.
HAVE_STATS=0
if [ "$TRACER_STATS" = 1 ] && [ -w /proc/sys/kernel/bpf_stats_enabled ] && [ "$HAVE_BPFTOOL" = 1 ]; then
    say "per-tracer pass with kernel.bpf_stats_enabled=1"
    start_recorder with "$TMP/rec-stats"
    map_names | sort >"$TMP/map-names-stats"
    # prog -> tracer, through the maps each program uses
    prog_maps | sort -k2,2 | join -1 2 -2 1 - "$TMP/map-names-stats" |
        awk "$TRACER_OF_MAP"' { t = tracer($3); if (t != "other") print $2, t }' | sort -u >"$TMP/prog-tracer"
    STATS_OLD=$(cat /proc/sys/kernel/bpf_stats_enabled)
    echo 1 >/proc/sys/kernel/bpf_stats_enabled
    : >"$TMP/stats"
    for w in "${WL[@]}"; do
        lead_in "$w"
        bpf_fds "$REC_PID" | awk '$1 == "prog" {print $2, $3, $4}' | sort >"$TMP/p0"
        run_workload "$w"
        bpf_fds "$REC_PID" | awk '$1 == "prog" {print $2, $3, $4}' | sort >"$TMP/p1"
        # "workload tracer ns runs cpu_s"
        join "$TMP/p0" "$TMP/p1" | sort | join - "$TMP/prog-tracer" |
            awk -v w="$w" -v cpu="$WL_CPU" '{ ns[$6] += $4 - $2; n[$6] += $5 - $3 }
                END { for (t in ns) print w, t, ns[t], n[t], cpu }' >>"$TMP/stats"
        say "bpf_stats $w: $(awk -v w="$w" '$1 == w {printf "%s %.1f ms ", $2, $3 / 1e6}' "$TMP/stats")"
    done
    echo "$STATS_OLD" >/proc/sys/kernel/bpf_stats_enabled
    STATS_OLD=""
    stop_recorder
    rm -rf "$TMP/rec-stats"
    HAVE_STATS=1
fi

# ---------------------------------------------------------------------------------------------
# Report
# Per workload and side: median, min, max of wall and CPU seconds.
summary() { # workload side column(4=wall, 5=cpu) -> "median min max"
    awk -v w="$1" -v m="$2" -v c="$3" '$1 == w && $2 == m {print $c}' "$TMP/results" | sort -g |
        awk '{v[NR] = $1} END { med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                                printf "%.3f %.3f %.3f", med, v[1], v[NR] }'
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f", (b / a - 1) * 100 }'; }
spread_pct() { awk -v lo="$1" -v hi="$2" -v m="$3" 'BEGIN { printf "%.0f", (hi - lo) / m * 100 }'; }
TABLE=""; CPU_TABLE=""; SLOWS=""; ALL_MET=1; NOISY=""
for w in "${WL[@]}"; do
    read -r am alo ahi <<<"$(summary "$w" without 4)"
    read -r bm blo bhi <<<"$(summary "$w" with 4)"
    read -r acm aclo achi <<<"$(summary "$w" without 5)"
    read -r bcm bclo bchi <<<"$(summary "$w" with 5)"
    s=$(pct "$am" "$bm"); sc=$(pct "$acm" "$bcm")
    # The runs' own spread on either side against the effect: when the ranges overlap, the
    # medians' difference is not distinguishable from the noise of this host.
    overlap=$(awk -v alo="$alo" -v ahi="$ahi" -v blo="$blo" -v bhi="$bhi" 'BEGIN { print (blo <= ahi && alo <= bhi) ? 1 : 0 }')
    noise=$(awk -v a="$(spread_pct "$alo" "$ahi" "$am")" -v b="$(spread_pct "$blo" "$bhi" "$bm")" 'BEGIN { print ((a + 0 > b + 0) ? a : b) }')
    shown="**${s} %**"
    if [ "$SCALE" != 1 ]; then
        s=$(awk -v s="$s" -v k="$SCALE" 'BEGIN { printf "%+.2f", s * k }')
        shown+=" → **${s} %** scaled"
    fi
    ok=$(awk -v s="$s" -v t="$SLOWDOWN_TARGET" 'BEGIN { print (s <= t) ? 1 : 0 }')
    verdict=$([ "$ok" = 1 ] && echo "**met**" || echo "**missed**")
    [ "$ok" = 1 ] || ALL_MET=0
    if [ "$overlap" = 1 ]; then verdict+=" (ranges overlap: within noise)"; NOISY+=" $w"; fi
    TABLE+="| $w | $(printf '%.2f' "$am") ($(printf '%.2f' "$alo")–$(printf '%.2f' "$ahi")) | $(printf '%.2f' "$bm") ($(printf '%.2f' "$blo")–$(printf '%.2f' "$bhi")) | ${shown} | ${noise} % | ≤ ${SLOWDOWN_TARGET} % | $verdict |"$'\n'
    CPU_TABLE+="| $w | $(printf '%.2f' "$acm") ($(printf '%.2f' "$aclo")–$(printf '%.2f' "$achi")) | $(printf '%.2f' "$bcm") ($(printf '%.2f' "$bclo")–$(printf '%.2f' "$bchi")) | ${sc} % |"$'\n'
    SLOWS+="${SLOWS:+, }$w ${s} %"
    say "$w: without $(printf '%.2f' "$am") s ($alo–$ahi), with $(printf '%.2f' "$bm") s ($blo–$bhi): ${s} % wall, ${sc} % cpu"
done
REC_CPU=$(for m in without with; do
    awk -v m="$m" '$1 == m {print $2}' "$TMP/reccpu" | sort -g |
        awk -v m="$m" '{v[NR] = $1} END { printf "%s %.2f\n", m, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
done)
REC_CPU_A=$(awk '$1 == "without" {print $2}' <<<"$REC_CPU"); REC_CPU_B=$(awk '$1 == "with" {print $2}' <<<"$REC_CPU")

# Map memory: the most each tracer's maps may take (tracers --check), and what the loaded maps
# take (the kernel's memlock of each map the running recorder holds, named through bpftool).
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
declare -A MAXB LOADB
for t in $ALL_TRACERS; do
    MAXB[$t]=$(printf '%s\n' "$CHECK" | awk -v t="\"tracer\":\"$t\"" 'index($0, t)' | json_field map_bytes_max)
    LOADB[$t]=""
done
MAX_TOTAL=$(printf '%s\n' "$CHECK" | awk '/"loads":true/' | json_field map_bytes_max | awk '{s += $1} END {print s + 0}')
LOADED_TOTAL=$(awk '{s += $2} END {print s + 0}' "$TMP/maps-mem")
LOADED_COUNT=$(wc -l <"$TMP/maps-mem")
if [ -s "$TMP/map-names" ]; then
    while read -r t b; do LOADB[$t]=$b; done < <(join "$TMP/maps-mem" "$TMP/map-names" |
        awk "$TRACER_OF_MAP"' { s[tracer($3)] += $2 } END { for (t in s) print t, s[t] }')
fi
MAP_TABLE=""
for t in $ALL_TRACERS; do
    [ -n "${MAXB[$t]}" ] || continue
    l=${LOADB[$t]}
    MAP_TABLE+="| $t | $(mib "${MAXB[$t]}") | $([ -n "$l" ] && mib "$l" || echo "–") |"$'\n'
done
# madvise counted by tlb's flush program (both tracers running, tlb.bpf.c) has no maps or programs
# of its own: its cost is in tlb's rows.
SHARED_NOTE=""
if printf '%s\n' "$CHECK" | grep '"tracer":"madvise"' | grep -q "tlb tracer's program"; then
    SHARED_NOTE=$'\n'"madvise's calls are counted by tlb's flush program here (both tracers run): its maps and run time are in tlb's rows."$'\n'
fi
MAP_OK=$(awk -v a="$MAX_TOTAL" -v b="$LOADED_TOTAL" -v t="$MAP_TARGET_MIB" 'BEGIN { print (a <= t * 1048576 && b <= t * 1048576) ? "**met**" : "**missed**" }')

STATS_TABLE=""
if [ "$HAVE_STATS" = 1 ]; then
    STATS_TABLE="| workload | workload CPU s | $(printf '%s | ' $ALL_TRACERS)all tracers, % of the workload's CPU |"$'\n'
    STATS_TABLE+="|---|---:|$(printf -- '---:|%.0s' $ALL_TRACERS)---:|"$'\n'
    for w in "${WL[@]}"; do
        row="| $w | $(awk -v w="$w" '$1 == w {printf "%.2f", $5; exit}' "$TMP/stats")"
        for t in $ALL_TRACERS; do
            row+=" | $(awk -v w="$w" -v t="$t" '$1 == w && $2 == t {
                if ($4 >= 10000) printf "%.1f ms, %.0fk runs, %.0f ns", $3 / 1e6, $4 / 1e3, $3 / $4
                else if ($4 > 0) printf "%.1f ms, %d runs, %.0f ns", $3 / 1e6, $4, $3 / $4
                else printf "0"; f = 1 }
                END { if (!f) printf "–" }' "$TMP/stats")"
        done
        row+=" | $(awk -v w="$w" '$1 == w {ns += $3; cpu = $5} END { printf "%.2f %%", (cpu > 0 ? ns / 1e9 / cpu * 100 : 0) }' "$TMP/stats") |"
        STATS_TABLE+="$row"$'\n'
    done
    COSTLIEST=$(for w in "${WL[@]}"; do
        awk -v w="$w" '$1 == w && $3 > max {max = $3; t = $2; cpu = $5}
            END { if (t != "") printf "%s: %s (%.1f %% of the workload'"'"'s CPU time)\n", w, t, (cpu > 0 ? max / 1e9 / cpu * 100 : 0) }' "$TMP/stats"
    done | paste -sd ';' - | sed 's/;/; /g')
    STATS_TABLE+=$'\n'"Costliest tracer per workload: ${COSTLIEST}. To measure a subset A/B (e.g. one tracer on one"$'\n'
    STATS_TABLE+="workload): \`sudo TRACER_SET=lookups TRACER_WORKLOADS=stat bash bench/tracers.sh\`."
    STATS_TABLE+="$SHARED_NOTE"
fi

NOISE_NOTE="Spread: the larger of the two sides' (max − min) ÷ median, the run-to-run noise on this host."
if [ -n "$NOISY" ]; then
    NOISE_NOTE+=" For $(echo $NOISY | sed 's/ /, /g; s/, \([^,]*\)$/ and \1/'), the runs with and without
tracers overlap (min–max): the difference of the medians is not distinguishable from that noise."
fi
STATS_SECTION=""
if [ "$HAVE_STATS" = 1 ]; then
    STATS_SECTION="
### In-kernel run time per tracer (one extra round, \`kernel.bpf_stats_enabled=1\`)

Run time of each tracer's programs while the workload ran (every event on the host, the
workload's and others'), number of runs, mean per run. This is the programs' own time; the
tracepoint dispatch around them (for \`syscalls:*\` tracepoints: every syscall of every task takes
the traced slow path while any of them is enabled) is not in it, but is in the A/B runtimes above.

${STATS_TABLE}"
fi

{
cat <<EOF
$title

Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -r), $(nproc) CPUs; jitterscope at git $GIT_REV
(binary built $BIN_MTIME); stress-ng $(stress-ng --version 2>&1 | awk '{print $3; exit}').
$(if [ -n "$TRACER_SET" ]; then echo "Tracers measured: \`--tracers $TRACER_SET\` ($RUNNING_TRACERS)."; else echo "Tracers measured: all that load ($RUNNING_TRACERS)."; fi)
$([ -n "$NOT_LOADING" ] && echo "Not loading on this host (\`tracers --check\`): $NOT_LOADING.")

**Method.** Each workload does a fixed amount of work, so its runtime is the measure. It runs
while \`jitterscope record --interval 1s ${WITHOUT_ARGS[*]}\` records into a temporary store (side
"without"), or while \`jitterscope record --interval 1s${WITH_ARGS[*]+ ${WITH_ARGS[*]}}\` does with its tracers (side "with"): both
sides run the recorder, so the difference is the tracers alone. A round starts one recorder, waits
for its first sample + ${SETTLE} s, runs every workload once (in the order of the table below), and
stops it.$([ "$LEAD_IN" != 0 ] && printf ' Each workload first runs %s s untimed (stopped, then run again timed): the on-demand\ntracers are then in the state that workload puts them in, not the one the workload before it left\n(a tracer attached by a TLB storm stays attached for 30 s).' "$LEAD_IN") ${REPS} rounds per side,
the sides alternating (without, with | with, without | …) so drift falls on both equally. Wall
time is \`\$EPOCHREALTIME\` around the workload; CPU time is its user + system time (bash
\`times\` of the reaped children). Slowdown = (median with ÷ median without − 1) × 100.
$([ "$SCALE" != 1 ] && printf '\n**Scaled.** %s: the slowdown column also gives it × %s, and the target is checked on that.\n' "$SCALE_NOTE" "$SCALE")

| workload | fixed work |
|---|---|
$(for w in "${WL[@]}"; do echo "| $w | ${WORK[$w]} |"; done)

$([ -n "$CGDIR" ] && echo "Reclaim workload: files on \`$RECLAIM_DIR\` ($fs), page cache dropped before each run (\`dd iflag=nocache count=0\`), readers in a $CG_KIND.")

### Workload runtime (wall), seconds: median (min–max) of ${REPS} runs

| workload | without tracers | with tracers | slowdown | spread | target | |
|---|---:|---:|---:|---:|---|---|
${TABLE}
${NOISE_NOTE}

### Workload CPU time (user + system), seconds: median (min–max)

Less sensitive to other load on the host than wall time (a preempted workload does not use CPU).
Tracer programs run in the context of the task that hits the tracepoint, so their cost shows here.

| workload | without tracers | with tracers | difference |
|---|---:|---:|---:|
${CPU_TABLE}
The recorder's own CPU over the rounds (median, % of one core): ${REC_CPU_A} without tracers,
${REC_CPU_B} with (reading the maps once per second).
${STATS_SECTION}

### Map memory

| tracer | most its maps may use, MiB (\`tracers --check --json\`, \`map_bytes_max\`) | loaded maps, MiB (kernel \`memlock\` of each map the recorder holds) |
|---|---:|---:|
${MAP_TABLE}| **total** | **$(mib "$MAX_TOTAL")** | **$(mib "$LOADED_TOTAL")** ($LOADED_COUNT maps) |

Target ≤ ${MAP_TARGET_MIB} MiB: $MAP_OK. Hash maps are preallocated, so the loaded size is the
full size from the start, not a function of the workload.${SHARED_NOTE}

Host during the tracer rounds: load average $LOAD0 at the start, $LOAD1 at the end (2-CPU VM
shared with other work); $OTHER_PROGS BPF programs of other processes were loaded at the start,
$OTHER_JS other \`jitterscope\` processes were running.
EOF
} >"$OUT"

printf '| BPF tracers%s: workload slowdown ≤ %s %% (%s) | %s | %s |\n' "${LABEL:+ ($LABEL)}" "$SLOWDOWN_TARGET" "${WL[*]}" "$SLOWS" \
    "$([ "$ALL_MET" = 1 ] && echo "**met**" || echo "**missed**")$([ -n "$NOISY" ] && echo " (within noise: $(echo $NOISY | sed 's/ /, /g'))")" >"$TARGETS_OUT"
printf '| BPF tracers%s: map memory ≤ %s MiB | %s MiB at most, %s MiB loaded | %s |\n' "${LABEL:+ ($LABEL)}" "$MAP_TARGET_MIB" \
    "$(mib "$MAX_TOTAL")" "$(mib "$LOADED_TOTAL")" "$MAP_OK" >>"$TARGETS_OUT"
say "tracer section written"
