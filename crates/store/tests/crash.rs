//! kill -9 of a writer at random moments loses nothing it acknowledged, in either lane.
//!
//! The test re-executes its own binary as the writer, so the crash is a real SIGKILL of a process
//! in the middle of whatever it was doing (compressing, writing, syncing, rotating frames).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jitterscope_store::{Lane, Reader, StoreConfig, Writer};

/// The lanes argument for an optional detail.
fn lanes(detail: Option<&[u8]>) -> Vec<(Lane, &[u8])> {
    detail.map(|d| (Lane::Detail, d)).into_iter().collect()
}

const CHILD_ENV: &str = "JITTERSCOPE_STORE_CRASH_CHILD_DIR";
const TEST_NAME: &str = "kill_9_loses_no_acknowledged_record";
const RUNS: usize = 20;

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A ~50 KB payload derived from its timestamp, so the parent can check it knowing only the ts.
fn payload(ts: i64) -> Vec<u8> {
    let mut p: Vec<u8> = (0..50_000u32).map(|k| (k / 7 % 253) as u8).collect();
    for at in (0..p.len() - 8).step_by(4096) {
        p[at..at + 8].copy_from_slice(&ts.to_le_bytes());
    }
    p
}

/// A ~20 KB detail derived from its timestamp.
fn detail(ts: i64) -> Vec<u8> {
    let mut p: Vec<u8> = (0..20_000u32).map(|k| (k / 3 % 241) as u8).collect();
    p[..8].copy_from_slice(&ts.to_le_bytes());
    p
}

fn child(dir: &str) -> ! {
    let mut config = StoreConfig::new(dir);
    // Small frames, so kills also land while frames end and index entries are written.
    config.frame_records = 7;
    let mut w = Writer::open(config).expect("child opens writer");
    let mut out = std::io::stdout().lock();
    let mut last = 0;
    loop {
        // Unique and increasing across runs even if the clock stands still.
        let ts = now_ns().max(last + 1);
        last = ts;
        // Odd timestamps carry a detail lane record, even ones do not.
        let d = (ts % 2 == 1).then(|| detail(ts));
        w.append_lanes(ts, &payload(ts), &lanes(d.as_deref()))
            .expect("append");
        writeln!(out, "ACK {ts}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn kill_9_loses_no_acknowledged_record() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(&dir);
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = (now_ns() as u64) | 1;
    let mut acked: Vec<i64> = Vec::new();
    for run in 0..RUNS {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = Duration::from_millis(20 + rng % 381);
        let mut child = Command::new(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut got = Vec::new();
            let mut line = Vec::new();
            loop {
                line.clear();
                if r.read_until(b'\n', &mut line).unwrap() == 0 {
                    break;
                }
                // A line cut by the kill has no newline and was never a complete acknowledgement.
                if let Some(ts) = line
                    .strip_suffix(b"\n")
                    .and_then(|l| l.strip_prefix(b"ACK "))
                    .and_then(|l| std::str::from_utf8(l).ok())
                    .and_then(|l| l.parse::<i64>().ok())
                {
                    got.push(ts);
                }
            }
            got
        });
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(
            status.code().is_none(),
            "run {run}: child exited by itself: {status}"
        );
        let got = lines.join().unwrap();
        eprintln!(
            "run {run}: killed after {delay:?}, {} acknowledged",
            got.len()
        );
        acked.extend(got);
    }
    assert!(!acked.is_empty(), "children never acknowledged an append");

    let reader = Reader::open(dir.path()).unwrap();
    let mut range = reader.range(i64::MIN, i64::MAX).unwrap();
    let mut stored = BTreeMap::new();
    for r in &mut range {
        let r = r.unwrap();
        // Written before its record was, so a stored record has its detail whole.
        assert_eq!(
            r.detail,
            (r.ts_ns % 2 == 1).then(|| detail(r.ts_ns)),
            "detail of {} differs",
            r.ts_ns
        );
        assert_eq!(
            r.payload,
            payload(r.ts_ns),
            "payload of {} differs",
            r.ts_ns
        );
        assert!(
            stored.insert(r.ts_ns, ()).is_none(),
            "{} stored twice",
            r.ts_ns
        );
    }
    for ts in &acked {
        assert!(stored.contains_key(ts), "acknowledged record {ts} lost");
    }
    let stats = range.stats();
    eprintln!(
        "{} acknowledged, {} stored, {:?}",
        acked.len(),
        stored.len(),
        stats
    );
    assert_eq!(stats.corrupt_records, 0);
    assert_eq!(stats.corrupt_frames, 0);
    assert!(stats.torn_tails <= RUNS as u64, "{stats:?}");
    assert!(reader.segments().unwrap().len() <= RUNS);
}
