//! The terminal loop, and the `--json-once` snapshot for scripts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use serde_json::json;

use crate::analysis::{self, Worker};
use crate::app::{App, Findings};

/// Whether the terminal on standard input hung up (closed pty, killed tmux pane): then every
/// read returns end-of-file at once and the loop must end rather than spin.
fn terminal_gone() -> bool {
    let mut p = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// Runs the screen until `q`, Ctrl-C, `stop` (the caller's SIGTERM/SIGINT flag) or a closed
/// terminal. SIGHUP is left at its default, ending the process: its terminal is gone, so there
/// is nothing to restore, and a handled hang-up left crossterm reading end-of-file forever.
pub fn run(mut app: App, stop: &AtomicBool) -> Result<()> {
    let worker = match app_store(&app) {
        Some(dir) => Some(Worker::start(dir).context("cannot start the analysis thread")?),
        None => None,
    };
    let mut term = ratatui::try_init().context("cannot set up the terminal")?;
    let r = event_loop(&mut app, &mut term, worker.as_ref(), stop);
    ratatui::restore();
    r
}

fn app_store(app: &App) -> Option<std::path::PathBuf> {
    app.store_dir().map(|p| p.to_path_buf())
}

fn event_loop(
    app: &mut App,
    term: &mut ratatui::DefaultTerminal,
    worker: Option<&Worker>,
    stop: &AtomicBool,
) -> Result<()> {
    while !stop.load(Ordering::SeqCst) && !app.quit {
        app.tick()?;
        if let Some(w) = worker {
            for a in app.asks() {
                w.ask(a);
            }
            for a in w.answers() {
                app.apply(a);
            }
        }
        term.draw(|f| crate::render::draw(f, app, jitterscope_model::sample::wall_ns()))?;
        if terminal_gone() {
            break;
        }
        let wait = app.due_in().min(Duration::from_millis(250));
        if event::poll(wait)? {
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => app.key(k)?,
                _ => {} // a resize redraws on the next turn
            }
        }
    }
    Ok(())
}

/// The shown sample as JSON: the snapshot (processes and cgroups as the panels order them,
/// at most `limit` each), the episodes near it and the findings of its window. Episodes and
/// findings are computed here, synchronously, for a store.
pub fn json_once(app: &mut App, limit: usize) -> Result<serde_json::Value> {
    let Some(snap) = app.snapshot.clone() else {
        anyhow::bail!("no sample to show ({})", app.describe());
    };
    if let Some(dir) = app_store(app) {
        const HOUR: i64 = 3_600_000_000_000;
        let t = snap.ts_ns;
        match analysis::events(&dir, t - HOUR, t + HOUR) {
            Ok(ev) => {
                app.events = ev;
                app.events_note = None;
            }
            Err(e) => app.events_note = Some(e),
        }
        let w = analysis::findings_window(t, &app.events);
        app.findings_window = Some(w);
        app.findings = Findings::Ready(analysis::findings(&dir, w.0, w.1));
    }
    let procs: Vec<_> = app.processes().into_iter().take(limit).cloned().collect();
    let cgroups: Vec<_> = app.cgroups().into_iter().take(limit).cloned().collect();
    let mut s = serde_json::to_value(&snap)?;
    s["processes"] = serde_json::to_value(procs)?;
    s["cgroups"] = serde_json::to_value(cgroups)?;
    let events: Vec<_> = app
        .events_near()
        .into_iter()
        .map(|(e, rel)| {
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["relation"] = json!(format!("{rel:?}").to_lowercase());
            v
        })
        .collect();
    let findings = match &app.findings {
        Findings::Ready(Ok(f)) => json!(f),
        Findings::Ready(Err(e)) => json!({ "error": e }),
        Findings::Unavailable(why) => json!({ "unavailable": why }),
        Findings::Pending => json!(null),
    };
    Ok(json!({
        "source": app.describe(),
        "sort": app.sort,
        "filter": app.filter,
        "snapshot": s,
        "events": events,
        "events_note": app.events_note,
        "findings_window": app.findings_window.map(|(f, t)| json!({
            "from": jitterscope_model::time::rfc3339(f),
            "to": jitterscope_model::time::rfc3339(t),
        })),
        "findings": findings,
    }))
}
