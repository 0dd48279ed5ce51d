//! `jitterscope events`: the jitter episodes of a recorded range.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use jitterscope_model::time::rfc3339;

use crate::timearg::{before, parse_duration, parse_time};

/// Arguments of `events`.
#[derive(Args, Debug)]
pub struct EventsArgs {
    /// The range ending now.
    #[arg(long, default_value = "1h", value_parser = parse_duration, conflicts_with = "from")]
    since: std::time::Duration,
    /// Start of the range (RFC 3339, HH:MM:SS, '10m ago', epoch seconds).
    #[arg(long, requires = "to")]
    from: Option<String>,
    /// End of the range.
    #[arg(long, requires = "from")]
    to: Option<String>,
    /// Print JSON (one array of events).
    #[arg(long)]
    json: bool,
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope].
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Runs `events`.
pub fn run(a: EventsArgs) -> Result<()> {
    let now = chrono::Utc::now();
    let (from, to) = match (&a.from, &a.to) {
        (Some(f), Some(t)) => (
            parse_time(f, now).map_err(anyhow::Error::msg)?,
            parse_time(t, now).map_err(anyhow::Error::msg)?,
        ),
        _ => {
            let to = parse_time("now", now).map_err(anyhow::Error::msg)?;
            (
                before(to, a.since, "--since").map_err(anyhow::Error::msg)?,
                to,
            )
        }
    };
    let dir = crate::existing_store(a.dir, from, to)?;
    let (ev, damaged) = jitterscope_diagnose::events(&dir, from, to)?;
    if let Some(note) = damaged.note() {
        eprintln!("jitterscope: {note}");
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&ev)?);
        return Ok(());
    }
    if ev.is_empty() {
        println!("no episodes from {} to {}", rfc3339(from), rfc3339(to));
        return Ok(());
    }
    for e in &ev {
        println!(
            "{}  {:>4}s  {:<32} peak {} (baseline {}, threshold {})  {}  [{}]{}",
            e.from,
            (e.to_ns - e.from_ns) / 1_000_000_000,
            e.what,
            num(e.peak),
            num(e.baseline),
            num(e.threshold),
            e.series,
            e.id,
            if e.online { " live" } else { "" }
        );
    }
    let c = jitterscope_diagnose::events::counts(&ev);
    let summary: Vec<String> = c.iter().map(|(k, n)| format!("{n} {k}")).collect();
    println!(
        "{} episodes: {}; diagnose one with `jitterscope diagnose --event ID`",
        ev.len(),
        summary.join(", ")
    );
    Ok(())
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}
