//! System-wide /proc files.
//!
//! Each file has a pure `parse_*` function over the raw bytes (tested on captured and hand-made
//! fixtures) and a method on [`SystemReader`] that reads it under a [`crate::Root`]. Values are
//! raw kernel counters; units are in the field names.

pub mod buddyinfo;
pub mod dentry;
pub mod diskstats;
pub mod interrupts;
pub mod kernel;
pub mod kmsg;
pub mod loadavg;
pub mod meminfo;
pub mod netdev;
pub mod pressure;
pub mod reader;
pub mod slabinfo;
pub mod softirqs;
pub mod stat;
pub mod vmstat;
pub mod zoneinfo;

#[cfg(test)]
mod robustness;

pub use reader::{PressureResource, SystemReader};

use crate::fileio::{fields, ParseError};

/// Looks a key up in a list of `(key, value)` pairs kept in file order.
pub fn lookup(pairs: &[(String, u64)], key: &str) -> Option<u64> {
    pairs.iter().find(|(k, _)| k == key).map(|&(_, v)| v)
}

/// Parses a per-CPU column header (`CPU0 CPU1 CPU3`) into CPU ids. Offline CPUs have no
/// column in /proc/interrupts, so the ids are not assumed to be contiguous.
pub(crate) fn parse_cpu_header(line: &[u8], n: usize) -> Result<Vec<u32>, ParseError> {
    let mut cpus = Vec::new();
    for f in fields(line) {
        let id = f
            .strip_prefix(b"CPU")
            .ok_or_else(|| ParseError::new(n, "header column is not CPUn"))?;
        let id = crate::fileio::parse_u64(id, n, "CPU id")?;
        let id = u32::try_from(id).map_err(|_| ParseError::new(n, "CPU id overflows u32"))?;
        cpus.push(id);
    }
    if cpus.is_empty() {
        return Err(ParseError::new(n, "no CPU columns in header"));
    }
    Ok(cpus)
}

/// Splits a `NAME:` line into the name (without the colon) and the rest.
pub(crate) fn split_colon(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = line.iter().position(|&c| c == b':')?;
    Some((crate::fileio::trim_ascii(&line[..i]), &line[i + 1..]))
}

/// Parses a `u32` id (node, CPU, device number).
pub(crate) fn parse_u32(s: &[u8], n: usize, what: &str) -> Result<u32, ParseError> {
    let v = crate::fileio::parse_u64(s, n, what)?;
    u32::try_from(v).map_err(|_| ParseError::new(n, format!("{what}: overflows u32")))
}

#[cfg(test)]
pub(crate) mod fixtures {
    /// Reads a file under the repository's `tests/fixtures/` (e.g. `host/proc/stat`).
    pub fn read(rel: &str) -> Vec<u8> {
        let p = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
            .join(rel);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }
}
