//! What the tests that rewrite a lab recording share: where the recordings are, the window
//! `lab check` diagnosed each over, and the diagnosis over it.

use std::path::{Path, PathBuf};

use jitterscope_diagnose::{diagnose, Options, Report};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/diagnose")
}

/// A scenario's window as `lab check` diagnosed it: (baseline start, from, to).
pub fn windows(scenario: &str) -> (i64, i64, i64) {
    let check: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join(format!("{scenario}.json"))).unwrap(),
    )
    .unwrap();
    let w = &check["windows"];
    (
        w["baseline"][0].as_i64().unwrap(),
        w["active"][0].as_i64().unwrap(),
        w["active"][1].as_i64().unwrap(),
    )
}

/// The diagnosis of `[from, to]` in the store at `dir`, reading the baseline from `base`.
pub fn report(dir: &Path, (base, from, to): (i64, i64, i64)) -> Report {
    diagnose(
        dir,
        from,
        to,
        Options {
            lookback_ns: from - base + 1_000_000_000,
        },
    )
    .unwrap()
}
