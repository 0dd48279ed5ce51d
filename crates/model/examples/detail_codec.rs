//! What the detail lane's codec costs, measured on a real recording.
//!
//! `cargo run --release -p jitterscope-model --example detail_codec -- <store> [codec...]`
//!
//! Reads every sample of `<store>` (a `jitterscope record` of the host to measure), then, for
//! each detail codec (default: 2, the named MessagePack of builds before codec 3; 3, the
//! columns; 4, the columns with schedstat's run and wait time to the µs; 5, codec 4's columns
//! as differences from the table before, a codec-4 table starting each frame of the store's
//! default 60 records), writes the samples again through the store's writer at its default settings into
//! a temporary store: the main payload as the recorder writes it, and the process table in the
//! detail lane with that codec. It times the encoding and the append (zstd) per sample, reads
//! the store back and times decoding the detail lane (each time the fastest of 5 passes; codec 5
//! through a `DetailChain`, in order), checks every decoded process table
//! against the one recorded (for codecs 4 and 5, with those two times rounded down to the µs), and prints the bytes each lane takes on disk.
//!
//! Prints one `key=value` line per codec: `codec`, `samples`, `processes_avg`,
//! `detail_raw_bytes_avg` (before zstd), `detail_store_bytes_per_sample` and
//! `main_store_bytes_per_sample` (segment and index files after zstd), `detail_mb_per_hour`
//! (at one sample a second), `encode_us_avg` (the detail payload), `append_us_avg` (main and
//! detail through the writer, zstd included), `decode_us_avg` (the detail payload).

use std::path::Path;
use std::time::{Duration, Instant};

use jitterscope_model::codec::{
    self, DetailChain, DetailEncoder, Parts, CODEC_COLUMNS, CODEC_COLUMNS_DELTA, CODEC_COLUMNS_US,
    CODEC_MSGPACK_NAMED_V2,
};
use jitterscope_model::stored::SampleReader;
use jitterscope_model::Sample;
use jitterscope_store::{Lane, Reader, StoreConfig, Writer};

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: detail_codec <store> [codec...]";
    let src = args.next().expect(usage);
    let mut codecs: Vec<u8> = args.map(|a| a.parse().expect(usage)).collect();
    if codecs.is_empty() {
        codecs = vec![
            CODEC_MSGPACK_NAMED_V2,
            CODEC_COLUMNS,
            CODEC_COLUMNS_US,
            CODEC_COLUMNS_DELTA,
        ];
    }
    let reader = SampleReader::open(&src).expect("cannot open the store");
    let mut read = reader
        .samples(i64::MIN, i64::MAX, Parts::ALL)
        .expect("cannot read the store");
    let mut samples: Vec<Sample> = read.by_ref().collect();
    samples.retain(|s| s.processes.is_some());
    if samples.is_empty() {
        eprintln!("detail_codec: no sample with processes in {src}");
        std::process::exit(2);
    }
    if let Some(n) = read.damage().note() {
        eprintln!("detail_codec: {n}");
    }
    for c in codecs {
        measure(&mut samples, c);
    }
}

/// Passes over the samples; each time is the fastest pass's (other work on the host only
/// ever adds time).
const PASSES: usize = 5;

fn measure(samples: &mut [Sample], c: u8) {
    let (mut main, mut detail) = (Vec::new(), Vec::new());
    let mut best = [Duration::MAX; 3];
    let (mut raw, mut procs, mut detail_bytes, mut main_bytes) = (0, 0, 0, 0);
    for _ in 0..PASSES {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut cfg = StoreConfig::new(dir.path());
        cfg.max_bytes = u64::MAX;
        cfg.retain = Duration::from_secs(100 * 365 * 86400);
        let mut w = Writer::open(cfg).expect("cannot open the temporary store");
        let (mut enc_t, mut app_t) = (Duration::ZERO, Duration::ZERO);
        (raw, procs) = (0, 0);
        let mut deltas = DetailEncoder::default();
        for (i, s) in samples.iter_mut().enumerate() {
            codec::encode_lanes(s, &mut main, &mut detail).expect("encodes");
            let p = s.processes.as_deref().unwrap_or_default();
            procs += p.len();
            let t = Instant::now();
            if c == CODEC_COLUMNS_DELTA {
                let key = i % jitterscope_store::DEFAULT_FRAME_RECORDS as usize == 0;
                deltas.encode(p, key, &mut detail).expect("encodes");
                deltas.commit(s.ts_ns, p);
            } else {
                codec::encode_detail(p, c, &mut detail).expect("encodes");
            }
            enc_t += t.elapsed();
            raw += detail.len();
            let t = Instant::now();
            w.append_lanes(s.ts_ns, &main, &[(Lane::Detail, &detail)])
                .expect("appends");
            app_t += t.elapsed();
        }
        w.close().expect("closes");

        // Read back: every record's detail, decoded and compared with what was recorded.
        let r = Reader::open(dir.path()).expect("reopens");
        let mut dec_t = Duration::ZERO;
        let mut n = 0;
        let mut chain = DetailChain::default();
        for (rec, s) in r
            .range(i64::MIN, i64::MAX)
            .expect("reads")
            .zip(samples.iter())
        {
            let rec = rec.expect("intact");
            let d = rec.detail.expect("has its detail");
            let t = Instant::now();
            let p = chain.decode(rec.ts_ns, &d).expect("decodes");
            dec_t += t.elapsed();
            assert_eq!(rec.ts_ns, s.ts_ns);
            let mut want = s.processes.clone();
            if c == CODEC_COLUMNS_US || c == CODEC_COLUMNS_DELTA {
                for t in want
                    .iter_mut()
                    .flatten()
                    .filter_map(|p| p.schedstat.as_mut())
                {
                    codec::round_schedstat(t);
                }
            }
            assert!(p == want, "codec {c}: sample {} differs", s.ts_ns);
            n += 1;
        }
        assert_eq!(n, samples.len());
        for (b, t) in best.iter_mut().zip([enc_t, app_t, dec_t]) {
            *b = (*b).min(t);
        }

        (detail_bytes, main_bytes) = (0, 0);
        for e in std::fs::read_dir(dir.path()).expect("lists").flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let len = e.metadata().map_or(0, |m| m.len());
            if name.contains(".d.") {
                detail_bytes += len;
            } else if name.starts_with("seg-") && !is_lane(Path::new(&name)) {
                main_bytes += len;
            }
        }
    }
    let n = samples.len() as f64;
    let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
    println!(
        "codec={c} samples={} processes_avg={:.0} detail_raw_bytes_avg={:.0} detail_store_bytes_per_sample={:.0} main_store_bytes_per_sample={:.0} detail_mb_per_hour={:.2} encode_us_avg={:.0} append_us_avg={:.0} decode_us_avg={:.0}",
        samples.len(),
        procs as f64 / n,
        raw as f64 / n,
        detail_bytes as f64 / n,
        main_bytes as f64 / n,
        detail_bytes as f64 / n * 3600.0 / 1e6,
        us(best[0]),
        us(best[1]),
        us(best[2]),
    );
}

/// Whether a file of the store belongs to a lane (`seg-<ts>.<letter>.jss` or `.idx`).
fn is_lane(p: &Path) -> bool {
    p.file_stem()
        .and_then(|s| Path::new(s).extension())
        .is_some()
}
