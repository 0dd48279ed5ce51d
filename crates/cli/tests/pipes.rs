//! Every command's output modes into a reader that goes away: `jitterscope … | head -c 1`, and
//! a reader gone before the first byte (so outputs smaller than a pipe's buffer meet it too).
//! Nothing may panic; each command ends as a Unix tool does, by SIGPIPE or with its status
//! (141), or having written everything before the reader went, with success.
//!
//! Not here yet: `fleet` (it needs a ClickHouse; its output goes through the same writer as
//! `lab`'s and `store`'s, which are here).

mod common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use common::{cmd, text, ChildGuard};

/// How the reader goes away.
#[derive(Clone, Copy, Debug)]
enum Reader {
    /// `head -c 1`: reads one byte, then closes.
    OneByte,
    /// Closed before the command starts.
    Gone,
}

/// Runs `args` with stdout into a pipe whose reader goes away as `reader` says; returns the
/// exit status and stderr.
fn closed(args: &[String], reader: Reader) -> (ExitStatus, String) {
    // Close-on-exec: the command gets only the write end, so ours is its only reader.
    let (rx, tx) = std::io::pipe().expect("pipe");
    let mut rx = Some(rx);
    if let Reader::Gone = reader {
        // Closed here, before the command starts.
        rx = None;
    }
    let mut c = cmd();
    c.args(args).stdout(tx).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn jitterscope");
    // Our copy of the write end goes with the command, so the read below sees the end of a
    // command that prints nothing.
    drop(c);
    let mut err = child.stderr.take().expect("stderr piped");
    let mut guard = ChildGuard::new(child);
    let t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    if let Some(mut r) = rx.take() {
        let _ = r.read(&mut [0u8; 1]);
    }
    let status = guard
        .wait_timeout(Duration::from_secs(120))
        .unwrap_or_else(|| panic!("jitterscope {args:?} ({reader:?}) did not end"));
    (status, text(&t.join().unwrap()))
}

/// Asserts how a command whose reader went away ended.
fn ended_as_a_tool_does(args: &[String], reader: Reader) {
    let (status, err) = closed(args, reader);
    assert!(
        !err.contains("panicked"),
        "jitterscope {args:?} ({reader:?}) panicked: {err}"
    );
    let sigpipe = status.signal() == Some(libc::SIGPIPE) || status.code() == Some(141);
    assert!(
        sigpipe || status.success(),
        "jitterscope {args:?} ({reader:?}) ended with {status}: {err}"
    );
    // Whatever it said went to stderr in one line at most, never a backtrace.
    assert!(err.lines().count() <= 1, "{args:?} ({reader:?}): {err}");
}

/// A copy of a recorded store (the native-leak lab check: samples, episodes, stacks) and its
/// window as epoch seconds.
fn store() -> (tempfile::TempDir, String, String) {
    let (dir, from, to) = common::lab_recording("native-leak");
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(Path::new(&dir), tmp.path());
    (tmp, from.to_string(), to.to_string())
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

#[test]
fn every_reader_of_the_store_ends_quietly_on_a_closed_pipe() {
    let (tmp, from, to) = store();
    let dir = tmp.path().to_str().unwrap().to_string();
    let window = ["--dir", &dir, "--from", &from, "--to", &to];
    let cases: Vec<Vec<&str>> = vec![
        vec!["dump"],
        vec!["dump", "--format", "json"],
        vec!["dump", "--format", "openmetrics"],
        vec!["events"],
        vec!["events", "--json"],
        vec!["diagnose"],
        vec!["diagnose", "--json"],
        vec!["flame"],
        vec!["flame", "--folded"],
        vec!["top-functions"],
        vec!["top-functions", "--json"],
    ];
    for reader in [Reader::OneByte, Reader::Gone] {
        for c in &cases {
            let args: Vec<String> = c
                .iter()
                .chain(window.iter())
                .map(|s| s.to_string())
                .collect();
            ended_as_a_tool_does(&args, reader);
        }
        for c in [
            vec!["dump", "--list"],
            vec!["dump", "--list", "--format", "json"],
            vec!["replay", "--json-once", "--dir", &dir, "--at", &from],
            vec!["store", "check", "--dir", &dir],
        ] {
            let args: Vec<String> = c.iter().map(|s| s.to_string()).collect();
            ended_as_a_tool_does(&args, reader);
        }
    }
}

#[test]
fn commands_that_print_without_a_store_end_quietly_on_a_closed_pipe() {
    let cases: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["diagnose", "--help"],
        vec!["--version"],
        vec!["tracers"],
        vec!["tracers", "--json"],
        vec!["completions", "bash"],
        vec!["completions", "zsh"],
        vec!["completions", "fish"],
        vec!["config", "example"],
        vec!["config", "check"],
        vec!["lab", "list"],
        vec!["lab", "list", "--json"],
        vec!["lab", "list", "--markdown"],
        vec!["top", "--json-once", "--direct", "--no-tracers"],
    ];
    for reader in [Reader::OneByte, Reader::Gone] {
        for c in &cases {
            let args: Vec<String> = c.iter().map(|s| s.to_string()).collect();
            ended_as_a_tool_does(&args, reader);
        }
    }
}

/// `record --status | head`: the recorder stops as on SIGTERM, its store whole, and exits as
/// SIGPIPE would have.
#[test]
fn record_status_stops_when_its_reader_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let args: Vec<String> = [
        "record",
        "--interval",
        "1s",
        "--duration",
        "60s",
        "--status",
        "--dir",
        dir.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let t0 = std::time::Instant::now();
    let (status, err) = closed(&args, Reader::OneByte);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(status.code(), Some(141), "{status}: {err}");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "it went on recording: {:?}",
        t0.elapsed()
    );
    // Every record it wrote reads back and decodes.
    assert!(common::check_store(&dir).records >= 1);
}
