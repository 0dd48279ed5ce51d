//! /proc/vmstat: every virtual-memory counter and gauge, by name.
//!
//! The set of keys changes with nearly every kernel release (and with config options), so all
//! of them are kept, in file order, and consumers look up the ones they understand.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, lossy, parse_u64, ParseError};

/// The parsed file. Most keys are counters of events or pages (`pgscan_kswapd`,
/// `allocstall_normal`, `workingset_refault_file`); `nr_*` keys are gauges in pages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VmStat {
    /// `(key, value)` in file order.
    pub counters: Vec<(String, u64)>,
}

impl VmStat {
    /// The value of `key`, if this kernel reports it.
    pub fn get(&self, key: &str) -> Option<u64> {
        super::lookup(&self.counters, key)
    }
}

/// Parses /proc/vmstat (`key value` per line).
pub fn parse_vmstat(buf: &[u8]) -> Result<VmStat, ParseError> {
    let mut counters = Vec::with_capacity(256);
    for (n, l) in lines(buf) {
        let mut it = fields(l);
        let Some(key) = it.next() else { continue };
        let v = it
            .next()
            .ok_or_else(|| ParseError::new(n, "key without value"))?;
        if it.next().is_some() {
            return Err(ParseError::new(n, "expected `key value`"));
        }
        counters.push((lossy(key), parse_u64(v, n, "value")?));
    }
    if counters.is_empty() {
        return Err(ParseError::new(0, "empty vmstat"));
    }
    Ok(VmStat { counters })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_vmstat() {
        let v = parse_vmstat(&crate::system::fixtures::read("host/proc/vmstat")).unwrap();
        assert_eq!(v.counters.len(), 192);
        assert_eq!(v.counters[0].0, "nr_free_pages");
        assert_eq!(v.get("nr_free_pages"), Some(884710));
        for k in [
            "pgscan_kswapd",
            "pgsteal_direct",
            "allocstall_normal",
            "pgmajfault",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v.get("no_such_key"), None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_vmstat(b"").is_err());
        assert!(parse_vmstat(b"nr_free_pages\n").is_err());
        assert!(parse_vmstat(b"nr_free_pages -1\n").is_err());
        assert!(parse_vmstat(b"nr_free_pages 1 2\n").is_err());
    }
}
