# Sourced by the systemd guests' scripts (tests/vm/deb_guest.sh, image_guest.sh): one line per
# check in /mnt/out/checks ("PASS name" or "FAIL name: why"), then "DONE" if the script reached
# its end; on exit the journal is saved and the guest powers off. systemd_checks in lib.sh
# counts the PASS lines against the script's `check` and `require` lines.
# shellcheck shell=bash
set -u
OUT=/mnt/out
exec >>"$OUT/guest.log" 2>&1
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

pass() { echo "PASS $1" >>"$OUT/checks"; echo "== PASS $1"; }
fail() { echo "FAIL $1: $2" >>"$OUT/checks"; echo "== FAIL $1: $2"; }
# check NAME WHY-IF-FALSE COMMAND...
check() {
  local name=$1 why=$2
  shift 2
  if "$@"; then pass "$name"; else fail "$name" "$why"; return 1; fi
}
# require NAME WHY-IF-FALSE COMMAND...: a check the rest depends on; the script ends if it fails.
require() {
  check "$@" || exit 0
}
# A field of /proc/PID/status.
field() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
# Waits up to $2 seconds for "$1" (a shell condition) to hold.
wait_for() {
  local i
  for ((i = 0; i < $2; i++)); do
    eval "$1" && return 0
    sleep 1
  done
  return 1
}
# podman_setup MANAGER: the guest has no overlay module (its modules are not in the image), so
# podman's vfs driver; MANAGER is its cgroup manager, cgroupfs or systemd.
podman_setup() {
  mkdir -p /etc/containers
  printf '[storage]\ndriver = "vfs"\nrunroot = "/run/containers/storage"\ngraphroot = "/var/lib/containers/storage"\n' \
    >/etc/containers/storage.conf
  printf '[engine]\ncgroup_manager = "%s"\nevents_logger = "file"\n' "$1" >/etc/containers/containers.conf
}
# A busybox image for test containers, from the guest's static busybox (nothing can be pulled).
busybox_image() {
  mkdir -p /tmp/bb/bin && cp /bin/busybox /tmp/bb/bin/busybox
  tar -C /tmp/bb -c . | podman import -q - localhost/busybox:jsvm >/dev/null
}
finish() {
  journalctl -b --no-pager >"$OUT/journal.txt" 2>&1
  sync
  # systemctl once failed here to reach systemd ("Failed to connect to bus") after podman
  # ran; the kernel's own power-off still ends the guest rather than leaving it to the timeout.
  systemctl poweroff --no-block || echo o >/proc/sysrq-trigger
  exit 0
}
trap finish EXIT
