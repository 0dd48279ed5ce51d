#!/usr/bin/env bash
# The recorder's memory across an episode close (issue 44): three recorders as shipped (nice
# -20, mlockall, tracers, stack sampler) side by side at a 1 s interval on a busy host
# (bench/busy.sh's load), one plain, one with --remote-write to VictoriaMetrics, one with
# --remote-write and --clickhouse; then `lab run cfs-throttle` makes a throttling episode that
# closes, which the ClickHouse pusher diagnoses and whose stacks it names. Every recorder's
# VmRSS is read from /proc every 50 ms; VmHWM (the kernel's own peak) is read at the end.
#
#   sudo JITTERSCOPE=target/release/jitterscope bash bench/memory.sh   # section on stdout
#
# Environment (all optional):
#   JITTERSCOPE       release binary (default target/release/jitterscope)
#   MEM_OUT           where the Markdown section goes (default stdout)
#   MEM_WARMUP        seconds before the lab starts (default 660: the diagnosis of the episode
#                     then reads the whole 10-minute baseline it reads on a long-running host)
#   MEM_AFTER         seconds the recorders run after the episode's findings reached
#                     ClickHouse (default 20)
#   MEM_BUSY=0        no background load
#   BENCH_KEEP=1      keep the temporary directory (with each recorder's RSS trace, rss-*.tsv)
#
# Without root, clickhouse-server or victoria-metrics it prints "SKIPPED: <reason>" and writes
# a section saying so. Everything it starts is stopped on exit, Ctrl-C included.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${MEM_OUT:-/dev/stdout}
WARMUP=${MEM_WARMUP:-660}
AFTER=${MEM_AFTER:-20}
SERVER=/usr/sbin/clickhouse-server
VM=$(command -v victoria-metrics || true)

skip() {
  echo "SKIPPED: bench/memory.sh: $1" >&2
  printf '## Recorder memory across an episode close\n\nNot measured: %s.\n' "$1" >"$OUT"
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "needs root (the recorders' tracers and sampler, the lab's cgroup)"
[ -x "$SERVER" ] || skip "clickhouse-server is not installed (apt-get install clickhouse-server)"
[ -n "$VM" ] || skip "victoria-metrics is not installed (apt-get install victoria-metrics)"
[ -x "$JITTERSCOPE" ] || skip "no binary at $JITTERSCOPE (cargo build --release)"

say() { printf '[memory bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
TMP=$(mktemp -d /var/tmp/jitterscope-mem-bench.XXXXXX)
PIDS=()
cleanup() {
  local p
  trap - EXIT INT TERM
  # Recorders first (they push on their way out), then the servers and the load.
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "${BENCH_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ClickHouse and VictoriaMetrics on loopback, each in a directory of its own.
HTTP=$(port) TCP=$(port) INTER=$(port) VMPORT=$(port)
mkdir -p "$TMP/ch/tmp" "$TMP/vm"
"$SERVER" --config-file=/etc/clickhouse-server/config.xml -- --path="$TMP/ch/" \
  --tmp_path="$TMP/ch/tmp/" --http_port="$HTTP" --tcp_port="$TCP" \
  --interserver_http_port="$INTER" --listen_host=127.0.0.1 \
  --logger.log="$TMP/ch/server.log" --logger.errorlog="$TMP/ch/error.log" >/dev/null 2>&1 &
PIDS+=($!)
"$VM" -storageDataPath="$TMP/vm" -httpListenAddr="127.0.0.1:$VMPORT" >"$TMP/vm.log" 2>&1 &
PIDS+=($!)
CH="http://127.0.0.1:$HTTP/"
RW="http://127.0.0.1:$VMPORT/api/v1/write"
q() { curl -sf "$CH" --data-binary "$1"; }
for _ in $(seq 240); do [ "$(q 'SELECT 1' 2>/dev/null)" = 1 ] && break; sleep 0.25; done
[ "$(q 'SELECT 1')" = 1 ] || { echo "clickhouse-server did not start: $(tail -3 "$TMP/ch/error.log")" >&2; exit 1; }
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$VMPORT/health" >/dev/null 2>&1 && break; sleep 0.25; done

if [ "${MEM_BUSY:-1}" = 1 ]; then
  # busy.sh's load stops its shells when it is stopped.
  bash "$HERE/busy.sh" load >"$TMP/load.log" 2>&1 &
  PIDS+=($!)
fi

# The recorders as shipped, each into a store of its own.
"$JITTERSCOPE" record --dir "$TMP/plain" 2>"$TMP/plain.log" &
PLAIN=$!
"$JITTERSCOPE" record --dir "$TMP/rw" --remote-write "$RW" 2>"$TMP/rw.log" &
RWO=$!
"$JITTERSCOPE" record --dir "$TMP/both" --remote-write "$RW" --clickhouse "$CH" \
  --fleet-host bench 2>"$TMP/both.log" &
BOTH=$!
PIDS=("$PLAIN" "$RWO" "$BOTH" "${PIDS[@]}")

# Every recorder's VmRSS every 50 ms, as (seconds, KiB) lines of rss-<name>.tsv, until the
# file `stop` appears.
python3 - "$TMP" plain:$PLAIN rw:$RWO both:$BOTH <<'EOF' &
import os, sys, time
tmp, procs = sys.argv[1], [a.split(":") for a in sys.argv[2:]]
out = {n: open(f"{tmp}/rss-{n}.tsv", "w") for n, _ in procs}
t0 = time.monotonic()
while not os.path.exists(f"{tmp}/stop"):
    t = time.monotonic() - t0
    for n, pid in procs:
        try:
            with open(f"/proc/{pid}/status") as f:
                for l in f:
                    if l.startswith("VmRSS:"):
                        out[n].write(f"{t:.2f}\t{l.split()[1]}\n")
        except OSError:
            pass
    time.sleep(0.05)
for f in out.values():
    f.close()
EOF
SAMPLER=$!
PIDS+=("$SAMPLER")

hwm() { awk '/^VmHWM/ {print $2}' /proc/"$1"/status; }
rss() { awk '/^VmRSS/ {print $2}' /proc/"$1"/status; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

say "steady state: ${WARMUP} s"
sleep "$WARMUP"
for p in "$PLAIN" "$RWO" "$BOTH"; do kill -0 "$p" 2>/dev/null || { echo "a recorder stopped: $(cat "$TMP"/*.log)" >&2; exit 1; }; done
STEADY_PLAIN=$(rss "$PLAIN") STEADY_RW=$(rss "$RWO") STEADY_BOTH=$(rss "$BOTH")
HWM0_PLAIN=$(hwm "$PLAIN") HWM0_RW=$(hwm "$RWO") HWM0_BOTH=$(hwm "$BOTH")

say "lab run cfs-throttle"
# One lab run at a time on a host: another one's (a test's) is waited for.
for _ in $(seq 120); do
  "$JITTERSCOPE" lab run cfs-throttle --duration 20s >"$TMP/lab.log" 2>&1 && break
  grep -q "another .jitterscope lab. run is in progress" "$TMP/lab.log" || break
  sleep 5
done
# The episode closes a few seconds after the lab's cgroup is gone; the pusher then diagnoses
# it and names its stacks.
say "waiting for the episode's findings in ClickHouse"
for _ in $(seq 180); do
  n=$(q "SELECT count() FROM jitterscope_findings WHERE episode_kind = 'throttling'" 2>/dev/null || echo 0)
  [ "${n:-0}" -gt 0 ] && break
  sleep 1
done
FINDINGS=$(q "SELECT count() FROM jitterscope_findings" || echo 0)
STACKS=$(q "SELECT count() FROM jitterscope_stacks" || echo 0)
[ "${FINDINGS:-0}" -gt 0 ] || say "no findings reached ClickHouse: $(tail -5 "$TMP/both.log")"
sleep "$AFTER"
HWM_PLAIN=$(hwm "$PLAIN") HWM_RW=$(hwm "$RWO") HWM_BOTH=$(hwm "$BOTH")
END_PLAIN=$(rss "$PLAIN") END_RW=$(rss "$RWO") END_BOTH=$(rss "$BOTH")
touch "$TMP/stop"
wait "$SAMPLER" 2>/dev/null || true
peak() { sort -k2 -n "$TMP/rss-$1.tsv" | tail -1 | cut -f2; }
PROCS=$(ls -d /proc/[0-9]* 2>/dev/null | wc -l)

{
  echo "## Recorder memory across an episode close"
  echo
  echo "\`bench/memory.sh\`, $(date -u +%F), build $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown):"
  echo "three recorders as shipped (nice −20, mlockall, tracers, stack sampler) side by side at a"
  echo "1 s interval on a busy host ($( [ "${MEM_BUSY:-1}" = 1 ] && echo "bench/busy.sh's load, " )$PROCS processes at the end):"
  echo "plain; with \`--remote-write\` to VictoriaMetrics; with \`--remote-write\` and"
  echo "\`--clickhouse\` (ClickHouse 18.16 on loopback). After ${WARMUP} s, \`lab run cfs-throttle"
  echo "--duration 20s\` makes a throttling episode; when it closes the ClickHouse pusher diagnoses"
  echo "it (±10 s and the 10-minute baseline) and names its stacks ($FINDINGS findings, $STACKS stack"
  echo "rows sent); the recorders run ${AFTER} s more. VmRSS is read every 50 ms; VmHWM is the"
  echo "kernel's peak of the process's whole life (start-up included)."
  echo
  echo "| recorder | steady VmRSS before the lab, MiB | VmHWM before the lab, MiB | VmHWM at the end, MiB | largest VmRSS read, MiB | VmRSS at the end, MiB |"
  echo "|---|---:|---:|---:|---:|---:|"
  echo "| plain | $(mib "$STEADY_PLAIN") | $(mib "$HWM0_PLAIN") | **$(mib "$HWM_PLAIN")** | $(mib "$(peak plain)") | $(mib "$END_PLAIN") |"
  echo "| remote write | $(mib "$STEADY_RW") | $(mib "$HWM0_RW") | **$(mib "$HWM_RW")** | $(mib "$(peak rw)") | $(mib "$END_RW") |"
  echo "| remote write + ClickHouse | $(mib "$STEADY_BOTH") | $(mib "$HWM0_BOTH") | **$(mib "$HWM_BOTH")** | $(mib "$(peak both)") | $(mib "$END_BOTH") |"
} >"$OUT"
