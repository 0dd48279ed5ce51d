#!/usr/bin/env bash
# What `record --clickhouse` costs the recorder (issue 20): two recorders as shipped, side by
# side at a 1 s interval, one of them pushing to a clickhouse-server started here on loopback,
# while `lab run cfs-throttle` makes one throttling episode that closes (so the pusher
# diagnoses it and names its stacks) and the inventory is taken at start and every minute.
# Reports the `clickhouse` thread's own CPU, both recorders' CPU and memory, and the rows and
# bytes each table received.
#
#   sudo JITTERSCOPE=target/release/jitterscope bash bench/fleet_pusher.sh   # section on stdout
#
# Environment (all optional):
#   JITTERSCOPE       release binary (default target/release/jitterscope)
#   FLEETP_OUT        where the Markdown section goes (default stdout)
#   FLEETP_SECONDS    measured window (default 120; at least 60 for the episode to close)
#   BENCH_KEEP=1      keep the temporary directory
#
# Without root or clickhouse-server it prints "SKIPPED: <reason>" and writes a section saying
# so. Everything it starts is stopped on exit, Ctrl-C included.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${FLEETP_OUT:-/dev/stdout}
WINDOW=${FLEETP_SECONDS:-120}
SERVER=/usr/sbin/clickhouse-server

skip() {
  echo "SKIPPED: bench/fleet_pusher.sh: $1" >&2
  printf '## ClickHouse pusher\n\nNot measured: %s.\n' "$1" >"$OUT"
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "needs root (the recorders' tracers and sampler, the lab's cgroup)"
[ -x "$SERVER" ] || skip "clickhouse-server is not installed (apt-get install clickhouse-server)"
[ -x "$JITTERSCOPE" ] || skip "no binary at $JITTERSCOPE (cargo build --release)"
[ "$WINDOW" -ge 60 ] || skip "FLEETP_SECONDS=$WINDOW is under 60: the episode would not close"

TMP=$(mktemp -d /tmp/jitterscope-fleetp-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HTTP=$(port) TCP=$(port) INTER=$(port)
mkdir -p "$TMP/ch/tmp"
"$SERVER" --config-file=/etc/clickhouse-server/config.xml -- --path="$TMP/ch/" \
  --tmp_path="$TMP/ch/tmp/" --http_port="$HTTP" --tcp_port="$TCP" \
  --interserver_http_port="$INTER" --listen_host=127.0.0.1 \
  --logger.log="$TMP/ch/server.log" --logger.errorlog="$TMP/ch/error.log" >/dev/null 2>&1 &
PIDS+=($!)
URL="http://127.0.0.1:$HTTP/"
q() { curl -sf "$URL" --data-binary "$1"; }
for _ in $(seq 240); do [ "$(q 'SELECT 1' 2>/dev/null)" = 1 ] && break; sleep 0.25; done
[ "$(q 'SELECT 1')" = 1 ] || { echo "clickhouse-server did not start: $(tail -3 "$TMP/ch/error.log")" >&2; exit 1; }

# shellcheck source=bench/proc.sh
. "$HERE/proc.sh"

"$JITTERSCOPE" record --dir "$TMP/without" 2>"$TMP/without.log" &
A=$!
PIDS+=("$A")
"$JITTERSCOPE" record --dir "$TMP/with" --clickhouse "$URL" --fleet-host bench 2>"$TMP/with.log" &
B=$!
PIDS+=("$B")
sleep 3
PUSHER=$(thread_of "$B" clickhouse)
[ -n "$PUSHER" ] || { echo "no clickhouse thread in the recorder: $(cat "$TMP/with.log")" >&2; exit 1; }
a0=$(ticks /proc/$A/stat) b0=$(ticks /proc/$B/stat) p0=$(ticks "$PUSHER") t0=$(date +%s.%N)
sleep 10
"$JITTERSCOPE" lab run cfs-throttle --duration 20s >"$TMP/lab.log" 2>&1 || true
sleep $((WINDOW - 30 > 0 ? WINDOW - 30 : 0))
a1=$(ticks /proc/$A/stat) b1=$(ticks /proc/$B/stat) p1=$(ticks "$PUSHER") t1=$(date +%s.%N)
RSS_A=$(rss_kib $A) RSS_B=$(rss_kib $B)
CPU_A=$(pct "$a0" "$a1" "$t0" "$t1")
CPU_B=$(pct "$b0" "$b1" "$t0" "$t1")
CPU_P=$(pct "$p0" "$p1" "$t0" "$t1")
rows() { q "SELECT count() FROM $1 WHERE host = 'bench'"; }
BYTES=$(q "SELECT table, sum(data_compressed_bytes) FROM system.columns WHERE database = currentDatabase() AND table LIKE 'jitterscope_%' GROUP BY table ORDER BY table FORMAT TSV")

{
  echo "## ClickHouse pusher"
  echo
  echo "\`bench/fleet_pusher.sh\`, $(date -u +%Y-%m-%d), build $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?'):"
  echo "two recorders as shipped (tracers, stack sampler), side by side for ${WINDOW} s at a 1 s"
  echo "interval; one pushes to ClickHouse $(dpkg-query -W -f='${Version}' clickhouse-server 2>/dev/null || echo '?') on loopback (episodes, the diagnosis"
  echo "and stacks of each closed one, the inventory at start and every 60 s), through one"
  echo "\`lab run cfs-throttle\` episode of 20 s. CPU is utime+stime over the window; the"
  echo "pusher's is its own thread's (diagnosis, stack naming and the inventory scans included)."
  echo
  echo "| | value |"
  echo "|---|---:|"
  echo "| recorder without ClickHouse, CPU % of one core | $CPU_A |"
  echo "| recorder with ClickHouse, CPU % of one core | $CPU_B |"
  echo "| the clickhouse thread alone, CPU % of one core | $CPU_P |"
  echo "| resident memory without / with, MiB | $(python3 -c "print(f'{$RSS_A/1024:.1f} / {$RSS_B/1024:.1f}')") |"
  for t in jitterscope_episodes jitterscope_findings jitterscope_stacks jitterscope_hosts jitterscope_inventory; do
    echo "| rows in $t | $(rows $t) |"
  done
  echo "| bytes in ClickHouse (compressed), by table | $(echo "$BYTES" | awk '{printf "%s%s %s", (NR>1?", ":""), $1, $2}') |"
} >"$OUT"
