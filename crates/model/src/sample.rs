//! The raw sample of one interval: what every source read, exactly as the kernel reported it.
//!
//! Every part is optional (a source that is absent on this host, or failed this interval, is
//! `None`), and every struct is `#[serde(default)]`, so samples written by older recorders decode
//! with new fields at their defaults and samples from newer recorders decode with unknown fields
//! ignored. Rates are never stored: see [`crate::derive`].

use serde::{Deserialize, Serialize};

use jitterscope_sources::system::{
    buddyinfo::BuddyInfo, dentry::DentryState, diskstats::DiskStats, interrupts::Interrupts,
    loadavg::LoadAvg, meminfo::MemInfo, netdev::NetDevs, pressure::Pressure, slabinfo::SlabInfo,
    softirqs::Softirqs, stat::Stat, vmstat::VmStat, zoneinfo::ZoneInfo,
};
use jitterscope_sources::Root;

pub use jitterscope_sources::cgroup::Cgroup;
pub use jitterscope_sources::process::{Process, ProcessScanStats};

/// Facts about the host that the derivation needs (clock tick, page size) and that identify the
/// recording.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostInfo {
    /// Host name.
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Online CPUs when the recorder started.
    pub ncpu: u32,
    /// USER_HZ: ticks per second of /proc/stat and /proc/<pid>/stat times.
    pub user_hz: u64,
    /// Page size, bytes.
    pub page_size_bytes: u64,
    /// Boot this recording belongs to (/proc/sys/kernel/random/boot_id): monotonic stamps and
    /// counters only compare within one boot.
    pub boot_id: String,
}

impl HostInfo {
    /// Reads the host facts, falling back to the kernel's usual values where unreadable.
    pub fn read(root: &Root) -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(root.path(p))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        // SAFETY: sysconf has no side effects.
        let (ncpu, hz) = unsafe {
            (
                libc::sysconf(libc::_SC_NPROCESSORS_ONLN),
                libc::sysconf(libc::_SC_CLK_TCK),
            )
        };
        HostInfo {
            hostname: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
            ncpu: ncpu.max(1) as u32,
            user_hz: if hz > 0 { hz as u64 } else { 100 },
            page_size_bytes: Self::page_size(),
            boot_id: read("/proc/sys/kernel/random/boot_id"),
        }
    }

    /// The page size of this machine.
    pub fn page_size() -> u64 {
        // SAFETY: sysconf has no side effects.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 {
            p as u64
        } else {
            4096
        }
    }
}

/// CLOCK_MONOTONIC now, ns: the clock of [`Sample::mono_ns`] and of the profiler's slices.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The wall clock now, ns since the Unix epoch (0 if the clock is before it): the clock of
/// [`Sample::ts_ns`].
pub use jitterscope_sources::units::wall_ns;

/// System-wide pressure stall information.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SystemPressure {
    /// /proc/pressure/cpu.
    pub cpu: Option<Pressure>,
    /// /proc/pressure/memory.
    pub memory: Option<Pressure>,
    /// /proc/pressure/io.
    pub io: Option<Pressure>,
    /// /proc/pressure/irq (6.1+ with CONFIG_IRQ_TIME_ACCOUNTING).
    pub irq: Option<Pressure>,
}

/// The recorder's own cost and health in this interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecorderStats {
    /// How late this collection started against its schedule, ns (to the µs).
    pub lateness_ns: u64,
    /// How long this collection took, ns (to the µs).
    pub collect_ns: u64,
    /// Recorder user CPU since start, ns (counter).
    pub cpu_user_ns: u64,
    /// Recorder system CPU since start, ns (counter).
    pub cpu_system_ns: u64,
    /// Recorder resident memory, bytes.
    pub rss_bytes: u64,
    /// Bytes written to the store since start (counter).
    pub store_bytes_written: u64,
    /// Samples dropped since start because the store could not keep up or had no space (counter).
    pub samples_dropped: u64,
    /// Samples waiting for the store writer.
    pub write_queue: u64,
    /// Source errors since start (counter).
    pub source_errors: u64,
    /// Whole intervals skipped because the recorder could not run in time (counter).
    pub ticks_missed: u64,
    /// Remote write's progress, when `record --remote-write` is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_write: Option<RemoteWriteStats>,
    /// The recorder's own process id (0 from recorders before it was kept), so a reader can
    /// tell the recorder's row of the process table from the host's processes: its memory is
    /// the agent's budget (`self.rss_bytes`), never a workload's leak.
    pub pid: u32,
}

/// What the remote-write sender has done since the recorder started (counters) and how far
/// behind it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoteWriteStats {
    /// Points the receiver accepted.
    pub points_sent: u64,
    /// Points given up on: refused by the receiver (a 4xx other than 429) or never sendable
    /// (a URL that cannot work).
    pub points_failed: u64,
    /// Requests that failed, retried or not.
    pub requests_failed: u64,
    /// Bytes of accepted requests (compressed, as sent).
    pub bytes_sent: u64,
    /// Wall time of the newest sample the receiver holds (ns since the epoch; 0 before the
    /// first).
    pub acked_ts_ns: i64,
}

/// Payload format generation. Bumped only for changes that old readers cannot absorb by
/// ignoring or defaulting fields (none so far).
pub const SAMPLE_FORMAT: u32 = 1;

/// One interval's raw data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sample {
    /// [`SAMPLE_FORMAT`] of the writer.
    pub format: u32,
    /// Collection start, wall clock, ns since the Unix epoch (UTC).
    pub ts_ns: i64,
    /// Collection start, CLOCK_MONOTONIC ns: rates use this, immune to wall-clock jumps.
    pub mono_ns: u64,
    /// Configured sampling interval, ns.
    pub interval_ns: u64,
    /// Host facts.
    pub host: HostInfo,
    /// /proc/stat.
    pub stat: Option<Stat>,
    /// /proc/loadavg.
    pub loadavg: Option<LoadAvg>,
    /// /proc/vmstat.
    pub vmstat: Option<VmStat>,
    /// /proc/meminfo.
    pub meminfo: Option<MemInfo>,
    /// /proc/zoneinfo (free pages vs min/low/high watermarks per zone).
    pub zoneinfo: Option<ZoneInfo>,
    /// /proc/buddyinfo.
    pub buddyinfo: Option<BuddyInfo>,
    /// /proc/slabinfo (all caches).
    // A cycle with codec.rs, kept on purpose: the codec encodes a `Sample`, and the sample's
    // large parts name the codec's functions for their (de)serialization. Those decode a part
    // only when the read asked for it (the codec's per-thread `WANTED` parts) and walk over its
    // bytes otherwise, a choice that has to be made inside serde's walk of this struct; moving
    // the functions out of the codec would move its state with them.
    #[serde(deserialize_with = "crate::codec::de_slabinfo")]
    pub slabinfo: Option<SlabInfo>,
    /// /proc/sys/fs/dentry-state.
    pub dentry: Option<DentryState>,
    /// /proc/interrupts.
    pub interrupts: Option<Interrupts>,
    /// /proc/softirqs.
    pub softirqs: Option<Softirqs>,
    /// /proc/pressure/*.
    pub pressure: SystemPressure,
    /// /proc/diskstats.
    pub diskstats: Option<DiskStats>,
    /// /proc/net/dev.
    pub netdev: Option<NetDevs>,
    /// Every cgroup of every v1 (cpu, cpuacct, memory) and v2 hierarchy, merged by path.
    #[serde(
        serialize_with = "crate::codec::ser_blob",
        deserialize_with = "crate::codec::de_cgroups"
    )]
    pub cgroups: Option<Vec<Cgroup>>,
    /// Every process.
    #[serde(
        serialize_with = "crate::codec::ser_blob",
        deserialize_with = "crate::codec::de_processes"
    )]
    pub processes: Option<Vec<Process>>,
    /// What the process scan skipped (vanished processes, parse errors, descriptor use).
    pub process_scan: Option<ProcessScanStats>,
    /// The processes the OOM killer killed this interval, from its reports in the kernel log
    /// (None when /dev/kmsg cannot be read).
    pub oom_kills: Option<Vec<jitterscope_sources::system::kmsg::OomKill>>,
    /// What the in-kernel tracers saw this interval (absent when no tracer runs).
    pub tracers: Option<crate::tracers::Tracers>,
    /// Stack samples of this interval (absent when the sampler is off or unavailable).
    #[serde(
        serialize_with = "crate::codec::ser_profile",
        deserialize_with = "crate::codec::de_profile"
    )]
    pub profile: Option<crate::profile::Profile>,
    /// The recorder's own cost.
    pub recorder: Option<RecorderStats>,
    /// Time each collector took this interval, ns (to the µs).
    pub collector_ns: Vec<(String, u64)>,
    /// Source errors of this interval (bounded), e.g. a malformed /proc file.
    pub errors: Vec<String>,
}

impl Sample {
    /// An empty sample stamped with its times and host.
    pub fn new(ts_ns: i64, mono_ns: u64, interval_ns: u64, host: HostInfo) -> Self {
        Sample {
            format: SAMPLE_FORMAT,
            ts_ns,
            mono_ns,
            interval_ns,
            host,
            ..Default::default()
        }
    }
}
