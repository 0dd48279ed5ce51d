//! A process's executable mappings: read once from `/proc/<pid>/maps` when the profiler first
//! meets a process, then kept current from perf's MMAP2, FORK, COMM(exec) and EXIT records, so
//! naming an address is a lookup in memory instead of re-reading the maps file (which costs the
//! kernel a walk of the address space under the process's `mmap_lock`).
//!
//! Written here rather than taken from a crate: blazesym's normalizer re-reads the maps file
//! per call (its cache cannot tell when it is stale), which was two thirds of the profiler's CPU.

use std::sync::Arc;

/// One executable mapping of a file (or the vDSO).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Offset in the file of `start`.
    pub pgoff: u64,
    /// Path as the process sees it (`[vdso]` for the vDSO).
    pub path: Arc<str>,
    /// Inode of the file (0 when unknown): tells a file replaced at the same path apart.
    pub inode: u64,
    /// GNU build id, hex, when the kernel reported it (MMAP2 with build ids).
    pub build_id: Option<Arc<str>>,
}

impl Mapping {
    /// The file offset of `addr`, which must be inside the mapping.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.pgoff
    }
}

/// A process's executable mappings, sorted by start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table(Vec<Mapping>);

impl Table {
    /// A table of `maps`, in any order; overlaps resolve to the later one.
    pub fn new(maps: Vec<Mapping>) -> Self {
        let mut t = Table::default();
        for m in maps {
            t.insert(m);
        }
        t
    }

    /// Adds a mapping, replacing what it overlaps (an mmap over an old range replaces it).
    /// Anonymous code (`//anon`, what JITs run) only removes what it overlaps: addresses
    /// outside any file are named another way.
    pub fn insert(&mut self, m: Mapping) {
        if m.end <= m.start {
            return;
        }
        self.0.retain(|o| o.end <= m.start || o.start >= m.end);
        if !is_file(&m.path) {
            return;
        }
        let i = self.0.partition_point(|o| o.start < m.start);
        self.0.insert(i, m);
    }

    /// The mapping holding `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.0.partition_point(|m| m.start <= addr);
        let m = self.0.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }

    /// The mappings, by start.
    pub fn iter(&self) -> impl Iterator<Item = &Mapping> {
        self.0.iter()
    }

    /// Number of mappings.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Whether a mapping's name is a file (or the vDSO) rather than anonymous memory: perf names
/// anonymous mappings `//anon`, /proc leaves them empty or bracketed (`[heap]`).
fn is_file(path: &str) -> bool {
    (path.starts_with('/') && !path.starts_with("//")) || path == "[vdso]"
}

/// The executable, file-backed mappings (and the vDSO) of a `/proc/<pid>/maps` text. Lines that
/// do not parse are skipped: a mapping missed costs one frame's name, never the sample.
pub fn parse_maps(buf: &[u8]) -> Vec<Mapping> {
    let text = String::from_utf8_lossy(buf);
    text.lines().filter_map(parse_line).collect()
}

/// `start-end perms offset dev inode [path]`; the path may contain spaces.
fn parse_line(l: &str) -> Option<Mapping> {
    let mut f = l.splitn(6, ' ');
    let (range, perms, off, _dev, inode) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    let path = f.next().map(str::trim_start).unwrap_or("");
    if perms.as_bytes().get(2) != Some(&b'x') {
        return None;
    }
    if !is_file(path) {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(a, 16).ok()?,
        end: u64::from_str_radix(b, 16).ok()?,
        pgoff: u64::from_str_radix(off, 16).ok()?,
        path: path.into(),
        inode: inode.parse().ok()?,
        build_id: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, end: u64, path: &str) -> Mapping {
        Mapping {
            start,
            end,
            pgoff: 0x1000,
            path: path.into(),
            inode: 1,
            build_id: None,
        }
    }

    #[test]
    fn lines() {
        let t = b"55d0c8a00000-55d0c8a26000 r--p 00000000 fe:01 1835030                    /usr/bin/bash\n\
55d0c8a26000-55d0c8ae9000 r-xp 00026000 fe:01 1835030                    /usr/bin/bash\n\
7f0e6c028000-7f0e6c1a5000 r-xp 00028000 fe:01 1836365                    /usr/lib/x86_64-linux-gnu/libc.so.6\n\
7f0e6c400000-7f0e6c401000 rwxp 00000000 00:00 0 \n\
7f0e6c500000-7f0e6c501000 r-xp 00000000 00:05 77                         /memfd:jit (deleted)\n\
7f0e6c600000-7f0e6c601000 r-xp 00000000 fe:01 99                         /opt/my app/lib x.so\n\
7ffd5e1f0000-7ffd5e1f2000 r-xp 00000000 00:00 0                          [vdso]\n\
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n\
garbage\n";
        let v = parse_maps(t);
        let paths: Vec<&str> = v.iter().map(|m| m.path.as_ref()).collect();
        assert_eq!(
            paths,
            [
                "/usr/bin/bash",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/memfd:jit (deleted)",
                "/opt/my app/lib x.so",
                "[vdso]"
            ]
        );
        assert_eq!(
            (v[0].start, v[0].end, v[0].pgoff, v[0].inode),
            (0x55d0c8a26000, 0x55d0c8ae9000, 0x26000, 1835030)
        );
        assert_eq!(v[0].file_offset(0x55d0c8a26010), 0x26010);
    }

    #[test]
    fn table_lookup_and_replacement() {
        let mut t = Table::new(vec![m(0x3000, 0x4000, "/c"), m(0x1000, 0x2000, "/a")]);
        assert_eq!(t.find(0x1000).unwrap().path.as_ref(), "/a");
        assert_eq!(t.find(0x1fff).unwrap().path.as_ref(), "/a");
        assert!(t.find(0x2000).is_none());
        assert!(t.find(0x0fff).is_none());
        assert_eq!(t.find(0x3abc).unwrap().path.as_ref(), "/c");
        t.insert(m(0x1800, 0x3800, "/b"));
        assert_eq!(t.len(), 1, "overlapped mappings replaced");
        assert_eq!(t.find(0x2000).unwrap().path.as_ref(), "/b");
        t.insert(m(0x5000, 0x5000, "/empty"));
        assert_eq!(t.len(), 1);
        t.insert(m(0x1000, 0x2000, "//anon"));
        assert_eq!(
            t.len(),
            0,
            "anonymous code replaces the file mapping it overlaps"
        );
        assert!(t.find(0x1800).is_none());
    }
}
