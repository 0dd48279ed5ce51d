//! `record` as an unprivileged user holding only the recorder's capabilities (what the systemd
//! unit grants with AmbientCapabilities=): everything root collects is collected, the tracers
//! and the sampler run, and each capability that is not held is named with what it costs.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{cmd, run_command, s, text};
use jitterscope_model::caps;

const NOBODY: u32 = 65534;

/// `record` for 3 s as uid/gid 65534 with `grant` as its inheritable and ambient capabilities.
fn record_as_nobody(dir: &Path, grant: &[caps::Cap]) -> Output {
    let list = grant
        .iter()
        .map(|c| format!("+{}", c.1.trim_start_matches("CAP_").to_lowercase()))
        .collect::<Vec<_>>()
        .join(",");
    let setpriv = jitterscope_testkit::which("setpriv", &[]).unwrap();
    let mut c = std::process::Command::new(setpriv);
    c.env_clear()
        .env("JITTERSCOPE_CONFIG", "/dev/null")
        .env("PATH", "/usr/bin:/bin")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
        ]);
    if !list.is_empty() {
        c.arg(format!("--inh-caps={list}"))
            .arg(format!("--ambient-caps={list}"));
    }
    // A copy of the binary beside the store: the build tree may not be reachable by nobody.
    c.arg(dir.parent().unwrap().join("jitterscope")).args([
        "record",
        "--dir",
        s(dir),
        "--duration",
        "3s",
    ]);
    run_command(c, Duration::from_secs(60))
}

/// The capabilities in this process's bounding set: only those can be granted.
fn bounding() -> u64 {
    let st = std::fs::read_to_string("/proc/self/status").unwrap();
    jitterscope_model::caps::parse_set(&st, "CapBnd").unwrap()
}

fn store_for_nobody(t: &Path) -> std::path::PathBuf {
    std::fs::copy(common::bin(), t.join("jitterscope")).unwrap();
    let d = t.join("store");
    std::fs::create_dir(&d).unwrap();
    std::os::unix::fs::chown(&d, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[test]
fn record_runs_with_only_its_capabilities_and_names_each_missing_one() {
    const T: &str = "record_runs_with_only_its_capabilities_and_names_each_missing_one";
    if !jitterscope_testkit::is_root() {
        return jitterscope_testkit::skip(T, "needs root to switch user and grant capabilities");
    }
    if jitterscope_testkit::which("setpriv", &[]).is_none() {
        return jitterscope_testkit::skip(T, "setpriv (util-linux) is not installed");
    }
    let bnd = bounding();
    let grant: Vec<caps::Cap> = caps::RECORDER
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| caps::has_in(bnd, *c))
        .collect();
    let t = tempfile::tempdir().unwrap();
    let d = store_for_nobody(t.path());

    let o = record_as_nobody(&d, &grant);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    // Whatever the machine withholds even from root is said, by name; nothing else is.
    for (c, _) in caps::RECORDER {
        let named = err.contains(&format!("without {}:", c.1));
        assert_eq!(named, !grant.contains(c), "{}: {err}", c.1);
    }
    assert!(
        err.contains("tracers running: reclaim, shrinker, tlb, madvise, runqlat, lookups"),
        "{err}"
    );
    // mmaplock needs lock:contention_begin (5.19+); dirty's tracepoint is on every kernel.
    assert!(
        err.lines()
            .any(|l| l.contains("tracers running:") && l.contains("dirty")),
        "{err}"
    );
    assert!(
        err.contains("processes: read through the BPF task iterator"),
        "{err}"
    );
    assert!(err.contains("profile: sampling stacks"), "{err}");
    assert!(!err.contains("permission denied"), "{err}");
    // The store is the recorder's user's, and what it wrote reads back.
    let o = run_command(
        {
            let mut c = cmd();
            c.args(["dump", "--dir", s(&d), "--list"]);
            c
        },
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    for e in std::fs::read_dir(&d).unwrap() {
        let e = e.unwrap();
        let uid = std::os::unix::fs::MetadataExt::uid(&e.metadata().unwrap());
        assert_eq!(uid, NOBODY, "{:?}", e.path());
    }

    // With none of them: each one is named, and the BPF parts say what they need.
    let d2 = t.path().join("store2");
    std::fs::create_dir(&d2).unwrap();
    std::os::unix::fs::chown(&d2, Some(NOBODY), Some(NOBODY)).unwrap();
    let o = record_as_nobody(&d2, &[]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    for (c, _) in caps::RECORDER {
        assert!(err.contains(&format!("without {}:", c.1)), "{}: {err}", c.1);
    }
    assert!(err.contains("needs CAP_BPF and CAP_PERFMON"), "{err}");
    assert!(!err.contains("tracers running"), "{err}");
}
