#!/usr/bin/env bash
# Captures the kernel files jitterscope parses into a fixture tree that mirrors the real paths
# (OUT/proc/stat, OUT/sys/fs/cgroup/...), so readers can be pointed at OUT as their root.
#
# procfs and cgroupfs files report size 0, so `cp` copies nothing: every file is read with cat.
# Run as root for /proc/<pid>/io and full slabinfo. With --with-test-cgroups (root only) it first
# creates short-lived cgroups with a CPU quota and a memory limit, runs a spinner in them for a
# few seconds so throttling counters are non-zero, captures, and removes them again.
#
# usage: scripts/capture-fixtures.sh OUT [--with-test-cgroups]
set -euo pipefail
out=${1:?usage: capture-fixtures.sh OUT [--with-test-cgroups]}
with_cg=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)

grab() { # grab ABS_PATH: copy one kernel file by reading it (missing/unreadable files are skipped)
  local src=$1
  [ -r "$src" ] || return 0
  mkdir -p "$out$(dirname "$src")"
  cat "$src" > "$out$src" 2>/dev/null || rm -f "$out$src"
}

for f in stat loadavg vmstat meminfo zoneinfo buddyinfo slabinfo interrupts softirqs diskstats \
         net/dev uptime version self/mountinfo self/cgroup; do
  grab /proc/$f
done
grab /proc/sys/fs/dentry-state
grab /proc/sys/kernel/pid_max
grab /proc/sys/kernel/osrelease
for f in /proc/pressure/*; do grab "$f"; done
# mountinfo under self/ is a symlink target; keep a copy where readers look for it.
if [ -f "$out/proc/self/mountinfo" ]; then mkdir -p "$out/proc/1"; cp "$out/proc/self/mountinfo" "$out/proc/1/mountinfo"; fi

cleanup_cg() {
  [ -n "${spin_pid:-}" ] && kill "$spin_pid" 2>/dev/null || true
  [ -n "${spin_pid:-}" ] && wait "$spin_pid" 2>/dev/null || true
  for d in /sys/fs/cgroup/cpu/jitterscope-fixture /sys/fs/cgroup/cpuacct/jitterscope-fixture \
           /sys/fs/cgroup/memory/jitterscope-fixture /sys/fs/cgroup/unified/jitterscope-fixture; do
    [ -d "$d" ] && rmdir "$d" 2>/dev/null || true
  done
}

spin_pid=
if [ "$with_cg" = "--with-test-cgroups" ]; then
  trap cleanup_cg EXIT INT TERM
  ( while :; do :; done ) &
  spin_pid=$!
  for h in cpu cpuacct memory unified; do
    d=/sys/fs/cgroup/$h/jitterscope-fixture
    [ -d /sys/fs/cgroup/$h ] || continue
    mkdir -p "$d"
    echo "$spin_pid" > "$d/cgroup.procs"
  done
  [ -f /sys/fs/cgroup/cpu/jitterscope-fixture/cpu.cfs_quota_us ] && echo 20000 > /sys/fs/cgroup/cpu/jitterscope-fixture/cpu.cfs_quota_us
  [ -f /sys/fs/cgroup/memory/jitterscope-fixture/memory.limit_in_bytes ] && echo $((256*1024*1024)) > /sys/fs/cgroup/memory/jitterscope-fixture/memory.limit_in_bytes
  sleep 3
fi

# Every cgroup hierarchy mounted (v1 and v2), every cgroup directory, every regular file in it.
# Write-only control files (cgroup.event_control, memory.force_empty...) fail to read and are skipped.
while read -r _ _ _ _ mnt _ _ _ fstype _; do
  case $fstype in cgroup|cgroup2) ;; *) continue ;; esac
  find "$mnt" -maxdepth 4 -type f 2>/dev/null | while read -r f; do grab "$f"; done
done < /proc/self/mountinfo

# A few processes: init, a kernel thread, this script, and the spinner if any.
pids="1 2 $$ ${spin_pid}"
for p in $pids; do
  for f in stat status io schedstat cgroup cmdline comm statm; do grab /proc/$p/$f; done
done

# The record formats of the tracepoints the BPF tracers use (root only).
if [ "$(id -u)" -eq 0 ]; then
  "$(dirname "$0")/capture-tracepoint-formats.sh" "$out"
fi

uname -r > "$out/KERNEL"
date -u +%Y-%m-%dT%H:%M:%SZ > "$out/CAPTURED"
echo "captured into $out (pids: $pids)"
