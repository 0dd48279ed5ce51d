#!/usr/bin/env bash
# Captures what the fleet inventory reads, from real programs on this machine, into
# tests/fixtures/inventory/ laid out as a root the scanner can be pointed at (run as root from
# the repository root):
#   proc/<pid>/{stat,maps,environ,cmdline,cgroup,exe}  of
#     - Debian's sleep with Debian's jemalloc preloaded and MALLOC_CONF=dirty_decay_ms:0
#     - python3 that loaded NSS softokn (libsoftokn3) with NSS_SDB_USE_CACHE=yes
#     - python3 that loaded it without the setting
#   proc/<pid>/root/<library>  8 KiB of each library file around its version banner
#                              (glibc's, jemalloc's, softokn's), not the whole file
#   proc/{uptime,meminfo,sys/kernel/osrelease,self/mountinfo}, etc/os-release
# Environments are cut to the variables the inventory keeps, plus PATH and HOME (so the test
# sees that others are dropped). The programs are killed on exit, Ctrl-C included.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "capture-inventory-fixtures: needs root (reads /proc/<pid>/environ)" >&2; exit 1; }
out=tests/fixtures/inventory
rm -rf "$out"
mkdir -p "$out/proc/sys/kernel" "$out/proc/self" "$out/etc"
jemalloc=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
pids=()
cleanup() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

env -i PATH=/usr/bin:/bin HOME=/root LD_PRELOAD=$jemalloc MALLOC_CONF=dirty_decay_ms:0 sleep 60 &
pids+=($!)
nss='import ctypes, time; ctypes.CDLL("libsoftokn3.so"); time.sleep(60)'
env -i PATH=/usr/bin:/bin HOME=/root NSS_SDB_USE_CACHE=yes python3 -c "$nss" &
pids+=($!)
env -i PATH=/usr/bin:/bin HOME=/root python3 -c "$nss" &
pids+=($!)
sleep 2

# The 8 KiB of a file around its first `marker` (the readers search for the banner, so its
# offset does not matter).
excerpt() {
  local file=$1 marker=$2 dest=$3
  local at
  at=$(grep -a -b -o -m1 -- "$marker" "$file" | head -1 | cut -d: -f1)
  [ -n "$at" ] || { echo "capture-inventory-fixtures: no $marker in $file" >&2; exit 1; }
  mkdir -p "$(dirname "$dest")"
  dd if="$file" of="$dest" bs=4096 skip=$((at / 4096)) count=2 status=none
}

for pid in "${pids[@]}"; do
  d=$out/proc/$pid
  mkdir -p "$d"
  for f in stat maps cmdline cgroup; do cat "/proc/$pid/$f" >"$d/$f"; done
  tr '\0' '\n' <"/proc/$pid/environ" |
    grep -E '^(PATH|HOME|MALLOC_CONF|NSS_SDB_USE_CACHE|LD_PRELOAD)=' | tr '\n' '\0' >"$d/environ"
  ln -s "$(readlink "/proc/$pid/exe")" "$d/exe"
  awk '$6 ~ /^\// {print $6}' "/proc/$pid/maps" | sort -u | while read -r lib; do
    case "$lib" in
      */libc.so*) excerpt "$lib" "release version " "$d/root$lib" ;;
      */libjemalloc*) excerpt "$lib" "$(strings "$lib" | grep -m1 -E '^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-g[0-9a-f]{40}')" "$d/root$lib" ;;
      */libsoftokn3*) excerpt "$lib" "Version: NSS " "$d/root$lib" ;;
    esac
  done
done
cat /proc/uptime >"$out/proc/uptime"
grep MemTotal /proc/meminfo >"$out/proc/meminfo"
cat /proc/sys/kernel/osrelease >"$out/proc/sys/kernel/osrelease"
cat /proc/self/mountinfo >"$out/proc/self/mountinfo"
grep PRETTY_NAME /etc/os-release >"$out/etc/os-release"
printf '%s\n' "${pids[@]}" >"$out/pids"
echo "capture-inventory-fixtures: $(du -sh "$out" | cut -f1) in $out"
