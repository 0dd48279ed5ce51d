//! The reader never panics on damaged files, and damage never turns into wrong records.

use std::path::Path;
use std::sync::OnceLock;

use jitterscope_store::{Reader, Record, StoreConfig, Writer};
use proptest::prelude::*;

const SEC: i64 = 1_000_000_000;

/// A real segment (a few closed frames plus an open one) and its index, written once.
struct Original {
    segment: Vec<u8>,
    index: Vec<u8>,
    records: Vec<Record>,
}

fn original() -> &'static Original {
    static ORIGINAL: OnceLock<Original> = OnceLock::new();
    ORIGINAL.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let mut c = StoreConfig::new(d.path());
        c.frame_records = 4;
        let mut w = Writer::open(c).unwrap();
        let mut records = Vec::new();
        for i in 0..14i64 {
            let mut p: Vec<u8> = (0..600u32).map(|k| (k % 13) as u8).collect();
            p[..8].copy_from_slice(&i.to_le_bytes());
            w.append(1_700_000_000 * SEC + i * SEC, &p).unwrap();
            records.push(Record {
                ts_ns: 1_700_000_000 * SEC + i * SEC,
                payload: p,
                detail: None,
            });
        }
        let seg = w.current_segment().unwrap().to_path_buf();
        // Leave the last frame open, as a crash would.
        std::mem::forget(w);
        Original {
            segment: std::fs::read(&seg).unwrap(),
            index: std::fs::read(seg.with_extension("idx")).unwrap(),
            records,
        }
    })
}

/// Runs every read operation over a store made of the given files; returns the records read.
fn read_everything(segment: &[u8], index: Option<&[u8]>) -> Vec<Record> {
    let d = tempfile::tempdir().unwrap();
    let seg = d.path().join("seg-01700000000000000000.jss");
    std::fs::write(&seg, segment).unwrap();
    if let Some(index) = index {
        std::fs::write(seg.with_extension("idx"), index).unwrap();
    }
    exercise(d.path())
}

fn exercise(dir: &Path) -> Vec<Record> {
    let r = Reader::open(dir).unwrap();
    let _ = r.latest();
    let _ = r.time_bounds();
    let _ = r.stats();
    let mut out = Vec::new();
    if let Ok(range) = r.range(1_700_000_000 * SEC + 3 * SEC, 1_700_000_000 * SEC + 9 * SEC) {
        range.for_each(drop);
    }
    if let Ok(range) = r.range(i64::MIN, i64::MAX) {
        out.extend(range.flatten());
    }
    out
}

#[test]
fn undamaged_original_reads_back() {
    let o = original();
    assert_eq!(read_everything(&o.segment, Some(&o.index)), o.records);
    assert_eq!(read_everything(&o.segment, None), o.records);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_do_not_panic(
        body in proptest::collection::vec(any::<u8>(), 0..4096),
        index in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..512)),
        with_header in any::<bool>(),
    ) {
        let mut seg = Vec::new();
        if with_header {
            seg.extend_from_slice(&original().segment[..16]);
        }
        seg.extend_from_slice(&body);
        read_everything(&seg, index.as_deref());
    }

    #[test]
    fn random_bytes_after_a_valid_zstd_frame_start_do_not_panic(
        body in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        // Start with the real header and frame header, so zstd gets past its first checks.
        let mut seg = original().segment[..24].to_vec();
        seg.extend_from_slice(&body);
        read_everything(&seg, None);
    }

    #[test]
    fn truncation_returns_a_prefix_of_the_records(
        seg_cut in 0.0f64..=1.0,
        idx_cut in 0.0f64..=1.0,
    ) {
        let o = original();
        let seg = &o.segment[..(o.segment.len() as f64 * seg_cut) as usize];
        let idx = &o.index[..(o.index.len() as f64 * idx_cut) as usize];
        let got = read_everything(seg, Some(idx));
        prop_assert_eq!(&got[..], &o.records[..got.len()]);
    }

    #[test]
    fn bit_flips_never_yield_a_record_that_was_not_written(
        seg_flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..6),
        idx_flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..3),
    ) {
        let o = original();
        let mut seg = o.segment.clone();
        for (at, bit) in &seg_flips {
            let i = at.index(seg.len());
            seg[i] ^= 1 << bit;
        }
        let mut idx = o.index.clone();
        for (at, bit) in &idx_flips {
            let i = at.index(idx.len());
            idx[i] ^= 1 << bit;
        }
        for r in read_everything(&seg, Some(&idx)) {
            prop_assert!(o.records.contains(&r), "record {} not among those written", r.ts_ns);
        }
    }
}

/// Salvages the store made of the given files: `Some(records read before, records read after,
/// findings of a full check after)`, or `None` when salvage found nothing to keep.
fn salvaged(segment: &[u8], index: Option<&[u8]>) -> Option<(Vec<Record>, Vec<Record>, usize)> {
    let d = tempfile::tempdir().unwrap();
    let seg = d.path().join("seg-01700000000000000000.jss");
    std::fs::write(&seg, segment).unwrap();
    if let Some(index) = index {
        std::fs::write(seg.with_extension("idx"), index).unwrap();
    }
    let before = exercise(d.path());
    let aside = d.path().join("aside");
    std::fs::create_dir(&aside).unwrap();
    let kept = jitterscope_store::salvage(&seg, |p| {
        std::fs::rename(p, aside.join("seg"))?;
        let idx = p.with_extension("idx");
        if idx.exists() {
            std::fs::rename(&idx, aside.join("idx"))?;
        }
        Ok(())
    });
    // A file too short for its header, or with a bad one, is not salvage's to mend.
    let kept = kept.ok()??;
    let after = exercise(d.path());
    assert_eq!(kept as usize, after.len());
    let findings = jitterscope_store::check_store(d.path(), true)
        .unwrap()
        .len();
    Some((before, after, findings))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

    /// Whatever a cut, flipped bits or appended garbage did, a salvaged segment holds exactly
    /// the records a reader got from the damaged one, and checks clean.
    #[test]
    fn salvage_keeps_what_reads_and_leaves_a_clean_segment(
        seg_cut in 0.2f64..=1.0,
        seg_flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..4),
        tail in proptest::collection::vec(any::<u8>(), 0..600),
        keep_index in any::<bool>(),
    ) {
        let o = original();
        let mut seg = o.segment[..(o.segment.len() as f64 * seg_cut) as usize].to_vec();
        for (at, bit) in &seg_flips {
            // The header is restore_header's business, not salvage's.
            let i = 16 + at.index(seg.len().saturating_sub(16).max(1));
            if i < seg.len() {
                seg[i] ^= 1 << bit;
            }
        }
        seg.extend_from_slice(&tail);
        let index = keep_index.then_some(&o.index[..]);
        if let Some((before, after, findings)) = salvaged(&seg, index) {
            prop_assert_eq!(before, after);
            prop_assert_eq!(findings, 0);
        }
    }
}
