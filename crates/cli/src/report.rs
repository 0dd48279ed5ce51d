//! `jitterscope report`: an incident report, one self-contained HTML file of an episode or a
//! window (the web UI's view of it, with its data inside) that opens offline in a browser.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use jitterscope_web::report::{self, Scope};

use crate::timearg::Window;

/// Arguments of `report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The episode (an id `jitterscope events` prints), with 10 s either side.
    #[arg(long, conflicts_with_all = ["from", "to", "since"])]
    event: Option<String>,
    // --since/--from/--to; without --event, --from or --since, the last 5 minutes.
    #[command(flatten)]
    window: Window,
    /// Write the report here ('-': standard output) [default: the name the report chooses,
    /// jitterscope-<host>-<episode>.html, in the current directory].
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope].
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Runs `report`.
pub fn run(a: ReportArgs) -> Result<()> {
    let scope = match &a.event {
        Some(id) => Scope::of_event(id).with_context(|| {
            format!("--event {id:?} is not an event id (`<kind>@<start epoch s>+<seconds>`, as `jitterscope events` prints)")
        })?,
        None => {
            let (from, to) = a
                .window
                .resolve(std::time::Duration::from_secs(300), chrono::Utc::now())
                .map_err(anyhow::Error::msg)?;
            Scope {
                from,
                to,
                event: None,
            }
        }
    };
    let dir = crate::existing_store(a.dir, scope.from, scope.to)?;
    let data = report::data(&dir, &scope).map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    if data["findings"]["samples"].as_u64() == Some(0) {
        bail!(
            "the store at {} holds no samples from {} to {}",
            dir.display(),
            jitterscope_model::time::rfc3339(scope.from),
            jitterscope_model::time::rfc3339(scope.to)
        );
    }
    let page = report::html(&data);
    let out = a
        .output
        .unwrap_or_else(|| PathBuf::from(report::file_name(&data)));
    if out.as_os_str() == "-" {
        std::io::stdout().write_all(page.as_bytes())?;
        return Ok(());
    }
    // Written whole or not at all: a half-written report would open as a broken page.
    let tmp = out.with_extension("html.tmp");
    std::fs::write(&tmp, &page).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &out).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!(
        "{}: {} KiB, {} findings",
        out.display(),
        page.len() / 1024,
        data["findings"]["findings"]
            .as_array()
            .map_or(0, |f| f.len())
    );
    Ok(())
}
