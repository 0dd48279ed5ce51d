//! Builds a long store out of a short real recording, for read-back benchmarks at scale.
//!
//! `cargo run --release -p jitterscope-diagnose --example synth_store -- <src-store> <dst-store> [hours]`
//!
//! Reads every sample of `<src-store>` (e.g. a 60 s `jitterscope record`), then writes `hours`
//! (default 24) of one-second samples into the new store `<dst-store>` by cycling through them:
//! each copy is decoded, re-stamped (`ts_ns` one second apart ending now, `mono_ns` advancing in
//! step so derived rates stay sane), run through the recorder's online episode detection for its
//! signals lane, and encoded again with the product's codec, then appended with
//! the product's store writer at its default settings (only the size cap is lifted). Consecutive
//! samples are real consecutive samples, so the compression seen is that of real data; at each
//! wrap-around counters step backwards once (rates are "unknown" for that one sample).
//!
//! Prints `key=value` lines for scripts: records, bytes, mb_per_hour, first_ts_ns, last_ts_ns.

use std::path::PathBuf;
use std::time::Instant;

use jitterscope_detect::Online;
use jitterscope_model::codec::{encode_lanes, Parts};
use jitterscope_model::sample::wall_ns;
use jitterscope_model::stored::{SampleReader, SampleWriter};
use jitterscope_model::Sample;
use jitterscope_store::{Reader, StoreConfig, Writer};

const SEC: i64 = 1_000_000_000;

fn main() {
    let mut args = std::env::args_os().skip(1);
    let usage = "usage: synth_store <src-store> <dst-store> [hours]";
    let src = PathBuf::from(args.next().expect(usage));
    let dst = PathBuf::from(args.next().expect(usage));
    let hours: f64 = args.next().map_or(24.0, |h| {
        h.to_str().and_then(|s| s.parse().ok()).expect(usage)
    });
    if dst.exists() && std::fs::read_dir(&dst).map_or(true, |mut d| d.next().is_some()) {
        eprintln!("synth_store: {} exists and is not empty", dst.display());
        std::process::exit(2);
    }

    let reader = SampleReader::open(&src).expect("cannot open the source store");
    let mut read = reader
        .samples(i64::MIN, i64::MAX, Parts::ALL)
        .expect("cannot read the source store");
    let mut samples: Vec<Sample> = read.by_ref().collect();
    if samples.len() < 2 {
        eprintln!(
            "synth_store: need at least 2 decodable samples in {}, found {} ({}); the example and the recorder must be built from the same tree",
            src.display(),
            samples.len(),
            read.damage().note().unwrap_or_else(|| "nothing skipped".into())
        );
        std::process::exit(2);
    }
    let (mut main, mut detail) = (Vec::new(), Vec::new());
    let mut src_raw = 0;
    for s in samples.iter_mut() {
        encode_lanes(s, &mut main, &mut detail).unwrap();
        src_raw += main.len() + detail.len();
    }

    let n = (hours * 3600.0).round() as i64;
    let now = wall_ns();
    let last_ts = now / SEC * SEC;
    let first_ts = last_ts - (n - 1) * SEC;
    let mono0 = samples[0].mono_ns;

    let mut cfg = StoreConfig::new(&dst);
    cfg.max_bytes = u64::MAX;
    cfg.retain = std::time::Duration::from_secs((hours * 3600.0) as u64 + 7 * 24 * 3600);
    let start = Instant::now();
    let mut w = SampleWriter::new(Writer::open(cfg).expect("cannot open the destination store"));
    let mut raw = 0u64;
    // Encoded as the recorder encodes, signals lane and online detection included.
    let mut online = Online::new();
    let mut prev: Option<Sample> = None;
    for i in 0..n {
        let mut s = samples[(i as usize) % samples.len()].clone();
        s.ts_ns = first_ts + i * SEC;
        s.mono_ns = mono0 + (i as u64) * SEC as u64;
        let signals = online.step(&s, prev.as_ref());
        raw += w.append(&mut s, &signals).expect("append") as u64;
        prev = Some(s);
    }
    w.close().expect("close");
    let write_s = start.elapsed().as_secs_f64();

    let stats = Reader::open(&dst).unwrap().stats().expect("stats");
    println!("source_samples={}", samples.len());
    println!("source_payload_bytes_avg={}", src_raw / samples.len());
    println!("records={}", stats.records);
    println!("raw_payload_bytes={raw}");
    println!("bytes={}", stats.total_bytes);
    println!("segments={}", stats.segments);
    println!(
        "mb_per_hour={:.3}",
        stats.total_bytes as f64 / 1e6 / (n as f64 / 3600.0)
    );
    println!(
        "compression_ratio={:.1}",
        raw as f64 / stats.total_bytes as f64
    );
    println!("write_seconds={write_s:.1}");
    println!("first_ts_ns={first_ts}");
    println!("last_ts_ns={last_ts}");
}
