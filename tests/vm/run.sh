#!/usr/bin/env bash
# The kernel matrix: boots Debian's 5.10, 6.1 and 6.12 kernels in qemu, each in two cgroup
# layouts (v2-only; v1 with cpu,cpuacct co-mounted), runs jitterscope's checks inside the guest
# (tests/vm/guest.py), then writes docs/KERNELS.md and fails on any cell that differs from
# tests/vm/expect.json, with the guest's own error lines.
#
#   bash tests/vm/run.sh                  # the whole matrix (make test-vm)
#   JSVM_KERNELS=6.1 JSVM_LAYOUTS=v2 bash tests/vm/run.sh      # one cell
#   JSVM_SCENARIOS=cfs-throttle bash tests/vm/run.sh           # fewer lab scenarios
#   JSVM_KERNELS=5.10 JSVM_LAYOUTS=v2 JSVM_DEBUG='jitterscope tracers --check' bash tests/vm/run.sh
#                                  # a command instead of the checks; output in out/<cell>/debug.log
#
# Everything it fetches is cached under target/vm (kernels, the debootstrap rootfs, its image);
# nothing outside target/ and docs/KERNELS.md is written, and the system's apt configuration is
# not touched (a private sources list and lists directory).
#
# Why TCG and not KVM: this machine's /dev/kvm is PVM (kvm_pvm, no vmx/svm in the CPU flags),
# which runs only guest kernels built for it; Debian's kernels hang after the boot loader there.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VM=$ROOT/target/vm
BIN=${JITTERSCOPE:-$ROOT/target/release/jitterscope}
KERNELS=${JSVM_KERNELS:-"5.10 6.1 6.12"}
LAYOUTS=${JSVM_LAYOUTS:-"v2 v1"}
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
# python3 runs the guest's checks and the lab's Python leaks; tini is PID 1 and reaps what the
# lab orphans; libnss3-tools is the nss-probe scenario's certutil.
PACKAGES=python3,tini,libnss3-tools
# Plus the packages of the binary's shared libraries (libelf1 for libbpf; libc is in minbase).
for lib in $(ldd "$BIN" | awk '/=>/ { print $3 }'); do
  pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || true)
  pkg=${pkg%%:*}
  [ -n "$pkg" ] && PACKAGES+=",$pkg"
done
PACKAGES=$(tr ',' '\n' <<<"$PACKAGES" | sort -u | paste -sd, -)
ROOTFS=$VM/rootfs
IMAGE=$VM/rootfs.img
if [ "$(cat "$ROOTFS.packages" 2>/dev/null)" != "$PACKAGES" ]; then
  log "debootstrap bookworm ($PACKAGES)"
  rm -rf "$ROOTFS.tmp" "$IMAGE"
  debootstrap --variant=minbase --include="$PACKAGES" bookworm "$ROOTFS.tmp" "$MIRROR" \
    >"$VM/debootstrap.log" 2>&1 || { tail -20 "$VM/debootstrap.log" >&2; die "debootstrap failed"; }
  rm -rf "$ROOTFS.tmp"/var/cache/apt/archives/*.deb "$ROOTFS.tmp"/var/lib/apt/lists/*
  rm -rf "$ROOTFS"
  mv "$ROOTFS.tmp" "$ROOTFS"
  echo "$PACKAGES" >"$ROOTFS.packages"
fi
if [ ! -f "$IMAGE" ]; then
  log "building the root image"
  # 4 GiB, sparse: the lab's files (a 512 MiB stream, a 160 MiB file) and the stores. Guests
  # run it with snapshot=on, so every boot starts from this same image.
  mke2fs -q -t ext4 -d "$ROOTFS" -L jsvm-root "$IMAGE.tmp" 4G
  mv "$IMAGE.tmp" "$IMAGE"
fi

# --- one initramfs per kernel: busybox, the modules for virtio disk and 9p, tests/vm/init ---
initramfs() {
  local kdir=$1 rel out m dir
  rel=$(basename "$kdir")
  out=$VM/initramfs-$rel.cpio.gz
  if [ -f "$out" ] && [ "$out" -nt "$ROOT/tests/vm/init" ] && [ "$out" -nt "$ROOT/tests/vm/run.sh" ]; then
    echo "$out"; return
  fi
  dir=$(mktemp -d "$VM/initramfs.XXXXXX")
  mkdir -p "$dir/bin" "$dir/modules"
  cp /bin/busybox "$dir/bin/busybox"
  ln -s busybox "$dir/bin/sh"
  cp "$ROOT/tests/vm/init" "$dir/init"
  : >"$dir/modules/order"
  # modprobe's own resolution, in load order; built-in ones print as "builtin".
  for m in virtio_pci virtio_blk ext4 9p 9pnet_virtio; do
    modprobe -d "$kdir" -S "$rel" --show-depends "$m"
  done | awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++' | while read -r path; do
    local name
    name=$(basename "$path")
    case $name in
      *.ko.xz) xz -dc "$path" >"$dir/modules/${name%.xz}"; name=${name%.xz} ;;
      *.ko.zst) zstd -qdc "$path" >"$dir/modules/${name%.zst}"; name=${name%.zst} ;;
      *) cp "$path" "$dir/modules/$name" ;;
    esac
    echo "$name" >>"$dir/modules/order"
  done
  (cd "$dir" && find . | cpio -o -H newc --quiet | gzip -1 >"$out.tmp")
  rm -rf "$dir"
  mv "$out.tmp" "$out"
  echo "$out"
}

# --- boot one cell ---
run_cell() {
  local kernel=$1 layout=$2 kdir=$3 ird=$4 variant=${5:-} cell in out append rel start rc
  rel=$(basename "$kdir")
  cell="$kernel-$layout${variant:+-$variant}"
  in=$VM/in/$cell
  out=$VM/out/$cell
  rm -rf "$in" "$out"
  mkdir -p "$in" "$out"
  cp "$BIN" "$in/jitterscope"
  cp "$ROOT/tests/vm/guest.py" "$in/guest.py"
  local scenarios=${JSVM_SCENARIOS:-} lab_only="" tcg=${JSVM_TCG_THREAD:-single}
  if [ "$variant" = ipi ]; then
    scenarios=${JSVM_IPI_SCENARIOS:-tlb-shootdown} lab_only=1 tcg=multi
  fi
  python3 - "$in/config.json" "$kernel" "$layout" "$rel" "$scenarios" "${JSVM_DEBUG:-}" "$lab_only" <<'EOF'
import json, sys
path, kernel, layout, release, scenarios, debug, lab_only = sys.argv[1:]
json.dump({"kernel": kernel, "layout": layout, "release": release,
           "scenarios": scenarios.split(",") if scenarios else None,
           "debug": debug or None, "lab_only": bool(lab_only)}, open(path, "w"))
EOF
  # mitigations=off: under TCG every kernel entry with page-table isolation costs an emulated
  # CR3 switch, which made the lab's page-fault loops 50x slower than the host; the mechanisms
  # the matrix checks (reclaim, throttling, shootdowns) do not depend on it.
  append="console=ttyS0 panic=-1 quiet loglevel=3 mitigations=off ${JSVM_APPEND:-}"
  # The v1 layout is booted as RHEL 8 boots: with PSI off, so the matrix covers missing PSI.
  [ "$layout" = v1 ] && append+=" psi=0"
  # Single-threaded TCG (both vCPUs in one host thread): multi-threaded TCG lost races with the
  # kernel's live code patching (an int3 oops at boot on 6.12; on 5.10 both vCPUs spinning at
  # the sys_exit tracepoint site for minutes while lookups attached and detached), and for most
  # checks it was no faster on this 2-core machine. The exception is the shootdown storm: its
  # IPIs are synchronous, and under one thread each waits for the other vCPU's time slice. It
  # gets a boot of its own with multi-threaded TCG (the "-ipi" cell, merged into v2's column).
  local attempt
  for attempt in 1 2 3; do
    rm -rf "${out:?}"/*
    log "$cell: booting $rel ($layout)$([ "$attempt" -gt 1 ] && echo ", attempt $attempt")"
    start=$(date +%s)
    rc=0
    timeout --foreground -k 10 "$GUEST_TIMEOUT" qemu-system-x86_64 \
      -accel "tcg,thread=$tcg" -cpu max -smp 2 -m 2048 \
      -kernel "$kdir/boot/vmlinuz-$rel" -initrd "$ird" -append "$append" \
      -drive "file=$IMAGE,format=raw,if=virtio,snapshot=on" \
      -virtfs "local,path=$in,mount_tag=in,security_model=none,readonly=on" \
      -virtfs "local,path=$out,mount_tag=out,security_model=none" \
      -nic none -nographic -no-reboot -serial "file:$out/console.log" -monitor none \
      </dev/null >"$out/qemu.log" 2>&1 || rc=$?
    echo $(( $(date +%s) - start )) >"$out/wall_s"
    echo "$attempt" >"$out/attempts"
    log "$cell: guest ended after $(cat "$out/wall_s") s (qemu exit $rc)"
    [ $rc = 124 ] && echo "guest timed out after $GUEST_TIMEOUT s" >"$out/timeout"
    # A panic before the guest's first line is the emulator's (multi-threaded TCG made 6.12
    # oops on an int3 in sched_clock_idle_wakeup_event, 1 boot in 5), and the boot is retried.
    # A panic after it is a result.
    if [ ! -f "$out/result.json" ] && grep -aq "Kernel panic" "$out/console.log" \
        && ! grep -aq "JSVM: " "$out/console.log"; then
      log "$cell: kernel panic during boot (under TCG); booting again"
      continue
    fi
    break
  done
  return 0
}

cells=()
for k in $KERNELS; do
  kdir=$(kernel_dir "$k")
  ird=$(initramfs "$kdir")
  for l in $LAYOUTS; do
    case $l in v1|v2) ;; *) die "unknown layout $l (v1 or v2)" ;; esac
    run_cell "$k" "$l" "$kdir" "$ird"
    cells+=("$k-$l")
  done
  if [ -z "${JSVM_DEBUG:-}" ] && [[ " $LAYOUTS " == *" v2 "* ]] && [ "${JSVM_IPI:-1}" = 1 ]; then
    run_cell "$k" v2 "$kdir" "$ird" ipi
    cells+=("$k-v2-ipi")
  fi
done

python3 "$ROOT/tests/vm/report.py" --out "$VM/out" --expect "$ROOT/tests/vm/expect.json" \
  --doc "$ROOT/docs/KERNELS.md" "${cells[@]}"
