#!/usr/bin/env bash
# The Debian package, installed for real (make test-deb): boots Debian's 6.1 kernel in qemu with
# systemd as PID 1 on the kernel matrix's debootstrap rootfs, where tests/vm/deb_guest.sh
# installs target/debian/jitterscope_*.deb with dpkg, configures it to send to the
# VictoriaMetrics and ClickHouse started here (lib.sh's start_engines: the guest reaches them and
# nothing else through qemu's user-mode network), runs the services and removes and purges the
# package. Prints each check (and the units' systemd-analyze exposure, as INFO lines) and fails
# if any failed or the guest did not finish.
#
#   make deb && bash tests/vm/deb.sh        (make test-deb)
#   JSVM_SYSTEMD_KERNEL=6.12 bash tests/vm/deb.sh
#   JSVM_CAPTURE_FIXTURES=1 bash tests/vm/deb.sh   # also refresh tests/fixtures/containers
#
# The guest's log, journal and checks are in target/vm/out/deb/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

fresh_share deb "$ROOT/target/debian/jitterscope_*.deb" deb
# The recorder's unit before it allowed IP (and before Type=notify), whose exposure the guest
# prints beside the installed units'.
git -C "$ROOT" show fe85fef:deploy/systemd/jitterscope.service >"$in/jitterscope-fe85fef.service" 2>/dev/null \
  || { rm -f "$in/jitterscope-fe85fef.service"; log "deb: fe85fef is not in this clone: no older unit to compare"; }
start_engines
log "deb: installing $(basename "$artefact")"
# JSVM_DEB_GUEST: another guest script, to investigate in the same guest.
systemd_checks deb "${JSVM_DEB_GUEST:-$ROOT/tests/vm/deb_guest.sh}" "$in" "$out"
# The files the guest read container names from, as fixtures of the name parsers' tests.
if [ "${JSVM_CAPTURE_FIXTURES:-0}" = 1 ]; then
  rm -rf "$ROOT/tests/fixtures/containers/podman"
  mkdir -p "$ROOT/tests/fixtures/containers"
  cp -r "$out/fixtures/podman" "$ROOT/tests/fixtures/containers/podman"
  log "deb: fixtures copied to tests/fixtures/containers/podman"
fi
