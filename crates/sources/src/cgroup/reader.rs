//! The walking reader: every cgroup directory of every collected hierarchy, each interval.
//!
//! Cost is what matters here (a lab scenario alone creates 2000 memcgs), so:
//! - which files exist is decided per hierarchy, not per directory: v1 optional files
//!   (`cpu.cfs_burst_us`, `memory.oom_control`) are probed once at the hierarchy root; v2 controller
//!   files are read only where the parent's `cgroup.subtree_control` enables that controller
//!   (read once per directory that has children); files the root never has are not tried there;
//!   a v2 file that turns out absent next to a present sibling (`cpu.max.burst` before 5.14,
//!   `memory.swap.current` without swap accounting) is not tried again, nor is the root's
//!   `io.stat` once found absent (kernels before 5.x have none there);
//! - files that repeat what another file already says are not read (v1 `memory.memsw.*`:
//!   swap is the `swap` key of `memory.stat` when swap accounting is on);
//! - one file buffer and one path buffer are reused for the whole walk; each directory is
//!   opened once, relative to its parent, and its files relative to it, and it is listed only
//!   when cgroupfs's link count says it has subdirectories ([`dirfd`]);
//! - a cgroup removed between listing and reading (every file missing) is skipped and counted,
//!   never an error for the walk; other per-file errors leave the field `None` and are counted;
//! - settings (quota, period, burst, shares/weight, memory limits and protections: 5 of a v1
//!   cgroup's 12 files, 7 of a v2 cgroup's 17) are read again only every
//!   [`CgroupReaderConfig::settings_period`] and carried in between (see [`Settings`]).
//!
//! Records are merged by path: each hierarchy's directory at the same relative path becomes one
//! [`Cgroup`]. Hierarchies are walked v1 first, and a value present from two hierarchies (CPU
//! usage on hybrid hosts: v1 `cpuacct.usage` and v2 `cpu.stat`) keeps the v1 one, which is
//! ns-precise and belongs to the hierarchy that enforces the quota.

use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::dirfd;
use super::mount::{discover, CgroupVersion, Hierarchy};
use super::parse::{
    parse_cfs_quota, parse_cpu_max, parse_cpu_stat, parse_cpuacct_stat, parse_io_stat, parse_keyed,
    parse_max_or_u64, parse_oom_control, parse_single, parse_v1_limit, CpuMax, CpuStatFile,
};
use super::{identify, Cgroup, CgroupPressure, CpuStats, IoStats, MemoryStats};
use crate::fileio::{fields, ParseError, ReadError, Root};
use crate::system::pressure::parse_pressure;

/// Bounds of one walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupReaderConfig {
    /// Directories deeper than this below a hierarchy's mount are not entered (root = 0).
    pub max_depth: usize,
    /// At most this many directories are read per hierarchy per walk.
    pub max_cgroups: usize,
    /// A cgroup's settings (limits, weights) are read again this long after they were last
    /// read; in between the walk carries them. `ZERO`: every walk reads them.
    pub settings_period: Duration,
}

impl Default for CgroupReaderConfig {
    fn default() -> Self {
        CgroupReaderConfig {
            max_depth: 32,
            max_cgroups: 10_000,
            settings_period: Duration::ZERO,
        }
    }
}

/// What the last walk did, for the recorder's self-metrics.
#[derive(Debug, Default)]
pub struct WalkStats {
    /// Directories read, summed over hierarchies.
    pub dirs_read: usize,
    /// Merged records returned.
    pub cgroups: usize,
    /// Directories not entered because of `max_depth` (their subtrees are not counted).
    pub skipped_depth: usize,
    /// Directories not entered because of `max_cgroups` (their subtrees are not counted).
    pub skipped_limit: usize,
    /// Directories that vanished between listing and reading.
    pub vanished: usize,
    /// Files that failed for a reason other than being missing (permission, parse).
    pub read_errors: usize,
    /// Directories whose settings were read in this walk (the others' were carried).
    pub settings_read: usize,
    /// The first such failure, for the log.
    pub first_error: Option<ReadError>,
}

/// The controllers whose files the reader collects, as bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Ctl(u8);

impl Ctl {
    const CPU: u8 = 1;
    const CPUACCT: u8 = 2;
    const MEMORY: u8 = 4;
    const PIDS: u8 = 8;
    /// v2 only: the v1 blkio hierarchy is not walked.
    const IO: u8 = 16;

    fn from_names<'a>(names: impl Iterator<Item = &'a [u8]>) -> Ctl {
        let mut c = 0;
        for n in names {
            c |= match n {
                b"cpu" => Ctl::CPU,
                b"cpuacct" => Ctl::CPUACCT,
                b"memory" => Ctl::MEMORY,
                b"pids" => Ctl::PIDS,
                b"io" => Ctl::IO,
                _ => 0,
            };
        }
        Ctl(c)
    }

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// One hierarchy and what to read in it, decided once.
#[derive(Debug)]
struct Plan {
    hierarchy: Hierarchy,
    /// The mount point resolved under the reader's root.
    dir: PathBuf,
    /// v1: controllers bound here that we collect; v2: controllers available at the root.
    ctl: Ctl,
    /// v1 `cpu.cfs_burst_us` exists (5.14+).
    v1_burst: bool,
    /// v1 `memory.oom_control` exists.
    v1_oom_control: bool,
    /// v2 `*.pressure` exist (PSI compiled in and enabled).
    v2_pressure: bool,
    /// v2 `cpu.max.burst` not yet found absent.
    v2_burst: bool,
    /// v2 `memory.swap.current` not yet found absent.
    v2_swap: bool,
    /// v2 `io.stat` of the root cgroup not yet found absent.
    v2_io_root: bool,
    /// Settings last read, by cgroup path (relative to the mount, as `Walk::rel`).
    settings: HashMap<String, Held>,
    /// The mount is cgroupfs, whose directory link counts say whether a directory has
    /// subdirectories ([`dirfd::is_leaf`]); elsewhere (a recorded tree) every one is listed.
    leaf_by_nlink: bool,
}

/// A cgroup's settings: the files that say what it may use rather than what it used. They
/// change when someone changes them (an operator, a runtime resizing a container), not as the
/// cgroup runs, so the walk reads them every [`CgroupReaderConfig::settings_period`] instead of
/// every interval. A value recorded between two reads is the last one read, at most one period
/// old. Fields are what [`Walk::get`] returned: `None` for a file that is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Settings {
    /// v1 `cpu.cfs_quota_us` (inner `None`: unlimited).
    quota: Option<Option<u64>>,
    /// v1 `cpu.cfs_period_us`.
    period: Option<u64>,
    /// v1 `cpu.cfs_burst_us`, v2 `cpu.max.burst`.
    burst: Option<u64>,
    /// v1 `cpu.shares`.
    shares: Option<u64>,
    /// v2 `cpu.max`.
    cpu_max: Option<CpuMax>,
    /// v2 `cpu.weight`.
    weight: Option<u64>,
    /// v1 `memory.limit_in_bytes`, v2 `memory.max` (inner `None`: unlimited).
    limit: Option<Option<u64>>,
    /// v2 `memory.high`.
    high: Option<Option<u64>>,
    /// v2 `memory.low`.
    low: Option<u64>,
    /// v2 `memory.min`.
    min: Option<u64>,
    /// A memory settings file was there when they were read (read, or failing other than as
    /// missing), which makes the record's memory part present as any memory file does.
    memory_found: bool,
}

/// How long a cgroup counts as new: its settings are read every walk for this long (or the
/// settings period, if shorter) after it is first seen. Runtimes write a container's limits
/// within moments of creating its cgroup.
const YOUNG_NS: u64 = 10_000_000_000;

/// A memory usage above the memory limit held: the limit was raised since it was read (the
/// kernel keeps usage under the limit in force), and a usage-of-limit over 100% would follow.
fn over_limit(usage: Option<u64>, held: &Settings) -> bool {
    matches!((usage, held.limit), (Some(u), Some(Some(l))) if u > l)
}

/// Settings held for one cgroup directory.
#[derive(Debug)]
struct Held {
    values: Settings,
    /// Inode of the directory they were read from: a cgroup removed and created again at the
    /// same path (a restarted service) is a new cgroup whose settings are read at once.
    ino: u64,
    /// The controllers they were read for (v2: what the parent enables, which can change).
    ctl: Ctl,
    /// When the directory was first seen. A young cgroup's settings are read every walk for
    /// [`YOUNG_NS`] (at most a period): runtimes create the directory first and write its
    /// limits after, so the first read may see the defaults.
    first_seen_ns: u64,
    /// When they are read again.
    due_ns: u64,
    /// Walk that last saw the directory; the others' entries are dropped after each walk.
    walk: u64,
}

/// Where in its period a cgroup's settings are read again, so that a host's thousands of
/// cgroups seen at the same first walk do not all come due at the same later one.
fn stagger(path: &str, period_ns: u64) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let h = BuildHasherDefault::<DefaultHasher>::default().hash_one(path);
    h % period_ns.max(1)
}

impl Plan {
    fn new(root: &Root, hierarchy: Hierarchy) -> Option<Plan> {
        let dir = root.path(&hierarchy.mount_point);
        let names = hierarchy.controllers.iter().map(|s| s.as_bytes());
        let mut ctl = Ctl::from_names(names);
        if hierarchy.version == CgroupVersion::V1 {
            // Other v1 hierarchies (pids, blkio, cpuset...) would each cost a full walk for
            // data not collected yet.
            ctl.0 &= Ctl::CPU | Ctl::CPUACCT | Ctl::MEMORY;
            if ctl == Ctl::default() {
                return None;
            }
        }
        let exists = |f: &str| dir.join(f).exists();
        Some(Plan {
            v1_burst: ctl.has(Ctl::CPU) && exists("cpu.cfs_burst_us"),
            v1_oom_control: ctl.has(Ctl::MEMORY) && exists("memory.oom_control"),
            v2_pressure: hierarchy.version == CgroupVersion::V2 && exists("cpu.pressure"),
            v2_burst: true,
            v2_swap: true,
            v2_io_root: true,
            settings: HashMap::new(),
            leaf_by_nlink: dirfd::open_dir(&dir).is_ok_and(|d| dirfd::on_cgroupfs(d.as_fd())),
            ctl,
            dir,
            hierarchy,
        })
    }
}

/// Reads every cgroup of the cpu, cpuacct and memory v1 hierarchies and of every v2 hierarchy.
#[derive(Debug)]
pub struct CgroupReader {
    root: Root,
    config: CgroupReaderConfig,
    plans: Vec<Plan>,
    buf: Vec<u8>,
    dir: PathBuf,
    rel: String,
    stats: WalkStats,
    names: super::names::NameCache,
    /// Walks so far.
    walks: u64,
    /// Clock of [`read`](Self::read).
    epoch: Instant,
}

impl CgroupReader {
    /// A reader over the hierarchies mounted under `root`, with default bounds.
    pub fn new(root: Root) -> Result<Self, ReadError> {
        Self::with_config(root, CgroupReaderConfig::default())
    }

    /// A reader with explicit bounds.
    pub fn with_config(root: Root, config: CgroupReaderConfig) -> Result<Self, ReadError> {
        let mut r = CgroupReader {
            names: super::names::NameCache::new(root.clone()),
            root,
            config,
            plans: Vec::new(),
            buf: Vec::with_capacity(4096),
            dir: PathBuf::new(),
            rel: String::new(),
            stats: WalkStats::default(),
            walks: 0,
            epoch: Instant::now(),
        };
        r.rediscover()?;
        Ok(r)
    }

    /// Re-reads mountinfo (hierarchies are mounted at boot and rarely change, so the reader
    /// does not pay for this every interval).
    pub fn rediscover(&mut self) -> Result<(), ReadError> {
        let mut plans: Vec<Plan> = discover(&self.root)?
            .into_iter()
            .filter_map(|h| Plan::new(&self.root, h))
            .collect();
        // v1 first: merging keeps the first value, and v1's are the precise ones.
        plans.sort_by_key(|p| p.hierarchy.version);
        self.plans = plans;
        Ok(())
    }

    /// The hierarchies walked, v1 first.
    pub fn hierarchies(&self) -> impl Iterator<Item = &Hierarchy> {
        self.plans.iter().map(|p| &p.hierarchy)
    }

    /// What the last [`read`](Self::read) did.
    pub fn last_walk(&self) -> &WalkStats {
        &self.stats
    }

    /// Whether `memory.swap.current` is still tried in some v2 hierarchy.
    #[cfg(test)]
    pub(super) fn plans_v2_swap(&self) -> bool {
        self.plans
            .iter()
            .any(|p| p.hierarchy.version == CgroupVersion::V2 && p.v2_swap)
    }

    /// Whether the root's `io.stat` is still tried in some v2 hierarchy.
    #[cfg(test)]
    pub(super) fn plans_v2_io_root(&self) -> bool {
        self.plans
            .iter()
            .any(|p| p.hierarchy.version == CgroupVersion::V2 && p.v2_io_root)
    }

    /// Walks every hierarchy and returns one record per cgroup path, sorted by path. Settings
    /// come due by the time since this reader was made.
    pub fn read(&mut self) -> Vec<Cgroup> {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.read_at(now, 0)
    }

    /// [`read`](Self::read) at monotonic time `now_ns`: settings due up to `slack_ns` later are
    /// read now, so that a period of 10 s at 1 s intervals is every 10th walk even when a
    /// wake-up is a little early.
    pub fn read_at(&mut self, now_ns: u64, slack_ns: u64) -> Vec<Cgroup> {
        self.stats = WalkStats::default();
        self.walks += 1;
        let clock = Clock {
            now_ns,
            slack_ns,
            period_ns: u64::try_from(self.config.settings_period.as_nanos()).unwrap_or(u64::MAX),
            walk: self.walks,
        };
        let mut out = Vec::new();
        let mut dir = std::mem::take(&mut self.dir);
        let mut rel = std::mem::take(&mut self.rel);
        for plan in &mut self.plans {
            dir.clear();
            dir.push(&plan.dir);
            rel.clear();
            rel.push_str(&plan.hierarchy.mount_root);
            let ctl = plan.ctl;
            let fd = match dirfd::open_dir(&dir) {
                Ok(fd) => fd,
                Err(_) => {
                    // As a directory whose files are all missing: the mount went away.
                    self.stats.dirs_read += 1;
                    self.stats.vanished += 1;
                    continue;
                }
            };
            let mut w = Walk {
                plan,
                fd: Some(fd),
                kids: Vec::new(),
                clock,
                buf: &mut self.buf,
                stats: &mut self.stats,
                config: &self.config,
                out: &mut out,
                dir: &mut dir,
                rel: &mut rel,
                visited: 0,
                found: 0,
                last_missing: false,
            };
            w.visit(0, ctl, 0);
            plan.settings.retain(|_, h| h.walk == clock.walk);
        }
        self.dir = dir;
        self.rel = rel;

        // Stable: for equal paths the v1 partial records stay ahead of the v2 ones.
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out.dedup_by(|later, first| {
            if later.path != first.path {
                return false;
            }
            merge(first, std::mem::take(later));
            true
        });
        for c in &mut out {
            c.identity = identify(&c.path);
        }
        self.names.fill(out.iter_mut().map(|c| &mut c.identity));
        self.stats.cgroups = out.len();
        out
    }
}

/// The time of a walk, for settings.
#[derive(Debug, Clone, Copy)]
struct Clock {
    now_ns: u64,
    slack_ns: u64,
    period_ns: u64,
    walk: u64,
}

/// State of one hierarchy's walk.
struct Walk<'a> {
    plan: &'a mut Plan,
    /// The directory being read (`dir`), opened.
    fd: Option<OwnedFd>,
    /// Spare list of subdirectories, for the next directory listed.
    kids: Vec<(CString, u64)>,
    clock: Clock,
    buf: &'a mut Vec<u8>,
    stats: &'a mut WalkStats,
    config: &'a CgroupReaderConfig,
    out: &'a mut Vec<Cgroup>,
    dir: &'a mut PathBuf,
    rel: &'a mut String,
    visited: usize,
    /// Files read successfully in the current directory.
    found: usize,
    /// The last `get` found its file missing.
    last_missing: bool,
}

impl Walk<'_> {
    /// Reads the directory at `self.dir` (open as `self.fd`; cgroup path `self.rel`, inode
    /// `ino`, 0 for the hierarchy's root) with controllers `ctl`, then its children.
    fn visit(&mut self, depth: usize, ctl: Ctl, ino: u64) {
        self.visited += 1;
        self.stats.dirs_read += 1;
        self.found = 0;
        let rec = match self.plan.hierarchy.version {
            CgroupVersion::V1 => self.read_v1(ctl, ino),
            CgroupVersion::V2 => self.read_v2(ctl, depth == 0, ino),
        };
        if self.found == 0 {
            // Every file missing: the directory was removed after it was listed.
            self.stats.vanished += 1;
            return;
        }
        self.out.push(rec);

        let Some(fd) = self.fd.as_ref() else {
            return;
        };
        if self.plan.leaf_by_nlink && dirfd::is_leaf(fd.as_fd()) {
            return;
        }
        let mut kids = std::mem::take(&mut self.kids);
        if let Err(source) = dirfd::subdirs(fd.as_fd(), &mut kids) {
            self.kids = kids;
            self.stats.read_errors += 1;
            let path = self.dir.clone();
            self.stats
                .first_error
                .get_or_insert(ReadError::Io { path, source });
            return;
        }
        let mut child_ctl = None;
        for (name, child_ino) in kids.drain(..) {
            if depth + 1 > self.config.max_depth {
                self.stats.skipped_depth += 1;
                continue;
            }
            if self.visited >= self.config.max_cgroups {
                self.stats.skipped_limit += 1;
                continue;
            }
            let ctl = *child_ctl.get_or_insert_with(|| self.children_ctl(ctl));
            let os_name = OsStr::from_bytes(name.to_bytes());
            self.dir.push(os_name);
            let opened = match self.fd.as_ref() {
                Some(fd) => dirfd::open_subdir(fd.as_fd(), &name),
                None => Err(std::io::ErrorKind::NotFound.into()),
            };
            match opened {
                Ok(child) => {
                    let rel_len = self.rel.len();
                    if !self.rel.ends_with('/') {
                        self.rel.push('/');
                    }
                    self.rel.push_str(&os_name.to_string_lossy());
                    let parent = self.fd.replace(child);
                    self.visit(depth + 1, ctl, child_ino);
                    self.fd = parent;
                    self.rel.truncate(rel_len);
                }
                Err(source) => {
                    self.visited += 1;
                    self.stats.dirs_read += 1;
                    let e = ReadError::Io {
                        path: self.dir.clone(),
                        source,
                    };
                    if e.is_missing() {
                        // Removed after it was listed.
                        self.stats.vanished += 1;
                    } else {
                        self.stats.read_errors += 1;
                        self.stats.first_error.get_or_insert(e);
                    }
                }
            }
            self.dir.pop();
        }
        if self.kids.capacity() < kids.capacity() {
            self.kids = kids;
        }
    }

    /// The controllers whose files the children of the current directory have.
    fn children_ctl(&mut self, ctl: Ctl) -> Ctl {
        match self.plan.hierarchy.version {
            CgroupVersion::V1 => ctl,
            CgroupVersion::V2 => {
                let enabled = self
                    .get(c"cgroup.subtree_control", |b| {
                        Ok(Ctl::from_names(fields(b)))
                    })
                    .unwrap_or_default();
                Ctl(enabled.0 & self.plan.ctl.0)
            }
        }
    }

    /// Reads one file of the current directory; missing → `None` (noted in `last_missing`),
    /// any other failure → `None` and counted.
    fn get<T>(
        &mut self,
        name: &CStr,
        parse: impl FnOnce(&[u8]) -> Result<T, ParseError>,
    ) -> Option<T> {
        let read = match self.fd.as_ref() {
            Some(fd) => dirfd::read_file(fd.as_fd(), name, self.buf),
            None => Err(std::io::ErrorKind::NotFound.into()),
        };
        let path = || self.dir.join(OsStr::from_bytes(name.to_bytes()));
        let r = match read {
            Ok(()) => parse(self.buf).map_err(|source| ReadError::Parse {
                path: path(),
                source,
            }),
            Err(source) => Err(ReadError::Io {
                path: path(),
                source,
            }),
        };
        self.last_missing = false;
        match r {
            Ok(v) => {
                self.found += 1;
                Some(v)
            }
            Err(e) if e.is_missing() => {
                self.last_missing = true;
                None
            }
            Err(e) => {
                // The file exists, so the directory did not vanish.
                self.found += 1;
                self.stats.read_errors += 1;
                self.stats.first_error.get_or_insert(e);
                None
            }
        }
    }

    /// This directory's settings: read with `read` when they are due or `stale` says the ones
    /// held cannot be right any more, else the ones held.
    fn settings(
        &mut self,
        ino: u64,
        ctl: Ctl,
        stale: impl FnOnce(&Settings) -> bool,
        read: impl FnOnce(&mut Self) -> Settings,
    ) -> Settings {
        let c = self.clock;
        if c.period_ns == 0 {
            self.stats.settings_read += 1;
            return read(self);
        }
        let due = match self.plan.settings.get_mut(self.rel.as_str()) {
            Some(h) if h.ino == ino && h.ctl == ctl => {
                h.walk = c.walk;
                let young_ns = c.period_ns.min(YOUNG_NS);
                let young = c.now_ns < h.first_seen_ns.saturating_add(young_ns);
                let due = c.now_ns.saturating_add(c.slack_ns) >= h.due_ns;
                if !young && !due && !stale(&h.values) {
                    return h.values.clone();
                }
                true
            }
            _ => false,
        };
        self.stats.settings_read += 1;
        let values = read(self);
        if due {
            if let Some(h) = self.plan.settings.get_mut(self.rel.as_str()) {
                h.values = values.clone();
                if c.now_ns.saturating_add(c.slack_ns) >= h.due_ns {
                    h.due_ns = c.now_ns.saturating_add(c.period_ns);
                }
            }
        } else {
            // First seen (or the same path is a new directory): read whole every walk while
            // young, then at a point of the next period that differs from cgroup to cgroup.
            let first = c.now_ns.saturating_add(c.period_ns.min(YOUNG_NS));
            self.plan.settings.insert(
                self.rel.clone(),
                Held {
                    values: values.clone(),
                    ino,
                    ctl,
                    first_seen_ns: c.now_ns,
                    due_ns: first.saturating_add(stagger(self.rel, c.period_ns)),
                    walk: c.walk,
                },
            );
        }
        values
    }

    /// The memory usage (file `usage_file`, where the memory controller is on), whether that
    /// file was there, and the settings. Usage is read first: above the limit held, the limit
    /// was raised since, and the settings are read again.
    fn usage_and_settings(
        &mut self,
        ino: u64,
        ctl: Ctl,
        usage_file: &CStr,
        read: impl FnOnce(&mut Self) -> Settings,
    ) -> (Option<u64>, bool, Settings) {
        let before = self.found;
        let usage = match ctl.has(Ctl::MEMORY) {
            true => self.get(usage_file, parse_single),
            false => None,
        };
        let found = self.found > before;
        let set = self.settings(ino, ctl, |held| over_limit(usage, held), read);
        (usage, found, set)
    }

    fn read_settings_v1(&mut self, ctl: Ctl) -> Settings {
        let mut s = Settings::default();
        if ctl.has(Ctl::CPU) {
            s.quota = self.get(c"cpu.cfs_quota_us", parse_cfs_quota);
            s.period = self.get(c"cpu.cfs_period_us", parse_single);
            if self.plan.v1_burst {
                s.burst = self.get(c"cpu.cfs_burst_us", parse_single);
            }
            s.shares = self.get(c"cpu.shares", parse_single);
        }
        if ctl.has(Ctl::MEMORY) {
            let before = self.found;
            s.limit = self.get(c"memory.limit_in_bytes", parse_v1_limit);
            s.memory_found = self.found > before;
        }
        s
    }

    fn read_settings_v2(&mut self, ctl: Ctl, is_root: bool) -> Settings {
        let mut s = Settings::default();
        // Limits and weights are not on the root (CFTYPE_NOT_ON_ROOT).
        if is_root {
            return s;
        }
        if ctl.has(Ctl::CPU) {
            s.cpu_max = self.get(c"cpu.max", parse_cpu_max);
            if s.cpu_max.is_some() && self.plan.v2_burst {
                s.burst = self.get(c"cpu.max.burst", parse_single);
                self.plan.v2_burst = !self.last_missing;
            }
            s.weight = self.get(c"cpu.weight", parse_single);
        }
        if ctl.has(Ctl::MEMORY) {
            let before = self.found;
            s.limit = self.get(c"memory.max", parse_max_or_u64);
            s.high = self.get(c"memory.high", parse_max_or_u64);
            s.low = self.get(c"memory.low", parse_protection);
            s.min = self.get(c"memory.min", parse_protection);
            s.memory_found = self.found > before;
        }
        s
    }

    fn read_v1(&mut self, ctl: Ctl, ino: u64) -> Cgroup {
        let mut rec = Cgroup {
            path: self.rel.clone(),
            v1: true,
            ..Cgroup::default()
        };
        let mut cpu = CpuStats::default();
        let mut any_cpu = false;
        if ctl.has(Ctl::CPU) {
            if let Some(s) = self.get(c"cpu.stat", parse_cpu_stat) {
                set_throttling(&mut cpu, &s, CgroupVersion::V1);
                any_cpu = true;
            }
        }
        let (usage, usage_found, set) =
            self.usage_and_settings(ino, ctl, c"memory.usage_in_bytes", |w| {
                w.read_settings_v1(ctl)
            });
        if ctl.has(Ctl::CPU) {
            if let Some(q) = set.quota {
                cpu.quota_us = q;
                any_cpu = true;
            }
            cpu.period_us = set.period;
            cpu.burst_us = set.burst;
            cpu.shares = set.shares;
            any_cpu |= cpu.period_us.is_some() || cpu.shares.is_some();
        }
        if ctl.has(Ctl::CPUACCT) {
            cpu.usage_ns = self.get(c"cpuacct.usage", parse_single);
            if cpu.usage_ns.is_some() {
                cpu.usage_source = Some(CgroupVersion::V1);
            }
            if let Some(s) = self.get(c"cpuacct.stat", parse_cpuacct_stat) {
                cpu.user_ticks = Some(s.user_ticks);
                cpu.system_ticks = Some(s.system_ticks);
            }
            any_cpu |= cpu.usage_ns.is_some() || cpu.user_ticks.is_some();
        }
        if any_cpu {
            rec.cpu = Some(cpu);
        }
        if ctl.has(Ctl::MEMORY) {
            let before = self.found;
            let mut m = MemoryStats {
                usage_bytes: usage,
                limit_bytes: set.limit.flatten(),
                failcnt: self.get(c"memory.failcnt", parse_single),
                stat: self.get(c"memory.stat", parse_keyed).unwrap_or_default(),
                ..MemoryStats::default()
            };
            if self.plan.v1_oom_control {
                if let Some(o) = self.get(c"memory.oom_control", parse_oom_control) {
                    m.oom_kill = o.oom_kill;
                    m.under_oom = Some(o.under_oom);
                }
            }
            if self.found > before || usage_found || set.memory_found {
                rec.memory = Some(m);
            }
        }
        rec
    }

    fn read_v2(&mut self, ctl: Ctl, is_root: bool, ino: u64) -> Cgroup {
        let mut rec = Cgroup {
            path: self.rel.clone(),
            v2: true,
            ..Cgroup::default()
        };
        let mut cpu = CpuStats::default();
        let mut any_cpu = false;
        // cpu.stat's usage keys exist in every cgroup, with or without the cpu controller.
        if let Some(s) = self.get(c"cpu.stat", parse_cpu_stat) {
            if let Some(u) = s.usage_usec {
                cpu.usage_ns = Some(u.saturating_mul(1000));
                cpu.usage_source = Some(CgroupVersion::V2);
            }
            cpu.user_usec = s.user_usec;
            cpu.system_usec = s.system_usec;
            if s.nr_periods.is_some() {
                set_throttling(&mut cpu, &s, CgroupVersion::V2);
            }
            any_cpu = true;
        }
        let (usage, usage_found, set) = self.usage_and_settings(ino, ctl, c"memory.current", |w| {
            w.read_settings_v2(ctl, is_root)
        });
        if let Some(m) = &set.cpu_max {
            cpu.quota_us = m.quota_us;
            cpu.period_us = Some(m.period_us);
            any_cpu = true;
            cpu.burst_us = set.burst;
        }
        cpu.weight = set.weight;
        if any_cpu {
            rec.cpu = Some(cpu);
        }
        if ctl.has(Ctl::MEMORY) {
            let before = self.found;
            let mut m = MemoryStats {
                usage_bytes: usage,
                stat: self.get(c"memory.stat", parse_keyed).unwrap_or_default(),
                limit_bytes: set.limit.flatten(),
                high_bytes: set.high.flatten(),
                low_bytes: set.low,
                min_bytes: set.min,
                ..MemoryStats::default()
            };
            if !is_root {
                m.events = self.get(c"memory.events", parse_keyed).unwrap_or_default();
                if self.plan.v2_swap && m.usage_bytes.is_some() {
                    m.swap_bytes = self.get(c"memory.swap.current", parse_single);
                    self.plan.v2_swap = !self.last_missing;
                }
            }
            if self.found > before || usage_found || set.memory_found {
                rec.memory = Some(m);
            }
        }
        if ctl.has(Ctl::PIDS) && !is_root {
            rec.pids_current = self.get(c"pids.current", parse_single);
        }
        if ctl.has(Ctl::IO) {
            rec.io = self.read_io_stat(is_root);
        }
        if self.plan.v2_pressure {
            rec.pressure = CgroupPressure {
                cpu: self.get(c"cpu.pressure", parse_pressure),
                memory: self.get(c"memory.pressure", parse_pressure),
                io: self.get(c"io.pressure", parse_pressure),
            };
        }
        rec
    }

    /// v2 `io.stat`, summed over devices. Below the root the io controller's files exist
    /// wherever the parent enables it, which `ctl` already says, so a missing file there is a
    /// cgroup removed mid-walk (or the controller turned off since the parent's
    /// `cgroup.subtree_control` was read), never a reason to stop trying. The root lacks it on
    /// kernels before global root stats (5.x): found absent there once, it is not tried again.
    fn read_io_stat(&mut self, is_root: bool) -> Option<IoStats> {
        if is_root && !self.plan.v2_io_root {
            return None;
        }
        let io = self.get(c"io.stat", |b| parse_io_stat(b).map(|d| IoStats::sum(&d)));
        if is_root && self.last_missing {
            self.plan.v2_io_root = false;
        }
        io
    }
}

/// v2 `memory.low`/`memory.min`: `max` is full protection, so it reads as `u64::MAX` rather
/// than as the "no value" that `None` means for these fields.
fn parse_protection(b: &[u8]) -> Result<u64, ParseError> {
    parse_max_or_u64(b).map(|v| v.unwrap_or(u64::MAX))
}

/// Copies the throttling keys of a `cpu.stat`, normalising v2 µs to ns.
fn set_throttling(cpu: &mut CpuStats, s: &CpuStatFile, from: CgroupVersion) {
    let us_to_ns = |v: Option<u64>| v.map(|v| v.saturating_mul(1000));
    cpu.nr_periods = s.nr_periods;
    cpu.nr_throttled = s.nr_throttled;
    cpu.nr_bursts = s.nr_bursts;
    match from {
        CgroupVersion::V1 => {
            cpu.throttled_ns = s.throttled_time_ns;
            cpu.burst_ns = s.burst_time_ns;
        }
        CgroupVersion::V2 => {
            cpu.throttled_ns = us_to_ns(s.throttled_usec);
            cpu.burst_ns = us_to_ns(s.burst_usec);
        }
    }
    cpu.throttle_source = Some(from);
}

fn fill<T>(a: &mut Option<T>, b: Option<T>) {
    if a.is_none() {
        *a = b;
    }
}

/// Merges a later hierarchy's partial record into the first one: values already present win.
fn merge(into: &mut Cgroup, from: Cgroup) {
    into.v1 |= from.v1;
    into.v2 |= from.v2;
    match (&mut into.cpu, from.cpu) {
        (Some(a), Some(b)) => merge_cpu(a, b),
        (a @ None, b) => *a = b,
        (Some(_), None) => {}
    }
    match (&mut into.memory, from.memory) {
        (Some(a), Some(b)) => merge_memory(a, b),
        (a @ None, b) => *a = b,
        (Some(_), None) => {}
    }
    fill(&mut into.pressure.cpu, from.pressure.cpu);
    fill(&mut into.pressure.memory, from.pressure.memory);
    fill(&mut into.pressure.io, from.pressure.io);
    fill(&mut into.pids_current, from.pids_current);
    fill(&mut into.io, from.io);
}

fn merge_cpu(a: &mut CpuStats, b: CpuStats) {
    // Fields that come from one file move together, so a record never mixes versions' counters.
    if a.usage_ns.is_none() {
        a.usage_ns = b.usage_ns;
        a.usage_source = b.usage_source;
    }
    if a.throttle_source.is_none() {
        a.nr_periods = b.nr_periods;
        a.nr_throttled = b.nr_throttled;
        a.throttled_ns = b.throttled_ns;
        a.nr_bursts = b.nr_bursts;
        a.burst_ns = b.burst_ns;
        a.throttle_source = b.throttle_source;
    }
    fill(&mut a.user_ticks, b.user_ticks);
    fill(&mut a.system_ticks, b.system_ticks);
    fill(&mut a.user_usec, b.user_usec);
    fill(&mut a.system_usec, b.system_usec);
    if a.period_us.is_none() {
        a.quota_us = b.quota_us;
        a.period_us = b.period_us;
        a.burst_us = b.burst_us;
    }
    fill(&mut a.shares, b.shares);
    fill(&mut a.weight, b.weight);
}

fn merge_memory(a: &mut MemoryStats, b: MemoryStats) {
    if a.usage_bytes.is_none() {
        a.usage_bytes = b.usage_bytes;
        a.limit_bytes = b.limit_bytes;
    }
    fill(&mut a.high_bytes, b.high_bytes);
    fill(&mut a.low_bytes, b.low_bytes);
    fill(&mut a.min_bytes, b.min_bytes);
    fill(&mut a.swap_bytes, b.swap_bytes);
    fill(&mut a.failcnt, b.failcnt);
    if a.stat.is_empty() {
        a.stat = b.stat;
    }
    if a.events.is_empty() {
        a.events = b.events;
    }
    fill(&mut a.oom_kill, b.oom_kill);
    fill(&mut a.under_oom, b.under_oom);
}
