//! Round trips, ranges, rotation, retention, index loss, damage and versioning.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jitterscope_store::{Reader, Record, StoreConfig, StoreError, Writer};

mod common;
use common::noise;

const SEC: i64 = 1_000_000_000;

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A payload that, like real samples, differs only slightly from its neighbours.
fn payload(i: i64, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|k| (k % 251) as u8).collect();
    p[..8].copy_from_slice(&i.to_le_bytes());
    let at = (i as usize).wrapping_mul(97) % len;
    p[at] = p[at].wrapping_add(1);
    p
}

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.frame_records = 10;
    c
}

fn write(c: &StoreConfig, ts: impl IntoIterator<Item = i64>) -> Vec<Record> {
    let mut w = Writer::open(c.clone()).unwrap();
    let mut out = Vec::new();
    for t in ts {
        let p = payload(t, 2000);
        w.append(t, &p).unwrap();
        out.push(Record {
            ts_ns: t,
            payload: p,
            detail: None,
        });
    }
    w.close().unwrap();
    out
}

fn read_all(dir: &Path) -> Vec<Record> {
    Reader::open(dir)
        .unwrap()
        .range(i64::MIN, i64::MAX)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    Reader::open(dir).unwrap().segments().unwrap()
}

#[test]
fn round_trip_returns_every_record_in_order() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    let written = write(&config(d.path()), (0..95).map(|i| t0 + i * SEC));
    assert_eq!(read_all(d.path()), written);
    let r = Reader::open(d.path()).unwrap();
    assert_eq!(r.time_bounds().unwrap(), Some((t0, t0 + 94 * SEC)));
    assert_eq!(r.latest().unwrap().unwrap(), written[94]);
    let s = r.stats().unwrap();
    assert_eq!(
        (s.segments, s.records, s.corrupt_records, s.torn_tails),
        (1, 95, 0, 0)
    );
}

#[test]
fn empty_store_has_no_bounds() {
    let d = tempfile::tempdir().unwrap();
    let r = Reader::open(d.path()).unwrap();
    assert_eq!(r.time_bounds().unwrap(), None);
    assert_eq!(r.latest().unwrap(), None);
}

#[test]
fn range_selects_across_frames_and_segments_and_skips_frames() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    let c = config(d.path());
    let mut all = write(&c, (0..50).map(|i| t0 + i * SEC));
    all.extend(write(&c, (50..100).map(|i| t0 + i * SEC)));
    assert_eq!(segments(d.path()).len(), 2);
    let r = Reader::open(d.path()).unwrap();
    let mut range = r.range(t0 + 35 * SEC, t0 + 64 * SEC).unwrap();
    let got: Vec<Record> = (&mut range).collect::<Result<_, _>>().unwrap();
    assert_eq!(got, all[35..=64]);
    // Frames of 10: [0,10) [10,20) [20,30) and [70,80) [80,90) [90,100) lie outside.
    assert_eq!(range.stats().frames_skipped, 6);
}

#[test]
fn clock_jump_back_is_found_through_frame_min_max() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    // The clock jumps back 30 s in the middle of the second frame.
    let ts: Vec<i64> = (0..15)
        .map(|i| t0 + i * SEC)
        .chain((0..15).map(|i| t0 - 30 * SEC + i * SEC))
        .collect();
    let all = write(&config(d.path()), ts);
    let r = Reader::open(d.path()).unwrap();
    let got: Vec<Record> = r
        .range(t0 - 30 * SEC, t0 - 20 * SEC)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got, all[15..26]);
}

#[test]
fn reader_sees_each_append_of_a_live_writer() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    let mut w = Writer::open(config(d.path())).unwrap();
    for i in 0..25 {
        let p = payload(i, 5000);
        w.append(t0 + i * SEC, &p).unwrap();
        let r = Reader::open(d.path()).unwrap();
        let latest = r.latest().unwrap().unwrap();
        assert_eq!(
            latest,
            Record {
                ts_ns: t0 + i * SEC,
                payload: p,
                detail: None,
            }
        );
        let s = r.stats().unwrap();
        assert_eq!(
            (s.records, s.torn_tails, s.corrupt_records),
            (i as u64 + 1, 0, 0)
        );
    }
}

#[test]
fn rotates_by_span_and_by_size() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    let mut c = config(d.path());
    c.segment_span = Duration::from_secs(20);
    let all = write(&c, (0..50).map(|i| t0 + i * SEC));
    // Records 0..=19 span 19 s; the 21st would make it 20 s.
    assert_eq!(segments(d.path()).len(), 3);
    assert_eq!(read_all(d.path()), all);

    let d2 = tempfile::tempdir().unwrap();
    let mut c2 = config(d2.path());
    c2.segment_max_bytes = 4096;
    let mut w = Writer::open(c2).unwrap();
    let mut all = Vec::new();
    for i in 0..40 {
        // Incompressible, so each record adds its full size.
        let p = noise(i as u64, 1000);
        w.append(t0 + i * SEC, &p).unwrap();
        all.push(Record {
            ts_ns: t0 + i * SEC,
            payload: p,
            detail: None,
        });
    }
    drop(w);
    let n = segments(d2.path()).len();
    assert!((8..=12).contains(&n), "{n} segments");
    assert_eq!(read_all(d2.path()), all);
}

#[test]
fn new_run_never_appends_to_an_existing_segment_even_with_the_same_first_ts() {
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path());
    let t0 = now_ns();
    let mut all = write(&c, [t0, t0 + SEC]);
    all.extend(write(&c, [t0, t0 + 2 * SEC]));
    assert_eq!(segments(d.path()).len(), 2);
    assert_eq!(read_all(d.path()), all);
}

#[test]
fn retention_by_age_deletes_old_segments_at_open() {
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path());
    let now = now_ns();
    write(&c, (0..5).map(|i| now - 3 * 3600 * SEC + i * SEC));
    let recent = write(&c, (0..5).map(|i| now - 60 * SEC + i * SEC));
    assert_eq!(segments(d.path()).len(), 2);
    let mut c2 = c.clone();
    c2.retain = Duration::from_secs(3600);
    drop(Writer::open(c2).unwrap());
    assert_eq!(segments(d.path()).len(), 1);
    assert_eq!(read_all(d.path()), recent);
}

#[test]
fn retention_by_size_deletes_oldest_segments_at_rotation() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    let mut c = config(d.path());
    c.segment_span = Duration::from_secs(10);
    c.max_bytes = 6000;
    let mut w = Writer::open(c).unwrap();
    for i in 0..200 {
        let p = noise(i as u64, 500);
        w.append(t0 + i * SEC, &p).unwrap();
        let total: u64 = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name() != "LOCK")
            .map(|e| e.metadata().unwrap().len())
            .sum();
        // Checked at rotation, so the store may exceed the cap by the segment being written.
        assert!(total <= 6000 + 10 * 600, "store grew to {total} bytes");
    }
    drop(w);
    let got = read_all(d.path());
    assert_eq!(got.last().unwrap().ts_ns, t0 + 199 * SEC);
    assert!(got.len() < 100, "{} records kept", got.len());
    // Whole segments go, so what remains is a contiguous run of the newest records.
    let first = (got[0].ts_ns - t0) / SEC;
    assert_eq!(
        got.iter().map(|r| r.ts_ns).collect::<Vec<_>>(),
        (first..200).map(|i| t0 + i * SEC).collect::<Vec<_>>()
    );
}

#[test]
fn lost_or_corrupt_index_falls_back_to_scanning() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    let all = write(&config(d.path()), (0..45).map(|i| t0 + i * SEC));
    let seg = &segments(d.path())[0];
    let idx = seg.with_extension("idx");

    // A flipped bit in the second entry: the first still serves, the rest is scanned.
    let mut bytes = std::fs::read(&idx).unwrap();
    bytes[16 + 56 + 20] ^= 0x04;
    std::fs::write(&idx, &bytes).unwrap();
    assert_eq!(read_all(d.path()), all);

    // Torn in the middle of an entry.
    std::fs::write(&idx, &bytes[..16 + 56 + 30]).unwrap();
    assert_eq!(read_all(d.path()), all);

    std::fs::remove_file(&idx).unwrap();
    assert_eq!(read_all(d.path()), all);
    let r = Reader::open(d.path()).unwrap();
    let got: Vec<Record> = r
        .range(t0 + 12 * SEC, t0 + 13 * SEC)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got, all[12..14]);
    assert_eq!(r.stats().unwrap().corrupt_records, 0);
}

/// Writes one frame of records whose payloads are stored raw (zstd level 1 cannot compress random
/// bytes), so a byte of the file maps to a byte of a record.
fn write_incompressible(dir: &Path, n: i64, t0: i64) -> Vec<Record> {
    let mut c = StoreConfig::new(dir);
    c.compression_level = 1;
    let mut w = Writer::open(c).unwrap();
    let mut all = Vec::new();
    for i in 0..n {
        let p = noise(i as u64 + 1, 4000);
        w.append(t0 + i * SEC, &p).unwrap();
        all.push(Record {
            ts_ns: t0 + i * SEC,
            payload: p,
            detail: None,
        });
    }
    drop(w);
    all
}

#[test]
fn corrupt_record_is_skipped_and_counted() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    let all = write_incompressible(d.path(), 5, t0);
    let seg = &segments(d.path())[0];
    let mut bytes = std::fs::read(seg).unwrap();
    // Find the third record's payload in the file and damage one byte of it.
    let needle = &all[2].payload[100..132];
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("payload stored raw");
    bytes[at + 5] ^= 0xFF;
    std::fs::write(seg, &bytes).unwrap();

    let r = Reader::open(d.path()).unwrap();
    let mut range = r.range(i64::MIN, i64::MAX).unwrap();
    let got: Vec<Record> = (&mut range).collect::<Result<_, _>>().unwrap();
    let expected: Vec<Record> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(_, r)| r.clone())
        .collect();
    assert_eq!(got, expected);
    assert_eq!(range.stats().corrupt_records, 1);
    assert_eq!(r.stats().unwrap().corrupt_records, 1);
}

#[test]
fn torn_tail_is_counted_not_an_error() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    let mut c = config(d.path());
    c.frame_records = 100;
    let mut w = Writer::open(c).unwrap();
    let mut all = Vec::new();
    let mut lens = Vec::new();
    for i in 0..6 {
        let p = payload(i, 3000);
        w.append(t0 + i * SEC, &p).unwrap();
        all.push(Record {
            ts_ns: t0 + i * SEC,
            payload: p,
            detail: None,
        });
        lens.push(
            std::fs::metadata(w.current_segment().unwrap())
                .unwrap()
                .len(),
        );
    }
    let seg = w.current_segment().unwrap().to_path_buf();
    // Simulate a crash: no frame end, no index entry.
    std::mem::forget(w);
    let full = std::fs::read(&seg).unwrap();
    // Cut inside the last record's write.
    let cut = (lens[4] + (lens[5] - lens[4]) / 2) as usize;
    std::fs::write(&seg, &full[..cut]).unwrap();
    let r = Reader::open(d.path()).unwrap();
    let mut range = r.range(i64::MIN, i64::MAX).unwrap();
    let got: Vec<Record> = (&mut range).collect::<Result<_, _>>().unwrap();
    assert_eq!(got, all[..5]);
    assert_eq!(range.stats().torn_tails, 1);
    assert_eq!(range.stats().corrupt_records, 0);

    // Cut exactly at a record boundary: an open frame, not a torn one.
    std::fs::write(&seg, &full[..lens[3] as usize]).unwrap();
    let s = Reader::open(d.path()).unwrap().stats().unwrap();
    assert_eq!((s.records, s.torn_tails), (4, 0));
}

#[test]
fn unknown_segment_version_is_rejected_naming_the_file_and_an_unknown_index_is_scanned_around() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    write(&config(d.path()), (0..3).map(|i| t0 + i * SEC));
    let seg = segments(d.path())[0].clone();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[8] = 9;
    std::fs::write(&seg, &bytes).unwrap();
    let r = Reader::open(d.path()).unwrap();
    let err = r
        .range(i64::MIN, i64::MAX)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, StoreError::UnsupportedVersion { version: 9, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(seg.file_name().unwrap().to_str().unwrap()),
        "{err}"
    );

    bytes[8] = 1;
    std::fs::write(&seg, &bytes).unwrap();
    let idx = seg.with_extension("idx");
    let mut ib = std::fs::read(&idx).unwrap();
    ib[8] = 2;
    std::fs::write(&idx, &ib).unwrap();
    // An index this build cannot read costs a scan, not the segment's records; the read
    // names it.
    assert_eq!(r.latest().unwrap().map(|x| x.ts_ns), Some(t0 + 2 * SEC));
    let mut range = r.range(i64::MIN, i64::MAX).unwrap();
    assert_eq!((&mut range).filter_map(Result::ok).count(), 3);
    let st = range.stats();
    assert_eq!(st.lost_records, 0);
    assert_eq!(st.damaged_files.len(), 1, "{st:?}");
    assert_eq!(st.damaged_files[0].path, idx);
    assert!(st.damaged_files[0].what.contains("version 2"), "{st:?}");
}

#[test]
fn second_writer_on_the_same_dir_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let w = Writer::open(StoreConfig::new(d.path())).unwrap();
    let err = Writer::open(StoreConfig::new(d.path())).err().unwrap();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("another process"));
    drop(w);
    Writer::open(StoreConfig::new(d.path())).unwrap();
}

#[test]
fn oversized_payload_is_refused_and_writer_goes_on() {
    let d = tempfile::tempdir().unwrap();
    let mut w = Writer::open(StoreConfig::new(d.path())).unwrap();
    let big = vec![0u8; jitterscope_store::format::MAX_PAYLOAD_BYTES + 1];
    assert!(matches!(
        w.append(1, &big),
        Err(StoreError::PayloadTooLarge { .. })
    ));
    w.append(2, b"ok").unwrap();
    assert!(w.bytes_written() > 32);
    assert_eq!(w.dir(), d.path());
    drop(w);
    assert_eq!(
        read_all(d.path()),
        vec![Record {
            ts_ns: 2,
            payload: b"ok".to_vec(),
            detail: None,
        }]
    );
}

/// A newest segment whose header is damaged leaves the store's bounds and newest record to
/// the segments before it, instead of failing every question about the store.
#[test]
fn a_damaged_newest_segment_leaves_the_bounds_to_the_others() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    write(&config(d.path()), (0..3).map(|i| t0 + i * SEC));
    write(&config(d.path()), (10..13).map(|i| t0 + i * SEC));
    let segs = segments(d.path());
    assert_eq!(segs.len(), 2);
    for seg in [&segs[1], &segs[0]] {
        let mut b = std::fs::read(seg).unwrap();
        b[..4].copy_from_slice(b"XXXX");
        std::fs::write(seg, &b).unwrap();
        let r = Reader::open(d.path()).unwrap();
        let bounds = r.time_bounds().unwrap();
        if seg == &segs[1] {
            assert_eq!(bounds, Some((t0, t0 + 2 * SEC)));
            assert_eq!(r.latest().unwrap().map(|x| x.ts_ns), Some(t0 + 2 * SEC));
        } else {
            assert_eq!(bounds, None, "no segment is readable");
        }
    }
}

/// An index entry past the end of its segment means the segment was cut: the records its
/// entry counts and the tail does not hold are counted lost, with their times.
#[test]
fn a_cut_segment_counts_what_its_index_promised() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    let mut c = config(d.path());
    c.frame_records = 10;
    write(&c, (0..10).map(|i| t0 + i * SEC));
    let seg = segments(d.path())[0].clone();
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - len / 3)
        .unwrap();
    let r = Reader::open(d.path()).unwrap();
    let mut range = r.range(i64::MIN, i64::MAX).unwrap();
    let got = (&mut range).filter_map(Result::ok).count() as u64;
    let st = range.stats();
    assert!(got < 10, "{got}");
    assert_eq!(st.lost_records, 10 - got, "{st:?}");
    assert_eq!(st.lost, vec![(t0, t0 + 9 * SEC)]);
    assert_eq!(st.damaged_files.len(), 1, "{st:?}");
    assert!(st.damaged_files[0].what.contains("cut inside"), "{st:?}");
}

/// A segment the read cannot open costs only ranges its records may lie in (its index tells
/// where they are, when it is readable), and there its index entries count the loss.
#[test]
fn an_unreadable_segment_costs_only_the_ranges_its_index_places_it_in() {
    let d = tempfile::tempdir().unwrap();
    let t0 = now_ns();
    let mut c = config(d.path());
    c.frame_records = 3;
    write(&c, (0..6).map(|i| t0 + i * SEC));
    write(&c, (20..23).map(|i| t0 + i * SEC));
    let segs = segments(d.path());
    let mut b = std::fs::read(&segs[0]).unwrap();
    b[..4].copy_from_slice(b"XXXX");
    std::fs::write(&segs[0], &b).unwrap();
    let r = Reader::open(d.path()).unwrap();
    let read = |from: i64, to: i64| {
        let mut range = r.range(from, to).unwrap();
        let errors = (&mut range).filter(Result::is_err).count();
        (errors, range.stats())
    };
    // Between the first segment's last record and the second's first: nothing lost.
    let (errors, st) = read(t0 + 10 * SEC, t0 + 22 * SEC);
    assert_eq!((errors, st.lost_records), (0, 0), "{st:?}");
    assert!(st.lost.is_empty() && st.damaged_files.is_empty(), "{st:?}");
    // Over its second frame only: that frame's three records.
    let (errors, st) = read(t0 + 4 * SEC, t0 + 22 * SEC);
    assert_eq!((errors, st.lost_records), (1, 3), "{st:?}");
    assert_eq!(st.lost, vec![(t0 + 4 * SEC, t0 + 5 * SEC)]);
}
