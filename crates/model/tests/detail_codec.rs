//! The detail lane's codecs on real process tables: what codec 3 (columns) writes decodes to
//! exactly the processes recorded, what codec 4 (columns, schedstat's run and wait time to the
//! µs) writes decodes to them with those two times rounded down to the µs, what codec 5 (codec
//! 4's table as differences from the table before it in its frame) writes decodes to the same,
//! and stores written with codec 2 still read.
//!
//! `tests/fixtures/store-lanes-v2/` was written by the last build before codec 3
//! (`jitterscope record --dir tests/fixtures/store-lanes-v2 --root tests/fixtures/host
//! --interval 1s --duration 4s --profile-hz 0 --no-tracers`, LOCK removed): main, detail
//! (codec 2) and signals lanes. NEVER regenerate it: it stands for stores on real hosts. Its
//! processes are the host fixture's few; the hundreds of a real host are this host's own,
//! read in `this_hosts_table_round_trips_exactly`.
//!
//! `tests/fixtures/store-lanes-v3/` was written by the first build with codec 5
//! (`scripts/capture-store-fixture.sh`: this machine's own /proc, 65 samples at 200 ms, short
//! processes starting and ending meanwhile): two frames, each a codec-4 table and then codec-5
//! ones. Like v2, it is kept as it is: stores on real hosts hold such frames.

use std::time::Duration;

use jitterscope_model::codec::{
    self, Parts, CODEC_COLUMNS, CODEC_COLUMNS_US, CODEC_MSGPACK_NAMED_V2,
};
use jitterscope_model::signals::SignalRecord;
use jitterscope_model::stored::{Encoder, SampleReader, SampleWriter};
use jitterscope_model::Sample;
use jitterscope_sources::process::{Process, ProcessReader};
use jitterscope_sources::Root;
use jitterscope_store::{Reader, StoreConfig, Writer};

fn fixture() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/store-lanes-v2")
}

/// Every sample of the codec-2 fixture, with its processes.
fn recorded() -> Vec<Sample> {
    let r = SampleReader::open(fixture()).expect("fixture store");
    let mut s = r.samples(i64::MIN, i64::MAX, Parts::ALL).unwrap();
    let samples: Vec<Sample> = s.by_ref().collect();
    assert!(s.damage().is_empty(), "{:?}", s.damage());
    samples
}

fn round_trip_with(procs: &[Process], c: u8) -> Vec<Process> {
    let mut b = Vec::new();
    codec::encode_detail(procs, c, &mut b).unwrap();
    assert_eq!(b[0], c);
    codec::decode_detail(&b).unwrap().expect("a table")
}

fn round_trip(procs: &[Process]) -> Vec<Process> {
    round_trip_with(procs, CODEC_COLUMNS)
}

/// `procs` as codec 4 keeps them: run and wait time rounded down to the µs.
fn to_us(procs: &[Process]) -> Vec<Process> {
    let mut v = procs.to_vec();
    for s in v.iter_mut().filter_map(|p| p.schedstat.as_mut()) {
        codec::round_schedstat(s);
    }
    v
}

#[test]
fn codec_2_details_still_read() {
    let samples = recorded();
    assert!(samples.len() >= 3, "{} samples", samples.len());
    for s in &samples {
        let p = s
            .processes
            .as_deref()
            .expect("processes from the detail lane");
        assert!(p.len() >= 4, "{} processes", p.len());
        assert!(p.iter().any(|p| p.stat.pid == 1));
        assert!(p
            .iter()
            .any(|p| p.schedstat.is_some() && p.cgroups.is_some()));
    }
}

#[test]
fn recorded_tables_round_trip_exactly() {
    for s in recorded() {
        let p = s.processes.as_deref().unwrap();
        assert!(round_trip(p) == p, "sample {} differs", s.ts_ns);
        assert!(round_trip_with(p, CODEC_COLUMNS_US) == to_us(p));
        // And written back as codec 2 by this build, the bytes the old build wrote read the same.
        let mut b = Vec::new();
        codec::encode_detail(p, CODEC_MSGPACK_NAMED_V2, &mut b).unwrap();
        assert!(codec::decode_detail(&b).unwrap().as_deref() == Some(p));
    }
}

#[test]
fn recorded_samples_come_back_whole_through_the_store() {
    let samples = recorded();
    let dir = tempfile::tempdir().unwrap();
    let mut c = StoreConfig::new(dir.path());
    c.retain = Duration::from_secs(100 * 365 * 86400);
    let mut w = Writer::open(c).unwrap();
    let mut enc = Encoder::new();
    for s in &samples {
        let mut s = s.clone();
        let e = enc.encode(&mut s, &SignalRecord::default()).unwrap();
        assert!(e
            .lanes
            .iter()
            .any(|(_, d)| d.first() == Some(&CODEC_COLUMNS_US)));
        w.append_lanes(s.ts_ns, e.main, &e.lanes).unwrap();
    }
    w.close().unwrap();
    let r = SampleReader::open(dir.path()).unwrap();
    let mut read = r.samples(i64::MIN, i64::MAX, Parts::ALL).unwrap();
    let back: Vec<Sample> = read.by_ref().collect();
    assert!(read.damage().is_empty());
    assert_eq!(back.len(), samples.len());
    for (a, b) in back.iter().zip(&samples) {
        let b = Sample {
            processes: b.processes.as_deref().map(to_us),
            ..b.clone()
        };
        assert!(a == &b, "sample {} differs", b.ts_ns);
    }
    // A read that does not want processes does not get them.
    let host: Vec<Sample> = r
        .samples(i64::MIN, i64::MAX, Parts::NONE)
        .unwrap()
        .collect();
    assert!(host.iter().all(|s| s.processes.is_none()));
}

#[test]
fn this_hosts_table_round_trips_exactly() {
    // The processes running now, read as the recorder reads them, twice (the second scan
    // carries processes forward and shares their cgroups and command lines).
    let mut r = ProcessReader::new(&Root::default(), 100_000);
    let mut procs = Vec::new();
    for _ in 0..2 {
        procs.clear();
        r.scan(&mut procs, None).unwrap();
        assert!(procs.iter().any(|p| p.stat.pid == std::process::id()));
        assert!(round_trip(&procs) == procs);
        assert!(round_trip_with(&procs, CODEC_COLUMNS_US) == to_us(&procs));
    }
}

fn fixture_v3() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/store-lanes-v3")
}

/// The codec byte of each detail in a store, in file order.
fn detail_codecs(dir: &std::path::Path) -> Vec<u8> {
    Reader::open(dir)
        .unwrap()
        .range(i64::MIN, i64::MAX)
        .unwrap()
        .filter_map(|r| r.unwrap().detail.map(|d| d[0]))
        .collect()
}

#[test]
fn a_recorded_store_of_delta_tables_reads_the_same_from_any_record() {
    let dir = fixture_v3();
    let codecs = detail_codecs(&dir);
    assert_eq!(codecs.len(), 65, "{codecs:?}");
    for (i, c) in codecs.iter().enumerate() {
        let want = if i % 60 == 0 {
            CODEC_COLUMNS_US
        } else {
            codec::CODEC_COLUMNS_DELTA
        };
        assert_eq!(*c, want, "record {i}");
    }
    let r = SampleReader::open(&dir).unwrap();
    let mut read = r.samples(i64::MIN, i64::MAX, Parts::ALL).unwrap();
    let all: Vec<Sample> = read.by_ref().collect();
    assert!(read.damage().is_empty(), "{:?}", read.damage());
    assert_eq!(all.len(), 65);
    let rows = |s: &Sample| s.processes.as_ref().map_or(0, Vec::len);
    assert!(
        all.iter().all(|s| rows(s) >= 20),
        "every sample has its table"
    );
    // Processes started and ended while it recorded: the tables are not all alike.
    let pids =
        |s: &Sample| -> Vec<u32> { s.processes.iter().flatten().map(|p| p.stat.pid).collect() };
    assert!(all.windows(2).any(|w| pids(&w[0]) != pids(&w[1])));
    // One record alone, or a range starting at any record, reads what the whole read gave.
    for (k, s) in all.iter().enumerate() {
        let mut d = jitterscope_model::stored::Damage::default();
        let one = r.sample_at(s.ts_ns, Parts::ALL, &mut d).unwrap();
        assert!(one.as_ref() == Some(s), "record {k} alone");
        let next: Vec<Sample> = r
            .samples(s.ts_ns, s.ts_ns + 1_000_000_000, Parts::ALL)
            .unwrap()
            .collect();
        assert!(
            all[k..].starts_with(&next) && !next.is_empty(),
            "from record {k}"
        );
        assert!(d.is_empty());
    }
    // Each table, written self-contained by this build, reads back the same.
    for s in &all {
        let p = s.processes.as_deref().unwrap();
        assert!(round_trip_with(p, CODEC_COLUMNS_US) == p);
    }
}

#[test]
fn this_hosts_tables_come_back_whole_through_deltas() {
    // The processes of this host, scanned as the recorder scans them, written as it writes
    // them (a frame of 4 records, so frames start on the way), then read back.
    let dir = tempfile::tempdir().unwrap();
    let mut c = StoreConfig::new(dir.path());
    c.retain = Duration::from_secs(100 * 365 * 86400);
    c.frame_records = 4;
    let mut w = SampleWriter::new(Writer::open(c).unwrap());
    let mut r = ProcessReader::new(&Root::default(), 100_000);
    let mut written = Vec::new();
    for i in 0..10 {
        let mut procs = Vec::new();
        r.scan(&mut procs, None).unwrap();
        // A process that starts and ends between scans.
        let _ = std::process::Command::new("true").status();
        let mut s = Sample {
            ts_ns: (i + 1) * 1_000_000_000,
            processes: Some(procs),
            ..Default::default()
        };
        codec::round_as_stored(&mut s);
        w.append(&mut s, &SignalRecord::default()).unwrap();
        written.push(s);
        std::thread::sleep(Duration::from_millis(20));
    }
    w.close().unwrap();
    assert_eq!(
        detail_codecs(dir.path()),
        [4, 5, 5, 5, 4, 5, 5, 5, 4, 5],
        "a table per record, self-contained where a frame starts"
    );
    let rd = SampleReader::open(dir.path()).unwrap();
    let back: Vec<Sample> = rd
        .samples(i64::MIN, i64::MAX, Parts::ALL)
        .unwrap()
        .collect();
    assert_eq!(back.len(), written.len());
    for (a, b) in back.iter().zip(&written) {
        assert!(a == b, "sample {} differs", b.ts_ns);
    }
}
