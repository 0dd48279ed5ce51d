//! /proc/slabinfo: every kernel slab cache (readable by root only; mode 0400).
//!
//! Only format 2.1 exists since 2.6.x; its `2.1 (statistics)` variant (SLAB with
//! CONFIG_DEBUG_SLAB) appends more columns after the ones kept here and is accepted.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, lossy, parse_u64, trim_ascii, ParseError};

/// One cache line:
/// `name active_objs num_objs objsize objperslab pagesperslab : tunables l b s : slabdata a n s`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlabCache {
    /// Cache name (`dentry`, `kmalloc-64`).
    pub name: String,
    /// Objects in use (SLUB reports all objects of non-full slabs as active: an upper bound).
    pub active_objs: u64,
    /// Objects allocated, in use or free.
    pub num_objs: u64,
    /// Size of one object, bytes (including alignment and metadata).
    pub objsize_bytes: u64,
    /// Objects per slab.
    pub objperslab: u64,
    /// Pages per slab.
    pub pagesperslab: u64,
    /// Slabs with at least one object in use.
    pub active_slabs: u64,
    /// Slabs allocated.
    pub num_slabs: u64,
}

/// The parsed file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlabInfo {
    /// Every cache, in file order.
    pub caches: Vec<SlabCache>,
}

impl SlabInfo {
    /// The cache named `name`.
    pub fn get(&self, name: &str) -> Option<&SlabCache> {
        self.caches.iter().find(|c| c.name == name)
    }
}

fn take<'a>(
    it: &mut impl Iterator<Item = &'a [u8]>,
    n: usize,
    what: &str,
) -> Result<&'a [u8], ParseError> {
    it.next()
        .ok_or_else(|| ParseError::new(n, format!("missing {what}")))
}

fn num<'a>(
    it: &mut impl Iterator<Item = &'a [u8]>,
    n: usize,
    what: &str,
) -> Result<u64, ParseError> {
    parse_u64(take(it, n, what)?, n, what)
}

fn expect<'a>(
    it: &mut impl Iterator<Item = &'a [u8]>,
    n: usize,
    word: &str,
) -> Result<(), ParseError> {
    if take(it, n, word)? != word.as_bytes() {
        return Err(ParseError::new(n, format!("expected {word:?}")));
    }
    Ok(())
}

fn parse_cache(l: &[u8], n: usize) -> Result<SlabCache, ParseError> {
    let it = &mut fields(l);
    let name = take(it, n, "name")?;
    let mut c = SlabCache {
        active_objs: num(it, n, "active_objs")?,
        num_objs: num(it, n, "num_objs")?,
        objsize_bytes: num(it, n, "objsize")?,
        objperslab: num(it, n, "objperslab")?,
        pagesperslab: num(it, n, "pagesperslab")?,
        ..SlabCache::default()
    };
    // The tunables only mean something for the SLAB allocator (SLUB prints zeros) and never
    // change at runtime unless written to; they are checked for shape, not kept.
    expect(it, n, ":")?;
    expect(it, n, "tunables")?;
    for what in ["limit", "batchcount", "sharedfactor"] {
        num(it, n, what)?;
    }
    expect(it, n, ":")?;
    expect(it, n, "slabdata")?;
    c.active_slabs = num(it, n, "active_slabs")?;
    c.num_slabs = num(it, n, "num_slabs")?;
    c.name = lossy(name);
    Ok(c)
}

/// Parses /proc/slabinfo; rejects any version other than 2.1.
pub fn parse_slabinfo(buf: &[u8]) -> Result<SlabInfo, ParseError> {
    let mut ls = lines(buf);
    let (hn, header) = ls
        .next()
        .ok_or_else(|| ParseError::new(0, "empty slabinfo"))?;
    let version = header
        .strip_prefix(b"slabinfo - version:")
        .map(trim_ascii)
        .ok_or_else(|| ParseError::new(hn, "missing `slabinfo - version:` header"))?;
    if version != b"2.1" && version != b"2.1 (statistics)" {
        return Err(ParseError::new(
            hn,
            format!(
                "unsupported slabinfo version {:?} (only 2.1 is known)",
                String::from_utf8_lossy(version)
            ),
        ));
    }
    let mut caches = Vec::with_capacity(256);
    for (n, l) in ls {
        if l.first() == Some(&b'#') || fields(l).next().is_none() {
            continue;
        }
        caches.push(parse_cache(l, n)?);
    }
    Ok(SlabInfo { caches })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_slabinfo() {
        let s = parse_slabinfo(&crate::system::fixtures::read("host/proc/slabinfo")).unwrap();
        assert_eq!(s.caches.len(), 235);
        let d = s.get("dentry").unwrap();
        assert_eq!(d.active_objs, 47229);
        assert_eq!(d.objsize_bytes, 192);
        assert_eq!(d.objperslab, 21);
        assert_eq!(d.pagesperslab, 1);
        assert_eq!((d.active_slabs, d.num_slabs), (2249, 2249));
        for c in &s.caches {
            assert!(c.active_objs <= c.num_objs, "{}", c.name);
        }
    }

    #[test]
    fn rejects_unknown_version() {
        let e = parse_slabinfo(b"slabinfo - version: 1.1\nfoo 1 1 1 1 1\n").unwrap_err();
        assert!(
            e.msg.contains("unsupported slabinfo version \"1.1\""),
            "{e}"
        );
        assert!(parse_slabinfo(b"").is_err());
        assert!(parse_slabinfo(b"dentry 1 2 3\n").is_err());
    }

    #[test]
    fn accepts_statistics_variant_and_rejects_broken_lines() {
        let s = parse_slabinfo(
            b"slabinfo - version: 2.1 (statistics)\n# name ...\n\
              dentry 10 20 192 21 1 : tunables 120 60 8 : slabdata 1 1 0 : globalstat 5 4 3 2 1 0 0 0 0 : cpustat 1 2 3 4\n",
        )
        .unwrap();
        assert_eq!(s.get("dentry").unwrap().num_objs, 20);
        assert!(parse_slabinfo(
            b"slabinfo - version: 2.1\nx 1 2 3 4 5 : tunables 0 0 0 slabdata 1 1 0\n"
        )
        .is_err());
        assert!(parse_slabinfo(
            b"slabinfo - version: 2.1\nx 1 2 3 4 5 : tunables 0 0 0 : slabdata 1\n"
        )
        .is_err());
    }
}
