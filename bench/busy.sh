#!/usr/bin/env bash
# The recorders side by side on a busy host (issue 23): several hundred processes that each run a
# little every second plus a fork/exec churn, so that nothing can be carried forward and /proc is
# listed every second. jitterscope (as shipped, and three reduced recorders for the breakdown), atop,
# sysstat's sadc and, when it is installed, below, all at a 1 s interval and at the same time.
#
#   sudo JITTERSCOPE=target/release/jitterscope bash bench/busy.sh          # section on stdout
#   sudo bash bench/busy.sh load                                           # only the load, until Ctrl-C
#
# Environment (all optional):
#   JITTERSCOPE     release binary (default target/release/jitterscope)
#   BUSY_OUT        where the Markdown section goes (default stdout)
#   BUSY_TARGETS    where rows for the report's "Targets" table go (default: nowhere)
#   BUSY_SECONDS    measured window (default 60)
#   BUSY_PROCS      shells that wake twice a second and run a little (default 250)
#   BUSY_WORK       loop iterations each shell runs per wake-up (default 40)
#   BUSY_CHURN      short processes started per second (default 50)
#   BUSY_BREAKDOWN=0  do not run the three reduced jitterscope recorders (no sampler; no sampler
#                   and no tracers; the same reading /proc instead of the task iterator)
#   BUSY_PROFILE    seconds of `perf record` on the recorder as shipped after the window, for the
#                   functions its CPU goes to (default 60; 0: none; skipped without perf)
#   STORE_BYTES     prebuilt store_bytes example binary (default: built with cargo), for where the
#                   recorder's bytes go
#   BELOW           below's binary (default: `below` on PATH, else /opt/below/bin/below; the run
#                   says when there is none). bench/run.sh builds it there when it is missing.
#                   below 0.9's BPF code needs clang ≥ 15 (Debian 12's clang 14 crashes on it):
#                   apt-get install clang-16, then
#                   PATH=<dir with clang -> clang-16>:$PATH cargo install --locked below --root /opt/below
#   BENCH_KEEP=1    keep the temporary directory
#
# Without root it prints "SKIPPED: <reason>" and writes a section saying so. Everything it starts
# (the load, the recorders, their files) is removed on exit, Ctrl-C included.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/proc.sh"
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${BUSY_OUT:-/dev/stdout}
TARGETS=${BUSY_TARGETS:-/dev/null}
WINDOW=${BUSY_SECONDS:-60}
NPROCS=${BUSY_PROCS:-250}
WORK=${BUSY_WORK:-40}
CHURN=${BUSY_CHURN:-50}
BREAKDOWN=${BUSY_BREAKDOWN:-1}
PROFILE_SECONDS=${BUSY_PROFILE:-60}
WARMUP=5

say() { printf '[busy bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { say "error: $*"; exit 1; }
section() { cat >"$OUT"; }

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED: needs root (atop, sadc -S XALL, every process's /proc files, BPF)" >&2
    printf '## Side by side on a busy host\n\nSKIPPED: not run as root.\n' | section
    exit 0
fi

TMP=$(mktemp -d /var/tmp/jitterscope-busy-bench.XXXXXX)
LOAD=()      # the load's shells
RUNNING=()   # recorders
cleanup() {
    local p
    trap - EXIT INT TERM
    for p in "${RUNNING[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    # The churn's children are short-lived; the shells are killed by pid and reaped.
    ((${#LOAD[@]})) && kill -TERM "${LOAD[@]}" 2>/dev/null || true
    for p in "${RUNNING[@]}" "${LOAD[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ "${BENCH_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------------
# The load. A FIFO opened read-write never has data, so `read -t` on it is a timed sleep that
# does not fork (a `sleep` per wake-up would itself be churn).
mkfifo "$TMP/idle.fifo"
start_load() {
    local i
    for i in $(seq "$NPROCS"); do
        bash -c 'exec 3<>"$1"; n=$2
            while :; do read -t 0.5 -u 3 || true; x=0; for ((j = 0; j < n; j++)); do x=$((x + j)); done; done' \
            busy-shell "$TMP/idle.fifo" "$WORK" </dev/null >/dev/null 2>&1 &
        LOAD+=($!)
    done
    # The churn: batches of 5 short processes, as many batches a second as make $CHURN. Each is a
    # fork and an exec of Debian's /bin/true.
    bash -c 'exec 3<>"$1"; per=$(awk -v c="$2" "BEGIN { printf \"%.3f\", 5 / c }")
        while :; do for k in 1 2 3 4 5; do /bin/true & done; wait; read -t "$per" -u 3 || true; done' \
        busy-churn "$TMP/idle.fifo" "$CHURN" </dev/null >/dev/null 2>&1 &
    LOAD+=($!)
}
forks() { awk '/^processes / {print $2}' /proc/stat; }

if [ "${1:-}" = load ]; then
    start_load
    say "load running: $NPROCS shells twice a second, ~$CHURN processes a second; Ctrl-C stops it"
    wait
    exit 0
fi

[ -x "$JITTERSCOPE" ] || die "no executable at $JITTERSCOPE (build with: cargo build --release -p jitterscope)"
command -v atop >/dev/null || die "atop is not installed (bench/run.sh installs it)"
SADC=""
for p in /usr/lib/sysstat/sadc /usr/libexec/sysstat/sadc /usr/lib64/sa/sadc; do [ -x "$p" ] && SADC=$p && break; done
[ -n "$SADC" ] || die "sadc is not installed (bench/run.sh installs sysstat)"
BELOW=${BELOW:-$(command -v below || true)}
[ -z "$BELOW" ] && [ -x /opt/below/bin/below ] && BELOW=/opt/below/bin/below
for name in atop atopacctd sadc below; do
    if pgrep -x "$name" >/dev/null; then die "a $name process is already running; stop it first"; fi
done

# CPU ticks of a process and its live descendants (reaped children are in cutime/cstime).
tree_ticks() {
    # Processes of the churn vanish between the glob and the read: cat's failure is expected.
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root="$1" '
        { pid = $1; s = $0; sub(/^.*\) /, "", s); n = split(s, f, " ")
          if (n < 15) next
          ppid[pid] = f[2]; ticks[pid] = f[12] + f[13] + f[14] + f[15] }
        END { total = 0
              for (p in ticks) { q = p; hops = 0
                  while (q != "" && q != 0 && q != root && hops < 64) { q = ppid[q]; hops++ }
                  if (q == root) total += ticks[p] }
              print total }'
}
# Run time (ns, from schedstat: exact where utime/stime count 10 ms ticks) of each thread of a
# process, one "tid name ns" line each, sorted by tid as join(1) wants it.
thread_ns() {
    local t name ns
    for t in /proc/"$1"/task/[0-9]*; do
        name=$(cat "$t/comm" 2>/dev/null) || continue
        ns=$(awk '{print $1}' "$t/schedstat" 2>/dev/null) || continue
        printf '%s %s %s\n' "${t##*/}" "${name// /_}" "$ns"
    done | LC_ALL=C sort -k1,1
}
bytes_of() { find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
calc() { awk "BEGIN { printf \"%s\", $* }"; }
HZ=$(getconf CLK_TCK)

say "starting the load: $NPROCS shells waking twice a second ($WORK iterations each), ~$CHURN processes a second"
start_load
sleep 2

declare -A PID OUTP START T0 T1 K0 K1 B1 STOPT LABEL
TOOLS=(js)
"$JITTERSCOPE" record --dir "$TMP/js" --interval 1s </dev/null >/dev/null 2>"$TMP/js.log" &
PID[js]=$!; RUNNING+=($!); OUTP[js]=$TMP/js; LABEL[js]="jitterscope record (as shipped)"
if [ "$BREAKDOWN" = 1 ]; then
    "$JITTERSCOPE" record --dir "$TMP/js-noprof" --interval 1s --profile-hz 0 </dev/null >/dev/null 2>"$TMP/js-noprof.log" &
    PID[js-noprof]=$!; RUNNING+=($!); OUTP[js-noprof]=$TMP/js-noprof; LABEL[js-noprof]="jitterscope record --profile-hz 0"
    "$JITTERSCOPE" record --dir "$TMP/js-bare" --interval 1s --profile-hz 0 --no-tracers </dev/null >/dev/null 2>"$TMP/js-bare.log" &
    PID[js-bare]=$!; RUNNING+=($!); OUTP[js-bare]=$TMP/js-bare; LABEL[js-bare]="jitterscope record --profile-hz 0 --no-tracers"
    "$JITTERSCOPE" record --dir "$TMP/js-procfs" --interval 1s --profile-hz 0 --no-tracers --proc-source procfs </dev/null >/dev/null 2>"$TMP/js-procfs.log" &
    PID[js-procfs]=$!; RUNNING+=($!); OUTP[js-procfs]=$TMP/js-procfs; LABEL[js-procfs]="jitterscope record --profile-hz 0 --no-tracers --proc-source procfs"
    TOOLS+=(js-noprof js-bare js-procfs)
fi
atop -w "$TMP/atop.raw" 1 </dev/null >/dev/null 2>"$TMP/atop.log" &
PID[atop]=$!; RUNNING+=($!); OUTP[atop]=$TMP/atop.raw; LABEL[atop]="atop -w"
"$SADC" -S XALL 1 "$TMP/sa.file" </dev/null >/dev/null 2>"$TMP/sadc.log" &
PID[sadc]=$!; RUNNING+=($!); OUTP[sadc]=$TMP/sa.file; LABEL[sadc]="sadc -S XALL"
TOOLS+=(atop sadc)
BELOW_VERSION=""
if [ -n "$BELOW" ]; then
    mkdir -p "$TMP/below-store" "$TMP/below-log"
    # below reads cgroups from a cgroup2 mount only (here beside the v1 controllers, if any).
    CG2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
    printf 'store_dir = "%s"\nlog_dir = "%s"\ncgroup_root = "%s"\n' "$TMP/below-store" "$TMP/below-log" \
        "${CG2:-/sys/fs/cgroup}" >"$TMP/below.conf"
    "$BELOW" --config "$TMP/below.conf" record --interval-s 1 </dev/null >/dev/null 2>"$TMP/below.log" &
    PID[below]=$!; RUNNING+=($!); OUTP[below]=$TMP/below-store; LABEL[below]="below record"
    TOOLS+=(below)
    # below has no --version; cargo install records it beside the binary.
    BELOW_VERSION=$(sed -n 's/^"below \([0-9.]*\) .*/\1/p' "$(dirname "$BELOW")/../.crates.toml" 2>/dev/null | head -1)
    BELOW_VERSION=${BELOW_VERSION:-unknown version}
fi
for t in "${TOOLS[@]}"; do START[$t]=$EPOCHREALTIME; done

sleep "$WARMUP"
for t in "${TOOLS[@]}"; do
    kill -0 "${PID[$t]}" 2>/dev/null || { tail -5 "$TMP/$t.log" >&2; die "$t exited early"; }
done
PROCS0=$(nprocs); F0=$(forks); W0=$EPOCHREALTIME
for t in "${TOOLS[@]}"; do T0[$t]=$EPOCHREALTIME; K0[$t]=$(tree_ticks "${PID[$t]}"); done
TH0=$EPOCHREALTIME; THREADS0=$(thread_ns "${PID[js]}")
say "measuring ${WINDOW}s: ${TOOLS[*]}"
sleep "$WINDOW"
TH1=$EPOCHREALTIME; THREADS1=$(thread_ns "${PID[js]}")
for t in "${TOOLS[@]}"; do T1[$t]=$EPOCHREALTIME; K1[$t]=$(tree_ticks "${PID[$t]}"); done
F1=$(forks); W1=$EPOCHREALTIME; PROCS1=$(nprocs)
# Where the shipped recorder's CPU goes, by function: perf on it alone while the load and the
# other recorders go on. Afterwards, so that perf's own interrupts are not in the window above.
PERF_TOP=""
if [ "$PROFILE_SECONDS" != 0 ] && command -v perf >/dev/null; then
    say "profiling the recorder as shipped for ${PROFILE_SECONDS}s (perf record -F 2999)"
    if perf record -q -F 2999 -p "${PID[js]}" -o "$TMP/perf.data" -- sleep "$PROFILE_SECONDS" >/dev/null 2>"$TMP/perf.log"; then
        PERF_SAMPLES=$(perf report -i "$TMP/perf.data" --stdio --sort comm 2>/dev/null | awk '/^# Samples:/ && !n++ {print $3}' || true)
        PERF_TOP=$(perf report -i "$TMP/perf.data" --stdio --no-children --sort comm,dso,sym -g none 2>/dev/null |
            awk '!/^#/ && NF && n++ < 25' || true)
    else
        say "perf record failed: $(tail -1 "$TMP/perf.log")"
    fi
fi
for t in "${TOOLS[@]}"; do
    if [[ $t == js* ]]; then kill -INT "${PID[$t]}" 2>/dev/null || true; else kill -TERM "${PID[$t]}" 2>/dev/null || true; fi
done
for t in "${TOOLS[@]}"; do wait "${PID[$t]}" 2>/dev/null || true; STOPT[$t]=$EPOCHREALTIME; done
RUNNING=()
FORKS_PER_S=$(calc "($F1 - $F0) / ($W1 - $W0)")

declare -A CPU MBH
for t in "${TOOLS[@]}"; do
    CPU[$t]=$(calc "(${K1[$t]} - ${K0[$t]}) / $HZ / (${T1[$t]} - ${T0[$t]}) * 100")
    B1[$t]=$(bytes_of "${OUTP[$t]}")
    MBH[$t]=$(calc "${B1[$t]} / (${STOPT[$t]} - ${START[$t]}) * 3600 / 1e6")
    say "$t: cpu $(printf %.3f "${CPU[$t]}")% of a core, $(printf %.2f "${MBH[$t]}") MB/hour"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

# What each jitterscope recorder says its collectors cost (mean ms per sample).
collectors() {
    "$JITTERSCOPE" dump --dir "${OUTP[$1]}" --from "${T0[$1]%.*}" --to "${T1[$1]%.*}" --format csv \
        --select 'self.collector.*,self.cpu_pct,self.collect_ms' 2>/dev/null |
        awk -F, '$3 != "" && NR > 1 {s[$2] += $3; n[$2]++}
            END {for (k in s) printf "%-40s %8.3f\n", k, s[k] / n[k]}' | sort -k2 -rn
}
COLL_JS=$(collectors js)
[ "$BREAKDOWN" = 1 ] && COLL_BARE=$(collectors js-bare) || COLL_BARE=""

# The recorder's run time by thread over the window, threads matched by tid (a thread that
# started inside it counts from 0; one that ended inside it is not seen), then summed by name.
THREAD_ROWS=$(LC_ALL=C join -a2 -e 0 -o 0,2.2,1.3,2.3 <(echo "$THREADS0") <(echo "$THREADS1") |
    awk -v secs="$(calc "$TH1 - $TH0")" '{d = $4 - $3; if (d < 0) d = 0; tot += d; n[$2] += d}
        END {for (k in n) if (n[k] > 0 && tot > 0) printf "| %s | %.3f | %.0f %% |\n", k, n[k] / secs / 1e7, 100 * n[k] / tot}' |
    sort -t'|' -k3 -rn)

# Where its bytes go.
STORE_BYTES=${STORE_BYTES:-}
if [ -z "$STORE_BYTES" ]; then
    say "building the store_bytes example"
    if (cd "$REPO" && cargo build --release -q -p jitterscope-model --example store_bytes); then
        STORE_BYTES=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/store_bytes
    fi
fi
if [ -z "$STORE_BYTES" ]; then
    BYTES_REPORT="(not measured: the store_bytes example did not build)"
elif ! BYTES_REPORT=$("$STORE_BYTES" "${OUTP[js]}" 2>&1); then
    BYTES_REPORT="(not measured: $BYTES_REPORT)"
fi
FLOOR=$(awk -F'|' '/all of them/ {gsub(/[* ]/, "", $3); print $3}' <<<"$BYTES_REPORT")
HOST_BYTES=$(awk -F'\\*\\*' '/without the stack slices/ {print $2}' <<<"$BYTES_REPORT")
SAMPLES_JS=$(awk '/^Bytes on disk by lane/ {gsub(/\(/, "", $6); print $6}' <<<"$BYTES_REPORT")

R_CPU=$(ratio "${CPU[js]}" "${CPU[atop]}")
R_BYTES=$(ratio "${MBH[js]}" "${MBH[atop]}")
met() { awk -v r="$1" 'BEGIN { print (r != "n/a" && r <= 0.1) ? "**met**" : "**missed**" }'; }
{
    echo "## Side by side on a busy host, 1 s interval, ${WINDOW} s window"
    echo
    echo "\`bench/busy.sh\`: $NPROCS shells that each wake twice a second and run a loop of $WORK"
    echo "iterations (no fork), plus a churn of short processes (\`/bin/true\`, measured"
    printf '%.0f forks a second during the window). %s to %s processes on the host. All recorders ran\n' "$FORKS_PER_S" "$PROCS0" "$PROCS1"
    echo "at the same time with their default settings, after a ${WARMUP} s warm-up; CPU is the recorder's"
    echo "and its live descendants' utime+stime+cutime+cstime over the window, MB/hour its output's size"
    echo "over its run time${PERF_TOP:+ (the ${PROFILE_SECONDS} s of perf below included)}."
    echo
    echo "| tool | CPU % of one core | MB/hour | CPU vs atop | bytes vs atop |"
    echo "|---|---:|---:|---:|---:|"
    for t in "${TOOLS[@]}"; do
        printf '| %s | %.3f | %.2f | %s | %s |\n' "${LABEL[$t]}" "${CPU[$t]}" "${MBH[$t]}" \
            "$(ratio "${CPU[$t]}" "${CPU[atop]}")" "$(ratio "${MBH[$t]}" "${MBH[atop]}")"
    done
    [ -z "$BELOW" ] && echo "| below | not installed (see bench/busy.sh's header) | | | |"
    echo
    echo "Peers: atop $(atop -V 2>&1 | awk '/Version/ {print $2; exit}'), sysstat $("$SADC" -V 2>&1 | awk '/version/ {print $3; exit}')${BELOW_VERSION:+, below $BELOW_VERSION}."
    echo
    echo "The recorder's own account of its collectors (mean ms per sample, \`self.collector.<collector>_ms\`), as shipped:"
    echo
    echo '```'
    echo "$COLL_JS"
    echo '```'
    if [ -n "$COLL_BARE" ]; then
        echo
        echo "and with \`--profile-hz 0 --no-tracers\`:"
        echo
        echo '```'
        echo "$COLL_BARE"
        echo '```'
    fi
    echo
    echo "### Where the recorder's CPU goes"
    echo
    echo "Run time of each of its threads over the window (\`/proc/<pid>/task/*/schedstat\`; a thread"
    echo "that ended inside the window is not seen):"
    echo
    echo "| thread | CPU % of one core | share |"
    echo "|---|---:|---:|"
    echo "$THREAD_ROWS"
    if [ -n "$PERF_TOP" ]; then
        echo
        echo "\`perf record -F 2999 -p <recorder>\` for ${PROFILE_SECONDS} s after the window (load and recorders still"
        echo "running; about ${PERF_SAMPLES:-?} samples; self time, no call graph): the 25 largest (thread, object,"
        echo "function) rows:"
        echo
        echo '```'
        echo "$PERF_TOP"
        echo '```'
    fi
    echo
    echo "### Where its bytes go"
    echo
    echo "\`crates/model/examples/store_bytes.rs\` on the as-shipped recorder's store: all it recorded, the"
    echo "warm-up, the ${WINDOW} s window${PERF_TOP:+, the ${PROFILE_SECONDS} s under perf} and the stop:"
    echo
    echo "$BYTES_REPORT"
    if [ -n "$FLOOR" ] && [ -n "$SAMPLES_JS" ]; then
        echo
        printf 'A codec storing the process table as differences from the previous sample, each column coded on\n'
        printf 'its own, would need about %.2f MB/hour for these columns alone (the last row; the detail lane\n' \
            "$(calc "$FLOOR / $SAMPLES_JS * 3600 / 1e6")"
        printf 'takes %.2f today); the budget for everything at 0.1× atop is %.2f MB/hour.\n' \
            "$(awk -F'|' '/^\| detail/ {print $3}' <<<"$BYTES_REPORT" | awk -v n="$SAMPLES_JS" '{printf "%.2f", $1 / n * 3600 / 1e6}')" \
            "$(calc "${MBH[atop]} / 10")"
    fi
    if [ -n "$HOST_BYTES" ] && [ -n "$SAMPLES_JS" ] && [ -n "$FLOOR" ]; then
        HOST_MBH=$(calc "$HOST_BYTES / $SAMPLES_JS * 3600 / 1e6")
        echo
        printf 'The host'"'"'s own data alone (the main lane without the stack slices: system, cgroups,\n'
        printf 'tracers, the recorder'"'"'s account of itself) takes %.2f MB/hour, %s× atop'"'"'s bytes; with the\n' \
            "$HOST_MBH" "$(ratio "$HOST_MBH" "${MBH[atop]}")"
        printf 'process table'"'"'s changing columns at that entropy, %.2f MB/hour (%s×), before any stack sample.\n' \
            "$(calc "$HOST_MBH + $FLOOR / $SAMPLES_JS * 3600 / 1e6")" \
            "$(ratio "$(calc "$HOST_MBH + $FLOOR / $SAMPLES_JS * 3600 / 1e6")" "${MBH[atop]}")"
    fi
} | section
{
    printf '| recorder CPU ≤ 0.1× atop'"'"'s on the busy host | %.3f %% vs atop %.3f %% = %s | %s |\n' \
        "${CPU[js]}" "${CPU[atop]}" "$R_CPU" "$(met "$R_CPU")"
    printf '| bytes/hour ≤ 0.1× atop'"'"'s on the busy host | %.2f vs %.2f MB/hour = %s | %s |\n' \
        "${MBH[js]}" "${MBH[atop]}" "$R_BYTES" "$(met "$R_BYTES")"
} >"$TARGETS"
say "done"
