//! Records fixtures for the profile tests from this machine (run as root by
//! `scripts/capture-profile-fixtures.sh`): the raw perf records of a few seconds of system-wide
//! sampling, and the per-second slices the real resolver made of them.
//!
//! usage: capture <seconds> <records.bin> <slices.json>
//! (CAPTURE_STACK_BYTES=N: samples also copy N bytes of user stack, as the default sampler does)
//!
//! records.bin is a sequence of `length u32 (little endian), record`, one per ring record, the
//! record as the ring held it (8-byte perf_event_header included, native endian).

use std::io::Write;
use std::time::{Duration, Instant};

use jitterscope_model::sample::monotonic_ns as now;
use jitterscope_profile::capture::Aggregator;
use jitterscope_profile::sampler::{self, Config};
use jitterscope_profile::system::SystemResolver;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, secs, records, slices] = &args[..] else {
        eprintln!("usage: capture <seconds> <records.bin> <slices.json>");
        std::process::exit(2);
    };
    let secs: u64 = secs.parse().expect("seconds");
    // Frame-pointer records by default: the fixture test parses them with `builder(0, 99, 0)`'s
    // layout; CAPTURE_STACK_BYTES=N adds N bytes of user stack and the user registers.
    let stack: u32 = std::env::var("CAPTURE_STACK_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let cfg = if stack == 0 {
        Config::frame_pointers(sampler::DEFAULT_HZ)
    } else {
        Config {
            stack_bytes: stack,
            ..Config::default()
        }
    };
    let mut rings = sampler::open(&cfg).unwrap_or_else(|e| {
        eprintln!("capture: {e}");
        std::process::exit(1)
    });
    let mut agg = Aggregator::new(cfg.hz, now(), SystemResolver::new());
    let mut out = std::io::BufWriter::new(std::fs::File::create(records).expect("records file"));
    let mut profiles = Vec::new();
    let start = Instant::now();
    let mut next_cut = Duration::from_secs(1);
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(100));
        let mut events = Vec::new();
        for ring in rings.iter_mut() {
            while let Some(rec) = ring.next_record() {
                let body = rec.to_vec();
                let size = (body.len() + 8) as u16;
                out.write_all(&(size as u32).to_le_bytes()).unwrap();
                out.write_all(&rec.ty().to_ne_bytes()).unwrap();
                out.write_all(&rec.misc().to_ne_bytes()).unwrap();
                out.write_all(&size.to_ne_bytes()).unwrap();
                out.write_all(&body).unwrap();
                let misc = rec.misc();
                let layout = sampler::Layout::of(&perf_event::data::parse::ParseConfig::from(
                    *sampler::builder(0, cfg.hz, cfg.stack_bytes).attrs(),
                ));
                if let Some(e) =
                    sampler::event_of_record(rec.ty(), misc, &body, layout, || rec.parse_record())
                {
                    events.push(e);
                }
            }
        }
        sampler::apply(events, &mut agg);
        agg.sweep();
        if start.elapsed() >= next_cut {
            next_cut += Duration::from_secs(1);
            profiles.push(agg.cut(now()));
        }
    }
    out.flush().unwrap();
    std::fs::write(slices, serde_json::to_string(&profiles).unwrap()).unwrap();
    let samples: u64 = profiles.iter().map(|p| p.samples).sum();
    eprintln!("capture: {} slices, {samples} samples", profiles.len());
}
