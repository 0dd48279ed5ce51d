#!/usr/bin/env bash
# Captures the record formats of the tracepoints the BPF tracers attach to into
# OUT/sys/kernel/tracing/events/<category>/<event>/format (the tracers check their record layouts
# against these formats; the tests check the parser and the layouts on the captured copies).
# Needs root (tracefs is root-only) and tracefs mounted (mounted here if it is not).
#
# usage: scripts/capture-tracepoint-formats.sh OUT
set -euo pipefail
out=${1:?usage: capture-tracepoint-formats.sh OUT}
tfs=/sys/kernel/tracing
if [ ! -d $tfs/events ]; then
  mount -t tracefs nodev $tfs
fi
events="tlb/tlb_flush ipi/ipi_send_cpumask csd/csd_queue_cpu syscalls/sys_enter_madvise
vmscan/mm_vmscan_direct_reclaim_begin vmscan/mm_vmscan_direct_reclaim_end
vmscan/mm_vmscan_memcg_reclaim_begin vmscan/mm_vmscan_memcg_reclaim_end
vmscan/mm_vmscan_wakeup_kswapd vmscan/mm_vmscan_kswapd_wake
vmscan/mm_shrink_slab_start vmscan/mm_shrink_slab_end
sched/sched_wakeup sched/sched_wakeup_new sched/sched_switch
writeback/balance_dirty_pages lock/contention_begin lock/contention_end"
for sc in newstat newlstat newfstatat statx access faccessat faccessat2 open openat openat2; do
  events="$events syscalls/sys_enter_$sc syscalls/sys_exit_$sc"
done
n=0
for e in $events; do
  f=$tfs/events/$e/format
  [ -r "$f" ] || continue
  mkdir -p "$out$(dirname "$f")"
  cat "$f" > "$out$f"
  n=$((n + 1))
done
echo "captured $n tracepoint formats into $out$tfs/events"
