//! The parsers and the census on files recorded from real processes on this machine
//! (scripts/capture-memleak-fixtures.sh).

use std::path::PathBuf;

use jitterscope_memleak::census::{self, Options};
use jitterscope_memleak::growth::{compare, scan_order};
use jitterscope_memleak::procmem::Image;
use jitterscope_memleak::runtime::{allocator, mapped_paths};
use jitterscope_sources::smaps::{parse_smaps, MappingKind};

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/memleak")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn recorded_smaps_parse_into_a_python_process() {
    for f in ["native.smaps", "python.smaps"] {
        let m = parse_smaps(&fixture(f)).unwrap();
        assert!(m.len() > 20, "{f}: {} mappings", m.len());
        assert!(m.iter().all(|m| m.end > m.start && m.perms.len() == 4));
        assert!(m.iter().any(|m| m.kind() == MappingKind::Heap), "{f}");
        assert!(m.iter().any(|m| m.kind() == MappingKind::Stack), "{f}");
        let paths = mapped_paths(&m);
        assert!(paths.iter().any(|p| p.contains("python3")), "{f}");
        assert_eq!(allocator(&paths).unwrap().name, "glibc malloc");
        assert!(!scan_order(&m, None).is_empty());
        let g = compare(&m, &m, 1.0);
        assert!(
            g.is_empty(),
            "a reading compared with itself changed: {g:?}"
        );
    }
    let py = parse_smaps(&fixture("python.smaps")).unwrap();
    let rss: u64 = py.iter().map(|m| m.rss_bytes).sum();
    assert!(rss > 10 << 20, "50k dicts resident: {rss}");
}

#[test]
fn the_census_finds_the_recorded_leak_marker() {
    let addr = u64::from_str_radix(
        String::from_utf8(fixture("native.mem.addr"))
            .unwrap()
            .trim(),
        16,
    )
    .unwrap();
    let mem = fixture("native.mem");
    let img = Image {
        regions: vec![(addr, mem.clone())],
    };
    let c = census::take(&img, &[(addr, addr + mem.len() as u64)], Options::default());
    let n = c
        .counts
        .get("jitterscope.memleak.context_info{req=#}")
        .copied()
        .unwrap_or(0);
    // 96-byte records plus malloc's header: over 2000 in 256 KiB.
    assert!(n > 1000, "marker seen {n} times");
    let top = c.counts.iter().max_by_key(|(_, n)| **n).unwrap();
    assert_eq!(top.0, "jitterscope.memleak.context_info{req=#}");
    assert_eq!(c.bytes_scanned, mem.len() as u64);
}
