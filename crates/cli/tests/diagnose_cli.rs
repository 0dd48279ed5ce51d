//! `jitterscope diagnose` on the recorded lab fixtures (tests/fixtures/diagnose): text and JSON
//! output, the windows it accepts, and its one-line errors.

mod common;

use std::time::Duration;

use common::{run, text, workspace_root};

fn fixture(s: &str) -> (String, i64, i64) {
    let root = workspace_root().join("tests/fixtures/diagnose");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(format!("{s}.json"))).unwrap())
            .unwrap();
    let secs = |ns: i64| ns / 1_000_000_000;
    (
        root.join(s).display().to_string(),
        secs(v["windows"]["active"][0].as_i64().unwrap()),
        secs(v["windows"]["active"][1].as_i64().unwrap()) + 1,
    )
}

/// `jitterscope diagnose --dir D --from F --to T [extra]`.
fn diagnose(dir: &str, from: i64, to: i64, extra: &[&str]) -> std::process::Output {
    let (f, t) = (from.to_string(), to.to_string());
    let mut args = vec!["diagnose", "--dir", dir, "--from", &f, "--to", &t];
    args.extend_from_slice(extra);
    run(&args, Duration::from_secs(30))
}

#[test]
fn text_names_mechanism_culprit_and_fix() {
    let (dir, from, to) = fixture("tlb-shootdown");
    let o = diagnose(&dir, from, to, &[]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        out.contains("1. [cpu.tlb-shootdown] TLB-shootdown storm"),
        "{out}"
    );
    assert!(out.contains("culprit: lab-madvise"), "{out}");
    assert!(out.contains("what to change:"), "{out}");
}

#[test]
fn json_is_ranked_and_complete() {
    let (dir, from, to) = fixture("pagecache-thrash");
    let o = diagnose(&dir, from, to, &["--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["findings"][0]["rule_id"], "memory.pagecache-thrash");
    assert!(v["window"]["from"].is_string() && v["window"]["to"].is_string());
    // The schema and the ranking are the library's (crates/diagnose/tests/golden.rs); here,
    // that the CLI prints that report unchanged.
    let lib = jitterscope_diagnose::diagnose(
        std::path::Path::new(&dir),
        from * 1_000_000_000,
        to * 1_000_000_000,
        jitterscope_diagnose::Options::default(),
    )
    .unwrap();
    assert_eq!(v, serde_json::to_value(&lib).unwrap());
}

#[test]
fn a_quiet_window_says_nothing_is_wrong() {
    let (dir, from, to) = fixture("idle");
    let o = diagnose(&dir, from, to, &[]);
    assert!(o.status.success());
    assert!(
        text(&o.stdout).contains("nothing wrong found"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn at_takes_the_minute_around_a_time() {
    let (dir, from, _) = fixture("cfs-throttle");
    let o = run(
        &[
            "diagnose",
            "--dir",
            &dir,
            "--at",
            &(from + 3).to_string(),
            "--json",
        ],
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["findings"][0]["rule_id"], "cpu.cfs-throttling");
}

#[test]
fn list_rules_and_errors() {
    let o = run(&["diagnose", "--list-rules"], Duration::from_secs(10));
    let out = text(&o.stdout);
    for id in [
        "cpu.cfs-throttling",
        "memory.direct-reclaim",
        "memory.dcache-bloat",
        "memory.shrinker-cost",
        "cpu.tlb-shootdown",
        "memory.pagecache-thrash",
        "memory.leak",
        "cpu.saturation",
        "cpu.imbalance",
        "io.saturation",
        "sched.runqueue-latency",
    ] {
        assert!(out.contains(id), "{id} missing from {out}");
    }
    let (dir, from, _) = fixture("idle");
    for (args, want) in [
        (
            vec!["diagnose", "--dir", "/nonexistent-store", "--since", "1h"],
            "no store at /nonexistent-store",
        ),
        (
            vec!["diagnose", "--dir", &dir, "--from", "10", "--to", "5"],
            "the range is empty",
        ),
        (
            vec!["diagnose", "--dir", &dir, "--at", "yesterday-ish"],
            "yesterday-ish",
        ),
        (
            vec!["diagnose", "--dir", &dir, "--from", &from.to_string()],
            "--to",
        ),
    ] {
        let o = run(&args, Duration::from_secs(10));
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn events_list_episodes_that_diagnose_takes_by_id() {
    let (dir, from, to) = fixture("tlb-shootdown");
    let (f, t) = ((from - 60).to_string(), (to + 60).to_string());
    let o = run(
        &["events", "--dir", &dir, "--from", &f, "--to", &t, "--json"],
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let storm = v
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "tlb-storm")
        .unwrap_or_else(|| panic!("no tlb-storm episode: {v}"));
    assert_eq!(storm["series"], "irq.tlb_per_s");
    assert!(storm["peak"].as_f64().unwrap() >= 1000.0);
    let id = storm["id"].as_str().unwrap();
    let o = run(
        &["diagnose", "--dir", &dir, "--event", id, "--json"],
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["findings"][0]["rule_id"], "cpu.tlb-shootdown", "{d}");
    // Text form, and a quiet store has no episodes.
    let o = run(
        &["events", "--dir", &dir, "--from", &f, "--to", &t],
        Duration::from_secs(30),
    );
    assert!(
        text(&o.stdout).contains("TLB-shootdown IPI storm"),
        "{}",
        text(&o.stdout)
    );
    let (idle, from, to) = fixture("idle");
    let o = run(
        &[
            "events",
            "--dir",
            &idle,
            "--from",
            &(from - 60).to_string(),
            "--to",
            &(to + 60).to_string(),
        ],
        Duration::from_secs(30),
    );
    assert!(
        text(&o.stdout).starts_with("no episodes"),
        "{}",
        text(&o.stdout)
    );
    let o = run(
        &["diagnose", "--dir", &idle, "--event", "tlb-storm@x+1"],
        Duration::from_secs(10),
    );
    assert!(!o.status.success() && text(&o.stderr).contains("is not an event id"));
}
