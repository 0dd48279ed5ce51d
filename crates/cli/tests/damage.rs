//! One damage policy for every reader: a store with a segment whose header was overwritten (the
//! four bad bytes of a hostile or unlucky user) still reads its other segments; `dump` says what
//! it skipped on stderr, once, and `diagnose --json` carries it in `damaged` for the windows the
//! segment may hold.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{run, s, text};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Copies the lab recording `name` into a fresh directory.
fn copy_fixture(name: &str, to: &Path) {
    let from = common::workspace_root()
        .join("tests/fixtures/diagnose")
        .join(name);
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// The main segment files of the store at `dir`, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            n.starts_with("seg-") && n.ends_with(".jss") && n.matches('.').count() == 1
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_damaged_segment_costs_itself_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    // Two recordings in one store: two segments, the TLB storm's first. The other one's
    // header is overwritten.
    copy_fixture("tlb-shootdown", dir.path());
    copy_fixture("idle", dir.path());
    let segs = segments(dir.path());
    assert_eq!(segs.len(), 2, "{segs:?}");
    let mut b = std::fs::read(&segs[1]).unwrap();
    b[..4].copy_from_slice(b"XXXX");
    std::fs::write(&segs[1], b).unwrap();

    let d = s(dir.path());
    let o = run(
        &[
            "dump",
            "--dir",
            d,
            "--from",
            "0",
            "--to",
            "now",
            "--select",
            "irq.tlb_per_s",
        ],
        TIMEOUT,
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let rows = text(&o.stdout).lines().count() - 1;
    assert!(rows >= 5, "the undamaged segment is read: {rows} rows");
    assert_eq!(err.matches("skipped").count(), 1, "said once: {err}");
    assert!(
        err.contains("unreadable") && err.contains("error:"),
        "{err}"
    );

    // The storm's seconds of the undamaged recording.
    let o = run(
        &[
            "diagnose",
            "--dir",
            d,
            "--from",
            "1795331568",
            "--to",
            "1795331574",
            "--json",
        ],
        TIMEOUT,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The damaged segment starts after this window and its baseline: it costs them nothing.
    assert_eq!(v["damaged"]["unreadable"], 0, "{}", v["damaged"]);
    assert_eq!(v["findings"][0]["rule_id"], "cpu.tlb-shootdown");

    // A window over the damaged recording says what it lost, by the segment's index; with no
    // sample left in it, that is "no data" (3), with the report printed all the same.
    let o = run(
        &[
            "diagnose",
            "--dir",
            d,
            "--from",
            "1795331632",
            "--to",
            "1795331640",
            "--json",
        ],
        TIMEOUT,
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("lost"), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let dmg = &v["damaged"];
    assert_eq!(dmg["unreadable"], 1, "{dmg}");
    assert!(dmg["samples_lost"].as_u64().unwrap() > 0, "{dmg}");
    assert!(
        dmg["files"][0]["what"]
            .as_str()
            .unwrap()
            .contains("bad magic"),
        "{dmg}"
    );
}
