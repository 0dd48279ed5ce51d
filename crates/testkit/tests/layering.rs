//! The workspace's crates in layers: what the recorder writes to the store (the collectors, the
//! codec, the store, the online detection) depends on no analysis crate. Read from each
//! crate's `Cargo.toml` `[dependencies]` (dev-dependencies are tests' business), followed
//! transitively.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The analysis: rules and diagnosis, profiles named and folded, leak analysis, and what
/// shows them.
const ANALYSIS: &[&str] = &[
    "jitterscope-diagnose",
    "jitterscope-profile",
    "jitterscope-memleak",
    "jitterscope-views",
    "jitterscope-web",
];

/// What `record` needs to collect a sample (the /proc readers and the tracers), write it and
/// its signals lane, and what `store check --repair` needs to rebuild one. `record` also uses
/// jitterscope-profile, whose sampler names frames as it captures them (so names outlive the
/// processes), and jitterscope-fleet, whose ClickHouse exporter diagnoses closed episodes in
/// a worker process: those are analysis by design, and not in this list.
const RECORDING: &[&str] = &[
    "jitterscope-sources",
    "jitterscope-model",
    "jitterscope-store",
    "jitterscope-detect",
    "jitterscope-bpf",
];

/// Each workspace crate's workspace dependencies, by package name.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&crates).unwrap() {
        let manifest = e.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{}: no package name", manifest.display()))
            .to_string();
        let mut deps = BTreeSet::new();
        let mut section = "";
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line;
                continue;
            }
            if section == "[dependencies]" {
                if let Some(dep) = line.split(['.', ' ', '=']).next() {
                    if dep.starts_with("jitterscope-") {
                        deps.insert(dep.to_string());
                    }
                }
            }
        }
        out.insert(name, deps);
    }
    out
}

fn closure(g: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(c) = todo.pop() {
        for d in g.get(&c).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn what_the_recorder_writes_depends_on_no_analysis_crate() {
    let g = graph();
    for c in RECORDING {
        assert!(g.contains_key(*c), "{c} is not a workspace crate");
        let bad: Vec<String> = closure(&g, c)
            .into_iter()
            .filter(|d| ANALYSIS.contains(&d.as_str()))
            .collect();
        assert!(bad.is_empty(), "{c} depends on {bad:?}");
    }
    // The parser sees the dependencies it must: a test of the test.
    assert!(closure(&g, "jitterscope-diagnose").contains("jitterscope-detect"));
}

/// The recorder's own code takes its online detection from the recording layer, not from the
/// analysis (`events` re-exports the same type, which made the dependency easy to miss).
#[test]
fn record_and_repair_detect_through_the_recording_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/src");
    for f in ["record.rs", "store.rs"] {
        let text = std::fs::read_to_string(src.join(f)).unwrap();
        assert!(text.contains("jitterscope_detect::"), "{f}");
        assert!(
            !text.contains("jitterscope_diagnose::events::Online"),
            "{f}"
        );
    }
}
