//! The damage suite: two lab recordings in one store (segment A of 15 samples, then B of 11,
//! each with its detail and signals lanes), one kind of damage at a time. Every reader exits 0
//! and still returns every sample the damage did not touch, the loss is reported exactly (the
//! note once on stderr, `damaged` in `diagnose --json`), `store check` finds it and
//! `store check --repair` brings back what can be brought back.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::{run, s, text};

const TIMEOUT: Duration = Duration::from_secs(120);
/// The recordings, oldest first: A then B.
const FIXTURES: [&str; 2] = ["oom-leak", "pagecache-thrash"];
const A: &str = "seg-01795478882422802217";
const B: &str = "seg-01795478912339776982";
/// A's samples, from its index entry.
const A_SAMPLES: usize = 15;
const NOTE: &str = "skipped damaged data";

fn store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in FIXTURES {
        let from = common::workspace_root()
            .join("tests/fixtures/diagnose")
            .join(name);
        for e in std::fs::read_dir(from).unwrap().flatten() {
            std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
        }
    }
    dir
}

fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// `dump` of every sample (one series), checked to exit 0: the sample times and stderr.
fn dump(dir: &Path) -> (Vec<i64>, String) {
    let o = run(
        &[
            "dump",
            "--dir",
            s(dir),
            "--from",
            "0",
            "--to",
            "now",
            "--select",
            "cpu.usr_pct",
            "--format",
            "json",
        ],
        TIMEOUT,
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "dump failed: {err}");
    let ts = text(&o.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["ts_ns"].as_i64().unwrap()
        })
        .collect();
    (ts, err)
}

/// `events --json` over the whole store, checked to exit 0: the episode ids and stderr.
fn events(dir: &Path) -> (Vec<String>, String) {
    let o = run(
        &[
            "events",
            "--dir",
            s(dir),
            "--from",
            "0",
            "--to",
            "now",
            "--json",
        ],
        TIMEOUT,
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "events failed: {err}");
    let ids = common::parse_json_lines(&text(&o.stdout))
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    (ids, err)
}

/// `diagnose --json` over both recordings, checked to exit 0: its `damaged`.
fn diagnose_damaged(dir: &Path) -> serde_json::Value {
    let o = run(
        &[
            "diagnose",
            "--dir",
            s(dir),
            "--from",
            "1795478880",
            "--to",
            "1795478925",
            "--json",
        ],
        TIMEOUT,
    );
    assert!(o.status.success(), "diagnose failed: {}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["damaged"].clone()
}

fn check(dir: &Path, repair: bool) -> Output {
    let mut args = vec!["store", "check", "--dir", s(dir)];
    if repair {
        args.push("--repair");
    }
    run(&args, TIMEOUT)
}

/// The reference reads of the intact store: every sample time, split into A's and B's.
struct Intact {
    all: Vec<i64>,
    b: BTreeSet<i64>,
    /// Episodes of the intact store (from its signals lanes).
    events: Vec<String>,
    /// Episodes derived from the samples (no signals lane): what a reader falls back to.
    derived: Vec<String>,
}

fn intact() -> Intact {
    let dir = store();
    let (all, err) = dump(dir.path());
    assert!(err.is_empty(), "{err}");
    let b_from: i64 = B[4..].parse().unwrap();
    let b = all.iter().copied().filter(|t| *t >= b_from).collect();
    assert_eq!(all.len() - A_SAMPLES, 11, "{all:?}");
    let (events, _) = events(dir.path());
    for seg in [A, B] {
        for ext in ["s.jss", "s.idx"] {
            std::fs::remove_file(file(dir.path(), &format!("{seg}.{ext}"))).unwrap();
        }
    }
    let (derived, _) = self::events(dir.path());
    let c = check(store().path(), false);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
    Intact {
        all,
        b,
        events,
        derived,
    }
}

/// Damage to A's main stream that loses samples: B is read whole, what A lost is counted
/// exactly in the note and in `diagnose`'s `damaged`, and `store check` names A.
fn assert_a_loses_samples(dir: &Path, r: &Intact) -> usize {
    let (ts, err) = dump(dir);
    let got: BTreeSet<i64> = ts.iter().copied().collect();
    assert!(r.b.is_subset(&got), "B is read whole");
    assert!(ts.iter().all(|t| r.all.contains(t)), "only real samples");
    let lost = r.all.len() - ts.len();
    assert!(lost > 0, "the damage lost nothing?");
    assert_eq!(err.matches(NOTE).count(), 1, "said once: {err}");
    assert!(err.contains(&format!("lost {lost} samples")), "{err}");
    let d = diagnose_damaged(dir);
    assert_eq!(d["samples_lost"], lost as u64, "{d}");
    let span = &d["lost"][0];
    let a_from: i64 = A[4..].parse().unwrap();
    assert!(span["from_ns"].as_i64().unwrap() >= a_from, "{d}");
    assert!(
        span["to_ns"].as_i64().unwrap() < r.b.first().copied().unwrap(),
        "{d}"
    );
    let (ids, _) = events(dir);
    assert!(!ids.is_empty());
    let c = check(dir, false);
    assert_eq!(c.status.code(), Some(1), "{}", text(&c.stdout));
    let out = text(&c.stdout);
    assert!(out.contains(&format!("{A}.jss")), "{out}");
    assert!(out.contains(&format!("{lost} records known lost")), "{out}");
    lost
}

/// Damage that loses nothing (an index, a lane): every sample is read.
fn assert_nothing_lost(dir: &Path, r: &Intact) -> String {
    let (ts, err) = dump(dir);
    assert_eq!(ts, r.all);
    assert!(!err.contains("lost"), "{err}");
    err
}

fn assert_repaired_to_intact(dir: &Path, r: &Intact) {
    let c = check(dir, true);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
    let c = check(dir, false);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
    let (ts, err) = dump(dir);
    assert_eq!(ts, r.all, "repaired");
    assert!(err.is_empty(), "{err}");
}

/// `--repair` leaves a clean store: it exits 0, so does a second check, every sample the
/// damage left is read with no note, and `damaged/` keeps the originals with a log naming A.
fn assert_repaired_keeping(dir: &Path, r: &Intact, lost: usize) {
    let c = check(dir, true);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
    let c = check(dir, false);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
    let (ts, err) = dump(dir);
    assert_eq!(ts.len(), r.all.len() - lost, "{err}");
    assert!(ts.iter().all(|t| r.all.contains(t)));
    assert!(r.b.iter().all(|t| ts.contains(t)), "B is untouched");
    assert!(err.is_empty(), "{err}");
    let log = std::fs::read_to_string(dir.join("damaged/repairs.log")).unwrap();
    assert!(log.contains(&format!("{A}.jss")), "{log}");
    assert!(dir.join("damaged").join(format!("{A}.jss")).exists());
}

/// Cuts the file at `path` to half its length, inside a frame its index lists.
fn cut_in_half(path: &Path) {
    let len = std::fs::metadata(path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
}

fn write_at(path: &Path, at: usize, bytes: &[u8]) {
    let mut b = std::fs::read(path).unwrap();
    b[at..at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(path, b).unwrap();
}

/// Deterministic garbage.
fn garbage(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn bad_magic_costs_its_segment_and_repair_restores_the_header() {
    let r = intact();
    let dir = store();
    write_at(&file(dir.path(), &format!("{A}.jss")), 0, b"XXXX");
    assert_eq!(assert_a_loses_samples(dir.path(), &r), A_SAMPLES);
    let (_, err) = dump(dir.path());
    assert!(err.contains("bad magic"), "{err}");
    assert_repaired_to_intact(dir.path(), &r);
    assert!(dir.path().join("damaged").join(format!("{A}.jss")).exists());
}

#[test]
fn unknown_version_costs_its_segment_and_repair_restores_the_header() {
    let r = intact();
    let dir = store();
    write_at(&file(dir.path(), &format!("{A}.jss")), 8, &[9]);
    assert_eq!(assert_a_loses_samples(dir.path(), &r), A_SAMPLES);
    assert_repaired_to_intact(dir.path(), &r);
}

#[test]
fn a_torn_frame_costs_the_samples_after_the_cut() {
    let r = intact();
    let dir = store();
    cut_in_half(&file(dir.path(), &format!("{A}.jss")));
    let lost = assert_a_loses_samples(dir.path(), &r);
    assert!(lost < A_SAMPLES, "the records before the cut are read");
    // Nothing can bring the cut records back; the repair makes a clean segment of the rest.
    assert_repaired_keeping(dir.path(), &r, lost);
}

#[test]
fn flipped_bytes_in_a_frame_cost_that_frame_only() {
    let r = intact();
    let dir = store();
    let seg = file(dir.path(), &format!("{A}.jss"));
    let len = std::fs::metadata(&seg).unwrap().len() as usize;
    let mut b = std::fs::read(&seg).unwrap();
    for i in 0..32 {
        b[len / 2 + i * 97] ^= 0xa5;
    }
    std::fs::write(&seg, b).unwrap();
    let lost = assert_a_loses_samples(dir.path(), &r);
    assert_repaired_keeping(dir.path(), &r, lost);
}

#[test]
fn an_empty_index_costs_a_scan_and_is_rebuilt() {
    let r = intact();
    let dir = store();
    std::fs::write(file(dir.path(), &format!("{A}.idx")), b"").unwrap();
    let err = assert_nothing_lost(dir.path(), &r);
    assert!(err.contains("index is empty"), "{err}");
    let c = check(dir.path(), false);
    assert_eq!(c.status.code(), Some(1));
    assert_repaired_to_intact(dir.path(), &r);
}

#[test]
fn a_garbage_index_costs_a_scan_and_is_rebuilt() {
    let r = intact();
    let dir = store();
    let idx = file(dir.path(), &format!("{A}.idx"));
    std::fs::write(&idx, garbage(72, 7)).unwrap();
    let err = assert_nothing_lost(dir.path(), &r);
    assert!(err.contains(&format!("{A}.idx")), "{err}");
    let c = check(dir.path(), false);
    assert_eq!(c.status.code(), Some(1));
    assert_repaired_to_intact(dir.path(), &r);
    let intact_idx = std::fs::read(
        common::workspace_root()
            .join("tests/fixtures/diagnose")
            .join(FIXTURES[0])
            .join(format!("{A}.idx")),
    )
    .unwrap();
    assert_eq!(
        std::fs::read(&idx).unwrap(),
        intact_idx,
        "rebuilt as written"
    );
}

#[test]
fn a_missing_index_costs_a_scan_and_is_rebuilt() {
    let r = intact();
    let dir = store();
    std::fs::remove_file(file(dir.path(), &format!("{A}.idx"))).unwrap();
    assert_nothing_lost(dir.path(), &r);
    let c = check(dir.path(), false);
    assert_eq!(c.status.code(), Some(1));
    assert!(text(&c.stdout).contains("index is missing"));
    assert_repaired_to_intact(dir.path(), &r);
}

/// A signals lane that lost records is not read: the episodes are derived from the samples,
/// as for a store with no lane, and the repair rebuilds the lane.
fn assert_lane_falls_back_and_is_rebuilt(dir: &Path, r: &Intact) {
    let (ids, err) = events(dir);
    assert_eq!(ids, r.derived, "{err}");
    assert_nothing_lost(dir, r);
    let c = check(dir, false);
    assert_eq!(c.status.code(), Some(1), "{}", text(&c.stdout));
    assert!(text(&c.stdout).contains(&format!("{B}.s.jss")));
    let c = check(dir, true);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
    assert!(text(&c.stdout).contains("signals lane rebuilt"));
    // Read from the lanes again: the recorder's marks of A, B's from the rebuilt lane.
    let (ids, _) = events(dir);
    assert!(!ids.is_empty());
    assert_eq!(check(dir, false).status.code(), Some(0));
}

#[test]
fn an_empty_signals_lane_hides_nothing() {
    let r = intact();
    assert_ne!(r.events, Vec::<String>::new());
    let dir = store();
    std::fs::write(file(dir.path(), &format!("{B}.s.jss")), b"").unwrap();
    assert_lane_falls_back_and_is_rebuilt(dir.path(), &r);
}

#[test]
fn a_garbage_signals_lane_hides_nothing() {
    let r = intact();
    let dir = store();
    let lane = file(dir.path(), &format!("{B}.s.jss"));
    let len = std::fs::metadata(&lane).unwrap().len() as usize;
    std::fs::write(&lane, garbage(len, 11)).unwrap();
    assert_lane_falls_back_and_is_rebuilt(dir.path(), &r);
}

#[test]
fn a_damaged_frame_of_the_signals_lane_hides_nothing() {
    let r = intact();
    let dir = store();
    let lane = file(dir.path(), &format!("{B}.s.jss"));
    let mut b = std::fs::read(&lane).unwrap();
    for x in &mut b[100..132] {
        *x ^= 0x55;
    }
    std::fs::write(&lane, b).unwrap();
    assert_lane_falls_back_and_is_rebuilt(dir.path(), &r);
}

#[test]
fn repair_is_refused_while_a_recorder_holds_the_lock() {
    let dir = store();
    std::fs::write(file(dir.path(), &format!("{A}.idx")), b"").unwrap();
    let lock = jitterscope_store::lock_store(dir.path()).unwrap();
    let c = check(dir.path(), true);
    assert_eq!(c.status.code(), Some(2), "{}", text(&c.stdout));
    let err = text(&c.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("LOCK is held"), "{err}");
    assert_eq!(
        std::fs::read(file(dir.path(), &format!("{A}.idx"))).unwrap(),
        b""
    );
    drop(lock);
    assert_eq!(check(dir.path(), true).status.code(), Some(0));
}

/// `record` on a damaged store says so once at start, and writes a segment of its own: the
/// damaged ones are never appended to.
#[test]
fn record_names_the_damage_it_finds_and_writes_a_new_segment() {
    // A bad header, and an empty segment whose index counts records.
    record_names_the_damage(|seg| write_at(seg, 0, b"XXXX"));
    record_names_the_damage(|seg| std::fs::write(seg, b"").unwrap());
}

fn record_names_the_damage(damage: fn(&Path)) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = store();
    let seg_a = file(dir.path(), &format!("{A}.jss"));
    damage(&seg_a);
    let before = std::fs::read(&seg_a).unwrap();
    // A retention long enough to keep the fixtures, recorded weeks ago.
    let mut child = common::recorder_cmd(dir.path())
        .args(["--retain", "3650d"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("record starts");
    let err = child.stderr.take().unwrap();
    let mut guard = common::ChildGuard::new(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut said = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            said.push(l);
        }
        // A segment of its own, after A and B.
        let new_segment = std::fs::read_dir(dir.path()).unwrap().flatten().any(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.starts_with("seg-")
                && n.ends_with(".jss")
                && n.matches('.').count() == 1
                && n.as_str() > B
        });
        if new_segment && said.iter().any(|l| l.contains("damaged files")) {
            // A few samples into it.
            std::thread::sleep(Duration::from_secs(3));
            break;
        }
    }
    guard.signal(libc::SIGTERM);
    guard.wait_timeout(Duration::from_secs(20));
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
        said.push(l);
    }
    let damage: Vec<&String> = said
        .iter()
        .filter(|l| l.contains("damaged files"))
        .collect();
    assert_eq!(damage.len(), 1, "said once: {said:?}");
    assert!(damage[0].contains(&format!("{A}.jss")), "{said:?}");
    assert_eq!(std::fs::read(&seg_a).unwrap(), before, "never written to");
    let (ts, _) = dump(dir.path());
    assert!(
        ts.len() > 11,
        "the new segment is read with B: {}",
        ts.len()
    );
}

#[test]
fn an_empty_segment_loses_what_its_index_counts_and_is_moved_aside() {
    let r = intact();
    let dir = store();
    std::fs::write(file(dir.path(), &format!("{A}.jss")), b"").unwrap();
    assert_eq!(assert_a_loses_samples(dir.path(), &r), A_SAMPLES);
    let (_, err) = dump(dir.path());
    assert!(
        err.contains("empty, but its index counts 15 records"),
        "{err}"
    );
    assert_repaired_keeping(dir.path(), &r, A_SAMPLES);
}

#[test]
fn trailing_garbage_loses_nothing_and_repair_cuts_it() {
    let r = intact();
    let dir = store();
    let seg = file(dir.path(), &format!("{A}.jss"));
    let mut b = std::fs::read(&seg).unwrap();
    let len = b.len();
    b.extend(garbage(4096, 11));
    std::fs::write(&seg, b).unwrap();
    let (ts, err) = dump(dir.path());
    assert_eq!(ts, r.all, "every sample is still there");
    assert!(err.contains("not countable"), "{err}");
    let c = check(dir.path(), false);
    assert_eq!(c.status.code(), Some(1), "{}", text(&c.stdout));
    assert!(text(&c.stdout).contains(&format!("{A}.jss")));
    assert_repaired_keeping(dir.path(), &r, 0);
    // The copy kept aside is the damaged file, garbage and all.
    let aside = std::fs::metadata(dir.path().join("damaged").join(format!("{A}.jss"))).unwrap();
    assert_eq!(aside.len() as usize, len + 4096);
}

#[test]
fn a_zeroed_block_costs_its_frame_and_repair_keeps_the_rest() {
    let r = intact();
    let dir = store();
    write_at(&file(dir.path(), &format!("{A}.jss")), 2000, &[0u8; 4096]);
    let lost = assert_a_loses_samples(dir.path(), &r);
    assert_repaired_keeping(dir.path(), &r, lost);
}

#[test]
fn a_directory_in_place_of_a_segment_is_reported_and_moved_aside() {
    let r = intact();
    let dir = store();
    let seg = file(dir.path(), &format!("{A}.jss"));
    std::fs::remove_file(&seg).unwrap();
    std::fs::create_dir(&seg).unwrap();
    assert_eq!(assert_a_loses_samples(dir.path(), &r), A_SAMPLES);
    let (_, err) = dump(dir.path());
    assert!(err.contains("not a regular file (a directory)"), "{err}");
    assert!(!err.contains("os error 21"), "{err}");
    assert_repaired_keeping(dir.path(), &r, A_SAMPLES);
    assert!(dir.path().join("damaged").join(format!("{A}.jss")).is_dir());
}

#[test]
fn a_cut_segment_without_its_index_is_reported_and_repaired() {
    let r = intact();
    let dir = store();
    cut_in_half(&file(dir.path(), &format!("{A}.jss")));
    std::fs::remove_file(file(dir.path(), &format!("{A}.idx"))).unwrap();
    // Without its index nothing says how many records the cut took: every reader says the
    // index is missing, and the check that the end is torn.
    let (ts, err) = dump(dir.path());
    assert!(err.contains("index is missing"), "{err}");
    let lost = r.all.len() - ts.len();
    assert!(lost > 0 && lost < A_SAMPLES);
    let c = check(dir.path(), false);
    assert_eq!(c.status.code(), Some(1), "{}", text(&c.stdout));
    assert!(
        text(&c.stdout).contains("not countable"),
        "{}",
        text(&c.stdout)
    );
    assert_repaired_keeping(dir.path(), &r, lost);
}
