//! What the in-kernel tracers saw in one interval.
//!
//! The BPF programs keep cumulative counters; the tracer collector turns them into counts for the
//! interval (so a process that started and exited within one second is still counted), keeps
//! only the entries that moved, and stamps the span they cover. Per-second rates are those counts
//! over [`Tracers::span_ns`]. Entries whose key did not fit a bounded kernel map are folded into
//! one entry with `pid` [`OTHER_PID`] (or `cgroup`/`function` `"(other)"`); events that could
//! not be recorded at all count in each tracer's `dropped`.

use serde::{Deserialize, Serialize};

/// The pid of the entry that collects events of processes that did not fit the kernel map.
pub const OTHER_PID: u32 = u32::MAX;

/// Slots of a [`Hist`]: slot `i` counts latencies in `[2^i, 2^(i+1))` microseconds (slot 0 also
/// holds everything under 1 µs).
pub const HIST_SLOTS: usize = 32;

/// Whether a counter is zero: per-process tracer entries leave their zero counters out of the
/// store (they decode as 0 through `#[serde(default)]`). On a busy host the TLB tracer has an
/// entry for every process that switched context, moving only its task-switch count, and its
/// thirteen named fields made it 55 KB of every raw sample.
fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A log2 latency histogram of one interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Hist {
    /// Counts per log2-microsecond slot, trailing empty slots trimmed.
    pub slots: Vec<u64>,
    /// Events.
    pub count: u64,
    /// Sum of latencies, ns.
    pub sum_ns: u64,
    /// Largest latency of the interval, ns (0 when not known).
    pub max_ns: u64,
}

impl Hist {
    /// Adds `other`'s events: counts slot by slot, and the larger maximum.
    pub fn merge(&mut self, other: &Hist) {
        if self.slots.len() < other.slots.len() {
            self.slots.resize(other.slots.len(), 0);
        }
        for (a, b) in self.slots.iter_mut().zip(&other.slots) {
            *a = a.saturating_add(*b);
        }
        self.count = self.count.saturating_add(other.count);
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// The latency below which a fraction `q` (0–1) of the events fall, in microseconds, read
    /// from the histogram: the upper edge of the slot holding that rank, capped at the maximum
    /// seen. `None` for an empty histogram.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        let total: u64 = self.slots.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &n) in self.slots.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let upper = (1u64 << (i + 1).min(63)) as f64;
                let max_us = self.max_ns as f64 / 1000.0;
                return Some(if self.max_ns > 0 {
                    upper.min(max_us.max(1.0))
                } else {
                    upper
                });
            }
        }
        None
    }

    /// Mean latency, microseconds.
    pub fn mean_us(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64 / 1000.0)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Direct-reclaim stalls of one process or one memory cgroup.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReclaimStat {
    /// Process id (0 for a cgroup entry; [`OTHER_PID`] for the overflow entry).
    pub pid: u32,
    /// Command name when the process first stalled (empty for a cgroup entry).
    pub comm: String,
    /// Memory cgroup path (`/` root; empty when unknown).
    pub cgroup: String,
    /// Global direct-reclaim stalls (try_to_free_pages).
    #[serde(skip_serializing_if = "is_zero")]
    pub direct_stalls: u64,
    /// Memory-cgroup reclaim stalls (try_to_free_mem_cgroup_pages: the cgroup hit its limit).
    #[serde(skip_serializing_if = "is_zero")]
    pub memcg_stalls: u64,
    /// Pages the stalls reclaimed.
    #[serde(skip_serializing_if = "is_zero")]
    pub reclaimed_pages: u64,
    /// Stall latency, both kinds.
    pub latency: Hist,
}

/// Reclaim tracer: who was made to reclaim memory, and for how long.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Reclaim {
    /// Per process.
    pub procs: Vec<ReclaimStat>,
    /// Per memory cgroup.
    pub cgroups: Vec<ReclaimStat>,
    /// Requests to wake kswapd (mm_vmscan_wakeup_kswapd).
    pub kswapd_wakeups: u64,
    /// kswapd wake-ups (mm_vmscan_kswapd_wake).
    pub kswapd_wakes: u64,
    /// Events not recorded (kernel maps full).
    pub dropped: u64,
}

/// One shrinker, by its scan function.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShrinkerStat {
    /// The scan function (`super_cache_scan`...), resolved through kallsyms; the address in hex
    /// when unresolved; `(other)` for the overflow entry.
    pub function: String,
    /// do_shrink_slab calls that got past the count (mm_shrink_slab_start/end pairs).
    pub calls: u64,
    /// Calls that freed nothing.
    pub zero_freed: u64,
    /// Objects the kernel asked it to scan.
    pub to_scan: u64,
    /// Objects it scanned.
    pub scanned: u64,
    /// Objects it freed.
    pub freed: u64,
    /// Sum over calls of the freeable objects it reported.
    pub cache_items: u64,
    /// Call latency.
    pub latency: Hist,
}

/// Shrinker tracer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Shrinkers {
    /// Per shrinker function.
    pub shrinkers: Vec<ShrinkerStat>,
    /// Events not recorded.
    pub dropped: u64,
}

/// TLB flushes of one process, by reason (tlb:tlb_flush), and the shootdown IPIs it sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TlbProc {
    /// Process id ([`OTHER_PID`] for the overflow entry).
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// CPU cgroup path.
    pub cgroup: String,
    /// Reason 0: flush on task switch. Only in stores written before these were counted
    /// host-wide ([`Tlb::task_switch`]); 0 since.
    #[serde(skip_serializing_if = "is_zero")]
    pub task_switch: u64,
    /// Reason 1: remote shootdown (this CPU flushed because another asked).
    #[serde(skip_serializing_if = "is_zero")]
    pub remote_shootdown: u64,
    /// Reason 2: local shootdown.
    #[serde(skip_serializing_if = "is_zero")]
    pub local_shootdown: u64,
    /// Reason 3: local mm shootdown.
    #[serde(skip_serializing_if = "is_zero")]
    pub local_mm_shootdown: u64,
    /// Reason 4: remote IPI send.
    #[serde(skip_serializing_if = "is_zero")]
    pub remote_send_ipi: u64,
    /// Reason 5 (remote, wrong CPU) and any newer reason.
    #[serde(skip_serializing_if = "is_zero")]
    pub other: u64,
    /// Pages of ranged flushes.
    #[serde(skip_serializing_if = "is_zero")]
    pub pages: u64,
    /// Full flushes (pages = -1).
    #[serde(skip_serializing_if = "is_zero")]
    pub full_flushes: u64,
    /// TLB-shootdown requests it sent to other CPUs: flush_tlb_func queued per target CPU
    /// (csd:csd_queue_cpu, 6.6+), or IPIs with that callback (ipi:ipi_send_cpumask, 6.3–6.5).
    #[serde(skip_serializing_if = "is_zero")]
    pub ipis_sent: u64,
    /// CPUs those IPIs targeted.
    #[serde(skip_serializing_if = "is_zero")]
    pub ipi_targets: u64,
}

impl TlbProc {
    /// Flushes of every reason but a task switch (which older stores counted per process too).
    pub fn flushes(&self) -> u64 {
        self.remote_shootdown
            + self.local_shootdown
            + self.local_mm_shootdown
            + self.remote_send_ipi
            + self.other
    }
}

/// TLB tracer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tlb {
    /// Per process.
    pub procs: Vec<TlbProc>,
    /// Whether shootdown senders are known: from the IPI events (6.3+, flush_tlb_func found in
    /// kallsyms), else from each sender's TLB_REMOTE_SEND_IPI flushes (one per flush).
    pub ipis_attributed: bool,
    /// Events not recorded.
    pub dropped: u64,
    /// Flushes on task switch (reason 0), all CPUs. Stores written before they were counted
    /// host-wide have them per process instead.
    #[serde(skip_serializing_if = "is_zero")]
    pub task_switch: u64,
}

impl Tlb {
    /// Flushes on task switch, all CPUs, in stores of either kind.
    pub fn task_switches(&self) -> u64 {
        if self.task_switch > 0 {
            return self.task_switch;
        }
        self.procs.iter().map(|p| p.task_switch).sum()
    }
}

/// madvise() calls of one process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MadviseProc {
    /// Process id ([`OTHER_PID`] for the overflow entry).
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// CPU cgroup path.
    pub cgroup: String,
    /// MADV_DONTNEED (4) calls.
    #[serde(skip_serializing_if = "is_zero")]
    pub dontneed_calls: u64,
    /// Bytes passed to MADV_DONTNEED.
    #[serde(skip_serializing_if = "is_zero")]
    pub dontneed_bytes: u64,
    /// MADV_FREE (8) calls.
    #[serde(skip_serializing_if = "is_zero")]
    pub free_calls: u64,
    /// Bytes passed to MADV_FREE.
    #[serde(skip_serializing_if = "is_zero")]
    pub free_bytes: u64,
    /// Calls with any other advice.
    #[serde(skip_serializing_if = "is_zero")]
    pub other_calls: u64,
    /// Bytes passed with any other advice.
    #[serde(skip_serializing_if = "is_zero")]
    pub other_bytes: u64,
}

/// madvise tracer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Madvise {
    /// Per process.
    pub procs: Vec<MadviseProc>,
    /// Events not recorded.
    pub dropped: u64,
}

/// Run-queue latency of one CPU cgroup.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunqCgroup {
    /// CPU cgroup path (`(other)` for the overflow entry, empty when unknown).
    pub cgroup: String,
    /// Wake-up (or preemption) to running.
    pub latency: Hist,
}

/// Run-queue latency tracer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Runqlat {
    /// The whole host.
    pub host: Hist,
    /// Per CPU cgroup (empty when the kernel lacks BTF-typed tracepoints: the classic ones
    /// cannot name the woken task's cgroup).
    pub cgroups: Vec<RunqCgroup>,
    /// Events not recorded.
    pub dropped: u64,
}

/// Path look-ups of one process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LookupProc {
    /// Process id ([`OTHER_PID`] for the overflow entry).
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// CPU cgroup path.
    pub cgroup: String,
    /// stat, lstat, newfstatat, statx calls.
    #[serde(skip_serializing_if = "is_zero")]
    pub stat_calls: u64,
    /// ... that failed with ENOENT.
    #[serde(skip_serializing_if = "is_zero")]
    pub stat_enoent: u64,
    /// access, faccessat, faccessat2 calls.
    #[serde(skip_serializing_if = "is_zero")]
    pub access_calls: u64,
    /// ... that failed with ENOENT.
    #[serde(skip_serializing_if = "is_zero")]
    pub access_enoent: u64,
    /// open, openat, openat2 calls.
    #[serde(skip_serializing_if = "is_zero")]
    pub open_calls: u64,
    /// ... that failed with ENOENT.
    #[serde(skip_serializing_if = "is_zero")]
    pub open_enoent: u64,
}

impl LookupProc {
    /// Failed look-ups of every family.
    pub fn enoent(&self) -> u64 {
        self.stat_enoent + self.access_enoent + self.open_enoent
    }
}

/// One sampled failing path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LookupName {
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// `stat`, `access` or `open`.
    pub family: String,
    /// The path as passed to the syscall (truncated to 255 bytes).
    pub path: String,
}

/// A name pattern of the sampled failures: the path with runs of digits and hex replaced by `*`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LookupPattern {
    /// The pattern (`/etc/pki/nssdb/.*_dOeSnotExist_.db`).
    pub pattern: String,
    /// Sampled failures with this pattern.
    pub samples: u64,
    /// Processes they came from (`comm` names, up to 4).
    pub comms: Vec<String>,
    /// One real path of the pattern.
    pub example: String,
}

/// Failed-look-up tracer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Lookups {
    /// Per process (only processes with at least one traced call in the interval).
    pub procs: Vec<LookupProc>,
    /// ENOENT failures the kernel sampled names from (all of them this interval).
    pub failures_sampled_from: u64,
    /// Patterns of the sampled names, most frequent first (at most 8).
    pub patterns: Vec<LookupPattern>,
    /// A few of the sampled names themselves (at most 16).
    pub names: Vec<LookupName>,
    /// Events not recorded.
    pub dropped: u64,
}

/// mmap_lock waits of one process: its threads slept on its own address space's lock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MmapLockProc {
    /// Process id ([`OTHER_PID`] for the overflow entry).
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// CPU cgroup path.
    pub cgroup: String,
    /// Waits to take it for reading (page faults, /proc/<pid>/maps readers, mprotect...).
    #[serde(skip_serializing_if = "is_zero")]
    pub read_waits: u64,
    /// Waits to take it for writing (mmap, munmap, brk, mprotect).
    #[serde(skip_serializing_if = "is_zero")]
    pub write_waits: u64,
    /// Time of each wait, both kinds.
    pub wait: Hist,
}

/// mmap_lock contention tracer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MmapLock {
    /// Per process (only processes that waited in the interval).
    pub procs: Vec<MmapLockProc>,
    /// Events not recorded.
    pub dropped: u64,
}

/// Write throttling of one process: balance_dirty_pages made it sleep.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DirtyProc {
    /// Process id ([`OTHER_PID`] for the overflow entry).
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// Memory cgroup path (the writeback domain on cgroup v2).
    pub cgroup: String,
    /// Sleeps.
    #[serde(skip_serializing_if = "is_zero")]
    pub pauses: u64,
    /// Length of each sleep (the kernel gives it in ms).
    pub pause: Hist,
}

/// Dirty-throttling tracer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Dirty {
    /// Per process (only processes throttled in the interval).
    pub procs: Vec<DirtyProc>,
    /// Events not recorded.
    pub dropped: u64,
}

/// Declares the tracers' part of a sample from one list (field name = tracer name, as the BPF
/// crate's table spells it; a test there checks they agree), so a new tracer is one line here.
macro_rules! tracers {
    ($($(#[$doc:meta])* $name:ident / $id:ident: $ty:ty = $about:literal,)*) => {
        /// Every tracer's data for one interval; a tracer that is not running is `None`.
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct Tracers {
            /// Time these counts cover (since the previous read), ns.
            pub span_ns: u64,
            $($(#[$doc])* pub $name: Option<$ty>,)*
            /// On-demand tracers loaded but detached this interval (their symptom was absent),
            /// whose part above is therefore `None`.
            pub idle: Vec<String>,
            /// On-demand tracers attached for this one interval by the census (a short look
            /// every so often while their symptom is absent), not by their symptom: their part
            /// above covers this interval, and the intervals around it are not traced.
            #[serde(skip_serializing_if = "Vec::is_empty")]
            pub census: Vec<String>,
        }

        // The place of each tracer in the list, which a `TracerId` holds.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[repr(u8)]
        enum Place {
            $($id,)*
        }

        impl TracerId {
            $(
                #[doc = concat!("The `", stringify!($name), "` tracer: ", $about, ".")]
                pub const $id: TracerId = TracerId(Place::$id as u8);
            )*

            /// Every tracer, in the order they are listed (and loaded).
            pub const ALL: [TracerId; Tracers::COUNT] = [$(TracerId::$id),*];

            /// Its name: on the command line, in messages, as its part of the sample
            /// (`Tracers::<name>`) and as the `tracer` label of its series.
            pub const fn name(self) -> &'static str {
                [$(stringify!($name)),*][self.0 as usize]
            }

            /// What it traces, in a few words.
            pub const fn about(self) -> &'static str {
                [$($about),*][self.0 as usize]
            }

            /// Whether it contributed to the sample's `t`.
            pub fn in_sample(self, t: &Tracers) -> bool {
                [$(t.$name.is_some()),*][usize::from(self.0)]
            }
        }

        impl Tracers {
            /// How many tracers a sample can hold.
            pub const COUNT: usize = [$(stringify!($name)),*].len();

            /// Each tracer and whether it contributed to this sample.
            pub fn running(&self) -> [(TracerId, bool); Self::COUNT] {
                [$((TracerId::$id, self.$name.is_some())),*]
            }

            /// Each tracer and the events it could not record this interval (`None` when it
            /// did not contribute).
            pub fn dropped(&self) -> [(TracerId, Option<u64>); Self::COUNT] {
                [$((TracerId::$id, self.$name.as_ref().map(|t| t.dropped))),*]
            }
        }
    };
}

/// One tracer: made only by its constant (`TracerId::TLB`), so a tracer renamed or removed is
/// a compile error wherever it is used, not a comparison with a name that no longer matches.
/// Orders as the tracers are listed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TracerId(u8);

impl TracerId {
    /// The tracer of this name.
    pub fn parse(name: &str) -> Option<TracerId> {
        TracerId::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether it is one of the sample's tracers that were loaded but idle this interval.
    pub fn idle_in(self, t: &Tracers) -> bool {
        t.idle.iter().any(|n| n == self.name())
    }

    /// Whether the census attached it for this interval.
    pub fn census_in(self, t: &Tracers) -> bool {
        t.census.iter().any(|n| n == self.name())
    }
}

impl std::fmt::Debug for TracerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TracerId::{}", self.name())
    }
}

impl std::fmt::Display for TracerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

tracers! {
    /// Direct reclaim and kswapd.
    reclaim / RECLAIM: Reclaim = "direct/memcg reclaim stalls per process and cgroup, kswapd wake-ups",
    /// Slab shrinkers.
    shrinker / SHRINKER: Shrinkers = "slab shrinker calls, objects and latency per shrinker",
    /// TLB flushes and shootdown IPIs.
    tlb / TLB: Tlb = "TLB flushes by reason per process, shootdown IPIs by sender",
    /// madvise().
    madvise / MADVISE: Madvise = "madvise() calls and bytes per process and advice",
    /// Run-queue latency.
    runqlat / RUNQLAT: Runqlat = "run-queue latency histograms, host and per CPU cgroup",
    /// Failed path look-ups.
    lookups / LOOKUPS: Lookups = "stat/access/open failing with ENOENT per process, sampled names",
    /// mmap_lock contention.
    mmaplock / MMAPLOCK: MmapLock = "mmap_lock contention: waits for a process's own address-space lock and their time",
    /// Dirty-page write throttling.
    dirty / DIRTY: Dirty = "balance_dirty_pages sleeps: writers throttled for dirtying pages faster than they are written back",
}

impl Tracers {
    /// Per-second factor for counts of this interval (0 when the span is unknown).
    pub fn per_s(&self) -> f64 {
        if self.span_ns == 0 {
            0.0
        } else {
            1e9 / self.span_ns as f64
        }
    }
}

impl std::ops::AddAssign<&Hist> for Hist {
    /// Adds another interval's histogram (counts and sums add, the maximum is the larger).
    fn add_assign(&mut self, o: &Hist) {
        if self.slots.len() < o.slots.len() {
            self.slots.resize(o.slots.len(), 0);
        }
        for (a, b) in self.slots.iter_mut().zip(&o.slots) {
            *a += b;
        }
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        self.max_ns = self.max_ns.max(o.max_ns);
    }
}

/// `a += &b` for per-interval entries: counters and histograms add up (several intervals of
/// one process, cgroup or shrinker); the identity fields of `a` stay.
macro_rules! accumulate {
    ($t:ty { $($f:ident),* } $(hist $h:ident)?) => {
        impl std::ops::AddAssign<&$t> for $t {
            fn add_assign(&mut self, o: &$t) {
                $(self.$f += o.$f;)*
                $(self.$h += &o.$h;)?
            }
        }
    };
}
accumulate!(ReclaimStat { direct_stalls, memcg_stalls, reclaimed_pages } hist latency);
accumulate!(ShrinkerStat { calls, zero_freed, to_scan, scanned, freed, cache_items } hist latency);
accumulate!(TlbProc {
    task_switch,
    remote_shootdown,
    local_shootdown,
    local_mm_shootdown,
    remote_send_ipi,
    other,
    pages,
    full_flushes,
    ipis_sent,
    ipi_targets
});
accumulate!(MadviseProc {
    dontneed_calls,
    dontneed_bytes,
    free_calls,
    free_bytes,
    other_calls,
    other_bytes
});
accumulate!(LookupProc {
    stat_calls,
    stat_enoent,
    access_calls,
    access_enoent,
    open_calls,
    open_enoent
});
accumulate!(RunqCgroup {} hist latency);
accumulate!(MmapLockProc { read_waits, write_waits } hist wait);
accumulate!(DirtyProc { pauses } hist pause);

/// Replaces every run of digits (and of hex digits mixed with at least one digit) in `path` by
/// `*`, so `/tmp/.1234_dOeSnotExist_.db` and `/tmp/.99_dOeSnotExist_.db` share one pattern
/// while words made only of letters a–f (`dead`, `cafe`) stay. A `mkstemp`/`mkdtemp` suffix
/// (six letters and digits of mixed case after a dot ending a component: NSS's
/// `dbTemp.vPHxqc`) is a `*` too, or each run's temporary directory would be its own pattern.
pub fn path_pattern(path: &str) -> String {
    if path.split('/').any(|c| temp_suffix(c).is_some()) {
        let parts: Vec<String> = path
            .split('/')
            .map(|c| match temp_suffix(c) {
                Some(stem) => format!("{}*", digits_pattern(stem)),
                None => digits_pattern(c),
            })
            .collect();
        return parts.join("/");
    }
    digits_pattern(path)
}

/// The component up to and including the dot of a `mkstemp`-style random suffix, if it has one.
fn temp_suffix(c: &str) -> Option<&str> {
    let dot = c.len().checked_sub(7)?;
    if !c.is_char_boundary(dot) || c.as_bytes()[dot] != b'.' || dot == 0 {
        return None;
    }
    let suffix = &c.as_bytes()[dot + 1..];
    let all_alnum = suffix.iter().all(u8::is_ascii_alphanumeric);
    let upper = suffix.iter().any(u8::is_ascii_uppercase);
    let lower = suffix.iter().any(u8::is_ascii_lowercase);
    (all_alnum && upper && lower).then(|| &c[..=dot])
}

fn digits_pattern(path: &str) -> String {
    let b = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_hexdigit() {
            let mut j = i;
            let mut digit = false;
            while j < b.len() && b[j].is_ascii_hexdigit() {
                digit |= b[j].is_ascii_digit();
                j += 1;
            }
            if digit {
                out.push('*');
            } else {
                out.push_str(&path[i..j]);
            }
            i = j;
        } else {
            // Multi-byte characters are never hex digits: copy the whole character.
            let ch = path[i..].chars().next().unwrap_or('\u{fffd}');
            out.push(ch);
            i += ch.len_utf8().max(1);
        }
    }
    out
}

impl Tracers {
    /// Names each per-process row of the TLB, madvise, failed-look-up, mmap_lock and dirty tracers as the
    /// process table of the same sample names its process. A tracer names a process at its
    /// first event of each interval; one that exec'd later in the interval kept its old name
    /// there for that sample, beside a process row with the new one. (Reclaim rows keep the
    /// name of the first stall, as documented.)
    pub fn name_procs_as(&mut self, processes: &[jitterscope_sources::process::Process]) {
        let rows = self.tlb.as_ref().map_or(0, |t| t.procs.len())
            + self.madvise.as_ref().map_or(0, |m| m.procs.len())
            + self.lookups.as_ref().map_or(0, |l| l.procs.len())
            + self.mmaplock.as_ref().map_or(0, |m| m.procs.len())
            + self.dirty.as_ref().map_or(0, |m| m.procs.len());
        if rows == 0 {
            return;
        }
        let comm: std::collections::HashMap<u32, &str> = processes
            .iter()
            .map(|p| (p.stat.pid, p.stat.comm.as_str()))
            .collect();
        let fix = |pid: u32, name: &mut String| {
            if let Some(c) = comm
                .get(&pid)
                .filter(|c| !c.is_empty() && **c != name.as_str())
            {
                *name = (*c).to_string();
            }
        };
        if let Some(t) = self.tlb.as_mut() {
            t.procs.iter_mut().for_each(|p| fix(p.pid, &mut p.comm));
        }
        if let Some(m) = self.madvise.as_mut() {
            m.procs.iter_mut().for_each(|p| fix(p.pid, &mut p.comm));
        }
        if let Some(l) = self.lookups.as_mut() {
            l.procs.iter_mut().for_each(|p| fix(p.pid, &mut p.comm));
        }
        if let Some(m) = self.mmaplock.as_mut() {
            m.procs.iter_mut().for_each(|p| fix(p.pid, &mut p.comm));
        }
        if let Some(d) = self.dirty.as_mut() {
            d.procs.iter_mut().for_each(|p| fix(p.pid, &mut p.comm));
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn rows_take_the_process_tables_name_after_an_exec() {
        use jitterscope_sources::process::{PidStat, Process};
        let proc_named = |pid: u32, comm: &str| Process {
            stat: PidStat {
                pid,
                comm: comm.into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut t = Tracers {
            tlb: Some(Tlb {
                procs: vec![
                    TlbProc {
                        pid: 7,
                        comm: "bash".into(),
                        ..Default::default()
                    },
                    TlbProc {
                        pid: 8,
                        comm: "gone".into(),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            madvise: Some(Madvise {
                procs: vec![MadviseProc {
                    pid: 7,
                    comm: "bash".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        t.name_procs_as(&[proc_named(7, "python3"), proc_named(9, "x")]);
        let tlb = &t.tlb.as_ref().unwrap().procs;
        assert_eq!(tlb[0].comm, "python3");
        // A process that exited before the table was read keeps the tracer's name.
        assert_eq!(tlb[1].comm, "gone");
        assert_eq!(t.madvise.as_ref().unwrap().procs[0].comm, "python3");
    }

    use super::*;

    #[test]
    fn merged_histograms_add_their_events_and_keep_the_larger_maximum() {
        let mut host = Hist::default();
        let a = Hist {
            slots: vec![1, 0, 2],
            count: 3,
            sum_ns: 9_000,
            max_ns: 5_000,
        };
        let b = Hist {
            slots: vec![0, 4, 0, 0, 1],
            count: 5,
            sum_ns: 40_000,
            max_ns: 17_000,
        };
        host.merge(&a);
        host.merge(&b);
        assert_eq!(host.slots, vec![1, 4, 2, 0, 1]);
        assert_eq!((host.count, host.sum_ns, host.max_ns), (8, 49_000, 17_000));
        assert_eq!(host.quantile_us(0.5), Some(4.0));
        host.merge(&Hist::default());
        assert_eq!(host.count, 8, "an empty histogram adds nothing");
    }

    #[test]
    fn pattern_collapses_numbers_and_hex() {
        assert_eq!(
            path_pattern("/etc/pki/nssdb/.4242_dOeSnotExist_.db"),
            "/etc/pki/nssdb/.*_dOeSnotExist_.db"
        );
        assert_eq!(path_pattern("/x/3fa9c0/y"), "/x/*/y");
        assert_eq!(path_pattern("/x/dead/beef"), "/x/dead/beef");
        // NSS's temporary directory: one pattern whatever mkdtemp picked.
        for dir in ["dbTemp.vPHxqc", "dbTemp.do3aLK", "dbTemp.8rZ1Qa"] {
            assert_eq!(
                path_pattern(&format!("/var/tmp/{dir}/.35738867_dOeSnotExist_.db")),
                "/var/tmp/dbTemp.*/.*_dOeSnotExist_.db"
            );
        }
        assert_eq!(path_pattern("/etc/file.backup"), "/etc/file.backup");
        assert_eq!(
            path_pattern("/a/.vPHxqc"),
            "/a/.vPHxqc",
            "a dot file, not a suffix"
        );
        assert_eq!(path_pattern("/é1/ü"), "/é*/ü");
        assert_eq!(path_pattern(""), "");
    }

    #[test]
    fn task_switch_flushes_are_host_wide_in_stores_of_either_kind() {
        let proc_ = |pid, task_switch, remote_shootdown| TlbProc {
            pid,
            task_switch,
            remote_shootdown,
            ..Default::default()
        };
        // Written before: per process, and part of each process's flushes.
        let old = Tlb {
            procs: vec![proc_(1, 5, 0), proc_(2, 7, 2)],
            ..Default::default()
        };
        assert_eq!(old.task_switches(), 12);
        // Written now: host-wide, processes only for their other flushes.
        let new = Tlb {
            procs: vec![proc_(2, 0, 2)],
            task_switch: 12,
            ..Default::default()
        };
        assert_eq!(new.task_switches(), 12);
        // A process's flushes mean the same in both.
        assert_eq!(old.procs[1].flushes(), new.procs[0].flushes());
        assert_eq!(Tlb::default().task_switches(), 0);
    }

    #[test]
    fn zero_counters_are_left_out_and_read_back_as_zero() {
        let named = |v: &dyn erased_ser::Ser| v.named();
        let p = TlbProc {
            pid: 7,
            comm: "bash".into(),
            cgroup: "/user.slice".into(),
            task_switch: 3,
            ..Default::default()
        };
        let short = named(&p);
        // What a build before this one wrote: every field, zeros too.
        /// The fields of a TlbProc, all written.
        #[derive(Serialize)]
        struct Full<'a> {
            pid: u32,
            comm: &'a str,
            cgroup: &'a str,
            task_switch: u64,
            remote_shootdown: u64,
            local_shootdown: u64,
            local_mm_shootdown: u64,
            remote_send_ipi: u64,
            other: u64,
            pages: u64,
            full_flushes: u64,
            ipis_sent: u64,
            ipi_targets: u64,
        }
        let full = named(&Full {
            pid: 7,
            comm: "bash",
            cgroup: "/user.slice",
            task_switch: 3,
            remote_shootdown: 0,
            local_shootdown: 0,
            local_mm_shootdown: 0,
            remote_send_ipi: 0,
            other: 0,
            pages: 0,
            full_flushes: 0,
            ipis_sent: 0,
            ipi_targets: 0,
        });
        assert!(
            short.len() * 3 < full.len(),
            "{} vs {}",
            short.len(),
            full.len()
        );
        let a: TlbProc = rmp_serde::from_slice(&short).unwrap();
        let b: TlbProc = rmp_serde::from_slice(&full).unwrap();
        assert_eq!(a, p);
        assert_eq!(b, p);
        // Every counter survives when it is not zero.
        let busy = LookupProc {
            pid: 1,
            stat_calls: 1,
            stat_enoent: 2,
            access_calls: 3,
            access_enoent: 4,
            open_calls: 5,
            open_enoent: 6,
            ..Default::default()
        };
        assert_eq!(
            rmp_serde::from_slice::<LookupProc>(&named(&busy)).unwrap(),
            busy
        );
    }

    /// MessagePack with field names, as the store writes samples.
    mod erased_ser {
        /// Serializable as the store does it.
        pub trait Ser {
            /// The bytes.
            fn named(&self) -> Vec<u8>;
        }
        impl<T: serde::Serialize> Ser for T {
            fn named(&self) -> Vec<u8> {
                let mut b = Vec::new();
                self.serialize(&mut rmp_serde::Serializer::new(&mut b).with_struct_map())
                    .unwrap();
                b
            }
        }
    }

    #[test]
    fn names_are_the_serialized_fields_and_dropped_follows_each_part() {
        let t = Tracers {
            span_ns: 1,
            tlb: Some(Tlb {
                dropped: 3,
                ..Default::default()
            }),
            lookups: Some(Lookups::default()),
            ..Default::default()
        };
        // Stored samples name the parts by field: the names below must be those keys.
        let json = serde_json::to_value(&t).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|k| !matches!(*k, "span_ns" | "idle"))
            .collect();
        let mut names: Vec<&str> = t.running().iter().map(|(n, _)| n.name()).collect();
        names.sort_unstable();
        keys.sort_unstable();
        assert_eq!(names, keys);
        assert_eq!(Tracers::COUNT, names.len());
        let on: Vec<TracerId> = t.running().iter().filter(|r| r.1).map(|r| r.0).collect();
        assert_eq!(on, [TracerId::TLB, TracerId::LOOKUPS]);
        let dropped: Vec<_> = t.dropped().into_iter().filter(|d| d.1.is_some()).collect();
        assert_eq!(
            dropped,
            [(TracerId::TLB, Some(3)), (TracerId::LOOKUPS, Some(0))]
        );
        for id in TracerId::ALL {
            assert_eq!(TracerId::parse(id.name()), Some(id));
            assert_eq!(id.in_sample(&t), on.contains(&id), "{id}");
        }
        assert_eq!(TracerId::parse("kprobe"), None);
    }

    #[test]
    fn quantiles_from_slots() {
        // 90 events in [1,2) us... slot 0, 10 events in slot 10 ([1024, 2048) us).
        let mut h = Hist {
            slots: vec![0; 11],
            count: 100,
            sum_ns: 0,
            max_ns: 1_500_000,
        };
        h.slots[0] = 90;
        h.slots[10] = 10;
        assert_eq!(h.quantile_us(0.5), Some(2.0));
        assert_eq!(h.quantile_us(0.9), Some(2.0));
        // p99 falls in slot 10: its upper edge 2048 us, capped at the max seen (1500 us).
        assert_eq!(h.quantile_us(0.99), Some(1500.0));
        assert_eq!(Hist::default().quantile_us(0.99), None);
    }

    #[test]
    fn entries_of_several_intervals_add_up() {
        let mut a = TlbProc {
            pid: 7,
            comm: "java".into(),
            remote_shootdown: 3,
            ipis_sent: 10,
            ..Default::default()
        };
        a += &TlbProc {
            pid: 7,
            remote_shootdown: 2,
            ipis_sent: 5,
            ..Default::default()
        };
        assert_eq!(
            (a.comm.as_str(), a.remote_shootdown, a.ipis_sent),
            ("java", 5, 15)
        );
        let mut h = Hist {
            slots: vec![1],
            count: 1,
            sum_ns: 10,
            max_ns: 10,
        };
        h += &Hist {
            slots: vec![0, 0, 2],
            count: 2,
            sum_ns: 50,
            max_ns: 30,
        };
        assert_eq!(h.slots, vec![1, 0, 2]);
        assert_eq!((h.count, h.sum_ns, h.max_ns), (3, 60, 30));
    }

    proptest::proptest! {
        #[test]
        fn pattern_never_panics(s in ".*") {
            let p = path_pattern(&s);
            proptest::prop_assert!(p.chars().count() <= s.chars().count());
            proptest::prop_assert_eq!(path_pattern(&p), p.clone());
        }

        #[test]
        fn quantile_within_slots(slots in proptest::collection::vec(0u64..1000, 0..32), q in 0.0f64..1.0) {
            let count = slots.iter().sum();
            let h = Hist { slots, count, sum_ns: 0, max_ns: 0 };
            if let Some(v) = h.quantile_us(q) {
                proptest::prop_assert!(v >= 2.0 && v <= 2f64.powi(32));
            }
        }
    }
}
