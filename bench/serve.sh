#!/usr/bin/env bash
# `serve` under load (issue 24): 200 concurrent heavy requests and 1000 idle sockets against a
# synthesized 24 h store, loopback only. Measured: /api/v1/range latency during the load (target
# p99 < 200 ms), the server's peak RSS (target < 256 MiB, the documented ceiling), how the heavy
# requests were answered, and the time from SIGTERM to exit (target < 2 s).
#
#   sudo JITTERSCOPE=target/release/jitterscope SYNTH_STORE=target/release/examples/synth_store \
#       bash bench/serve.sh
#
#   SERVE_OUT       where the markdown section goes (default stdout)
#   SERVE_TARGETS   where rows for the report's "Targets" table go (default: nowhere)
#   SERVE_SECONDS   length of the source recording (default 30)
#   SERVE_HOURS     length of the synthesized store (default 24)
#
# Without root it prints "SKIPPED: <reason>" and writes a section saying so. The recorder, the
# server and the temporary stores are removed on exit, Ctrl-C included.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${SERVE_OUT:-/dev/stdout}
TARGETS=${SERVE_TARGETS:-/dev/null}
SECONDS_REC=${SERVE_SECONDS:-30}
HOURS=${SERVE_HOURS:-24}

say() { printf '[serve bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
section() { cat >"$OUT"; }

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED: needs root (the recorder reads every process)" >&2
    printf '## serve under load\n\nSKIPPED: not run as root.\n' | section
    exit 0
fi

TMP=$(mktemp -d /var/tmp/jitterscope-serve-bench.XXXXXX)
PIDS=()
cleanup() {
    ((${#PIDS[@]})) && kill "${PIDS[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    [ "${BENCH_KEEP:-0}" = 1 ] && say "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${SYNTH_STORE:-}" ]; then
    SYNTH=$SYNTH_STORE
else
    (cd "$REPO" && cargo build --release -q -p jitterscope-diagnose --example synth_store)
    SYNTH=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/synth_store
    case $SYNTH in /*) ;; *) SYNTH=$REPO/$SYNTH ;; esac
fi

say "recording ${SECONDS_REC} s"
"$JITTERSCOPE" record --dir "$TMP/src" --duration "${SECONDS_REC}s" 2>"$TMP/record.log"
say "synthesizing a ${HOURS} h store"
"$SYNTH" "$TMP/src" "$TMP/store" "$HOURS" >"$TMP/synth.out"
kv() { grep "^$2=" "$1" | cut -d= -f2; }
first=$(( $(kv "$TMP/synth.out" first_ts_ns) / 1000000000 ))
last=$(( $(kv "$TMP/synth.out" last_ts_ns) / 1000000000 + 1 ))
store_mb=$(du -sm "$TMP/store" | cut -f1)

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$JITTERSCOPE" serve --dir "$TMP/store" --listen "127.0.0.1:$port" --metrics-max-age 0 2>"$TMP/serve.log" &
SERVER=$!
PIDS+=("$SERVER")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/api/v1/range" >/dev/null && break; sleep 0.1; done

# The web UI on this store, before the load: first paint, window changes, and a report of
# the last 10 minutes written and opened offline (bench/web.mjs).
WEB_TESTS=$REPO/web/tests
if [ ! -d "$WEB_TESTS/node_modules/puppeteer-core" ] && command -v npm >/dev/null; then
    npm ci --prefix "$WEB_TESTS" --no-audit --no-fund --loglevel=error >&2 || true
fi
say "an incident report of the last 10 minutes"
t0=$(date +%s%N)
"$JITTERSCOPE" report --dir "$TMP/store" --from $((last - 600)) --to "$last" -o "$TMP/report.html" 2>"$TMP/report.log"
report_s=$(awk -v n=$(( $(date +%s%N) - t0 )) 'BEGIN { printf "%.2f", n / 1e9 }')
report_kib=$(( $(stat -c %s "$TMP/report.html") / 1024 ))
web_json='{}'
if command -v chromium >/dev/null && [ -d "$WEB_TESTS/node_modules/puppeteer-core" ]; then
    say "the web UI in chromium: first paint, window changes, the report offline"
    web_json=$(WEB_TESTS_DIR=$WEB_TESTS node "$HERE/web.mjs" "http://127.0.0.1:$port" "$last" "$TMP/report.html" 2>"$TMP/web.log" || echo '{}')
else
    say "SKIPPED: the browser part (chromium or web/tests' puppeteer-core missing)"
fi
wj() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d.get('$1', 'not measured'))" "$web_json"; }

say "load: 200 heavy requests, 1000 idle sockets, /api/v1/range polled"
python3 - "$port" "$SERVER" "$first" "$last" >"$TMP/load.json" <<'PY'
import json, os, resource, socket, sys, threading, time
port, pid, first, last = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))

def get(path, timeout=120):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n".encode())
    buf = b""
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        buf += b
    s.close()
    return int(buf.split(b" ", 2)[1]), len(buf)

def rss():
    with open(f"/proc/{pid}/status") as f:
        d = dict(l.split(":", 1) for l in f)
    return int(d["VmRSS"].split()[0]) * 1024, int(d["VmHWM"].split()[0]) * 1024

idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(1000)]
day_from, hour_from = max(first, last - 86400), last - 3600
heavy = [
    ("series *** 5000 pts, hour", f"/api/v1/series?select=***&points=5000&from={hour_from}&to={last}"),
    ("series RSS top 10, day", f"/api/v1/series?select=proc.*.rss_bytes&top=10&points=1500&from={day_from}&to={last}"),
    ("series cgroup CPU, hour", f"/api/v1/series?select=cgroup.*.cpu.usage_pct&points=1500&from={hour_from}&to={last}"),
    ("events, day", f"/api/v1/events?from={day_from}&to={last}"),
    ("findings, hour", f"/api/v1/findings?from={hour_from}&to={last}"),
    ("flame, hour", f"/api/v1/flame?from={hour_from}&to={last}"),
    # Every series with top=500 (over an hour, and over the day), and every cgroup's CPU over
    # the day: what made memory follow the request, not the store.
    ("series * top 500, hour", f"/api/v1/series?select=*&top=500&points=600&from={hour_from}&to={last}"),
    ("series * top 500, day", f"/api/v1/series?select=*&top=500&points=600&from={day_from}&to={last}"),
    ("series cgroup CPU, day", f"/api/v1/series?select=cgroup.*.cpu.usage_pct&points=1500&from={day_from}&to={last}"),
]
results, lock = [], threading.Lock()
def client(req):
    label, path = req
    t0 = time.monotonic()
    try:
        st, n = get(path)
    except Exception as e:
        st, n = f"error: {e}", 0
    with lock:
        results.append((label, st, n, time.monotonic() - t0))
threads = [threading.Thread(target=client, args=(heavy[i % len(heavy)],)) for i in range(200)]
t_start = time.monotonic()
for t in threads:
    t.start()
lat, peak_rss = [], 0
while any(t.is_alive() for t in threads) or time.monotonic() - t_start < 10:
    t0 = time.monotonic()
    try:
        st, _ = get("/api/v1/range", timeout=30)
    except OSError:
        st = None  # no answer within 30 s: counted as unanswered
    lat.append((time.monotonic() - t0) * 1000 if st == 200 else float("inf"))
    peak_rss = max(peak_rss, rss()[0])
    time.sleep(0.05)
for t in threads:
    t.join()
load_s = time.monotonic() - t_start
hwm = rss()[1]
# Idle sockets closed by the server (header timeout) by now?
time.sleep(max(0.0, 12 - (time.monotonic() - t_start)))
closed = 0
for s in idle:
    try:
        closed += s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        pass  # still open
    except OSError:
        closed += 1
by = {}
for ep, st, n, dt in results:
    k = f"{ep}|{st}"
    a = by.setdefault(k, [0, 0.0, 0])
    a[0] += 1; a[1] = max(a[1], dt); a[2] = max(a[2], n)
# A heavy read whose client hangs up after 1 s: the server's CPU time from then on.
def cpu_ticks():
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return int(v[11]) + int(v[12])
tick = os.sysconf("SC_CLK_TCK")
s = socket.create_connection(("127.0.0.1", port))
s.sendall(f"GET /api/v1/findings?from={last - 86000}&to={last} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
time.sleep(1)
s.close()
time.sleep(0.5)
at_half = cpu_ticks()
time.sleep(2)
after_hangup = (cpu_ticks() - at_half) / tick
# In-flight heavy work when SIGTERM comes.
inflight = [threading.Thread(target=client, args=(heavy[4],)) for _ in range(4)]
for t in inflight:
    t.start()
time.sleep(0.3)
import signal
t0 = time.monotonic()
os.kill(pid, signal.SIGTERM)
while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z":
    if time.monotonic() - t0 > 10:
        break
    time.sleep(0.01)
exit_s = time.monotonic() - t0
lat.sort()
p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
print(json.dumps({
    "range_n": len(lat), "range_unanswered": sum(1 for x in lat if x == float("inf")),
    "range_p50_ms": p(0.5), "range_p99_ms": p(0.99), "range_max_ms": lat[-1],
    "rss_peak_mb": max(peak_rss, hwm) / 2**20, "load_s": load_s, "idle_closed": closed,
    "exit_s": exit_s, "cpu_after_hangup_s": after_hangup, "answers": {k: {"n": v[0], "max_s": v[1], "max_bytes": v[2]} for k, v in sorted(by.items())},
}))
PY
wait "$SERVER" 2>/dev/null || true
PIDS=()

j() { python3 -c "import json,sys; d=json.load(open('$TMP/load.json')); print($1)"; }
p50=$(j '"%.1f" % d["range_p50_ms"]')
p99=$(j '"%.1f" % d["range_p99_ms"]')
rmax=$(j '"%.1f" % d["range_max_ms"]')
rn=$(j 'd["range_n"]')
runans=$(j 'd["range_unanswered"]')
rss=$(j '"%.0f" % d["rss_peak_mb"]')
load_s=$(j '"%.1f" % d["load_s"]')
closed=$(j 'd["idle_closed"]')
exit_s=$(j '"%.2f" % d["exit_s"]')
hangup=$(j '"%.2f" % d["cpu_after_hangup_s"]')
answers=$(j '"\n".join("| %s | %s | %d | %.1f s | %.0f kB |" % (k.split("|")[0], k.split("|")[1], v["n"], v["max_s"], v["max_bytes"]/1e3) for k, v in d["answers"].items())')
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v ~ /^[0-9.]+$/ && v < t) ? "met" : "missed" }'; }
paint_h=$(wj first_paint_hour_ms)
paint_d=$(wj first_paint_day_ms)
change_med=$(wj window_change_median_ms)
change_max=$(wj window_change_max_ms)
report_render=$(wj report_render_ms)
printf '| web UI on a %s h store: first paint of the hour < 1 s | %s ms | **%s** |\n' "$HOURS" "$paint_h" "$(verdict "$paint_h" 1000)" >>"$TARGETS"
printf '| web UI: redraw after a window change < 200 ms (slowest of 5) | %s ms | **%s** |\n' "$change_max" "$(verdict "$change_max" 200)" >>"$TARGETS"
printf '| incident report of 10 minutes: written < 2 s, < 2 MiB | %s s, %s KiB | **%s** |\n' "$report_s" "$report_kib" \
    "$( [ "$(verdict "$report_s" 2)" = met ] && [ "$(verdict "$report_kib" 2048)" = met ] && echo met || echo missed)" >>"$TARGETS"

printf '| `serve` under load: `/api/v1/range` p99 < 200 ms | %s ms | **%s** |\n' "$p99" "$(verdict "$p99" 200)" >>"$TARGETS"
printf '| `serve` under load: peak RSS < 256 MiB | %s MiB | **%s** |\n' "$rss" "$(verdict "$rss" 256)" >>"$TARGETS"
printf '| `serve`: exit after SIGTERM < 2 s | %s s | **%s** |\n' "$exit_s" "$(verdict "$exit_s" 2)" >>"$TARGETS"
section <<EOF
## serve under load

\`bench/serve.sh\`: a ${SECONDS_REC} s recording of this host cycled by \`synth_store\` into a
${HOURS} h store (${store_mb} MB). One \`serve\` at its defaults; a Python client on loopback opens
1000 sockets that send nothing, then sends 200 heavy requests at once (nine kinds in turn: a
\`***\` select of 5000 points over an hour, the 10 largest RSS over a day, every cgroup's CPU over
an hour and over the day, every series with \`top=500\` over an hour and over the day, events
over a day, findings over an hour, a flame graph over an hour), while it asks
for \`/api/v1/range\` every 50 ms until the last heavy answer (${load_s} s). Then a diagnosis of
a day is sent alone and its client hangs up after 1 s; last, four diagnoses are sent and the
server gets SIGTERM 0.3 s later.

| measure | value | target |
|---|---|---|
| \`/api/v1/range\` during the load, ${rn} requests (${runans} not answered within 30 s): p50 / p99 / max | ${p50} / ${p99} / ${rmax} ms | p99 < 200 ms ($(verdict "$p99" 200)) |
| server's peak RSS (VmHWM and VmRSS polled) | ${rss} MiB | < 256 MiB ($(verdict "$rss" 256)) |
| idle sockets closed by the server (header timeout 10 s) | ${closed} of 1000 | all |
| server CPU in the 2 s from 0.5 s after a client hung up on a day's diagnosis (sent alone, after the load) | ${hangup} s | 0: the read is cancelled |
| SIGTERM to exit, four diagnoses in flight | ${exit_s} s | < 2 s ($(verdict "$exit_s" 2)) |

### The web UI on this store

Before the load, headless chromium (\`bench/web.mjs\`, puppeteer-core) opened the page over
loopback: first paint is from navigation to every timeline drawn, a window change is the page's
\`show\` of an hour shifted by 10 minutes (five times), and \`jitterscope report\` wrote the last
10 minutes as an incident report, which chromium then opened offline.

| measure | value | target |
|---|---|---|
| first paint, the last hour (the default view) | ${paint_h} ms | < 1 s ($(verdict "$paint_h" 1000)) |
| first paint, the whole day | ${paint_d} ms | |
| redraw after a window change: median / slowest of 5 | ${change_med} / ${change_max} ms | < 200 ms ($(verdict "$change_max" 200)) |
| \`jitterscope report\` of 10 minutes: time, size | ${report_s} s, ${report_kib} KiB | < 2 s, < 2 MiB |
| the report opened offline, to its evidence drawn | ${report_render} ms | |

How the 200 heavy requests were answered (429: the queue of 16 behind the 2 readers was full;
413: over a per-request budget, refused before reading):

| request | status | requests | slowest | largest answer |
|---|---|---|---|---|
${answers}
EOF
say "done: range p99 ${p99} ms, peak RSS ${rss} MiB, exit ${exit_s} s"
