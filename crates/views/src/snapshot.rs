//! What one screen shows for one sample, as plain data: the header lines' values, the process
//! and cgroup rows. Built from two consecutive samples through the metric registry, so every
//! number here is the number `dump` prints for the same series. `--json-once` serialises it.

use std::collections::HashMap;

use jitterscope_model::derive::for_each_series;
use jitterscope_model::registry::{find, MetricDef};
use jitterscope_model::Sample;
use serde::Serialize;

/// Host CPU time split, percent (of all CPUs for the host line, of one CPU per CPU).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cpu {
    /// `cpu` for the host, `cpu0`… per CPU.
    pub name: String,
    pub usr: Option<f64>,
    pub sys: Option<f64>,
    pub irq: Option<f64>,
    pub softirq: Option<f64>,
    pub iowait: Option<f64>,
    pub steal: Option<f64>,
    pub idle: Option<f64>,
}

/// Load, run queue and scheduler activity.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Load {
    pub avg1: Option<f64>,
    pub avg5: Option<f64>,
    pub avg15: Option<f64>,
    /// Runnable tasks (`procs_running`).
    pub running: Option<f64>,
    /// Tasks in uninterruptible sleep (`procs_blocked`).
    pub blocked: Option<f64>,
    /// Processes exiting (PF_EXITING), which case 1 found piling up behind reclaim.
    pub exiting: Option<f64>,
    /// Run-queue latency p99 over the interval, µs (runqlat tracer).
    pub runq_p99_us: Option<f64>,
    /// Run-queue latency maximum, µs.
    pub runq_max_us: Option<f64>,
    pub ctxt_per_s: Option<f64>,
}

/// Memory: free against the watermarks, cache, slab, dentries.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Mem {
    pub total: Option<f64>,
    pub free: Option<f64>,
    pub available: Option<f64>,
    pub cached: Option<f64>,
    pub dirty: Option<f64>,
    pub slab: Option<f64>,
    pub slab_reclaimable: Option<f64>,
    /// Sums over all zones, bytes: kswapd wakes below `low`, allocations stall below `min`.
    pub wmark_min: Option<f64>,
    pub wmark_low: Option<f64>,
    pub wmark_high: Option<f64>,
    pub dentries: Option<f64>,
    pub dentries_negative: Option<f64>,
    pub negative_growth_per_s: Option<f64>,
}

/// Page reclaim activity, per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Pag {
    pub scan_kswapd: Option<f64>,
    pub scan_direct: Option<f64>,
    pub steal: Option<f64>,
    pub allocstall: Option<f64>,
    pub majflt: Option<f64>,
    pub refault: Option<f64>,
    /// Direct-reclaim stalls (reclaim tracer).
    pub stalls: Option<f64>,
    /// Longest stall, µs.
    pub stall_max_us: Option<f64>,
}

/// Inter-processor interrupts, per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Ipi {
    /// TLB shootdowns received (`TLB` line of /proc/interrupts).
    pub tlb: Option<f64>,
    /// Function-call IPIs (`CAL`).
    pub cal: Option<f64>,
    /// Shootdown IPIs sent, as the tlb tracer counted them.
    pub shootdowns_sent: Option<f64>,
}

/// Pressure stall information over the interval, percent of time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Psi {
    pub cpu_some: Option<f64>,
    pub memory_some: Option<f64>,
    pub memory_full: Option<f64>,
    pub io_some: Option<f64>,
    pub io_full: Option<f64>,
}

/// One disk.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Disk {
    pub name: String,
    pub util_pct: Option<f64>,
    pub await_ms: Option<f64>,
    pub reads_per_s: Option<f64>,
    pub writes_per_s: Option<f64>,
    pub read_bytes_per_s: Option<f64>,
    pub write_bytes_per_s: Option<f64>,
}

/// One process.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProcRow {
    pub pid: u32,
    pub comm: String,
    /// Scheduler state letter (`R`, `S`, `D`, `Z`…), `E` added when exiting.
    pub state: String,
    pub cmdline: String,
    /// Its cgroup (unified path, else the v1 cpu one).
    pub cgroup: String,
    /// Percent of one CPU.
    pub cpu: Option<f64>,
    pub sys: Option<f64>,
    pub rss_bytes: Option<f64>,
    /// RSS change over the interval, bytes per second.
    pub rss_growth_per_s: Option<f64>,
    pub majflt_per_s: Option<f64>,
    /// MADV_DONTNEED + MADV_FREE + other madvise calls per second (madvise tracer).
    pub madvise_per_s: Option<f64>,
    /// Failed (ENOENT) path look-ups per second (lookups tracer).
    pub enoent_per_s: Option<f64>,
    /// TLB-shootdown IPIs it caused per second (tlb tracer).
    pub tlb_ipis_per_s: Option<f64>,
}

/// One cgroup.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CgroupRow {
    pub path: String,
    /// Percent of one CPU.
    pub cpu: Option<f64>,
    /// CPU quota, cores (absent: no quota).
    pub quota_cores: Option<f64>,
    pub usage_of_quota_pct: Option<f64>,
    /// Share of periods throttled.
    pub throttled_pct: Option<f64>,
    pub mem_bytes: Option<f64>,
    pub mem_limit_bytes: Option<f64>,
    pub mem_of_limit_pct: Option<f64>,
    /// Direct-reclaim stalls per second of its tasks (reclaim tracer).
    pub reclaim_stalls_per_s: Option<f64>,
    /// Run-queue latency p99 of its tasks, µs.
    pub runq_p99_us: Option<f64>,
}

/// Everything one screen shows of one sample.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// Sample time (RFC 3339).
    pub time: String,
    pub ts_ns: i64,
    pub hostname: String,
    pub kernel: String,
    pub ncpu: u32,
    /// Seconds the rates cover (0: no previous sample, rates unknown).
    pub interval_s: f64,
    /// Seconds of samples missing before this one (the gap beyond one interval), when any.
    pub missing_before_s: Option<f64>,
    /// Which tracers contributed (absent ones make their columns `-`).
    pub tracers: Vec<String>,
    pub cpu: Cpu,
    pub cpus: Vec<Cpu>,
    pub load: Load,
    pub mem: Mem,
    pub pag: Pag,
    pub ipi: Ipi,
    pub psi: Psi,
    pub disks: Vec<Disk>,
    pub processes: Vec<ProcRow>,
    pub cgroups: Vec<CgroupRow>,
}

/// Every metric a screen reads. Resolved once: `find` walks the registry.
fn defs() -> &'static [&'static MetricDef] {
    use std::sync::OnceLock;
    static DEFS: OnceLock<Vec<&'static MetricDef>> = OnceLock::new();
    // A name missing from the registry is a programming error the tests catch.
    DEFS.get_or_init(|| NAMES.iter().filter_map(|n| find(n)).collect())
}

const NAMES: &[&str] = &[
    "cpu.usr_pct",
    "cpu.nice_pct",
    "cpu.sys_pct",
    "cpu.irq_pct",
    "cpu.softirq_pct",
    "cpu.iowait_pct",
    "cpu.steal_pct",
    "cpu.idle_pct",
    "cpu.<cpu>.usr_pct",
    "cpu.<cpu>.nice_pct",
    "cpu.<cpu>.sys_pct",
    "cpu.<cpu>.irq_pct",
    "cpu.<cpu>.softirq_pct",
    "cpu.<cpu>.iowait_pct",
    "cpu.<cpu>.steal_pct",
    "cpu.<cpu>.idle_pct",
    "sched.ctxt_per_s",
    "sched.procs_running",
    "sched.procs_blocked",
    "load.avg1",
    "load.avg5",
    "load.avg15",
    "procs.exiting",
    "runqlat.p99_usec",
    "runqlat.max_usec",
    "mem.total_bytes",
    "mem.free_bytes",
    "mem.available_bytes",
    "mem.cached_bytes",
    "mem.dirty_bytes",
    "mem.slab_bytes",
    "mem.slab_reclaimable_bytes",
    "zone.<node>.<zone>.min_pages",
    "zone.<node>.<zone>.low_pages",
    "zone.<node>.<zone>.high_pages",
    "dentry.nr_dentry",
    "dentry.nr_negative",
    "dentry.negative_growth_per_s",
    "reclaim.pgscan_kswapd_per_s",
    "reclaim.pgscan_direct_per_s",
    "reclaim.pgsteal_kswapd_per_s",
    "reclaim.pgsteal_direct_per_s",
    "reclaim.allocstall_per_s",
    "reclaim.pgmajfault_per_s",
    "reclaim.refault_file_per_s",
    "reclaim.refault_anon_per_s",
    "reclaim.stalls_per_s",
    "reclaim.stall_max_usec",
    "irq.tlb_per_s",
    "irq.cal_per_s",
    "tlb.shootdown_ipis_sent_per_s",
    "psi.<resource>.some_pct",
    "psi.<resource>.full_pct",
    "disk.<disk>.util_pct",
    "disk.<disk>.await_ms",
    "disk.<disk>.reads_per_s",
    "disk.<disk>.writes_per_s",
    "disk.<disk>.read_bytes_per_s",
    "disk.<disk>.write_bytes_per_s",
    "proc.<pid>.<comm>.cpu_pct",
    "proc.<pid>.<comm>.sys_pct",
    "proc.<pid>.<comm>.rss_bytes",
    "proc.<pid>.<comm>.majflt_per_s",
    "madvise.proc.<pid>.<comm>.dontneed_per_s",
    "madvise.proc.<pid>.<comm>.free_per_s",
    "madvise.proc.<pid>.<comm>.other_per_s",
    "lookups.proc.<pid>.<comm>.enoent_per_s",
    "tlb.proc.<pid>.<comm>.shootdown_ipis_sent_per_s",
    "cgroup.<cgroup>.cpu.usage_pct",
    "cgroup.<cgroup>.cpu.quota_cores",
    "cgroup.<cgroup>.cpu.usage_of_quota_pct",
    "cgroup.<cgroup>.cpu.throttled_pct",
    "cgroup.<cgroup>.memory.usage_bytes",
    "cgroup.<cgroup>.memory.limit_bytes",
    "cgroup.<cgroup>.memory.usage_of_limit_pct",
    "reclaim.cgroup.<cgroup>.stalls_per_s",
    "runqlat.cgroup.<cgroup>.p99_usec",
];

/// Adds `v` into an optional sum (unknown stays unknown only if nothing is known).
fn add(slot: &mut Option<f64>, v: Option<f64>) {
    if let Some(v) = v {
        *slot = Some(slot.unwrap_or(0.0) + v);
    }
}

impl Snapshot {
    /// The screen's data for `cur` (rates against `prev`, which should be the sample before).
    pub fn build(cur: &Sample, prev: Option<&Sample>) -> Snapshot {
        let mut s = Snapshot {
            time: jitterscope_model::time::rfc3339(cur.ts_ns),
            ts_ns: cur.ts_ns,
            hostname: cur.host.hostname.clone(),
            kernel: cur.host.kernel.clone(),
            ncpu: cur.host.ncpu,
            ..Default::default()
        };
        let ctx = jitterscope_model::derive::Ctx::new(cur, prev);
        s.interval_s = ctx.dt_s;
        let interval = cur.interval_ns as f64 / 1e9;
        if ctx.dt_s > 0.0 && interval > 0.0 && ctx.dt_s > 1.5 * interval {
            s.missing_before_s = Some(ctx.dt_s - interval);
        }
        if let Some(t) = &cur.tracers {
            s.tracers = t
                .running()
                .iter()
                .filter(|(_, up)| *up)
                .map(|(n, _)| n.to_string())
                .collect();
        }
        let traced = |n: &str| s.tracers.iter().any(|t| t == n);
        let (has_madvise, has_lookups, has_tlb, has_reclaim) = (
            traced("madvise"),
            traced("lookups"),
            traced("tlb"),
            traced("reclaim"),
        );
        let page = cur.host.page_size_bytes.max(1) as f64;

        let mut cpus: Vec<Cpu> = Vec::new();
        let mut disks: Vec<Disk> = Vec::new();
        let mut procs = seed_processes(cur, prev, ctx.dt_s);
        let mut cgroups: HashMap<String, CgroupRow> = HashMap::new();
        let mut nice = None;
        for_each_series(defs(), cur, prev, &[], |def, labels, _series, v| {
            let l0 = labels.first().copied().unwrap_or("");
            match def.name {
                "cpu.usr_pct" => s.cpu.usr = v,
                "cpu.nice_pct" => nice = v,
                "cpu.sys_pct" => s.cpu.sys = v,
                "cpu.irq_pct" => s.cpu.irq = v,
                "cpu.softirq_pct" => s.cpu.softirq = v,
                "cpu.iowait_pct" => s.cpu.iowait = v,
                "cpu.steal_pct" => s.cpu.steal = v,
                "cpu.idle_pct" => s.cpu.idle = v,
                n if n.starts_with("cpu.<cpu>.") => {
                    let name = format!("cpu{l0}");
                    let c = match cpus.iter_mut().position(|c| c.name == name) {
                        Some(i) => &mut cpus[i],
                        None => {
                            cpus.push(Cpu {
                                name,
                                ..Default::default()
                            });
                            cpus.last_mut().expect("just pushed")
                        }
                    };
                    match &n["cpu.<cpu>.".len()..] {
                        // Niced user time counts as user time on the screen, as in top.
                        "usr_pct" | "nice_pct" => add(&mut c.usr, v),
                        "sys_pct" => c.sys = v,
                        "irq_pct" => c.irq = v,
                        "softirq_pct" => c.softirq = v,
                        "iowait_pct" => c.iowait = v,
                        "steal_pct" => c.steal = v,
                        "idle_pct" => c.idle = v,
                        _ => {}
                    }
                }
                "sched.ctxt_per_s" => s.load.ctxt_per_s = v,
                "sched.procs_running" => s.load.running = v,
                "sched.procs_blocked" => s.load.blocked = v,
                "load.avg1" => s.load.avg1 = v,
                "load.avg5" => s.load.avg5 = v,
                "load.avg15" => s.load.avg15 = v,
                "procs.exiting" => s.load.exiting = v,
                "runqlat.p99_usec" => s.load.runq_p99_us = v,
                "runqlat.max_usec" => s.load.runq_max_us = v,
                "mem.total_bytes" => s.mem.total = v,
                "mem.free_bytes" => s.mem.free = v,
                "mem.available_bytes" => s.mem.available = v,
                "mem.cached_bytes" => s.mem.cached = v,
                "mem.dirty_bytes" => s.mem.dirty = v,
                "mem.slab_bytes" => s.mem.slab = v,
                "mem.slab_reclaimable_bytes" => s.mem.slab_reclaimable = v,
                "zone.<node>.<zone>.min_pages" => add(&mut s.mem.wmark_min, v.map(|p| p * page)),
                "zone.<node>.<zone>.low_pages" => add(&mut s.mem.wmark_low, v.map(|p| p * page)),
                "zone.<node>.<zone>.high_pages" => add(&mut s.mem.wmark_high, v.map(|p| p * page)),
                "dentry.nr_dentry" => s.mem.dentries = v,
                "dentry.nr_negative" => s.mem.dentries_negative = v,
                "dentry.negative_growth_per_s" => s.mem.negative_growth_per_s = v,
                "reclaim.pgscan_kswapd_per_s" => s.pag.scan_kswapd = v,
                "reclaim.pgscan_direct_per_s" => s.pag.scan_direct = v,
                "reclaim.pgsteal_kswapd_per_s" | "reclaim.pgsteal_direct_per_s" => {
                    add(&mut s.pag.steal, v)
                }
                "reclaim.allocstall_per_s" => s.pag.allocstall = v,
                "reclaim.pgmajfault_per_s" => s.pag.majflt = v,
                "reclaim.refault_file_per_s" | "reclaim.refault_anon_per_s" => {
                    add(&mut s.pag.refault, v)
                }
                "reclaim.stalls_per_s" => s.pag.stalls = v,
                "reclaim.stall_max_usec" => s.pag.stall_max_us = v,
                "irq.tlb_per_s" => s.ipi.tlb = v,
                "irq.cal_per_s" => s.ipi.cal = v,
                "tlb.shootdown_ipis_sent_per_s" => s.ipi.shootdowns_sent = v,
                "psi.<resource>.some_pct" => match l0 {
                    "cpu" => s.psi.cpu_some = v,
                    "memory" => s.psi.memory_some = v,
                    "io" => s.psi.io_some = v,
                    _ => {}
                },
                "psi.<resource>.full_pct" => match l0 {
                    "memory" => s.psi.memory_full = v,
                    "io" => s.psi.io_full = v,
                    _ => {}
                },
                n if n.starts_with("disk.<disk>.") => {
                    let d = match disks.iter_mut().position(|d| d.name == l0) {
                        Some(i) => &mut disks[i],
                        None => {
                            disks.push(Disk {
                                name: l0.to_string(),
                                ..Default::default()
                            });
                            disks.last_mut().expect("just pushed")
                        }
                    };
                    match &n["disk.<disk>.".len()..] {
                        "util_pct" => d.util_pct = v,
                        "await_ms" => d.await_ms = v,
                        "reads_per_s" => d.reads_per_s = v,
                        "writes_per_s" => d.writes_per_s = v,
                        "read_bytes_per_s" => d.read_bytes_per_s = v,
                        "write_bytes_per_s" => d.write_bytes_per_s = v,
                        _ => {}
                    }
                }
                n if n.contains(".proc.<pid>.") || n.starts_with("proc.<pid>.") => {
                    let Ok(pid) = l0.parse::<u32>() else { return };
                    let Some(p) = procs.get_mut(&pid) else { return };
                    match n {
                        "proc.<pid>.<comm>.cpu_pct" => p.cpu = v,
                        "proc.<pid>.<comm>.sys_pct" => p.sys = v,
                        "proc.<pid>.<comm>.rss_bytes" => p.rss_bytes = v,
                        "proc.<pid>.<comm>.majflt_per_s" => p.majflt_per_s = v,
                        "lookups.proc.<pid>.<comm>.enoent_per_s" => p.enoent_per_s = v,
                        "tlb.proc.<pid>.<comm>.shootdown_ipis_sent_per_s" => p.tlb_ipis_per_s = v,
                        _ if n.starts_with("madvise.") => add(&mut p.madvise_per_s, v),
                        _ => {}
                    }
                }
                n if n.contains("cgroup.<cgroup>.") => {
                    let c = cgroups.entry(l0.to_string()).or_insert_with(|| CgroupRow {
                        path: l0.to_string(),
                        ..Default::default()
                    });
                    match n {
                        "cgroup.<cgroup>.cpu.usage_pct" => c.cpu = v,
                        "cgroup.<cgroup>.cpu.quota_cores" => c.quota_cores = v,
                        "cgroup.<cgroup>.cpu.usage_of_quota_pct" => c.usage_of_quota_pct = v,
                        "cgroup.<cgroup>.cpu.throttled_pct" => c.throttled_pct = v,
                        "cgroup.<cgroup>.memory.usage_bytes" => c.mem_bytes = v,
                        "cgroup.<cgroup>.memory.limit_bytes" => c.mem_limit_bytes = v,
                        "cgroup.<cgroup>.memory.usage_of_limit_pct" => c.mem_of_limit_pct = v,
                        "reclaim.cgroup.<cgroup>.stalls_per_s" => c.reclaim_stalls_per_s = v,
                        "runqlat.cgroup.<cgroup>.p99_usec" => c.runq_p99_us = v,
                        _ => {}
                    }
                }
                _ => {}
            }
        });
        add(&mut s.cpu.usr, nice);
        s.cpu.name = "cpu".into();
        // Per-CPU rows in CPU number order (the registry emits them in /proc/stat order).
        cpus.sort_by_key(|c| c.name[3..].parse::<u32>().unwrap_or(u32::MAX));
        s.cpus = cpus;
        s.disks = disks;

        // Tracer columns read 0 where the tracer ran and saw nothing of the process, `-` where
        // it did not run.
        for p in procs.values_mut() {
            let zero = |slot: &mut Option<f64>, on: bool| {
                if on && slot.is_none() {
                    *slot = Some(0.0);
                }
            };
            zero(&mut p.madvise_per_s, has_madvise);
            zero(&mut p.enoent_per_s, has_lookups);
            zero(&mut p.tlb_ipis_per_s, has_tlb);
        }
        for c in cgroups.values_mut() {
            if has_reclaim && c.reclaim_stalls_per_s.is_none() {
                c.reclaim_stalls_per_s = Some(0.0);
            }
        }
        s.processes = procs.into_values().collect();
        s.processes.sort_by_key(|p| p.pid);
        s.cgroups = cgroups.into_values().collect();
        s.cgroups.sort_by(|a, b| a.path.cmp(&b.path));
        s
    }
}

/// One row per process of `cur` with what the sample itself says (names, state, cgroup, RSS
/// growth against the same process in `prev`); the registry's series fill in the rates.
fn seed_processes(cur: &Sample, prev: Option<&Sample>, dt_s: f64) -> HashMap<u32, ProcRow> {
    let page = cur.host.page_size_bytes.max(1) as f64;
    // Matched by pid and start time: a reused pid is another process.
    let before: HashMap<(u32, u64), u64> = prev
        .and_then(|p| p.processes.as_ref())
        .map(|ps| {
            ps.iter()
                .map(|p| ((p.stat.pid, p.stat.starttime_ticks), p.stat.rss_pages))
                .collect()
        })
        .unwrap_or_default();
    let mut out = HashMap::new();
    for p in cur.processes.iter().flatten() {
        let st = &p.stat;
        let mut state = st.state.to_string();
        if st.flags & jitterscope_sources::process::PF_EXITING != 0 {
            state.push('E');
        }
        // On a v1 host every process sits at the unified root: the first path below a root
        // (unified, then cpu, then memory) is the one that names its container or unit.
        let cgroup = p
            .cgroups
            .as_ref()
            .and_then(|c| {
                [&c.v2, &c.cpu, &c.memory]
                    .into_iter()
                    .flatten()
                    .find(|p| p.as_str() != "/")
                    .or(c.v2.as_ref())
                    .cloned()
            })
            .unwrap_or_default();
        let rss_growth_per_s = match before.get(&(st.pid, st.starttime_ticks)) {
            Some(&old) if dt_s > 0.0 => Some((st.rss_pages as f64 - old as f64) * page / dt_s),
            _ => None,
        };
        out.insert(
            st.pid,
            ProcRow {
                pid: st.pid,
                comm: st.comm.clone(),
                state,
                cmdline: p.cmdline.to_string(),
                cgroup,
                rss_growth_per_s,
                ..Default::default()
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_the_screen_reads_is_registered() {
        for n in NAMES {
            assert!(find(n).is_some(), "{n} is not in the registry");
        }
        assert_eq!(defs().len(), NAMES.len());
    }

    #[test]
    fn an_empty_sample_gives_unknowns_not_zeros() {
        let s = Snapshot::build(&Sample::default(), None);
        assert_eq!(s.cpu.usr, None);
        assert_eq!(s.interval_s, 0.0);
        assert!(s.processes.is_empty() && s.cgroups.is_empty());
    }
}
