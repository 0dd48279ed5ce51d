//! The recorder's log lines, for journald or a log shipper: `jitterscope: <message>` by default,
//! or one JSON object per line with `--log-format json` (time, level, message), which log
//! pipelines parse without a grok pattern. The fatal error `main` prints follows the same
//! choice, so a JSON pipeline also sees why the recorder stopped.

use std::sync::atomic::{AtomicBool, Ordering};

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// `jitterscope: <message>`
    #[default]
    Text,
    /// `{"ts":"<RFC 3339>","level":"info|warn|error","msg":"<message>"}`
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

static JSON: AtomicBool = AtomicBool::new(false);

pub fn set_format(f: Format) {
    JSON.store(f == Format::Json, Ordering::Relaxed);
}

/// One log line (without the newline) at wall-clock time `ts_ns`.
pub fn line(format: Format, level: Level, ts_ns: i64, msg: &str) -> String {
    let msg = msg.replace('\n', " ");
    match format {
        Format::Text => match level {
            Level::Error => format!("jitterscope: error: {msg}"),
            Level::Info | Level::Warn => format!("jitterscope: {msg}"),
        },
        Format::Json => serde_json::json!({
            "ts": jitterscope_model::time::rfc3339(ts_ns),
            "level": match level {
                Level::Info => "info",
                Level::Warn => "warn",
                Level::Error => "error",
            },
            "msg": msg,
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
    eprintln!("{}", line(f, level, now, msg));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_unchanged_and_json_parses() {
        assert_eq!(
            line(Format::Text, Level::Warn, 0, "tracer x: not running"),
            "jitterscope: tracer x: not running"
        );
        assert_eq!(
            line(Format::Text, Level::Error, 0, "no store"),
            "jitterscope: error: no store"
        );
        let l = line(
            Format::Json,
            Level::Error,
            1_795_716_437_000_000_000,
            "a \"b\"\nc",
        );
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["level"], "error");
        assert_eq!(v["msg"], "a \"b\" c");
        assert!(v["ts"].as_str().unwrap().starts_with("2026-11-26T"), "{v}");
        assert!(!l.contains('\n'));
    }
}
