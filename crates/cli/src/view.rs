//! `jitterscope top` and `jitterscope replay`: the terminal views (crates/views).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use jitterscope_model::sample::HostInfo;
use jitterscope_model::sources::collectors;
use jitterscope_model::sources::CollectConfig;
use jitterscope_sources::Root;
use jitterscope_store::Reader;
use jitterscope_views::app::{App, SortKey};
use jitterscope_views::source::{LiveSource, Source, StoreSource};

use crate::timearg::{parse_duration, parse_time};

/// Options both views share.
#[derive(Args, Debug)]
pub struct ViewArgs {
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print the shown sample once as JSON (header values, processes and cgroups in panel
    /// order, episodes near it, findings of its window) and exit.
    #[arg(long)]
    json_once: bool,
    /// Rows of processes and of cgroups in --json-once.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Sort processes by: cpu, sys, rss, rss-growth, majflt, madvise, lookups.
    #[arg(long, default_value = "cpu", value_parser = parse_sort)]
    sort: SortKey,
    /// Show only processes and cgroups whose name, command, cgroup or pid contains this.
    #[arg(long)]
    filter: Option<String>,
}

/// Arguments of `top`.
#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    view: ViewArgs,
    /// Collect here instead of following a recorder's store.
    #[arg(long)]
    direct: bool,
    /// Sampling interval of direct collection.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Direct collection: run no BPF tracer (run-queue latency, reclaim stalls, madvise and
    /// look-up columns then show `-`).
    #[arg(long)]
    no_tracers: bool,
}

/// Arguments of `replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    view: ViewArgs,
    /// Start at this time (RFC 3339, epoch seconds, HH:MM:SS, 'now', '-10m', '10m ago') [default: the newest
    /// sample].
    #[arg(long)]
    at: Option<String>,
}

fn parse_sort(s: &str) -> Result<SortKey, String> {
    Ok(match s {
        "cpu" => SortKey::Cpu,
        "sys" => SortKey::Sys,
        "rss" => SortKey::Rss,
        "rss-growth" => SortKey::RssGrowth,
        "majflt" => SortKey::Majflt,
        "madvise" => SortKey::Madvise,
        "lookups" => SortKey::Lookups,
        _ => {
            return Err(format!(
                "unknown sort key {s:?} (cpu, sys, rss, rss-growth, majflt, madvise, lookups)"
            ))
        }
    })
}

fn parse_now(s: &str) -> Result<i64, String> {
    parse_time(s, chrono::Utc::now())
}

fn finish(mut app: App, v: ViewArgs) -> Result<()> {
    app.sort = v.sort;
    app.filter = v.filter.unwrap_or_default();
    if v.json_once {
        let out = jitterscope_views::term::json_once(&mut app, v.limit)?;
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::jsonout::versioned(out))?
        );
        return Ok(());
    }
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(1) } == 0 {
        bail!("standard output is not a terminal (use --json-once for scripts)");
    }
    crate::stop_signals::install();
    jitterscope_views::term::run(app, &crate::stop_signals::STOP)
}

/// Whether a recorder is writing to `dir`: its newest record is at most a few seconds old.
fn recorder_running(dir: &std::path::Path) -> bool {
    let Ok(r) = Reader::open(dir) else {
        return false;
    };
    let Ok(Some(ts)) = r.latest_ts() else {
        return false;
    };
    let now = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0);
    // Covers intervals up to a few seconds; a recorder at 1 min intervals is better replayed.
    now - ts < 5_000_000_000
}

/// Runs `top`.
pub fn run_top(a: TopArgs) -> Result<()> {
    if a.interval < Duration::from_millis(100) || a.interval > Duration::from_secs(60) {
        bail!("--interval must be between 100ms and 60s");
    }
    let dir = crate::store_dir(a.view.dir.clone());
    let source: Box<dyn Source> = if !a.direct && dir.is_dir() && recorder_running(&dir) {
        Box::new(StoreSource::open(&dir, true)?)
    } else {
        Box::new(live_source(a.interval, a.no_tracers))
    };
    let mut app = App::new(source, "top", parse_now);
    // Direct collection needs two samples before rates mean anything.
    if app.store_dir().is_none() {
        app.tick()?;
        std::thread::sleep(a.interval);
        app.tick()?;
    }
    app.start(None)?;
    finish(app, a.view)
}

fn live_source(interval: Duration, no_tracers: bool) -> LiveSource {
    let root = Root::new("/");
    let mut set = collectors(&root, &CollectConfig::default());
    let mut what = "no BPF".to_string();
    if !no_tracers && jitterscope_model::caps::can_trace() {
        let all: Vec<_> = jitterscope_bpf::Name::all().collect();
        let (c, started) = jitterscope_bpf::TracerCollector::start_on_demand(&root, &all);
        let up = jitterscope_bpf::running(&started);
        if !up.is_empty() {
            what = format!("BPF {}", up.join(","));
            set.push(Box::new(c));
        }
    }
    LiveSource::new(set, HostInfo::read(&root), interval, what)
}

/// Runs `replay`.
pub fn run_replay(a: ReplayArgs) -> Result<()> {
    let dir = crate::store_dir(a.view.dir.clone());
    if !dir.is_dir() {
        bail!(
            "no store at {} (record with `jitterscope record --dir {}`)",
            dir.display(),
            dir.display()
        );
    }
    let at = match &a.at {
        Some(t) => Some(parse_now(t).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let source = StoreSource::open(&dir, false)?;
    if source.bounds()?.is_none() {
        bail!("the store at {} holds no samples", dir.display());
    }
    let mut app = App::new(Box::new(source), "replay", parse_now);
    app.start(at)?;
    finish(app, a.view)
}
