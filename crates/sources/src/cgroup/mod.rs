//! cgroup v1 and v2: hierarchy discovery, a walking reader that merges every hierarchy's view of
//! a cgroup into one record, per-file parsers, `/proc/<pid>/cgroup`, and container identity.
//!
//! Hosts mix versions: a hybrid host keeps cpu, cpuacct and memory on v1 hierarchies and runs an
//! empty cgroup2 at /sys/fs/cgroup/unified that still has `cpu.stat` usage and `*.pressure`;
//! a pure v2 host has one cgroup2 mount with controllers. Either way the reader returns one
//! [`Cgroup`] per cgroup path, so throttling (v1 cpu) sits next to pressure (v2) in one record.
//!
//! Counters are raw, as the kernel reports them; units are in the field names. Where v1 and v2
//! report the same quantity in different units, the field is normalised to the finer unit and
//! says which version it came from ([`CpuStats::usage_source`], [`CpuStats::throttle_source`]),
//! because v2's µs values multiplied to ns are not ns-precise.

mod dirfd;
mod identity;
mod mount;
mod names;
mod parse;
mod proc_cgroup;
mod reader;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use identity::{identify, Identity, QosClass, Runtime};
pub use mount::{discover, mount_points, parse_mountinfo, place_ns_root, CgroupVersion, Hierarchy};
pub use names::{
    from_runtime_name, parse_docker_config, parse_kubelet_log_name, parse_storage_containers,
    ContainerNames, NameCache,
};
pub use parse::{
    parse_cfs_quota, parse_cpu_max, parse_cpu_stat, parse_cpuacct_stat, parse_io_stat, parse_keyed,
    parse_max_or_u64, parse_oom_control, parse_single, parse_v1_limit, CpuMax, CpuStatFile,
    CpuacctStat, IoStatDevice, OomControl, V1_UNLIMITED_BYTES,
};
pub use proc_cgroup::{
    cgroup_of_pid, parse_proc_pid_cgroup, CgroupNs, ProcCgroup, ProcCgroupPaths,
};
pub use reader::{CgroupReader, CgroupReaderConfig, WalkStats};

use crate::system::pressure::Pressure;

/// One cgroup as seen by every hierarchy that has a directory at its path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cgroup {
    /// Path relative to the hierarchy root, "/" for the root (`/system.slice/docker-<id>.scope`).
    pub path: String,
    /// At least one v1 hierarchy contributed data.
    pub v1: bool,
    /// The v2 hierarchy contributed data.
    pub v2: bool,
    /// CPU accounting, limits and throttling; `None` when no hierarchy had CPU files here.
    pub cpu: Option<CpuStats>,
    /// Memory accounting and limits; `None` when the memory controller is not active here.
    pub memory: Option<MemoryStats>,
    /// Pressure stall information (v2 only; v1 has none).
    pub pressure: CgroupPressure,
    /// Tasks (threads) in the cgroup, v2 `pids.current` where the pids controller is enabled.
    pub pids_current: Option<u64>,
    /// Block I/O, v2 `io.stat` where the io controller is enabled; `None` on v1 (the blkio
    /// hierarchy is not walked) and where the file is absent (the root before 5.x).
    pub io: Option<IoStats>,
    /// Owner read from the path.
    pub identity: Identity,
}

/// CPU counters and limits. Every field is `None` when its file is absent on this kernel or
/// hierarchy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuStats {
    /// Total CPU time, ns: v1 `cpuacct.usage`, else v2 `usage_usec` × 1000.
    pub usage_ns: Option<u64>,
    /// Which version `usage_ns` came from.
    pub usage_source: Option<CgroupVersion>,
    /// v1 `cpuacct.stat` user time, USER_HZ ticks.
    pub user_ticks: Option<u64>,
    /// v1 `cpuacct.stat` system time, USER_HZ ticks.
    pub system_ticks: Option<u64>,
    /// v2 `cpu.stat` user time, µs.
    pub user_usec: Option<u64>,
    /// v2 `cpu.stat` system time, µs.
    pub system_usec: Option<u64>,
    /// CFS quota per period, µs; `None` = unlimited (v1 -1, v2 `max`, or the root cgroup).
    pub quota_us: Option<u64>,
    /// CFS period, µs.
    pub period_us: Option<u64>,
    /// CFS burst allowance, µs (v1 `cpu.cfs_burst_us`, v2 `cpu.max.burst`; kernel 5.14+).
    pub burst_us: Option<u64>,
    /// Enforcement periods with runnable tasks.
    pub nr_periods: Option<u64>,
    /// Periods in which the quota ran out; throttled % = nr_throttled / nr_periods.
    pub nr_throttled: Option<u64>,
    /// Time throttled, ns: v1 `throttled_time`, or v2 `throttled_usec` × 1000.
    pub throttled_ns: Option<u64>,
    /// Periods in which burst was used (5.14+).
    pub nr_bursts: Option<u64>,
    /// Burst time used, ns: v1 `burst_time`, or v2 `burst_usec` × 1000 (5.14+).
    pub burst_ns: Option<u64>,
    /// Which version the throttling fields (`nr_periods` … `burst_ns`) came from.
    pub throttle_source: Option<CgroupVersion>,
    /// v1 `cpu.shares` (default 1024).
    pub shares: Option<u64>,
    /// v2 `cpu.weight` (1–10000, default 100).
    pub weight: Option<u64>,
}

/// Memory counters and limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryStats {
    /// Charged memory, bytes: v1 `memory.usage_in_bytes`, v2 `memory.current`.
    pub usage_bytes: Option<u64>,
    /// Hard limit, bytes: v1 `memory.limit_in_bytes`, v2 `memory.max`; `None` = unlimited
    /// (v1 ≥ [`V1_UNLIMITED_BYTES`], v2 `max`, or no limit file as at the root).
    pub limit_bytes: Option<u64>,
    /// v2 `memory.high` throttle threshold, bytes; `None` = `max` or not collected.
    pub high_bytes: Option<u64>,
    /// v2 `memory.low` best-effort protection, bytes (`max` reads as `u64::MAX`).
    pub low_bytes: Option<u64>,
    /// v2 `memory.min` hard protection, bytes (`max` reads as `u64::MAX`).
    pub min_bytes: Option<u64>,
    /// v2 `memory.swap.current`, bytes. (v1: the `swap` key of `stat`, present with swap
    /// accounting; `memory.memsw.usage_in_bytes` is usage + that, so it is not read.)
    pub swap_bytes: Option<u64>,
    /// v1 `memory.failcnt`: times the limit was hit.
    pub failcnt: Option<u64>,
    /// Every `memory.stat` key and value, in file order (v1 keys include `total_*`).
    #[serde(deserialize_with = "de_keyed")]
    pub stat: Vec<(StatKey, u64)>,
    /// Every v2 `memory.events` key and value (low, high, max, oom, oom_kill, oom_group_kill).
    #[serde(deserialize_with = "de_keyed")]
    pub events: Vec<(StatKey, u64)>,
    /// v1 `memory.oom_control` `oom_kill` (4.13+).
    pub oom_kill: Option<u64>,
    /// v1 `memory.oom_control` `under_oom`.
    pub under_oom: Option<bool>,
}

/// A key of a flat keyed file (`memory.stat`, `memory.events`): the kernel's names are shared
/// statics, others (a newer kernel's) are owned. Reading back a day of 50 cgroups' records
/// allocated a string for each of their ~60 keys in every sample, a seventh of diagnosing
/// 10 minutes (perf).
pub type StatKey = std::borrow::Cow<'static, str>;

/// The keys of `memory.stat` and `memory.events` on v1 and v2 up to 6.18 (the fixtures' and
/// this host's; tests/fixtures), sorted so that a duplicate shows.
static KNOWN_KEYS: &[&str] = &[
    "active_anon",
    "active_file",
    "anon",
    "anon_thp",
    "cache",
    "dirty",
    "file",
    "file_dirty",
    "file_mapped",
    "file_thp",
    "file_writeback",
    "hierarchical_memory_limit",
    "hierarchical_memsw_limit",
    "high",
    "hugetlb",
    "inactive_anon",
    "inactive_file",
    "kernel",
    "kernel_stack",
    "low",
    "mapped_file",
    "max",
    "numa_hint_faults",
    "numa_pages_migrated",
    "numa_pte_updates",
    "oom",
    "oom_group_kill",
    "oom_kill",
    "pagetables",
    "percpu",
    "pgactivate",
    "pgdeactivate",
    "pgdemote_direct",
    "pgdemote_khugepaged",
    "pgdemote_kswapd",
    "pgdemote_proactive",
    "pgfault",
    "pglazyfree",
    "pglazyfreed",
    "pgmajfault",
    "pgpgin",
    "pgpgout",
    "pgpromote_success",
    "pgrefill",
    "pgscan",
    "pgscan_direct",
    "pgscan_khugepaged",
    "pgscan_kswapd",
    "pgscan_proactive",
    "pgsteal",
    "pgsteal_direct",
    "pgsteal_khugepaged",
    "pgsteal_kswapd",
    "pgsteal_proactive",
    "rss",
    "rss_huge",
    "sec_pagetables",
    "shmem",
    "shmem_thp",
    "slab",
    "slab_reclaimable",
    "slab_unreclaimable",
    "sock",
    "swap",
    "swapcached",
    "swpin_zero",
    "swpout_zero",
    "thp_collapse_alloc",
    "thp_fault_alloc",
    "thp_migration_alloc",
    "thp_swpout",
    "thp_swpout_fallback",
    "total_active_anon",
    "total_active_file",
    "total_cache",
    "total_dirty",
    "total_hierarchical_memory_limit",
    "total_inactive_anon",
    "total_inactive_file",
    "total_mapped_file",
    "total_pgfault",
    "total_pgmajfault",
    "total_pgpgin",
    "total_pgpgout",
    "total_pgrefill",
    "total_rss",
    "total_rss_huge",
    "total_shmem",
    "total_swap",
    "total_swapcached",
    "total_unevictable",
    "total_workingset_activate",
    "total_workingset_nodereclaim",
    "total_workingset_refault",
    "total_workingset_refault_anon",
    "total_workingset_refault_file",
    "total_workingset_restore",
    "total_writeback",
    "unevictable",
    "vmalloc",
    "workingset_activate",
    "workingset_activate_anon",
    "workingset_activate_file",
    "workingset_nodereclaim",
    "workingset_refault",
    "workingset_refault_anon",
    "workingset_refault_file",
    "workingset_restore",
    "workingset_restore_anon",
    "workingset_restore_file",
    "writeback",
    "zswap",
    "zswapped",
    "zswpin",
    "zswpout",
    "zswpwb",
];

/// `key` as a [`StatKey`]: the shared static when the kernel's, else owned. A hash set: a
/// binary search's seven calls to `memcmp` per key cost more than the allocation it saved.
pub fn stat_key(key: &str) -> StatKey {
    static SET: std::sync::OnceLock<rustc_hash::FxHashSet<&'static str>> =
        std::sync::OnceLock::new();
    let set = SET.get_or_init(|| KNOWN_KEYS.iter().copied().collect());
    match set.get(key) {
        Some(k) => std::borrow::Cow::Borrowed(k),
        None => std::borrow::Cow::Owned(key.to_string()),
    }
}

/// Reads `[[key, value], ...]` with each key through [`stat_key`].
fn de_keyed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(StatKey, u64)>, D::Error> {
    struct Key(StatKey);
    impl<'de> Deserialize<'de> for Key {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl serde::de::Visitor<'_> for V {
                type Value = Key;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a key")
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key, E> {
                    Ok(Key(stat_key(v)))
                }
                fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Key, E> {
                    Ok(Key(stat_key(&String::from_utf8_lossy(v))))
                }
            }
            d.deserialize_str(V)
        }
    }
    let v: Vec<(Key, u64)> = Deserialize::deserialize(d)?;
    Ok(v.into_iter().map(|(k, n)| (k.0, n)).collect())
}

impl MemoryStats {
    /// The value of a `memory.stat` key.
    pub fn stat(&self, key: &str) -> Option<u64> {
        self.stat.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The value of a `memory.events` key.
    pub fn event(&self, key: &str) -> Option<u64> {
        self.events.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

/// A cgroup's `*.pressure` files.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CgroupPressure {
    /// `cpu.pressure`.
    pub cpu: Option<Pressure>,
    /// `memory.pressure`.
    pub memory: Option<Pressure>,
    /// `io.pressure`.
    pub io: Option<Pressure>,
}

/// v2 `io.stat` summed over the devices it lists: cumulative counters of the I/O the cgroup and
/// its descendants issued (bios as submitted, before merging). Per-device values are not kept.
///
/// A device appears once it has had I/O from the cgroup, so the sums only grow while the
/// devices stay; a device that goes away (hot-unplugged) makes them go back, which the
/// derivation reads as an unknown interval.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IoStats {
    /// `rbytes`: bytes read.
    pub read_bytes: u64,
    /// `wbytes`: bytes written.
    pub write_bytes: u64,
    /// `rios`: read I/Os.
    pub read_ios: u64,
    /// `wios`: write I/Os.
    pub write_ios: u64,
    /// `dbytes`: bytes discarded; `None` when no device line has the key (before 5.0).
    pub discard_bytes: Option<u64>,
    /// `dios`: discard I/Os; `None` when no device line has the key (before 5.0).
    pub discard_ios: Option<u64>,
    /// Device lines summed.
    pub devices: u32,
}

impl IoStats {
    /// The sums over `devices`.
    pub fn sum(devices: &[IoStatDevice]) -> IoStats {
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
        let mut s = IoStats {
            devices: u32::try_from(devices.len()).unwrap_or(u32::MAX),
            ..IoStats::default()
        };
        for d in devices {
            s.read_bytes = s.read_bytes.saturating_add(d.read_bytes);
            s.write_bytes = s.write_bytes.saturating_add(d.write_bytes);
            s.read_ios = s.read_ios.saturating_add(d.read_ios);
            s.write_ios = s.write_ios.saturating_add(d.write_ios);
            s.discard_bytes = add(s.discard_bytes, d.discard_bytes);
            s.discard_ios = add(s.discard_ios, d.discard_ios);
        }
        s
    }
}
