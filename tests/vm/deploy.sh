#!/usr/bin/env bash
# The package test (tests/vm/deb.sh) and the image test (tests/vm/image.sh) at the same time
# (make test-deploy, as CI runs them): each boots one guest under single-threaded TCG, which
# keeps one of this machine's two cores busy, and most of each guest's time is waiting for
# the services, the exports and the diagnosis to show. One after the other they took 697 s
# (374 + 323); side by side, the longer of the two.
#
#   make deb image && bash tests/vm/deploy.sh
#
# What the two share is made first, one at a time: the bookworm rootfs (sourcing lib.sh
# builds it) and both kernels (fetched through the same private apt lists). Each test's lines
# are printed as they come; it fails if either failed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
for k in "${JSVM_SYSTEMD_KERNEL:-6.1}" 6.12; do
  kdir=$(kernel_dir "$k")
  initramfs "$kdir" >/dev/null
done
# Each test in a process group of its own (job control), so that an interrupt stops both:
# background jobs of a script ignore SIGINT.
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done; wait' EXIT
trap 'exit 130' INT TERM
set -m
bash "$ROOT/tests/vm/deb.sh" &
pids+=($!)
bash "$ROOT/tests/vm/image.sh" &
pids+=($!)
set +m
failed=()
wait "${pids[0]}" || failed+=(deb)
wait "${pids[1]}" || failed+=(image)
pids=()
[ ${#failed[@]} = 0 ] || die "failed: ${failed[*]} (their lines above)"
log "deploy: the package and the image passed"
