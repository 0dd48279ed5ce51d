# Sourced by the systemd guests' scripts (tests/vm/deb_guest.sh, image_guest.sh): one line per
# check in /mnt/out/checks ("PASS name" or "FAIL name: why"), then "DONE" if the script reached
# its end; on exit the journal is saved and the guest powers off. systemd_checks in lib.sh
# counts the PASS lines against the script's `check` and `require` lines.
# shellcheck shell=bash
set -u
OUT=/mnt/out
exec >>"$OUT/guest.log" 2>&1
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

# guest.log's lines also say when, in seconds since the script started.
pass() { echo "PASS $1" >>"$OUT/checks"; echo "== PASS $1 [${SECONDS}s]"; }
fail() { echo "FAIL $1: $2" >>"$OUT/checks"; echo "== FAIL $1: $2 [${SECONDS}s]"; }
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
# net_up: the guest's address on qemu's user-mode network (lib.sh's start_engines), with
# busybox's ip (the minimal rootfs has no iproute2); the engines are at 10.0.2.100. Prints the
# interface's name.
ENGINES_VM=http://10.0.2.100:8428
ENGINES_CH=http://10.0.2.100:8123
net_up() {
  local dev
  for dev in /sys/class/net/*; do
    dev=${dev##*/}
    [ "$dev" = lo ] || break
  done
  busybox ip addr add 10.0.2.15/24 dev "$dev" 2>/dev/null
  busybox ip link set "$dev" up
  busybox ip route add default via 10.0.2.2 dev "$dev" 2>/dev/null
  echo "$dev"
}
# http URL: "STATUS BODY" of a GET, over bash's /dev/tcp: the guests have no curl, bookworm's
# static busybox wget segfaults, trixie's has no python. HTTP/1.0, so the server closes the
# connection after its answer (no chunked body); 20 s at most.
http() {
  local url=${1#http://} hostport path fd resp status
  hostport=${url%%/*}
  path=${url#"$hostport"}
  path=/${path#/}
  exec {fd}<>"/dev/tcp/${hostport%:*}/${hostport##*:}" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$hostport" >&"$fd"
  resp=$(timeout 20 cat <&"$fd")
  exec {fd}>&-
  status=${resp%%$'\r'*}
  status=${status#* }
  printf '%s %s\n' "${status%% *}" "${resp#*$'\r\n\r\n'}"
}
# http_get URL: the body; fails unless the status is 200.
http_get() {
  local r
  r=$(http "$1") || return 1
  printf '%s\n' "${r#* }"
  [ "${r%% *}" = 200 ]
}
# urlenc STRING: percent-encoded, for a query parameter.
urlenc() {
  local s=$1 i c o=
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case $c in
      [a-zA-Z0-9._~-]) o+=$c ;;
      *) printf -v c '%%%02X' "'$c"; o+=$c ;;
    esac
  done
  echo "$o"
}
# ch SQL: ClickHouse's answer (18.16 reads GET queries); vm_query PROMQL: VictoriaMetrics'
# instant query, as JSON.
ch() { http_get "$ENGINES_CH/?query=$(urlenc "$1")"; }
vm_query() { http_get "$ENGINES_VM/api/v1/query?query=$(urlenc "$1")${2:+&time=$2}"; }
finish() {
  journalctl -b --no-pager >"$OUT/journal.txt" 2>&1
  sync
  # systemctl once failed here to reach systemd ("Failed to connect to bus") after podman
  # ran; the kernel's own power-off still ends the guest rather than leaving it to the timeout.
  systemctl poweroff --no-block || echo o >/proc/sysrq-trigger
  exit 0
}
trap finish EXIT
