#!/usr/bin/env bash
# How fast `jitterscope fleet episodes` answers (issue 20's target: 1 h of 10 hosts in < 1 s),
# against a clickhouse-server started here on loopback and filled with synthetic episodes in
# the table `record --clickhouse` creates: 10 hosts x 1 h, then 10,000 hosts x 1 day. Each
# timing is the median wall time of 5 runs of the command, process start included.
#
#   JITTERSCOPE=target/release/jitterscope bash bench/fleet_query.sh      # section on stdout
#
# Environment (all optional):
#   JITTERSCOPE       release binary (default target/release/jitterscope)
#   FLEETQ_OUT        where the Markdown section goes (default stdout)
#   FLEETQ_TARGETS    where rows for the report's "Targets" table go (default: nowhere)
#   BENCH_KEEP=1      keep the temporary directory
#
# Without clickhouse-server it prints "SKIPPED: <reason>" and writes a section saying so.
# The server is stopped on exit, Ctrl-C included.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${FLEETQ_OUT:-/dev/stdout}
TARGETS=${FLEETQ_TARGETS:-/dev/null}
SERVER=/usr/sbin/clickhouse-server

skip() {
  echo "SKIPPED: bench/fleet_query.sh: $1" >&2
  printf '## Fleet queries\n\nNot measured: %s.\n' "$1" >"$OUT"
  exit 0
}
[ -x "$SERVER" ] || skip "clickhouse-server is not installed (apt-get install clickhouse-server)"
[ -x "$JITTERSCOPE" ] || skip "no binary at $JITTERSCOPE (cargo build --release)"

TMP=$(mktemp -d /tmp/jitterscope-fleetq-bench.XXXXXX)
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HTTP=$(free_port)
TCP=$(free_port)
mkdir -p "$TMP/ch/tmp"
"$SERVER" --config-file=/etc/clickhouse-server/config.xml -- --path="$TMP/ch/" \
  --tmp_path="$TMP/ch/tmp/" --http_port="$HTTP" --tcp_port="$TCP" --listen_host=127.0.0.1 \
  --logger.log="$TMP/ch/server.log" --logger.errorlog="$TMP/ch/error.log" >/dev/null 2>&1 &
PID=$!
URL="http://127.0.0.1:$HTTP/"
q() { curl -sf --data-binary "$1" "$URL"; }
for _ in $(seq 1 120); do [ "$(q 'SELECT 1' 2>/dev/null)" = 1 ] && break; sleep 0.5; done
[ "$(q 'SELECT 1' 2>/dev/null)" = 1 ] || skip "clickhouse-server did not start"
VERSION=$(q 'SELECT version()')

# The table exactly as the recorder creates it: a recorder pointed at the server for 3 s.
"$JITTERSCOPE" record --no-mlock --no-tracers --profile-hz 0 --dir "$TMP/store" --duration 3s \
  --clickhouse "$URL" >/dev/null 2>&1
q 'EXISTS TABLE jitterscope_episodes' | grep -q 1 || skip "the recorder did not create the table"

NOW=$(date +%s)
# HOSTS hosts, EPISODES episodes each over SPAN seconds before now; each episode an open row
# and a close row, as the recorder pushes them.
fill() { # fill HOSTS EPISODES SPAN
  local n=$(( $1 * $2 ))
  q "INSERT INTO jitterscope_episodes (host, kind, series, start_ns, end_ns, open, peak, baseline, threshold, version)
     SELECT concat('host-', toString(number % $1)),
            ['throttling', 'reclaim', 'runq-latency', 'psi'][number % 4 + 1],
            concat('cgroup./pod-', toString(number % 37), '.cpu.throttled_pct'),
            toInt64(($NOW - (number * 7919) % $3) * 1000000000) AS s,
            s + toInt64(1000000000 * (1 + number % 30)), o, 50, 0, 20,
            toUInt64(s + 1000000000 * (1 + number % 30)) * 2 + (1 - o)
     FROM system.numbers ARRAY JOIN [1, 0] AS o LIMIT $(( n * 2 ))"
}
median_ms() { # median wall ms of 5 runs of the command
  local t=()
  for _ in 1 2 3 4 5; do
    local a b
    a=$(date +%s%N)
    "$@" >/dev/null
    b=$(date +%s%N)
    t+=($(( (b - a) / 1000000 )))
  done
  printf '%s\n' "${t[@]}" | sort -n | sed -n 3p
}
fill 10 120 3600
ROWS_SMALL=$(q 'SELECT count() FROM jitterscope_episodes')
SMALL=$(median_ms "$JITTERSCOPE" fleet episodes --clickhouse "$URL" --since 1h --json)
SMALL_KIND=$(median_ms "$JITTERSCOPE" fleet episodes --clickhouse "$URL" --since 1h --kind throttling --json)
HOSTS_SMALL=$("$JITTERSCOPE" fleet episodes --clickhouse "$URL" --since 1h --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["hosts"]))')
q 'TRUNCATE TABLE jitterscope_episodes' >/dev/null
fill 10000 50 86400
ROWS_BIG=$(q 'SELECT count() FROM jitterscope_episodes')
BIG_DAY=$(median_ms "$JITTERSCOPE" fleet episodes --clickhouse "$URL" --since 1d --json)
BIG_HOUR=$(median_ms "$JITTERSCOPE" fleet episodes --clickhouse "$URL" --since 1h --json)
BYTES=$(q "SELECT sum(bytes_on_disk) FROM system.parts WHERE table = 'jitterscope_episodes' AND active" 2>/dev/null \
  || q "SELECT sum(bytes) FROM system.parts WHERE table = 'jitterscope_episodes' AND active")

verdict() { [ "$1" -lt 1000 ] && echo '**met**' || echo '**missed**'; }
{
  echo "## Fleet queries (ClickHouse)"
  echo
  echo "\`bench/fleet_query.sh\`, $(date -u +%Y-%m-%d), ClickHouse $VERSION on loopback, synthetic episodes in"
  echo "the recorder's own table (an open and a close row each). Median wall time of 5 runs of"
  echo "\`jitterscope fleet episodes --json\`, process start included."
  echo
  echo "| data | rows | query | time |"
  echo "|---|---:|---|---:|"
  echo "| 10 hosts, 120 episodes each over 1 h | $ROWS_SMALL | \`--since 1h\` ($HOSTS_SMALL hosts) | **$SMALL ms** |"
  echo "| | | \`--since 1h --kind throttling\` | $SMALL_KIND ms |"
  echo "| 10,000 hosts, 50 episodes each over 1 day | $ROWS_BIG | \`--since 1d\` | $BIG_DAY ms |"
  echo "| | | \`--since 1h\` | $BIG_HOUR ms |"
  echo
  echo "The 10,000-host table takes $(( BYTES / 1024 / 1024 )) MiB on disk."
} >"$OUT"
echo "| \`fleet episodes\` over 1 h of 10 hosts < 1 s | $SMALL ms | $(verdict "$SMALL") |" >"$TARGETS"
