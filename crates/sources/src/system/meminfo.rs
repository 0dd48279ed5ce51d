//! /proc/meminfo: every memory gauge, by name.
//!
//! Sizes are converted to bytes here, so no consumer has to remember that the kernel's "kB" is
//! KiB; the few entries that are counts (`HugePages_Total`, `HugePages_Free`, ...) stay counts,
//! and each entry records which it is.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, lossy, parse_u64, ParseError};

/// What a meminfo value measures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemUnit {
    /// Bytes (the kernel printed kB = 1024 bytes; the value has been multiplied).
    #[default]
    Bytes,
    /// A plain count, printed without a unit (huge pages).
    Count,
}

/// One `Key:  value [kB]` line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemEntry {
    /// The key without the colon (`MemAvailable`, `Active(anon)`).
    pub key: String,
    /// The value, in bytes or as a count according to `unit`.
    pub value: u64,
    /// What `value` measures.
    pub unit: MemUnit,
}

/// The parsed file, entries in file order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemInfo {
    /// Every line.
    pub entries: Vec<MemEntry>,
}

impl MemInfo {
    /// The entry for `key`.
    pub fn entry(&self, key: &str) -> Option<&MemEntry> {
        self.entries.iter().find(|e| e.key == key)
    }

    /// The value of a size entry in bytes (`None` if absent or a count).
    pub fn bytes(&self, key: &str) -> Option<u64> {
        self.entry(key)
            .filter(|e| e.unit == MemUnit::Bytes)
            .map(|e| e.value)
    }

    /// The value of a count entry (`None` if absent or a size).
    pub fn count(&self, key: &str) -> Option<u64> {
        self.entry(key)
            .filter(|e| e.unit == MemUnit::Count)
            .map(|e| e.value)
    }
}

/// Parses /proc/meminfo.
pub fn parse_meminfo(buf: &[u8]) -> Result<MemInfo, ParseError> {
    let mut entries = Vec::with_capacity(64);
    for (n, l) in lines(buf) {
        let (key, rest) =
            super::split_colon(l).ok_or_else(|| ParseError::new(n, "expected `Key: value`"))?;
        if key.is_empty() {
            return Err(ParseError::new(n, "empty key"));
        }
        let mut it = fields(rest);
        let v = parse_u64(
            it.next()
                .ok_or_else(|| ParseError::new(n, "key without value"))?,
            n,
            "value",
        )?;
        let (value, unit) = match it.next() {
            None => (v, MemUnit::Count),
            Some(b"kB") => (
                v.checked_mul(1024)
                    .ok_or_else(|| ParseError::new(n, "kB value overflows u64 bytes"))?,
                MemUnit::Bytes,
            ),
            Some(u) => {
                return Err(ParseError::new(
                    n,
                    format!("unknown unit {:?}", String::from_utf8_lossy(u)),
                ))
            }
        };
        if it.next().is_some() {
            return Err(ParseError::new(n, "trailing fields"));
        }
        entries.push(MemEntry {
            key: lossy(key),
            value,
            unit,
        });
    }
    if entries.is_empty() {
        return Err(ParseError::new(0, "empty meminfo"));
    }
    Ok(MemInfo { entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_meminfo() {
        let m = parse_meminfo(&crate::system::fixtures::read("host/proc/meminfo")).unwrap();
        assert_eq!(m.entries.len(), 54);
        assert_eq!(m.bytes("MemTotal"), Some(24683656 * 1024));
        assert_eq!(m.bytes("Active(anon)"), Some(1504 * 1024));
        assert_eq!(m.count("HugePages_Total"), Some(0));
        assert_eq!(m.bytes("HugePages_Total"), None);
        assert_eq!(m.bytes("Hugepagesize"), Some(2 * 1024 * 1024));
        // VmallocTotal is 32 TiB - 1 KiB: near the top of what kB values reach.
        assert_eq!(m.bytes("VmallocTotal"), Some(34359738367 * 1024));
        assert!(m.bytes("MemAvailable").unwrap() <= m.bytes("MemTotal").unwrap());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_meminfo(b"").is_err());
        assert!(parse_meminfo(b"MemTotal 1 kB\n").is_err());
        assert!(parse_meminfo(b"MemTotal: 1 MB\n").is_err());
        assert!(parse_meminfo(b"MemTotal:\n").is_err());
        assert!(parse_meminfo(b"MemTotal: 18014398509481984 kB\n").is_err());
    }
}
