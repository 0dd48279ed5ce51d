//! A source file's name says what it holds, and one name means one thing across the
//! workspace: `signals.rs` was POSIX signals in the CLI and episode signals in the model, and
//! a reader of either had to open the file to learn which. This test fails on a file name that
//! appears in more than one place under the crates' `src` directories unless [`SHARED`] lists
//! exactly those places with the one subject they have in common.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Names kept in several places, with the paths (under `crates/`) and what they share. Each
/// is one subject at different layers, where the directory already says the layer.
const SHARED: &[(&str, &[&str], &str)] = &[
    (
        "process.rs",
        &["model/src/metrics/process.rs", "sources/src/process.rs"],
        "a source's files (sources) and the metrics derived from them (model/metrics)",
    ),
    (
        "profile.rs",
        &["model/src/metrics/profile.rs", "model/src/profile.rs"],
        "the stack sampler's slice (model) and the metrics derived from it (model/metrics)",
    ),
    (
        "lookups.rs",
        &["bpf/src/lookups.rs", "diagnose/src/rules/lookups.rs"],
        "a mechanism's tracer (bpf) and its rule (diagnose/rules)",
    ),
    (
        "reclaim.rs",
        &["bpf/src/reclaim.rs", "diagnose/src/rules/reclaim.rs"],
        "a mechanism's tracer (bpf) and its rule (diagnose/rules)",
    ),
    (
        "shrinker.rs",
        &["bpf/src/shrinker.rs", "diagnose/src/rules/shrinker.rs"],
        "a mechanism's tracer (bpf) and its rule (diagnose/rules)",
    ),
    (
        "tlb.rs",
        &["bpf/src/tlb.rs", "diagnose/src/rules/tlb.rs"],
        "a mechanism's tracer (bpf) and its rule (diagnose/rules)",
    ),
    (
        "mmaplock.rs",
        &["bpf/src/mmaplock.rs", "diagnose/src/rules/mmaplock.rs"],
        "a mechanism's tracer (bpf) and its rule (diagnose/rules)",
    ),
    (
        "dirty.rs",
        &["bpf/src/dirty.rs", "diagnose/src/rules/dirty.rs"],
        "a mechanism's tracer (bpf) and its rule (diagnose/rules)",
    ),
    (
        "reader.rs",
        &[
            "sources/src/cgroup/reader.rs",
            "sources/src/system/reader.rs",
            "store/src/reader.rs",
        ],
        "the reader of what its directory holds (cgroups, system files, store records)",
    ),
    (
        "tracers.rs",
        &["cli/src/tracers.rs", "model/src/tracers.rs"],
        "the tracers: what they saw (model) and the `tracers` command (cli, one file per command)",
    ),
    (
        "report.rs",
        &["cli/src/report.rs", "web/src/report.rs"],
        "the incident report (web) and the `report` command (cli, one file per command)",
    ),
    (
        "fleet.rs",
        &["cli/src/fleet.rs", "web/src/fleet.rs"],
        "the fleet's questions as a page (web) and as the `fleet` command (cli)",
    ),
    (
        "names.rs",
        &["sources/src/cgroup/names.rs", "web/src/names.rs"],
        "the names people know cgroups by: read from the runtimes (sources), shown (web)",
    ),
];

/// Every `.rs` file under `dir`, as paths relative to `base`.
fn rs_files(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(base, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.strip_prefix(base).unwrap().to_path_buf());
        }
    }
}

/// Each file name under the crates' `src` directories and where it is, for names in more
/// than one place. `lib.rs`, `main.rs` and `mod.rs` are Rust's names, not ours.
fn repeated() -> BTreeMap<String, BTreeSet<String>> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for e in std::fs::read_dir(&crates).unwrap() {
        let src = e.unwrap().path().join("src");
        if src.is_dir() {
            rs_files(&crates, &src, &mut files);
        }
    }
    let mut by_name: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if matches!(name.as_str(), "lib.rs" | "main.rs" | "mod.rs") {
            continue;
        }
        by_name
            .entry(name)
            .or_default()
            .insert(f.to_string_lossy().into_owned());
    }
    by_name.retain(|_, at| at.len() > 1);
    by_name
}

#[test]
fn a_file_name_means_one_thing() {
    let found = repeated();
    let mut wrong = Vec::new();
    for (name, at) in &found {
        match SHARED.iter().find(|(n, _, _)| n == name) {
            None => wrong.push(format!(
                "{name} is in {at:?}: rename the new one to say what it holds (or list it in \
                 SHARED with what the places have in common)"
            )),
            Some((_, listed, _)) => {
                let listed: BTreeSet<String> = listed.iter().map(|s| s.to_string()).collect();
                if &listed != at {
                    wrong.push(format!("{name} is in {at:?}; SHARED lists {listed:?}"));
                }
            }
        }
    }
    for (name, _, _) in SHARED {
        if !found.contains_key(*name) {
            wrong.push(format!(
                "{name} is no longer repeated: take it out of SHARED"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
