//! /proc/zoneinfo: per memory zone, free pages against the min/low/high watermarks (kswapd
//! wakes below low, allocations stall in direct reclaim below min), lowmem protection, and the
//! zone's counters; plus per-node counters where the kernel prints them (4.8+).
//!
//! Parsed by key rather than by position: the layout changed often (3.x printed the counters
//! before `protection:`, 4.8 moved node counters to a `per-node stats` block, 4.12 began
//! printing empty zones up to `protection:` only, 5.0 added `boost`, 6.x `promo`). Per-CPU
//! pagesets are skipped: they are per-CPU allocator caches, not pressure signals.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, lossy, parse_u64, ParseError};

/// One zone of one node. Watermarks and sizes are in pages (`getconf PAGESIZE` bytes each).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Zone {
    /// NUMA node id.
    pub node: u32,
    /// Zone name (`DMA`, `DMA32`, `Normal`, `Movable`, `Device`, `HighMem`).
    pub zone: String,
    /// Free pages.
    pub free_pages: u64,
    /// Min watermark: below it only atomic/reserve allocations succeed; others reclaim directly.
    pub min_pages: u64,
    /// Low watermark: kswapd is woken below it.
    pub low_pages: u64,
    /// High watermark: kswapd stops once free pages reach it.
    pub high_pages: u64,
    /// Temporary watermark boost after fragmentation events (5.0+).
    pub boost_pages: Option<u64>,
    /// Promotion watermark for memory tiering (6.x).
    pub promo_pages: Option<u64>,
    /// Pages spanned by the zone, holes included.
    pub spanned_pages: u64,
    /// Physical pages in the zone. 0 for an empty zone, which has no counters either.
    pub present_pages: u64,
    /// Pages managed by the buddy allocator (3.8+).
    pub managed_pages: Option<u64>,
    /// Pages reserved for CMA (6.x prints it among the watermarks).
    pub cma_pages: Option<u64>,
    /// Pages this zone keeps back from allocations that could have used a lower zone, one per
    /// zone index (`lowmem_reserve`).
    pub protection_pages: Vec<u64>,
    /// First page frame number of the zone.
    pub start_pfn: Option<u64>,
    /// Every other `key value` of the zone, in file order: `nr_*` and `numa_*` counters and
    /// flags such as `node_unreclaimable`.
    pub stats: Vec<(String, u64)>,
}

impl Zone {
    /// A value from [`Zone::stats`].
    pub fn stat(&self, key: &str) -> Option<u64> {
        super::lookup(&self.stats, key)
    }
}

/// The `per-node stats` block of a node (printed once, inside its first populated zone).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeStats {
    /// NUMA node id.
    pub node: u32,
    /// `(key, value)` in file order (`nr_inactive_anon`, `workingset_refault_file`, ...).
    pub stats: Vec<(String, u64)>,
}

/// The parsed file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ZoneInfo {
    /// Per-node counters (empty before 4.8).
    pub nodes: Vec<NodeStats>,
    /// Every zone printed, empty ones included, in file order.
    pub zones: Vec<Zone>,
}

impl ZoneInfo {
    /// The zone `zone` of node `node`.
    pub fn get(&self, node: u32, zone: &str) -> Option<&Zone> {
        self.zones.iter().find(|z| z.node == node && z.zone == zone)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Section {
    Zone,
    NodeStats,
    Pagesets,
}

/// Keys of the per-CPU pageset block (`vm` starts `vm stats threshold: N`).
const PAGESET_KEYS: &[&[u8]] = &[
    b"cpu:",
    b"count:",
    b"high:",
    b"batch:",
    b"high_min:",
    b"high_max:",
    b"vm",
];

const REQUIRED: [&str; 6] = ["pages free", "min", "low", "high", "spanned", "present"];

fn parse_protection(rest: &[u8], n: usize) -> Result<Vec<u64>, ParseError> {
    let inner = crate::fileio::trim_ascii(rest)
        .strip_prefix(b"(")
        .and_then(|r| r.strip_suffix(b")"))
        .ok_or_else(|| ParseError::new(n, "protection: expected `(a, b, ...)`"))?;
    inner
        .split(|&c| c == b',')
        .map(|v| parse_u64(v, n, "protection"))
        .collect()
}

fn finish(z: Zone, seen: u8, n: usize, zones: &mut Vec<Zone>) -> Result<(), ParseError> {
    for (i, key) in REQUIRED.iter().enumerate() {
        if seen & (1 << i) == 0 {
            return Err(ParseError::new(
                n,
                format!("zone {} of node {} has no `{key}`", z.zone, z.node),
            ));
        }
    }
    zones.push(z);
    Ok(())
}

/// Parses /proc/zoneinfo.
pub fn parse_zoneinfo(buf: &[u8]) -> Result<ZoneInfo, ParseError> {
    let mut info = ZoneInfo::default();
    let mut cur: Option<(Zone, u8)> = None;
    let mut section = Section::Zone;
    let mut last_line = 0;
    for (n, l) in lines(buf) {
        last_line = n;
        let mut it = fields(l);
        let Some(key) = it.next() else { continue };
        if key == b"Node" {
            if let Some((z, seen)) = cur.take() {
                finish(z, seen, n, &mut info.zones)?;
            }
            let (node, zone, mut rest) = super::buddyinfo::parse_node_zone(l, n)?;
            if rest.next().is_some() {
                return Err(ParseError::new(n, "trailing fields after zone name"));
            }
            cur = Some((
                Zone {
                    node,
                    zone: lossy(zone),
                    ..Zone::default()
                },
                0,
            ));
            section = Section::Zone;
            continue;
        }
        let Some((z, seen)) = cur.as_mut() else {
            return Err(ParseError::new(n, "expected `Node N, zone NAME` first"));
        };
        if section == Section::Pagesets {
            if PAGESET_KEYS.contains(&key) {
                continue;
            }
            section = Section::Zone;
        }
        match key {
            b"per-node" => {
                info.nodes.push(NodeStats {
                    node: z.node,
                    stats: Vec::with_capacity(64),
                });
                section = Section::NodeStats;
                continue;
            }
            b"pagesets" => {
                section = Section::Pagesets;
                continue;
            }
            b"protection:" => {
                let rest = &l[l.iter().position(|&c| c == b':').unwrap_or(0) + 1..];
                z.protection_pages = parse_protection(rest, n)?;
                continue;
            }
            _ => {}
        }
        let (key, value) = match (key, it.next()) {
            (b"pages", Some(b"free")) => (&b"pages free"[..], it.next()),
            (k, v) => (k.strip_suffix(b":").unwrap_or(k), v),
        };
        let value = value.ok_or_else(|| ParseError::new(n, "key without value"))?;
        if it.next().is_some() {
            return Err(ParseError::new(n, "expected `key value`"));
        }
        let v = parse_u64(value, n, "value")?;
        // `pages free` ends the node block: what follows belongs to the zone.
        if section == Section::NodeStats && key != b"pages free" {
            if let Some(node) = info.nodes.last_mut() {
                node.stats.push((lossy(key), v));
            }
            continue;
        }
        section = Section::Zone;
        if let Some(i) = REQUIRED.iter().position(|r| r.as_bytes() == key) {
            *seen |= 1 << i;
        }
        match key {
            b"pages free" => z.free_pages = v,
            b"min" => z.min_pages = v,
            b"low" => z.low_pages = v,
            b"high" => z.high_pages = v,
            b"boost" => z.boost_pages = Some(v),
            b"promo" => z.promo_pages = Some(v),
            b"spanned" => z.spanned_pages = v,
            b"present" => z.present_pages = v,
            b"managed" => z.managed_pages = Some(v),
            b"cma" => z.cma_pages = Some(v),
            b"start_pfn" => z.start_pfn = Some(v),
            _ => z.stats.push((lossy(key), v)),
        }
    }
    match cur {
        Some((z, seen)) => finish(z, seen, last_line, &mut info.zones)?,
        None => return Err(ParseError::new(0, "no zones")),
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::fixtures;

    #[test]
    fn parses_captured_zoneinfo() {
        let zi = parse_zoneinfo(&fixtures::read("host/proc/zoneinfo")).unwrap();
        let names: Vec<&str> = zi.zones.iter().map(|z| z.zone.as_str()).collect();
        assert_eq!(names, ["DMA", "DMA32", "Normal", "Movable", "Device"]);
        let normal = zi.get(0, "Normal").unwrap();
        assert!(normal.min_pages < normal.low_pages && normal.low_pages < normal.high_pages);
        assert_eq!(normal.free_pages, 107999);
        assert_eq!(normal.min_pages, 6274);
        assert_eq!(normal.start_pfn, Some(1048576));
        assert_eq!(normal.stat("nr_free_pages"), Some(normal.free_pages));
        assert!(normal.stat("numa_hit").is_some());
        assert_eq!(normal.stat("node_unreclaimable"), Some(0));
        // Pagesets are skipped, so their `high:` never overwrites the watermark.
        assert!(normal.stat("count").is_none() && normal.stat("batch").is_none());
        let dma = zi.get(0, "DMA").unwrap();
        assert_eq!(dma.protection_pages, [0, 3018, 4810, 4810, 4810]);
        assert_eq!((dma.boost_pages, dma.promo_pages), (Some(0), Some(91)));
        assert_eq!(dma.managed_pages, Some(3840));
        // The per-node block sits inside the first zone but is the node's, not DMA's.
        assert_eq!(zi.nodes.len(), 1);
        assert_eq!(zi.nodes[0].node, 0);
        assert_eq!(
            super::super::lookup(&zi.nodes[0].stats, "nr_dirty"),
            Some(17077)
        );
        assert!(dma.stat("nr_dirty").is_none());
        // Empty zones stop after `protection:` and carry no counters.
        let movable = zi.get(0, "Movable").unwrap();
        assert_eq!(movable.present_pages, 0);
        assert_eq!(movable.min_pages, 32);
        assert!(movable.stats.is_empty());
        assert_eq!(movable.start_pfn, None);
        assert_eq!(zi.get(0, "Device").unwrap().protection_pages, [0; 5]);
    }

    #[test]
    fn parses_3_10_layout() {
        let zi = parse_zoneinfo(&fixtures::read("edge/zoneinfo-3.10")).unwrap();
        assert!(zi.nodes.is_empty());
        assert_eq!(zi.zones.len(), 3);
        let normal = zi.get(0, "Normal").unwrap();
        assert_eq!(
            (normal.min_pages, normal.low_pages, normal.high_pages),
            (11260, 14075, 16890)
        );
        assert_eq!(normal.boost_pages, None);
        assert_eq!(normal.protection_pages, [0, 0, 0, 0]);
        assert_eq!(normal.stat("nr_alloc_batch"), Some(2127));
        assert_eq!(normal.stat("scanned"), Some(0));
        assert_eq!(normal.stat("all_unreclaimable"), Some(0));
        assert_eq!(normal.stat("inactive_ratio"), Some(5));
        assert_eq!(normal.start_pfn, Some(1048576));
        assert_eq!(zi.get(1, "Normal").unwrap().free_pages, 3900151);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_zoneinfo(b"").is_err());
        assert!(parse_zoneinfo(b"  pages free 1\n").is_err());
        assert!(parse_zoneinfo(b"Node 0, zone DMA\n  pages free 1\n").is_err());
        assert!(parse_zoneinfo(
            b"Node 0, zone DMA\n pages free 1\n min 1\n low 2\n high 3\n spanned 4\n present 4\n protection: (0, x)\n"
        )
        .is_err());
        assert!(parse_zoneinfo(
            b"Node 0, zone DMA\n pages free 1\n min 1\n low 2\n high 3\n spanned 4\n present 4\n protection: (0, 1)\n"
        )
        .is_ok());
    }
}
