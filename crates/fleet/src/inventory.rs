//! The host inventory `record --clickhouse` pushes: what the host is (kernel, distribution,
//! cgroup layout, CPUs, memory) and what its long-running processes are made of: the libraries
//! the seeds' mechanisms live in (glibc, jemalloc, tcmalloc, mimalloc, NSS softokn, CPython)
//! with their versions, the environment settings their fixes depend on (`MALLOC_CONF`,
//! `NSS_SDB_USE_CACHE`...), worker recycling of gunicorn, uWSGI and celery, and the container
//! each runs in. It answers seed 5's "which hosts run jemalloc 5.x with immediate decay" and
//! case 1's "which processes load NSS softokn without `NSS_SDB_USE_CACHE`" across a fleet.
//!
//! Processes with the same make-up (executable, cgroup, libraries, settings) are one row with
//! a count, so 300 idle shells cost one row. Processes younger than [`MIN_AGE`] are left out:
//! a fork/exec churn would otherwise make every scan a new document. Only the allow-listed
//! variables of [`SETTINGS`] leave the host; command lines do not (they hold secrets), only
//! the worker-recycling options read from them.
//!
//! A scan reads each process's `stat`; its `maps` only when its virtual size changed since the
//! last scan (a `dlopen` maps more), and its `environ`, `cmdline`, `exe` and `cgroup` once per
//! process. Each library file's version is read once per file.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::io::Read;

use serde::Serialize;

use jitterscope_memleak::runtime::{python_version, version_in, worker_server};
use jitterscope_sources::cgroup::{
    cgroup_of_pid, discover, identify, CgroupVersion, Identity, NameCache,
};
use jitterscope_sources::process::{parse_pid_stat, PF_KTHREAD};
use jitterscope_sources::smaps::parse_smaps;
use jitterscope_sources::Root;

/// The hosts table: one row per inventory document.
pub const HOSTS: &str = "jitterscope_hosts";
/// The processes table: one row per group of alike processes of a document.
pub const INVENTORY: &str = "jitterscope_inventory";

/// Environment variables that leave the host: the settings the seeds' fixes are made of.
pub const SETTINGS: &[&str] = &[
    // jemalloc (unprefixed builds such as Debian's; Rust's tikv-jemallocator reads the prefixed
    // one), and its decay: seed 5.
    "MALLOC_CONF",
    "_RJEM_MALLOC_CONF",
    // glibc malloc's arenas, and its tunables.
    "MALLOC_ARENA_MAX",
    "GLIBC_TUNABLES",
    "TCMALLOC_RELEASE_RATE",
    "MIMALLOC_PURGE_DELAY",
    // NSS softokn's access probe: case 1.
    "NSS_SDB_USE_CACHE",
    "PYTHONMALLOC",
    // How an allocator got into a process it was not linked into.
    "LD_PRELOAD",
    "GUNICORN_CMD_ARGS",
];

/// Library files whose version is kept between scans (a host maps a few dozen; more means
/// upgrades replaced them, and the cache starts again).
const MAX_VERSIONS: usize = 512;

/// A process younger than this is not in the inventory (see the module's comment).
pub const MIN_AGE: std::time::Duration = std::time::Duration::from_secs(10);

/// What the host is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct HostFacts {
    /// `uname -r`.
    pub kernel: String,
    /// `PRETTY_NAME` of /etc/os-release.
    pub os: String,
    /// `v1`, `v2`, `hybrid` (v1 controllers and a v2 mount) or `none`.
    pub cgroup_layout: String,
    /// Online CPUs.
    pub cpus: u32,
    /// MemTotal, bytes.
    pub memory_bytes: u64,
}

/// The make-up of a group of alike processes. `None` library: not mapped; `Some("")`: mapped,
/// version unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Group {
    pub comm: String,
    pub exe: String,
    /// The memory cgroup (v1) or the unified one.
    pub cgroup: String,
    /// Container, pod or unit, as the rest of jitterscope names it.
    pub container: String,
    pub glibc: Option<String>,
    pub jemalloc: Option<String>,
    pub tcmalloc: Option<String>,
    pub mimalloc: Option<String>,
    pub softokn: Option<String>,
    pub python: Option<String>,
    /// jemalloc 5.x's effective `dirty_decay_ms` (0: purge at once, -1: never), from
    /// /etc/malloc.conf and `MALLOC_CONF`; its default 10000 when neither sets it. A
    /// `malloc_conf` compiled into the program is not read.
    pub jemalloc_dirty_decay_ms: Option<i64>,
    /// The [`SETTINGS`] present, sorted by name.
    pub env: Vec<(String, String)>,
    /// `gunicorn`, `uwsgi` or `celery`; empty otherwise.
    pub worker_server: String,
    /// The worker-recycling options on its command line or in `GUNICORN_CMD_ARGS`
    /// (`max-requests=1000`); empty when none is there (a config file is not read).
    pub worker_recycle: String,
}

/// One scan: the host and its groups of processes (with their pids).
#[derive(Debug, Clone, Default)]
pub struct Document {
    pub taken_ns: i64,
    pub host: HostFacts,
    pub groups: BTreeMap<Group, Vec<u32>>,
    /// Processes looked at (all, including the young and kernel threads).
    pub scanned: usize,
}

impl Document {
    /// What makes a document new: the host and the make-up of its groups (not their counts
    /// or pids, which change with every restart of a worker).
    pub fn key(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.host.hash(&mut h);
        for g in self.groups.keys() {
            g.hash(&mut h);
        }
        h.finish()
    }

    /// The row of the hosts table.
    pub fn host_row(&self, host: &str, version: &str) -> String {
        serde_json::json!({
            "host": host,
            "taken_ns": self.taken_ns,
            "kernel": self.host.kernel,
            "os": self.host.os,
            "cgroup_layout": self.host.cgroup_layout,
            "cpus": self.host.cpus,
            "memory_bytes": self.host.memory_bytes,
            "processes": self.groups.values().map(Vec::len).sum::<usize>(),
            "groups": self.groups.len(),
            "jitterscope_version": version,
        })
        .to_string()
    }

    /// The rows of the processes table, one per line.
    pub fn group_rows(&self, host: &str) -> String {
        let mut out = String::new();
        for (g, pids) in &self.groups {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            g.hash(&mut h);
            let row = serde_json::json!({
                "host": host,
                "taken_ns": self.taken_ns,
                "group_key": format!("{:016x}", h.finish()),
                "comm": g.comm,
                "exe": g.exe,
                "cgroup": g.cgroup,
                "container": g.container,
                "processes": pids.len(),
                "pids": pids.iter().take(16).collect::<Vec<_>>(),
                "glibc": g.glibc,
                "jemalloc": g.jemalloc,
                "tcmalloc": g.tcmalloc,
                "mimalloc": g.mimalloc,
                "softokn": g.softokn,
                "python": g.python,
                "jemalloc_dirty_decay_ms": g.jemalloc_dirty_decay_ms,
                "env_keys": g.env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                "env_values": g.env.iter().map(|(_, v)| v).collect::<Vec<_>>(),
                "worker_server": g.worker_server,
                "worker_recycle": g.worker_recycle,
            });
            out.push_str(&row.to_string());
            out.push('\n');
        }
        out
    }
}

/// What stays the same for the life of a process.
#[derive(Debug, Clone)]
struct Fixed {
    comm: String,
    exe: String,
    cgroup: String,
    env: Vec<(String, String)>,
    worker_server: String,
    worker_recycle: String,
}

struct Known {
    starttime: u64,
    vsize: u64,
    fixed: Fixed,
    group: Group,
}

/// Scans a host's processes, keeping what it read between scans.
pub struct Scanner {
    root: Root,
    procs: HashMap<u32, Known>,
    /// Version of each library file, by path and inode.
    versions: HashMap<(String, u64), Option<String>>,
    names: NameCache,
    labels: HashMap<String, String>,
    user_hz: u64,
    min_age_ticks: u64,
}

impl Scanner {
    pub fn new(root: Root) -> Scanner {
        // SAFETY: sysconf has no side effects.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let user_hz = if hz > 0 { hz as u64 } else { 100 };
        Scanner {
            names: NameCache::new(root.clone()),
            root,
            procs: HashMap::new(),
            versions: HashMap::new(),
            labels: HashMap::new(),
            user_hz,
            min_age_ticks: MIN_AGE.as_secs() * user_hz,
        }
    }

    /// Counts every process however young (for tests that start their programs just before).
    pub fn with_min_age(mut self, age: std::time::Duration) -> Scanner {
        self.min_age_ticks = (age.as_secs_f64() * self.user_hz as f64) as u64;
        self
    }

    /// The host's facts now.
    pub fn host(&self) -> HostFacts {
        let read = |p: &str| std::fs::read_to_string(self.root.path(p)).unwrap_or_default();
        let os = read("/etc/os-release")
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim().trim_matches('"').to_string())
            .unwrap_or_default();
        let (v1, v2) = discover(&self.root).map_or((0, 0), |hs| {
            let n = |v| hs.iter().filter(|h| h.version == v).count();
            (n(CgroupVersion::V1), n(CgroupVersion::V2))
        });
        let cgroup_layout = match (v1 > 0, v2 > 0) {
            (true, true) => "hybrid",
            (true, false) => "v1",
            (false, true) => "v2",
            (false, false) => "none",
        };
        let memory_bytes = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024);
        // SAFETY: sysconf has no side effects.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        HostFacts {
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            os,
            cgroup_layout: cgroup_layout.into(),
            cpus: cpus.max(1) as u32,
            memory_bytes,
        }
    }

    /// One scan of every process.
    pub fn scan(&mut self, taken_ns: i64) -> Document {
        let mut doc = Document {
            taken_ns,
            host: self.host(),
            ..Document::default()
        };
        let uptime_ticks = std::fs::read_to_string(self.root.path("/proc/uptime"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(u64::MAX, |s| (s * self.user_hz as f64) as u64);
        let pids: Vec<u32> = std::fs::read_dir(self.root.path("/proc"))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        doc.scanned = pids.len();
        let mut alive = HashMap::with_capacity(pids.len());
        let mut buf = Vec::new();
        for pid in pids {
            if let Some((k, g)) = self.process(pid, uptime_ticks, &mut buf) {
                doc.groups.entry(g).or_default().push(pid);
                alive.insert(pid, k);
            }
        }
        self.procs = alive;
        // The recorder runs for months while containers come and go: keep the names of the
        // cgroups still in use, and the versions of at most a few hundred library files.
        let live: std::collections::HashSet<&str> =
            doc.groups.keys().map(|g| g.cgroup.as_str()).collect();
        self.labels.retain(|cg, _| live.contains(cg.as_str()));
        if self.versions.len() > MAX_VERSIONS {
            self.versions.clear();
        }
        doc
    }

    /// One process: its group, or `None` for a kernel thread, a young or vanished process.
    fn process(&mut self, pid: u32, uptime: u64, buf: &mut Vec<u8>) -> Option<(Known, Group)> {
        let base = format!("/proc/{pid}");
        let stat = std::fs::read(self.root.path(format!("{base}/stat"))).ok()?;
        let st = parse_pid_stat(&stat).ok()?;
        if st.flags & PF_KTHREAD != 0 || st.vsize_bytes == 0 {
            return None;
        }
        if uptime.saturating_sub(st.starttime_ticks) < self.min_age_ticks {
            return None;
        }
        let known = self
            .procs
            .remove(&pid)
            .filter(|k| k.starttime == st.starttime_ticks);
        if let Some(k) = known {
            if k.vsize == st.vsize_bytes {
                let g = k.group.clone();
                return Some((k, g));
            }
            let group = self.group(pid, &k.fixed)?;
            return Some((
                Known {
                    vsize: st.vsize_bytes,
                    group: group.clone(),
                    ..k
                },
                group,
            ));
        }
        let fixed = self.fixed(pid, &st.comm, buf)?;
        let group = self.group(pid, &fixed)?;
        Some((
            Known {
                starttime: st.starttime_ticks,
                vsize: st.vsize_bytes,
                fixed,
                group: group.clone(),
            },
            group,
        ))
    }

    fn fixed(&mut self, pid: u32, comm: &str, buf: &mut Vec<u8>) -> Option<Fixed> {
        let base = format!("/proc/{pid}");
        let environ = std::fs::read(self.root.path(format!("{base}/environ"))).unwrap_or_default();
        let env = settings(&environ);
        let cmdline = std::fs::read(self.root.path(format!("{base}/cmdline"))).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|&c| c == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let joined = args.join(" ");
        let server = worker_server(&joined).map(|w| w.name.to_string());
        let recycle = server
            .as_ref()
            .map(|_| {
                let mut all = args.clone();
                if let Some((_, v)) = env.iter().find(|(k, _)| k == "GUNICORN_CMD_ARGS") {
                    all.extend(v.split_whitespace().map(str::to_string));
                }
                recycling(&all)
            })
            .unwrap_or_default();
        let exe = std::fs::read_link(self.root.path(format!("{base}/exe")))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cg = cgroup_of_pid(&self.root, pid, buf).ok()?;
        let cgroup = cg.for_memory().unwrap_or("/").to_string();
        Some(Fixed {
            comm: comm.to_string(),
            exe,
            cgroup,
            env,
            worker_server: server.unwrap_or_default(),
            worker_recycle: recycle,
        })
    }

    /// The group of a process from its mappings now; `None` when it vanished.
    fn group(&mut self, pid: u32, f: &Fixed) -> Option<Group> {
        let maps = std::fs::read(self.root.path(format!("/proc/{pid}/maps"))).ok()?;
        let maps = parse_smaps(&maps).ok()?;
        let mut libs: Vec<(&str, u64)> = maps
            .iter()
            .filter(|m| m.path.starts_with('/'))
            .map(|m| (m.path.as_str(), m.inode))
            .collect();
        libs.sort_unstable();
        libs.dedup();
        let file = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
        let mut find = |needle: &str, how: Version| -> Option<String> {
            let (path, inode) = libs.iter().find(|(p, _)| file(p).contains(needle))?;
            Some(self.version(pid, path, *inode, how))
        };
        let glibc = find("libc.so", Version::Glibc).or_else(|| find("libc-2.", Version::Glibc));
        let jemalloc = find("libjemalloc", Version::Jemalloc);
        let tcmalloc = find("libtcmalloc", Version::Tcmalloc);
        let mimalloc = find("libmimalloc", Version::Soname);
        let softokn = find("libsoftokn3", Version::Softokn);
        let paths: Vec<&str> = libs.iter().map(|(p, _)| *p).collect();
        let python = python_version(&f.exe, &paths);
        let jemalloc_dirty_decay_ms = jemalloc.as_deref().and_then(|v| {
            let major: u32 = v.split('.').next()?.parse().ok()?;
            (major >= 5).then(|| {
                let etc = std::fs::read_link(self.root.path("/etc/malloc.conf"))
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let env = f
                    .env
                    .iter()
                    .find(|(k, _)| k == "MALLOC_CONF")
                    .map_or("", |(_, v)| v.as_str());
                dirty_decay_ms(&[&etc, env])
            })
        });
        let container = self.label(&f.cgroup);
        Some(Group {
            comm: f.comm.clone(),
            exe: f.exe.clone(),
            cgroup: f.cgroup.clone(),
            container,
            glibc,
            jemalloc,
            tcmalloc,
            mimalloc,
            softokn,
            python,
            jemalloc_dirty_decay_ms,
            env: f.env.clone(),
            worker_server: f.worker_server.clone(),
            worker_recycle: f.worker_recycle.clone(),
        })
    }

    /// The container, pod or unit of a cgroup, named as the rest of jitterscope names it.
    fn label(&mut self, cgroup: &str) -> String {
        if let Some(l) = self.labels.get(cgroup) {
            return l.clone();
        }
        let mut id: Identity = identify(cgroup);
        self.names.fill(std::iter::once(&mut id));
        let l = id.label().unwrap_or_default();
        self.labels.insert(cgroup.to_string(), l.clone());
        l
    }

    /// A library file's version, read once per file: through the process's own root, so a
    /// container's library is the one read.
    fn version(&mut self, pid: u32, path: &str, inode: u64, how: Version) -> String {
        if let Some(v) = self.versions.get(&(path.to_string(), inode)) {
            return v.clone().unwrap_or_default();
        }
        let v = match how {
            Version::Soname => soname_version(path),
            _ => {
                let mut buf = Vec::new();
                let read = std::fs::File::open(self.root.path(format!("/proc/{pid}/root{path}")))
                    .and_then(|f| f.take(32 << 20).read_to_end(&mut buf));
                read.ok().and_then(|_| match how {
                    Version::Glibc => version_after(&buf, b"release version "),
                    Version::Jemalloc => version_in(&buf),
                    Version::Tcmalloc => version_after(&buf, b"gperftools "),
                    Version::Softokn => version_after(&buf, b"Version: NSS "),
                    Version::Soname => None,
                })
            }
        };
        self.versions.insert((path.to_string(), inode), v.clone());
        v.unwrap_or_default()
    }
}

/// Where a library keeps its version.
#[derive(Clone, Copy)]
enum Version {
    /// gnu_get_libc_version's banner: `... stable release version 2.36.`
    Glibc,
    /// `JEMALLOC_VERSION`: `5.3.0-0-g<40 hex>`.
    Jemalloc,
    /// gperftools' `TC_VERSION_STRING`: `gperftools 2.10`.
    Tcmalloc,
    /// NSS's version banner: `Version: NSS 3.87.1 Basic ECC`.
    Softokn,
    /// The file name's soname suffix: `libmimalloc.so.2.0`.
    Soname,
}

/// The dotted number right after the first `marker` in `buf` (`2.36`), without a trailing dot.
pub fn version_after(buf: &[u8], marker: &[u8]) -> Option<String> {
    let mut from = 0;
    while let Some(i) = buf
        .get(from..)?
        .windows(marker.len())
        .position(|w| w == marker)
    {
        let start = from + i + marker.len();
        let v: String = buf[start..]
            .iter()
            .take_while(|c| c.is_ascii_digit() || **c == b'.')
            .map(|&c| c as char)
            .take(32)
            .collect();
        let v = v.trim_end_matches('.');
        if v.contains('.') && v.starts_with(|c: char| c.is_ascii_digit()) {
            return Some(v.to_string());
        }
        from = start;
    }
    None
}

/// `2.0` of `/usr/lib/libmimalloc.so.2.0`.
fn soname_version(path: &str) -> Option<String> {
    let (_, v) = path.rsplit_once(".so.")?;
    (!v.is_empty() && v.bytes().all(|c| c.is_ascii_digit() || c == b'.')).then(|| v.to_string())
}

/// The [`SETTINGS`] of a NUL-separated environment block, sorted by name.
pub fn settings(environ: &[u8]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = environ
        .split(|&c| c == 0)
        .filter_map(|kv| {
            let kv = std::str::from_utf8(kv).ok()?;
            let (k, v) = kv.split_once('=')?;
            SETTINGS
                .contains(&k)
                .then(|| (k.to_string(), v.chars().take(512).collect()))
        })
        .collect();
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// Worker-recycling options among command-line arguments (`--max-requests 1000`,
/// `--max-requests=1000`), as `max-requests=1000`, joined by spaces.
pub fn recycling(args: &[String]) -> String {
    const OPTIONS: &[&str] = &[
        // gunicorn
        "max-requests",
        "max-requests-jitter",
        // uWSGI (also its short form of max-requests, -R)
        "max-requests-delta",
        "max-worker-lifetime",
        "reload-on-rss",
        // celery
        "max-tasks-per-child",
        "max-memory-per-child",
    ];
    let mut out = Vec::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let (name, inline) = match a.strip_prefix("--").map(|s| s.split_once('=')) {
            Some(Some((n, v))) => (n.to_string(), Some(v.to_string())),
            Some(None) => (a[2..].to_string(), None),
            None if a == "-R" => ("max-requests".to_string(), None),
            None => continue,
        };
        let name = name.replace('_', "-");
        if !OPTIONS.contains(&name.as_str()) {
            continue;
        }
        let value = inline.or_else(|| it.next().cloned()).unwrap_or_default();
        out.push(format!("{name}={value}"));
    }
    out.join(" ")
}

/// jemalloc 5.x's `dirty_decay_ms` after its configuration strings, in the order jemalloc
/// applies them (the later wins); its default, 10000, when none sets it.
pub fn dirty_decay_ms(confs: &[&str]) -> i64 {
    let mut v = 10_000;
    for c in confs {
        for kv in c.split(',') {
            if let Some(x) = kv.trim().strip_prefix("dirty_decay_ms:") {
                if let Ok(x) = x.trim().parse::<i64>() {
                    v = x;
                }
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_in_library_banners() {
        let libc = b"\0GNU C Library (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36.\n";
        assert_eq!(
            version_after(libc, b"release version ").as_deref(),
            Some("2.36")
        );
        let nss = b"xx\0Version: NSS 3.87.1 Basic ECC\0";
        assert_eq!(
            version_after(nss, b"Version: NSS ").as_deref(),
            Some("3.87.1")
        );
        // A marker not followed by a version is passed over for the next one.
        let two = b"gperftools \0gperftools 2.10\0";
        assert_eq!(version_after(two, b"gperftools ").as_deref(), Some("2.10"));
        assert_eq!(version_after(b"gperftools", b"gperftools "), None);
        assert_eq!(
            soname_version("/usr/lib/libmimalloc.so.2.0").as_deref(),
            Some("2.0")
        );
        assert_eq!(soname_version("/usr/lib/libmimalloc.so"), None);
    }

    #[test]
    fn only_the_settings_leave_the_host() {
        let env =
            b"PATH=/bin\0NSS_SDB_USE_CACHE=yes\0AWS_SECRET=x\0MALLOC_CONF=dirty_decay_ms:0\0\0junk";
        assert_eq!(
            settings(env),
            [
                ("MALLOC_CONF".to_string(), "dirty_decay_ms:0".to_string()),
                ("NSS_SDB_USE_CACHE".to_string(), "yes".to_string())
            ]
        );
    }

    #[test]
    fn worker_recycling_from_arguments() {
        let a = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            recycling(&a(
                "gunicorn app:app --max-requests 1000 --max-requests-jitter=100 -w 4"
            )),
            "max-requests=1000 max-requests-jitter=100"
        );
        assert_eq!(
            recycling(&a("celery worker --max_tasks_per_child=50")),
            "max-tasks-per-child=50"
        );
        assert_eq!(
            recycling(&a("uwsgi -R 500 --ini x.ini")),
            "max-requests=500"
        );
        assert_eq!(
            recycling(&a("gunicorn app:app --max-requests")),
            "max-requests="
        );
        assert_eq!(recycling(&a("gunicorn app:app")), "");
    }

    #[test]
    fn jemalloc_decay_as_jemalloc_reads_it() {
        assert_eq!(dirty_decay_ms(&["", ""]), 10_000);
        assert_eq!(
            dirty_decay_ms(&["", "dirty_decay_ms:0,muzzy_decay_ms:0"]),
            0
        );
        // MALLOC_CONF wins over /etc/malloc.conf.
        assert_eq!(
            dirty_decay_ms(&["dirty_decay_ms:-1", "dirty_decay_ms:5000"]),
            5000
        );
        assert_eq!(dirty_decay_ms(&["dirty_decay_ms:-1", "narenas:4"]), -1);
        assert_eq!(dirty_decay_ms(&["dirty_decay_ms:x"]), 10_000);
    }

    #[test]
    fn a_scan_of_this_host_finds_this_process_and_its_glibc() {
        let mut s = Scanner::new(Root::new("/")).with_min_age(std::time::Duration::ZERO);
        let t = std::time::Instant::now();
        let doc = s.scan(1);
        let first = t.elapsed();
        let t = std::time::Instant::now();
        let again = s.scan(2);
        let second = t.elapsed();
        let me = std::process::id();
        let (g, _) = doc
            .groups
            .iter()
            .find(|(_, pids)| pids.contains(&me))
            .expect("this test process is in the inventory");
        let glibc = g.glibc.as_deref().expect("a Rust test binary maps glibc");
        assert!(glibc.starts_with("2."), "{g:?}");
        assert!(!doc.host.kernel.is_empty() && doc.host.cpus > 0 && doc.host.memory_bytes > 0);
        assert_eq!(doc.key(), doc.key());
        assert!(again.groups.values().any(|p| p.contains(&me)));
        eprintln!(
            "{} processes, {} groups; first scan {first:?}, second {second:?}",
            doc.scanned,
            doc.groups.len()
        );
    }

    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/inventory"
    );

    #[test]
    fn a_captured_host_answers_the_seeds_questions() {
        let pids: Vec<u32> = std::fs::read_to_string(format!("{FIXTURE}/pids"))
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        let doc = Scanner::new(Root::new(FIXTURE))
            .with_min_age(std::time::Duration::ZERO)
            .scan(7);
        let of = |pid: u32| {
            doc.groups
                .iter()
                .find(|(_, p)| p.contains(&pid))
                .map(|(g, _)| g.clone())
                .unwrap()
        };
        let (jem, cached, unguarded) = (of(pids[0]), of(pids[1]), of(pids[2]));
        assert_eq!(jem.comm, "sleep");
        assert_eq!(jem.exe, "/usr/bin/sleep");
        assert_eq!(jem.jemalloc.as_deref(), Some("5.3.0"));
        assert_eq!(jem.jemalloc_dirty_decay_ms, Some(0));
        assert_eq!(jem.glibc.as_deref(), Some("2.36"));
        assert_eq!(jem.softokn, None);
        // PATH and HOME stay on the host.
        let keys: Vec<&str> = jem.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["LD_PRELOAD", "MALLOC_CONF"]);
        for g in [&cached, &unguarded] {
            assert_eq!(g.softokn.as_deref(), Some("3.87.1"));
            assert_eq!(g.python.as_deref(), Some("3.11"));
            assert_eq!(
                (g.jemalloc.as_deref(), g.jemalloc_dirty_decay_ms),
                (None, None)
            );
        }
        assert_eq!(
            cached.env,
            [("NSS_SDB_USE_CACHE".to_string(), "yes".to_string())]
        );
        assert!(unguarded.env.is_empty());
        assert_eq!(doc.groups.len(), 3);
        assert_eq!(doc.host.os, "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(doc.host.cgroup_layout, "hybrid");
        assert!(doc.host.memory_bytes > 1 << 30);
        // The rows the engine gets: one per group, the host's once.
        assert_eq!(doc.group_rows("h").lines().count(), 3);
        let row: serde_json::Value =
            serde_json::from_str(doc.group_rows("h").lines().next().unwrap()).unwrap();
        assert_eq!(row["host"], "h");
        assert_eq!(
            row["env_keys"].as_array().unwrap().len(),
            row["env_values"].as_array().unwrap().len()
        );
        let host: serde_json::Value = serde_json::from_str(&doc.host_row("h", "v")).unwrap();
        assert_eq!(host["processes"], 3);
    }

    #[test]
    fn names_of_cgroups_gone_are_not_kept() {
        let mut s = Scanner::new(Root::new(FIXTURE)).with_min_age(std::time::Duration::ZERO);
        s.labels.insert("/gone.scope".into(), "x".into());
        let doc = s.scan(1);
        assert!(!s.labels.contains_key("/gone.scope"));
        assert!(doc.groups.keys().all(|g| s.labels.contains_key(&g.cgroup)));
    }

    #[test]
    fn a_document_changes_with_the_make_up_not_the_pids() {
        let mut a = Document::default();
        a.groups.insert(Group::default(), vec![1, 2]);
        let mut b = a.clone();
        b.groups.insert(Group::default(), vec![3]);
        b.taken_ns = 9;
        assert_eq!(a.key(), b.key());
        b.groups.insert(
            Group {
                softokn: Some("3.87.1".into()),
                ..Group::default()
            },
            vec![4],
        );
        assert_ne!(a.key(), b.key());
    }

    proptest::proptest! {
        #[test]
        fn readers_survive_any_bytes(buf in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = settings(&buf);
            let _ = version_after(&buf, b"release version ");
            let _ = version_in(&buf);
            let text = String::from_utf8_lossy(&buf);
            let args: Vec<String> = text.split(' ').map(str::to_string).collect();
            let _ = recycling(&args);
            let _ = dirty_decay_ms(&[&text]);
            let _ = soname_version(&text);
        }
    }
}
