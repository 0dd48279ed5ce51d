//! String census: counts the printable strings in a process's writable memory, so that two
//! censuses taken apart show which strings pile up. This is what found case 5's leak (2,082,193
//! copies of `couchbase.context_info`, up from 49,791), done without a core dump.
//!
//! A string is a run of at least `min_len` printable ASCII bytes, without the blanks around it
//! (records are often padded). Digit runs are folded to `#`
//! (unless `exact`), so `ctx{req=1041}` and `ctx{req=7}` count as one string: leaked records
//! usually differ only in their ids. Strings are cut at [`MAX_LEN`] bytes.
//!
//! Memory is read in [`CHUNK`](crate::procmem::CHUNK)-byte reads through [`MemRead`], never more than the budget, so
//! the target is never stopped and its mmap lock is taken only for one chunk's copy at a time.
//! A string that straddles two chunks is counted once, from the chunk it starts in.
//!
//! The scanner is written here rather than taken from a crate: it is a byte-class table lookup
//! per byte. Strings are counted in a hash map with ahash: with the standard SipHash, hashing
//! was most of the time on a heap dense with strings.

use std::collections::HashMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::procmem::{for_each_chunk, MemRead};

/// Longest string kept (longer runs are cut).
pub const MAX_LEN: usize = 96;

/// How to take a census.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Shortest run of printable bytes counted.
    pub min_len: usize,
    /// Most bytes read in all.
    pub budget_bytes: u64,
    /// Count strings as they are, without folding digit runs.
    pub exact: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            min_len: 10,
            budget_bytes: 1 << 30,
            exact: false,
        }
    }
}

/// The strings of some memory and how many times each occurs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Census {
    /// Occurrences per (folded) string.
    pub counts: Counts,
    /// Bytes read.
    pub bytes_scanned: u64,
    /// Bytes of the regions that the budget left unread.
    pub bytes_skipped: u64,
    /// Seconds the scan took.
    pub seconds: f64,
}

/// Occurrences per string.
pub type Counts = HashMap<String, u64, ahash::RandomState>;

/// One string's count in two censuses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Growth {
    /// The (folded) string.
    pub string: String,
    /// Count in the earlier census.
    pub before: u64,
    /// Count in the later one.
    pub after: u64,
}

/// Printable ASCII, the bytes a counted string is made of.
const fn printable_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0x20;
    while b < 0x7f {
        t[b] = true;
        b += 1;
    }
    t[b'\t' as usize] = true;
    t
}
static PRINTABLE: [bool; 256] = printable_table();

/// Counts the strings of `regions` (`(start, end)` addresses) in `mem`, in order, until the
/// budget is spent.
pub fn take(mem: &dyn MemRead, regions: &[(u64, u64)], o: Options) -> Census {
    let started = Instant::now();
    let mut c = Census::default();
    let mut key = Vec::with_capacity(MAX_LEN);
    let r = for_each_chunk(mem, regions, o.budget_bytes, |_, b| {
        scan(b, o, &mut key, &mut c.counts)
    });
    c.bytes_scanned = r.scanned;
    c.bytes_skipped = r.skipped;
    c.seconds = started.elapsed().as_secs_f64();
    c
}

/// Counts the strings of one buffer into `counts`.
pub fn scan(b: &[u8], o: Options, key: &mut Vec<u8>, counts: &mut Counts) {
    let mut i = 0;
    let n = b.len();
    while i < n {
        if !PRINTABLE[b[i] as usize] {
            i += 1;
            continue;
        }
        let mut s = i;
        while i < n && PRINTABLE[b[i] as usize] {
            i += 1;
        }
        // Records padded with blanks are common; the padding is not part of the string.
        let mut e = i;
        while s < e && matches!(b[s], b' ' | b'\t') {
            s += 1;
        }
        while e > s && matches!(b[e - 1], b' ' | b'\t') {
            e -= 1;
        }
        if e - s < o.min_len {
            continue;
        }
        let run = &b[s..e.min(s + MAX_LEN)];
        key.clear();
        if o.exact {
            key.extend_from_slice(run);
        } else {
            let mut in_digits = false;
            for &ch in run {
                if ch.is_ascii_digit() {
                    if !in_digits {
                        key.push(b'#');
                    }
                    in_digits = true;
                } else {
                    key.push(ch);
                    in_digits = false;
                }
            }
        }
        // Printable ASCII is UTF-8.
        let k = std::str::from_utf8(key).expect("ASCII");
        match counts.get_mut(k) {
            Some(v) => *v += 1,
            None => {
                counts.insert(k.to_string(), 1);
            }
        }
    }
}

/// The strings whose count grew most from `before` to `after`, largest growth first.
pub fn growth(before: &Census, after: &Census, n: usize) -> Vec<Growth> {
    let mut g: Vec<Growth> = after
        .counts
        .iter()
        .filter_map(|(s, &a)| {
            let b = before.counts.get(s).copied().unwrap_or(0);
            (a > b).then(|| Growth {
                string: s.clone(),
                before: b,
                after: a,
            })
        })
        .collect();
    g.sort_by(|x, y| {
        (y.after - y.before)
            .cmp(&(x.after - x.before))
            .then_with(|| x.string.cmp(&y.string))
    });
    g.truncate(n);
    g
}

/// Keeps only the `n` most frequent strings (for snapshots written to disk).
pub fn keep_top(c: &mut Census, n: usize) {
    if c.counts.len() <= n {
        return;
    }
    let mut v: Vec<(String, u64)> = c.counts.drain().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(n);
    c.counts = v.into_iter().collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procmem::Image;

    fn census(bytes: &[u8], o: Options) -> Census {
        let img = Image {
            regions: vec![(0x1000, bytes.to_vec())],
        };
        take(&img, &[(0x1000, 0x1000 + bytes.len() as u64)], o)
    }

    #[test]
    fn counts_folded_strings_and_skips_short_ones() {
        let mut mem = Vec::new();
        for i in 0..50 {
            mem.extend_from_slice(format!("couchbase.context_info{{req={i}}}\0").as_bytes());
            mem.extend_from_slice(b"\x01\x02short\0");
        }
        let c = census(&mem, Options::default());
        assert_eq!(c.counts.get("couchbase.context_info{req=#}"), Some(&50));
        assert!(!c.counts.keys().any(|k| k.contains("short")));
        let padded = census(b"\0   a padded record      \0", Options::default());
        assert_eq!(padded.counts.get("a padded record"), Some(&1));
        assert_eq!(c.bytes_scanned, mem.len() as u64);
        let exact = census(
            &mem,
            Options {
                exact: true,
                ..Options::default()
            },
        );
        assert_eq!(exact.counts.get("couchbase.context_info{req=7}"), Some(&1));
    }

    #[test]
    fn the_budget_bounds_what_is_read() {
        let mem = vec![b'a'; 3 * crate::procmem::CHUNK];
        let c = census(
            &mem,
            Options {
                budget_bytes: crate::procmem::CHUNK as u64 + 10,
                ..Options::default()
            },
        );
        assert_eq!(c.bytes_scanned, crate::procmem::CHUNK as u64 + 10);
        assert_eq!(c.bytes_skipped, 2 * crate::procmem::CHUNK as u64 - 10);
    }

    #[test]
    fn growth_ranks_by_increase() {
        let mk = |v: &[(&str, u64)]| Census {
            counts: v.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
            ..Default::default()
        };
        let g = growth(
            &mk(&[("a", 10), ("b", 5)]),
            &mk(&[("a", 12), ("b", 500), ("c", 3), ("d", 1)]),
            2,
        );
        assert_eq!(
            g.iter().map(|g| g.string.as_str()).collect::<Vec<_>>(),
            ["b", "c"]
        );
        assert_eq!((g[0].before, g[0].after), (5, 500));
    }

    #[test]
    fn unreadable_ranges_are_skipped() {
        let img = Image {
            regions: vec![(0x10000, b"hello world, a string".to_vec())],
        };
        let c = take(
            &img,
            &[(0x0, 0x3000), (0x10000, 0x10015)],
            Options::default(),
        );
        assert_eq!(c.counts.get("hello world, a string"), Some(&1));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_scan(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2000), min in 1usize..20) {
            let c = census(&b, Options { min_len: min, ..Options::default() });
            for k in c.counts.keys() {
                proptest::prop_assert!(k.len() <= MAX_LEN);
            }
        }
    }
}
