//! The JSON contract (docs/JSON.md): every command's JSON output, produced here from the
//! recorded lab fixtures, validates against its schema under docs/schema/. Outputs that need a
//! live kernel, a lab run or an engine are validated by the tests that produce them
//! (tracers_cli, view_e2e, memleak_e2e, lab_e2e, clickhouse_e2e).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{check_schema, check_schema_lines, lab_recording, run, text, workspace_root};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Every recorded lab scenario: they differ in findings, culprits, containers and stacks.
fn scenarios() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(workspace_root().join("tests/fixtures/diagnose"))
        .unwrap()
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            n.strip_suffix(".json").map(str::to_string)
        })
        .collect();
    v.sort();
    assert!(v.len() >= 10, "too few lab fixtures: {v:?}");
    v
}

/// `cmd --dir <fixture> --from F --to T args…`, which must succeed; its stdout.
fn on_fixture(name: &str, cmd: &[&str], args: &[&str]) -> String {
    let (dir, from, to) = lab_recording(name);
    let (f, t) = ((from - 10).to_string(), (to + 5).to_string());
    let mut a = cmd.to_vec();
    a.extend_from_slice(&["--dir", &dir, "--from", &f, "--to", &t]);
    a.extend_from_slice(args);
    let o = run(&a, TIMEOUT);
    assert!(o.status.success(), "{a:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

#[test]
fn every_schema_is_a_valid_schema_and_documented() {
    let dir = workspace_root().join("docs/schema");
    let doc = std::fs::read_to_string(workspace_root().join("docs/JSON.md")).unwrap();
    let mut names = BTreeSet::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let n = p.file_name().unwrap().to_str().unwrap().to_string();
        let name = n
            .strip_suffix(".schema.json")
            .unwrap_or_else(|| panic!("{n}: schemas are named <output>.schema.json"));
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(
            s["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{n}"
        );
        assert!(
            jsonschema::meta::is_valid(&s),
            "{n} is not a valid draft 2020-12 schema"
        );
        assert_eq!(
            s["properties"]["schema_version"]["const"], 1,
            "{n}: schema_version"
        );
        assert!(
            s["required"]
                .as_array()
                .is_some_and(|r| r.iter().any(|k| k == "schema_version")),
            "{n}: schema_version is not required"
        );
        assert!(
            doc.contains(&format!("schema/{n}")),
            "docs/JSON.md does not list {n}"
        );
        names.insert(name.to_string());
    }
    assert!(names.len() >= 15, "{names:?}");
}

/// A schema that accepted anything would make every other test here pass: a real line with a
/// field dropped, retyped or added must fail.
#[test]
fn the_schemas_refuse_what_drifts() {
    let line = on_fixture(
        "cfs-throttle",
        &["dump"],
        &["--format", "json", "--select", "cgroup.*"],
    );
    let mut v: serde_json::Value = serde_json::from_str(line.lines().nth(3).unwrap()).unwrap();
    check_schema("dump", &v);
    for (what, change) in [
        (
            "without schema_version",
            Box::new(|v: &mut serde_json::Value| {
                v.as_object_mut().unwrap().remove("schema_version");
            }) as Box<dyn Fn(&mut serde_json::Value)>,
        ),
        (
            "ts_ns as a string",
            Box::new(|v: &mut serde_json::Value| v["ts_ns"] = "1".into()),
        ),
        (
            "an unknown field",
            Box::new(|v: &mut serde_json::Value| v["extra"] = 1.into()),
        ),
        (
            "a label that is a number",
            Box::new(|v: &mut serde_json::Value| {
                let labels = v["labels"].as_object_mut().unwrap();
                let (_, l) = labels.iter_mut().next().expect("a labelled series");
                l["cgroup"] = 1.into();
            }),
        ),
    ] {
        let mut bad = v.clone();
        change(&mut bad);
        let r = std::panic::catch_unwind(|| check_schema("dump", &bad));
        assert!(r.is_err(), "the dump schema accepted a line {what}");
    }
    v["values"] = serde_json::json!({});
    v["labels"] = serde_json::json!({});
    check_schema("dump", &v);
}

#[test]
fn diagnose_and_events_match_their_schemas() {
    let mut episodes = 0;
    let mut labelled = 0;
    for s in scenarios() {
        let report: serde_json::Value =
            serde_json::from_str(&on_fixture(&s, &["diagnose"], &["--json"])).unwrap();
        check_schema("diagnose", &report);
        // Each piece of evidence carries its series' labels: a cgroup's series its cgroup, a
        // process's its pid and comm, a host series none.
        for e in report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|f| f["evidence"].as_array().unwrap())
        {
            let (series, labels) = (e["series"].as_str().unwrap_or(""), &e["labels"]);
            if let Some(cg) = labels["cgroup"].as_str() {
                assert!(series.contains(&format!(".{cg}.")), "{e}");
                labelled += 1;
            }
            if let (Some(pid), Some(comm)) = (labels["pid"].as_str(), labels["comm"].as_str()) {
                assert!(series.contains(&format!(".{pid}.{comm}.")), "{e}");
                labelled += 1;
            }
            if series == "cpu.sys_pct" || series.is_empty() {
                assert_eq!(labels, &serde_json::json!({}), "{e}");
            }
        }
        let ev = check_schema_lines("events", &on_fixture(&s, &["events"], &["--json"]));
        // An episode's own diagnosis is a report too.
        if let Some(id) = ev.first().and_then(|e| e["id"].as_str()) {
            let (dir, _, _) = lab_recording(&s);
            let o = run(
                &["diagnose", "--dir", &dir, "--event", id, "--json"],
                TIMEOUT,
            );
            assert!(o.status.success(), "{s} {id}: {}", text(&o.stderr));
            check_schema("diagnose", &serde_json::from_slice(&o.stdout).unwrap());
        }
        episodes += ev.len();
    }
    assert!(
        episodes > 10,
        "only {episodes} episodes in all the fixtures"
    );
    assert!(labelled > 20, "only {labelled} labelled pieces of evidence");
}

#[test]
fn dump_and_its_metric_list_match_their_schemas() {
    let o = run(&["dump", "--list", "--format", "json"], TIMEOUT);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let metrics = check_schema_lines("dump-list", &text(&o.stdout));
    assert!(metrics.len() > 100, "{} metrics", metrics.len());
    let mut labelled = 0;
    for s in ["cfs-throttle", "oom-leak", "tlb-shootdown"] {
        for l in check_schema_lines("dump", &on_fixture(s, &["dump"], &["--format", "json"])) {
            // Each label set names exactly its series' placeholders (and a cgroup's owner).
            for (series, labels) in l["labels"].as_object().unwrap() {
                assert!(
                    l["values"].get(series).is_some(),
                    "{series}: labels without a value"
                );
                for (k, v) in labels.as_object().unwrap() {
                    let v = v.as_str().unwrap();
                    if ["cgroup", "pid", "cpu"].contains(&k.as_str()) {
                        assert!(series.contains(v), "{series}: {k}={v} is not in the name");
                    }
                }
                labelled += 1;
            }
        }
    }
    assert!(labelled > 1000, "only {labelled} labelled series");
}

#[test]
fn replay_and_top_functions_match_their_schemas() {
    for s in ["cfs-throttle", "python-leak", "tlb-shootdown"] {
        let (dir, from, to) = lab_recording(s);
        for at in [from, (from + to) / 2, to - 1] {
            let o = run(
                &[
                    "replay",
                    "--dir",
                    &dir,
                    "--at",
                    &at.to_string(),
                    "--json-once",
                ],
                TIMEOUT,
            );
            assert!(o.status.success(), "{s}@{at}: {}", text(&o.stderr));
            check_schema("view", &serde_json::from_slice(&o.stdout).unwrap());
        }
        let top = on_fixture(s, &["top-functions"], &["--json"]);
        check_schema("top-functions", &serde_json::from_str(&top).unwrap());
    }
}

#[test]
fn lists_and_logs_match_their_schemas() {
    let o = run(&["lab", "list", "--json"], TIMEOUT);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(check_schema_lines("lab-list", &text(&o.stdout)).len() >= 10);
    let o = run(&["tracers", "--json"], TIMEOUT);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!check_schema_lines("tracers", &text(&o.stdout)).is_empty());
    // A recorder that cannot start logs why, as a JSON line like the others.
    let o = run(
        &[
            "record",
            "--log-format",
            "json",
            "--dir",
            "/proc/no-store",
            "--duration",
            "1s",
        ],
        TIMEOUT,
    );
    assert!(!o.status.success());
    let err = text(&o.stderr);
    let lines = check_schema_lines("log", &err);
    assert!(lines.iter().any(|l| l["level"] == "error"), "{err}");
}
