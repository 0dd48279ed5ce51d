//! What leaves the host for Prometheus-family engines: each metric's name in base units, and the
//! bounded set of series exported by default (remote write from `record`, and `/metrics`).
//!
//! Names follow the Prometheus/OpenMetrics rules: base units (seconds, bytes), ratios 0–1
//! instead of percentages, the unit as the name's suffix. The stored series keep their own
//! names (`cpu.sys_pct`); only the export renames and rescales, so one table
//! ([`base_name`]) says how each unit maps and a test holds every definition to it.

use std::collections::HashSet;

use crate::derive::Selection;
use crate::metrics::all;
use crate::metrics::{cgroup, irq, mem, process, tracer};
use crate::registry::{MetricDef, Unit};
use crate::tracers::{Hist, TracerId, Tracers};
use crate::Sample;

/// A metric's exported name and the factor that turns its stored value into that name's unit.
#[derive(Debug, Clone, PartialEq)]
pub struct BaseName {
    /// `jitterscope_cgroup_cpu_throttled_ratio`.
    pub name: String,
    /// Multiply the stored value by this (`0.01` for a percentage, `1e-6` for microseconds).
    pub scale: f64,
}

/// The stored name's unit suffix, what replaces it, and the factor, by unit. Units that are
/// already base units (bytes, seconds, counts, ratios, cores, pages) keep their suffix: pages
/// depend on the kernel's page size, which a query can multiply by the host's
/// `jitterscope_host_page_size_bytes` if it wants bytes.
fn unit_map(u: Unit) -> Option<(&'static str, &'static str, f64)> {
    Some(match u {
        Unit::Percent => ("_pct", "_ratio", 0.01),
        Unit::PerSecond => ("_per_s", "_per_second", 1.0),
        Unit::BytesPerSecond => ("_bytes_per_s", "_bytes_per_second", 1.0),
        Unit::Microseconds => ("_usec", "_seconds", 1e-6),
        Unit::Milliseconds => ("_ms", "_seconds", 1e-3),
        Unit::Nanoseconds => ("_ns", "_seconds", 1e-9),
        Unit::MillisecondsPerSecond => ("_ms_per_s", "_seconds_per_second", 1e-3),
        Unit::Bytes | Unit::Seconds | Unit::Count | Unit::Ratio | Unit::Cores | Unit::Pages => {
            return None
        }
    })
}

/// The exported name of `d`: `jitterscope_` + its template without placeholders, dots as
/// underscores, the unit suffix in base units (`cgroup.<cgroup>.cpu.throttled_pct` →
/// `jitterscope_cgroup_cpu_throttled_ratio`, `runq.latency_p99_usec` →
/// `jitterscope_runq_latency_p99_seconds`).
pub fn base_name(d: &MetricDef) -> BaseName {
    if let Some((_, name)) = LINT_RENAMED.iter().find(|(n, _)| *n == d.name) {
        return BaseName {
            name: name.to_string(),
            scale: 1.0,
        };
    }
    // Runs of underscores as one: `irq.<irq>_per_s` is `irq_per_s`, not `irq__per_s`.
    let plain = crate::openmetrics::plain_name(d, true);
    // Per-CPU series get families of their own: in the host's family (`cpu.sys_pct` and
    // `cpu.<cpu>.sys_pct` both `jitterscope_cpu_sys_ratio`) a sum or an average over the
    // family counted the host once per CPU plus once.
    let plain = match d.name.strip_prefix("cpu.<cpu>.") {
        Some(_) => plain.replacen("jitterscope_cpu_", "jitterscope_percpu_", 1),
        None => plain,
    };
    let plain = plain.trim_end_matches('_');
    let mut b = match unit_map(d.unit) {
        Some((from, to, scale)) => BaseName {
            name: format!("{}{to}", plain.strip_suffix(from).unwrap_or(plain)),
            scale,
        },
        None => BaseName {
            name: plain.to_string(),
            scale: 1.0,
        },
    };
    // A cumulative counter (the recorder's own: samples dropped, source errors) is named as
    // one, so that `rate()` users and linters know it (`_total`, typed counter on `/metrics`).
    if d.kind == crate::registry::Kind::Counter {
        b.name.push_str("_total");
    }
    b
}

/// The OpenMetrics unit of an exported name, from its suffix (`seconds`, `bytes`, `ratio`), as
/// `/metrics` declares it in `# UNIT` and remote write in its metadata.
pub fn unit_of(name: &str) -> Option<&'static str> {
    let name = name.strip_suffix("_total").unwrap_or(name);
    ["seconds", "bytes", "ratio"]
        .into_iter()
        .find(|u| name.strip_suffix(u).is_some_and(|n| n.ends_with('_')))
}

/// A definition's help, which speaks of the stored unit, with the exported unit when they
/// differ.
pub fn help_in_base_units(help: &str, b: &BaseName) -> String {
    if b.scale == 1.0 {
        return help.to_string();
    }
    let unit = [
        ("_seconds_per_second", "seconds per second"),
        ("_seconds_total", "seconds"),
        ("_seconds", "seconds"),
        ("_ratio", "a ratio 0-1"),
    ]
    .iter()
    .find(|(suffix, _)| b.name.ends_with(suffix))
    .map_or("base units", |u| u.1);
    format!("{help} [exposed in {unit}]")
}

/// Stored names whose plain form `promtool check metrics` refuses, and what they are exported
/// as: a gauge must not end in `_count` (a histogram's or summary's sample), and `_d_` reads as
/// an abbreviated unit (days).
const LINT_RENAMED: &[(&str, &str)] = &[
    ("procs.count", "jitterscope_processes"),
    ("procs.d_state", "jitterscope_procs_uninterruptible"),
];

/// The counter a per-second rate is also exported as on `/metrics`: its name with `_total` for
/// `_per_second` (`jitterscope_sched_ctxt_total`, `jitterscope_disk_read_bytes_total`,
/// `jitterscope_cgroup_cpu_throttled_seconds_total`) and the factor into that unit. The
/// running sum of each second's rate times its span, so `rate()` and `increase()` work over any
/// range. `None` for metrics that are not rates per second.
pub fn counter_of(d: &MetricDef) -> Option<BaseName> {
    if !matches!(
        d.unit,
        Unit::PerSecond | Unit::BytesPerSecond | Unit::MillisecondsPerSecond
    ) || d.kind == crate::registry::Kind::Counter
    {
        return None;
    }
    let b = base_name(d);
    let stem = b.name.strip_suffix("_per_second")?;
    Some(BaseName {
        name: format!("{stem}_total"),
        scale: b.scale,
    })
}

/// Whether `/metrics` gives the series of `d` their largest and smallest value over the
/// scrape interval (`_max`, `_min`): host, cgroup, device and interface series, whose number
/// the host bounds; not per process or per CPU, whose number grows with the host, nor raw
/// counters, which only grow.
pub fn windowed(d: &MetricDef) -> bool {
    d.kind != crate::registry::Kind::Counter
        && !["<pid>", "<comm>", "<cpu>"]
            .iter()
            .any(|p| d.name.contains(p))
}

/// A latency histogram `/metrics` exposes from a tracer's log2 buckets. Each one reads its
/// own part of the sample ([`HistDef::each`]), so that the exposition finds a histogram's
/// values by its definition, never by its place in a table.
pub struct HistDef {
    /// Family name (`jitterscope_…_seconds`).
    pub name: &'static str,
    /// The label it is split by (`None`: one host-wide histogram).
    pub label: Option<&'static str>,
    /// Help text.
    pub help: &'static str,
    /// The tracer whose part of the sample holds it.
    pub tracer: TracerId,
    /// Calls `f` with each histogram of one interval and its label's value ("" without one).
    pub each: fn(&Tracers, &mut HistSink),
}

/// Receives a [`HistDef`]'s histograms: the label's value and the histogram.
pub type HistSink<'a> = dyn FnMut(&str, &Hist) + 'a;

impl std::fmt::Debug for HistDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Run-queue latency, host-wide.
pub static RUNQLAT_SECONDS: HistDef = HistDef {
    name: "jitterscope_runqlat_seconds",
    label: None,
    help: "Run-queue latency, wake-up (or preemption) to running, host-wide (runqlat tracer)",
    tracer: TracerId::RUNQLAT,
    each: |t, f| {
        if let Some(r) = &t.runqlat {
            f("", &r.host);
        }
    },
};

/// Run-queue latency per CPU cgroup.
pub static RUNQLAT_CGROUP_SECONDS: HistDef = HistDef {
    name: "jitterscope_runqlat_cgroup_seconds",
    label: Some("cgroup"),
    help: "Run-queue latency of the tasks of each CPU cgroup (runqlat tracer)",
    tracer: TracerId::RUNQLAT,
    each: |t, f| {
        for c in t.runqlat.iter().flat_map(|r| &r.cgroups) {
            f(&c.cgroup, &c.latency);
        }
    },
};

/// Direct-reclaim stalls, host-wide: every process's, summed.
pub static RECLAIM_STALL_SECONDS: HistDef = HistDef {
    name: "jitterscope_reclaim_stall_seconds",
    label: None,
    help: "Direct-reclaim stalls, global and memory-cgroup, host-wide (reclaim tracer)",
    tracer: TracerId::RECLAIM,
    each: |t, f| {
        for p in t.reclaim.iter().flat_map(|r| &r.procs) {
            f("", &p.latency);
        }
    },
};

/// Direct-reclaim stalls per memory cgroup.
pub static RECLAIM_CGROUP_STALL_SECONDS: HistDef = HistDef {
    name: "jitterscope_reclaim_cgroup_stall_seconds",
    label: Some("cgroup"),
    help: "Direct-reclaim stalls charged to each memory cgroup (reclaim tracer)",
    tracer: TracerId::RECLAIM,
    each: |t, f| {
        for c in t.reclaim.iter().flat_map(|r| &r.cgroups) {
            f(&c.cgroup, &c.latency);
        }
    },
};

/// The histograms `/metrics` exposes, in the order it lists them.
pub static HISTOGRAMS: &[&HistDef] = &[
    &RUNQLAT_SECONDS,
    &RUNQLAT_CGROUP_SECONDS,
    &RECLAIM_STALL_SECONDS,
    &RECLAIM_CGROUP_STALL_SECONDS,
];

/// Families left out of the exported set: the raw per-field tables that repeat curated
/// metrics or grow with the kernel's tables (`vmstat.<field>`, `meminfo.<field>`,
/// `cgroup.<cgroup>.memory.stat.<field>`, buddyinfo, per-slab-cache, per-IRQ, look-up path
/// patterns). They stay in the store, where `dump` and the API read them.
static LEFT_OUT: &[&MetricDef] = &[
    &mem::VMSTAT_FIELD,
    &mem::VMSTAT_FIELD_PER_S,
    &mem::MEMINFO_FIELD,
    &mem::MEMINFO_FIELD_BYTES,
    &mem::BUDDY_FREE_BLOCKS,
    &mem::SLAB_CACHE_TOTAL_BYTES,
    &mem::SLAB_CACHE_ACTIVE_OBJS,
    &mem::SLAB_CACHE_OBJS_GROWTH_PER_S,
    &irq::IRQ_PER_S,
    &irq::SOFTIRQ_PER_S,
    &tracer::LOOKUPS_PATTERN_SAMPLES,
    &cgroup::MEMORY_STAT,
];

/// The metrics exported: the registry less [`LEFT_OUT`].
pub fn exposed() -> Vec<&'static MetricDef> {
    all()
        .iter()
        .filter(|d| !LEFT_OUT.contains(d))
        .copied()
        .collect()
}

/// The default export set, prepared once: every host series and every cgroup's (their
/// number is bounded by the host), and per-process series only for the `top` processes by
/// CPU and the `top` by resident memory, with hysteresis ([`Keeper`]), so a host of 10,000
/// short-lived processes exports tens of process series, not tens of thousands, and the same
/// ones from second to second.
pub struct Bounded {
    sel: Selection,
    top: usize,
    /// Which processes keep their series from sample to sample (see [`Keeper`]).
    keeper: std::sync::Mutex<Keeper>,
}

/// How long a process keeps its series after it last ranked in the top N.
pub const TOP_HOLD_NS: i64 = 60 * 1_000_000_000;

/// How many processes may hold series at once, per process counted in the top N: room for the
/// held ones beside those ranking now.
pub const TOP_ROOM: usize = 2;

/// The top N with hysteresis, so that the exported set of processes is stable. The top N of
/// each sample alone churns on a busy host: hundreds of shells trade places every second and
/// the fork storm's short processes rank for the one second they live, and each process
/// that comes back into the top starts a new series at the receiver (issue 45's budget is
/// 1,000 new series an hour). So a process enters when it ranks in two samples in a row (a
/// one-second burst does not), and leaves [`TOP_HOLD_NS`] after it last ranked, when it
/// exits, or when room is needed (at most [`TOP_ROOM`] x 2N held; the one out of the top
/// longest goes first).
#[derive(Debug, Default)]
pub struct Keeper {
    /// Kept pids and when each last ranked.
    kept: std::collections::HashMap<u32, i64>,
    /// Pids that ranked in the last sample and are not kept yet.
    ranked_once: HashSet<u32>,
    last_ts: Option<i64>,
}

impl Keeper {
    /// The pids whose series go out for the sample at `ts`, given the sample's top N by CPU
    /// and by RSS (`ranked`), whether a pid is still alive, and the room (`limit`).
    pub fn keep(
        &mut self,
        ts: i64,
        ranked: &HashSet<u32>,
        alive: impl Fn(u32) -> bool,
        limit: usize,
    ) -> HashSet<u32> {
        // A sample not after the last (a window read again, a store that went back): the
        // history says nothing of it.
        if self.last_ts.is_some_and(|t| ts <= t) {
            *self = Keeper::default();
        }
        self.last_ts = Some(ts);
        for &pid in ranked {
            if self.kept.contains_key(&pid) || self.ranked_once.contains(&pid) {
                self.kept.insert(pid, ts);
            }
        }
        self.ranked_once = ranked
            .iter()
            .filter(|p| !self.kept.contains_key(p))
            .copied()
            .collect();
        self.kept
            .retain(|&pid, &mut last| alive(pid) && ts - last <= TOP_HOLD_NS);
        if self.kept.len() > limit {
            let mut by_last: Vec<(i64, u32)> = self.kept.iter().map(|(&p, &t)| (t, p)).collect();
            by_last.sort_by(|a, b| b.cmp(a));
            for (_, pid) in by_last.drain(limit..) {
                self.kept.remove(&pid);
            }
        }
        self.kept.keys().copied().collect()
    }
}

impl Bounded {
    /// The set over [`exposed`], processes limited to `top` by CPU plus `top` by RSS.
    pub fn new(top: usize) -> Self {
        Self::globs(&[], top)
    }

    /// The series of the exported metrics that `globs` match (`dump --select` syntax), processes
    /// limited as in [`Bounded::new`].
    pub fn globs(globs: &[crate::glob::Pattern], top: usize) -> Self {
        Bounded {
            sel: Selection::new(&exposed(), globs),
            top,
            keeper: Default::default(),
        }
    }

    /// The sample parts the set reads: the processes too whenever it keeps a top N, which is
    /// chosen from the process table whatever metrics are selected.
    pub fn parts(&self) -> crate::codec::Parts {
        let p = self.sel.parts();
        if self.top > 0 {
            p.union(crate::codec::Parts::PROCESSES)
        } else {
            p
        }
    }

    /// Hands each kept series of `cur` (rates against `prev`) to `f`: metric, placeholder
    /// values, value (unknown values are left out). Samples are to come in time order: which
    /// processes are kept depends on the ones before (see [`Keeper`]).
    pub fn for_each(
        &self,
        cur: &Sample,
        prev: Option<&Sample>,
        mut f: impl FnMut(&'static MetricDef, &[&str], f64),
    ) {
        let keep = match self.top {
            0 => HashSet::new(),
            top => {
                let ranked = top_pids(cur, prev, top);
                let mut k = self.keeper.lock().unwrap_or_else(|e| e.into_inner());
                // Only the kept and ranked pids are asked about: a set of every live process
                // would be built each second for tens of lookups.
                let alive: HashSet<u32> = cur
                    .processes
                    .iter()
                    .flatten()
                    .filter(|p| {
                        let pid = p.stat.pid;
                        !p.stat.exited() && (k.kept.contains_key(&pid) || ranked.contains(&pid))
                    })
                    .map(|p| p.stat.pid)
                    .collect();
                k.keep(
                    cur.ts_ns,
                    &ranked,
                    |pid| alive.contains(&pid),
                    TOP_ROOM * 2 * top,
                )
            }
        };
        self.sel.for_each_labels(
            cur,
            prev,
            |def, labels| kept(&keep, def, labels),
            |def, labels, value| {
                let Some(v) = value else { return };
                match comm_index(def) {
                    Some(i)
                        if labels
                            .get(i)
                            .is_some_and(|c| stable_comm(c).len() < c.len()) =>
                    {
                        let mut folded = labels.to_vec();
                        folded[i] = stable_comm(folded[i]);
                        f(def, &folded, v)
                    }
                    _ => f(def, labels, v),
                }
            },
        );
    }
}

/// A process name as exported: a kernel worker's without the work item it runs now.
/// `kworker/u8:5-writeback` renames itself per work item (`-events_unbound`, `-flush-8:0`,
/// …); as a label each name started a new series, 24 of 70 per-process series on one host.
/// The pid and the worker's own name (`kworker/u8:5`) stay, so the series does too.
pub fn stable_comm(comm: &str) -> &str {
    const WORKER: &str = "kworker/";
    match comm.strip_prefix(WORKER).and_then(|r| r.find('-')) {
        // `-` is one byte: the cut is on a character boundary.
        Some(i) => &comm[..WORKER.len() + i],
        None => comm,
    }
}

/// Where a metric's template has its `<comm>`, if it has one.
fn comm_index(d: &MetricDef) -> Option<usize> {
    let at = d.name.find("<comm>")?;
    Some(d.name[..at].matches('<').count())
}

/// Whether a series is kept: any series without a pid, an OOM kill's (its process is gone, so
/// it is never in a top N, and kills are few), and those of the `keep` pids.
fn kept(keep: &HashSet<u32>, def: &MetricDef, labels: &[&str]) -> bool {
    if std::ptr::eq(def, &crate::metrics::mem::OOM_KILL_RSS_BYTES) {
        return true;
    }
    match pid_index(def) {
        None => true,
        Some(i) => labels
            .get(i)
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|pid| keep.contains(&pid)),
    }
}

/// Where a metric's template has its `<pid>`, if it has one.
pub fn pid_index(d: &MetricDef) -> Option<usize> {
    // Asked for every exported series of every sample: no allocation (`placeholders()` was
    // the sender's largest cost).
    let at = d.name.find("<pid>")?;
    Some(d.name[..at].matches('<').count())
}

/// The pids of the `top` processes by CPU and the `top` by RSS (ties broken by pid, so the
/// choice is the same on every read of the sample).
pub fn top_pids(cur: &Sample, prev: Option<&Sample>, top: usize) -> HashSet<u32> {
    let mut keep = HashSet::new();
    if top == 0 {
        return keep;
    }
    let sel = Selection::of(&[
        crate::registry::Select::all(&process::PROC_CPU_PCT),
        crate::registry::Select::all(&process::PROC_RSS_BYTES),
    ]);
    let mut cpu: Vec<(f64, u32)> = Vec::new();
    let mut rss: Vec<(f64, u32)> = Vec::new();
    sel.for_each_labels(
        cur,
        prev,
        |_, _| true,
        |def, labels, value| {
            let (Some(v), Some(pid)) = (value, labels.first().and_then(|p| p.parse().ok())) else {
                return;
            };
            if def == &process::PROC_CPU_PCT {
                cpu.push((v, pid));
            } else {
                rss.push((v, pid));
            }
        },
    );
    for mut list in [cpu, rss] {
        list.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        keep.extend(list.iter().take(top).map(|x| x.1));
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{cgroup, cpu, recorder};

    #[test]
    fn the_top_n_is_entered_in_two_samples_and_left_after_a_minute() {
        const S: i64 = 1_000_000_000;
        let set = |v: &[u32]| v.iter().copied().collect::<HashSet<u32>>();
        let sorted = |h: HashSet<u32>| {
            let mut v: Vec<u32> = h.into_iter().collect();
            v.sort();
            v
        };
        let mut k = Keeper::default();
        let all = |_| true;
        // A one-second burst does not enter.
        assert!(k.keep(S, &set(&[1, 2]), all, 10).is_empty());
        assert_eq!(sorted(k.keep(2 * S, &set(&[1, 3]), all, 10)), [1]);
        // Out of the top, held; ranked twice, in.
        assert_eq!(sorted(k.keep(3 * S, &set(&[3, 4]), all, 10)), [1, 3]);
        // A minute after it last ranked, out; 3 ranked a second later and stays.
        assert_eq!(sorted(k.keep(62 * S, &set(&[]), all, 10)), [1, 3]);
        assert_eq!(sorted(k.keep(63 * S, &set(&[]), all, 10)), [3]);
        assert!(k.keep(64 * S, &set(&[]), all, 10).is_empty());
        // An exited process leaves at once.
        k.keep(65 * S, &set(&[5, 6]), all, 10);
        assert_eq!(sorted(k.keep(66 * S, &set(&[5, 6]), |p| p != 6, 10)), [5]);
        // Out of room, the one out of the top the longest goes first.
        k.keep(67 * S, &set(&[7]), all, 2);
        assert_eq!(sorted(k.keep(68 * S, &set(&[7, 8]), all, 2)), [5, 7]);
        k.keep(69 * S, &set(&[8]), all, 2);
        assert_eq!(sorted(k.keep(70 * S, &set(&[8]), all, 2)), [7, 8]);
        // A sample from before the last starts over.
        assert!(k.keep(10 * S, &set(&[8]), all, 2).is_empty());
    }

    #[test]
    fn units_come_from_whole_suffixes() {
        assert_eq!(unit_of("jitterscope_cpu_seconds_total"), Some("seconds"));
        assert_eq!(
            unit_of("jitterscope_cgroup_cpu_throttled_ratio"),
            Some("ratio")
        );
        assert_eq!(unit_of("jitterscope_mem_cached_bytes"), Some("bytes"));
        assert_eq!(unit_of("jitterscope_disk_read_bytes_per_second"), None);
        assert_eq!(unit_of("jitterscope_gigabytes"), None);
        assert_eq!(unit_of("bytes"), None);
        assert_eq!(unit_of(""), None);
    }

    #[test]
    fn the_pid_is_found_where_the_template_has_it() {
        for d in all() {
            assert_eq!(
                pid_index(d),
                d.placeholders().iter().position(|p| *p == "pid"),
                "{}",
                d.name
            );
        }
    }

    #[test]
    fn names_are_in_base_units() {
        let cases: [(&MetricDef, &str, f64); 5] = [
            (
                &cgroup::CPU_THROTTLED_PCT,
                "jitterscope_cgroup_cpu_throttled_ratio",
                0.01,
            ),
            (
                &cgroup::CPU_THROTTLED_MS_PER_S,
                "jitterscope_cgroup_cpu_throttled_seconds_per_second",
                1e-3,
            ),
            (
                &cpu::SCHED_CTXT_PER_S,
                "jitterscope_sched_ctxt_per_second",
                1.0,
            ),
            (
                &recorder::SELF_COLLECT_MS,
                "jitterscope_self_collect_seconds",
                1e-3,
            ),
            (&irq::IRQ_PER_S, "jitterscope_irq_per_second", 1.0),
        ];
        for (d, name, scale) in cases {
            assert_eq!(
                base_name(d),
                BaseName {
                    name: name.into(),
                    scale
                },
                "{}",
                d.name
            );
        }
    }

    #[test]
    fn every_name_is_a_valid_prometheus_name_in_base_units() {
        for d in all() {
            let b = base_name(d);
            let mut chars = b.name.chars();
            assert!(
                chars
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{}: {}",
                d.name,
                b.name
            );
            for bad in ["_pct", "_usec", "_ms", "_ns", "_per_s", "__"] {
                assert!(
                    !b.name.ends_with(bad) && !b.name.contains("__"),
                    "{}: {} ends with {bad}",
                    d.name,
                    b.name
                );
            }
            // A cumulative counter's name ends in `_total`, and nothing else's does.
            assert_eq!(
                b.name.ends_with("_total"),
                d.kind == crate::registry::Kind::Counter,
                "{}",
                b.name
            );
        }
    }

    #[test]
    fn kernel_workers_keep_one_name() {
        for (comm, want) in [
            ("kworker/u8:5-writeback", "kworker/u8:5"),
            ("kworker/u8:5-events_unbound", "kworker/u8:5"),
            ("kworker/1:1H-kblockd", "kworker/1:1H"),
            ("kworker/0:2", "kworker/0:2"),
            ("kworker/", "kworker/"),
            ("nginx-worker", "nginx-worker"),
            ("python3", "python3"),
            ("kworker/ü-x", "kworker/ü"),
        ] {
            assert_eq!(stable_comm(comm), want, "{comm}");
        }
    }

    /// A kernel worker's series keeps one name as it renames itself per work item, and the
    /// other processes' names are left alone.
    #[test]
    fn exported_process_series_fold_kernel_worker_names() {
        use jitterscope_sources::process::{PidStat, Process};
        let proc = |pid: u32, comm: &str, rss_pages: u64| Process {
            stat: PidStat {
                pid,
                comm: comm.into(),
                state: 'S',
                rss_pages,
                starttime_ticks: 100 + u64::from(pid),
                ..Default::default()
            },
            ..Default::default()
        };
        let sample = |s: i64, worker: &str| {
            let mut x = Sample::new(
                s * 1_000_000_000,
                s as u64 * 1_000_000_000,
                1_000_000_000,
                crate::sample::HostInfo {
                    page_size_bytes: 4096,
                    ..Default::default()
                },
            );
            x.processes = Some(vec![proc(7, worker, 10), proc(8, "nginx-worker", 20)]);
            x
        };
        let b = Bounded::new(5);
        let mut comms = std::collections::BTreeSet::new();
        let (s1, s2) = (
            sample(1, "kworker/u8:5-writeback"),
            sample(2, "kworker/u8:5-events"),
        );
        for (cur, prev) in [(&s1, None), (&s2, Some(&s1))] {
            b.for_each(cur, prev, |def, labels, _| {
                if let Some(i) = comm_index(def) {
                    comms.insert(labels[i].to_string());
                }
            });
        }
        assert_eq!(
            comms.into_iter().collect::<Vec<_>>(),
            ["kworker/u8:5", "nginx-worker"]
        );
    }

    #[test]
    fn a_family_holds_series_of_one_shape() {
        // The same labels in every series of a family: the host's CPU and each CPU's are apart.
        let mut shapes: std::collections::HashMap<String, (usize, &str)> = Default::default();
        for d in exposed() {
            let n = d.placeholders().len();
            if let Some((m, other)) = shapes.insert(base_name(d).name, (n, d.name)) {
                assert_eq!(m, n, "{} and {} share a family", other, d.name);
            }
        }
        assert_eq!(
            base_name(crate::metrics::find("cpu.<cpu>.sys_pct").unwrap()).name,
            "jitterscope_percpu_sys_ratio"
        );
    }

    #[test]
    fn every_exposed_name_is_its_own() {
        // A family name may mean one thing only: a counter, a window or a histogram that took
        // the name of another metric would merge two families in Prometheus.
        let mut names: std::collections::HashMap<String, &str> = Default::default();
        let mut claim = |n: String, what: &'static str| {
            if let Some(prev) = names.insert(n.clone(), what) {
                assert!(
                    prev == "gauge" && what == "gauge",
                    "{n} is both a {prev} and a {what}"
                );
            }
        };
        for d in exposed() {
            claim(base_name(d).name, "gauge");
            if let Some(c) = counter_of(d) {
                claim(c.name.clone(), "counter");
                claim(
                    c.name.trim_end_matches("_total").to_string(),
                    "counter family",
                );
            }
            if windowed(d) {
                claim(format!("{}_max", base_name(d).name), "max");
                claim(format!("{}_min", base_name(d).name), "min");
            }
        }
        for h in HISTOGRAMS {
            for suffix in ["", "_bucket", "_sum", "_count"] {
                claim(format!("{}{suffix}", h.name), "histogram");
            }
        }
        assert_eq!(
            counter_of(&cgroup::CPU_THROTTLED_MS_PER_S).map(|c| c.name),
            Some("jitterscope_cgroup_cpu_throttled_seconds_total".into())
        );
        assert_eq!(
            counter_of(&cpu::SCHED_CTXT_PER_S).map(|c| c.name),
            Some("jitterscope_sched_ctxt_total".into())
        );
        assert!(counter_of(&cgroup::CPU_THROTTLED_PCT).is_none());
        // The kernel's own cumulative counters, named as node_exporter and cAdvisor name theirs.
        for (d, name, scale) in [
            (&cpu::SECONDS, "jitterscope_cpu_seconds_total", 1.0),
            (
                &crate::metrics::psi::SOME_USEC,
                "jitterscope_psi_some_seconds_total",
                1e-6,
            ),
            (
                &cgroup::CPU_USAGE_NS,
                "jitterscope_cgroup_cpu_usage_seconds_total",
                1e-9,
            ),
            (
                &process::PROC_CPU_SECONDS,
                "jitterscope_proc_cpu_seconds_total",
                1.0,
            ),
        ] {
            let b = base_name(d);
            assert_eq!((b.name.as_str(), b.scale), (name, scale), "{}", d.name);
            assert!(counter_of(d).is_none() && !windowed(d), "{}", d.name);
        }
        assert!(windowed(&cgroup::CPU_THROTTLED_PCT));
        assert!(!windowed(&process::PROC_CPU_PCT));
    }

    #[test]
    fn metrics_sharing_a_name_differ_in_labels_and_agree_in_unit() {
        let mut seen: std::collections::HashMap<String, Vec<&MetricDef>> = Default::default();
        for d in all() {
            seen.entry(base_name(d).name).or_default().push(d);
        }
        for (name, defs) in seen {
            let mut keys: Vec<Vec<&str>> = defs.iter().map(|d| d.placeholders()).collect();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), defs.len(), "{name}: {defs:?} share labels");
            let scales: Vec<f64> = defs.iter().map(|d| base_name(d).scale).collect();
            assert!(scales.windows(2).all(|w| w[0] == w[1]), "{name}: {defs:?}");
        }
    }
}
