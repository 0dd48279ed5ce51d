//! The one list of every source the recorder collects. A new source is a module in
//! `jitterscope-sources`, a field in [`Sample`], and one line here.

use jitterscope_sources::cgroup::{CgroupReader, CgroupReaderConfig, CgroupVersion};
use jitterscope_sources::process::{default_fd_budget, ProcessReader};
use jitterscope_sources::redact::Redactor;
use jitterscope_sources::system::kmsg::KmsgReader;
use jitterscope_sources::system::{PressureResource, SystemReader};
use jitterscope_sources::Root;
use std::time::Duration;

use crate::collector::{Collector, CollectorSet, Notes, SystemCollector};
use crate::sample::Sample;

/// Every collector, in collection order. System files first (cheap, and the ones a storm makes
/// most urgent), then cgroups, then processes (the expensive part).
pub fn collectors(root: &Root, cfg: &CollectConfig) -> CollectorSet {
    CollectorSet::new(vec![
        SystemCollector::boxed(root, "stat", SystemReader::stat, |s, v| s.stat = Some(v)),
        SystemCollector::boxed(root, "loadavg", SystemReader::loadavg, |s, v| {
            s.loadavg = Some(v)
        }),
        SystemCollector::boxed(root, "vmstat", SystemReader::vmstat, |s, v| {
            s.vmstat = Some(v)
        }),
        SystemCollector::boxed(root, "meminfo", SystemReader::meminfo, |s, v| {
            s.meminfo = Some(v)
        }),
        SystemCollector::boxed(root, "zoneinfo", SystemReader::zoneinfo, |s, v| {
            s.zoneinfo = Some(v)
        }),
        SystemCollector::boxed(root, "buddyinfo", SystemReader::buddyinfo, |s, v| {
            s.buddyinfo = Some(v)
        }),
        SystemCollector::boxed_every(
            root,
            "slabinfo",
            SystemReader::slabinfo,
            |s, v| s.slabinfo = Some(v),
            cfg.slabinfo_period,
        ),
        SystemCollector::boxed(root, "dentry-state", SystemReader::dentry_state, |s, v| {
            s.dentry = Some(v)
        }),
        SystemCollector::boxed(root, "interrupts", SystemReader::interrupts, |s, v| {
            s.interrupts = Some(v)
        }),
        SystemCollector::boxed(root, "softirqs", SystemReader::softirqs, |s, v| {
            s.softirqs = Some(v)
        }),
        SystemCollector::boxed(
            root,
            "pressure.cpu",
            |r| r.pressure(PressureResource::Cpu),
            |s, v| s.pressure.cpu = Some(v),
        ),
        SystemCollector::boxed(
            root,
            "pressure.memory",
            |r| r.pressure(PressureResource::Memory),
            |s, v| s.pressure.memory = Some(v),
        ),
        SystemCollector::boxed(
            root,
            "pressure.io",
            |r| r.pressure(PressureResource::Io),
            |s, v| s.pressure.io = Some(v),
        ),
        SystemCollector::boxed(
            root,
            "pressure.irq",
            |r| r.pressure(PressureResource::Irq),
            |s, v| s.pressure.irq = Some(v),
        ),
        SystemCollector::boxed(root, "diskstats", SystemReader::diskstats, |s, v| {
            s.diskstats = Some(v)
        }),
        SystemCollector::boxed(root, "netdev", SystemReader::net_dev, |s, v| {
            s.netdev = Some(v)
        }),
        Box::new(CgroupCollector::new(root, cfg.cgroup_settings_period)),
        Box::new(ProcessCollector::with_redactor(root, cfg.cmdlines.clone())),
        Box::new(KmsgCollector::new(root)),
    ])
}

/// Settings of the collectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectConfig {
    /// How often /proc/slabinfo is read (at most once per interval).
    pub slabinfo_period: Duration,
    /// How often a cgroup's settings (CPU quota, period, burst, shares or weight; memory
    /// limit, high, low, min) are read again; counters are read every interval.
    pub cgroup_settings_period: Duration,
    /// What of each command line is kept: its secrets masked, or none at all.
    pub cmdlines: std::sync::Arc<Redactor>,
}

/// Default [`CollectConfig::slabinfo_period`]: 10 s. Each read of /proc/slabinfo walks every
/// cache's partial-slab lists under their spinlock with interrupts off
/// (count_partial_free_approx): read every second it was 9–15% of the recorder's CPU here, and
/// on a host with a bloated dentry cache it is itself a source of jitter. Slab size per second
/// stays visible through meminfo (Slab, SReclaimable) and the dentry count through dentry-state.
pub const DEFAULT_SLABINFO_PERIOD: Duration = Duration::from_secs(10);

/// Default [`CollectConfig::cgroup_settings_period`]: 10 s. Settings are 5 of the 12 files of
/// a v1 cgroup and 7 of the 17 of a v2 one, and they change only when someone changes them. A
/// cgroup is read whole when it first appears and every interval for its first 10 s (a
/// runtime writes the limits after creating the directory), and again when its directory is
/// replaced, its controllers change or its memory usage is over the limit held; a change to a
/// long-lived cgroup's limit shows within the period.
pub const DEFAULT_CGROUP_SETTINGS_PERIOD: Duration = Duration::from_secs(10);

impl Default for CollectConfig {
    fn default() -> Self {
        CollectConfig {
            slabinfo_period: DEFAULT_SLABINFO_PERIOD,
            cgroup_settings_period: DEFAULT_CGROUP_SETTINGS_PERIOD,
            cmdlines: Default::default(),
        }
    }
}

/// Every cgroup of every hierarchy. Discovery (mountinfo) is retried once a minute when it
/// fails, e.g. when cgroupfs is mounted after the recorder started.
pub struct CgroupCollector {
    root: Root,
    reader: Option<CgroupReader>,
    retry_in: u32,
    settings_period: Duration,
}

impl CgroupCollector {
    /// A collector of the cgroup hierarchies mounted under `root`, reading each cgroup's
    /// settings every `settings_period` (`ZERO`: every interval).
    pub fn new(root: &Root, settings_period: Duration) -> Self {
        CgroupCollector {
            root: root.clone(),
            reader: None,
            retry_in: 0,
            settings_period,
        }
    }
}

impl Collector for CgroupCollector {
    fn name(&self) -> &'static str {
        "cgroups"
    }

    fn collect(&mut self, sample: &mut Sample, notes: &mut Notes) {
        if self.reader.is_none() {
            if self.retry_in > 0 {
                self.retry_in -= 1;
                return;
            }
            let config = CgroupReaderConfig {
                settings_period: self.settings_period,
                ..CgroupReaderConfig::default()
            };
            let reader = CgroupReader::with_config(self.root.clone(), config);
            self.reader = notes.handle("cgroups", sample, reader);
            match &self.reader {
                None => self.retry_in = 60,
                Some(r) => {
                    let v1 = r
                        .hierarchies()
                        .filter(|h| h.version == CgroupVersion::V1)
                        .count();
                    let v2 = r
                        .hierarchies()
                        .filter(|h| h.version == CgroupVersion::V2)
                        .count();
                    if v1 + v2 == 0 {
                        notes.once("cgroups:none", || "cgroups: no cgroup hierarchy is mounted; per-cgroup data is not collected".into());
                    } else if v2 == 0 {
                        notes.once("cgroups:v1only", || format!("cgroups: cgroup v1 only ({v1} hierarchies); no per-cgroup pressure (PSI needs cgroup v2)"));
                    }
                }
            }
        }
        let Some(r) = self.reader.as_mut() else {
            return;
        };
        // Half an interval of slack, as for the collectors' own periods.
        let cgs = r.read_at(sample.mono_ns, sample.interval_ns / 2);
        let w = r.last_walk();
        if w.skipped_limit > 0 || w.skipped_depth > 0 {
            let (l, d) = (w.skipped_limit, w.skipped_depth);
            notes.once("cgroups:bounded", || {
                format!("cgroups: walk bounded: {l} cgroups skipped over the count limit, {d} over the depth limit")
            });
        }
        sample.cgroups = Some(cgs);
    }
}

/// Every process under /proc.
pub struct ProcessCollector {
    reader: ProcessReader,
    out: Vec<jitterscope_sources::process::Process>,
}

impl ProcessCollector {
    /// A collector of `<root>/proc/<pid>`.
    pub fn new(root: &Root) -> Self {
        Self::with_redactor(root, Default::default())
    }

    /// A collector of `<root>/proc/<pid>` that keeps command lines as `r` says.
    pub fn with_redactor(root: &Root, r: std::sync::Arc<Redactor>) -> Self {
        let mut reader = ProcessReader::new(root, default_fd_budget());
        reader.set_redactor(r);
        ProcessCollector {
            reader,
            out: Vec::new(),
        }
    }
}

impl Collector for ProcessCollector {
    fn name(&self) -> &'static str {
        "processes"
    }

    fn collect(&mut self, sample: &mut Sample, notes: &mut Notes) {
        // The stat collector ran first in this sample: its fork counter tells whether /proc
        // needs listing at all.
        let forks = sample.stat.as_ref().and_then(|s| s.forks);
        let r = self.reader.scan(&mut self.out, forks);
        if let Some(stats) = notes.handle("processes", sample, r) {
            sample.processes = Some(std::mem::take(&mut self.out));
            sample.process_scan = Some(stats);
        }
    }
}

/// The OOM killer's reports from the kernel log, read from where the ring ended at start.
/// Opening is retried once a minute when it fails (no /dev/kmsg in a container, or no
/// permission: `kernel.dmesg_restrict` needs CAP_SYSLOG).
pub struct KmsgCollector {
    root: Root,
    reader: Option<KmsgReader>,
    retry_at: u64,
}

impl KmsgCollector {
    /// A collector of `<root>/dev/kmsg`.
    pub fn new(root: &Root) -> Self {
        KmsgCollector {
            root: root.clone(),
            reader: None,
            retry_at: 0,
        }
    }
}

impl Collector for KmsgCollector {
    fn name(&self) -> &'static str {
        "kmsg"
    }

    fn collect(&mut self, sample: &mut Sample, notes: &mut Notes) {
        if self.reader.is_none() && sample.mono_ns >= self.retry_at {
            self.retry_at = sample.mono_ns + 60_000_000_000;
            self.reader = notes.handle("kmsg", sample, KmsgReader::open(&self.root));
        }
        if let Some(r) = self.reader.as_mut() {
            sample.oom_kills = Some(r.read_ooms());
        }
    }
}
