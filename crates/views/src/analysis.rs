//! Episodes and findings of a store, computed off the screen's thread: diagnosing a window
//! takes a fraction of a second to seconds, which must not freeze the keys.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};

use jitterscope_diagnose::{Finding, Options};

use crate::source::EventRow;

/// The episodes of `(from, to]` in the store at `dir`.
pub fn events(dir: &Path, from: i64, to: i64) -> Result<Vec<EventRow>, String> {
    jitterscope_diagnose::events(dir, from, to)
        .map(|(ev, _)| ev.iter().map(EventRow::from).collect())
        .map_err(|e| format!("{e:#}"))
}

/// The findings of `(from, to]` in the store at `dir`, ranked as `diagnose` ranks them.
pub fn findings(dir: &Path, from: i64, to: i64) -> Result<Vec<Finding>, String> {
    jitterscope_diagnose::diagnose(dir, from, to, Options::default())
        .map(|r| r.findings)
        .map_err(|e| format!("{e:#}"))
}

/// The findings window for shown time `t`: the episode it falls in with 10 s either side (as
/// `diagnose --event`), else the minute around it (as `diagnose --at`), its centre rounded
/// down to 10 s. Diagnosing reads the ten minutes before the window too; without the rounding
/// a followed store would be diagnosed again every second.
pub fn findings_window(t: i64, events: &[EventRow]) -> (i64, i64) {
    const S: i64 = 1_000_000_000;
    let q = t - t.rem_euclid(10 * S);
    match events
        .iter()
        .filter(|e| e.from_ns <= t && t <= e.to_ns)
        .max_by_key(|e| e.from_ns)
    {
        Some(e) => (e.from_ns - 10 * S, e.to_ns + 10 * S),
        None => (q - 30 * S, q + 30 * S),
    }
}

/// A question for the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    Events(i64, i64),
    Findings(i64, i64),
}

/// Its answer.
#[derive(Debug, Clone)]
pub enum Answer {
    Events(i64, i64, Result<Vec<EventRow>, String>),
    Findings(i64, i64, Result<Vec<Finding>, String>),
}

/// A worker thread answering [`Ask`]s about one store, in order.
pub struct Worker {
    tx: Sender<Ask>,
    rx: Receiver<Answer>,
}

impl Worker {
    /// Starts the worker for the store at `dir`.
    pub fn start(dir: PathBuf) -> std::io::Result<Worker> {
        let (tx, asks) = channel::<Ask>();
        let (answers, rx) = channel::<Answer>();
        std::thread::Builder::new()
            .name("views-analysis".into())
            .spawn(move || {
                while let Ok(mut ask) = asks.recv() {
                    // Only the newest question of each kind matters once the screen moved on.
                    let mut later = Vec::new();
                    while let Ok(a) = asks.try_recv() {
                        later.push(a);
                    }
                    let mut pending = vec![ask];
                    for a in later {
                        match pending
                            .iter_mut()
                            .find(|p| std::mem::discriminant(*p) == std::mem::discriminant(&a))
                        {
                            Some(p) => *p = a,
                            None => pending.push(a),
                        }
                    }
                    for a in pending.drain(..) {
                        ask = a;
                        let ans = match ask {
                            Ask::Events(f, t) => Answer::Events(f, t, events(&dir, f, t)),
                            Ask::Findings(f, t) => Answer::Findings(f, t, findings(&dir, f, t)),
                        };
                        if answers.send(ans).is_err() {
                            return;
                        }
                    }
                }
            })?;
        Ok(Worker { tx, rx })
    }

    /// Queues a question.
    pub fn ask(&self, a: Ask) {
        let _ = self.tx.send(a);
    }

    /// Answers that arrived.
    pub fn answers(&self) -> Vec<Answer> {
        self.rx.try_iter().collect()
    }

    /// Waits for one answer (tests, `--json-once`).
    pub fn wait(&self) -> Option<Answer> {
        self.rx.recv().ok()
    }
}
