#!/usr/bin/env bash
# Records every lab scenario at low intensity into a small store under tests/fixtures/diagnose/
# (<scenario>/ is the store, <scenario>.json the `lab check --json` report with its windows),
# for the diagnosis golden tests. Needs root. The tests assert on what these recordings hold,
# so re-capturing can change their expectations: run the tests after, and read the failures.
#
#   scripts/capture-diagnose-fixtures.sh                    # every scenario
#   scripts/capture-diagnose-fixtures.sh oom-leak worker-leak   # only these
#   scripts/capture-diagnose-fixtures.sh shrinker-scale-full-dcache
#       # shrinker-scale on a host whose dentry cache holds 1.5M entries (as after a build),
#       # which the first drop_caches round frees; named only, not part of "every scenario"
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${JITTERSCOPE:-target/release/jitterscope}
out=tests/fixtures/diagnose
mkdir -p "$out"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    read -ra names <<< "$("$bin" lab list --json | python3 -c 'import json,sys; print(" ".join(x["name"] for x in map(json.loads, sys.stdin)))')"
fi
for s in "${names[@]}"; do
    scenario=$s
    case $s in
        *-full-dcache)
            scenario=${s%-full-dcache}
            # Failed look-ups leave negative dentries: 1.5M of them fill the cache as a big
            # build or a file walk would. Names in /tmp itself, which exists and stays: an
            # rmdir'ed scratch directory would take its negative dentries with it.
            python3 -c 'import os
for i in range(1500000):
    try: os.stat(f"/tmp/.jitterscope-capture-nx{i}")
    except OSError: pass'
            ;;
    esac
    # Scenarios whose process ends at 70% of the run need a trend of several samples first.
    case $scenario in
        oom-leak|worker-leak) duration=10s ;;
        # Census intervals every 3 s: enough of them in the window.
        nss-probe) duration=10s ;;
        # A live process's growth is a leak, and a leak-trend episode, after 90 s of it
        # (memory.leak's CONFIRM_S): shorter, it could be a service warming up.
        native-leak|python-leak) duration=100s ;;
        *) duration=6s ;;
    esac
    rm -rf "${out:?}/$s" "$out/$s.json"
    echo "capturing $s" >&2
    # A failing check still leaves its recording and report: keep them, say so.
    "$bin" lab check "$scenario" --intensity low --duration "$duration" --dir "$out/$s" --json > "$out/$s.json" \
        || echo "  $s: lab check failed (kept for inspection)" >&2
    rm -f "$out/$s/LOCK"
done
du -sh "$out"
