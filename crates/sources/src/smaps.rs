//! `/proc/<pid>/smaps`: every mapping of a process with its memory accounting. `memleak`
//! samples it to name the mappings that grow ([heap], anonymous regions, file mappings,
//! stacks) and to know which address ranges to scan.

use serde::{Deserialize, Serialize};

use crate::fileio::{lines, lossy, parse_u64, trim_ascii, ParseError};

/// One mapping (a VMA) and its accounting. Sizes are bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rwxp` / `rw-s` as the kernel prints them.
    pub perms: String,
    /// Offset into the mapped file.
    pub offset: u64,
    /// Inode of the mapped file (0: anonymous).
    pub inode: u64,
    /// The path, `[heap]`, `[stack]`, `[anon:<name>]`...; empty for an anonymous mapping.
    pub path: String,
    /// Virtual size (Size).
    pub size_bytes: u64,
    /// Resident (Rss).
    pub rss_bytes: u64,
    /// Proportional share of resident pages (Pss).
    pub pss_bytes: u64,
    /// Resident anonymous pages (Anonymous).
    pub anonymous_bytes: u64,
    /// Swapped out (Swap).
    pub swap_bytes: u64,
    /// Private dirty pages (Private_Dirty).
    pub private_dirty_bytes: u64,
}

/// What a mapping holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingKind {
    /// The brk heap (`[heap]`): glibc malloc's main arena.
    Heap,
    /// A thread's or the main stack.
    Stack,
    /// Anonymous memory (mmap'd arenas, large allocations, named `[anon:...]` regions).
    Anonymous,
    /// A mapped file (code, data, mmap'd files).
    File,
    /// Kernel-provided (`[vdso]`, `[vvar]`, `[vsyscall]`, ...).
    Special,
}

impl Mapping {
    /// What the mapping holds, by its path.
    pub fn kind(&self) -> MappingKind {
        match self.path.as_str() {
            "" => MappingKind::Anonymous,
            "[heap]" => MappingKind::Heap,
            p if p == "[stack]" || p.starts_with("[stack:") => MappingKind::Stack,
            p if p.starts_with("[anon") => MappingKind::Anonymous,
            p if p.starts_with('[') => MappingKind::Special,
            _ => MappingKind::File,
        }
    }

    /// Whether the process can write it (only writable private memory can hold a leak).
    pub fn writable(&self) -> bool {
        self.perms.as_bytes().get(1) == Some(&b'w')
    }
}

/// Parses `/proc/<pid>/smaps` (or `smaps_rollup`, which is one pseudo-mapping). Lines it does
/// not know are skipped, so newer kernels' fields cost nothing; a malformed header or value of a
/// field it reads is an error naming the line.
pub fn parse_smaps(buf: &[u8]) -> Result<Vec<Mapping>, ParseError> {
    let mut out: Vec<Mapping> = Vec::new();
    for (n, l) in lines(buf) {
        if l.is_empty() {
            continue;
        }
        if let Some(m) = header(l, n)? {
            out.push(m);
            continue;
        }
        let Some(colon) = l.iter().position(|&c| c == b':') else {
            continue;
        };
        let (k, v) = (&l[..colon], &l[colon + 1..]);
        let field: fn(&mut Mapping) -> &mut u64 = match k {
            b"Size" => |m| &mut m.size_bytes,
            b"Rss" => |m| &mut m.rss_bytes,
            b"Pss" => |m| &mut m.pss_bytes,
            b"Anonymous" => |m| &mut m.anonymous_bytes,
            b"Swap" => |m| &mut m.swap_bytes,
            b"Private_Dirty" => |m| &mut m.private_dirty_bytes,
            _ => continue,
        };
        let Some(m) = out.last_mut() else {
            return Err(ParseError::new(n, "smaps: a field before any mapping"));
        };
        let v = trim_ascii(v);
        let num = v
            .strip_suffix(b"kB")
            .ok_or_else(|| ParseError::new(n, "smaps: a size without kB"))?;
        *field(m) = parse_u64(trim_ascii(num), n, "smaps size")?.saturating_mul(1024);
    }
    Ok(out)
}

/// A mapping header (`start-end perms offset dev inode [path]`), `None` for a field line.
fn header(l: &[u8], n: usize) -> Result<Option<Mapping>, ParseError> {
    // Field lines start with a capitalised key; headers with a hex address and a dash.
    let Some(dash) = l.iter().position(|&c| c == b'-') else {
        return Ok(None);
    };
    if dash == 0 || !l[..dash].iter().all(u8::is_ascii_hexdigit) {
        return Ok(None);
    }
    let bad = |what: &str| ParseError::new(n, format!("smaps: header: {what}"));
    let mut rest = l;
    let mut next = || -> Option<&[u8]> {
        let t = trim_start(rest);
        let end = t.iter().position(|&c| c == b' ').unwrap_or(t.len());
        let (tok, after) = t.split_at(end);
        rest = after;
        (!tok.is_empty()).then_some(tok)
    };
    let range = next().ok_or_else(|| bad("no range"))?;
    let perms = next().ok_or_else(|| bad("no permissions"))?;
    let offset = next().ok_or_else(|| bad("no offset"))?;
    let _dev = next().ok_or_else(|| bad("no device"))?;
    let inode = next().ok_or_else(|| bad("no inode"))?;
    let (a, b) = range.split_at(dash);
    let hex = |s: &[u8], what: &str| {
        std::str::from_utf8(s)
            .ok()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| bad(what))
    };
    let (start, end) = (hex(a, "start")?, hex(&b[1..], "end")?);
    if end < start || perms.len() != 4 {
        return Err(bad("range or permissions"));
    }
    Ok(Some(Mapping {
        start,
        end,
        perms: lossy(perms),
        offset: hex(offset, "offset")?,
        inode: parse_u64(inode, n, "inode")?,
        // The path is the rest of the line, spaces included.
        path: lossy(trim_ascii(rest)),
        ..Default::default()
    }))
}

fn trim_start(s: &[u8]) -> &[u8] {
    let i = s.iter().position(|&c| c != b' ').unwrap_or(s.len());
    &s[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &[u8] = b"\
55d0c8a2e000-55d0c8a30000 r--p 00000000 fe:01 1835052                    /usr/bin/my prog
Size:                  8 kB
Rss:                   8 kB
Pss:                   4 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd mr mw me dw sd
55d0c9000000-55d0c9021000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
Rss:                 120 kB
Anonymous:           120 kB
7f0000000000-7f0000100000 rw-p 00000000 00:00 0 
Size:               1024 kB
Rss:                 512 kB
Anonymous:           512 kB
Swap:                 16 kB
THPeligible:    0
";

    #[test]
    fn parses_headers_fields_and_kinds() {
        let m = parse_smaps(SAMPLE).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].path, "/usr/bin/my prog");
        assert_eq!(m[0].kind(), MappingKind::File);
        assert_eq!((m[0].rss_bytes, m[0].pss_bytes), (8192, 4096));
        assert!(!m[0].writable());
        assert_eq!(m[1].kind(), MappingKind::Heap);
        assert_eq!(m[1].end - m[1].start, 132 * 1024);
        assert_eq!(m[2].kind(), MappingKind::Anonymous);
        assert_eq!(
            (m[2].anonymous_bytes, m[2].swap_bytes),
            (512 * 1024, 16 * 1024)
        );
        assert!(m[2].writable());
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        assert!(parse_smaps(b"Rss: 4 kB\n").is_err());
        assert!(parse_smaps(b"1000-0 rw-p 0 00:00 0\n").is_err());
        assert!(parse_smaps(b"1000-2000 rw-p 0 00:00\n").is_err());
        assert!(parse_smaps(b"1000-2000 rw-p 0 00:00 0\nRss: x kB\n").is_err());
        assert_eq!(parse_smaps(b"").unwrap(), Vec::new());
    }

    #[test]
    fn kernel_names_are_sorted() {
        let k = |p: &str| {
            Mapping {
                path: p.into(),
                ..Default::default()
            }
            .kind()
        };
        assert_eq!(k("[stack]"), MappingKind::Stack);
        assert_eq!(k("[anon:jemalloc]"), MappingKind::Anonymous);
        assert_eq!(k("[vdso]"), MappingKind::Special);
        assert_eq!(k("/lib/x.so (deleted)"), MappingKind::File);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_or_fail_cleanly(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = parse_smaps(&b);
        }

        #[test]
        fn mutated_real_text_parses_or_fails_cleanly(at in 0usize..400, byte in proptest::prelude::any::<u8>()) {
            let mut b = SAMPLE.to_vec();
            let i = at % b.len();
            b[i] = byte;
            let _ = parse_smaps(&b);
        }
    }
}
