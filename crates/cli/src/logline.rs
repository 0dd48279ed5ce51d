//! The recorder's log lines, for journald or a log shipper: `jitterscope: <message>` by default,
//! or one JSON object per line with `--log-format json` (time, level, message), which log
//! pipelines parse without a grok pattern. The fatal error `main` prints follows the same
//! choice, so a JSON pipeline also sees why the recorder stopped.
//!
//! When standard error is journald's stream (systemd sets `JOURNAL_STREAM` to its device and
//! inode), text lines start with the syslog priority in sd-daemon's `<N>` form, which journald
//! strips and stores as the line's priority: `journalctl -p warning -u jitterscope` then shows
//! the warnings and errors alone. JSON lines carry their level in the object instead.

use std::sync::atomic::{AtomicBool, Ordering};

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// `jitterscope: <message>`
    #[default]
    Text,
    /// `{"ts":"<RFC 3339>","level":"info|warn|error","msg":"<message>","schema_version":1}`
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

static JSON: AtomicBool = AtomicBool::new(false);
/// Whether stderr is journald's stream, decided once.
static JOURNAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

impl Level {
    /// The syslog priority journald stores (`<3>` err, `<4>` warning, `<6>` info).
    fn priority(self) -> u8 {
        match self {
            Level::Error => 3,
            Level::Warn => 4,
            Level::Info => 6,
        }
    }
}

/// Whether `JOURNAL_STREAM` (`<device>:<inode>`) names the file open as standard error. The
/// variable is inherited by children whose stderr goes elsewhere (a pipe to a test, a file),
/// so the variable alone is not enough.
fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    // SAFETY: fstat of fd 2 into a zeroed struct of the right type.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(2, &mut st) } != 0 {
        return false;
    }
    st.st_dev as u64 == dev && st.st_ino as u64 == ino
}

pub fn set_format(f: Format) {
    JSON.store(f == Format::Json, Ordering::Relaxed);
}

/// One log line (without the newline) at wall-clock time `ts_ns`; `journal`: text lines start
/// with the priority journald reads.
pub fn line(format: Format, level: Level, ts_ns: i64, msg: &str, journal: bool) -> String {
    let msg = msg.replace('\n', " ");
    match format {
        Format::Text => {
            let prefix = if journal {
                format!("<{}>", level.priority())
            } else {
                String::new()
            };
            match level {
                Level::Error => format!("{prefix}jitterscope: error: {msg}"),
                Level::Info | Level::Warn => format!("{prefix}jitterscope: {msg}"),
            }
        }
        Format::Json => serde_json::json!({
            "ts": jitterscope_model::time::rfc3339(ts_ns),
            "level": match level {
                Level::Info => "info",
                Level::Warn => "warn",
                Level::Error => "error",
            },
            "msg": msg,
            "schema_version": crate::jsonout::SCHEMA_VERSION,
        })
        .to_string(),
    }
}

/// Writes one line to stderr in the chosen format.
pub fn emit(level: Level, msg: &str) {
    let f = if JSON.load(Ordering::Relaxed) {
        Format::Json
    } else {
        Format::Text
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let journal = *JOURNAL.get_or_init(stderr_is_journal);
    // Never a panic: the recorder and `serve` go on when whatever read their stderr is gone.
    errln!("{}", line(f, level, now, msg, journal));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_unchanged_and_json_parses() {
        assert_eq!(
            line(Format::Text, Level::Warn, 0, "tracer x: not running", false),
            "jitterscope: tracer x: not running"
        );
        assert_eq!(
            line(Format::Text, Level::Error, 0, "no store", false),
            "jitterscope: error: no store"
        );
        let l = line(
            Format::Json,
            Level::Error,
            1_795_716_437_000_000_000,
            "a \"b\"\nc",
            true,
        );
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["level"], "error");
        assert_eq!(v["msg"], "a \"b\" c");
        assert!(v["ts"].as_str().unwrap().starts_with("2026-11-26T"), "{v}");
        assert!(!l.contains('\n'));
        assert!(
            l.starts_with('{'),
            "JSON lines carry no priority prefix: {l}"
        );
    }

    #[test]
    fn journald_reads_the_priority() {
        for (level, want) in [
            (Level::Error, "<3>jitterscope: error: x"),
            (Level::Warn, "<4>jitterscope: x"),
            (Level::Info, "<6>jitterscope: x"),
        ] {
            assert_eq!(line(Format::Text, level, 0, "x", true), want);
        }
    }

    #[test]
    fn a_journal_stream_of_another_file_is_not_ours() {
        // The test's stderr is a pipe or a terminal, never the inode 1 of device 1.
        std::env::set_var("JOURNAL_STREAM", "1:1");
        assert!(!stderr_is_journal());
        std::env::set_var("JOURNAL_STREAM", "garbage");
        assert!(!stderr_is_journal());
        std::env::remove_var("JOURNAL_STREAM");
    }
}
