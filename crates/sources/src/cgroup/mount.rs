//! Finding the cgroup hierarchies: every `cgroup` (v1) and `cgroup2` mount in
//! `/proc/self/mountinfo`.
//!
//! The layout differs per host (pure v2 at /sys/fs/cgroup; hybrid with v1 controllers mounted
//! one per directory or combined as `cpu,cpuacct` plus an empty cgroup2 at
//! /sys/fs/cgroup/unified; v1 only), so nothing is assumed about paths: mountinfo is the truth.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::io::{fields, lines, lossy, read_parse, ParseError, ReadError, Root};

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
}

impl Hierarchy {
    /// True when `controller` is bound to (v1) or available in (v2) this hierarchy.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }
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

/// Parses mountinfo into the cgroup hierarchies it mounts, in mount order, one per superblock:
/// a hierarchy bind-mounted twice is kept once, preferring the mount that shows its root "/".
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
            _ => continue,
        };
        let mut h = Hierarchy {
            version,
            mount_point: PathBuf::from(unescape(f[4])),
            mount_root: unescape(f[3]),
            controllers: Vec::new(),
            name: None,
            device: lossy(f[2]),
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
        match out.iter_mut().find(|o| o.device == h.device) {
            Some(o) if o.mount_root != "/" && h.mount_root == "/" => *o = h,
            Some(_) => {}
            None => out.push(h),
        }
    }
    Ok(out)
}

/// Reads `<root>/proc/self/mountinfo` and, for each v2 hierarchy, its root `cgroup.controllers`
/// (a missing file leaves the list empty).
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
        if let Some(c) = crate::io::optional(parsed)? {
            h.controllers = c;
        }
    }
    Ok(hs)
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

    proptest::proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = parse_mountinfo(&b);
            let _ = unescape(&b);
        }

        #[test]
        fn never_panics_on_plausible(s in "([0-9]{1,2} [0-9]{1,2} 0:[0-9] /[a-z\\\\0-7]{0,5} /[a-z,\\\\0-7]{0,8} rw( [a-z:0-9]{1,5}){0,2}( -)? (cgroup2?|tmpfs) [a-z]{1,4} [a-z,=]{0,20}\n){0,4}") {
            let _ = parse_mountinfo(s.as_bytes());
        }
    }
}
