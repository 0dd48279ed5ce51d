//! The running kernel's version, from /proc/sys/kernel/osrelease. Some file layouts depend on
//! it where the file itself cannot tell (dentry-state's nr_negative field).

use serde::{Deserialize, Serialize};

use crate::fileio::{trim_ascii, ParseError};

/// `major.minor.patch` of a kernel release string; ordering is numeric, field by field.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(default)]
pub struct KernelVersion {
    /// First number (6 in 6.18.44).
    pub major: u32,
    /// Second number (18 in 6.18.44).
    pub minor: u32,
    /// Third number (44 in 6.18.44); 0 when the release has only two (`5.4-rc1`).
    pub patch: u32,
}

impl KernelVersion {
    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        KernelVersion {
            major,
            minor,
            patch,
        }
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Leading decimal digits of `s` and what follows them.
fn leading_number(s: &[u8]) -> Option<(u32, &[u8])> {
    let end = s
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(s.len());
    if end == 0 || end > 9 {
        return None;
    }
    let v = s[..end]
        .iter()
        .fold(0u32, |v, &c| v * 10 + u32::from(c - b'0'));
    Some((v, &s[end..]))
}

/// Parses a release string such as `6.18.44-fc-v769`, `4.19.0-17-amd64` or
/// `3.10.0-1127.el7.x86_64`. Everything after the numeric prefix (distribution suffixes) is
/// ignored; a missing patch level reads as 0.
pub fn parse_osrelease(buf: &[u8]) -> Result<KernelVersion, ParseError> {
    let s = trim_ascii(buf);
    let bad = || {
        ParseError::new(
            1,
            format!("not a kernel release: {:?}", String::from_utf8_lossy(s)),
        )
    };
    let (major, rest) = leading_number(s).ok_or_else(bad)?;
    let rest = rest.strip_prefix(b".").ok_or_else(bad)?;
    let (minor, rest) = leading_number(rest).ok_or_else(bad)?;
    let patch = match rest.strip_prefix(b".") {
        Some(r) => leading_number(r).map_or(0, |(p, _)| p),
        None => 0,
    };
    Ok(KernelVersion::new(major, minor, patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_release_strings() {
        let v = |s: &str| parse_osrelease(s.as_bytes()).unwrap();
        assert_eq!(v("6.18.44-fc-v769\n"), KernelVersion::new(6, 18, 44));
        assert_eq!(v("4.19.0-17-amd64"), KernelVersion::new(4, 19, 0));
        assert_eq!(v("3.10.0-1127.el7.x86_64"), KernelVersion::new(3, 10, 0));
        assert_eq!(v("5.4-rc1"), KernelVersion::new(5, 4, 0));
        assert_eq!(v("2.6.32"), KernelVersion::new(2, 6, 32));
        assert!(parse_osrelease(b"").is_err());
        assert!(parse_osrelease(b"linux").is_err());
        assert!(parse_osrelease(b"6").is_err());
        assert!(parse_osrelease(b"99999999999.1.1").is_err());
    }

    #[test]
    fn orders_numerically() {
        assert!(KernelVersion::new(4, 19, 0) < KernelVersion::new(5, 0, 0));
        assert!(KernelVersion::new(5, 10, 0) > KernelVersion::new(5, 9, 200));
        assert!(KernelVersion::new(6, 18, 44) >= KernelVersion::new(5, 0, 0));
    }

    #[test]
    fn parses_captured_kernel() {
        let v = parse_osrelease(&crate::system::fixtures::read("host/KERNEL")).unwrap();
        assert_eq!(v, KernelVersion::new(6, 18, 44));
    }
}
