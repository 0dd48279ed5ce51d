//! Cursor files in the store directory: for each receiver, the newest record it accepted (or
//! that was given up on), so a restarted recorder resumes there and a run with another URL
//! (a test receiver, a typo) leaves the others' alone. One file per exporter
//! (`remote-write.json`, `clickhouse.json`).
//!
//! A receiver is keyed by its credential-free identity (`url::identity`), never by a URL as
//! given: versions before it accepted passwords in URLs, and such a key kept an old password
//! on disk and lost its cursor when the password changed. A key of that kind is read under
//! its identity and replaced at the next save. The files are 0600: they say which engines
//! this host sends to, which is the recorder's business only.

use std::path::{Path, PathBuf};

use crate::url::identity;

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

/// The cursor of the receiver `url` names in file `name`; `None` when there is none or the
/// file is unreadable. Of keys written with credentials for the same receiver, the newest.
pub fn load(dir: &Path, name: &str, url: &str) -> Option<i64> {
    let id = identity(url);
    load_all(dir, name)
        .receivers
        .iter()
        .filter(|(k, _)| identity(k) == id)
        .map(|(_, ts)| *ts)
        .max()
}

/// Sets the cursor of the receiver `url` names in file `name` to `ts`, durably.
pub fn save(dir: &Path, name: &str, url: &str, ts: i64) -> std::io::Result<()> {
    // Several receivers' senders share the file: each reads, changes its own key and
    // replaces the file, which must not interleave (a lost update would send a receiver's
    // seconds again after a restart, or a shared temporary file would tear).
    static SAVING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = SAVING.lock().unwrap_or_else(|e| e.into_inner());
    let id = identity(url);
    let mut all = load_all(dir, name);
    all.receivers.retain(|k, _| identity(k) != id);
    all.receivers.insert(id, ts);
    write_private(dir, name, &serde_json::to_vec(&all)?)
}

/// Replaces the exporter's file `name` in the store directory by `bytes`, durably and
/// atomically, 0600 whatever the umask.
pub fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let tmp = dir.join(format!("{name}.tmp"));
    // A leftover temporary file of another mode is replaced, not reused with its mode.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)?;
    // On disk before the rename: after a power cut the file is the old one or the new one,
    // never empty (an empty cursor would read as none and skip the unsent gap).
    f.sync_all()?;
    std::fs::rename(&tmp, path(dir, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_password_change_keeps_the_cursor_and_leaves_no_password() {
        let t = tempfile::tempdir().unwrap();
        // As an older version wrote it: keyed by the URL with its password.
        std::fs::write(
            t.path().join("rw.json"),
            r#"{"receivers":{"http://u:old-secret@vm:8428/api/v1/write":42,"http://other:9/":7}}"#,
        )
        .unwrap();
        assert_eq!(
            load(t.path(), "rw.json", "http://vm:8428/api/v1/write"),
            Some(42)
        );
        save(t.path(), "rw.json", "http://vm:8428/api/v1/write", 43).unwrap();
        let text = std::fs::read_to_string(t.path().join("rw.json")).unwrap();
        assert!(!text.contains("old-secret"), "{text}");
        assert_eq!(
            load(t.path(), "rw.json", "http://vm:8428/api/v1/write"),
            Some(43)
        );
        assert_eq!(load(t.path(), "rw.json", "http://other:9/"), Some(7));
        let mode = std::fs::metadata(t.path().join("rw.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn receivers_saved_at_once_all_keep_their_cursors() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().to_path_buf();
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let d = d.clone();
                std::thread::spawn(move || {
                    for ts in 1..=50 {
                        save(&d, "rw.json", &format!("http://r{i}:9/api/v1/write"), ts).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for i in 0..4 {
            assert_eq!(
                load(&d, "rw.json", &format!("http://r{i}:9/api/v1/write")),
                Some(50)
            );
        }
    }
}
