//! A full filesystem makes appends fail with `NoSpace`, never a panic or a corrupt file, and the
//! store recovers by itself once space returns. Needs root to mount a small tmpfs.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use jitterscope_store::{Reader, Record, StoreConfig, Writer};
use jitterscope_testkit as testkit;

mod common;
use common::noise;

const SEC: i64 = 1_000_000_000;

struct Unmount(PathBuf);

/// A tmpfs of `size` on a temporary directory, unmounted when the guard drops; `None` (the test
/// said SKIPPED) where it cannot be mounted.
fn tmpfs(test: &str, size: &str) -> Option<(tempfile::TempDir, Unmount)> {
    if !testkit::is_root() {
        testkit::skip(test, "needs root to mount a tmpfs");
        return None;
    }
    let mnt = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(mnt.path())
        .status()
        .unwrap();
    if !mounted.success() {
        testkit::skip(
            test,
            &format!("could not mount a tmpfs even as root ({mounted})"),
        );
        return None;
    }
    let unmount = Unmount(mnt.path().to_path_buf());
    Some((mnt, unmount))
}

impl Drop for Unmount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Something still holds a file open; detach so the mount does not outlive the test.
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// Grows `path` until the filesystem refuses more.
fn fill(path: &Path) {
    let mut f = File::options()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for chunk in [64 * 1024, 4096, 1] {
        let buf = vec![0xAAu8; chunk];
        while f.write_all(&buf).is_ok() {}
    }
}

fn read_all(dir: &Path) -> Vec<Record> {
    let r = Reader::open(dir).unwrap();
    let mut range = r.range(i64::MIN, i64::MAX).unwrap();
    let got: Vec<Record> = (&mut range).collect::<Result<_, _>>().unwrap();
    let s = range.stats();
    assert_eq!(
        (s.corrupt_records, s.corrupt_frames, s.torn_tails),
        (0, 0, 0)
    );
    got
}

/// Records read back are the newest acknowledged ones: deleting whole oldest segments removes a
/// prefix and nothing else.
fn assert_suffix(got: &[Record], acked: &[Record]) {
    assert!(!got.is_empty(), "everything was deleted");
    assert!(got.len() <= acked.len());
    assert!(
        got == &acked[acked.len() - got.len()..],
        "records read back are not the newest acknowledged ones"
    );
}

#[test]
fn full_disk_gives_no_space_and_recovers() {
    const TEST: &str = "full_disk_gives_no_space_and_recovers";
    let Some((mnt, _unmount)) = tmpfs(TEST, "4m") else {
        return;
    };
    let dir = mnt.path().join("store");
    let ballast = mnt.path().join("ballast");

    let mut config = StoreConfig::new(&dir);
    config.max_bytes = 1 << 30; // far beyond the filesystem
    config.segment_max_bytes = 512 * 1024;
    config.frame_records = 4;
    config.compression_level = 1;
    let mut w = Writer::open(config).unwrap();
    let mut acked = Vec::new();
    // Recent times, so age retention leaves the segments to the size and space logic under test.
    let mut ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let mut append = |w: &mut Writer, acked: &mut Vec<Record>| {
        ts += SEC;
        let p = noise(ts as u64, 16 * 1024);
        let r = w.append(ts, &p);
        if r.is_ok() {
            acked.push(Record {
                ts_ns: ts,
                payload: p,
                detail: None,
            });
        }
        r
    };

    // The store alone fills the filesystem.
    let mut first_failure = None;
    for i in 0..1000 {
        if let Err(e) = append(&mut w, &mut acked) {
            first_failure = Some((i, e));
            break;
        }
    }
    let (at, err) = first_failure.expect("4 MiB filesystem never filled");
    assert!(err.is_no_space(), "{err:?}");
    assert!(at > 100, "failed after only {at} appends");
    assert_suffix(&read_all(&dir), &acked);

    // Old segments were deleted to make room, so writing goes on in a new segment.
    for _ in 0..10 {
        append(&mut w, &mut acked).expect("append after old segments were freed");
    }

    // Someone else takes all the space, and keeps taking what the store frees.
    fill(&ballast);
    for attempt in 0..3 {
        let err = append(&mut w, &mut acked).expect_err("append on a full filesystem");
        assert!(err.is_no_space(), "attempt {attempt}: {err:?}");
        fill(&ballast);
    }
    let before = read_all(&dir);
    assert_suffix(&before, &acked);

    // Space returns: appends succeed again and read back after what was there.
    std::fs::remove_file(&ballast).unwrap();
    for _ in 0..5 {
        append(&mut w, &mut acked).expect("append once space returned");
    }
    drop(w);
    let after = read_all(&dir);
    assert_suffix(&after, &acked);
    assert_eq!(after.len(), before.len() + 5);
}

/// A disk that fills up costs the oldest segments it must, not the history: with 24 segments
/// of about 256 KiB and the rest of the filesystem taken by someone else, the writer frees
/// about a megabyte (its minimum) and keeps the rest. The old rule freed a whole
/// `segment_max_bytes` (64 MiB by default), which was every segment of this store.
#[test]
fn full_disk_deletes_only_the_oldest_segments_it_needs() {
    const TEST: &str = "full_disk_deletes_only_the_oldest_segments_it_needs";
    let Some((mnt, _unmount)) = tmpfs(TEST, "8m") else {
        return;
    };
    let dir = mnt.path().join("store");
    let mut config = StoreConfig::new(&dir);
    config.max_bytes = 1 << 30;
    config.segment_span = std::time::Duration::from_secs(16);
    config.frame_records = 4;
    config.compression_level = 1;
    let mut w = Writer::open(config).unwrap();
    let mut ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let mut acked = Vec::new();
    let mut append = |w: &mut Writer, acked: &mut Vec<Record>| {
        ts += SEC;
        let p = noise(ts as u64, 16 * 1024);
        let r = w.append(ts, &p);
        if r.is_ok() {
            acked.push(Record {
                ts_ns: ts,
                payload: p,
                detail: None,
            });
        }
        r
    };
    for _ in 0..24 * 17 {
        append(&mut w, &mut acked).expect("the store alone fits");
    }
    let before = Reader::open(&dir).unwrap().segments().unwrap().len();
    assert!(before >= 24, "{before} segments");

    fill(&mnt.path().join("ballast"));
    let mut failed = false;
    for _ in 0..64 {
        match append(&mut w, &mut acked) {
            Err(e) => {
                assert!(e.is_no_space(), "{e:?}");
                failed = true;
            }
            Ok(()) if failed => break,
            Ok(()) => {}
        }
    }
    assert!(failed, "the filesystem never filled");
    // Room was made: the next appends succeed without more deletions.
    for _ in 0..4 {
        append(&mut w, &mut acked).expect("append after the eviction");
    }
    let after = Reader::open(&dir).unwrap().segments().unwrap().len();
    let deleted = before + 1 - after.min(before + 1);
    assert!(
        after * 3 >= before * 2,
        "a small overflow deleted {deleted} of {before} segments ({after} left)"
    );
    assert!(deleted >= 1, "nothing was deleted, yet appends went on");
    drop(w);
    assert_suffix(&read_all(&dir), &acked);
}
