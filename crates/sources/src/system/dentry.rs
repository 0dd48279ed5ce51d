//! /proc/sys/fs/dentry-state: the dentry cache, including negative dentries (cached failed
//! look-ups), whose unbounded growth makes directory operations and reclaim slow.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, parse_u64, trim_ascii, ParseError};

use super::kernel::KernelVersion;

/// The first kernel whose fifth field is nr_negative ("fs/dcache: Track &
/// report number of negative dentries"); before it the field is an always-0 dummy.
pub const NR_NEGATIVE_SINCE: KernelVersion = KernelVersion::new(5, 0, 0);

/// The parsed file: `47213 45805 45 0 8890 0`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DentryState {
    /// Dentries allocated (a gauge).
    pub nr_dentry: u64,
    /// Unused dentries on the LRU, reclaimable.
    pub nr_unused: u64,
    /// Seconds after which a dentry may be reclaimed under pressure.
    pub age_limit_sec: u64,
    /// Pages requested by the system (unused by current kernels, always 0).
    pub want_pages: u64,
    /// Negative dentries; `None` before 5.0, where the field exists but is always 0.
    pub nr_negative: Option<u64>,
}

/// Parses dentry-state. `has_nr_negative` says whether the kernel fills the fifth field
/// (kernel >= [`NR_NEGATIVE_SINCE`]); the file itself cannot tell.
pub fn parse_dentry_state(buf: &[u8], has_nr_negative: bool) -> Result<DentryState, ParseError> {
    let mut it = fields(trim_ascii(buf));
    let mut next = |what: &str| match it.next() {
        Some(f) => parse_u64(f, 1, what),
        None => Err(ParseError::new(1, format!("missing {what}"))),
    };
    let mut d = DentryState {
        nr_dentry: next("nr_dentry")?,
        nr_unused: next("nr_unused")?,
        age_limit_sec: next("age_limit")?,
        want_pages: next("want_pages")?,
        nr_negative: None,
    };
    let fifth = next("nr_negative")?;
    if has_nr_negative {
        d.nr_negative = Some(fifth);
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::fixtures;
    use crate::system::kernel::parse_osrelease;

    #[test]
    fn parses_captured_dentry_state() {
        let k = parse_osrelease(&fixtures::read("host/KERNEL")).unwrap();
        let d = parse_dentry_state(
            &fixtures::read("host/proc/sys/fs/dentry-state"),
            k >= NR_NEGATIVE_SINCE,
        )
        .unwrap();
        assert_eq!(d.nr_dentry, 47213);
        assert_eq!(d.nr_unused, 45805);
        assert_eq!(d.age_limit_sec, 45);
        assert_eq!(d.want_pages, 0);
        assert_eq!(d.nr_negative, Some(8890));
        // The dentry slab cache holds at least every counted dentry.
        assert!(d.nr_dentry >= d.nr_unused);
    }

    #[test]
    fn before_5_0_the_fifth_field_is_a_dummy() {
        let k = parse_osrelease(&fixtures::read(
            "edge/dentry-4.19/proc/sys/kernel/osrelease",
        ))
        .unwrap();
        assert!(k < NR_NEGATIVE_SINCE);
        let d = parse_dentry_state(
            &fixtures::read("edge/dentry-4.19/proc/sys/fs/dentry-state"),
            k >= NR_NEGATIVE_SINCE,
        )
        .unwrap();
        assert_eq!(d.nr_dentry, 193741);
        assert_eq!(d.nr_negative, None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_dentry_state(b"", true).is_err());
        assert!(parse_dentry_state(b"1 2 3 4\n", true).is_err());
        assert!(parse_dentry_state(b"1 2 3 4 x 0\n", false).is_err());
    }
}
