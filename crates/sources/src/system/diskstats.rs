//! /proc/diskstats: cumulative I/O counters per block device and partition (the source of
//! iostat's IOPS, await and utilisation).
//!
//! The line grew over time: 14 fields (3 identity + 11 counters) up to 4.17, 18 with the four
//! discard counters from 4.18, 20 with the two flush counters from 5.5. Counters a kernel does
//! not print are `None`. Sectors are always 512-byte units, whatever the device's block size.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, lossy, parse_u64, ParseError};

/// One device line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskStat {
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Device name (`vda`, `nvme0n1p1`, `dm-0`).
    pub name: String,
    /// Reads completed.
    pub reads_completed: u64,
    /// Adjacent reads merged before being issued.
    pub reads_merged: u64,
    /// Sectors read (512 bytes each).
    pub read_sectors: u64,
    /// Time spent by all reads, ms (summed over concurrent requests).
    pub read_ms: u64,
    /// Writes completed.
    pub writes_completed: u64,
    /// Adjacent writes merged.
    pub writes_merged: u64,
    /// Sectors written (512 bytes each).
    pub write_sectors: u64,
    /// Time spent by all writes, ms.
    pub write_ms: u64,
    /// Requests in flight right now (a gauge, the only non-counter).
    pub in_flight: u64,
    /// Time with at least one request in flight, ms (utilisation numerator).
    pub io_ticks_ms: u64,
    /// Weighted time in queue: in-flight requests × ms (average queue size numerator).
    pub time_in_queue_ms: u64,
    /// Discards completed (4.18+).
    pub discards_completed: Option<u64>,
    /// Discards merged (4.18+).
    pub discards_merged: Option<u64>,
    /// Sectors discarded (4.18+).
    pub discard_sectors: Option<u64>,
    /// Time spent by all discards, ms (4.18+).
    pub discard_ms: Option<u64>,
    /// Flush requests completed (5.5+).
    pub flushes_completed: Option<u64>,
    /// Time spent by all flushes, ms (5.5+).
    pub flush_ms: Option<u64>,
}

/// The parsed file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskStats {
    /// Every device and partition, in file order.
    pub disks: Vec<DiskStat>,
}

impl DiskStats {
    /// The device named `name`.
    pub fn get(&self, name: &str) -> Option<&DiskStat> {
        self.disks.iter().find(|d| d.name == name)
    }
}

fn parse_line(l: &[u8], n: usize) -> Result<DiskStat, ParseError> {
    let mut f = [&b""[..]; 20];
    let mut count = 0;
    for (i, x) in fields(l).enumerate() {
        if i >= f.len() {
            count = i + 1;
            break;
        }
        f[i] = x;
        count = i + 1;
    }
    if !matches!(count, 14 | 18 | 20) {
        return Err(ParseError::new(
            n,
            format!("{count} fields (expected 14, 18 or 20)"),
        ));
    }
    let c = |i: usize, what: &str| parse_u64(f[i], n, what);
    let opt = |i: usize, what: &str| {
        if i < count {
            c(i, what).map(Some)
        } else {
            Ok(None)
        }
    };
    Ok(DiskStat {
        major: super::parse_u32(f[0], n, "major")?,
        minor: super::parse_u32(f[1], n, "minor")?,
        name: lossy(f[2]),
        reads_completed: c(3, "reads completed")?,
        reads_merged: c(4, "reads merged")?,
        read_sectors: c(5, "sectors read")?,
        read_ms: c(6, "read ms")?,
        writes_completed: c(7, "writes completed")?,
        writes_merged: c(8, "writes merged")?,
        write_sectors: c(9, "sectors written")?,
        write_ms: c(10, "write ms")?,
        in_flight: c(11, "in flight")?,
        io_ticks_ms: c(12, "io ticks")?,
        time_in_queue_ms: c(13, "time in queue")?,
        discards_completed: opt(14, "discards completed")?,
        discards_merged: opt(15, "discards merged")?,
        discard_sectors: opt(16, "sectors discarded")?,
        discard_ms: opt(17, "discard ms")?,
        flushes_completed: opt(18, "flushes completed")?,
        flush_ms: opt(19, "flush ms")?,
    })
}

/// Parses /proc/diskstats. An empty file (no block devices, e.g. in some containers) is valid.
pub fn parse_diskstats(buf: &[u8]) -> Result<DiskStats, ParseError> {
    let mut disks = Vec::new();
    for (n, l) in lines(buf) {
        if fields(l).next().is_none() {
            continue;
        }
        disks.push(parse_line(l, n)?);
    }
    Ok(DiskStats { disks })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::fixtures;

    #[test]
    fn parses_captured_diskstats() {
        let d = parse_diskstats(&fixtures::read("host/proc/diskstats")).unwrap();
        assert_eq!(d.disks.len(), 10);
        let vda = d.get("vda").unwrap();
        assert_eq!((vda.major, vda.minor), (254, 0));
        assert_eq!(vda.reads_completed, 27318);
        assert_eq!(vda.read_sectors, 2979106);
        assert_eq!(vda.write_ms, 5276);
        assert_eq!(vda.in_flight, 0);
        assert_eq!(vda.io_ticks_ms, 5400);
        assert_eq!(vda.time_in_queue_ms, 15471);
        assert_eq!(vda.discards_completed, Some(3535));
        assert_eq!(vda.discard_sectors, Some(311336));
        assert_eq!(vda.flushes_completed, Some(256));
        assert_eq!(vda.flush_ms, Some(14));
        assert!(d.get("zram0").is_some());
    }

    #[test]
    fn old_layouts_leave_new_counters_unknown() {
        let d = parse_diskstats(&fixtures::read("edge/diskstats-14-18-fields")).unwrap();
        let sda = d.get("sda").unwrap();
        assert_eq!(sda.time_in_queue_ms, 2236480);
        assert_eq!(sda.discards_completed, None);
        assert_eq!(sda.flush_ms, None);
        let nvme = d.get("nvme0n1").unwrap();
        assert_eq!(nvme.discard_ms, Some(57));
        assert_eq!(nvme.flushes_completed, None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_diskstats(b"").unwrap().disks.is_empty());
        assert!(parse_diskstats(b"8 0 sda 1 2 3 4 5 6 7\n").is_err());
        assert!(parse_diskstats(b"8 0 sda 1 2 3 4 5 6 7 8 9 10 x\n").is_err());
        assert!(
            parse_diskstats(b"8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18\n").is_err()
        );
    }
}
