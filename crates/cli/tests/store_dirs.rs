//! Store directories are opened safely: a symbolic link in the store's place is refused, links
//! planted inside it are never followed, and another user's directory is written only when
//! asked (the modes under a shell's umask are `deployment.rs`'s). Run as root, a recorder that
//! followed a link or filled any directory it is pointed at would be a write primitive.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use common::{recorder_cmd, run, run_command, s, text};
use jitterscope_testkit::{is_root, skip};

const TIMEOUT: Duration = Duration::from_secs(60);

/// `record` for 2 s into `dir`, with `extra` flags.
fn record(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut c = recorder_cmd(dir);
    c.args(["--duration", "2s"]).args(extra);
    run_command(c, TIMEOUT)
}

#[test]
fn a_symlinked_store_directory_is_refused_and_nothing_is_written_behind_it() {
    let t = tempfile::tempdir().unwrap();
    let target = t.path().join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("someones-file"), b"x").unwrap();
    let link = t.path().join("store");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = record(&link, &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("is a symbolic link"), "{err}");
    assert!(last.contains(&target.display().to_string()), "{err}");
    assert_eq!(
        common::names_in(&target),
        ["someones-file"],
        "nothing written there"
    );
    // A repair writes too; a read-only check of a directory no recorder wrote is no clean store.
    let o = run(&["store", "check", "--repair", "--dir", s(&link)], TIMEOUT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("is a symbolic link"));
    let o = run(&["store", "check", "--dir", s(&link)], TIMEOUT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    assert!(text(&o.stderr).contains("holds no segment and no LOCK"));
    assert_eq!(common::names_in(&target), ["someones-file"]);
}

#[test]
fn links_planted_inside_the_store_are_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let store = t.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let victim = t.path().join("victim");
    std::fs::write(&victim, b"do not touch").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&victim, store.join("LOCK")).unwrap();
    let o = record(&store, &[]);
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("LOCK"), "{err}");
    let m = std::fs::metadata(&victim).unwrap();
    assert_eq!(m.mode() & 0o777, 0o600, "the link's target was chmodded");
    assert_eq!(std::fs::read(&victim).unwrap(), b"do not touch");
    // A link in a segment's place is read as damage, not followed to its target.
    std::fs::remove_file(store.join("LOCK")).unwrap();
    let o = record(&store, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let seg = common::names_in(&store)
        .into_iter()
        .find(|n| n.ends_with(".jss") && n.matches('.').count() == 1)
        .unwrap();
    let stolen = t.path().join("stolen.jss");
    std::fs::rename(store.join(&seg), &stolen).unwrap();
    std::os::unix::fs::symlink(&stolen, store.join(&seg)).unwrap();
    let o = run(
        &[
            "dump",
            "--dir",
            s(&store),
            "--from",
            "0",
            "--select",
            "load.avg1",
        ],
        TIMEOUT,
    );
    let err = text(&o.stderr);
    assert!(err.contains("a symbolic link, not followed"), "{err}");
    assert_eq!(text(&o.stdout).lines().count(), 1, "only the header line");
}

#[test]
fn another_users_directory_is_written_only_when_asked() {
    const T: &str = "another_users_directory_is_written_only_when_asked";
    if !is_root() {
        return skip(T, "needs root to give a directory to another user");
    }
    let t = tempfile::tempdir().unwrap();
    let theirs = t.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let o = record(&theirs, &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("belongs to") && err.contains("--allow-other-owner"),
        "{err}"
    );
    assert!(
        common::names_in(&theirs).is_empty(),
        "{:?}",
        common::names_in(&theirs)
    );
    let o = run(
        &["store", "check", "--repair", "--dir", s(&theirs)],
        TIMEOUT,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--allow-other-owner"));
    // Told to, it records there.
    let o = record(&theirs, &["--allow-other-owner"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(common::names_in(&theirs)
        .iter()
        .any(|n| n.ends_with(".jss")));
}
