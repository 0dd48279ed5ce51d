#!/usr/bin/env bash
# Records tests/fixtures/store-lanes-v3: a store written by this build on this machine's own
# /proc, whose detail lane holds delta tables (codec 5) after the first table of each frame
# (codec 4), for crates/model/tests/detail_codec.rs. 65 samples at 200 ms, so the store has two
# frames (60 records, then 5); while it records, a few short processes start and end, so that
# tables gain and lose rows. No profile and no tracers: the lanes' tables are what it is for.
#
#   bash scripts/capture-store-fixture.sh            # needs the release binary (make build)
#
# Root is not needed; as root the table has every process's io and schedstat. The store's LOCK
# is removed: a fixture is read, never written. Regenerate it only when a new detail codec
# needs a recorded store; the old one stands for the stores on real hosts and stays.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${JITTERSCOPE:-target/release/jitterscope}
out=tests/fixtures/store-lanes-v3
[ -x "$bin" ] || { echo "no $bin: run make build first" >&2; exit 1; }
[ -e "$out" ] && { echo "$out exists; remove it first to re-record" >&2; exit 1; }
tmp=$(mktemp -d)
churn=
cleanup() {
    [ -n "$churn" ] && kill "$churn" 2>/dev/null
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
# One short process every 300 ms while the recorder runs.
( while :; do sleep 0.3; done ) &
churn=$!
"$bin" record --dir "$tmp/store" --interval 200ms --duration 13s --profile-hz 0 --no-tracers \
    >/dev/null 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
rm -f "$tmp/store/LOCK"
mkdir -p "$out"
cp "$tmp/store"/* "$out"/
ls -l "$out"
