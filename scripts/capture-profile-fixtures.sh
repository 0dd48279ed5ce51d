#!/usr/bin/env bash
# Captures the stack sampler's fixtures on this machine into OUT (tests/fixtures/profile):
#   records.bin  - the raw perf ring records of 3 s of system-wide 99 Hz sampling
#   records-stack.bin - 1 s of the same with 1 KiB user stack copies and user registers
#   slices.json  - the per-second slices the real resolver made of them
#   maps-*.txt   - /proc/<pid>/maps of this shell, of a plain process (cat) and of a JIT (node, when
#                  installed), for the mapping-table parser
# while the profiler test's workloads run (a user-space busy loop, then a stat() storm), so
# the fixtures hold idle, user and kernel stacks. Needs root, gcc and cargo.
#
# usage: scripts/capture-profile-fixtures.sh OUT
set -euo pipefail
out=${1:?usage: capture-profile-fixtures.sh OUT}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
gcc -O1 -fno-omit-frame-pointer -o "$tmp/busy" "$here/crates/cli/tests/profile/busy.c"
cargo build -q --release -p jitterscope-profile --example capture
exe=${CARGO_TARGET_DIR:-$here/target}/release/examples/capture
("$tmp/busy" spin 1.5 >/dev/null; "$tmp/busy" stat 1.5 >/dev/null) &
"$exe" 3 "$out/records.bin" "$out/slices.json"
wait
# The same with 1 KiB user stack copies (the default copies 8 KiB; 1 KiB keeps the file small
# and parses the same way): records-stack.bin.
"$tmp/busy" spin 1.5 >/dev/null &
CAPTURE_STACK_BYTES=1024 "$exe" 1 "$out/records-stack.bin" "$tmp/slices-stack.json"
wait
cat /proc/$$/maps >"$out/maps-bash.txt"
cat /proc/self/maps >"$out/maps-cat.txt"
if command -v node >/dev/null; then
  node -e 'process.stdout.write(require("fs").readFileSync("/proc/self/maps"))' >"$out/maps-node.txt"
fi
