//! `jitterscope memleak` on real processes (root): a Python process leaking natively (ctypes
//! mallocs carrying a marker string) is reported as native with the marker among the strings
//! that pile up; one leaking dicts is reported as Python-heap growth; a steady one as no
//! growth; snapshots compare; and bad input gets one-line errors.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{run, text, ChildGuard};
use jitterscope_testkit::{is_root, skip};
use serde_json::Value;

/// Starts `python3 -c script` and waits for its "ready" line; `None` after skipping `test`
/// when there is no python3.
fn python(test: &str, script: &str) -> Option<ChildGuard> {
    let Some(python3) = jitterscope_testkit::which("python3", &[]) else {
        skip(test, "python3 is not installed");
        return None;
    };
    let mut child = Command::new(python3)
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 starts");
    let out = child.stdout.take().unwrap();
    let g = ChildGuard::new(child);
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the python target did not start");
    Some(g)
}

/// ~4 MiB/s of malloc'd records `jitterscope.memleak.context_info{req=N}`, no Python object
/// kept: what Python accounts for stays flat.
const NATIVE: &str = r#"
import ctypes, time, sys
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
print("ready", flush=True)
i = 0
while True:
    for _ in range(400):
        rec = b"jitterscope.memleak.context_info{req=%d}" % i
        p = libc.malloc(96)
        ctypes.memmove(p, rec, len(rec) + 1)
        i += 1
    time.sleep(0.01)
"#;

/// ~4 MiB/s of small dicts kept in a list: Python's own heap grows.
const PYTHON: &str = r#"
import time
keep = []
print("ready", flush=True)
i = 0
while True:
    for _ in range(200):
        keep.append({"req": i, "peer": i * 2})
        i += 1
    time.sleep(0.01)
"#;

/// 64 MiB once, then nothing.
const STEADY: &str = r#"
import time
blob = [bytearray(1 << 20) for _ in range(64)]
print("ready", flush=True)
time.sleep(3600)
"#;

fn memleak(pid: u32, extra: &[&str]) -> (Option<i32>, String, String) {
    let p = pid.to_string();
    let mut args = vec!["memleak", "--pid", &p];
    args.extend_from_slice(extra);
    let o = run(&args, Duration::from_secs(120));
    (o.status.code(), text(&o.stdout), text(&o.stderr))
}

fn report(pid: u32, extra: &[&str]) -> Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = memleak(pid, &args);
    assert_eq!(code, Some(0), "{err}");
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("no JSON ({e}): {out}\n{err}"));
    common::check_schema("memleak", &v);
    v
}

/// Whether the tests run as root; if not, `test` is skipped.
fn root(test: &str) -> bool {
    if !is_root() {
        skip(test, "needs root to read other processes' memory");
        return false;
    }
    true
}

#[test]
fn a_native_leak_is_native_and_its_marker_piles_up() {
    const TEST: &str = "a_native_leak_is_native_and_its_marker_piles_up";
    if !root(TEST) {
        return;
    }
    let Some(t) = python(TEST, NATIVE) else {
        return;
    };
    let v = report(t.pid(), &["--interval", "2s", "--samples", "3"]);
    eprintln!("{}", serde_json::to_string_pretty(&v["verdict"]).unwrap());
    assert_eq!(v["growing"], true, "{v}");
    let verdict = v["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("grows outside the Python heap"),
        "{verdict}"
    );
    let strings: Vec<&str> = v["strings"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
        .map(|s| s["string"].as_str().unwrap())
        .collect();
    assert!(
        strings.contains(&"jitterscope.memleak.context_info{req=#}"),
        "top strings: {strings:?}"
    );
    assert!(v["python"]["version"].as_str().unwrap().starts_with("3."));
    assert_eq!(v["allocator"]["name"], "glibc malloc");
    // The records are malloc'd by the main thread: the main arena ([heap]) holds them.
    assert!(
        v["glibc_arenas"]["main_resident"].as_u64().unwrap() > 16 << 20,
        "{v}"
    );
    eprintln!("census: {} MiB/s", v["census_mib_per_s"]);
}

#[test]
fn a_python_leak_is_python_objects_with_their_type() {
    const TEST: &str = "a_python_leak_is_python_objects_with_their_type";
    if !root(TEST) {
        return;
    }
    let Some(t) = python(TEST, PYTHON) else {
        return;
    };
    let v = report(t.pid(), &["--interval", "2s", "--samples", "3"]);
    let verdict = v["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("Python objects grow"), "{verdict}");
    let types: Vec<&str> = v["python"]["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"dict"), "{types:?}");
}

#[test]
fn a_steady_process_does_not_grow() {
    const TEST: &str = "a_steady_process_does_not_grow";
    if !root(TEST) {
        return;
    }
    let Some(t) = python(TEST, STEADY) else {
        return;
    };
    let v = report(t.pid(), &["--interval", "1s", "--samples", "3"]);
    assert_eq!(v["growing"], false, "{v}");
    assert!(v["verdict"].as_str().unwrap().starts_with("no growth"));
}

#[test]
fn a_snapshot_compares_later() {
    const TEST: &str = "a_snapshot_compares_later";
    if !root(TEST) {
        return;
    }
    let Some(t) = python(TEST, NATIVE) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("before.json");
    let s = snap.to_str().unwrap();
    let (code, out, err) = memleak(t.pid(), &["--snapshot", s]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("snapshot written"), "{out}");
    // The same with --json: one line that says where the snapshot went.
    let again = dir.path().join("again.json");
    let (code, out, err) = memleak(t.pid(), &["--snapshot", again.to_str().unwrap(), "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let line = common::check_schema_lines("memleak-snapshot", &out);
    assert_eq!(line.len(), 1, "{out}");
    assert_eq!(line[0]["pid"], t.pid(), "{out}");
    std::thread::sleep(Duration::from_secs(4));
    let v = report(t.pid(), &["--compare", s]);
    assert_eq!(v["growing"], true, "{v}");
    assert_eq!(v["readings"].as_array().unwrap().len(), 2);
    // Another process's snapshot is refused.
    let Some(other) = python(TEST, STEADY) else {
        return;
    };
    let (code, _, err) = memleak(other.pid(), &["--compare", s]);
    assert_eq!(code, Some(1));
    assert!(err.contains("the snapshot is of pid"), "{err}");
}

#[test]
fn errors_are_one_line() {
    const TEST: &str = "errors_are_one_line";
    // No such process (pid_max is at most 2^22).
    let (code, _, err) = memleak(4_194_305, &[]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("no process with pid 4194305") && err.lines().count() == 1,
        "{err}"
    );
    let (code, _, err) = memleak(1, &["--samples", "1"]);
    assert_eq!(code, Some(2), "{err}");
    if !root(TEST) {
        return;
    }
    // Exits during the run.
    let Some(mut t) = python(
        TEST,
        "import time\nprint('ready', flush=True)\ntime.sleep(1.5)\n",
    ) else {
        return;
    };
    let (code, _, err) = memleak(t.pid(), &["--interval", "1s", "--samples", "4"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("exited during the run"), "{err}");
    t.wait_timeout(Duration::from_secs(5));
    // Permission denied, as nobody, on a root process.
    let Some(target) = python(TEST, STEADY) else {
        return;
    };
    let o = common::NobodyBin::new().run(&["memleak", "--pid", &target.pid().to_string()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("permission denied")
            && err.contains("CAP_SYS_PTRACE")
            && err.lines().count() == 1,
        "{err}"
    );
}
