//! Bad arguments end in a short error and a non-zero exit, never a panic or a backtrace: the
//! recorder runs unattended and its errors end up in journald, one line each.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{run, s, text};

const TIMEOUT: Duration = Duration::from_secs(20);

fn fixture_store() -> std::path::PathBuf {
    common::workspace_root().join("tests/fixtures/store-v1")
}

/// Asserts a failed run with a usable message; `needle` must appear in it (the message names
/// what was wrong). Returns stderr.
fn assert_clean_failure(args: &[&str], needle: &str) -> String {
    let o: Output = run(args, TIMEOUT);
    let err = text(&o.stderr);
    assert!(
        !o.status.success(),
        "{args:?} succeeded; stderr: {err}; stdout: {}",
        text(&o.stdout)
    );
    // RUST_BACKTRACE=1 is set by `run`, so a panic anywhere would print these.
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(!err.contains("stack backtrace"), "{args:?}: {err}");
    assert!(
        o.status.code().is_some(),
        "{args:?} died of a signal: {:?}",
        o.status
    );
    let first = err.lines().next().unwrap_or_default();
    if first.starts_with("error:") {
        // clap's own argument errors: first line names the problem; the usage hint that
        // follows is clap's format, and the exit code is its usage-error code.
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            first.contains(needle),
            "{args:?}: {needle:?} not in {first:?}"
        );
    } else {
        // Our errors: notes may precede it, but the error itself is exactly one line, the last.
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert!(
            lines.iter().all(|l| l.starts_with("jitterscope: ")),
            "{args:?}: stray stderr lines: {err}"
        );
        let errors: Vec<&&str> = lines
            .iter()
            .filter(|l| l.starts_with("jitterscope: error:"))
            .collect();
        assert_eq!(errors.len(), 1, "{args:?}: want one error line: {err}");
        assert_eq!(
            Some(errors[0]),
            lines.last(),
            "{args:?}: error not last: {err}"
        );
        assert!(
            errors[0].contains(needle),
            "{args:?}: {needle:?} not in {err}"
        );
    }
    err
}

#[test]
fn dump_bad_time() {
    let d = fixture_store();
    assert_clean_failure(
        &["dump", "--dir", s(&d), "--from", "yesterday"],
        "yesterday",
    );
}

#[test]
fn dump_from_after_to() {
    let d = fixture_store();
    assert_clean_failure(
        &["dump", "--dir", s(&d), "--from", "now", "--to", "1h ago"],
        "is after --to",
    );
}

#[test]
fn dump_missing_store() {
    assert_clean_failure(&["dump", "--dir", "/nonexistent"], "/nonexistent");
}

#[test]
fn dump_select_matching_nothing() {
    // A valid store, so the only thing wrong is the selection.
    let d = fixture_store();
    assert_clean_failure(
        &["dump", "--dir", s(&d), "--select", "nosuch.*"],
        "nosuch.*",
    );
}

#[test]
fn dump_unknown_format() {
    let d = fixture_store();
    assert_clean_failure(&["dump", "--dir", s(&d), "--format", "xml"], "xml");
}

// The record cases pass --duration 1s so that, should validation ever let them through, the
// test fails on "succeeded" instead of recording forever.

#[test]
fn record_interval_too_short() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("store");
    assert_clean_failure(
        &[
            "record",
            "--dir",
            s(&d),
            "--duration",
            "1s",
            "--interval",
            "1ms",
        ],
        "--interval",
    );
}

#[test]
fn record_bad_size() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("store");
    assert_clean_failure(
        &[
            "record",
            "--dir",
            s(&d),
            "--duration",
            "1s",
            "--max-size",
            "2parsecs",
        ],
        "2parsecs",
    );
}

#[test]
fn record_store_dir_cannot_be_created() {
    // Nothing can be created in /proc, even by root.
    assert_clean_failure(
        &["record", "--dir", "/proc/forbidden", "--duration", "1s"],
        "/proc/forbidden",
    );
}

#[test]
fn record_root_without_proc() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("empty-dir");
    std::fs::create_dir(&root).unwrap();
    let d = t.path().join("store");
    assert_clean_failure(
        &[
            "record",
            "--dir",
            s(&d),
            "--root",
            s(&root),
            "--duration",
            "1s",
        ],
        "proc/stat",
    );
}

#[test]
fn dump_list_names_units() {
    let o = run(&["dump", "--list"], TIMEOUT);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut lines = out.lines();
    let header: Vec<_> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "KIND", "UNIT", "HELP"]);
    let row = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&"cgroup.<cgroup>.cpu.throttled_pct"))
        .unwrap_or_else(|| panic!("throttled_pct not listed:\n{out}"));
    assert_eq!(row[1], "rate");
    assert_eq!(row[2], "percent");
    assert!(row.len() > 3, "no help text: {row:?}");
}

#[test]
fn dump_list_json() {
    let o = run(&["dump", "--list", "--format", "json"], TIMEOUT);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // JSON Lines: one metric per line.
    let list = common::parse_json_lines(&text(&o.stdout));
    assert!(list.len() > 10, "suspiciously few metrics: {}", list.len());
    for m in &list {
        for k in ["name", "kind", "unit", "help"] {
            assert!(m[k].is_string(), "{k} missing in {m}");
        }
    }
    let t = list
        .iter()
        .find(|m| m["name"] == "cgroup.<cgroup>.cpu.throttled_pct")
        .expect("throttled_pct listed");
    assert_eq!(t["unit"], "percent");
    assert_eq!(t["kind"], "rate");
}

/// [`assert_clean_failure`] for an error of ours, not clap's: stderr is that one line and
/// nothing else.
fn assert_one_line_failure(args: &[&str], needle: &str) -> String {
    let err = assert_clean_failure(args, needle);
    assert_eq!(err.lines().count(), 1, "{args:?}: want one line: {err}");
    assert!(err.starts_with("jitterscope: error: "), "{args:?}: {err}");
    err
}

// A duration of centuries parses; its window's start must not wrap around into the future.

#[test]
fn diagnose_since_beyond_the_supported_range() {
    let d = fixture_store();
    assert_one_line_failure(
        &["diagnose", "--dir", s(&d), "--since", "18446744733s"],
        "supported range",
    );
}

#[test]
fn diagnose_baseline_beyond_the_supported_range() {
    let d = fixture_store();
    let err = assert_one_line_failure(
        &["diagnose", "--dir", s(&d), "--baseline", "18446744733s"],
        "--baseline",
    );
    assert!(err.contains("supported range"), "{err}");
}

#[test]
fn events_since_beyond_the_supported_range() {
    let d = fixture_store();
    assert_one_line_failure(
        &["events", "--dir", s(&d), "--since", "18446744733s"],
        "supported range",
    );
}

#[test]
fn a_valid_time_beyond_the_range_is_not_called_malformed() {
    let d = fixture_store();
    for cmd in ["dump", "flame", "diagnose"] {
        let err = assert_one_line_failure(
            &[
                cmd,
                "--dir",
                s(&d),
                "--from",
                "3000-01-01T00:00:00Z",
                "--to",
                "now",
            ],
            "outside the supported range, 1677-09-21T00:12:44Z to 2262-04-11T23:47:16Z",
        );
        assert!(!err.contains("use RFC 3339"), "{cmd}: {err}");
    }
}

#[test]
fn serve_token_file_without_end_is_refused() {
    // /dev/zero was read whole: gigabytes of memory and a server that never started; a FIFO
    // hung the start until something wrote to it.
    let d = fixture_store();
    let t = tempfile::tempdir().unwrap();
    let fifo = t.path().join("token");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path we own; the CString outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for special in ["/dev/zero", s(&fifo)] {
        assert_one_line_failure(
            &["serve", "--dir", s(&d), "--auth-token-file", special],
            "not a regular file",
        );
    }
    let big = t.path().join("big");
    std::fs::write(&big, vec![b'a'; 5000]).unwrap();
    assert_one_line_failure(
        &["serve", "--dir", s(&d), "--auth-token-file", s(&big)],
        "longer than 4096 bytes",
    );
}

#[test]
fn record_nice_out_of_range() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("store");
    for n in ["100", "-21", "20"] {
        assert_clean_failure(
            &["record", "--dir", s(&d), "--duration", "1s", "--nice", n],
            "--nice",
        );
    }
}

/// A store with data recorded earlier: the fixture's segments, copied.
fn store_with_data() -> (tempfile::TempDir, std::path::PathBuf, Vec<String>) {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("store");
    std::fs::create_dir(&d).unwrap();
    let mut names = Vec::new();
    for e in std::fs::read_dir(fixture_store()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
        names.push(e.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    assert!(!names.is_empty());
    (t, d, names)
}

#[test]
fn record_retain_and_max_size_zero_are_refused_and_keep_the_previous_data() {
    let (_t, d, before) = store_with_data();
    for (flag, value, floor) in [
        ("--retain", "0s", "at least 1m"),
        ("--retain", "30s", "at least 1m"),
        ("--max-size", "0", "at least 1MiB"),
        ("--max-size", "2", "at least 1MiB"),
    ] {
        let err = assert_one_line_failure(
            &["record", "--dir", s(&d), "--duration", "1s", flag, value],
            flag,
        );
        assert!(err.contains(floor), "{flag} {value}: {err}");
        assert_eq!(common::names_in(&d), before, "{flag} {value} deleted data");
    }
}

#[test]
fn record_duration_zero() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("store");
    assert_one_line_failure(
        &["record", "--dir", s(&d), "--duration", "0s"],
        "--duration 0",
    );
}

#[test]
fn memleak_interval_zero() {
    // Our own pid: the check must come first, whatever the process.
    let pid = std::process::id().to_string();
    for i in ["0s", "10ms"] {
        assert_one_line_failure(
            &["memleak", "--pid", &pid, "--interval", i, "--samples", "2"],
            "--interval",
        );
    }
}

#[test]
fn serve_refuses_a_store_it_cannot_list() {
    const TEST: &str = "serve_refuses_a_store_it_cannot_list";
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    assert_one_line_failure(&["serve", "--dir", s(&file)], "not a directory");

    // Root lists any directory: the unreadable store needs another user.
    if !jitterscope_testkit::is_root() {
        return jitterscope_testkit::skip(TEST, "needs root to run serve as nobody");
    }
    use std::os::unix::fs::PermissionsExt;
    let (holder, d, _) = store_with_data();
    // Only the store itself is closed: its parent must not already stop `nobody`.
    std::fs::set_permissions(holder.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o000)).unwrap();
    let nobody = common::NobodyBin::new();
    let o = nobody.run_for(
        &["serve", "--dir", s(&d), "--listen", "127.0.0.1:0"],
        TIMEOUT,
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot read the store") && err.contains(s(&d)),
        "{err}"
    );
    assert!(err.contains("ermission denied"), "{err}");
}

#[test]
fn version_names_the_source_revision() {
    let o = run(&["--version"], TIMEOUT);
    assert!(o.status.success());
    let v = text(&o.stdout);
    let want = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .current_dir(common::workspace_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_string());
    match want {
        // The binary may predate the latest edit of the tree, so compare the commit only.
        Some(w) => {
            let commit = w.trim_end_matches("-dirty");
            assert!(
                v.starts_with(&format!(
                    "jitterscope {} ({commit}",
                    env!("CARGO_PKG_VERSION")
                )),
                "{v:?} does not name {commit}"
            );
        }
        None => assert!(v.contains(" (") && v.trim_end().ends_with(')'), "{v:?}"),
    }
}

#[test]
fn record_logs_one_json_object_per_line_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let o = run(
        &[
            "record",
            "--dir",
            d,
            "--duration",
            "2s",
            "--no-tracers",
            "--profile-hz",
            "0",
            "--log-format",
            "json",
        ],
        TIMEOUT,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let lines: Vec<serde_json::Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    for v in &lines {
        assert!(
            ["info", "warn", "error"].contains(&v["level"].as_str().unwrap()),
            "{v}"
        );
        assert!(v["ts"].as_str().unwrap().ends_with('Z'), "{v}");
    }
    assert!(
        lines
            .iter()
            .any(|v| v["msg"].as_str().unwrap().starts_with("recording every")),
        "{err}"
    );
    // The fatal error that ends a run is a JSON line too.
    let o = run(
        &[
            "record",
            "--dir",
            d,
            "--interval",
            "5ms",
            "--log-format",
            "json",
        ],
        TIMEOUT,
    );
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(text(&o.stderr).trim()).unwrap();
    assert_eq!(v["level"], "error");
    assert!(v["msg"].as_str().unwrap().contains("--interval"), "{v}");
}

/// A window without samples is its own exit status, 3, for every reader: a script tells
/// "nothing recorded then" from a failure (1) and from bad usage (2). The one line says where
/// the store's samples are; a report asked for as JSON is still printed.
#[test]
fn an_empty_window_exits_3_and_says_what_the_store_holds() {
    let d = fixture_store();
    let window = [
        "--from",
        "2020-01-01T00:00:00Z",
        "--to",
        "2020-01-01T00:10:00Z",
    ];
    for cmd in [
        vec!["dump"],
        vec!["diagnose", "--json"],
        vec!["events", "--json"],
        vec!["events"],
        vec!["flame", "--folded"],
        vec!["top-functions"],
    ] {
        let mut args = cmd.clone();
        args.extend(["--dir", s(&d)]);
        args.extend(window);
        let o = run(&args, TIMEOUT);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        let errors: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("jitterscope: error: "))
            .collect();
        assert_eq!(errors.len(), 1, "{args:?}: {err}");
        assert!(
            errors[0].contains("no samples between 2020-01-01T00:00:00.000Z")
                && errors[0].contains("holds 20"),
            "{args:?}: {err}"
        );
        // A report is still printed; a list (JSON Lines) is empty.
        if cmd == ["diagnose", "--json"] {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&o.stdout)));
            common::check_schema("diagnose", &v);
            assert_eq!(v["samples"], 0, "{args:?}: {v}");
        } else if cmd == ["events", "--json"] {
            assert!(o.stdout.is_empty(), "{args:?}: {}", text(&o.stdout));
        }
    }
}

/// Arguments are OS strings: a store at a path that is not UTF-8 is read like any other, and a
/// non-UTF-8 value where text is wanted is refused in one line, by every command, never with a
/// panic.
#[test]
fn arguments_that_are_not_utf8_work_or_are_refused_in_one_line() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().unwrap();
    let odd = t.path().join(OsStr::from_bytes(b"store-\xff"));
    std::fs::create_dir(&odd).unwrap();
    for e in std::fs::read_dir(fixture_store()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), odd.join(e.file_name())).unwrap();
    }
    let run_os = |args: &[&OsStr]| {
        let mut c = common::cmd();
        c.args(args);
        common::run_command(c, TIMEOUT)
    };
    let o = run_os(&[
        OsStr::new("dump"),
        OsStr::new("--dir"),
        odd.as_os_str(),
        OsStr::new("--from"),
        OsStr::new("0"),
        OsStr::new("--select"),
        OsStr::new("load.avg1"),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).lines().count() > 1, "{}", text(&o.stdout));
    let o = run_os(&[
        OsStr::new("store"),
        OsStr::new("check"),
        OsStr::new("--dir"),
        odd.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let missing = t.path().join(OsStr::from_bytes(b"x\xff"));
    for argv in [
        vec![OsStr::new("dump"), OsStr::new("--dir"), missing.as_os_str()],
        vec![
            OsStr::new("events"),
            OsStr::new("--dir"),
            missing.as_os_str(),
        ],
        vec![
            OsStr::new("diagnose"),
            OsStr::new("--dir"),
            missing.as_os_str(),
        ],
        vec![
            OsStr::new("dump"),
            OsStr::new("--select"),
            OsStr::from_bytes(b"a\xff"),
        ],
        vec![
            OsStr::new("events"),
            OsStr::new("--since"),
            OsStr::from_bytes(b"1\xffm"),
        ],
        vec![OsStr::from_bytes(b"\xff")],
    ] {
        let o = run_os(&argv);
        let err = text(&o.stderr);
        assert!(
            matches!(o.status.code(), Some(1 | 2)),
            "{argv:?}: {:?} {err}",
            o.status
        );
        assert!(!err.contains("panicked"), "{argv:?}: {err}");
        assert!(!err.trim().is_empty(), "{argv:?}");
        let first = err.lines().next().unwrap();
        assert!(
            first.contains("no store at")
                || first.contains("invalid UTF-8")
                || first.contains("unrecognized"),
            "{argv:?}: {err}"
        );
    }
}

#[test]
fn record_profile_stack_not_a_multiple_of_8_is_refused_not_rounded_to_0() {
    for v in ["7", "12", "65536"] {
        assert_clean_failure(
            &["record", "--duration", "1s", "--profile-stack", v],
            "multiple of 8",
        );
    }
}
