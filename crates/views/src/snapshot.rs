//! What one screen shows for one sample, as plain data: the header lines' values, the process
//! and cgroup rows. Built from two consecutive samples through the metric registry, so every
//! number here is the number `dump` prints for the same series. `--json-once` serialises it.

use std::collections::HashMap;

use jitterscope_model::derive::Ctx;
use jitterscope_model::metrics::{cgroup, cpu, disk, irq, mem, process, psi, tracer};
use jitterscope_model::registry::MetricDef;
use jitterscope_model::tracers::TracerId;
use jitterscope_model::Sample;
use serde::Serialize;

/// Host CPU time split, percent (of all CPUs for the host line, of one CPU per CPU).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cpu {
    /// `cpu` for the host, `cpu0`… per CPU.
    pub name: String,
    pub usr_pct: Option<f64>,
    pub sys_pct: Option<f64>,
    pub irq_pct: Option<f64>,
    pub softirq_pct: Option<f64>,
    pub iowait_pct: Option<f64>,
    pub steal_pct: Option<f64>,
    pub idle_pct: Option<f64>,
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
    pub runq_p99_usec: Option<f64>,
    /// Run-queue latency maximum, µs.
    pub runq_max_usec: Option<f64>,
    pub ctxt_per_s: Option<f64>,
}

/// Memory: free against the watermarks, cache, slab, dentries.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Mem {
    pub total_bytes: Option<f64>,
    pub free_bytes: Option<f64>,
    pub available_bytes: Option<f64>,
    pub cached_bytes: Option<f64>,
    pub dirty_bytes: Option<f64>,
    pub slab_bytes: Option<f64>,
    pub slab_reclaimable_bytes: Option<f64>,
    /// Sums over all zones, bytes: kswapd wakes below `low`, allocations stall below `min`.
    pub wmark_min_bytes: Option<f64>,
    pub wmark_low_bytes: Option<f64>,
    pub wmark_high_bytes: Option<f64>,
    pub dentries: Option<f64>,
    pub dentries_negative: Option<f64>,
    pub negative_growth_per_s: Option<f64>,
}

/// Page reclaim activity, per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Pag {
    pub scan_kswapd_per_s: Option<f64>,
    pub scan_direct_per_s: Option<f64>,
    pub steal_per_s: Option<f64>,
    pub allocstall_per_s: Option<f64>,
    pub majflt_per_s: Option<f64>,
    pub refault_per_s: Option<f64>,
    /// Direct-reclaim stalls (reclaim tracer).
    pub stalls_per_s: Option<f64>,
    /// Longest stall, µs.
    pub stall_max_usec: Option<f64>,
}

/// Inter-processor interrupts, per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Ipi {
    /// TLB shootdowns received (`TLB` line of /proc/interrupts).
    pub tlb_per_s: Option<f64>,
    /// Function-call IPIs (`CAL`).
    pub cal_per_s: Option<f64>,
    /// Shootdown IPIs sent, as the tlb tracer counted them.
    pub shootdowns_sent_per_s: Option<f64>,
}

/// Pressure stall information over the interval, percent of time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Psi {
    pub cpu_some_pct: Option<f64>,
    pub memory_some_pct: Option<f64>,
    pub memory_full_pct: Option<f64>,
    pub io_some_pct: Option<f64>,
    pub io_full_pct: Option<f64>,
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
    pub cpu_pct: Option<f64>,
    pub sys_pct: Option<f64>,
    pub rss_bytes: Option<f64>,
    /// RSS change over the interval, bytes per second.
    pub rss_growth_bytes_per_s: Option<f64>,
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
    /// The container it is, as its runtime names it (`podman checkout-api (ee295493ada3)`,
    /// `containerd shop/checkout-api-7d9f/api (…)`); absent for cgroups of no container.
    pub owner: Option<String>,
    /// Percent of one CPU.
    pub cpu_pct: Option<f64>,
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
    pub runq_p99_usec: Option<f64>,
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

/// Where one series of a metric goes on the screen: the snapshot being built, the series'
/// placeholder values and its value.
type Route = fn(&mut Builder, &[&str], Option<f64>);

/// The screen's state while a snapshot is built.
struct Builder {
    s: Snapshot,
    cpus: Vec<Cpu>,
    disks: Vec<Disk>,
    procs: HashMap<u32, ProcRow>,
    cgroups: HashMap<String, CgroupRow>,
    nice: Option<f64>,
    /// Page size, bytes (watermarks are in pages).
    page: f64,
}

impl Builder {
    fn cpu(&mut self, id: &str) -> &mut Cpu {
        let name = format!("cpu{id}");
        match self.cpus.iter().position(|c| c.name == name) {
            Some(i) => &mut self.cpus[i],
            None => {
                self.cpus.push(Cpu {
                    name,
                    ..Default::default()
                });
                self.cpus.last_mut().expect("just pushed")
            }
        }
    }

    fn disk(&mut self, name: &str) -> &mut Disk {
        match self.disks.iter().position(|d| d.name == name) {
            Some(i) => &mut self.disks[i],
            None => {
                self.disks.push(Disk {
                    name: name.to_string(),
                    ..Default::default()
                });
                self.disks.last_mut().expect("just pushed")
            }
        }
    }

    /// Applies `f` to the row of the process in the first placeholder (`…<pid>.<comm>…`
    /// metrics), if it is listed.
    fn proc(&mut self, labels: &[&str], f: impl FnOnce(&mut ProcRow)) {
        let pid: Option<u32> = labels.first().and_then(|p| p.parse().ok());
        if let Some(p) = pid.and_then(|pid| self.procs.get_mut(&pid)) {
            f(p);
        }
    }

    fn cgroup(&mut self, labels: &[&str]) -> &mut CgroupRow {
        let path = labels.first().copied().unwrap_or("");
        self.cgroups
            .entry(path.to_string())
            .or_insert_with(|| CgroupRow {
                path: path.to_string(),
                ..Default::default()
            })
    }
}

/// Every metric the screen shows, and where. Evaluated one metric at a time, so no series name
/// is built or matched: a renamed metric is a compile error here, not an empty column.
static ROUTES: &[(&MetricDef, Route)] = &[
    (&cpu::USR_PCT, |b, _, v| b.s.cpu.usr_pct = v),
    (&cpu::NICE_PCT, |b, _, v| b.nice = v),
    (&cpu::SYS_PCT, |b, _, v| b.s.cpu.sys_pct = v),
    (&cpu::IRQ_PCT, |b, _, v| b.s.cpu.irq_pct = v),
    (&cpu::SOFTIRQ_PCT, |b, _, v| b.s.cpu.softirq_pct = v),
    (&cpu::IOWAIT_PCT, |b, _, v| b.s.cpu.iowait_pct = v),
    (&cpu::STEAL_PCT, |b, _, v| b.s.cpu.steal_pct = v),
    (&cpu::IDLE_PCT, |b, _, v| b.s.cpu.idle_pct = v),
    // Niced user time counts as user time on the screen, as in top.
    (&cpu::PER_CPU_USR_PCT, |b, l, v| {
        add(&mut b.cpu(l[0]).usr_pct, v)
    }),
    (&cpu::PER_CPU_NICE_PCT, |b, l, v| {
        add(&mut b.cpu(l[0]).usr_pct, v)
    }),
    (&cpu::PER_CPU_SYS_PCT, |b, l, v| b.cpu(l[0]).sys_pct = v),
    (&cpu::PER_CPU_IRQ_PCT, |b, l, v| b.cpu(l[0]).irq_pct = v),
    (&cpu::PER_CPU_SOFTIRQ_PCT, |b, l, v| {
        b.cpu(l[0]).softirq_pct = v
    }),
    (&cpu::PER_CPU_IOWAIT_PCT, |b, l, v| {
        b.cpu(l[0]).iowait_pct = v
    }),
    (&cpu::PER_CPU_STEAL_PCT, |b, l, v| b.cpu(l[0]).steal_pct = v),
    (&cpu::PER_CPU_IDLE_PCT, |b, l, v| b.cpu(l[0]).idle_pct = v),
    (&cpu::SCHED_CTXT_PER_S, |b, _, v| b.s.load.ctxt_per_s = v),
    (&cpu::SCHED_PROCS_RUNNING, |b, _, v| b.s.load.running = v),
    (&cpu::SCHED_PROCS_BLOCKED, |b, _, v| b.s.load.blocked = v),
    (&cpu::LOAD_AVG1, |b, _, v| b.s.load.avg1 = v),
    (&cpu::LOAD_AVG5, |b, _, v| b.s.load.avg5 = v),
    (&cpu::LOAD_AVG15, |b, _, v| b.s.load.avg15 = v),
    (&process::PROCS_EXITING, |b, _, v| b.s.load.exiting = v),
    (&tracer::RUNQLAT_P99_USEC, |b, _, v| {
        b.s.load.runq_p99_usec = v
    }),
    (&tracer::RUNQLAT_MAX_USEC, |b, _, v| {
        b.s.load.runq_max_usec = v
    }),
    (&mem::TOTAL_BYTES, |b, _, v| b.s.mem.total_bytes = v),
    (&mem::FREE_BYTES, |b, _, v| b.s.mem.free_bytes = v),
    (&mem::AVAILABLE_BYTES, |b, _, v| b.s.mem.available_bytes = v),
    (&mem::CACHED_BYTES, |b, _, v| b.s.mem.cached_bytes = v),
    (&mem::DIRTY_BYTES, |b, _, v| b.s.mem.dirty_bytes = v),
    (&mem::SLAB_BYTES, |b, _, v| b.s.mem.slab_bytes = v),
    (&mem::SLAB_RECLAIMABLE_BYTES, |b, _, v| {
        b.s.mem.slab_reclaimable_bytes = v
    }),
    (&mem::ZONE_MIN_PAGES, |b, _, v| {
        add(&mut b.s.mem.wmark_min_bytes, v.map(|p| p * b.page))
    }),
    (&mem::ZONE_LOW_PAGES, |b, _, v| {
        add(&mut b.s.mem.wmark_low_bytes, v.map(|p| p * b.page))
    }),
    (&mem::ZONE_HIGH_PAGES, |b, _, v| {
        add(&mut b.s.mem.wmark_high_bytes, v.map(|p| p * b.page))
    }),
    (&mem::DENTRY_NR_DENTRY, |b, _, v| b.s.mem.dentries = v),
    (&mem::DENTRY_NR_NEGATIVE, |b, _, v| {
        b.s.mem.dentries_negative = v
    }),
    (&mem::DENTRY_NEGATIVE_GROWTH_PER_S, |b, _, v| {
        b.s.mem.negative_growth_per_s = v
    }),
    (&mem::RECLAIM_PGSCAN_KSWAPD_PER_S, |b, _, v| {
        b.s.pag.scan_kswapd_per_s = v
    }),
    (&mem::RECLAIM_PGSCAN_DIRECT_PER_S, |b, _, v| {
        b.s.pag.scan_direct_per_s = v
    }),
    (&mem::RECLAIM_PGSTEAL_KSWAPD_PER_S, |b, _, v| {
        add(&mut b.s.pag.steal_per_s, v)
    }),
    (&mem::RECLAIM_PGSTEAL_DIRECT_PER_S, |b, _, v| {
        add(&mut b.s.pag.steal_per_s, v)
    }),
    (&mem::RECLAIM_ALLOCSTALL_PER_S, |b, _, v| {
        b.s.pag.allocstall_per_s = v
    }),
    (&mem::RECLAIM_PGMAJFAULT_PER_S, |b, _, v| {
        b.s.pag.majflt_per_s = v
    }),
    (&mem::RECLAIM_REFAULT_FILE_PER_S, |b, _, v| {
        add(&mut b.s.pag.refault_per_s, v)
    }),
    (&mem::RECLAIM_REFAULT_ANON_PER_S, |b, _, v| {
        add(&mut b.s.pag.refault_per_s, v)
    }),
    (&tracer::RECLAIM_STALLS_PER_S, |b, _, v| {
        b.s.pag.stalls_per_s = v
    }),
    (&tracer::RECLAIM_STALL_MAX_USEC, |b, _, v| {
        b.s.pag.stall_max_usec = v
    }),
    (&irq::TLB_PER_S, |b, _, v| b.s.ipi.tlb_per_s = v),
    (&irq::CAL_PER_S, |b, _, v| b.s.ipi.cal_per_s = v),
    (&tracer::TLB_SHOOTDOWN_IPIS_SENT_PER_S, |b, _, v| {
        b.s.ipi.shootdowns_sent_per_s = v
    }),
    (&psi::SOME_PCT, |b, l, v| match l.first().copied() {
        Some("cpu") => b.s.psi.cpu_some_pct = v,
        Some("memory") => b.s.psi.memory_some_pct = v,
        Some("io") => b.s.psi.io_some_pct = v,
        _ => {}
    }),
    (&psi::FULL_PCT, |b, l, v| match l.first().copied() {
        Some("memory") => b.s.psi.memory_full_pct = v,
        Some("io") => b.s.psi.io_full_pct = v,
        _ => {}
    }),
    (&disk::UTIL_PCT, |b, l, v| b.disk(l[0]).util_pct = v),
    (&disk::AWAIT_MS, |b, l, v| b.disk(l[0]).await_ms = v),
    (&disk::READS_PER_S, |b, l, v| b.disk(l[0]).reads_per_s = v),
    (&disk::WRITES_PER_S, |b, l, v| b.disk(l[0]).writes_per_s = v),
    (&disk::READ_BYTES_PER_S, |b, l, v| {
        b.disk(l[0]).read_bytes_per_s = v
    }),
    (&disk::WRITE_BYTES_PER_S, |b, l, v| {
        b.disk(l[0]).write_bytes_per_s = v
    }),
    (&process::PROC_CPU_PCT, |b, l, v| {
        b.proc(l, |p| p.cpu_pct = v)
    }),
    (&process::PROC_SYS_PCT, |b, l, v| {
        b.proc(l, |p| p.sys_pct = v)
    }),
    (&process::PROC_RSS_BYTES, |b, l, v| {
        b.proc(l, |p| p.rss_bytes = v)
    }),
    (&process::PROC_MAJFLT_PER_S, |b, l, v| {
        b.proc(l, |p| p.majflt_per_s = v)
    }),
    (&tracer::MADVISE_PROC_DONTNEED_PER_S, |b, l, v| {
        b.proc(l, |p| add(&mut p.madvise_per_s, v))
    }),
    (&tracer::MADVISE_PROC_FREE_PER_S, |b, l, v| {
        b.proc(l, |p| add(&mut p.madvise_per_s, v))
    }),
    (&tracer::MADVISE_PROC_OTHER_PER_S, |b, l, v| {
        b.proc(l, |p| add(&mut p.madvise_per_s, v))
    }),
    (&tracer::LOOKUPS_PROC_ENOENT_PER_S, |b, l, v| {
        b.proc(l, |p| p.enoent_per_s = v)
    }),
    (&tracer::TLB_PROC_SHOOTDOWN_IPIS_SENT_PER_S, |b, l, v| {
        b.proc(l, |p| p.tlb_ipis_per_s = v)
    }),
    (&cgroup::CPU_USAGE_PCT, |b, l, v| b.cgroup(l).cpu_pct = v),
    (&cgroup::CPU_QUOTA_CORES, |b, l, v| {
        b.cgroup(l).quota_cores = v
    }),
    (&cgroup::CPU_USAGE_OF_QUOTA_PCT, |b, l, v| {
        b.cgroup(l).usage_of_quota_pct = v
    }),
    (&cgroup::CPU_THROTTLED_PCT, |b, l, v| {
        b.cgroup(l).throttled_pct = v
    }),
    (&cgroup::MEMORY_USAGE_BYTES, |b, l, v| {
        b.cgroup(l).mem_bytes = v
    }),
    (&cgroup::MEMORY_LIMIT_BYTES, |b, l, v| {
        b.cgroup(l).mem_limit_bytes = v
    }),
    (&cgroup::MEMORY_USAGE_OF_LIMIT_PCT, |b, l, v| {
        b.cgroup(l).mem_of_limit_pct = v
    }),
    (&tracer::RECLAIM_CGROUP_STALLS_PER_S, |b, l, v| {
        b.cgroup(l).reclaim_stalls_per_s = v
    }),
    (&tracer::RUNQLAT_CGROUP_P99_USEC, |b, l, v| {
        b.cgroup(l).runq_p99_usec = v
    }),
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
        let ctx = Ctx::new(cur, prev);
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
                .map(|(id, _)| id.name().to_string())
                .collect();
        }
        let traced = |id: TracerId| cur.tracers.as_ref().is_some_and(|t| id.in_sample(t));
        let (has_madvise, has_lookups, has_tlb, has_reclaim) = (
            traced(TracerId::MADVISE),
            traced(TracerId::LOOKUPS),
            traced(TracerId::TLB),
            traced(TracerId::RECLAIM),
        );
        let mut b = Builder {
            s,
            cpus: Vec::new(),
            disks: Vec::new(),
            procs: seed_processes(cur, prev, ctx.dt_s),
            cgroups: HashMap::new(),
            nice: None,
            page: cur.host.page_size_bytes.max(1) as f64,
        };
        for (def, route) in ROUTES {
            (def.eval)(&ctx, &mut |labels: &[&str], v: Option<f64>| {
                route(&mut b, labels, v)
            });
        }
        let Builder {
            mut s,
            mut cpus,
            disks,
            mut procs,
            mut cgroups,
            nice,
            ..
        } = b;
        add(&mut s.cpu.usr_pct, nice);
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
        for c in cur.cgroups.iter().flatten() {
            if let Some(row) = cgroups.get_mut(&c.path) {
                if c.identity.container_id.is_some() {
                    row.owner = c.identity.label();
                }
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
        // An ended process (a zombie) has no memory map: its 0 is not a shrink.
        let rss_growth_bytes_per_s = match before.get(&(st.pid, st.starttime_ticks)) {
            Some(&old) if dt_s > 0.0 && !st.exited() => {
                Some((st.rss_pages as f64 - old as f64) * page / dt_s)
            }
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
                rss_growth_bytes_per_s,
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
    fn every_metric_is_routed_once() {
        jitterscope_testkit::assert_unique(ROUTES.iter().map(|(d, _)| d.name), "routed metrics");
    }

    #[test]
    fn an_empty_sample_gives_unknowns_not_zeros() {
        let s = Snapshot::build(&Sample::default(), None);
        assert_eq!(s.cpu.usr_pct, None);
        assert_eq!(s.interval_s, 0.0);
        assert!(s.processes.is_empty() && s.cgroups.is_empty());
    }

    #[test]
    fn a_containers_row_carries_its_runtime_name() {
        use jitterscope_sources::cgroup::{Cgroup, Identity, MemoryStats, Runtime};
        let id = "ee295493ada3f9189f6f47168e5943bd26ddbe117f58b8072a75d74720ceb6d5";
        let mem = Some(MemoryStats {
            usage_bytes: Some(1 << 20),
            ..Default::default()
        });
        let cur = Sample {
            cgroups: Some(vec![
                Cgroup {
                    path: format!("/machine.slice/libpod-{id}.scope"),
                    memory: mem.clone(),
                    identity: Identity {
                        runtime: Runtime::Podman,
                        container_id: Some(id.into()),
                        name: Some("checkout-api".into()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                Cgroup {
                    path: "/system.slice/nginx.service".into(),
                    memory: mem,
                    identity: Identity {
                        runtime: Runtime::Systemd,
                        systemd_unit: Some("nginx.service".into()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let s = Snapshot::build(&cur, None);
        let owners: Vec<_> = s.cgroups.iter().map(|c| c.owner.as_deref()).collect();
        // A unit's path says as much as its name; a container's does not.
        assert_eq!(owners, [Some("podman checkout-api (ee295493ada3)"), None]);
    }
}
