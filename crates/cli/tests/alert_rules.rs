//! The shipped Prometheus alerting rules (`deploy/prometheus/jitterscope-alerts.yml`) under
//! `promtool test rules`, on series the recorder produced: each lab scenario's recorded store
//! (tests/fixtures/diagnose) named and scaled as remote write sends it, its seconds repeated
//! to cover the rules' `for` durations. Each mechanism's scenario fires its alert and nothing
//! it did not cause; the idle host fires none.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use jitterscope_model::codec::Parts;
use jitterscope_model::export::{base_name, Bounded};
use jitterscope_model::stored::SampleReader;
use yaml_rust2::{Yaml, YamlLoader};

/// Seconds of input: the rules' longest `for` (10 m) after a 5 m average fills.
const SECONDS: usize = 1200;

/// The series the rules read.
const READ: &[&str] = &[
    "jitterscope_cgroup_cpu_throttled_ratio",
    "jitterscope_reclaim_stalls_per_second",
    "jitterscope_irq_tlb_per_second",
    "jitterscope_reclaim_refault_file_per_second",
    "jitterscope_self_samples_dropped_total",
    "jitterscope_self_ticks_missed_total",
];

/// An alert a scenario must fire, with the labels that tell it apart beyond `host`.
type Fires = (&'static str, &'static [(&'static str, &'static str)]);

/// Each recorded scenario and the alerts it must fire (the lab's cgroup for throttling).
const CASES: &[(&str, &[Fires])] = &[
    (
        "cfs-throttle",
        &[(
            "JitterscopeCPUThrottled",
            &[("cgroup", "/jitterscope-lab/cfs-throttle")],
        )],
    ),
    ("tlb-shootdown", &[("JitterscopeTLBShootdownStorm", &[])]),
    (
        "reclaim-storm",
        &[
            ("JitterscopeReclaimStalls", &[]),
            ("JitterscopePageCacheRefaults", &[]),
        ],
    ),
    (
        "pagecache-thrash",
        &[
            ("JitterscopeReclaimStalls", &[]),
            ("JitterscopePageCacheRefaults", &[]),
        ],
    ),
    ("idle", &[]),
];

/// `name{labels}` → the value of each recorded second (None where the series had none), as
/// remote write names and scales them, with `host="lab"`.
fn recorded(store: &Path) -> (BTreeMap<String, Vec<Option<f64>>>, usize) {
    let reader = SampleReader::open(store).unwrap();
    let bounded = Bounded::new(10);
    let mut pairs = reader
        .pairs(i64::MIN, i64::MAX, bounded.parts().union(Parts::ALL))
        .unwrap();
    let mut out: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    let mut n = 0;
    while let Some((cur, prev)) = pairs.next() {
        if prev.is_none() {
            // No rate without the second before it.
            continue;
        }
        bounded.for_each(cur, prev, |def, labels, v| {
            let b = base_name(def);
            if !READ.contains(&b.name.as_str()) {
                return;
            }
            let mut name = format!("{}{{", b.name);
            for (k, l) in def.placeholders().iter().zip(labels) {
                let _ = write!(name, "{k}=\"{l}\",");
            }
            name.push_str("host=\"lab\"}");
            let s = out.entry(name).or_default();
            s.resize(n, None);
            s.push(Some(v * b.scale));
        });
        n += 1;
    }
    (out, n)
}

/// The rules file's alerts: name → annotations.
fn annotations(rules: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    let doc = &YamlLoader::load_from_str(&std::fs::read_to_string(rules).unwrap()).unwrap()[0];
    let mut out = BTreeMap::new();
    for g in doc["groups"].as_vec().unwrap() {
        for r in g["rules"].as_vec().unwrap() {
            let name = r["alert"].as_str().unwrap().to_string();
            let mut a = BTreeMap::new();
            if let Yaml::Hash(h) = &r["annotations"] {
                for (k, v) in h {
                    a.insert(
                        k.as_str().unwrap().to_string(),
                        v.as_str().unwrap().to_string(),
                    );
                }
            }
            out.insert(name, a);
        }
    }
    out
}

/// An annotation as Prometheus renders it for an alert with `labels`: the rules template only
/// `{{ $labels.X }}`, which this checks.
fn render(template: &str, labels: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find("}}").expect("closed template") + at;
        let inner = rest[at + 2..end].trim();
        let key = inner.strip_prefix("$labels.").unwrap_or_else(|| {
            panic!(
                "the rules template {inner}: only $labels.X renders the same in every notification"
            )
        });
        out.push_str(labels.get(key).map_or("", String::as_str));
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_shipped_alerts_fire_on_their_mechanisms_and_only_there() {
    let which = std::process::Command::new("promtool")
        .arg("--version")
        .output();
    if which.is_err() {
        eprintln!("SKIPPED alert rules: no promtool (apt install prometheus)");
        return;
    }
    let root = common::workspace_root();
    let rules = root.join("deploy/prometheus/jitterscope-alerts.yml");
    let notes = annotations(&rules);
    assert!(notes.len() >= 7, "{notes:?}");
    let mut tests = Vec::new();
    let mut fired_somewhere = std::collections::BTreeSet::new();
    for (scenario, want) in CASES {
        let (series, n) = recorded(&root.join("tests/fixtures/diagnose").join(scenario));
        assert!(n >= 5, "{scenario}: {n} seconds");
        for name in READ.iter().filter(|r| !r.contains("throttled")) {
            assert!(
                series.keys().any(|k| k.starts_with(&format!("{name}{{"))),
                "{scenario} has no {name}: {:?}",
                series.keys().collect::<Vec<_>>()
            );
        }
        let input: Vec<serde_json::Value> = series
            .iter()
            .map(|(name, vals)| {
                let mut vals = vals.clone();
                vals.resize(n, None);
                let text: Vec<String> = (0..SECONDS)
                    .map(|t| vals[t % n].map_or("_".to_string(), |v| format!("{v}")))
                    .collect();
                serde_json::json!({"series": name, "values": text.join(" ")})
            })
            .collect();
        let mut alerts = Vec::new();
        for (alert, ann) in &notes {
            let exp: Vec<serde_json::Value> = want
                .iter()
                .filter(|(a, _)| a == alert)
                .map(|(_, extra)| {
                    let mut labels: BTreeMap<String, String> = BTreeMap::new();
                    labels.insert("host".into(), "lab".into());
                    labels.insert("severity".into(), "warning".into());
                    for (k, v) in extra.iter() {
                        labels.insert(k.to_string(), v.to_string());
                    }
                    let rendered: BTreeMap<&String, String> =
                        ann.iter().map(|(k, t)| (k, render(t, &labels))).collect();
                    serde_json::json!({"exp_labels": labels, "exp_annotations": rendered})
                })
                .collect();
            if !exp.is_empty() {
                fired_somewhere.insert(alert.clone());
            }
            alerts.push(serde_json::json!({
                "eval_time": format!("{}s", SECONDS - 1),
                "alertname": alert,
                "exp_alerts": exp,
            }));
        }
        tests.push(serde_json::json!({
            "name": scenario,
            "interval": "1s",
            "input_series": input,
            "alert_rule_test": alerts,
        }));
    }
    // Every mechanism alert fires on some recorded scenario (the recorder's own health alerts
    // have no lab scenario that breaks the recorder; they are held quiet on all of them).
    for a in notes
        .keys()
        .filter(|a| !a.contains("Samples") && !a.contains("Ticks") && !a.contains("Stale"))
    {
        assert!(fired_somewhere.contains(a), "{a} fires on no scenario");
    }
    let dir = tempfile::tempdir().unwrap();
    let test = dir.path().join("alerts_test.yml");
    // JSON is YAML: promtool reads it as its test file.
    let doc = serde_json::json!({
        "rule_files": [rules.to_str().unwrap()],
        "evaluation_interval": "15s",
        "tests": tests,
    });
    std::fs::write(&test, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let o = std::process::Command::new("promtool")
        .args(["test", "rules"])
        .arg(&test)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
