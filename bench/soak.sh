#!/usr/bin/env bash
# False alarms on a busy, healthy host (issue 46): the `soak` lab control for SOAK_DURATION
# (default 10m), then bench/soak_alarms.py diagnoses every one- and five-minute window of the
# workload and counts mechanism claims (>= 0.5), advice and episodes per benign hour. Writes a
# Markdown section for docs/BENCHMARKS.md (bench/run.sh calls this and embeds it). Alone:
#
#   sudo JITTERSCOPE=target/release/jitterscope bash bench/soak.sh
#
# Environment (all optional):
#   JITTERSCOPE     release binary (default target/release/jitterscope)
#   SOAK_DURATION   how long the soak runs (default 10m)
#   SOAK_OUT        where to write the Markdown section (default stdout)
#   SOAK_TARGETS    where to write a row for the report's "Targets" table (default: nowhere)
#   BENCH_KEEP=1    keep the recording
#
# Without root it prints "SKIPPED: <reason>", writes a section saying so and exits 0. The lab
# cleans up after itself, Ctrl-C included; the recording is removed on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
JITTERSCOPE=${JITTERSCOPE:-target/release/jitterscope}
case $JITTERSCOPE in /*) ;; *) JITTERSCOPE=$REPO/$JITTERSCOPE ;; esac
OUT=${SOAK_OUT:-/dev/stdout}
TARGETS=${SOAK_TARGETS:-/dev/null}
DUR=${SOAK_DURATION:-10m}

say() { printf '[soak bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
section() { cat >"$OUT"; }

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED: needs root (the lab's cgroups)" >&2
    printf '## False alarms on a busy, healthy host\n\nSKIPPED: not run as root.\n' | section
    exit 0
fi

TMP=$(mktemp -d /var/tmp/jitterscope-soak-bench.XXXXXX)
cleanup() { [ "${BENCH_KEEP:-0}" = 1 ] && say "kept $TMP" || rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

say "lab check soak for $DUR"
# A claim fails the check; the recording and the report are what is measured either way.
"$JITTERSCOPE" lab check soak --duration "$DUR" --dir "$TMP/store" --json >"$TMP/report.json" \
    2>"$TMP/lab.log" || say "lab check soak failed: $(tail -1 "$TMP/lab.log")"
say "diagnosing every window"
python3 "$HERE/soak_alarms.py" "$JITTERSCOPE" "$TMP/store" "$TMP/report.json" >"$TMP/alarms.json" \
    2>"$TMP/claims.txt"
read -r secs one five claims_h episodes_h < <(python3 - "$TMP/alarms.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
w1, w5 = a["windows"]["60s"], a["windows"]["300s"]
hours = a["workload_s"] / 3600
claims = sum(w1["claims"].values())
print(a["workload_s"], w1["windows"], w5["windows"], round(claims / hours, 1),
      round(sum(a["episodes_per_hour"].get(k, 0) for k in ("leak-trend", "throttling", "reclaim-stalls", "tlb-storm", "negative-dentries")), 1))
PY
)
fmt() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["windows"][sys.argv[2]][sys.argv[3]]; print(", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none")' "$TMP/alarms.json" "$1" "$2"; }
verdict() { awk -v v="$1" 'BEGIN { print (v == 0) ? "met" : "missed" }'; }
printf '| mechanism claims on a busy, healthy host: 0 an hour | %s an hour | **%s** |\n' "$claims_h" "$(verdict "$claims_h")" >>"$TARGETS"
section <<EOF2
## False alarms on a busy, healthy host

\`lab check soak --duration $DUR\` (docs/LAB.md: a compile loop, a compressing backup, cron-like
churn, a web server under a loopback load generator, SQLite random reads, both CPUs busy, a
service warming up, short-lived tools that grow and exit), then \`bench/soak_alarms.py\`:
\`diagnose\` of every 60 s window (stepping 30 s) and every 5-minute window (stepping 60 s),
and \`events\` over the ${secs} s of workload.

| windows | mechanism claims (>= 0.5) | advice (< 0.5) |
|---|---|---|
| ${one} of 60 s | $(fmt 60s claims) | $(fmt 60s advice) |
| ${five} of 5 min | $(fmt 300s claims) | $(fmt 300s advice) |

Claims per benign hour (those of the 60 s windows over the hours of workload; an incident
shows in two overlapping windows): ${claims_h}.
Mechanism episodes per hour (leak trend, throttling, reclaim stalls, TLB storm, negative
dentries): ${episodes_h}. All episodes, an hour: $(python3 -c 'import json,sys; print(", ".join(f"{k} {v}" for k, v in sorted(json.load(open(sys.argv[1]))["episodes_per_hour"].items())) or "none")' "$TMP/alarms.json").
EOF2
say "done: ${claims_h} claims an hour"
