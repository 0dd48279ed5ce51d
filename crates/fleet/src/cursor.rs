//! Cursor files in the store directory: for each receiver URL, the newest record it accepted
//! (or that was given up on), so a restarted recorder resumes there and a run with another URL
//! (a test receiver, a typo) leaves the others' alone. One file per exporter
//! (`remote-write.json`, `clickhouse.json`).

use std::path::{Path, PathBuf};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Cursors {
    receivers: std::collections::BTreeMap<String, i64>,
}

/// The cursor file `name` of a store directory.
pub fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

fn load_all(dir: &Path, name: &str) -> Cursors {
    std::fs::read(path(dir, name))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// The cursor of `url` in file `name`; `None` when there is none or the file is unreadable.
pub fn load(dir: &Path, name: &str, url: &str) -> Option<i64> {
    load_all(dir, name).receivers.get(url).copied()
}

/// Sets the cursor of `url` in file `name` to `ts`, durably.
pub fn save(dir: &Path, name: &str, url: &str, ts: i64) -> std::io::Result<()> {
    use std::io::Write;
    let mut all = load_all(dir, name);
    all.receivers.insert(url.to_string(), ts);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(&all)?)?;
    // On disk before the rename: after a power cut the file is the old one or the new one,
    // never empty (an empty one would read as no cursor and skip the unsent gap).
    f.sync_all()?;
    std::fs::rename(&tmp, path(dir, name))
}
