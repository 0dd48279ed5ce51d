//! Builds a 24 h store of synthetic one-second samples and reports its size and read latency.
//!
//! `cargo run --release -p jitterscope-store --example store_bench [payload_bytes] [moving_pct]`
//!
//! `moving_pct` is the share of counters that change from one second to the next (default 30).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jitterscope_store::{Reader, StoreConfig, Writer};

const SEC: i64 = 1_000_000_000;
const SAMPLES: i64 = 24 * 3600;

/// A sample shaped like real ones: a block of u64 counters, most of them idle from one second to
/// the next, some moving by small amounts, a few by large ones.
struct Sample {
    counters: Vec<u64>,
    rng: u64,
    moving_pct: u64,
}

impl Sample {
    fn next(&mut self) -> Vec<u8> {
        for c in self.counters.iter_mut() {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let roll = self.rng % 100;
            if roll < self.moving_pct {
                // Mostly small steps, one in 32 a large one.
                *c += if (self.rng >> 32) & 31 == 0 {
                    self.rng >> 40
                } else {
                    self.rng >> 60
                };
            }
        }
        self.counters.iter().flat_map(|c| c.to_le_bytes()).collect()
    }
}

fn main() {
    let payload_bytes: usize = std::env::args()
        .nth(1)
        .map_or(30_000, |a| a.parse().expect("payload size in bytes"));
    let moving_pct: u64 = std::env::args()
        .nth(2)
        .map_or(30, |a| a.parse().expect("percentage of moving counters"));
    let dir = tempfile::tempdir().unwrap();
    let mut config = StoreConfig::new(dir.path());
    config.max_bytes = u64::MAX;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let t0 = now - SAMPLES * SEC;
    let mut sample = Sample {
        counters: (0..payload_bytes as u64 / 8)
            .map(|i| i * 1_000_003)
            .collect(),
        rng: 0x2545F4914F6CDD1D,
        moving_pct,
    };

    let start = Instant::now();
    let mut w = Writer::open(config).unwrap();
    let mut raw = 0u64;
    for i in 0..SAMPLES {
        let p = sample.next();
        raw += p.len() as u64;
        w.append(t0 + i * SEC, &p).unwrap();
    }
    let written = w.bytes_written();
    w.close().unwrap();
    let write_time = start.elapsed();

    let reader = Reader::open(dir.path()).unwrap();
    let stats = reader.stats().unwrap();
    assert_eq!(stats.records, SAMPLES as u64);

    let mid = t0 + SAMPLES / 2 * SEC;
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        let minute: Vec<_> = Reader::open(dir.path())
            .unwrap()
            .range(mid, mid + 59 * SEC)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        best = best.min(start.elapsed());
        assert_eq!(minute.len(), 60);
    }
    let start = Instant::now();
    let latest = reader.latest().unwrap().unwrap();
    let latest_time = start.elapsed();
    assert_eq!(latest.ts_ns, t0 + (SAMPLES - 1) * SEC);

    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "samples:              {SAMPLES} x {payload_bytes} B, {moving_pct}% of counters moving"
    );
    println!("raw payload:          {:.1} MB", mb(raw));
    println!("segments:             {}", stats.segments);
    println!(
        "bytes on disk:        {} ({:.2} MB)",
        stats.total_bytes,
        mb(stats.total_bytes)
    );
    println!("bytes written:        {written}");
    println!(
        "compression ratio:    {:.0}x",
        raw as f64 / stats.total_bytes as f64
    );
    println!("MB per hour:          {:.3}", mb(stats.total_bytes) / 24.0);
    println!(
        "write 24 h:           {write_time:.2?} ({:.0} us/append)",
        write_time.as_secs_f64() * 1e6 / SAMPLES as f64
    );
    println!("read 1 min (middle):  {best:.2?} (best of 5)");
    println!("latest():             {latest_time:.2?}");
}
