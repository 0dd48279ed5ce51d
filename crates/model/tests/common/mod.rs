//! What the model's integration tests share.

use std::path::PathBuf;

/// The recorded lab stores (`tests/fixtures/diagnose/<scenario>/`), in name order.
pub fn lab_stores() -> Vec<PathBuf> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/diagnose");
    let mut stores: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    stores.sort();
    assert!(stores.len() >= 10, "lab stores missing: {stores:?}");
    stores
}
