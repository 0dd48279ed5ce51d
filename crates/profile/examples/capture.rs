//! Records fixtures for the profile tests from this machine (run as root by
//! `scripts/capture-profile-fixtures.sh`): the raw perf records of a few seconds of system-wide
//! sampling, and the per-second slices the real resolver made of them.
//!
//! usage: capture <seconds> <records.bin> <slices.json>
//!
//! records.bin is a sequence of `type u32, misc u16, cpu u16, len u32, bytes` (little endian),
//! one per ring record, the record bytes without their 8-byte header.

use std::io::Write;
use std::time::{Duration, Instant};

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
    let cfg = Config::default();
    let mut rings = sampler::open(&cfg).unwrap_or_else(|e| {
        eprintln!("capture: {e}");
        std::process::exit(1)
    });
    let cpus = sampler::online_cpus().expect("online cpus");
    let now = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let mut agg = Aggregator::new(cfg.hz, now(), SystemResolver::new());
    let mut out = std::io::BufWriter::new(std::fs::File::create(records).expect("records file"));
    let mut profiles = Vec::new();
    let start = Instant::now();
    let mut next_cut = Duration::from_secs(1);
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(100));
        for (ring, &cpu) in rings.iter_mut().zip(&cpus) {
            while let Some(rec) = ring.next_record() {
                let bytes = rec.to_vec();
                out.write_all(&rec.ty().to_le_bytes()).unwrap();
                out.write_all(&rec.misc().to_le_bytes()).unwrap();
                out.write_all(&(cpu as u16).to_le_bytes()).unwrap();
                out.write_all(&(bytes.len() as u32).to_le_bytes()).unwrap();
                out.write_all(&bytes).unwrap();
                let misc = rec.misc();
                if let Ok(r) = rec.parse_record() {
                    sampler::handle(r, misc, &mut agg);
                }
            }
        }
        agg.resolve();
        if start.elapsed() >= next_cut {
            next_cut += Duration::from_secs(1);
            profiles.push(agg.cut(now()));
        }
    }
    out.flush().unwrap();
    std::fs::write(slices, serde_json::to_string_pretty(&profiles).unwrap()).unwrap();
    let samples: u64 = profiles.iter().map(|p| p.samples).sum();
    eprintln!("capture: {} slices, {samples} samples", profiles.len());
}
