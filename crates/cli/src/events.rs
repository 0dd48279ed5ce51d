//! `jitterscope events`: the jitter episodes of a recorded range.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use jitterscope_model::time::rfc3339;

use jitterscope_diagnose::events::{LEAK_KIND, LEAK_WHAT, SIGNALS};

use crate::timearg::Window;

/// Arguments of `events`.
#[derive(Args, Debug)]
pub struct EventsArgs {
    // --since/--from/--to; without --from or --since, the last hour.
    #[command(flatten)]
    window: Window,
    /// Print JSON Lines: one episode per line (docs/schema/events.schema.json).
    #[arg(long)]
    json: bool,
    /// Only episodes of this kind (`--list-kinds` lists them: `throttling`, `reclaim-stalls`...).
    #[arg(long, value_name = "KIND", value_parser = episode_kind)]
    kind: Option<String>,
    /// List the episode kinds instead, with the signal each watches.
    #[arg(long)]
    list_kinds: bool,
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope].
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Runs `events`.
pub fn run(a: EventsArgs) -> Result<()> {
    if a.list_kinds {
        for s in SIGNALS {
            outln!("{:<18} {} ({})", s.kind, s.what, s.metric.name);
        }
        outln!(
            "{:<18} {} ({}, offline only: not marked by the recorder, not exported to a fleet)",
            LEAK_KIND,
            LEAK_WHAT,
            jitterscope_model::signals::RSS.name
        );
        return Ok(());
    }
    let now = chrono::Utc::now();
    let (from, to) = a
        .window
        .resolve(std::time::Duration::from_secs(3600), now)
        .map_err(anyhow::Error::msg)?;
    let dir = crate::existing_store(a.dir, from, to)?;
    let (mut ev, damaged) = jitterscope_diagnose::events(&dir, from, to)?;
    if let Some(k) = &a.kind {
        ev.retain(|e| e.kind == k);
    }
    if let Some(note) = damaged.note() {
        eprintln!("jitterscope: {note}");
    }
    // No episode in a window without samples is no answer, not a quiet host.
    let nothing = || {
        (ev.is_empty() && !crate::nodata::has_samples(&dir, from, to))
            .then(|| crate::nodata::no_samples(&dir, from, to))
    };
    if a.json {
        // JSON Lines: one episode per line (docs/JSON.md).
        for e in &ev {
            let mut v = crate::jsonout::versioned_of(e)?;
            v["labels"] = crate::jsonout::series_labels(&e.series).into();
            println!("{v}");
        }
        return nothing().map_or(Ok(()), |n| Err(n.into()));
    }
    if ev.is_empty() {
        return match nothing() {
            Some(n) => Err(n.into()),
            None => {
                println!("no episodes from {} to {}", rfc3339(from), rfc3339(to));
                Ok(())
            }
        };
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

/// An episode kind `events` knows (the recorder's signals and the offline leak trends).
fn episode_kind(s: &str) -> Result<String, String> {
    if s == LEAK_KIND {
        return Ok(s.to_string());
    }
    marked_kind(s)
}

/// An episode kind the recorder marks in the store, and so a fleet receives: one of its
/// signals. The message lists them, so a guess like `cpu.throttle` is answered on the spot.
pub(crate) fn marked_kind(s: &str) -> Result<String, String> {
    if SIGNALS.iter().any(|x| x.kind == s) {
        return Ok(s.to_string());
    }
    let known: Vec<&str> = SIGNALS.iter().map(|x| x.kind).collect();
    Err(format!(
        "unknown episode kind {s:?}; the kinds are {} (`jitterscope events --list-kinds` says what each watches)",
        known.join(", ")
    ))
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}
