//! Helpers for tests that need something this host may not have: root, BPF, cgroups, a
//! tmpfs mount, a tool such as `go`, `python3`, `tmux`, `chromium` or `prometheus`.
//!
//! Such a test calls [`skip`] and returns when it cannot run. By default that prints
//! `SKIPPED: <test>: <reason>` past libtest's output capture, so a developer without root
//! still gets a passing suite and sees what did not run. With `JITTERSCOPE_REQUIRE_PRIVILEGED=1`
//! (set by `.ci/run`) the same call fails the test instead: in CI everything is installed and
//! the tests run as root, so a skip there means a test silently stopped testing.
//!
//! Also stores written the way `record` writes ([`sample_writer`], [`rewrite`]).
//!
//! Only ever a dev-dependency.
#![deny(missing_docs)]

mod rewrite;
pub use rewrite::{rewrite, sample_writer};

use std::io::Write;
use std::path::{Path, PathBuf};

/// The environment variable that turns every skip into a failure when set to `1`.
pub const REQUIRE_PRIVILEGED: &str = "JITTERSCOPE_REQUIRE_PRIVILEGED";

/// Whether `JITTERSCOPE_REQUIRE_PRIVILEGED=1` is set: skips must fail.
pub fn privileged_required() -> bool {
    std::env::var_os(REQUIRE_PRIVILEGED).is_some_and(|v| v == "1")
}

/// Reports that `test` cannot run here because of `reason`; the caller returns afterwards.
///
/// Writes `SKIPPED: <test>: <reason>` to the stderr handle itself rather than with
/// `eprintln!`, which libtest captures for passing tests: a skip must show in CI logs
/// (`scripts/test-summary.sh` counts these lines). With `JITTERSCOPE_REQUIRE_PRIVILEGED=1`
/// it panics instead, failing the test.
#[track_caller]
pub fn skip(test: &str, reason: &str) {
    skip_or_fail(privileged_required(), test, reason, &mut std::io::stderr());
}

#[track_caller]
fn skip_or_fail(required: bool, test: &str, reason: &str, out: &mut dyn Write) {
    if required {
        panic!(
            "{test} would have been skipped ({reason}), \
             but {REQUIRE_PRIVILEGED}=1 demands that it run"
        );
    }
    let _ = writeln!(out, "SKIPPED: {test}: {reason}");
}

/// Whether the tests run as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no failure mode.
    unsafe { libc::geteuid() == 0 }
}

/// The first executable file named `prog` on `PATH`, then in `extra` directories (for tools
/// installed where a non-interactive shell's `PATH` may not reach, such as `/usr/local/go/bin`).
pub fn which(prog: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|d| d.join(prog))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The `go` command: on `PATH`, else the official install's `/usr/local/go/bin/go`.
pub fn go() -> Option<PathBuf> {
    which("go", &["/usr/local/go/bin"])
}

/// Fails unless every name is different; `what` names them in the message (`"rule ids"`).
#[track_caller]
pub fn assert_unique<'a>(names: impl IntoIterator<Item = &'a str>, what: &str) {
    let mut seen = std::collections::HashSet::new();
    for n in names {
        assert!(seen.insert(n), "{what}: {n:?} appears twice");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_passes_unless_required() {
        let mut out = Vec::new();
        skip_or_fail(false, "t", "no reason", &mut out);
        assert_eq!(out, b"SKIPPED: t: no reason\n");
        let e = std::panic::catch_unwind(|| {
            skip_or_fail(true, "t", "needs root", &mut Vec::new());
        })
        .unwrap_err();
        let msg = e.downcast_ref::<String>().unwrap();
        assert_eq!(
            msg,
            "t would have been skipped (needs root), \
             but JITTERSCOPE_REQUIRE_PRIVILEGED=1 demands that it run"
        );
        assert!(!msg.contains('\n') && !msg.contains("SKIPPED:"));
    }

    #[test]
    fn which_finds_sh_and_not_nonsense() {
        assert!(which("sh", &[]).is_some());
        assert!(which("sh", &["/bin"]).is_some());
        assert_eq!(which("jitterscope-no-such-tool", &["/bin"]), None);
    }
}
