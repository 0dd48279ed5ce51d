//! Metrics of the in-kernel tracers. Their counts cover one interval (see
//! [`crate::tracers`]), so rates need no previous sample: count / span.

use super::{gauge, metrics};
use crate::eval::Ctx;
use crate::registry::Emit;
use crate::tracers::{
    DirtyProc, Hist, LookupProc, MadviseProc, MmapLockProc, ReclaimStat, ShrinkerStat, TlbProc,
    Tracers, OTHER_PID,
};

/// The tracers' part with its per-second factor, when it covers a known span.
fn tr<'a>(cx: &Ctx<'a>) -> Option<(&'a Tracers, f64)> {
    let t = cx.cur.tracers.as_ref()?;
    let k = t.per_s();
    (k > 0.0).then_some((t, k))
}

/// A process entry's pid label, formatted in `buf`: no allocation, as it is built for every
/// tracer series of every sample read.
fn pid_label(pid: u32, buf: &mut itoa::Buffer) -> &str {
    if pid == OTHER_PID {
        "other"
    } else {
        buf.format(pid)
    }
}

/// One series per process entry of a tracer: `f` gets the entry and the per-second factor.
/// Counts of one process in several entries are summed.
fn per_proc<T>(
    cx: &Ctx,
    out: &mut Emit,
    list: fn(&Tracers) -> Option<&Vec<T>>,
    id: fn(&T) -> (u32, &str),
    f: fn(&T, f64) -> Option<f64>,
) {
    per_proc_by(cx, out, list, id, f, |a, b| a + b)
}

/// Like [`per_proc`], with `merge` combining the values of one process's entries. Stores
/// recorded before issue 18 hold a process several times in one sample (a map walk that started
/// over read it again, each time with the counts since the read before), so a sample would
/// have given one series several values.
fn per_proc_by<T>(
    cx: &Ctx,
    out: &mut Emit,
    list: fn(&Tracers) -> Option<&Vec<T>>,
    id: fn(&T) -> (u32, &str),
    f: fn(&T, f64) -> Option<f64>,
    merge: fn(f64, f64) -> f64,
) {
    let Some((t, k)) = tr(cx) else { return };
    let Some(entries) = list(t) else { return };
    let mut buf = itoa::Buffer::new();
    let mut pids: Vec<u32> = entries.iter().map(|e| id(e).0).collect();
    pids.sort_unstable();
    if pids.windows(2).all(|w| w[0] != w[1]) {
        for e in entries {
            let (pid, comm) = id(e);
            gauge(out, &[pid_label(pid, &mut buf), comm], f(e, k));
        }
        return;
    }
    let mut rows: Vec<(u32, &str, Option<f64>)> = Vec::with_capacity(entries.len());
    let mut at = std::collections::HashMap::with_capacity(entries.len());
    for e in entries {
        let (pid, comm) = id(e);
        let v = f(e, k);
        match at.get(&pid) {
            Some(&i) => {
                let r: &mut (u32, &str, Option<f64>) = &mut rows[i];
                r.2 = match (r.2, v) {
                    (Some(a), Some(b)) => Some(merge(a, b)),
                    (a, b) => a.or(b),
                };
            }
            None => {
                at.insert(pid, rows.len());
                rows.push((pid, comm, v));
            }
        }
    }
    for (pid, comm, v) in rows {
        gauge(out, &[pid_label(pid, &mut buf), comm], v);
    }
}

/// Per-process counts summed by the processes' cgroup, per second (a process entry carries the
/// cgroup it was in at its first event).
fn by_cgroup<T>(
    cx: &Ctx,
    out: &mut Emit,
    list: fn(&Tracers) -> Option<&Vec<T>>,
    cgroup: fn(&T) -> &str,
    f: fn(&T) -> u64,
) {
    by_cgroup_scaled(cx, out, list, cgroup, f, 1.0)
}

/// [`by_cgroup`] of nanoseconds, as % of the interval (summed over threads).
fn by_cgroup_pct<T>(
    cx: &Ctx,
    out: &mut Emit,
    list: fn(&Tracers) -> Option<&Vec<T>>,
    cgroup: fn(&T) -> &str,
    ns: fn(&T) -> u64,
) {
    by_cgroup_scaled(cx, out, list, cgroup, ns, 1e-7)
}

fn by_cgroup_scaled<T>(
    cx: &Ctx,
    out: &mut Emit,
    list: fn(&Tracers) -> Option<&Vec<T>>,
    cgroup: fn(&T) -> &str,
    f: fn(&T) -> u64,
    scale: f64,
) {
    let Some((t, k)) = tr(cx) else { return };
    let mut sums: Vec<(&str, u64)> = Vec::new();
    for e in list(t).into_iter().flatten() {
        let c = cgroup(e);
        if c.is_empty() {
            continue;
        }
        match sums.iter_mut().find(|(p, _)| *p == c) {
            Some((_, v)) => *v += f(e),
            None => sums.push((c, f(e))),
        }
    }
    for (c, v) in sums {
        gauge(out, &[c], Some(v as f64 * k * scale));
    }
}

/// One host-wide series: `f` gets the tracers and the per-second factor.
fn host(cx: &Ctx, out: &mut Emit, f: fn(&Tracers, f64) -> Option<f64>) {
    if let Some((t, k)) = tr(cx) {
        gauge(out, &[], f(t, k));
    }
}

fn sum<T>(v: Option<&Vec<T>>, f: fn(&T) -> u64) -> Option<u64> {
    v.map(|v| v.iter().map(f).sum())
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Time spent as % of the interval (summed over threads: can exceed 100).
fn pct(ns: u64, k: f64) -> f64 {
    ns as f64 * k / 1e7
}

fn reclaim_proc(t: &Tracers) -> Option<&Vec<ReclaimStat>> {
    t.reclaim.as_ref().map(|r| &r.procs)
}
fn reclaim_id(s: &ReclaimStat) -> (u32, &str) {
    (s.pid, &s.comm)
}
fn reclaim_cgroup(cx: &Ctx, out: &mut Emit, f: fn(&ReclaimStat, f64) -> Option<f64>) {
    let Some((t, k)) = tr(cx) else { return };
    for c in t.reclaim.iter().flat_map(|r| &r.cgroups) {
        gauge(out, &[&c.cgroup], f(c, k));
    }
}
fn stalls(s: &ReclaimStat) -> u64 {
    s.direct_stalls + s.memcg_stalls
}

fn shrinker(cx: &Ctx, out: &mut Emit, f: fn(&ShrinkerStat, f64) -> Option<f64>) {
    let Some((t, k)) = tr(cx) else { return };
    for s in t.shrinker.iter().flat_map(|s| &s.shrinkers) {
        gauge(out, &[&s.function], f(s, k));
    }
}

fn tlb_proc(t: &Tracers) -> Option<&Vec<TlbProc>> {
    t.tlb.as_ref().map(|r| &r.procs)
}
fn tlb_id(s: &TlbProc) -> (u32, &str) {
    (s.pid, &s.comm)
}

fn madv_proc(t: &Tracers) -> Option<&Vec<MadviseProc>> {
    t.madvise.as_ref().map(|r| &r.procs)
}
fn madv_id(s: &MadviseProc) -> (u32, &str) {
    (s.pid, &s.comm)
}

fn look_proc(t: &Tracers) -> Option<&Vec<LookupProc>> {
    t.lookups.as_ref().map(|r| &r.procs)
}
fn look_id(s: &LookupProc) -> (u32, &str) {
    (s.pid, &s.comm)
}

fn mmap_proc(t: &Tracers) -> Option<&Vec<MmapLockProc>> {
    t.mmaplock.as_ref().map(|r| &r.procs)
}
fn mmap_id(s: &MmapLockProc) -> (u32, &str) {
    (s.pid, &s.comm)
}
fn mmap_waits(s: &MmapLockProc) -> u64 {
    s.read_waits + s.write_waits
}

fn dirty_proc(t: &Tracers) -> Option<&Vec<DirtyProc>> {
    t.dirty.as_ref().map(|r| &r.procs)
}
fn dirty_id(s: &DirtyProc) -> (u32, &str) {
    (s.pid, &s.comm)
}

fn runq_cgroup(cx: &Ctx, out: &mut Emit, f: fn(&Hist) -> Option<f64>) {
    let Some((t, _)) = tr(cx) else { return };
    for c in t.runqlat.iter().flat_map(|r| &r.cgroups) {
        gauge(out, &[&c.cgroup], f(&c.latency));
    }
}
fn runq_host(cx: &Ctx, out: &mut Emit, f: fn(&Hist) -> Option<f64>) {
    let Some((t, _)) = tr(cx) else { return };
    if let Some(r) = &t.runqlat {
        gauge(out, &[], f(&r.host));
    }
}
fn max_us(h: &Hist) -> Option<f64> {
    (h.count > 0).then(|| us(h.max_ns))
}

fn dropped(cx: &Ctx, out: &mut Emit) {
    let Some((t, k)) = tr(cx) else { return };
    for (id, v) in t.dropped() {
        gauge(out, &[id.name()], v.map(|v| v as f64 * k));
    }
}

fn attached(cx: &Ctx, out: &mut Emit) {
    let Some((t, _)) = tr(cx) else { return };
    for (id, on) in t.running() {
        if on {
            gauge(out, &[id.name()], Some(1.0));
        } else if id.idle_in(t) {
            gauge(out, &[id.name()], Some(0.0));
        }
    }
}

fn census(cx: &Ctx, out: &mut Emit) {
    let Some((t, _)) = tr(cx) else { return };
    for (id, on) in t.running() {
        if on {
            let census = id.census_in(t);
            gauge(out, &[id.name()], Some(if census { 1.0 } else { 0.0 }));
        }
    }
}

fn patterns(cx: &Ctx, out: &mut Emit) {
    let Some((t, _)) = tr(cx) else { return };
    for p in t.lookups.iter().flat_map(|l| &l.patterns) {
        gauge(out, &[&p.pattern], Some(p.samples as f64));
    }
}

metrics! {
    reads: NONE;
    RECLAIM_STALLS_PER_S = ("reclaim.stalls_per_s", PerSecond, Rate, "Direct + memcg reclaim stalls per second, all processes (BPF: vmscan reclaim begin/end)", |cx, out| host(cx, out, |t, k| sum(reclaim_proc(t), stalls).map(|v| v as f64 * k))),
    RECLAIM_STALL_PCT = ("reclaim.stall_pct", Percent, Rate, "Time processes spent stalled in direct/memcg reclaim, % of the interval summed over threads", |cx, out| host(cx, out, |t, k| sum(reclaim_proc(t), |s| s.latency.sum_ns).map(|v| pct(v, k)))),
    RECLAIM_STALL_MAX_USEC = ("reclaim.stall_max_usec", Microseconds, Gauge, "Longest reclaim stall of the interval", |cx, out| host(cx, out, |t, _| reclaim_proc(t).map(|v| us(v.iter().map(|s| s.latency.max_ns).max().unwrap_or(0))))),
    RECLAIM_KSWAPD_WAKES_PER_S = ("reclaim.kswapd_wakes_per_s", PerSecond, Rate, "kswapd wake-ups per second (vmscan:mm_vmscan_kswapd_wake)", |cx, out| host(cx, out, |t, k| t.reclaim.as_ref().map(|r| r.kswapd_wakes as f64 * k))),
    RECLAIM_KSWAPD_WAKE_REQUESTS_PER_S = ("reclaim.kswapd_wake_requests_per_s", PerSecond, Rate, "Requests to wake kswapd per second: allocations that found free memory below the low watermark (vmscan:mm_vmscan_wakeup_kswapd)", |cx, out| host(cx, out, |t, k| t.reclaim.as_ref().map(|r| r.kswapd_wakeups as f64 * k))),
    RECLAIM_PROC_STALLS_PER_S = ("reclaim.proc.<pid>.<comm>.stalls_per_s", PerSecond, Rate, "Reclaim stalls of this process per second (direct + memcg)", |cx, out| per_proc(cx, out, reclaim_proc, reclaim_id, |s, k| Some(stalls(s) as f64 * k))),
    RECLAIM_PROC_MEMCG_STALLS_PER_S = ("reclaim.proc.<pid>.<comm>.memcg_stalls_per_s", PerSecond, Rate, "Memory-cgroup reclaim stalls of this process per second (its cgroup hit its limit)", |cx, out| per_proc(cx, out, reclaim_proc, reclaim_id, |s, k| Some(s.memcg_stalls as f64 * k))),
    RECLAIM_PROC_STALL_PCT = ("reclaim.proc.<pid>.<comm>.stall_pct", Percent, Rate, "Time this process spent stalled in reclaim, % of the interval summed over its threads", |cx, out| per_proc(cx, out, reclaim_proc, reclaim_id, |s, k| Some(pct(s.latency.sum_ns, k)))),
    RECLAIM_PROC_STALL_MAX_USEC = ("reclaim.proc.<pid>.<comm>.stall_max_usec", Microseconds, Gauge, "Longest reclaim stall of this process in the interval", |cx, out| per_proc_by(cx, out, reclaim_proc, reclaim_id, |s, _| max_us(&s.latency), f64::max)),
    RECLAIM_PROC_RECLAIMED_PAGES_PER_S = ("reclaim.proc.<pid>.<comm>.reclaimed_pages_per_s", PerSecond, Rate, "Pages this process reclaimed in its stalls per second", |cx, out| per_proc(cx, out, reclaim_proc, reclaim_id, |s, k| Some(s.reclaimed_pages as f64 * k))),
    RECLAIM_CGROUP_STALLS_PER_S = ("reclaim.cgroup.<cgroup>.stalls_per_s", PerSecond, Rate, "Reclaim stalls of tasks in this memory cgroup per second", |cx, out| reclaim_cgroup(cx, out, |s, k| Some(stalls(s) as f64 * k))),
    RECLAIM_CGROUP_STALL_PCT = ("reclaim.cgroup.<cgroup>.stall_pct", Percent, Rate, "Time tasks of this memory cgroup spent stalled in reclaim, % of the interval summed over threads", |cx, out| reclaim_cgroup(cx, out, |s, k| Some(pct(s.latency.sum_ns, k)))),
    RECLAIM_CGROUP_STALL_P99_USEC = ("reclaim.cgroup.<cgroup>.stall_p99_usec", Microseconds, Gauge, "99th percentile reclaim stall of this memory cgroup (log2 histogram upper bound)", |cx, out| reclaim_cgroup(cx, out, |s, _| s.latency.quantile_us(0.99))),
    RECLAIM_CGROUP_STALL_MAX_USEC = ("reclaim.cgroup.<cgroup>.stall_max_usec", Microseconds, Gauge, "Longest reclaim stall in this memory cgroup", |cx, out| reclaim_cgroup(cx, out, |s, _| max_us(&s.latency))),
    SHRINKER_CALLS_PER_S = ("shrinker.<function>.calls_per_s", PerSecond, Rate, "Shrinker calls per second, by scan function (vmscan:mm_shrink_slab_start/end)", |cx, out| shrinker(cx, out, |s, k| Some(s.calls as f64 * k))),
    SHRINKER_ZERO_FREED_PER_S = ("shrinker.<function>.zero_freed_per_s", PerSecond, Rate, "Shrinker calls per second that freed nothing: wasted work", |cx, out| shrinker(cx, out, |s, k| Some(s.zero_freed as f64 * k))),
    SHRINKER_SCANNED_PER_S = ("shrinker.<function>.scanned_per_s", PerSecond, Rate, "Objects the shrinker scanned per second", |cx, out| shrinker(cx, out, |s, k| Some(s.scanned as f64 * k))),
    SHRINKER_FREED_PER_S = ("shrinker.<function>.freed_per_s", PerSecond, Rate, "Objects the shrinker freed per second", |cx, out| shrinker(cx, out, |s, k| Some(s.freed as f64 * k))),
    SHRINKER_TIME_PCT = ("shrinker.<function>.time_pct", Percent, Rate, "Time spent in this shrinker, % of the interval summed over CPUs", |cx, out| shrinker(cx, out, |s, k| Some(pct(s.latency.sum_ns, k)))),
    SHRINKER_MAX_USEC = ("shrinker.<function>.max_usec", Microseconds, Gauge, "Longest call of this shrinker in the interval", |cx, out| shrinker(cx, out, |s, _| max_us(&s.latency))),
    TLB_SHOOTDOWN_IPIS_SENT_PER_S = ("tlb.shootdown_ipis_sent_per_s", PerSecond, Rate, "TLB-shootdown requests sent to other CPUs per second, all processes (flush_tlb_func queued by csd:csd_queue_cpu, or ipi:ipi_send_cpumask on 6.3-6.5; before 6.3 the flushes that sent IPIs, one per flush whatever the number of CPUs)", |cx, out| host(cx, out, |t, k| t.tlb.as_ref().filter(|t| t.ipis_attributed).map(|x| x.procs.iter().map(|p| p.ipis_sent).sum::<u64>() as f64 * k))),
    TLB_TASK_SWITCH_PER_S = ("tlb.task_switch_per_s", PerSecond, Rate, "Switches to another address space per second, all CPUs (tlb:tlb_flush reason 0, traced at each switch whether or not it flushed the TLB)", |cx, out| host(cx, out, |t, k| t.tlb.as_ref().map(|x| x.task_switches() as f64 * k))),
    TLB_PROC_FLUSHES_PER_S = ("tlb.proc.<pid>.<comm>.flushes_per_s", PerSecond, Rate, "TLB flushes per second in this process's context, every reason but a task switch (tlb:tlb_flush): shootdowns it asked for or received", |cx, out| per_proc(cx, out, tlb_proc, tlb_id, |s, k| Some(s.flushes() as f64 * k))),
    TLB_PROC_REMOTE_SHOOTDOWN_PER_S = ("tlb.proc.<pid>.<comm>.remote_shootdown_per_s", PerSecond, Rate, "Flushes done because another CPU asked, per second (reason 1)", |cx, out| per_proc(cx, out, tlb_proc, tlb_id, |s, k| Some(s.remote_shootdown as f64 * k))),
    TLB_PROC_LOCAL_SHOOTDOWN_PER_S = ("tlb.proc.<pid>.<comm>.local_shootdown_per_s", PerSecond, Rate, "Local shootdowns per second (reason 2)", |cx, out| per_proc(cx, out, tlb_proc, tlb_id, |s, k| Some(s.local_shootdown as f64 * k))),
    TLB_PROC_LOCAL_MM_SHOOTDOWN_PER_S = ("tlb.proc.<pid>.<comm>.local_mm_shootdown_per_s", PerSecond, Rate, "Local mm shootdowns per second (reason 3)", |cx, out| per_proc(cx, out, tlb_proc, tlb_id, |s, k| Some(s.local_mm_shootdown as f64 * k))),
    TLB_PROC_REMOTE_SEND_IPI_PER_S = ("tlb.proc.<pid>.<comm>.remote_send_ipi_per_s", PerSecond, Rate, "Flushes that sent IPIs to other CPUs per second (reason 4)", |cx, out| per_proc(cx, out, tlb_proc, tlb_id, |s, k| Some(s.remote_send_ipi as f64 * k))),
    TLB_PROC_SHOOTDOWN_IPIS_SENT_PER_S = ("tlb.proc.<pid>.<comm>.shootdown_ipis_sent_per_s", PerSecond, Rate, "TLB-shootdown IPIs this process sent per second (before 6.3: its flushes that sent IPIs, one per flush)", |cx, out| per_proc(cx, out, tlb_proc, tlb_id, |s, k| Some(s.ipis_sent as f64 * k))),
    TLB_PROC_SHOOTDOWN_IPI_CPUS_PER_S = ("tlb.proc.<pid>.<comm>.shootdown_ipi_cpus_per_s", PerSecond, Rate, "CPUs interrupted by this process's TLB shootdowns per second", |cx, out| per_proc(cx, out, tlb_proc, tlb_id, |s, k| Some(s.ipi_targets as f64 * k))),
    TLB_CGROUP_FLUSHES_PER_S = ("tlb.cgroup.<cgroup>.flushes_per_s", PerSecond, Rate, "TLB flushes per second in the context of this CPU cgroup's processes, every reason but a task switch", |cx, out| by_cgroup(cx, out, tlb_proc, |s| &s.cgroup, TlbProc::flushes)),
    TLB_CGROUP_SHOOTDOWN_IPIS_SENT_PER_S = ("tlb.cgroup.<cgroup>.shootdown_ipis_sent_per_s", PerSecond, Rate, "TLB-shootdown requests this CPU cgroup's processes sent to other CPUs per second", |cx, out| by_cgroup(cx, out, tlb_proc, |s| &s.cgroup, |s| s.ipis_sent)),
    MADVISE_CGROUP_DONTNEED_PER_S = ("madvise.cgroup.<cgroup>.dontneed_per_s", PerSecond, Rate, "madvise(MADV_DONTNEED) calls of this CPU cgroup's processes per second", |cx, out| by_cgroup(cx, out, madv_proc, |s| &s.cgroup, |s| s.dontneed_calls)),
    LOOKUPS_CGROUP_ENOENT_PER_S = ("lookups.cgroup.<cgroup>.enoent_per_s", PerSecond, Rate, "Failed (ENOENT) path look-ups of this CPU cgroup's processes per second", |cx, out| by_cgroup(cx, out, look_proc, |s| &s.cgroup, LookupProc::enoent)),
    MADVISE_DONTNEED_PER_S = ("madvise.dontneed_per_s", PerSecond, Rate, "madvise(MADV_DONTNEED) calls per second, all processes (the calls that flushed a TLB, seen at tlb:tlb_flush on x86-64 5.15+; every call where the fallback, syscalls:sys_enter_madvise, is used)", |cx, out| host(cx, out, |t, k| sum(madv_proc(t), |s| s.dontneed_calls).map(|v| v as f64 * k))),
    MADVISE_PROC_DONTNEED_PER_S = ("madvise.proc.<pid>.<comm>.dontneed_per_s", PerSecond, Rate, "madvise(MADV_DONTNEED) calls of this process per second", |cx, out| per_proc(cx, out, madv_proc, madv_id, |s, k| Some(s.dontneed_calls as f64 * k))),
    MADVISE_PROC_DONTNEED_BYTES_PER_S = ("madvise.proc.<pid>.<comm>.dontneed_bytes_per_s", BytesPerSecond, Rate, "Bytes this process released with MADV_DONTNEED per second", |cx, out| per_proc(cx, out, madv_proc, madv_id, |s, k| Some(s.dontneed_bytes as f64 * k))),
    MADVISE_PROC_FREE_PER_S = ("madvise.proc.<pid>.<comm>.free_per_s", PerSecond, Rate, "madvise(MADV_FREE) calls of this process per second", |cx, out| per_proc(cx, out, madv_proc, madv_id, |s, k| Some(s.free_calls as f64 * k))),
    MADVISE_PROC_FREE_BYTES_PER_S = ("madvise.proc.<pid>.<comm>.free_bytes_per_s", BytesPerSecond, Rate, "Bytes this process released with MADV_FREE per second", |cx, out| per_proc(cx, out, madv_proc, madv_id, |s, k| Some(s.free_bytes as f64 * k))),
    MADVISE_PROC_OTHER_PER_S = ("madvise.proc.<pid>.<comm>.other_per_s", PerSecond, Rate, "madvise calls with any other advice per second (at TLB flushes: only the advice that flushed one)", |cx, out| per_proc(cx, out, madv_proc, madv_id, |s, k| Some(s.other_calls as f64 * k))),
    RUNQLAT_EVENTS_PER_S = ("runqlat.events_per_s", PerSecond, Rate, "Wake-ups and preemptions that waited in a run queue, per second (sched_wakeup/sched_switch)", |cx, out| host(cx, out, |t, k| t.runqlat.as_ref().map(|r| r.host.count as f64 * k))),
    RUNQLAT_MEAN_USEC = ("runqlat.mean_usec", Microseconds, Gauge, "Mean run-queue latency (wake-up to running), host", |cx, out| runq_host(cx, out, Hist::mean_us)),
    RUNQLAT_P50_USEC = ("runqlat.p50_usec", Microseconds, Gauge, "Median run-queue latency, host (log2 histogram upper bound)", |cx, out| runq_host(cx, out, |h| h.quantile_us(0.5))),
    RUNQLAT_P99_USEC = ("runqlat.p99_usec", Microseconds, Gauge, "99th percentile run-queue latency, host (log2 histogram upper bound)", |cx, out| runq_host(cx, out, |h| h.quantile_us(0.99))),
    RUNQLAT_MAX_USEC = ("runqlat.max_usec", Microseconds, Gauge, "Longest run-queue wait of the interval, host", |cx, out| runq_host(cx, out, max_us)),
    RUNQLAT_CGROUP_P50_USEC = ("runqlat.cgroup.<cgroup>.p50_usec", Microseconds, Gauge, "Median run-queue latency of tasks in this CPU cgroup", |cx, out| runq_cgroup(cx, out, |h| h.quantile_us(0.5))),
    RUNQLAT_CGROUP_P99_USEC = ("runqlat.cgroup.<cgroup>.p99_usec", Microseconds, Gauge, "99th percentile run-queue latency of tasks in this CPU cgroup", |cx, out| runq_cgroup(cx, out, |h| h.quantile_us(0.99))),
    RUNQLAT_CGROUP_MAX_USEC = ("runqlat.cgroup.<cgroup>.max_usec", Microseconds, Gauge, "Longest run-queue wait of a task in this CPU cgroup", |cx, out| runq_cgroup(cx, out, max_us)),
    LOOKUPS_ENOENT_PER_S = ("lookups.enoent_per_s", PerSecond, Rate, "Path look-ups failing with ENOENT per second (stat/access/open families): negative dentries created", |cx, out| host(cx, out, |t, k| sum(look_proc(t), LookupProc::enoent).map(|v| v as f64 * k))),
    LOOKUPS_PROC_ENOENT_PER_S = ("lookups.proc.<pid>.<comm>.enoent_per_s", PerSecond, Rate, "Failed (ENOENT) path look-ups of this process per second", |cx, out| per_proc(cx, out, look_proc, look_id, |s, k| Some(s.enoent() as f64 * k))),
    LOOKUPS_PROC_STAT_ENOENT_PER_S = ("lookups.proc.<pid>.<comm>.stat_enoent_per_s", PerSecond, Rate, "stat/lstat/newfstatat/statx failing with ENOENT per second", |cx, out| per_proc(cx, out, look_proc, look_id, |s, k| Some(s.stat_enoent as f64 * k))),
    LOOKUPS_PROC_ACCESS_ENOENT_PER_S = ("lookups.proc.<pid>.<comm>.access_enoent_per_s", PerSecond, Rate, "access/faccessat failing with ENOENT per second", |cx, out| per_proc(cx, out, look_proc, look_id, |s, k| Some(s.access_enoent as f64 * k))),
    LOOKUPS_PROC_OPEN_ENOENT_PER_S = ("lookups.proc.<pid>.<comm>.open_enoent_per_s", PerSecond, Rate, "open/openat failing with ENOENT per second", |cx, out| per_proc(cx, out, look_proc, look_id, |s, k| Some(s.open_enoent as f64 * k))),
    LOOKUPS_PATTERN_SAMPLES = ("lookups.pattern.<pattern>.samples", Count, Gauge, "Sampled failing paths with this name pattern (digit runs as *) in the interval, of at most 64 sampled", |cx, out| patterns(cx, out)),
    MMAPLOCK_WAITS_PER_S = ("mmaplock.waits_per_s", PerSecond, Rate, "Contended mmap_lock acquisitions per second, all processes: a thread slept for its own address space's lock (BPF: lock:contention_begin/end, 5.19+)", |cx, out| host(cx, out, |t, k| sum(mmap_proc(t), mmap_waits).map(|v| v as f64 * k))),
    MMAPLOCK_WAIT_PCT = ("mmaplock.wait_pct", Percent, Rate, "Time threads spent waiting for their mmap_lock, % of the interval summed over threads, all processes", |cx, out| host(cx, out, |t, k| sum(mmap_proc(t), |s| s.wait.sum_ns).map(|v| pct(v, k)))),
    MMAPLOCK_PROC_WAITS_PER_S = ("mmaplock.proc.<pid>.<comm>.waits_per_s", PerSecond, Rate, "Contended mmap_lock acquisitions of this process's threads per second (read and write)", |cx, out| per_proc(cx, out, mmap_proc, mmap_id, |s, k| Some(mmap_waits(s) as f64 * k))),
    MMAPLOCK_PROC_WRITE_WAITS_PER_S = ("mmaplock.proc.<pid>.<comm>.write_waits_per_s", PerSecond, Rate, "Contended mmap_lock acquisitions for writing (mmap, munmap, brk, mprotect) of this process per second", |cx, out| per_proc(cx, out, mmap_proc, mmap_id, |s, k| Some(s.write_waits as f64 * k))),
    MMAPLOCK_PROC_WAIT_PCT = ("mmaplock.proc.<pid>.<comm>.wait_pct", Percent, Rate, "Time this process's threads spent waiting for its mmap_lock, % of the interval summed over threads", |cx, out| per_proc(cx, out, mmap_proc, mmap_id, |s, k| Some(pct(s.wait.sum_ns, k)))),
    MMAPLOCK_PROC_WAIT_MAX_USEC = ("mmaplock.proc.<pid>.<comm>.wait_max_usec", Microseconds, Gauge, "Longest mmap_lock wait of this process in the interval", |cx, out| per_proc_by(cx, out, mmap_proc, mmap_id, |s, _| max_us(&s.wait), f64::max)),
    MMAPLOCK_CGROUP_WAITS_PER_S = ("mmaplock.cgroup.<cgroup>.waits_per_s", PerSecond, Rate, "Contended mmap_lock acquisitions of this CPU cgroup's processes per second", |cx, out| by_cgroup(cx, out, mmap_proc, |s| &s.cgroup, mmap_waits)),
    DIRTY_PAUSES_PER_S = ("dirty.pauses_per_s", PerSecond, Rate, "Write-throttling sleeps per second, all processes: balance_dirty_pages made a writer sleep because its writeback domain held too many dirty pages (BPF: writeback:balance_dirty_pages)", |cx, out| host(cx, out, |t, k| sum(dirty_proc(t), |s| s.pauses).map(|v| v as f64 * k))),
    DIRTY_PAUSED_PCT = ("dirty.paused_pct", Percent, Rate, "Time writers slept in balance_dirty_pages, % of the interval summed over threads, all processes", |cx, out| host(cx, out, |t, k| sum(dirty_proc(t), |s| s.pause.sum_ns).map(|v| pct(v, k)))),
    DIRTY_PROC_PAUSES_PER_S = ("dirty.proc.<pid>.<comm>.pauses_per_s", PerSecond, Rate, "Write-throttling sleeps of this process per second", |cx, out| per_proc(cx, out, dirty_proc, dirty_id, |s, k| Some(s.pauses as f64 * k))),
    DIRTY_PROC_PAUSED_PCT = ("dirty.proc.<pid>.<comm>.paused_pct", Percent, Rate, "Time this process's threads slept in balance_dirty_pages, % of the interval summed over threads", |cx, out| per_proc(cx, out, dirty_proc, dirty_id, |s, k| Some(pct(s.pause.sum_ns, k)))),
    DIRTY_PROC_PAUSE_MAX_USEC = ("dirty.proc.<pid>.<comm>.pause_max_usec", Microseconds, Gauge, "Longest write-throttling sleep of this process in the interval (the kernel counts them in ms)", |cx, out| per_proc_by(cx, out, dirty_proc, dirty_id, |s, _| max_us(&s.pause), f64::max)),
    DIRTY_CGROUP_PAUSED_PCT = ("dirty.cgroup.<cgroup>.paused_pct", Percent, Rate, "Time this memory cgroup's writers slept in balance_dirty_pages, % of the interval summed over threads", |cx, out| by_cgroup_pct(cx, out, dirty_proc, |s| &s.cgroup, |s| s.pause.sum_ns)),
    ATTACHED = ("tracer.<tracer>.attached", Count, Gauge, "1 while the tracer was attached this interval, 0 while an on-demand tracer waited for its symptom (tlb and madvise: TLB shootdowns, lookups: negative dentries, runqlat: threads waiting for a CPU)", |cx, out| attached(cx, out)),
    CENSUS = ("tracer.<tracer>.census", Count, Gauge, "1 when the tracer ran this interval for the census only (an on-demand tracer attached for one interval now and then without its symptom: record --census-every), 0 when it ran for its symptom or always", |cx, out| census(cx, out)),
    DROPPED_PER_S = ("tracer.<tracer>.dropped_per_s", PerSecond, Rate, "Tracer events not recorded per second (bounded kernel maps full)", |cx, out| dropped(cx, out)),
}

#[cfg(test)]
mod tests {
    use crate::derive::evaluate;
    use crate::metrics::all;
    use crate::sample::Sample;
    use crate::tracers::*;

    /// A stored-sample shape of case 4 (jemalloc purging) and case 1 (NSS probing) over a 2 s
    /// span, with an overflow entry.
    fn sample() -> Sample {
        let mut s = Sample::default();
        let mut rq = Hist {
            slots: vec![0; 14],
            count: 100,
            sum_ns: 100 * 50_000,
            max_ns: 9_000_000,
        };
        rq.slots[2] = 98;
        rq.slots[13] = 2;
        s.tracers = Some(Tracers {
            span_ns: 2_000_000_000,
            madvise: Some(Madvise {
                procs: vec![
                    MadviseProc {
                        pid: 42,
                        comm: "java".into(),
                        cgroup: "/docker/abc".into(),
                        dontneed_calls: 34_000,
                        dontneed_bytes: 34_000 * 8192,
                        ..Default::default()
                    },
                    MadviseProc {
                        pid: OTHER_PID,
                        comm: "(other)".into(),
                        dontneed_calls: 6,
                        ..Default::default()
                    },
                ],
                dropped: 4,
            }),
            tlb: Some(Tlb {
                procs: vec![TlbProc {
                    pid: 42,
                    comm: "java".into(),
                    cgroup: "/docker/abc".into(),
                    remote_shootdown: 100,
                    local_shootdown: 300,
                    ipis_sent: 4_000,
                    ipi_targets: 4_000,
                    ..Default::default()
                }],
                ipis_attributed: true,
                dropped: 0,
                task_switch: 2_000,
            }),
            runqlat: Some(Runqlat {
                host: rq.clone(),
                cgroups: vec![RunqCgroup {
                    cgroup: "/docker/abc".into(),
                    latency: rq,
                }],
                dropped: 0,
            }),
            reclaim: Some(Reclaim {
                procs: vec![ReclaimStat {
                    pid: 7,
                    comm: "certutil".into(),
                    direct_stalls: 3,
                    memcg_stalls: 1,
                    latency: Hist {
                        slots: vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4],
                        count: 4,
                        sum_ns: 500_000_000,
                        max_ns: 1_800_000,
                    },
                    ..Default::default()
                }],
                kswapd_wakes: 10,
                ..Default::default()
            }),
            lookups: Some(Lookups {
                procs: vec![LookupProc {
                    pid: 7,
                    comm: "certutil".into(),
                    access_enoent: 10_400,
                    ..Default::default()
                }],
                patterns: vec![LookupPattern {
                    pattern: "/etc/pki/nssdb/.*_dOeSnotExist_.db".into(),
                    samples: 60,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            mmaplock: Some(MmapLock {
                procs: vec![MmapLockProc {
                    pid: 42,
                    comm: "java".into(),
                    cgroup: "/docker/abc".into(),
                    read_waits: 100,
                    write_waits: 500,
                    wait: Hist {
                        slots: vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 600],
                        count: 600,
                        sum_ns: 600 * 2_000_000,
                        max_ns: 3_000_000,
                    },
                }],
                dropped: 0,
            }),
            dirty: Some(Dirty {
                procs: vec![DirtyProc {
                    pid: 9,
                    comm: "cp".into(),
                    cgroup: "/docker/abc".into(),
                    pauses: 40,
                    pause: Hist {
                        slots: vec![0; 16],
                        count: 40,
                        sum_ns: 40 * 25_000_000,
                        max_ns: 48_000_000,
                    },
                }],
                dropped: 0,
            }),
            shrinker: None,
            idle: vec!["shrinker".into()],
            census: vec!["lookups".into()],
        });
        s
    }

    fn value(s: &Sample, series: &str) -> Option<f64> {
        let v = evaluate(all(), s, None, &[]);
        v.iter().find(|v| v.series == series).and_then(|v| v.value)
    }

    /// A sample stored before issue 18 with one process in three TLB entries (683 flushes, then
    /// two re-reads of 2): one series, the sum; a reclaim maximum is the largest of them.
    #[test]
    fn a_process_in_several_entries_is_one_series() {
        let mut s = sample();
        let t = s.tracers.as_mut().unwrap();
        let one = |n| TlbProc {
            pid: 42,
            comm: "python3".into(),
            local_shootdown: n,
            ..Default::default()
        };
        t.tlb.as_mut().unwrap().procs = vec![one(683), one(2), one(2)];
        let r = t.reclaim.as_mut().unwrap();
        let mut again = r.procs[0].clone();
        again.latency.max_ns = 900_000;
        again.direct_stalls = 1;
        again.memcg_stalls = 0;
        r.procs.push(again);
        let v = evaluate(all(), &s, None, &[]);
        let rows: Vec<_> = v
            .iter()
            .filter(|v| v.series == "tlb.proc.42.python3.flushes_per_s")
            .collect();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].value, Some(687.0 / 2.0));
        assert_eq!(
            value(&s, "reclaim.proc.7.certutil.stalls_per_s"),
            Some((4.0 + 1.0) / 2.0)
        );
        assert_eq!(
            value(&s, "reclaim.proc.7.certutil.stall_max_usec"),
            Some(1800.0)
        );
    }

    #[test]
    fn tracer_counts_become_rates_over_their_span() {
        let s = sample();
        assert_eq!(
            value(&s, "madvise.proc.42.java.dontneed_per_s"),
            Some(17_000.0)
        );
        assert_eq!(
            value(&s, "madvise.proc.42.java.dontneed_bytes_per_s"),
            Some(17_000.0 * 8192.0)
        );
        assert_eq!(
            value(&s, "madvise.proc.other.(other).dontneed_per_s"),
            Some(3.0)
        );
        assert_eq!(value(&s, "madvise.dontneed_per_s"), Some(17_003.0));
        assert_eq!(value(&s, "tracer.madvise.dropped_per_s"), Some(2.0));
        assert_eq!(
            value(&s, "tlb.proc.42.java.shootdown_ipis_sent_per_s"),
            Some(2_000.0)
        );
        assert_eq!(value(&s, "tlb.shootdown_ipis_sent_per_s"), Some(2_000.0));
        assert_eq!(value(&s, "tlb.proc.42.java.flushes_per_s"), Some(200.0));
        assert_eq!(value(&s, "tlb.task_switch_per_s"), Some(1_000.0));
        assert_eq!(
            value(&s, "tlb.cgroup./docker/abc.shootdown_ipis_sent_per_s"),
            Some(2_000.0)
        );
        assert_eq!(
            value(&s, "madvise.cgroup./docker/abc.dontneed_per_s"),
            Some(17_000.0)
        );
        // The overflow entry has no cgroup: it is not summed under an empty name.
        assert!(evaluate(all(), &s, None, &[])
            .iter()
            .all(|v| v.series != "madvise.cgroup..dontneed_per_s"));
        assert_eq!(
            value(&s, "lookups.proc.7.certutil.enoent_per_s"),
            Some(5_200.0)
        );
        assert_eq!(
            value(
                &s,
                "lookups.pattern./etc/pki/nssdb/.*_dOeSnotExist_.db.samples"
            ),
            Some(60.0)
        );
        assert_eq!(value(&s, "reclaim.stalls_per_s"), Some(2.0));
        // 0.5 s stalled over a 2 s span = 25 %.
        assert_eq!(value(&s, "reclaim.stall_pct"), Some(25.0));
        assert_eq!(value(&s, "reclaim.stall_max_usec"), Some(1_800.0));
        assert_eq!(value(&s, "reclaim.kswapd_wakes_per_s"), Some(5.0));
        // 600 waits of 2 ms over 2 s: 1.2 thread-seconds in 2 s, 60% of the interval.
        assert_eq!(value(&s, "mmaplock.waits_per_s"), Some(300.0));
        assert_eq!(
            value(&s, "mmaplock.proc.42.java.write_waits_per_s"),
            Some(250.0)
        );
        assert_eq!(value(&s, "mmaplock.proc.42.java.wait_pct"), Some(60.0));
        assert_eq!(
            value(&s, "mmaplock.proc.42.java.wait_max_usec"),
            Some(3_000.0)
        );
        assert_eq!(
            value(&s, "mmaplock.cgroup./docker/abc.waits_per_s"),
            Some(300.0)
        );
        // 40 sleeps of 25 ms over 2 s: 1 thread-second in 2 s, 50%.
        assert_eq!(value(&s, "dirty.pauses_per_s"), Some(20.0));
        assert_eq!(value(&s, "dirty.proc.9.cp.paused_pct"), Some(50.0));
        assert_eq!(value(&s, "dirty.proc.9.cp.pause_max_usec"), Some(48_000.0));
        assert_eq!(value(&s, "dirty.cgroup./docker/abc.paused_pct"), Some(50.0));
        assert_eq!(value(&s, "tracer.madvise.attached"), Some(1.0));
        assert_eq!(value(&s, "tracer.lookups.census"), Some(1.0));
        assert_eq!(value(&s, "tracer.madvise.census"), Some(0.0));
        assert_eq!(
            value(&s, "tracer.shrinker.census"),
            None,
            "idle: not running"
        );
        assert_eq!(
            value(&s, "tracer.shrinker.attached"),
            Some(0.0),
            "idle on demand"
        );
    }

    #[test]
    fn run_queue_percentiles_come_from_the_histogram() {
        let s = sample();
        assert_eq!(value(&s, "runqlat.p50_usec"), Some(8.0));
        // p99 falls in slot 13 ([8192, 16384) us), capped at the 9 ms maximum seen.
        assert_eq!(value(&s, "runqlat.p99_usec"), Some(9_000.0));
        assert_eq!(
            value(&s, "runqlat.cgroup./docker/abc.p99_usec"),
            Some(9_000.0)
        );
        assert_eq!(value(&s, "runqlat.max_usec"), Some(9_000.0));
        assert_eq!(value(&s, "runqlat.events_per_s"), Some(50.0));
    }

    #[test]
    fn no_span_or_no_tracers_gives_no_series() {
        let mut s = sample();
        s.tracers.as_mut().unwrap().span_ns = 0;
        assert_eq!(value(&s, "madvise.dontneed_per_s"), None);
        let v = evaluate(all(), &Sample::default(), None, &[]);
        assert!(!v
            .iter()
            .any(|v| v.series.starts_with("madvise.") || v.series.starts_with("runqlat.")));
    }
}
