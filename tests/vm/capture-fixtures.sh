#!/usr/bin/env bash
# Copies the cgroup files the kernel matrix's guests saved from their probe cgroup (a CPU quota,
# a memory threshold, writes: see tests/vm/guest.py) into tests/fixtures/vm/<kernel>-<layout>/,
# the real files of other kernels and layouts that the cgroup parsers are tested on.
# Run `make test-vm` (or tests/vm/run.sh) first. Tests assert on the captured values (the io.stat
# parser, the 6.1 shrinker-scale golden report): after re-capturing, run them and read the failures.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=0
for d in target/vm/out/*/probe; do
  [ -d "$d" ] || continue
  cell=$(basename "$(dirname "$d")")
  mkdir -p "tests/fixtures/vm/$cell"
  rm -rf "tests/fixtures/vm/$cell/probe"
  cp -r "$d" "tests/fixtures/vm/$cell/probe"
  n=$((n + 1))
done
# Lab recordings from guests that the diagnosis golden tests replay (crates/diagnose/tests/
# golden.rs): <scenario>-<cell>/ is the store, <scenario>-<cell>.json the `lab check` report.
for pair in 6.1-v2:shrinker-scale 6.12-v2:memory-high 6.12-v2:swap-in 6.12-v2:dirty-throttle; do
  cell=${pair%%:*} s=${pair#*:}
  src=target/vm/out/$cell/lab
  [ -d "$src/$s" ] || continue
  dst=tests/fixtures/diagnose/$s-$cell
  rm -rf "$dst" "$dst.json"
  mkdir -p "$dst"
  cp "$src/$s"/seg-* "$dst/"
  cp "$src/$s.json" "$dst.json"
  echo "capture-fixtures: $dst (bless its report: JITTERSCOPE_BLESS=1 cargo test -p jitterscope-diagnose --test golden)"
done
[ $n -gt 0 ] || { echo "capture-fixtures: no guest output under target/vm/out (run tests/vm/run.sh)" >&2; exit 1; }
echo "capture-fixtures: $n cells copied to tests/fixtures/vm"
