//! Finding the cgroup hierarchies: every `cgroup` (v1) and `cgroup2` mount in
//! `/proc/self/mountinfo`.
//!
//! The layout differs per host (pure v2 at /sys/fs/cgroup; hybrid with v1 controllers mounted
//! one per directory or combined as `cpu,cpuacct` plus an empty cgroup2 at
//! /sys/fs/cgroup/unified; v1 only), so nothing is assumed about paths: mountinfo is the truth.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, lossy, read_parse, ParseError, ReadError, Root};

/// cgroup API version of a hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CgroupVersion {
    /// Legacy per-controller hierarchies (`cgroup` filesystem).
    V1,
    /// The unified hierarchy (`cgroup2` filesystem).
    V2,
}

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hierarchy {
    /// v1 or v2.
    pub version: CgroupVersion,
    /// Where it is mounted, as the kernel reports it (resolve under a [`Root`] to read it).
    pub mount_point: PathBuf,
    /// The cgroup the mount shows at its top ("/" normally; a container without its own cgroup
    /// namespace sees e.g. `/docker/<id>`). Cgroup paths are this joined with the directory
    /// below the mount point, which makes them comparable with `/proc/<pid>/cgroup`.
    pub mount_root: String,
    /// v1: the controllers bound to it (from the super options, e.g. `cpu`, `cpuacct`).
    /// v2: the root's `cgroup.controllers` (empty on hybrid hosts), filled by [`discover`].
    pub controllers: Vec<String>,
    /// v1 named hierarchy without controllers (`name=systemd`).
    pub name: Option<String>,
    /// The superblock's `major:minor`, which identifies the hierarchy across bind mounts.
    pub device: String,
    /// Set when the mount shows the tree above this process's own cgroup namespace root, as
    /// the host's /sys/fs/cgroup bind-mounted into a Kubernetes pod does: where that root lies
    /// below the mount point (`/kubepods.slice/.../cri-containerd-<id>.scope`). [`discover`]
    /// then makes `mount_root` "/", so cgroup paths are the mount's (the host's), and
    /// [`super::CgroupNs`] turns `/proc/<pid>/cgroup`'s namespace-relative paths
    /// (`/../../system.slice/x.service`) into the same form.
    #[serde(default)]
    pub ns_root: Option<String>,
}

impl Hierarchy {
    /// True when `controller` is bound to (v1) or available in (v2) this hierarchy.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }
}

/// `path` (which may climb out of the namespace with `..`) below `ns_root`, normalised; `None`
/// when it climbs above the mount's top, which shows nothing higher to name it by.
pub(crate) fn join_ns(ns_root: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    let all = ns_root.split('/').chain(path.split('/'));
    for c in all.filter(|c| !c.is_empty() && *c != ".") {
        if c == ".." {
            parts.pop()?;
        } else {
            parts.push(c);
        }
    }
    let mut out = String::with_capacity(path.len() + ns_root.len());
    for c in &parts {
        out.push('/');
        out.push_str(c);
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// How many levels above the namespace root a mount root of only `..` components shows
/// (`/../..` is 2); `None` for any other root.
fn levels_above(mount_root: &str) -> Option<usize> {
    let mut n = 0;
    for c in mount_root.split('/').filter(|c| !c.is_empty()) {
        if c != ".." {
            return None;
        }
        n += 1;
    }
    (n > 0).then_some(n)
}

/// The v1 controller names (`cgroup_subsys` entries with a v1 interface). Super options also
/// carry mount flags and LSM options (`seclabel` under SELinux), so controllers are recognised by
/// name; v1 is frozen upstream, so this list does not grow.
const V1_CONTROLLERS: &[&[u8]] = &[
    b"cpuset",
    b"cpu",
    b"cpuacct",
    b"blkio",
    b"memory",
    b"devices",
    b"freezer",
    b"net_cls",
    b"perf_event",
    b"net_prio",
    b"hugetlb",
    b"pids",
    b"rdma",
    b"misc",
    b"debug",
];

/// Undoes mountinfo's octal escapes (`\040` for space, `\011`, `\012`, `\134`).
fn unescape(s: &[u8]) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' && s.len() - i >= 4 {
            let d = &s[i + 1..i + 4];
            if d.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = (d[0] - b'0') as u32 * 64 + (d[1] - b'0') as u32 * 8 + (d[2] - b'0') as u32;
                if let Ok(b) = u8::try_from(v) {
                    out.push(b);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(s[i]);
        i += 1;
    }
    lossy(&out)
}

/// Every mount point of a mountinfo file, unescaped, in mount order (lines too short to have
/// one are skipped).
pub fn mount_points(buf: &[u8]) -> Vec<PathBuf> {
    lines(buf)
        .filter_map(|(_, l)| fields(l).nth(4))
        .map(|m| PathBuf::from(unescape(m)))
        .collect()
}

/// How much of a hierarchy a mount shows: the tree above this process's cgroup namespace (the
/// host's, bind-mounted into a pod), then its namespace's whole tree ("/"), then a subtree
/// (`/docker/<id>` in a container without a namespace of its own).
fn shows(h: &Hierarchy) -> u8 {
    match h.mount_root.as_str() {
        r if levels_above(r).is_some() => 2,
        "/" => 1,
        _ => 0,
    }
}

/// Parses mountinfo into the cgroup hierarchies it mounts, in mount order, one per superblock:
/// a hierarchy mounted twice is kept once, from the mount that shows most of it ([`shows`]).
pub fn parse_mountinfo(buf: &[u8]) -> Result<Vec<Hierarchy>, ParseError> {
    let mut out: Vec<Hierarchy> = Vec::new();
    for (n, l) in lines(buf) {
        let f: Vec<&[u8]> = fields(l).collect();
        let Some(sep) = f.iter().skip(6).position(|x| *x == b"-").map(|p| p + 6) else {
            return Err(ParseError::new(n, "mountinfo: no ' - ' separator"));
        };
        let (Some(fstype), Some(super_opts)) = (f.get(sep + 1), f.get(sep + 3)) else {
            return Err(ParseError::new(
                n,
                "mountinfo: missing fields after separator",
            ));
        };
        let version = match *fstype {
            b"cgroup" => CgroupVersion::V1,
            b"cgroup2" => CgroupVersion::V2,
            _ => {
                // Whatever is mounted over a hierarchy hides it.
                let mp = PathBuf::from(unescape(f[4]));
                out.retain(|o| o.mount_point != mp);
                continue;
            }
        };
        let mut h = Hierarchy {
            version,
            mount_point: PathBuf::from(unescape(f[4])),
            mount_root: unescape(f[3]),
            controllers: Vec::new(),
            name: None,
            device: lossy(f[2]),
            ns_root: None,
        };
        if version == CgroupVersion::V1 {
            for opt in super_opts.split(|&c| c == b',').filter(|o| !o.is_empty()) {
                if let Some(name) = opt.strip_prefix(b"name=") {
                    h.name = Some(lossy(name));
                } else if V1_CONTROLLERS.contains(&opt) {
                    h.controllers.push(lossy(opt));
                }
            }
        }
        // A later mount on the same mount point hides the earlier one: in a pod, the host's
        // tree mounted over the container's own /sys/fs/cgroup is what reads reach.
        out.retain(|o| o.mount_point != h.mount_point);
        match out.iter_mut().find(|o| o.device == h.device) {
            Some(o) if shows(&h) > shows(o) => *o = h,
            Some(_) => {}
            None => out.push(h),
        }
    }
    Ok(out)
}

/// Reads `<root>/proc/self/mountinfo` and, for each v2 hierarchy, its root `cgroup.controllers`
/// (a missing file leaves the list empty). A mount that shows the tree above this process's
/// cgroup namespace gets its [`Hierarchy::ns_root`] (see [`place_ns_root`]).
pub fn discover(root: &Root) -> Result<Vec<Hierarchy>, ReadError> {
    let mut buf = Vec::new();
    let mut hs = read_parse(
        &root.path("/proc/self/mountinfo"),
        &mut buf,
        parse_mountinfo,
    )?;
    for h in hs.iter_mut().filter(|h| h.version == CgroupVersion::V2) {
        let path = root.path(&h.mount_point).join("cgroup.controllers");
        let parsed = read_parse(&path, &mut buf, |b| {
            Ok(fields(b).map(lossy).collect::<Vec<_>>())
        });
        if let Some(c) = crate::fileio::optional(parsed)? {
            h.controllers = c;
        }
    }
    // Only this process's own view can be placed: its pid and /proc/self are the real root's.
    if root.dir() == std::path::Path::new("/") {
        let own = std::fs::read("/proc/self/cgroup").unwrap_or_default();
        for h in &mut hs {
            place_ns_root(root, h, &own, std::process::id());
        }
    }
    Ok(hs)
}

/// In a cgroup namespace (every container on cgroup v2: Kubernetes pods, podman, Docker 20.10+)
/// the kernel shows cgroup paths relative to the namespace's root, the container's own cgroup:
/// `/proc/<pid>/cgroup` says "/" for the container's processes and `/../../system.slice/x` for
/// the host's, and a bind mount of the host's tree says its root is `/../..`. Neither says
/// where the namespace root is, which joining the two needs. It is found as the cgroup, at the
/// depth the mount root's `..` count and this process's own path give, whose `cgroup.procs`
/// lists `pid` (`own` is this process's `/proc/self/cgroup`). Then `ns_root` is set and
/// `mount_root` becomes "/": paths are the mount's, as a recorder on the host names them.
/// Nothing changes when the mount is not above the namespace root or the search finds nothing.
pub fn place_ns_root(root: &Root, h: &mut Hierarchy, own: &[u8], pid: u32) {
    let Some(above) = levels_above(&h.mount_root) else {
        return;
    };
    let Some(own_path) = own_path(h, own) else {
        return;
    };
    let own_parts: Vec<&str> = own_path.split('/').filter(|c| !c.is_empty()).collect();
    if own_parts.contains(&"..") {
        return;
    }
    let depth = above + own_parts.len();
    let mut level = vec![String::new()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for rel in &level {
            let Ok(rd) =
                std::fs::read_dir(root.path(&h.mount_point).join(rel.trim_start_matches('/')))
            else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    next.push(format!("{rel}/{}", e.file_name().to_string_lossy()));
                }
            }
        }
        level = next;
    }
    let suffix: String = own_parts.iter().map(|c| format!("/{c}")).collect();
    let pid = pid.to_string();
    for rel in level.iter().filter(|r| r.ends_with(&suffix)) {
        let procs = root
            .path(&h.mount_point)
            .join(rel.trim_start_matches('/'))
            .join("cgroup.procs");
        let Ok(text) = std::fs::read_to_string(procs) else {
            continue;
        };
        if text.lines().any(|l| l.trim() == pid) {
            let ns = &rel[..rel.len() - suffix.len()];
            h.ns_root = Some(if ns.is_empty() {
                "/".into()
            } else {
                ns.to_string()
            });
            h.mount_root = "/".into();
            return;
        }
    }
}

/// This process's path in `h` from its `/proc/self/cgroup` (`own`).
fn own_path<'a>(h: &Hierarchy, own: &'a [u8]) -> Option<&'a str> {
    for (_, l) in lines(own) {
        let mut parts = l.splitn(3, |&c| c == b':');
        let (Some(id), Some(ctl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Ok(path) = std::str::from_utf8(path) else {
            continue;
        };
        let matches = match h.version {
            CgroupVersion::V2 => id == b"0" && ctl.is_empty(),
            CgroupVersion::V1 => {
                let names: Vec<&[u8]> = ctl.split(|&c| c == b',').collect();
                match &h.name {
                    Some(n) => names
                        .iter()
                        .any(|c| c.strip_prefix(b"name=") == Some(n.as_bytes())),
                    None => {
                        !h.controllers.is_empty()
                            && h.controllers.iter().all(|c| names.contains(&c.as_bytes()))
                    }
                }
            }
        };
        if matches {
            return Some(path);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/host");

    #[test]
    fn host_hybrid_layout() {
        let hs = discover(&Root::new(HOST)).unwrap();
        let v1: Vec<_> = hs
            .iter()
            .filter(|h| h.version == CgroupVersion::V1)
            .collect();
        let cpu = v1.iter().find(|h| h.has("cpu")).unwrap();
        assert_eq!(cpu.mount_point, PathBuf::from("/sys/fs/cgroup/cpu"));
        assert_eq!(cpu.controllers, ["cpu"]);
        assert_eq!(cpu.mount_root, "/");
        assert!(v1.iter().any(|h| h.has("memory")));
        assert!(v1.iter().any(|h| h.has("cpuacct")));
        let systemd = v1
            .iter()
            .find(|h| h.name.as_deref() == Some("systemd"))
            .unwrap();
        assert!(systemd.controllers.is_empty());
        let v2: Vec<_> = hs
            .iter()
            .filter(|h| h.version == CgroupVersion::V2)
            .collect();
        assert_eq!(v2.len(), 1);
        assert_eq!(v2[0].mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert!(!v2[0].has("cpu") && !v2[0].has("memory"));
    }

    #[test]
    fn mount_points_are_unescaped() {
        let m = mount_points(
            b"25 30 0:22 / /var/tmp/a\\040b rw - tmpfs tmpfs rw\n26 25 0:23 / /x\\134y rw - tmpfs t rw\n27 25 0:24 / /trailing\\04 rw - tmpfs t rw\nshort line\n",
        );
        assert_eq!(
            m,
            [
                PathBuf::from("/var/tmp/a b"),
                PathBuf::from(r"/x\y"),
                PathBuf::from(r"/trailing\04")
            ]
        );
    }

    #[test]
    fn combined_controllers_options_and_escapes() {
        let hs = parse_mountinfo(
            b"25 30 0:22 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755\n\
              26 25 0:23 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev shared:9 - cgroup cgroup rw,cpu,cpuacct\n\
              27 25 0:24 / /sys/fs/cgroup/sys\\040temd rw shared:1 master:2 - cgroup cgroup rw,seclabel,xattr,release_agent=/x,name=systemd\n\
              28 25 0:25 /docker/abc /in/container rw - cgroup cgroup rw,memory,noprefix\n\
              29 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
              30 25 0:25 / /again rw - cgroup cgroup rw,memory\n\
              31 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n",
        )
        .unwrap();
        assert_eq!(hs.len(), 4);
        assert_eq!(hs[0].controllers, ["cpu", "cpuacct"]);
        assert_eq!(hs[1].mount_point, PathBuf::from("/sys/fs/cgroup/sys temd"));

        assert_eq!(hs[1].name.as_deref(), Some("systemd"));
        assert!(hs[1].controllers.is_empty());
        // Bind mount of a subtree replaced by the mount of the hierarchy's root; later dup ignored.
        assert_eq!(hs[2].mount_point, PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(hs[2].controllers, ["memory"]);
        assert_eq!(hs[3].version, CgroupVersion::V2);
    }

    #[test]
    fn malformed() {
        assert!(parse_mountinfo(b"1 2 3\n").is_err());
        assert!(parse_mountinfo(b"1 2 0:1 / /x rw - cgroup\n").is_err());
        assert!(parse_mountinfo(b"").unwrap().is_empty());
        assert_eq!(unescape(b"a\\"), "a\\");
        assert_eq!(unescape(b"a\\04"), "a\\04");
        assert_eq!(unescape(b"\\134x"), "\\x");
    }

    #[test]
    fn namespace_relative_paths_join_below_the_namespace_root() {
        let ns = "/machine.slice/libpod-ab.scope";
        let j = |ns: &str, p: &str| join_ns(ns, p);
        assert_eq!(j(ns, "/").as_deref(), Some(ns));
        assert_eq!(
            j(ns, "/sub").as_deref(),
            Some("/machine.slice/libpod-ab.scope/sub")
        );
        assert_eq!(
            j(ns, "/../../system.slice/x.service").as_deref(),
            Some("/system.slice/x.service")
        );
        assert_eq!(
            j(ns, "/../libpod-cd.scope").as_deref(),
            Some("/machine.slice/libpod-cd.scope")
        );
        assert_eq!(j(ns, "/../..").as_deref(), Some("/"));
        // Above the mount's top there is nothing to name it by.
        assert_eq!(j(ns, "/../../../../x"), None);
        assert_eq!(j("/", "/a/./b").as_deref(), Some("/a/b"));
        assert_eq!(levels_above("/../.."), Some(2));
        assert_eq!(levels_above("/.."), Some(1));
        assert_eq!(levels_above("/"), None);
        assert_eq!(levels_above("/docker/ab"), None);
        assert_eq!(levels_above("/../x"), None);
    }

    #[test]
    fn a_mount_over_another_hides_it() {
        // A pod's own cgroup2 mount, then the host's tree mounted over it (same superblock).
        let hs = parse_mountinfo(
            b"30 25 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n\
              40 30 0:26 /../.. /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n",
        )
        .unwrap();
        assert_eq!(hs.len(), 1);
        assert_eq!(hs[0].mount_root, "/../..");
        // Anything mounted over a hierarchy hides it.
        let hs = parse_mountinfo(
            b"30 25 0:26 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n\
              41 30 0:40 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n",
        )
        .unwrap();
        assert!(hs.is_empty());
        // The host's tree mounted beside the pod's own view, not over it: the host's is kept.
        let hs = parse_mountinfo(
            b"30 25 0:26 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n\
              40 25 0:26 /../.. /host/sys/fs/cgroup ro - cgroup2 cgroup2 rw\n\
              41 25 0:26 /x /elsewhere ro - cgroup2 cgroup2 rw\n",
        )
        .unwrap();
        assert_eq!(hs.len(), 1);
        assert_eq!(
            hs[0].mount_point,
            std::path::Path::new("/host/sys/fs/cgroup")
        );
    }

    /// The namespace root is found by this process's pid in `cgroup.procs`, at the depth the
    /// mount root's `..` count and its own path give.
    #[test]
    fn namespace_root_is_placed_by_its_cgroup_procs() {
        let t = tempfile::tempdir().unwrap();
        let mnt = t.path().join("sys/fs/cgroup");
        for (dir, procs) in [
            ("machine.slice/libpod-aa.scope", "7\n"),
            ("machine.slice/libpod-bb.scope", "42\n43\n"),
            ("machine.slice/libpod-bb.scope/inner", "44\n"),
            ("system.slice/x.service", "8\n"),
        ] {
            std::fs::create_dir_all(mnt.join(dir)).unwrap();
            std::fs::write(mnt.join(dir).join("cgroup.procs"), procs).unwrap();
        }
        let root = Root::new(t.path());
        let mut h = parse_mountinfo(b"40 30 0:26 /../.. /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n")
            .unwrap()
            .remove(0);
        // At the namespace root.
        let mut at_root = h.clone();
        place_ns_root(&root, &mut at_root, b"0::/\n", 42);
        assert_eq!(
            at_root.ns_root.as_deref(),
            Some("/machine.slice/libpod-bb.scope")
        );
        assert_eq!(at_root.mount_root, "/");
        // Below it: the root is what is left once its own path is taken off.
        let mut below = h.clone();
        place_ns_root(&root, &mut below, b"0::/inner\n", 44);
        assert_eq!(
            below.ns_root.as_deref(),
            Some("/machine.slice/libpod-bb.scope")
        );
        // Not found: nothing changes, rather than a wrong guess.
        place_ns_root(&root, &mut h, b"0::/\n", 99);
        assert_eq!((h.ns_root, h.mount_root.as_str()), (None, "/../.."));
        // A v1 hierarchy matches its own line of /proc/self/cgroup.
        let mut v1 = parse_mountinfo(
            b"40 30 0:27 /../.. /sys/fs/cgroup ro - cgroup cgroup rw,cpu,cpuacct\n",
        )
        .unwrap()
        .remove(0);
        place_ns_root(&root, &mut v1, b"5:memory:/\n4:cpu,cpuacct:/\n0::/x\n", 42);
        assert_eq!(
            v1.ns_root.as_deref(),
            Some("/machine.slice/libpod-bb.scope")
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = parse_mountinfo(&b);
            let _ = unescape(&b);
        }

        #[test]
        fn joins_never_panic(ns in "(/[a-z.]{0,4}){0,4}", p in "(/[a-z.]{0,4}){0,6}") {
            if let Some(j) = join_ns(&ns, &p) {
                proptest::prop_assert!(j.starts_with('/'));
                proptest::prop_assert!(!j.split('/').any(|c| c == ".."));
            }
            let _ = levels_above(&p);
        }

        #[test]
        fn never_panics_on_plausible(s in "([0-9]{1,2} [0-9]{1,2} 0:[0-9] /[a-z\\\\0-7]{0,5} /[a-z,\\\\0-7]{0,8} rw( [a-z:0-9]{1,5}){0,2}( -)? (cgroup2?|tmpfs) [a-z]{1,4} [a-z,=]{0,20}\n){0,4}") {
            let _ = parse_mountinfo(s.as_bytes());
        }
    }
}
