//! `/proc/<pid>/cgroup`: which cgroup a process is in, per hierarchy.
//!
//! Each line is `hierarchy-id:controllers:path`; v1 lines name their controllers
//! (`4:memory:/docker/<id>`, `3:cpu,cpuacct:/...`), the v2 line is `0::/path`. The paths are in
//! the reader's cgroup namespace, as are the paths [`super::CgroupReader`] produces, so they join
//! directly with its records.

use serde::{Deserialize, Serialize};

use crate::fileio::{lines, read_parse, ParseError, ReadError, Root};

/// The paths of one process, borrowed from the file's bytes (the per-process collector parses
/// thousands of these per interval, so nothing is allocated).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcCgroup<'a> {
    /// Path in the v1 hierarchy carrying `cpu`.
    pub cpu: Option<&'a str>,
    /// Path in the v1 hierarchy carrying `cpuacct`.
    pub cpuacct: Option<&'a str>,
    /// Path in the v1 hierarchy carrying `memory`.
    pub memory: Option<&'a str>,
    /// Path in the v1 hierarchy carrying `blkio`.
    pub blkio: Option<&'a str>,
    /// Path in the unified (v2) hierarchy.
    pub v2: Option<&'a str>,
}

impl<'a> ProcCgroup<'a> {
    /// The cgroup whose record holds this process's CPU limits: v1 `cpu` if bound, else v2.
    pub fn cpu_cgroup(&self) -> Option<&'a str> {
        self.cpu.or(self.v2)
    }

    /// The cgroup whose record holds this process's memory limits: v1 `memory` if bound, else v2.
    pub fn memory_cgroup(&self) -> Option<&'a str> {
        self.memory.or(self.v2)
    }

    /// An owned copy, for keeping beyond the buffer's lifetime.
    pub fn to_paths(&self) -> ProcCgroupPaths {
        ProcCgroupPaths {
            cpu: self.cpu.map(str::to_owned),
            cpuacct: self.cpuacct.map(str::to_owned),
            memory: self.memory.map(str::to_owned),
            blkio: self.blkio.map(str::to_owned),
            v2: self.v2.map(str::to_owned),
        }
    }
}

/// Owned form of [`ProcCgroup`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcCgroupPaths {
    /// Path in the v1 hierarchy carrying `cpu`.
    pub cpu: Option<String>,
    /// Path in the v1 hierarchy carrying `cpuacct`.
    pub cpuacct: Option<String>,
    /// Path in the v1 hierarchy carrying `memory`.
    pub memory: Option<String>,
    /// Path in the v1 hierarchy carrying `blkio` (the I/O controller's limits and weights).
    pub blkio: Option<String>,
    /// Path in the unified (v2) hierarchy.
    pub v2: Option<String>,
}

impl ProcCgroupPaths {
    /// The cgroup that holds the process's CPU limits: v1 `cpu` if bound, else v2.
    pub fn for_cpu(&self) -> Option<&str> {
        self.cpu.as_deref().or(self.v2.as_deref())
    }

    /// The cgroup that holds its memory limit and is charged for its pages: v1 `memory` if
    /// bound, else v2.
    pub fn for_memory(&self) -> Option<&str> {
        self.memory.as_deref().or(self.v2.as_deref())
    }

    /// Whether every v1 path bound here is the root while `old` had another: what an exiting
    /// task shows (proc_cgroup_show), not a move, since nothing moves a task to the root of
    /// every v1 hierarchy at once.
    pub fn v1_at_root_only(&self, old: &ProcCgroupPaths) -> bool {
        fn v1(p: &ProcCgroupPaths) -> [Option<&str>; 4] {
            [&p.cpu, &p.cpuacct, &p.memory, &p.blkio].map(|x| x.as_deref())
        }
        let now = v1(self);
        now.iter().any(Option::is_some)
            && now.iter().flatten().all(|p| *p == "/")
            && v1(old).iter().flatten().any(|p| *p != "/")
    }

    /// Takes `old`'s v1 paths, keeping this read's v2 path.
    pub fn keep_v1_of(&mut self, old: &ProcCgroupPaths) {
        self.cpu.clone_from(&old.cpu);
        self.cpuacct.clone_from(&old.cpuacct);
        self.memory.clone_from(&old.memory);
        self.blkio.clone_from(&old.blkio);
    }

    /// Drops the v1 paths (read from an exiting task, they all say "/").
    pub fn forget_v1(&mut self) {
        self.cpu = None;
        self.cpuacct = None;
        self.memory = None;
        self.blkio = None;
    }

    /// The cgroup that holds its I/O limits: v1 `blkio` if bound, else v2.
    pub fn for_io(&self) -> Option<&str> {
        self.blkio.as_deref().or(self.v2.as_deref())
    }
}

/// Where this process's cgroup namespace root lies in each hierarchy it reads (see
/// [`super::Hierarchy::ns_root`]), to turn `/proc/<pid>/cgroup` paths, which the kernel writes
/// relative to that root, into the paths of the cgroup records. Empty, and free, outside a
/// cgroup namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupNs {
    cpu: Option<String>,
    cpuacct: Option<String>,
    memory: Option<String>,
    blkio: Option<String>,
    v2: Option<String>,
}

impl CgroupNs {
    /// From the hierarchies [`super::discover`] placed.
    pub fn of(hierarchies: &[super::Hierarchy]) -> Self {
        let mut ns = CgroupNs::default();
        for h in hierarchies {
            let Some(r) = &h.ns_root else { continue };
            match h.version {
                super::CgroupVersion::V2 => ns.v2 = Some(r.clone()),
                super::CgroupVersion::V1 => {
                    for (c, slot) in [
                        ("cpu", &mut ns.cpu),
                        ("cpuacct", &mut ns.cpuacct),
                        ("memory", &mut ns.memory),
                        ("blkio", &mut ns.blkio),
                    ] {
                        if h.has(c) {
                            *slot = Some(r.clone());
                        }
                    }
                }
            }
        }
        ns
    }

    /// This process's, for readers of the real root (`Root::new("/")`); found once, as the
    /// namespace of a running process does not change. Empty for any other root.
    pub fn for_root(root: &Root) -> Self {
        static OWN: std::sync::OnceLock<CgroupNs> = std::sync::OnceLock::new();
        if root.dir() != std::path::Path::new("/") {
            return CgroupNs::default();
        }
        OWN.get_or_init(|| {
            super::discover(root)
                .map(|hs| CgroupNs::of(&hs))
                .unwrap_or_default()
        })
        .clone()
    }

    /// True outside a cgroup namespace: paths are used as read.
    pub fn is_empty(&self) -> bool {
        *self == CgroupNs::default()
    }

    /// The owned paths of `p`, each joined below its hierarchy's namespace root.
    pub fn resolve(&self, p: &ProcCgroup<'_>) -> ProcCgroupPaths {
        self.apply(p.to_paths())
    }

    /// `p` with each path joined below its hierarchy's namespace root.
    pub fn apply(&self, mut p: ProcCgroupPaths) -> ProcCgroupPaths {
        if self.is_empty() {
            return p;
        }
        for (ns, path) in [
            (&self.cpu, &mut p.cpu),
            (&self.cpuacct, &mut p.cpuacct),
            (&self.memory, &mut p.memory),
            (&self.blkio, &mut p.blkio),
            (&self.v2, &mut p.v2),
        ] {
            if let (Some(r), Some(x)) = (ns, path.as_mut()) {
                // Outside the mount's view, it stays as read: no record has that path.
                if let Some(j) = super::mount::join_ns(r, x) {
                    *x = j;
                }
            }
        }
        p
    }
}

/// Parses `/proc/<pid>/cgroup`. Lines of other v1 hierarchies (`name=systemd`, `pids`...) are
/// accepted and ignored.
pub fn parse_proc_pid_cgroup(buf: &[u8]) -> Result<ProcCgroup<'_>, ParseError> {
    let mut out = ProcCgroup::default();
    for (n, l) in lines(buf) {
        let mut parts = l.splitn(3, |&c| c == b':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(ParseError::new(n, "expected 'id:controllers:path'"));
        };
        let path = std::str::from_utf8(path)
            .map_err(|_| ParseError::new(n, "cgroup path is not UTF-8"))?;
        if controllers.is_empty() {
            if id == b"0" {
                out.v2 = Some(path);
            }
            continue;
        }
        for c in controllers.split(|&c| c == b',') {
            match c {
                b"cpu" => out.cpu = Some(path),
                b"cpuacct" => out.cpuacct = Some(path),
                b"memory" => out.memory = Some(path),
                b"blkio" => out.blkio = Some(path),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// Reads `<root>/proc/<pid>/cgroup` into `buf` and returns the owned paths. A vanished process
/// is an error for which [`ReadError::is_missing`] holds.
pub fn cgroup_of_pid(
    root: &Root,
    pid: u32,
    buf: &mut Vec<u8>,
) -> Result<ProcCgroupPaths, ReadError> {
    let path = root.path(format!("/proc/{pid}/cgroup"));
    let ns = CgroupNs::for_root(root);
    read_parse(&path, buf, |b| {
        parse_proc_pid_cgroup(b).map(|p| ns.resolve(&p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exiting_task_s_root_paths_do_not_replace_the_ones_it_ran_in() {
        let ran = ProcCgroupPaths {
            cpu: Some("/lab/a".into()),
            memory: Some("/lab/a".into()),
            v2: Some("/".into()),
            ..Default::default()
        };
        let mut exiting = ProcCgroupPaths {
            cpu: Some("/".into()),
            memory: Some("/".into()),
            v2: Some("/x".into()),
            ..Default::default()
        };
        assert!(exiting.v1_at_root_only(&ran));
        exiting.keep_v1_of(&ran);
        assert_eq!(exiting.for_memory(), Some("/lab/a"));
        assert_eq!(exiting.v2.as_deref(), Some("/x"));
        // Moved from the root, only v2 bound, or one v1 path elsewhere: read as they are.
        let root = ProcCgroupPaths {
            cpu: Some("/".into()),
            memory: Some("/".into()),
            ..Default::default()
        };
        assert!(!ran.v1_at_root_only(&root));
        assert!(!root.v1_at_root_only(&root));
        let v2 = ProcCgroupPaths {
            v2: Some("/".into()),
            ..Default::default()
        };
        assert!(!v2.v1_at_root_only(&ran));
        let half = ProcCgroupPaths {
            cpu: Some("/".into()),
            memory: Some("/other".into()),
            ..Default::default()
        };
        assert!(!half.v1_at_root_only(&ran));
    }

    const HOST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/host");

    #[test]
    fn hybrid_host_captured() {
        let p = cgroup_of_pid(&Root::new(HOST), 4476, &mut Vec::new());
        // The capture script's own process: whatever its memory cgroup, every hierarchy is seen.
        let p = p.unwrap();
        assert!(p.cpu.is_some() && p.cpuacct.is_some() && p.memory.is_some());
        assert_eq!(p.v2.as_deref(), Some("/"));
        let buf = std::fs::read(format!("{HOST}/proc/self/cgroup")).unwrap();
        let p = parse_proc_pid_cgroup(&buf).unwrap();
        assert_eq!(
            p.memory_cgroup(),
            Some("/process_api/4e9f979501e142896e0ca4ffd4160131")
        );
        assert_eq!(p.cpu_cgroup(), Some("/"));
    }

    #[test]
    fn combined_v1_and_pure_v2() {
        let p = parse_proc_pid_cgroup(
            b"12:pids:/docker/abc\n4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n1:name=systemd:/docker/abc\n",
        )
        .unwrap();
        assert_eq!(p.cpu, Some("/docker/abc"));
        assert_eq!(p.cpuacct, Some("/docker/abc"));
        assert_eq!(p.memory, Some("/docker/abc"));
        assert_eq!(p.v2, None);
        let p = parse_proc_pid_cgroup(b"9:blkio:/io\n5:memory:/mem\n4:cpu:/\n0::/\n").unwrap();
        let o = p.to_paths();
        assert_eq!(
            (o.for_cpu(), o.for_memory(), o.for_io()),
            (Some("/"), Some("/mem"), Some("/io"))
        );
        let p = parse_proc_pid_cgroup(b"0::/system.slice/a:b.service\n").unwrap();
        assert_eq!(p.cpu_cgroup(), Some("/system.slice/a:b.service"));
        assert_eq!(p.memory_cgroup(), Some("/system.slice/a:b.service"));
        assert!(parse_proc_pid_cgroup(b"0:/x\n").is_err());
    }

    #[test]
    fn vanished_process_is_missing() {
        let e = cgroup_of_pid(&Root::new(HOST), 999_999_999, &mut Vec::new()).unwrap_err();
        assert!(e.is_missing());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = parse_proc_pid_cgroup(&b);
        }
    }
}
