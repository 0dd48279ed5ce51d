//! The detail lane: joined by timestamp on `range`, never read by `range_main`, deleted with
//! its segment, and damage to it costs details only.

use std::path::{Path, PathBuf};

use jitterscope_store::{Lane, Reader, Record, StoreConfig, Writer};

/// The lanes argument for an optional detail.
fn lanes(detail: Option<&[u8]>) -> Vec<(Lane, &[u8])> {
    detail.map(|d| (Lane::Detail, d)).into_iter().collect()
}
use proptest::prelude::*;

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_700_000_000 * SEC;

fn main_payload(i: i64) -> Vec<u8> {
    let mut p: Vec<u8> = (0..700u32).map(|k| (k % 13) as u8).collect();
    p[..8].copy_from_slice(&i.to_le_bytes());
    p
}

fn detail(i: i64) -> Vec<u8> {
    let mut p: Vec<u8> = (0..3000u32).map(|k| (k % 29) as u8).collect();
    p[..8].copy_from_slice(&(i * 31).to_le_bytes());
    p
}

/// Every third record has no detail.
fn has_detail(i: i64) -> bool {
    i % 3 != 2
}

fn write(dir: &Path, n: i64, frame_records: u32) -> Vec<Record> {
    let mut c = StoreConfig::new(dir);
    c.frame_records = frame_records;
    c.retain = std::time::Duration::from_secs(u32::MAX as u64);
    let mut w = Writer::open(c).unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let d = has_detail(i).then(|| detail(i));
        w.append_lanes(T0 + i * SEC, &main_payload(i), &lanes(d.as_deref()))
            .unwrap();
        out.push(Record {
            ts_ns: T0 + i * SEC,
            payload: main_payload(i),
            detail: d,
        });
    }
    w.close().unwrap();
    out
}

fn read(dir: &Path, main_only: bool) -> Vec<Record> {
    let r = Reader::open(dir).unwrap();
    let range = if main_only {
        r.range_main(i64::MIN, i64::MAX)
    } else {
        r.range(i64::MIN, i64::MAX)
    };
    range.unwrap().collect::<Result<_, _>>().unwrap()
}

fn detail_file(dir: &Path) -> PathBuf {
    let seg = Reader::open(dir).unwrap().segments().unwrap().remove(0);
    seg.with_extension("d.jss")
}

#[test]
fn details_join_their_records_and_main_reads_skip_them() {
    let d = tempfile::tempdir().unwrap();
    let written = write(d.path(), 50, 8);
    assert_eq!(read(d.path(), false), written);
    let main: Vec<Record> = written
        .iter()
        .map(|r| Record {
            detail: None,
            ..r.clone()
        })
        .collect();
    assert_eq!(read(d.path(), true), main);
    let r = Reader::open(d.path()).unwrap();
    assert_eq!(r.latest().unwrap().unwrap(), written[49]);
    // A range inside one frame reads only what overlaps.
    let mid: Vec<Record> = r
        .range(T0 + 20 * SEC, T0 + 22 * SEC)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(mid, written[20..=22]);
    // Only the segment's files: one lane pair besides the main pair.
    let mut names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "LOCK",
            "seg-01700000000000000000.d.idx",
            "seg-01700000000000000000.d.jss",
            "seg-01700000000000000000.idx",
            "seg-01700000000000000000.jss"
        ]
    );
}

/// The writer says which append starts frames: the first record of a store, every
/// `frame_records`-th after it, the first after a rotation or a close, and one too large for
/// the open frame.
#[test]
fn the_writer_says_which_record_starts_a_frame() {
    let d = tempfile::tempdir().unwrap();
    let mut c = StoreConfig::new(d.path());
    c.frame_records = 4;
    c.segment_span = std::time::Duration::from_secs(10);
    c.retain = std::time::Duration::from_secs(u32::MAX as u64);
    let mut w = Writer::open(c.clone()).unwrap();
    let mut starts = Vec::new();
    for i in 0..13 {
        starts.push(w.starts_frame(T0 + i * SEC, 700, &[(Lane::Detail, 3000)]));
        w.append_lanes(T0 + i * SEC, &main_payload(i), &lanes(Some(&detail(i))))
            .unwrap();
    }
    // Frames of 4, and a new segment at 10 s.
    let t = true;
    let f = false;
    assert_eq!(starts, [t, f, f, f, t, f, f, f, t, f, t, f, f]);
    // A payload the open frame cannot take ends it first.
    assert!(w.starts_frame(T0 + 13 * SEC, 300 << 20, &[]));
    assert!(w.starts_frame(T0 + 13 * SEC, 10, &[(Lane::Detail, 300 << 20)]));
    assert!(!w.starts_frame(T0 + 13 * SEC, 10, &[(Lane::Detail, 10)]));
    w.close().unwrap();
    let w = Writer::open(c).unwrap();
    assert!(w.starts_frame(T0 + 14 * SEC, 10, &[]));
}

/// A read in context brings the whole of every frame it touches: the records outside the range
/// come with their detail (and no payload) in their place, and frames outside it do not come.
#[test]
fn a_read_in_context_brings_the_frames_it_touches_whole() {
    let d = tempfile::tempdir().unwrap();
    let written = write(d.path(), 30, 8);
    let r = Reader::open(d.path()).unwrap();
    let read = |from: i64, to: i64| -> Vec<Record> {
        r.range_in_context(T0 + from * SEC, T0 + to * SEC)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let expect = |frames: std::ops::Range<usize>, from: i64, to: i64| -> Vec<Record> {
        written[frames]
            .iter()
            .map(|w| {
                let inside = (T0 + from * SEC..=T0 + to * SEC).contains(&w.ts_ns);
                Record {
                    payload: if inside {
                        w.payload.clone()
                    } else {
                        Vec::new()
                    },
                    ..w.clone()
                }
            })
            .collect()
    };
    // Inside the second frame (records 8..16).
    assert_eq!(read(10, 12), expect(8..16, 10, 12));
    // Across the second and third.
    assert_eq!(read(15, 17), expect(8..24, 15, 17));
    // The open frame of a live writer is in the unindexed tail, and so is a segment whose index
    // was lost: each of its frames comes whole or not at all.
    let idx = Reader::open(d.path()).unwrap().segments().unwrap()[0].with_extension("idx");
    std::fs::remove_file(&idx).unwrap();
    assert_eq!(read(26, 27), expect(24..30, 26, 27));
    assert_eq!(read(3, 3), expect(0..8, 3, 3));
    assert_eq!(read(40, 50), vec![]);
}

#[test]
fn a_live_writer_s_details_are_readable_at_once() {
    let d = tempfile::tempdir().unwrap();
    let mut c = StoreConfig::new(d.path());
    c.frame_records = 5;
    c.retain = std::time::Duration::from_secs(u32::MAX as u64);
    let mut w = Writer::open(c).unwrap();
    for i in 0..12 {
        w.append_lanes(
            T0 + i * SEC,
            &main_payload(i),
            &[(Lane::Detail, &detail(i))],
        )
        .unwrap();
        let got = read(d.path(), false);
        assert_eq!(got.len() as i64, i + 1);
        assert!(
            got.iter()
                .enumerate()
                .all(|(k, r)| r.detail.as_deref() == Some(&detail(k as i64)[..])),
            "after {i}"
        );
        let latest = Reader::open(d.path()).unwrap().latest().unwrap().unwrap();
        assert_eq!(latest.detail, Some(detail(i)));
    }
}

#[test]
fn a_lost_or_unreadable_detail_lane_costs_details_only() {
    let d = tempfile::tempdir().unwrap();
    let written = write(d.path(), 20, 4);
    let lane = detail_file(d.path());
    std::fs::write(&lane, b"not a segment at all").unwrap();
    let got = read(d.path(), false);
    assert_eq!(got.len(), written.len());
    assert!(got.iter().all(|r| r.detail.is_none()));
    std::fs::remove_file(&lane).unwrap();
    assert_eq!(read(d.path(), false).len(), written.len());
}

#[test]
fn retention_deletes_the_lane_with_its_segment_and_orphans_at_open() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), 10, 4);
    let lane = detail_file(d.path());
    let seg = Reader::open(d.path())
        .unwrap()
        .segments()
        .unwrap()
        .remove(0);
    // As if a deletion was cut short after the main files went.
    std::fs::remove_file(&seg).unwrap();
    std::fs::remove_file(seg.with_extension("idx")).unwrap();
    assert!(lane.exists());
    drop(Writer::open(StoreConfig::new(d.path())).unwrap());
    assert!(!lane.exists(), "orphan lane kept");
    assert!(
        !lane.with_extension("idx").exists(),
        "orphan lane index kept"
    );

    // Old segments go with their lanes (the default retention of 7 days covers T0 = 2023).
    write(d.path(), 10, 4);
    let lane = detail_file(d.path());
    assert!(lane.exists());
    drop(Writer::open(StoreConfig::new(d.path())).unwrap());
    assert!(!lane.exists());
    assert!(Reader::open(d.path())
        .unwrap()
        .segments()
        .unwrap()
        .is_empty());
}

/// Segment, index, detail lane, lane index, and the records written.
type Files = (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>, Vec<Record>);

/// The store's files after writing 14 records in frames of 4, the last frame left open.
fn files() -> &'static Files {
    static FILES: std::sync::OnceLock<Files> = std::sync::OnceLock::new();
    FILES.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let mut c = StoreConfig::new(d.path());
        c.frame_records = 4;
        let mut w = Writer::open(c).unwrap();
        let mut records = Vec::new();
        for i in 0..14 {
            let dt = has_detail(i).then(|| detail(i));
            w.append_lanes(T0 + i * SEC, &main_payload(i), &lanes(dt.as_deref()))
                .unwrap();
            records.push(Record {
                ts_ns: T0 + i * SEC,
                payload: main_payload(i),
                detail: dt,
            });
        }
        let seg = w.current_segment().unwrap().to_path_buf();
        std::mem::forget(w);
        let lane = seg.with_extension("d.jss");
        let r = |p: &Path| std::fs::read(p).unwrap();
        (
            r(&seg),
            r(&seg.with_extension("idx")),
            r(&lane),
            r(&lane.with_extension("idx")),
            records,
        )
    })
}

fn read_damaged(lane: &[u8], lane_idx: &[u8]) -> Vec<Record> {
    let (seg, idx, _, _, _) = files();
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("seg-01700000000000000000.jss");
    std::fs::write(&p, seg).unwrap();
    std::fs::write(p.with_extension("idx"), idx).unwrap();
    std::fs::write(p.with_extension("d.jss"), lane).unwrap();
    std::fs::write(p.with_extension("d.idx"), lane_idx).unwrap();
    let r = Reader::open(d.path()).unwrap();
    let _ = r.latest();
    let _ = r.stats();
    read(d.path(), false)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Cutting or flipping bits in the lane never loses a main record and never attaches a
    /// detail that was not written with it.
    #[test]
    fn damage_to_the_lane_costs_only_details(
        cut in 0.0f64..=1.0,
        idx_cut in 0.0f64..=1.0,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..5),
    ) {
        let (_, _, lane, lane_idx, records) = files();
        let mut lane = lane[..(lane.len() as f64 * cut) as usize].to_vec();
        for (at, bit) in &flips {
            if !lane.is_empty() {
                let i = at.index(lane.len());
                lane[i] ^= 1 << bit;
            }
        }
        let lane_idx = &lane_idx[..(lane_idx.len() as f64 * idx_cut) as usize];
        let got = read_damaged(&lane, lane_idx);
        prop_assert_eq!(got.len(), records.len());
        for (g, w) in got.iter().zip(records) {
            prop_assert_eq!(&g.payload, &w.payload);
            if g.detail.is_some() {
                prop_assert_eq!(&g.detail, &w.detail, "wrong detail at {}", g.ts_ns);
            }
        }
    }
}

#[test]
fn undamaged_lane_files_read_back_whole() {
    let (_, _, lane, lane_idx, records) = files();
    assert_eq!(&read_damaged(lane, lane_idx), records);
}

#[test]
fn a_lane_reads_on_its_own_and_says_where_it_is_missing() {
    let d = tempfile::tempdir().unwrap();
    let mut c = StoreConfig::new(d.path());
    c.frame_records = 4;
    c.retain = std::time::Duration::from_secs(u32::MAX as u64);
    // A first run without the lane (an older build), then one with it.
    let mut w = Writer::open(c.clone()).unwrap();
    for i in 0..6 {
        w.append(T0 + i * SEC, &main_payload(i)).unwrap();
    }
    w.close().unwrap();
    let mut w = Writer::open(c).unwrap();
    for i in 10..20i64 {
        let sig = i.to_le_bytes();
        w.append_lanes(
            T0 + i * SEC,
            &main_payload(i),
            &[(Lane::Detail, &detail(i)), (Lane::Signals, &sig)],
        )
        .unwrap();
    }
    w.close().unwrap();
    let r = Reader::open(d.path()).unwrap();
    let got: Vec<(i64, Vec<u8>)> = r
        .range_lane(Lane::Signals, i64::MIN, i64::MAX)
        .unwrap()
        .map(|x| x.map(|x| (x.ts_ns, x.payload)).unwrap())
        .collect();
    let want: Vec<(i64, Vec<u8>)> = (10..20i64)
        .map(|i| (T0 + i * SEC, i.to_le_bytes().to_vec()))
        .collect();
    assert_eq!(got, want);
    assert!(r
        .lane_covers(Lane::Signals, T0 + 12 * SEC, T0 + 30 * SEC)
        .unwrap());
    assert!(!r
        .lane_covers(Lane::Signals, T0 + 2 * SEC, T0 + 12 * SEC)
        .unwrap());
    // The main read is untouched by the extra lane.
    let main = read(d.path(), false);
    assert_eq!(main.len(), 16);
    assert_eq!(main[15].detail, Some(detail(19)));
}

/// A lane only covers its segment when it is readable and reaches the segment's newest
/// record: an empty, cut or garbage lane would hide the records it lacks.
#[test]
fn an_empty_cut_or_garbage_lane_does_not_cover_its_segment() {
    let d = tempfile::tempdir().unwrap();
    let mut c = StoreConfig::new(d.path());
    c.frame_records = 4;
    c.retain = std::time::Duration::from_secs(u32::MAX as u64);
    let mut w = Writer::open(c).unwrap();
    for i in 0..10i64 {
        let sig = i.to_le_bytes();
        w.append_lanes(T0 + i * SEC, &main_payload(i), &[(Lane::Signals, &sig)])
            .unwrap();
    }
    w.close().unwrap();
    let r = Reader::open(d.path()).unwrap();
    let seg = r.segments().unwrap()[0].clone();
    let lane = seg.with_extension("s.jss");
    let lane_idx = seg.with_extension("s.idx");
    let covers = || r.lane_covers(Lane::Signals, i64::MIN, i64::MAX).unwrap();
    assert!(covers());
    let intact = std::fs::read(&lane).unwrap();
    let intact_idx = std::fs::read(&lane_idx).unwrap();

    std::fs::write(&lane, b"").unwrap();
    assert!(!covers(), "empty");
    // Cut after its first frames, with an index that says so.
    let idx_cut = 16 + 56;
    std::fs::write(&lane_idx, &intact_idx[..idx_cut]).unwrap();
    let first_frame_end = u64::from_le_bytes(intact_idx[16..24].try_into().unwrap())
        + u64::from_le_bytes(intact_idx[24..32].try_into().unwrap());
    std::fs::write(&lane, &intact[..first_frame_end as usize]).unwrap();
    assert!(!covers(), "ends before its segment");
    std::fs::write(&lane_idx, &intact_idx).unwrap();
    let mut garbage = intact.clone();
    garbage[..8].copy_from_slice(b"NOTALANE");
    std::fs::write(&lane, &garbage).unwrap();
    assert!(!covers(), "bad header");
    std::fs::write(&lane, &intact).unwrap();
    assert!(covers(), "restored");
}
