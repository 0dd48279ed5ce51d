//! Which mappings grow: two `/proc/<pid>/smaps` readings compared mapping by mapping.
//!
//! Mappings are matched by start address. The brk heap keeps its start while its end moves,
//! glibc arenas and mmap'd regions keep theirs, so a growing region is one entry; regions
//! mapped since the first reading count from zero, and regions unmapped since count to zero.

use serde::{Deserialize, Serialize};

use jitterscope_sources::smaps::{Mapping, MappingKind};

/// Sums over all mappings, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Resident.
    pub rss: u64,
    /// Proportional resident.
    pub pss: u64,
    /// Resident anonymous.
    pub anon: u64,
    /// Swapped out.
    pub swap: u64,
}

impl Totals {
    /// The totals of a set of mappings.
    pub fn of(m: &[Mapping]) -> Totals {
        m.iter().fold(Totals::default(), |t, m| Totals {
            rss: t.rss + m.rss_bytes,
            pss: t.pss + m.pss_bytes,
            anon: t.anon + m.anonymous_bytes,
            swap: t.swap + m.swap_bytes,
        })
    }
}

/// One mapping's resident size in two readings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MappingGrowth {
    /// `[heap]`, a path, or `anonymous`.
    pub name: String,
    /// What it holds.
    pub kind: MappingKind,
    /// Start address (hex).
    pub start: String,
    /// Virtual size in the later reading, bytes.
    pub size: u64,
    /// Resident + swapped in the earlier reading, bytes.
    pub before: u64,
    /// Resident + swapped in the later one.
    pub after: u64,
    /// Growth per second.
    pub bytes_per_s: f64,
}

fn held(m: &Mapping) -> u64 {
    m.rss_bytes + m.swap_bytes
}

/// Mappings whose resident + swapped size changed from `a` to `b` (`secs` apart), largest
/// growth first; shrinking ones last.
pub fn compare(a: &[Mapping], b: &[Mapping], secs: f64) -> Vec<MappingGrowth> {
    let mut out = Vec::new();
    let row = |m: &Mapping, before: u64, after: u64| MappingGrowth {
        name: if m.path.is_empty() {
            "anonymous".to_string()
        } else {
            m.path.clone()
        },
        kind: m.kind(),
        start: format!("{:x}", m.start),
        size: m.end - m.start,
        before,
        after,
        bytes_per_s: (after as f64 - before as f64) / secs.max(1e-9),
    };
    for m in b {
        let before = a.iter().find(|x| x.start == m.start).map_or(0, held);
        if held(m) != before {
            out.push(row(m, before, held(m)));
        }
    }
    for m in a {
        if held(m) > 0 && !b.iter().any(|x| x.start == m.start) {
            out.push(row(m, held(m), 0));
        }
    }
    out.sort_by(|x, y| {
        let g = |r: &MappingGrowth| r.after as i128 - r.before as i128;
        g(y).cmp(&g(x)).then_with(|| x.start.cmp(&y.start))
    });
    out
}

/// The regions worth scanning for leaked data: writable, private, anonymous or the heap,
/// resident; those that grew from `before` first, then by resident size.
pub fn scan_order(m: &[Mapping], before: Option<&[Mapping]>) -> Vec<(u64, u64)> {
    let mut v: Vec<(&Mapping, i128)> = m
        .iter()
        .filter(|m| {
            m.writable()
                && m.perms.ends_with('p')
                && matches!(m.kind(), MappingKind::Heap | MappingKind::Anonymous)
                && m.rss_bytes > 0
        })
        .map(|m| {
            let grew = before.map_or(0, |b| {
                held(m) as i128 - b.iter().find(|x| x.start == m.start).map_or(0, held) as i128
            });
            (m, grew)
        })
        .collect();
    v.sort_by(|(a, ga), (b, gb)| {
        gb.cmp(ga)
            .then(b.rss_bytes.cmp(&a.rss_bytes))
            .then(a.start.cmp(&b.start))
    });
    v.into_iter().map(|(m, _)| (m.start, m.end)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, path: &str, rss_kib: u64) -> Mapping {
        Mapping {
            start,
            end: start + (64 << 20),
            perms: "rw-p".into(),
            path: path.into(),
            rss_bytes: rss_kib << 10,
            anonymous_bytes: rss_kib << 10,
            ..Default::default()
        }
    }

    #[test]
    fn names_growing_mappings_first() {
        let a = vec![
            m(0x1000, "[heap]", 100),
            m(0x9000, "", 50),
            m(0x7000, "", 10),
        ];
        let b = vec![
            m(0x1000, "[heap]", 4100),
            m(0x9000, "", 50),
            m(0xa000, "", 800),
        ];
        let g = compare(&a, &b, 10.0);
        assert_eq!(g[0].name, "[heap]");
        assert_eq!(g[0].kind, MappingKind::Heap);
        assert_eq!(g[0].bytes_per_s, 4000.0 * 1024.0 / 10.0);
        assert_eq!((g[1].start.as_str(), g[1].before), ("a000", 0));
        assert_eq!((g[2].start.as_str(), g[2].after), ("7000", 0));
        assert_eq!(g.len(), 3);
        assert_eq!(Totals::of(&b).rss, (4100 + 50 + 800) << 10);
        let order = scan_order(&b, Some(&a));
        assert_eq!(order[0].0, 0x1000);
        assert_eq!(order[1].0, 0xa000);
    }
}
