//! The recorder keeps its cadence when the host is saturated because it raises its priority and
//! locks its memory: check that a running recorder actually is at nice -20 with locked pages.
//!
//! Needs root (CAP_SYS_NICE, CAP_IPC_LOCK); otherwise it prints `SKIPPED:` and returns (fails
//! under `JITTERSCOPE_REQUIRE_PRIVILEGED=1`, as in CI).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{cmd, ChildGuard};
use jitterscope_testkit::{is_root, skip};

#[test]
fn running_recorder_is_at_nice_minus_20_with_locked_memory() {
    if !is_root() {
        return skip(
            "running_recorder_is_at_nice_minus_20_with_locked_memory",
            "needs root to raise priority and lock memory",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let child = cmd()
        .args(["record", "--dir"])
        .arg(dir.path())
        .args(["--interval", "200ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard = ChildGuard::new(child);
    let pid = guard.pid();
    // Wait until it has started sampling (its lock file and first segment exist).
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline
        && !std::fs::read_dir(dir.path())
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".jss"))
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    // Field 19 of proc(5) is the nice value; after the comm it is the 17th.
    let nice: i64 = after_comm
        .split_whitespace()
        .nth(16)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(nice, -20, "{stat}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let locked_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(locked_kb > 1024, "VmLck {locked_kb} kB:\n{status}");
    drop(guard);
}
