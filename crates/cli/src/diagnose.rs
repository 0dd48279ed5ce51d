//! `jitterscope diagnose`: the findings of a recorded window, mechanisms first, by confidence.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use jitterscope_diagnose::{diagnose, rules::RULES, text, Options};

use crate::timearg::{after, before, parse_duration, parse_time, Window};

/// Arguments of `diagnose`.
#[derive(Args, Debug)]
pub struct DiagnoseArgs {
    /// Diagnose the minute around this time (30 s either side).
    #[arg(long, conflicts_with_all = ["from", "to", "since", "event"])]
    at: Option<String>,
    /// Diagnose an episode listed by `jitterscope events` (its id), with 10 s either side.
    #[arg(long, conflicts_with_all = ["from", "to", "since"])]
    event: Option<String>,
    // --since/--from/--to; without --from or --since, the last 5 minutes.
    #[command(flatten)]
    window: Window,
    /// How far before the window the baseline reaches.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    baseline: std::time::Duration,
    /// Print the report as one JSON document (docs/schema/diagnose.schema.json).
    #[arg(long)]
    json: bool,
    /// List the rules instead.
    #[arg(long)]
    list_rules: bool,
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope].
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Runs `diagnose`.
pub fn run(a: DiagnoseArgs) -> Result<()> {
    if a.list_rules {
        for r in RULES {
            println!(
                "{:<26} {}{}",
                r.id,
                r.summary,
                if r.mechanism { "" } else { " (resource)" }
            );
        }
        return Ok(());
    }
    let now = chrono::Utc::now();
    let (from, to) = match &a.at {
        _ if a.event.is_some() => {
            let id = a.event.as_deref().unwrap_or_default();
            let Some((f, t)) = jitterscope_diagnose::events::parse_id(id) else {
                bail!("--event {id:?} is not an event id (`<kind>@<start epoch s>+<seconds>`, as `jitterscope events` prints)");
            };
            let margin = std::time::Duration::from_secs(10);
            (
                before(f, margin, "--event").map_err(anyhow::Error::msg)?,
                after(t, margin, "--event").map_err(anyhow::Error::msg)?,
            )
        }
        Some(t) => {
            let t = parse_time(t, now).map_err(anyhow::Error::msg)?;
            let half = std::time::Duration::from_secs(30);
            (
                before(t, half, "--at").map_err(anyhow::Error::msg)?,
                after(t, half, "--at").map_err(anyhow::Error::msg)?,
            )
        }
        None => a
            .window
            .resolve(std::time::Duration::from_secs(300), now)
            .map_err(anyhow::Error::msg)?,
    };
    let lookback_ns = from - before(from, a.baseline, "--baseline").map_err(anyhow::Error::msg)?;
    let dir = crate::existing_store(a.dir, from, to)?;
    let report = diagnose(&dir, from, to, Options { lookback_ns })?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::jsonout::report_with_labels(&report)?)?
        );
    } else {
        print!("{}", text::render(&report));
    }
    if report.samples == 0 {
        let mut n = crate::nodata::no_samples(&dir, from, to);
        // A window lost to damage: the report's note says what was lost.
        if let Some(lost) = report.damaged.note() {
            n.0 = format!("{}; {lost}", n.0);
        }
        return Err(n.into());
    }
    Ok(())
}
