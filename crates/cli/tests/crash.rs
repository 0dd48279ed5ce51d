//! The recorder killed with SIGKILL at random moments, again and again, into one store: every
//! sample that reached the store before a kill stays readable, the lock dies with the process
//! (the next run starts at once), and nothing reads back as damage except torn tails.
//!
//! Kills land anywhere: before the store is opened, while a segment is being created, in the
//! middle of a write. The random sleeps come from a seed printed on failure; set
//! `JITTERSCOPE_CRASH_SEED` to replay a run.

mod common;

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{check_store, cmd, count_samples, now_arg, run, s, text, ChildGuard};

const RUNS: usize = 20;

/// xorshift64*: enough randomness for sleep lengths without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn seed() -> u64 {
    if let Ok(s) = std::env::var("JITTERSCOPE_CRASH_SEED") {
        return s.parse().expect("JITTERSCOPE_CRASH_SEED is a u64");
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (t.as_nanos() as u64) | 1 // xorshift must not start at 0
}

/// Records in the store as the store crate counts them (every segment, whole range).
fn stored_records(dir: &std::path::Path) -> usize {
    let reader = jitterscope_store::Reader::open(dir).expect("open store");
    let range = reader.range(i64::MIN, i64::MAX).expect("range");
    let mut n = 0;
    for r in range {
        r.expect("segment readable");
        n += 1;
    }
    n
}

#[test]
fn sigkill_at_random_moments_loses_nothing_written() {
    let seed = seed();
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    // Logs live outside the store so the store directory holds only what the recorder wrote.
    let logs = tmp.path().join("logs");
    std::fs::create_dir(&logs).unwrap();

    let mut prev = 0usize;
    for run_no in 0..RUNS {
        let ctx = format!("run {run_no} (JITTERSCOPE_CRASH_SEED={seed})");
        let log_path = logs.join(format!("run-{run_no}.stderr"));
        let spawned = Instant::now();
        let from = now_arg();
        let child = cmd()
            .args(["record", "--dir", s(&store), "--interval", "200ms"])
            .stdout(Stdio::null())
            .stderr(File::create(&log_path).unwrap())
            .spawn()
            .expect("spawn recorder");
        let mut rec = ChildGuard::new(child);
        // Sleep the random time, watching the log for the moment the recorder says it records:
        // startup (loading the tracers' BPF programs) takes from milliseconds to over a second
        // on a loaded host, so whether a run "should" have stored a sample is judged from then.
        let deadline = spawned + Duration::from_millis(rng.range(300, 2500));
        let mut announced: Option<Instant> = None;
        while Instant::now() < deadline {
            if announced.is_none()
                && std::fs::read_to_string(&log_path).is_ok_and(|l| l.contains("recording every"))
            {
                announced = Some(Instant::now());
            }
            std::thread::sleep(
                deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(20)),
            );
        }

        // Still running: a recorder exits on its own only after an error, such as finding the
        // previous (killed) run's lock still held.
        if let Some(st) = rec.try_wait() {
            panic!(
                "{ctx}: recorder exited by itself ({st:?}): {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        rec.signal(libc::SIGKILL);
        let st = rec
            .wait_timeout(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{ctx}: recorder survived SIGKILL"));
        assert_eq!(st.signal(), Some(libc::SIGKILL), "{ctx}: {st:?}");
        let lived = spawned.elapsed();
        let recording_for = announced.map(|t| t.elapsed());

        let log = std::fs::read_to_string(&log_path).unwrap();
        assert!(
            !log.contains("jitterscope: error:") && !log.contains("panicked"),
            "{ctx}: {log}"
        );
        // Even loaded, startup takes well under two seconds; a run that never got to record in
        // that time is a failure.
        if lived > Duration::from_secs(2) {
            assert!(log.contains("recording every"), "{ctx}: {log}");
        }

        // Everything stored so far, counted by the store itself (cheap: no payload decoding),
        // must never shrink; this run's share, read back through `dump`, must account for
        // exactly the growth. Earlier runs' samples are all older than this run's spawn, so the
        // two windows cannot overlap (barring a wall-clock jump during the test).
        let total = stored_records(&store);
        let n = count_samples(&store, &from, &now_arg());
        assert!(
            total >= prev,
            "{ctx}: stored records went from {prev} down to {total}"
        );
        assert_eq!(
            total,
            prev + n,
            "{ctx}: store grew by {} but dump read back {n} samples of this run",
            total - prev
        );
        // The first sample is collected as soon as recording starts and every append reaches
        // the file before the next sample, so a run that recorded for over a second (five
        // 200 ms ticks) left at least one sample behind.
        if recording_for.is_some_and(|d| d > Duration::from_secs(1)) {
            assert!(
                n >= 1,
                "{ctx}: lived {lived:?}, recorded for {recording_for:?}, but added no sample"
            );
        }
        prev = total;
    }

    // The last kill's lock is released too: a clean run starts, records and exits 0.
    let o = run(
        &[
            "record",
            "--dir",
            s(&store),
            "--interval",
            "200ms",
            "--duration",
            "1s",
        ],
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "clean run failed: {}", text(&o.stderr));
    // The whole store through dump, from the very beginning: every run's samples decode.
    let n = count_samples(&store, "0", &now_arg());
    assert!(n > prev, "clean run added no sample ({prev} -> {n})");

    // The store's own view: no damage beyond torn tails (one per kill mid-write at most), every
    // payload decodes, and dump saw exactly what is stored.
    let c = check_store(&store);
    assert_eq!(c.stats.corrupt_records, 0, "seed {seed}: {:?}", c.stats);
    assert_eq!(c.stats.corrupt_frames, 0, "seed {seed}: {:?}", c.stats);
    assert!(
        c.stats.torn_tails <= RUNS as u64,
        "seed {seed}: {:?}",
        c.stats
    );
    assert_eq!(
        c.records as usize, n,
        "seed {seed}: store and dump disagree"
    );
}
