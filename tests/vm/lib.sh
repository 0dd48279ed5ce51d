# Sourced by tests/vm/run.sh (the kernel matrix), tests/vm/deb.sh (the package in a systemd
# guest) and tests/vm/image.sh (the image and the DaemonSet under podman): installs the host
# tools, fetches Debian's kernels through a private apt configuration, builds the debootstrap
# rootfs images and one initramfs per kernel, all cached under target/vm. Defines kernel_dir,
# initramfs, modules_into, rootfs_image, boot_guest, fresh_share, start_engines and
# systemd_checks; sets ROOT, VM, BIN, IMAGE.
# shellcheck shell=bash
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
VM=$ROOT/target/vm
BIN=${JITTERSCOPE:-$ROOT/target/release/jitterscope}
# Wall-clock bound of one guest; a guest that hangs fails its cell, not the whole run.
GUEST_TIMEOUT=${JSVM_TIMEOUT:-900}
MIRROR=http://deb.debian.org/debian
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

log() { printf 'vm: %s\n' "$*" >&2; }
die() { printf 'vm: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, the rootfs image's ownership)"
[ -x "$BIN" ] || die "no jitterscope binary at $BIN (make build)"

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
# The initramfs needs the static build (the dynamic one has no libraries there).
{ [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || need+=(busybox-static)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v depmod >/dev/null || need+=(kmod)
command -v mke2fs >/dev/null || need+=(e2fsprogs)
command -v cpio >/dev/null || need+=(cpio)
command -v xz >/dev/null || need+=(xz-utils)
command -v zstd >/dev/null || need+=(zstd)
[ -f "$KEYRING" ] || need+=(debian-archive-keyring)
# The guests' only way out: qemu's guestfwd runs one socat per connection (start_engines).
command -v socat >/dev/null || need+=(socat)
# tests/vm/image.sh edits the DaemonSet's manifest as YAML.
python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null; }
fi

mkdir -p "$VM"/apt/lists/partial "$VM"/apt/cache/archives/partial "$VM"/debs "$VM"/kernels "$VM"/out

# --- kernels: Debian's linux-image for each release, through a private apt configuration ---
suite_of() {
  case $1 in
    5.10) echo bullseye ;;
    6.1) echo bookworm ;;
    6.12) echo trixie ;;
    *) die "unknown kernel $1 (5.10, 6.1 or 6.12)" ;;
  esac
}
cat >"$VM/apt/sources.list" <<EOF
deb [signed-by=$KEYRING] $MIRROR bullseye main
deb [signed-by=$KEYRING] $MIRROR bookworm main
deb [signed-by=$KEYRING] $MIRROR trixie main
EOF
APT=(-o "Dir::Etc::sourcelist=$VM/apt/sources.list" -o Dir::Etc::sourceparts=- \
     -o "Dir::State::Lists=$VM/apt/lists" -o "Dir::Cache=$VM/apt/cache" \
     -o APT::Sandbox::User=root)
apt_updated=0
apt_update() {
  [ $apt_updated = 1 ] && return
  log "apt-get update (private lists under target/vm/apt)"
  apt-get "${APT[@]}" update -q >/dev/null
  apt_updated=1
}

# Prints the kernel's directory (target/vm/kernels/<release>) once it is unpacked, with
# modules.dep built by depmod (Debian's packages leave that to their postinst).
kernel_dir() {
  local want=$1 suite dep pkg deb rel
  suite=$(suite_of "$want")
  if [ -f "$VM/kernels/$want.release" ]; then
    rel=$(cat "$VM/kernels/$want.release")
    [ -f "$VM/kernels/$rel/boot/vmlinuz-$rel" ] && { echo "$VM/kernels/$rel"; return; }
  fi
  apt_update
  dep=$(apt-cache "${APT[@]}" show "linux-image-amd64/$suite" | sed -n 's/^Depends: \(linux-image-[^ ,]*\).*/\1/p' | head -1)
  [ -n "$dep" ] || die "cannot resolve linux-image-amd64 in $suite"
  pkg=$dep
  log "fetching $pkg ($suite)"
  (cd "$VM/debs" && apt-get "${APT[@]}" download -q "$pkg/$suite" >/dev/null)
  deb=$(ls -t "$VM/debs/${pkg}"_*.deb | head -1)
  [ -f "$deb" ] || die "apt-get download $pkg/$suite left no package in $VM/debs"
  rel=${pkg#linux-image-}
  rm -rf "$VM/kernels/$rel"
  mkdir -p "$VM/kernels/$rel"
  dpkg-deb -x "$deb" "$VM/kernels/$rel"
  # trixie's package is merged-/usr (usr/lib/modules); depmod and modprobe -d look in lib/.
  if [ ! -d "$VM/kernels/$rel/lib/modules" ] && [ -d "$VM/kernels/$rel/usr/lib/modules" ]; then
    ln -s usr/lib "$VM/kernels/$rel/lib"
  fi
  depmod -b "$VM/kernels/$rel" "$rel"
  echo "$rel" >"$VM/kernels/$want.release"
  echo "$VM/kernels/$rel"
}

# --- the guest's userspace: a debootstrap rootfs from the same archive, as an ext4 image ---
# rootfs_image SUITE NAME PACKAGES: builds $VM/NAME (the tree) and $VM/NAME.img once per
# package list and sets ROOTFS_IMAGE to the image. 4 GiB, sparse: the lab's files (a 512 MiB
# stream, a 160 MiB file) and the stores. Guests run it with snapshot=on, so every boot starts
# from this same image.
rootfs_image() {
  local suite=$1 rootfs=$VM/$2 packages=$3
  ROOTFS_IMAGE=$VM/$2.img
  if [ "$(cat "$rootfs.packages" 2>/dev/null)" != "$packages" ]; then
    log "debootstrap $suite ($packages)"
    rm -rf "$rootfs.tmp" "$ROOTFS_IMAGE"
    debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs.tmp" "$MIRROR" \
      >"$VM/debootstrap-$suite.log" 2>&1 || { tail -20 "$VM/debootstrap-$suite.log" >&2; die "debootstrap $suite failed"; }
    rm -rf "$rootfs.tmp"/var/cache/apt/archives/*.deb "$rootfs.tmp"/var/lib/apt/lists/*
    rm -rf "$rootfs"
    mv "$rootfs.tmp" "$rootfs"
    echo "$packages" >"$rootfs.packages"
  fi
  if [ ! -f "$ROOTFS_IMAGE" ]; then
    log "building the root image $(basename "$ROOTFS_IMAGE")"
    mke2fs -q -t ext4 -d "$rootfs" -L jsvm-root "$ROOTFS_IMAGE.tmp" 4G
    mv "$ROOTFS_IMAGE.tmp" "$ROOTFS_IMAGE"
  fi
}

# The matrix's and the package test's: bookworm. python3 runs the guest's checks and the lab's
# Python leaks; tini is PID 1 and reaps what the lab orphans; libnss3-tools is the nss-probe
# scenario's certutil; systemd is PID 1 of the package test's guest (tests/vm/deb.sh) instead
# of tini, where podman runs containers from a busybox-static image
# (containernetworking-plugins: debootstrap does not pick a provider of podman's virtual
# dependency container-network-stack); man-db reads the package's man pages.
PACKAGES=python3,tini,libnss3-tools,systemd,podman,containernetworking-plugins,busybox-static,man-db
# Plus the packages of the binary's shared libraries (libelf1 for libbpf; libc is in minbase).
for lib in $(ldd "$BIN" | awk '/=>/ { print $3 }'); do
  pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || true)
  pkg=${pkg%%:*}
  [ -n "$pkg" ] && PACKAGES+=",$pkg"
done
PACKAGES=$(tr ',' '\n' <<<"$PACKAGES" | sort -u | paste -sd, -)
rootfs_image bookworm rootfs "$PACKAGES"
IMAGE=$ROOTFS_IMAGE

# modules_into KDIR DIR MODULE...: the modules and what they depend on, in load order
# (modprobe's own resolution; built-in ones print as "builtin" and are skipped), uncompressed
# into DIR, their names appended to DIR/order.
modules_into() {
  local kdir=$1 dest=$2 rel m path name
  shift 2
  rel=$(basename "$kdir")
  mkdir -p "$dest"
  touch "$dest/order"
  for m in "$@"; do
    modprobe -d "$kdir" -S "$rel" --show-depends "$m"
  done | awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++' | while read -r path; do
    name=$(basename "$path")
    case $name in
      *.ko.xz) xz -dc "$path" >"$dest/${name%.xz}"; name=${name%.xz} ;;
      *.ko.zst) zstd -qdc "$path" >"$dest/${name%.zst}"; name=${name%.zst} ;;
      *) cp "$path" "$dest/$name" ;;
    esac
    grep -qx "$name" "$dest/order" || echo "$name" >>"$dest/order"
  done
}

# --- one initramfs per kernel: busybox, the modules for virtio disk, 9p and virtio-net,
# tests/vm/init ---
initramfs() {
  local kdir=$1 rel out m dir
  rel=$(basename "$kdir")
  out=$VM/initramfs-$rel.cpio.gz
  if [ -f "$out" ] && [ "$out" -nt "$ROOT/tests/vm/init" ] && [ "$out" -nt "$ROOT/tests/vm/lib.sh" ]; then
    echo "$out"; return
  fi
  dir=$(mktemp -d "$VM/initramfs.XXXXXX")
  mkdir -p "$dir/bin" "$dir/modules"
  cp /bin/busybox "$dir/bin/busybox"
  ln -s busybox "$dir/bin/sh"
  cp "$ROOT/tests/vm/init" "$dir/init"
  : >"$dir/modules/order"
  # virtio_net: the package and image tests' guests reach the engines on the host through
  # qemu's user-mode network (start_engines); the matrix's guests boot with `-nic none`, where
  # the module loads and finds no device.
  modules_into "$kdir" "$dir/modules" virtio_pci virtio_blk ext4 9p 9pnet_virtio virtio_net
  (cd "$dir" && find . | cpio -o -H newc --quiet | gzip -1 >"$out.tmp")
  rm -rf "$dir"
  mv "$out.tmp" "$out"
  echo "$out"
}


# --- booting a guest ---
# boot_guest KDIR IRD TCG APPEND IN OUT [IMAGE]: one guest on a rootfs image (bookworm's by
# default; snapshot=on: every boot starts from the same image), with the shares `in`
# (read-only) and `out` and its serial console in OUT/console.log, bounded by GUEST_TIMEOUT.
# No network unless GUEST_NIC holds a -nic specification (start_engines sets it).
# Returns qemu's status (124: timed out).
boot_guest() {
  local kdir=$1 ird=$2 tcg=$3 append=$4 in=$5 out=$6 image=${7:-$IMAGE} rel
  rel=$(basename "$kdir")
  timeout --foreground -k 10 "$GUEST_TIMEOUT" qemu-system-x86_64 \
    -accel "tcg,thread=$tcg" -cpu max -smp 2 -m 2048 \
    -kernel "$kdir/boot/vmlinuz-$rel" -initrd "$ird" -append "$append" \
    -drive "file=$image,format=raw,if=virtio,snapshot=on" \
    -virtfs "local,path=$in,mount_tag=in,security_model=none,readonly=on" \
    -virtfs "local,path=$out,mount_tag=out,security_model=none" \
    -nic "${GUEST_NIC:-none}" -nographic -no-reboot -serial "file:$out/console.log" -monitor none \
    </dev/null >"$out/qemu.log" 2>&1
}

# start_engines: VictoriaMetrics (remote write) and ClickHouse (episodes, inventory) on this
# host, on free loopback ports with data in a temporary directory, stopped and deleted when the
# calling script exits, failed or not. The guests cannot run them (2 GiB, single-threaded TCG).
# Sets VM_PORT and CH_PORT (the host's), and GUEST_NIC: a user-mode network whose only way out
# is 10.0.2.100:8428 (VictoriaMetrics) and 10.0.2.100:8123 (ClickHouse). restrict=on drops
# everything else the guest sends beyond qemu; each guestfwd runs `socat - TCP:127.0.0.1:PORT`
# per connection. A `tcp:127.0.0.1:PORT` chardev instead is one connection, opened when qemu
# starts, that every guest connection would share: an HTTP client's second connection (after
# the server closed the first, or the outage the package test makes) would find it dead.
start_engines() {
  command -v victoria-metrics >/dev/null && [ -x /usr/sbin/clickhouse-server ] \
    || die "victoria-metrics or clickhouse-server is missing (bash scripts/setup.sh --test)"
  ENGINES=$(mktemp -d "$VM/engines.XXXXXX")
  trap stop_engines EXIT
  trap 'exit 130' INT TERM
  VM_PORT=$(free_port)
  victoria-metrics -storageDataPath="$ENGINES/vm" -httpListenAddr="127.0.0.1:$VM_PORT" \
    -retentionPeriod=1 -search.latencyOffset=0s -search.disableCache \
    </dev/null >"$ENGINES/vm.log" 2>&1 &
  ENGINE_PIDS=$!
  CH_PORT=$(free_port)
  mkdir -p "$ENGINES/ch/tmp"
  /usr/sbin/clickhouse-server --config-file=/etc/clickhouse-server/config.xml -- \
    --path="$ENGINES/ch/" --tmp_path="$ENGINES/ch/tmp/" --http_port="$CH_PORT" \
    --tcp_port="$(free_port)" --interserver_http_port="$(free_port)" --listen_host=127.0.0.1 \
    --logger.log="$ENGINES/ch/server.log" --logger.errorlog="$ENGINES/ch/error.log" \
    </dev/null >"$ENGINES/ch.log" 2>&1 &
  ENGINE_PIDS+=" $!"
  local i
  for ((i = 0; i < 120; i++)); do
    curl -sf "http://127.0.0.1:$VM_PORT/health" >/dev/null \
      && [ "$(curl -sf "http://127.0.0.1:$CH_PORT/?query=SELECT%201")" = 1 ] && break
    sleep 0.5
  done
  [ "$i" -lt 120 ] || { tail -5 "$ENGINES"/*.log "$ENGINES/ch/error.log" >&2; die "the engines did not answer in 60 s"; }
  log "engines: victoria-metrics on 127.0.0.1:$VM_PORT, clickhouse on 127.0.0.1:$CH_PORT"
  GUEST_NIC="user,model=virtio-net-pci,restrict=on"
  GUEST_NIC+=",guestfwd=tcp:10.0.2.100:8428-cmd:socat - TCP:127.0.0.1:$VM_PORT"
  GUEST_NIC+=",guestfwd=tcp:10.0.2.100:8123-cmd:socat - TCP:127.0.0.1:$CH_PORT"
}
stop_engines() {
  local p
  # shellcheck disable=SC2086 # a list of pids
  [ -z "${ENGINE_PIDS:-}" ] || kill $ENGINE_PIDS 2>/dev/null || true
  for p in ${ENGINE_PIDS:-}; do wait "$p" 2>/dev/null || true; done
  ENGINE_PIDS=
  [ -z "${ENGINES:-}" ] || rm -rf "$ENGINES"
}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# fresh_share NAME GLOB WHAT: the newest file matching GLOB (made by `make WHAT`) copied into a
# fresh share $VM/in/NAME, with an empty $VM/out/NAME; sets `in`, `out` and `artefact`.
fresh_share() {
  local name=$1 glob=$2 what=$3
  # shellcheck disable=SC2086 # GLOB is a pattern to expand.
  artefact=$(ls -t $glob 2>/dev/null | head -1 || true)
  [ -n "$artefact" ] || die "nothing matches $glob (make $what)"
  in=$VM/in/$name
  out=$VM/out/$name
  rm -rf "$in" "$out"
  mkdir -p "$in" "$out"
  cp "$artefact" "$in/"
}

# systemd_checks NAME SCRIPT IN OUT [KERNEL [IMAGE]]: boots Debian's kernel KERNEL (else
# JSVM_SYSTEMD_KERNEL, else 6.1) on IMAGE (bookworm's rootfs by default) with systemd as PID 1,
# where tests/vm/checks.service runs SCRIPT once multi-user.target is reached, with
# tests/vm/checks.sh (the check helpers) beside it; IN holds whatever else SCRIPT needs. Prints
# each check and fails if any failed, if the script stopped before its end, or if fewer passed
# than the copy of SCRIPT it ran has `check` and `require` lines (a skipped check would
# otherwise pass). The guest's log and journal are left in OUT.
systemd_checks() {
  local name=$1 script=$2 in=$3 out=$4 image=${6:-$IMAGE} kdir ird start rc=0 failed want passed
  kdir=$(kernel_dir "${5:-${JSVM_SYSTEMD_KERNEL:-6.1}}")
  ird=$(initramfs "$kdir")
  cp "$script" "$in/main.sh"
  cp "$ROOT/tests/vm/checks.sh" "$in/checks.sh"
  cp "$ROOT/tests/vm/checks.service" "$in/jsvm.service"
  log "$name: booting $(basename "$kdir") with systemd"
  start=$(date +%s)
  # Single-threaded TCG, as the matrix's cells (see run.sh).
  boot_guest "$kdir" "$ird" single \
    "console=ttyS0 panic=-1 quiet loglevel=3 mitigations=off jsvm.init=systemd" "$in" "$out" "$image" || rc=$?
  log "$name: guest ended after $(( $(date +%s) - start )) s (qemu exit $rc)"
  [ -f "$out/checks" ] || { tail -30 "$out/console.log" >&2; die "$name: the guest wrote no checks (console above, $out)"; }
  sed "s/^/$name: /" "$out/checks" >&2
  failed=$(grep -c '^FAIL' "$out/checks" || true)
  [ "$failed" = 0 ] || die "$name: $failed checks failed (guest.log, journal.txt in $out)"
  grep -qx DONE "$out/checks" || die "$name: the guest script stopped before its end (guest.log in $out)"
  want=$(grep -cE '^(check|require) ' "$in/main.sh")
  passed=$(grep -c '^PASS' "$out/checks" || true)
  [ "$passed" = "$want" ] || die "$name: $passed checks passed of the $want the script has"
  log "$name: all $passed checks passed"
}
