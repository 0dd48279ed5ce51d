//! What the tracers need from the host besides BPF: tracefs (classic tracepoints are attached by
//! id, which only tracefs tells), kernel symbols, and the cgroup hierarchy the kernel ids point at.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jitterscope_sources::cgroup::{discover, CgroupVersion, Hierarchy};
use jitterscope_sources::Root;

/// Where tracefs is (or was made) available.
pub fn tracefs() -> Result<PathBuf, String> {
    for p in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(p).join("events").is_dir() {
            return Ok(PathBuf::from(p));
        }
    }
    // Mounting tracefs at its standard place changes nothing else on the host, and it is what
    // perf and bpftrace do too; libbpf then finds tracepoint ids there.
    let target = c"/sys/kernel/tracing";
    // SAFETY: both strings are NUL-terminated and outlive the call.
    let r = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r == 0 && Path::new("/sys/kernel/tracing/events").is_dir() {
        return Ok(PathBuf::from("/sys/kernel/tracing"));
    }
    Err(format!(
        "tracefs is not mounted and mounting it at /sys/kernel/tracing failed ({}); mount it with `mount -t tracefs nodev /sys/kernel/tracing`",
        std::io::Error::last_os_error()
    ))
}

/// Whether the classic tracepoint `category/name` exists on this kernel.
pub fn has_tracepoint(tracefs: &Path, category: &str, name: &str) -> bool {
    tracefs.join("events").join(category).join(name).is_dir()
}

/// Whether the kernel exposes its BTF (needed by CO-RE relocations and BTF-typed tracepoints).
pub fn has_btf() -> bool {
    Path::new("/sys/kernel/btf/vmlinux").exists()
}

/// Kernel text symbols, looked up on demand: /proc/kallsyms is streamed for the wanted
/// addresses only (≈30 ms here) instead of keeping its 120k symbols (≈3 MB) in the recorder.
#[derive(Debug, Default)]
pub struct Kallsyms {
    names: HashMap<u64, String>,
    /// Addresses a scan did not find (modules unloaded, restricted kallsyms): retried at most
    /// every 10 s, while an address never looked up is scanned for at once.
    unresolved: HashSet<u64>,
    last_scan: Option<Instant>,
    /// Whether addresses are hidden (kptr_restrict): every address reads 0.
    pub restricted: bool,
}

impl Kallsyms {
    /// The address of the text symbol `name`, if kallsyms shows it.
    pub fn address_of(name: &str) -> Option<u64> {
        let f = fs::File::open("/proc/kallsyms").ok()?;
        BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| match symbol(&line) {
                Some((a, "t" | "T", n)) if n == name && a != 0 => Some(a),
                _ => None,
            })
    }

    /// The names of `addrs` (exact symbol starts); unresolved ones come back as hex. Kallsyms is
    /// scanned when an address was never looked up, and for ones a scan missed at most every
    /// 10 s.
    pub fn resolve(&mut self, addrs: &[u64]) -> Vec<String> {
        let missing: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.names.contains_key(a))
            .collect();
        let new = missing.iter().any(|a| !self.unresolved.contains(a));
        let retry = self
            .last_scan
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
        if !missing.is_empty() && (new || retry) {
            self.last_scan = Some(Instant::now());
            if let Ok(f) = fs::File::open("/proc/kallsyms") {
                self.scan(BufReader::new(f), &missing);
            }
            for a in missing {
                if !self.names.contains_key(&a) {
                    self.unresolved.insert(a);
                }
            }
        }
        addrs
            .iter()
            .map(|a| {
                self.names
                    .get(a)
                    .cloned()
                    .unwrap_or_else(|| format!("0x{a:x}"))
            })
            .collect()
    }

    fn scan(&mut self, r: impl BufRead, want: &[u64]) {
        let mut zeros = 0usize;
        let mut lines = 0usize;
        for line in r.lines().map_while(Result::ok) {
            lines += 1;
            let Some((a, _, n)) = symbol(&line) else {
                continue;
            };
            if a == 0 {
                zeros += 1;
                continue;
            }
            if want.contains(&a) {
                self.names.entry(a).or_insert_with(|| n.to_string());
            }
        }
        self.restricted = lines > 0 && zeros * 2 > lines;
    }
}

/// One /proc/kallsyms line: address, type letter, name (a module suffix after it is ignored).
fn symbol(line: &str) -> Option<(u64, &str, &str)> {
    let mut it = line.split_ascii_whitespace();
    let (a, t, n) = (it.next()?, it.next()?, it.next()?);
    Some((u64::from_str_radix(a, 16).ok()?, t, n))
}

/// Maps the kernel's cgroup ids (kernfs node ids, which are the inode numbers of the cgroupfs
/// directories) to cgroup paths, for one hierarchy.
#[derive(Debug)]
pub struct CgroupIds {
    hierarchy: Option<Hierarchy>,
    paths: HashMap<u64, String>,
    /// Ids a walk did not find: walked for again at most every 10 s (an id never looked up is
    /// walked for at once, so a new cgroup is named in its first interval).
    unresolved: HashSet<u64>,
    /// Ids that were cgroups at one walk and were gone at a later one.
    removed: HashSet<u64>,
    last_walk: Option<Instant>,
}

/// Most cgroups walked when refreshing the id map.
const MAX_CGROUPS: usize = 100_000;

impl CgroupIds {
    /// The map for the hierarchy that holds `controller` (`cpu`, `memory`) on v1, else the v2 one.
    pub fn new(root: &Root, controller: &str) -> Self {
        let hs = discover(root).unwrap_or_default();
        let h = hs
            .iter()
            .find(|h| h.version == CgroupVersion::V1 && h.has(controller))
            .or_else(|| hs.iter().find(|h| h.version == CgroupVersion::V2))
            .cloned();
        CgroupIds {
            hierarchy: h,
            paths: HashMap::new(),
            unresolved: HashSet::new(),
            removed: HashSet::new(),
            last_walk: None,
        }
    }

    /// Whether ids are for a v1 hierarchy (the BPF side must then read the controller's css).
    pub fn is_v1(&self) -> bool {
        self.hierarchy
            .as_ref()
            .is_some_and(|h| h.version == CgroupVersion::V1)
    }

    /// The path of cgroup `id`, walking the hierarchy again when `id` was never looked up (and,
    /// for ids a walk did not find, at most every 10 s). Empty when unknown.
    pub fn path(&mut self, id: u64) -> String {
        if id == 0 {
            return String::new();
        }
        if let Some(p) = self.paths.get(&id) {
            return p.clone();
        }
        let retry = self
            .last_walk
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
        if !self.unresolved.contains(&id) || retry {
            self.walk();
        }
        match self.paths.get(&id) {
            Some(p) => p.clone(),
            None => {
                self.unresolved.insert(id);
                String::new()
            }
        }
    }

    /// Whether `id` was a cgroup at one walk and was gone at a later one: its counters will
    /// never move again. Taking the answer forgets the id.
    pub fn take_removed(&mut self, id: u64) -> bool {
        self.removed.remove(&id)
    }

    fn walk(&mut self) {
        self.last_walk = Some(Instant::now());
        let Some(h) = &self.hierarchy else { return };
        let mut paths = HashMap::new();
        let base = h.mount_root.trim_end_matches('/').to_string();
        let mut stack = vec![(h.mount_point.clone(), base)];
        while let Some((dir, rel)) = stack.pop() {
            if paths.len() >= MAX_CGROUPS {
                break;
            }
            let Ok(md) = fs::metadata(&dir) else { continue };
            paths.insert(
                md.ino(),
                if rel.is_empty() {
                    "/".into()
                } else {
                    rel.clone()
                },
            );
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name();
                    stack.push((e.path(), format!("{rel}/{}", name.to_string_lossy())));
                }
            }
        }
        // A removed id is remembered until its map entry is dropped (take_removed); bounded in
        // case no map ever held it.
        if self.removed.len() > 4096 {
            self.removed.clear();
        }
        self.removed
            .extend(self.paths.keys().filter(|id| !paths.contains_key(id)));
        self.unresolved.retain(|id| !paths.contains_key(id));
        if self.unresolved.len() > 4096 {
            self.unresolved.clear();
        }
        self.paths = paths;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitterscope_testkit::skip;

    #[test]
    fn kallsyms_scan_finds_wanted_and_detects_restriction() {
        let text = "ffffffff8134ae80 t flush_tlb_func\nffffffff816da060 t super_cache_scan\nffffffff816da100 T other [mod]\n";
        let mut k = Kallsyms::default();
        k.scan(text.as_bytes(), &[0xffffffff816da060]);
        assert_eq!(
            k.names.get(&0xffffffff816da060).map(String::as_str),
            Some("super_cache_scan")
        );
        assert!(!k.restricted);
        let mut k = Kallsyms::default();
        k.scan(
            "0000000000000000 t a\n0000000000000000 t b\n".as_bytes(),
            &[1],
        );
        assert!(k.restricted);
        // Garbage lines are skipped.
        k.scan("zz\n\n1 2\nxyz t q\n".as_bytes(), &[1]);
    }

    #[test]
    fn cgroup_ids_resolve_on_this_host() {
        let mut ids = CgroupIds::new(&Root::new("/"), "cpu");
        let Some(h) = ids.hierarchy.clone() else {
            return skip(
                "cgroup_ids_resolve_on_this_host",
                "no cgroup hierarchy mounted",
            );
        };
        let ino = fs::metadata(&h.mount_point).unwrap().ino();
        let want = if h.mount_root == "/" {
            "/".to_string()
        } else {
            h.mount_root.clone()
        };
        assert_eq!(ids.path(ino), want);
        assert_eq!(ids.path(u64::MAX - 5), "", "an id no cgroup has");
    }

    #[test]
    fn a_new_cgroup_is_named_at_once_and_its_removal_noticed() {
        let mut ids = CgroupIds::new(&Root::new("/"), "cpu");
        const TEST: &str = "a_new_cgroup_is_named_at_once_and_its_removal_noticed";
        let Some(h) = ids.hierarchy.clone() else {
            return skip(TEST, "no cgroup hierarchy mounted");
        };
        let dir = h
            .mount_point
            .join(format!("jitterscope-ids-test-{}", std::process::id()));
        ids.path(1); // a walk just happened: the next one would be 10 s away for a known miss
        if let Err(e) = fs::create_dir(&dir) {
            return skip(TEST, &format!("cannot create a cgroup ({e})"));
        }
        let ino = fs::metadata(&dir).unwrap().ino();
        let path = ids.path(ino);
        let _ = fs::remove_dir(&dir);
        assert!(
            path.ends_with(&format!("/jitterscope-ids-test-{}", std::process::id())),
            "{path:?}"
        );
        assert!(!ids.take_removed(ino));
        // The next unknown id triggers a walk, which notices the removal.
        ids.path(u64::MAX - 7);
        assert!(ids.take_removed(ino));
        assert!(!ids.take_removed(ino), "taken once");
    }
}
