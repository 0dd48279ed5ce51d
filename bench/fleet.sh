#!/usr/bin/env bash
# What remote write costs the recorder (issue 20): two recorders as shipped, side by side at a
# 1 s interval, one of them sending to a VictoriaMetrics started here on loopback; the
# sender thread's own CPU, the recorders' CPU and memory, the points and bytes per second on
# the wire at the default selection; then the receiver stopped for 30 s and restarted, and the
# time until it holds every second again.
#
#   sudo JITTERSCOPE=target/release/jitterscope bash bench/fleet.sh        # section on stdout
#
# Environment (all optional):
#   JITTERSCOPE     release binary (default target/release/jitterscope)
#   FLEET_OUT       where the Markdown section goes (default stdout)
#   FLEET_TARGETS   where rows for the report's "Targets" table go (default: nowhere)
#   FLEET_SECONDS   measured window (default 60)
#   BENCH_KEEP=1    keep the temporary directory
#
# Without root or victoria-metrics it prints "SKIPPED: <reason>" and writes a section saying
# so. Everything it starts is stopped on exit, Ctrl-C included.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${FLEET_OUT:-/dev/stdout}
TARGETS=${FLEET_TARGETS:-/dev/null}
WINDOW=${FLEET_SECONDS:-60}

skip() {
  echo "SKIPPED: bench/fleet.sh: $1" >&2
  printf '## Remote write\n\nNot measured: %s.\n' "$1" >"$OUT"
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "needs root (the recorders' tracers and sampler)"
command -v victoria-metrics >/dev/null || skip "victoria-metrics is not installed (apt-get install victoria-metrics)"
[ -x "$JITTERSCOPE" ] || skip "no binary at $JITTERSCOPE (cargo build --release)"

TMP=$(mktemp -d /tmp/jitterscope-fleet-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
vm_start() {
  victoria-metrics -storageDataPath="$TMP/vm" -httpListenAddr="127.0.0.1:$PORT" \
    -retentionPeriod=1 -search.latencyOffset=0s -search.disableCache >>"$TMP/vm.log" 2>&1 &
  VM=$!
  PIDS+=("$VM")
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0
    sleep 0.1
  done
  echo "victoria-metrics did not start: $(tail -3 "$TMP/vm.log")" >&2
  exit 1
}
vm_start

# shellcheck source=bench/proc.sh
. "$HERE/proc.sh"

"$JITTERSCOPE" record --dir "$TMP/without" 2>"$TMP/without.log" &
A=$!
PIDS+=("$A")
"$JITTERSCOPE" record --dir "$TMP/with" --remote-write "http://127.0.0.1:$PORT/api/v1/write" \
  --fleet-host bench 2>"$TMP/with.log" &
B=$!
PIDS+=("$B")
sleep 5
SENDER=$(thread_of "$B" remote-write)
[ -n "$SENDER" ] || { echo "no remote-write thread in the recorder: $(cat "$TMP/with.log")" >&2; exit 1; }
a0=$(ticks /proc/$A/stat) b0=$(ticks /proc/$B/stat) s0=$(ticks "$SENDER") t0=$(date +%s.%N)
FROM=$(date -u +%Y-%m-%dT%H:%M:%SZ)
sleep "$WINDOW"
a1=$(ticks /proc/$A/stat) b1=$(ticks /proc/$B/stat) s1=$(ticks "$SENDER") t1=$(date +%s.%N)
TO=$(date -u +%Y-%m-%dT%H:%M:%SZ)
RSS_A=$(rss_kib $A) RSS_B=$(rss_kib $B)
CPU_A=$(pct "$a0" "$a1" "$t0" "$t1")
CPU_B=$(pct "$b0" "$b1" "$t0" "$t1")
CPU_S=$(pct "$s0" "$s1" "$t0" "$t1")

mean() { # series -> mean over the window from B's store
  "$JITTERSCOPE" dump --dir "$TMP/with" --from "$FROM" --to "$TO" --select "$1" |
    awk -F, 'NR > 1 && $3 != "" {s += $3; n++} END {if (n) printf "%.1f", s / n; else print 0}'
}
POINTS=$(mean self.remote_write.sent_per_s)
BYTES=$(mean self.remote_write.sent_bytes_per_s)

# The outage: the receiver stopped for 30 s, then started on the same data; time until it holds
# every sample the store had when it came back.
kill "$VM"; wait "$VM" 2>/dev/null || true
sleep 30
vm_start
BACK=$(date +%s.%N)
export PORT TMP JITTERSCOPE BACK
COMPLETE=$(python3 - <<'EOF'
import json, os, subprocess, time, urllib.request
port, tmp, js, back = os.environ["PORT"], os.environ["TMP"], os.environ["JITTERSCOPE"], float(os.environ["BACK"])
def stored():
    out = subprocess.run([js, "dump", "--dir", f"{tmp}/with", "--from", "10m ago", "--select", "load.avg1",
                          "--format", "json"], capture_output=True, text=True).stdout
    return [json.loads(l)["ts_ns"] // 1_000_000 for l in out.splitlines()]
want = [t for t in stored() if t / 1000 <= back]
while time.time() - back < 120:
    urllib.request.urlopen(f"http://127.0.0.1:{port}/internal/force_flush").read()
    body = urllib.request.urlopen(
        f"http://127.0.0.1:{port}/api/v1/export?match[]=jitterscope_load_avg1{{host=%22bench%22}}").read()
    have = set()
    for l in body.decode().splitlines():
        have.update(json.loads(l)["timestamps"])
    if all(t in have for t in want):
        print(f"{time.time() - back:.1f}")
        break
    time.sleep(0.25)
else:
    print("never")
EOF
)
SERIES=$(python3 -c "print(round($POINTS))")

{
  echo "## Remote write"
  echo
  echo "\`bench/fleet.sh\`, $(date -u +%Y-%m-%d), build $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?'):"
  echo "two recorders as shipped (tracers, stack sampler), side by side for ${WINDOW} s at a 1 s"
  echo "interval; one sends to VictoriaMetrics $(dpkg-query -W -f='${Version}' victoria-metrics 2>/dev/null || echo '?') on loopback at the default selection"
  echo "(flush 5 s). CPU is utime+stime over the window; the sender's is its own thread's."
  echo
  echo "| | value |"
  echo "|---|---:|"
  echo "| recorder without remote write, CPU % of one core | $CPU_A |"
  echo "| recorder with remote write, CPU % of one core | $CPU_B |"
  echo "| the remote-write thread alone, CPU % of one core | $CPU_S |"
  echo "| resident memory without / with, MiB | $(python3 -c "print(f'{$RSS_A/1024:.1f} / {$RSS_B/1024:.1f}')") |"
  echo "| series per sample (points per second) | $SERIES |"
  echo "| bytes per second on the wire (snappy) | $BYTES |"
  echo "| receiver stopped 30 s: complete again after, s | $COMPLETE |"
} >"$OUT"
{
  met() { python3 -c "print('**met**' if $1 else '**missed**')"; }
  DIFF=$(python3 -c "print(f'{$CPU_B - $CPU_A:.3f}')")
  echo "| remote write: sender ≤ 0.1 % of one core (its thread, default selection) | $CPU_S % (recorder with − without: $DIFF %) | $(met "$CPU_S <= 0.1") |"
  if [ "$COMPLETE" = never ]; then
    echo "| remote write: complete again ≤ 10 s after a 30 s outage | never (120 s) | **missed** |"
  else
    echo "| remote write: complete again ≤ 10 s after a 30 s outage | $COMPLETE s | $(met "$COMPLETE <= 10") |"
  fi
} >"$TARGETS"
