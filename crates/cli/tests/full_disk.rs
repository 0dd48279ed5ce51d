//! The store's filesystem fills up under a running recorder: it must keep running, say so once
//! (not once per sample or retry), resume by itself when space returns, lose no sample to the
//! pause (the write queue bridges it), exit cleanly on SIGTERM, and leave an undamaged store.
//!
//! Needs root to mount a small tmpfs; otherwise it prints `SKIPPED:` and returns (fails under
//! `JITTERSCOPE_REQUIRE_PRIVILEGED=1`, as in CI).

mod common;

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{
    check_store, cmd, count_samples, now_arg, parse_csv, run, s, text, trouble_lines, ChildGuard,
};
use jitterscope_testkit::{is_root, skip};

/// A mounted tmpfs, unmounted on drop (lazily if something still holds it, so a failed test
/// never leaves a mount behind).
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Result<Tmpfs, String> {
        let target = CString::new(path.as_os_str().as_bytes()).unwrap();
        let opts = CString::new(format!("size={size}")).unwrap();
        // SAFETY: NUL-terminated strings that outlive the call.
        let r = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                opts.as_ptr().cast(),
            )
        };
        if r != 0 {
            return Err(format!(
                "cannot mount a tmpfs on {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(Tmpfs {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = CString::new(self.path.as_os_str().as_bytes()).unwrap();
        // SAFETY: NUL-terminated path that outlives the calls.
        unsafe {
            if libc::umount(target.as_ptr()) != 0 {
                libc::umount2(target.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

/// Fills the filesystem holding `path` with one file until the kernel says ENOSPC.
fn fill(path: &Path) -> u64 {
    let mut f = File::create(path).expect("create ballast");
    let chunk = vec![0x5a_u8; 64 << 10];
    let mut total = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => panic!("ballast write returned 0 before ENOSPC"),
            Ok(n) => total += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return total,
            Err(e) => panic!("ballast write failed with {e}, not ENOSPC"),
        }
    }
}

/// Polls `log` until a line satisfies `pred`, up to `timeout`.
fn wait_for_line(log: &Path, timeout: Duration, pred: impl Fn(&str) -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let t = std::fs::read_to_string(log).unwrap_or_default();
        if t.lines().any(&pred) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn is_pause_line(l: &str) -> bool {
    let l = l.to_ascii_lowercase();
    l.contains("no space") || l.contains("pausing")
}

fn is_resume_line(l: &str) -> bool {
    l.contains("writing resumed")
}

fn count_lines(log: &Path, pred: fn(&str) -> bool) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| pred(l))
        .count()
}

#[test]
fn recorder_pauses_on_full_disk_and_resumes() {
    const TEST: &str = "recorder_pauses_on_full_disk_and_resumes";
    if !is_root() {
        return skip(TEST, "needs root to mount a tmpfs");
    }
    let mnt_dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap(); // off the tmpfs, which will be full
    let fs = match Tmpfs::mount(mnt_dir.path(), "3m") {
        Ok(fs) => fs,
        Err(reason) => return skip(TEST, &reason),
    };
    let store = fs.path.join("store");
    let ballast = fs.path.join("ballast");
    let log = logs.path().join("record.stderr");

    let child = cmd()
        .args([
            "record",
            "--dir",
            s(&store),
            "--interval",
            "200ms",
            "--max-size",
            "100MiB",
        ])
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap())
        .spawn()
        .expect("spawn recorder");
    let mut rec = ChildGuard::new(child);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // Some samples on disk before the filesystem fills, so there is data to protect.
    let deadline = Instant::now() + Duration::from_secs(15);
    while count_samples(&store, "0", &now_arg()) < 3 {
        assert!(rec.try_wait().is_none(), "recorder exited: {}", log_text());
        assert!(Instant::now() < deadline, "no samples: {}", log_text());
        std::thread::sleep(Duration::from_millis(200));
    }

    let ballast_bytes = fill(&ballast);
    assert!(ballast_bytes > 0);
    assert!(
        wait_for_line(&log, Duration::from_secs(10), is_pause_line),
        "recorder never reported the full disk: {}",
        log_text()
    );
    // Long enough for several samples and retries (1 s apart) to fail against the full disk:
    // each would add a line if the message were per sample or per retry.
    std::thread::sleep(Duration::from_secs(3));
    assert!(rec.try_wait().is_none(), "recorder died: {}", log_text());
    assert_eq!(
        count_lines(&log, is_pause_line),
        1,
        "want exactly one no-space line: {}",
        log_text()
    );
    assert_eq!(count_lines(&log, is_resume_line), 0, "{}", log_text());

    // Room for a moment only (another process fills the disk again as soon as a sample got
    // through): the same pause goes on, not "resumed" then "pausing" again.
    let before = count_samples(&store, "0", &now_arg());
    std::fs::remove_file(&ballast).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while count_samples(&store, "0", &now_arg()) <= before {
        assert!(
            Instant::now() < deadline,
            "no sample got through: {}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    fill(&ballast);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(count_lines(&log, is_pause_line), 1, "{}", log_text());
    assert_eq!(count_lines(&log, is_resume_line), 0, "{}", log_text());

    std::fs::remove_file(&ballast).unwrap();
    let freed = now_arg();
    assert!(
        wait_for_line(&log, Duration::from_secs(10), is_resume_line),
        "recorder never resumed: {}",
        log_text()
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(rec.try_wait().is_none(), "recorder died: {}", log_text());

    rec.signal(libc::SIGTERM);
    let st = rec
        .wait_timeout(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("recorder ignored SIGTERM: {}", log_text()));
    let final_log = log_text();
    assert_eq!(st.code(), Some(0), "exit {st:?}: {final_log}");
    assert!(!final_log.contains("jitterscope: error"), "{final_log}");
    assert_eq!(count_lines(&log, is_pause_line), 1, "{final_log}");
    assert_eq!(count_lines(&log, is_resume_line), 1, "{final_log}");

    // Samples taken after the space returned were written (3 s at 200 ms is ~15).
    let after = count_samples(&store, &freed, &now_arg());
    assert!(after >= 5, "only {after} samples after space returned");

    // The queue bridged the pause: the recorder never had to drop a sample.
    let o = run(
        &[
            "dump",
            "--dir",
            s(&store),
            "--from",
            "0",
            "--to",
            "now",
            "--select",
            "self.samples_dropped",
        ],
        Duration::from_secs(30),
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(trouble_lines(&err).is_empty(), "{err}");
    let dropped: Vec<f64> = parse_csv(&text(&o.stdout))
        .into_iter()
        .filter_map(|r| r.value)
        .collect();
    assert!(!dropped.is_empty());
    assert!(dropped.iter().all(|&d| d == 0.0), "dropped: {dropped:?}");

    let c = check_store(&store);
    assert_eq!(c.stats.corrupt_records, 0, "{:?}", c.stats);
    assert_eq!(c.stats.corrupt_frames, 0, "{:?}", c.stats);
    // Locals drop in reverse: the recorder guard before the mount, the mount before its
    // directory, also when an assertion above unwinds.
}
