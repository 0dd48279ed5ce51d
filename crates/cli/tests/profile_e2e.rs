//! End to end on the live host: `record` with the profiler on while known workloads run, then
//! `flame` and `top-functions` over windows of that recording.
//!
//! - a user-space busy loop appears under its function name (`flame --folded --pid`);
//! - a window that ends before a workload starts holds none of its samples;
//! - a stat() storm shows the kernel's path walk (kernel frames, `--kernel-only`);
//! - `top-functions --json` ranks the busy loop, and `--pprof` writes a profile `go tool pprof`
//!   reads (when Go is installed).
//!
//! Needs root (system-wide perf sampling) and gcc; otherwise prints `SKIPPED:` and returns (fails
//! under `JITTERSCOPE_REQUIRE_PRIVILEGED=1`, as in CI).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{cmd, now_arg, run, s, text, ChildGuard};
use jitterscope_testkit::{is_root, skip};

const T: Duration = Duration::from_secs(60);

fn compile(dir: &Path) -> Result<std::path::PathBuf, String> {
    let src = common::workspace_root().join("crates/cli/tests/profile/busy.c");
    let exe = dir.join("busy");
    let o = Command::new("gcc")
        .args(["-O1", "-fno-omit-frame-pointer", "-o", s(&exe), s(&src)])
        .output()
        .map_err(|e| format!("gcc: {e}"))?;
    if !o.status.success() {
        return Err(format!("gcc failed: {}", text(&o.stderr)));
    }
    Ok(exe)
}

fn workload(exe: &Path, what: &str, secs: &str) -> ChildGuard {
    ChildGuard::new(
        Command::new(exe)
            .args([what, secs])
            // The stat storm's missing names are looked up here, in the test's directory.
            .current_dir(exe.parent().expect("the workload is in a directory"))
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn workload"),
    )
}

/// `record` into `store` for `secs` with the profiler at its default and no BPF tracers.
fn record(store: &Path, secs: &str, stderr: Stdio) -> ChildGuard {
    let c = cmd()
        .args([
            "record",
            "--dir",
            s(store),
            "--no-tracers",
            "--duration",
            secs,
        ])
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn record");
    ChildGuard::new(c)
}

/// Records `secs` into `<tmp>/store` while `workload` runs (started once the recorder has
/// settled) and ends. Returns the store, the window around the workload and its pid. A perf map
/// the workload leaves in /tmp (JITs) is removed.
fn record_while(
    tmp: &Path,
    secs: &str,
    mut workload: Command,
) -> (PathBuf, String, String, String) {
    let store = tmp.join("store");
    let mut rec = record(&store, secs, Stdio::null());
    std::thread::sleep(Duration::from_millis(1500));
    let from = now_arg();
    let mut c = ChildGuard::new(
        workload
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn workload"),
    );
    let pid = c.pid().to_string();
    let _map = RemoveOnDrop(format!("/tmp/perf-{pid}.map").into());
    let ok = c
        .wait_timeout(Duration::from_secs(30))
        .is_some_and(|s| s.success());
    assert!(ok, "the workload failed or hung");
    let to = now_arg();
    let ok = rec
        .wait_timeout(Duration::from_secs(30))
        .is_some_and(|s| s.success());
    assert!(ok, "record failed or hung");
    (store, from, to, pid)
}

fn folded(dir: &str, from: &str, to: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec![
        "flame", "--dir", dir, "--from", from, "--to", to, "--folded",
    ];
    args.extend_from_slice(extra);
    let o = run(&args, T);
    (o.status.success(), text(&o.stdout), text(&o.stderr))
}

fn count(folded: &str, needle: &str) -> u64 {
    folded
        .lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn profile_end_to_end() {
    const TEST: &str = "profile_end_to_end";
    if !is_root() {
        return skip(TEST, "needs root for system-wide perf sampling");
    }
    let tmp = tempfile::tempdir().unwrap();
    let exe = match compile(tmp.path()) {
        Ok(e) => e,
        Err(e) => return skip(TEST, &format!("cannot build the workload: {e}")),
    };
    let store = tmp.path().join("store");
    let store_s = s(&store).to_string();
    let mut rec = record(&store, "14s", Stdio::piped());
    std::thread::sleep(Duration::from_millis(1500));

    let spin_from = now_arg();
    let mut spin = workload(&exe, "spin", "3");
    let spin_pid = spin.pid();
    assert!(spin
        .wait_timeout(Duration::from_secs(20))
        .is_some_and(|s| s.success()));
    let spin_to = now_arg();
    // A gap of more than one slice, so a window starting a second into the next workload
    // cannot hold a slice that still covers the spinner.
    std::thread::sleep(Duration::from_millis(2500));
    let stat_from = now_arg();
    let mut storm = workload(&exe, "stat", "4");
    let storm_pid = storm.pid();
    assert!(storm
        .wait_timeout(Duration::from_secs(20))
        .is_some_and(|s| s.success()));
    let stat_to = now_arg();

    let status = rec
        .wait_timeout(Duration::from_secs(30))
        .expect("record ends");
    let mut err = String::new();
    use std::io::Read;
    rec.into_inner()
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "record failed: {err}");
    if err.contains("profile: not running") {
        return skip(TEST, &format!("the profiler cannot run here: {err}"));
    }

    // The spinner, by pid, under its function name; nearly all of its samples in it.
    let pid = spin_pid.to_string();
    let (ok, f, e) = folded(&store_s, &spin_from, &spin_to, &["--pid", &pid]);
    assert!(ok, "flame --pid failed: {e}");
    let total = count(&f, "");
    let in_spin = count(&f, "jitterscope_busy_spin");
    assert!(
        total >= 60,
        "3 s of a busy CPU at 99 Hz gave {total} samples:\n{f}"
    );
    assert!(
        in_spin * 10 >= total * 9,
        "{in_spin} of {total} samples in jitterscope_busy_spin:\n{f}"
    );
    assert!(f.lines().all(|l| l.starts_with("busy;")), "{f}");

    // A window one second into the storm up to its end: storm samples, not a single one of
    // this spinner's. Asked by its pid: the other tests of this file run the same workload at
    // the same time, and the recorder samples the whole host.
    let late = chrono::DateTime::parse_from_rfc3339(&stat_from).unwrap()
        + chrono::Duration::milliseconds(1000);
    let late = late.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let (ok, f, e) = folded(&store_s, &late, &stat_to, &["--pid", &pid]);
    assert!(
        ok || e.contains("no stack samples match"),
        "flame --pid failed: {e}"
    );
    assert_eq!(count(&f, ""), 0, "spinner outside its window:\n{f}");
    let (ok, f, e) = folded(&store_s, &late, &stat_to, &[]);
    assert!(ok, "flame failed: {e}");
    // glibc's syscall wrapper keeps no frame pointer, so the kernel's chain skipped its caller;
    // unwound from the stack copy, the storm's own function is above it.
    assert!(count(&f, "fstatat") > 0, "{f}");
    assert!(
        f.lines()
            .any(|l| l.contains("jitterscope_stat_storm;") && l.contains("fstatat")),
        "{f}"
    );

    // The storm spends its time in the kernel's path walk.
    let pid = storm_pid.to_string();
    let (ok, f, e) = folded(
        &store_s,
        &stat_from,
        &stat_to,
        &["--pid", &pid, "--kernel-only"],
    );
    assert!(ok, "flame --kernel-only failed: {e}");
    let kernel_total = count(&f, "");
    assert!(
        kernel_total >= 50,
        "{kernel_total} kernel samples of a stat storm:\n{f}"
    );
    assert!(
        f.lines()
            .all(|l| l.split(';').skip(1).all(|fr| fr.contains("_[k]"))),
        "user frame in --kernel-only:\n{f}"
    );
    let statx = count(&f, "stat");
    assert!(
        statx * 2 >= kernel_total,
        "stat syscall frames in {statx} of {kernel_total}:\n{f}"
    );

    // top-functions ranks the spinner first among user functions of its process.
    let pid = spin_pid.to_string();
    let o = run(
        &[
            "top-functions",
            "--dir",
            &store_s,
            "--from",
            &spin_from,
            "--to",
            &spin_to,
            "--pid",
            &pid,
            "--json",
        ],
        T,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(v["user"][0]["function"], "jitterscope_busy_spin", "{v}");

    // The SVG names it too.
    let svg = tmp.path().join("spin.svg");
    let o = run(
        &[
            "flame",
            "--dir",
            &store_s,
            "--from",
            &spin_from,
            "--to",
            &spin_to,
            "-o",
            s(&svg),
        ],
        T,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("jitterscope_busy_spin"));

    // pprof, read back by Go's own tool when it is here.
    let pb = tmp.path().join("spin.pb.gz");
    let o = run(
        &[
            "flame",
            "--dir",
            &store_s,
            "--from",
            &spin_from,
            "--to",
            &spin_to,
            "--pid",
            &pid,
            "--pprof",
            s(&pb),
        ],
        T,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    match jitterscope_testkit::go() {
        None => skip(
            TEST,
            "go is not installed (on PATH or in /usr/local/go/bin): pprof check not run",
        ),
        Some(go) => {
            let o = Command::new(go)
                .args(["tool", "pprof", "-top", "-symbolize=none", s(&pb)])
                .env("PPROF_BINARY_PATH", "/nonexistent")
                .env("HOME", tmp.path())
                .output()
                .expect("go tool pprof");
            assert!(o.status.success(), "go tool pprof: {}", text(&o.stderr));
            assert!(
                text(&o.stdout).contains("jitterscope_busy_spin"),
                "{}",
                text(&o.stdout)
            );
        }
    }
}

#[test]
fn profile_off_and_empty_windows() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let o = run(
        &[
            "record",
            "--dir",
            s(&store),
            "--no-tracers",
            "--profile-hz",
            "0",
            "--duration",
            "2s",
        ],
        T,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("profile:"), "{}", text(&o.stderr));
    let o = run(
        &["flame", "--dir", s(&store), "--from", "1h ago", "--folded"],
        T,
    );
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("no stack samples recorded"),
        "{}",
        text(&o.stderr)
    );
}

/// Removes a file when dropped (the perf map a JIT leaves in /tmp).
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// JIT code has no file to name it from: node writes /tmp/perf-<pid>.map, read while it runs.
#[test]
fn profile_names_jit_code_from_perf_map() {
    const TEST: &str = "profile_names_jit_code_from_perf_map";
    if !is_root() {
        return skip(TEST, "needs root for perf sampling");
    }
    let Some(node) = jitterscope_testkit::which("node", &[]) else {
        return skip(
            TEST,
            "node is not installed (scripts/setup.sh installs npm, and node with it)",
        );
    };
    let tmp = tempfile::tempdir().unwrap();
    let js = tmp.path().join("hot.js");
    std::fs::write(
        &js,
        "function jitterscopeHotLoop(n) { let x = 0; for (let i = 0; i < n; i++) { x = (x * 31 + i) % 1000003; } return x; }\n\
         const end = Date.now() + 3000; let r = 0; while (Date.now() < end) r += jitterscopeHotLoop(1e6); console.log(r);\n",
    )
    .unwrap();
    let mut node = Command::new(node);
    // node leaves isolate-*.log files in its working directory.
    node.args(["--perf-basic-prof", s(&js)])
        .current_dir(tmp.path());
    let (store, from, to, pid) = record_while(tmp.path(), "8s", node);
    let (ok, f, e) = folded(s(&store), &from, &to, &["--pid", &pid]);
    assert!(ok, "flame failed: {e}");
    let total = count(&f, "");
    let hot = count(&f, "jitterscopeHotLoop");
    assert!(
        hot * 2 >= total,
        "{hot} of {total} samples in the JIT-compiled loop:\n{f}"
    );
}

/// Without perf_event access the recorder says why in one line and records everything else.
#[test]
fn profile_degrades_without_perf_access() {
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2);
    if !is_root() || paranoid <= 0 || !Path::new("/usr/bin/setpriv").exists() {
        return skip(
            "profile_degrades_without_perf_access",
            "needs root (to drop to nobody), setpriv, and perf_event_paranoid >= 1",
        );
    }
    // A copy nobody can execute, in a directory nobody can write.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let exe = dir.join("jitterscope");
    std::fs::copy(common::bin(), &exe).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let store = dir.join("store");
    let o = Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", s(&exe)])
        .args([
            "record",
            "--dir",
            s(&store),
            "--no-tracers",
            "--no-mlock",
            "--nice",
            "0",
        ])
        .args(["--duration", "2s"])
        .env_remove("JITTERSCOPE_DIR")
        .output()
        .expect("setpriv");
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("profile")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("perf_event_paranoid"), "{err}");
    let o = run(
        &[
            "dump",
            "--dir",
            s(&store),
            "--from",
            "1h ago",
            "--select",
            "cpu.sys_pct",
        ],
        T,
    );
    assert!(
        text(&o.stdout).lines().count() >= 2,
        "nothing else recorded: {}",
        text(&o.stderr)
    );
}

/// A process in its own mount namespace runs a binary the host cannot see afterwards (a
/// container's image): its functions are named while it runs, through its own view.
#[test]
fn profile_names_code_of_another_mount_namespace() {
    const TEST: &str = "profile_names_code_of_another_mount_namespace";
    if !is_root() || !Path::new("/usr/bin/unshare").exists() {
        return skip(TEST, "needs root and /usr/bin/unshare");
    }
    let tmp = tempfile::tempdir().unwrap();
    let exe = match compile(tmp.path()) {
        Ok(e) => e,
        Err(e) => return skip(TEST, &format!("cannot build the workload: {e}")),
    };
    let hidden = tmp.path().join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    // The tmpfs and the copy on it exist only in the child's namespace, and vanish with it.
    let mut c = Command::new("/usr/bin/unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t tmpfs none "$1" && cp "$2" "$1/busy" && exec "$1/busy" spin 3"#)
        .args(["sh", s(&hidden), s(&exe)]);
    let (store, from, to, pid) = record_while(tmp.path(), "8s", c);
    assert!(
        !hidden.join("busy").exists(),
        "the namespace's mount leaked to the host"
    );
    let (ok, f, e) = folded(s(&store), &from, &to, &["--pid", &pid]);
    assert!(ok, "flame failed: {e}");
    let total = count(&f, "");
    let hot = count(&f, "jitterscope_busy_spin");
    assert!(
        total >= 60 && hot * 10 >= total * 9,
        "{hot} of {total} in the spinner:\n{f}"
    );
}

/// Processes that live a few tens of milliseconds, gone before /proc could be read: their
/// frames come from the mapping records and their names from the exec records.
#[test]
fn profile_names_short_lived_processes() {
    const TEST: &str = "profile_names_short_lived_processes";
    if !is_root() {
        return skip(TEST, "needs root for perf sampling");
    }
    let tmp = tempfile::tempdir().unwrap();
    let exe = match compile(tmp.path()) {
        Ok(e) => e,
        Err(e) => return skip(TEST, &format!("cannot build the workload: {e}")),
    };
    let short = tmp.path().join("jsshort");
    std::fs::copy(&exe, &short).unwrap();
    let mut c = Command::new("sh");
    c.args([
        "-c",
        r#"for i in $(seq 60); do "$1" spin 0.04; done"#,
        "sh",
        s(&short),
    ]);
    let (store, from, to, _) = record_while(tmp.path(), "9s", c);
    let (ok, f, e) = folded(s(&store), &from, &to, &[]);
    assert!(ok, "flame failed: {e}");
    let spin = count(&f, "jitterscope_busy_spin");
    let named = count(&f, "jsshort;");
    // About 240 on an idle machine; fewer when other tests compete for the CPUs.
    assert!(spin >= 40, "{spin} samples of 60 x 40 ms spins:\n{f}");
    assert!(
        named * 10 >= spin * 9,
        "{named} of {spin} spinner samples under the process's name:\n{f}"
    );
}
