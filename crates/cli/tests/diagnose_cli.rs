//! `jitterscope diagnose` on the recorded lab fixtures (tests/fixtures/diagnose): text and JSON
//! output, the windows it accepts, and its one-line errors.

mod common;

use std::time::Duration;

use common::{run, text};

use common::lab_recording as fixture;

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
    let lib = jitterscope_diagnose::diagnose(
        std::path::Path::new(&dir),
        from * 1_000_000_000,
        to * 1_000_000_000,
        jitterscope_diagnose::Options::default(),
    )
    .unwrap();
    // that the CLI prints that report unchanged, with the JSON contract's version and the
    // evidence's labels added.
    let mut want = serde_json::to_value(&lib).unwrap();
    want["schema_version"] = 1.into();
    let mut got = v.clone();
    for f in got["findings"].as_array_mut().unwrap() {
        for e in f["evidence"].as_array_mut().unwrap() {
            let labels = e.as_object_mut().unwrap().remove("labels");
            assert!(labels.is_some_and(|l| l.is_object()), "{e}");
        }
    }
    assert_eq!(got, want);
    common::check_schema("diagnose", &v);
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
        "cpu.softirq-storm",
        "cpu.steal",
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
        // --from alone reads to now (README: WINDOW); with --since it is a usage error.
        (
            vec![
                "diagnose",
                "--dir",
                &dir,
                "--from",
                &from.to_string(),
                "--since",
                "5m",
            ],
            "--since",
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
    // JSON Lines: one episode per line.
    let v = common::parse_json_lines(&text(&o.stdout));
    let storm = v
        .iter()
        .find(|e| e["kind"] == "tlb-storm")
        .unwrap_or_else(|| panic!("no tlb-storm episode: {v:?}"));
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

/// `--kind` keeps one kind of episode; `--list-kinds` names every kind, needs no store, and
/// a kind that does not exist is a usage error that lists the real ones (`fleet` too).
#[test]
fn events_filter_by_a_kind_they_list() {
    let (dir, from, to) = fixture("tlb-shootdown");
    let (f, t) = ((from - 60).to_string(), (to + 60).to_string());
    let all = |extra: &[&str]| -> Vec<serde_json::Value> {
        let mut args = vec!["events", "--dir", &dir, "--from", &f, "--to", &t, "--json"];
        args.extend_from_slice(extra);
        let o = run(&args, Duration::from_secs(30));
        assert!(o.status.success(), "{}", text(&o.stderr));
        common::parse_json_lines(&text(&o.stdout))
    };
    let every = all(&[]);
    let storms = all(&["--kind", "tlb-storm"]);
    assert!(!storms.is_empty() && storms.iter().all(|e| e["kind"] == "tlb-storm"));
    assert_eq!(
        storms.len(),
        every.iter().filter(|e| e["kind"] == "tlb-storm").count()
    );
    assert!(
        storms.len() < every.len(),
        "the fixture has other kinds too: {every:?}"
    );

    let o = run(
        &["events", "--list-kinds", "--dir", "/nonexistent"],
        Duration::from_secs(10),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let listed: Vec<String> = text(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    for k in ["throttling", "reclaim-stalls", "tlb-storm", "leak-trend"] {
        assert!(listed.iter().any(|x| x == k), "{k} not in {listed:?}");
    }
    for args in [
        vec!["events", "--kind", "cpu.throttle"],
        vec!["fleet", "episodes", "--kind", "cpu.throttle"],
    ] {
        let o = run(&args, Duration::from_secs(10));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.lines()
                .next()
                .unwrap_or_default()
                .contains("the kinds are sys-cpu")
                && err.contains("throttling"),
            "{args:?}: {err}"
        );
    }
    // Leak trends are found by `events` alone: the recorder marks none, so no fleet has them.
    let o = run(
        &["fleet", "episodes", "--kind", "leak-trend"],
        Duration::from_secs(10),
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
