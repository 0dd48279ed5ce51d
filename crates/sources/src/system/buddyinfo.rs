//! /proc/buddyinfo: free blocks per allocation order, per node and zone. A zone with plenty of
//! free pages but no high-order blocks is fragmented: high-order allocations will compact or
//! reclaim.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, lossy, parse_u64, ParseError};

/// One `Node 0, zone   Normal  14500 9708 ...` line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BuddyZone {
    /// NUMA node id.
    pub node: u32,
    /// Zone name (`DMA`, `DMA32`, `Normal`, `Movable`, `HighMem`).
    pub zone: String,
    /// Free blocks of 2^order pages, indexed by order (usually 0..=10, `MAX_ORDER` dependent).
    pub free_blocks: Vec<u64>,
}

/// The parsed file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BuddyInfo {
    /// Every populated zone, in file order.
    pub zones: Vec<BuddyZone>,
}

impl BuddyInfo {
    /// The zone `zone` of node `node`.
    pub fn get(&self, node: u32, zone: &str) -> Option<&BuddyZone> {
        self.zones.iter().find(|z| z.node == node && z.zone == zone)
    }
}

/// Parses the `Node N, zone NAME` prefix shared with /proc/zoneinfo; returns the node, the
/// zone name and the fields after it.
pub(crate) fn parse_node_zone(
    l: &[u8],
    n: usize,
) -> Result<(u32, &[u8], impl Iterator<Item = &[u8]>), ParseError> {
    let mut it = fields(l);
    if it.next() != Some(b"Node") {
        return Err(ParseError::new(n, "expected `Node N, zone NAME`"));
    }
    let node = it
        .next()
        .and_then(|f| f.strip_suffix(b","))
        .ok_or_else(|| ParseError::new(n, "expected `Node N,`"))?;
    let node = super::parse_u32(node, n, "node")?;
    if it.next() != Some(b"zone") {
        return Err(ParseError::new(n, "expected `zone`"));
    }
    let zone = it
        .next()
        .ok_or_else(|| ParseError::new(n, "missing zone name"))?;
    Ok((node, zone, it))
}

/// Parses /proc/buddyinfo.
pub fn parse_buddyinfo(buf: &[u8]) -> Result<BuddyInfo, ParseError> {
    let mut zones = Vec::new();
    for (n, l) in lines(buf) {
        if fields(l).next().is_none() {
            continue;
        }
        let (node, zone, rest) = parse_node_zone(l, n)?;
        let free_blocks = rest
            .map(|f| parse_u64(f, n, "free blocks"))
            .collect::<Result<Vec<_>, _>>()?;
        if free_blocks.is_empty() {
            return Err(ParseError::new(n, "zone without free block counts"));
        }
        zones.push(BuddyZone {
            node,
            zone: lossy(zone),
            free_blocks,
        });
    }
    if zones.is_empty() {
        return Err(ParseError::new(0, "empty buddyinfo"));
    }
    Ok(BuddyInfo { zones })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_buddyinfo() {
        let b = parse_buddyinfo(&crate::system::fixtures::read("host/proc/buddyinfo")).unwrap();
        let names: Vec<&str> = b.zones.iter().map(|z| z.zone.as_str()).collect();
        assert_eq!(names, ["DMA", "DMA32", "Normal"]);
        let normal = b.get(0, "Normal").unwrap();
        assert_eq!(normal.free_blocks.len(), 11);
        assert_eq!(normal.free_blocks[0], 14500);
        assert_eq!(normal.free_blocks[10], 2);
        assert!(b.get(1, "Normal").is_none());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_buddyinfo(b"").is_err());
        assert!(parse_buddyinfo(b"Node 0 zone DMA 1 2\n").is_err());
        assert!(parse_buddyinfo(b"Node 0, zone DMA\n").is_err());
        assert!(parse_buddyinfo(b"Node 0, zone DMA 1 x\n").is_err());
    }
}
