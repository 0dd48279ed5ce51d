#!/usr/bin/env bash
# Records /proc/stat once a second for 20 s into tests/fixtures/steal/stat.<n>, for the
# cpu.steal rule's tests (crates/diagnose/tests/steal.rs). The machine this runs on is a VM, so
# its steal column is the hypervisor's real figure (small, unless the host is oversubscribed
# when it runs); steal cannot be made on purpose here (TCG guests have none, and KVM does not
# boot Debian's kernels on this machine), so the tests also move idle ticks of this recording
# into steal, as a hypervisor would, and say so.
set -euo pipefail
cd "$(dirname "$0")/.."
out=tests/fixtures/steal
rm -rf "$out"
mkdir -p "$out"
for n in $(seq 0 19); do
    cp /proc/stat "$out/stat.$n"
    sleep 1
done
uname -r > "$out/KERNEL"
date -u +%FT%TZ > "$out/CAPTURED"
grep -h '^cpu' "$out/stat.0" "$out/stat.19" | awk '{print $1, "steal", $9}' >&2
