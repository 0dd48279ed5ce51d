#!/usr/bin/env bash
# The Debian package, installed for real (make test-deb): boots Debian's 6.1 kernel in qemu with
# systemd as PID 1 on the kernel matrix's debootstrap rootfs, where tests/vm/deb_guest.sh
# installs target/debian/jitterscope_*.deb with dpkg, runs the services and removes and purges
# the package. Prints each check and fails if any failed or the guest did not finish.
#
#   make deb && bash tests/vm/deb.sh        (make test-deb)
#   JSVM_DEB_KERNEL=6.12 bash tests/vm/deb.sh
#   JSVM_CAPTURE_FIXTURES=1 bash tests/vm/deb.sh   # also refresh tests/fixtures/containers
#
# The guest's log, journal and checks are in target/vm/out/deb/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

deb=$(ls -t "$ROOT"/target/debian/jitterscope_*.deb 2>/dev/null | head -1 || true)
[ -n "$deb" ] || die "no package in target/debian (make deb)"
kernel=${JSVM_DEB_KERNEL:-6.1}
kdir=$(kernel_dir "$kernel")
ird=$(initramfs "$kdir")
rel=$(basename "$kdir")
in=$VM/in/deb
out=$VM/out/deb
rm -rf "$in" "$out"
mkdir -p "$in" "$out"
cp "$deb" "$in/"
# JSVM_DEB_GUEST: another guest script, to investigate in the same guest.
cp "${JSVM_DEB_GUEST:-$ROOT/tests/vm/deb_guest.sh}" "$in/deb_guest.sh"
cp "$ROOT/tests/vm/deb-guest.service" "$in/jsvm.service"

log "deb: booting $rel with systemd, installing $(basename "$deb")"
start=$(date +%s)
rc=0
# Single-threaded TCG, as the matrix's cells (see run.sh).
timeout --foreground -k 10 "${JSVM_TIMEOUT:-900}" qemu-system-x86_64 \
  -accel tcg,thread=single -cpu max -smp 2 -m 2048 \
  -kernel "$kdir/boot/vmlinuz-$rel" -initrd "$ird" \
  -append "console=ttyS0 panic=-1 quiet loglevel=3 mitigations=off jsvm.init=systemd" \
  -drive "file=$IMAGE,format=raw,if=virtio,snapshot=on" \
  -virtfs "local,path=$in,mount_tag=in,security_model=none,readonly=on" \
  -virtfs "local,path=$out,mount_tag=out,security_model=none" \
  -nic none -nographic -no-reboot -serial "file:$out/console.log" -monitor none \
  </dev/null >"$out/qemu.log" 2>&1 || rc=$?
log "deb: guest ended after $(( $(date +%s) - start )) s (qemu exit $rc)"

[ -f "$out/checks" ] || { tail -30 "$out/console.log" >&2; die "the guest wrote no checks (console above, $out)"; }
sed 's/^/deb: /' "$out/checks" >&2
failed=$(grep -c '^FAIL' "$out/checks" || true)
[ "$failed" = 0 ] || die "$failed package checks failed (guest.log, journal.txt in $out)"
grep -qx DONE "$out/checks" || die "the guest script stopped before its end (guest.log in $out)"
# Every check must have run and passed: a script that skipped some would otherwise pass.
want=$(grep -c '^check ' "${JSVM_DEB_GUEST:-$ROOT/tests/vm/deb_guest.sh}")
passed=$(grep -c '^PASS' "$out/checks" || true)
[ "$passed" = "$want" ] || die "$passed checks passed of the $want the script has"
log "deb: all $passed package checks passed"
# The files the guest read container names from, as fixtures of the name parsers' tests.
if [ "${JSVM_CAPTURE_FIXTURES:-0}" = 1 ]; then
  rm -rf "$ROOT/tests/fixtures/containers/podman"
  mkdir -p "$ROOT/tests/fixtures/containers"
  cp -r "$out/fixtures/podman" "$ROOT/tests/fixtures/containers/podman"
  log "deb: fixtures copied to tests/fixtures/containers/podman"
fi
