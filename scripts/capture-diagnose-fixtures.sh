#!/usr/bin/env bash
# Records every lab scenario at low intensity into a small store under tests/fixtures/diagnose/
# (<scenario>/ is the store, <scenario>.json the `lab check --json` report with its windows),
# for the diagnosis golden tests. Needs root. The tests assert on what these recordings hold,
# so re-capturing can change their expectations: run the tests after, and read the failures.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${JITTERSCOPE:-target/release/jitterscope}
out=tests/fixtures/diagnose
mkdir -p "$out"
for s in $("$bin" lab list --json | python3 -c 'import json,sys; print(" ".join(x["name"] for x in json.load(sys.stdin)))'); do
    rm -rf "${out:?}/$s" "$out/$s.json"
    echo "capturing $s" >&2
    # A failing check still leaves its recording and report: keep them, say so.
    "$bin" lab check "$s" --intensity low --duration 6s --dir "$out/$s" --json > "$out/$s.json" \
        || echo "  $s: lab check failed (kept for inspection)" >&2
    rm -f "$out/$s/LOCK"
done
du -sh "$out"
