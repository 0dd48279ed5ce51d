//! The screen's state and its keys. No terminal here: tests drive an [`App`] with key events
//! and render it into ratatui's test backend.

use std::time::Instant;

use anyhow::Result;
use jitterscope_diagnose::Finding;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::analysis::{findings_window, Answer, Ask};
use crate::snapshot::{CgroupRow, ProcRow, Snapshot};
use crate::source::{Dir, EventRow, Frame, Source};

/// What the process panel is sorted by (descending; unknown values last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SortKey {
    Cpu,
    Sys,
    Rss,
    RssGrowth,
    Majflt,
    Madvise,
    Lookups,
}

impl SortKey {
    /// Every key with its letter and the column it sorts.
    pub const ALL: [(SortKey, char, &'static str); 7] = [
        (SortKey::Cpu, 'C', "CPU"),
        (SortKey::Sys, 'S', "SYS"),
        (SortKey::Rss, 'M', "RSS"),
        (SortKey::RssGrowth, 'G', "RGROW"),
        (SortKey::Majflt, 'F', "MAJF/s"),
        (SortKey::Madvise, 'A', "MADV/s"),
        (SortKey::Lookups, 'L', "ENOENT/s"),
    ];

    /// The column label.
    pub fn label(self) -> &'static str {
        SortKey::ALL
            .iter()
            .find(|k| k.0 == self)
            .map_or("", |k| k.2)
    }

    fn of(self, p: &ProcRow) -> Option<f64> {
        match self {
            SortKey::Cpu => p.cpu_pct,
            SortKey::Sys => p.sys_pct,
            SortKey::Rss => p.rss_bytes,
            SortKey::RssGrowth => p.rss_growth_bytes_per_s,
            SortKey::Majflt => p.majflt_per_s,
            SortKey::Madvise => p.madvise_per_s,
            SortKey::Lookups => p.enoent_per_s,
        }
    }
}

/// The panels below the header lines; Tab moves the focus, which gets the spare rows and the
/// scroll keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Panel {
    Processes,
    Cgroups,
    Events,
}

/// A line being typed at the bottom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// `/`: filter text.
    Filter(String),
    /// `g`: a time.
    Goto(String),
}

/// Findings of one window.
#[derive(Debug, Clone)]
pub enum Findings {
    /// No store to diagnose.
    Unavailable(String),
    /// Asked, not answered yet.
    Pending,
    /// The answer.
    Ready(Result<Vec<Finding>, String>),
}

/// Parses a time typed after `g` (the CLI's time syntax) into ns since the epoch.
pub type ParseTime = fn(&str) -> Result<i64, String>;

/// Follow mode refreshes a store's episodes this often.
const EVENTS_REFRESH_S: u64 = 15;
/// ... over this much of its end.
const EVENTS_REFRESH_SPAN: i64 = 3600 * 1_000_000_000;

/// The screen's state.
pub struct App {
    source: Box<dyn Source>,
    /// `top` or `replay`.
    pub title: &'static str,
    pub frame: Option<Frame>,
    pub snapshot: Option<Snapshot>,
    /// Showing the newest sample, moving with new ones.
    pub follow: bool,
    pub sort: SortKey,
    pub filter: String,
    pub input: Option<Input>,
    pub help: bool,
    pub per_cpu: bool,
    pub focus: Panel,
    /// Rows scrolled in the focused panel.
    pub scroll: usize,
    pub events: Vec<EventRow>,
    /// Why there are no episodes, or that they are being read.
    pub events_note: Option<String>,
    pub findings: Findings,
    /// The window `findings` is about.
    pub findings_window: Option<(i64, i64)>,
    /// A one-line message (an empty step, a bad time).
    pub message: Option<String>,
    pub quit: bool,
    parse_time: ParseTime,
    events_asked: Option<(Instant, i64, i64)>,
    outbox: Vec<Ask>,
}

const NS: i64 = 1_000_000_000;

impl App {
    /// A screen over `source`.
    pub fn new(source: Box<dyn Source>, title: &'static str, parse_time: ParseTime) -> Self {
        let store = source.store().is_some();
        App {
            follow: source.is_live(),
            source,
            title,
            frame: None,
            snapshot: None,
            sort: SortKey::Cpu,
            filter: String::new(),
            input: None,
            help: false,
            per_cpu: false,
            focus: Panel::Processes,
            scroll: 0,
            events: Vec::new(),
            events_note: store.then(|| "reading episodes…".to_string()),
            findings: if store {
                Findings::Pending
            } else {
                Findings::Unavailable(
                    "findings need a recording: run `jitterscope record`, then `top` follows it"
                        .into(),
                )
            },
            findings_window: None,
            message: None,
            quit: false,
            parse_time,
            events_asked: None,
            outbox: Vec::new(),
        }
    }

    /// The source's one-line description.
    pub fn describe(&self) -> String {
        self.source.describe()
    }

    /// The store shown, if any.
    pub fn store_dir(&self) -> Option<&std::path::Path> {
        self.source.store()
    }

    /// Whether the source is live.
    pub fn is_live(&self) -> bool {
        self.source.is_live()
    }

    /// Shows the sample at or before `at`, or the newest.
    pub fn start(&mut self, at: Option<i64>) -> Result<()> {
        let f = match at {
            Some(t) => {
                self.follow = false;
                match self.source.at(t)? {
                    Some(f) => Some(f),
                    // Before the first record: show the first one rather than nothing.
                    None => self.source.step(t, Dir::Forward)?,
                }
            }
            None => self.source.latest()?,
        };
        if let Some(f) = f {
            self.show(f);
        }
        self.refresh_own_events();
        Ok(())
    }

    fn show(&mut self, f: Frame) {
        self.snapshot = Some(Snapshot::build(&f.cur, f.prev.as_deref()));
        self.frame = Some(f);
    }

    /// Shown sample time.
    pub fn shown(&self) -> Option<i64> {
        self.snapshot.as_ref().map(|s| s.ts_ns)
    }

    fn refresh_own_events(&mut self) {
        if let Some(ev) = self.source.own_events() {
            self.events = ev;
        }
    }

    /// Does what the source has due; moves to a new sample when following.
    pub fn tick(&mut self) -> Result<()> {
        if self.source.poll()? {
            self.refresh_own_events();
            if self.follow {
                if let Some(f) = self.source.latest()? {
                    self.show(f);
                }
            }
        }
        Ok(())
    }

    /// How long the terminal loop may wait for a key before [`tick`](App::tick) is due.
    pub fn due_in(&self) -> std::time::Duration {
        self.source.due_in()
    }

    /// The questions for the analysis worker that the shown time raises (episodes of the
    /// store, findings of the shown window); each is asked once.
    pub fn asks(&mut self) -> Vec<Ask> {
        let mut out = std::mem::take(&mut self.outbox);
        if self.source.store().is_none() {
            return out;
        }
        let Some(t) = self.shown() else { return out };
        let refresh = match self.events_asked {
            None => true,
            Some((at, ..)) => {
                self.follow && at.elapsed().as_secs() >= EVENTS_REFRESH_S && self.is_live()
            }
        };
        if refresh {
            let (from, to) = match self.events_asked {
                // The first time: the whole store. Later (following): its last hour.
                None => (i64::MIN / 2, i64::MAX / 2),
                Some(_) => (t - EVENTS_REFRESH_SPAN, t + NS),
            };
            self.events_asked = Some((Instant::now(), from, to));
            out.push(Ask::Events(from, to));
        }
        let w = findings_window(t, &self.events);
        if self.findings_window != Some(w) {
            self.findings_window = Some(w);
            self.findings = Findings::Pending;
            out.push(Ask::Findings(w.0, w.1));
        }
        out
    }

    /// Takes in an answer of the analysis worker.
    pub fn apply(&mut self, a: Answer) {
        match a {
            Answer::Events(from, _, Ok(rows)) => {
                // A refresh replaces the episodes it covers; older ones stay.
                self.events.retain(|e| e.from_ns <= from);
                self.events.extend(rows);
                self.events.sort_by_key(|e| e.from_ns);
                self.events.dedup_by(|a, b| a.id == b.id);
                self.events_note = None;
            }
            Answer::Events(_, _, Err(e)) => self.events_note = Some(format!("episodes: {e}")),
            Answer::Findings(f, t, r) => {
                if self.findings_window == Some((f, t)) {
                    self.findings = Findings::Ready(r);
                }
            }
        }
    }

    /// Handles one key.
    pub fn key(&mut self, k: KeyEvent) -> Result<()> {
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            self.quit = true;
            return Ok(());
        }
        if let Some(input) = self.input.take() {
            return self.key_input(input, k);
        }
        if self.help {
            // Any key closes the help; q still quits.
            self.help = false;
            if k.code != KeyCode::Char('q') {
                return Ok(());
            }
        }
        self.message = None;
        match k.code {
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Esc if !self.filter.is_empty() => {
                self.filter.clear();
                self.scroll = 0;
            }
            KeyCode::Char('?') | KeyCode::Char('h') => self.help = true,
            // atop's keys, since atop users are the audience: t the next sample, T the previous.
            KeyCode::Char('t') => self.step(Dir::Forward)?,
            KeyCode::Char('T') => self.step(Dir::Back)?,
            KeyCode::Char('[') => self.jump_event(Dir::Back)?,
            KeyCode::Char(']') => self.jump_event(Dir::Forward)?,
            KeyCode::Char('g') => self.input = Some(Input::Goto(String::new())),
            KeyCode::Char('/') => self.input = Some(Input::Filter(self.filter.clone())),
            KeyCode::Char('f') | KeyCode::End => {
                if let Some(f) = self.source.latest()? {
                    self.show(f);
                }
                self.follow = self.source.is_live();
            }
            KeyCode::Char('c') => self.per_cpu = !self.per_cpu,
            KeyCode::Tab => {
                self.focus = match self.focus {
                    Panel::Processes => Panel::Cgroups,
                    Panel::Cgroups => Panel::Events,
                    Panel::Events => Panel::Processes,
                };
                self.scroll = 0;
            }
            KeyCode::Down | KeyCode::Char('j') => self.scroll += 1,
            KeyCode::Up | KeyCode::Char('k') => self.scroll = self.scroll.saturating_sub(1),
            KeyCode::PageDown => self.scroll += 10,
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(10),
            KeyCode::Home => self.scroll = 0,
            KeyCode::Char(c) => {
                if let Some(&(key, ..)) = SortKey::ALL.iter().find(|k| k.1 == c) {
                    self.sort = key;
                    self.focus = Panel::Processes;
                    self.scroll = 0;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn key_input(&mut self, input: Input, k: KeyEvent) -> Result<()> {
        let (mut buf, goto) = match input {
            Input::Filter(b) => (b, false),
            Input::Goto(b) => (b, true),
        };
        match k.code {
            KeyCode::Esc => return Ok(()),
            KeyCode::Enter => {
                if goto {
                    self.goto(&buf)?;
                } else {
                    self.filter = buf.trim().to_string();
                    self.scroll = 0;
                }
                return Ok(());
            }
            KeyCode::Backspace => {
                buf.pop();
            }
            KeyCode::Char(c) if buf.chars().count() < 200 => buf.push(c),
            _ => {}
        }
        self.input = Some(if goto {
            Input::Goto(buf)
        } else {
            Input::Filter(buf)
        });
        Ok(())
    }

    fn goto(&mut self, text: &str) -> Result<()> {
        let t = match (self.parse_time)(text) {
            Ok(t) => t,
            Err(e) => {
                self.message = Some(e);
                return Ok(());
            }
        };
        let f = match self.source.at(t)? {
            Some(f) => Some(f),
            None => self.source.step(t, Dir::Forward)?,
        };
        match f {
            Some(f) => {
                let shown = f.cur.ts_ns;
                self.show(f);
                self.follow = false;
                if (shown - t).abs() > 2 * NS {
                    self.message = Some(format!(
                        "no sample at {}; showing the nearest, {}",
                        jitterscope_model::time::rfc3339(t),
                        jitterscope_model::time::rfc3339(shown)
                    ));
                }
            }
            None => self.message = Some("no samples recorded".into()),
        }
        Ok(())
    }

    fn step(&mut self, dir: Dir) -> Result<()> {
        let Some(t) = self.shown() else { return Ok(()) };
        match self.source.step(t, dir)? {
            Some(f) => {
                self.show(f);
                // Stepping forward onto the newest sample of a live source resumes following.
                self.follow = dir == Dir::Forward && self.source.is_live() && self.at_newest()?;
            }
            None => {
                self.message = Some(match dir {
                    Dir::Back => "no earlier sample".into(),
                    Dir::Forward => "no later sample".into(),
                });
            }
        }
        Ok(())
    }

    fn at_newest(&mut self) -> Result<bool> {
        let shown = self.shown();
        Ok(self.source.latest()?.map(|f| f.cur.ts_ns) == shown)
    }

    fn jump_event(&mut self, dir: Dir) -> Result<()> {
        let Some(t) = self.shown() else { return Ok(()) };
        let target = match dir {
            Dir::Back => self
                .events
                .iter()
                .map(|e| e.from_ns)
                .filter(|&f| f < t)
                .max(),
            Dir::Forward => self
                .events
                .iter()
                .map(|e| e.from_ns)
                .filter(|&f| f > t)
                .min(),
        };
        let Some(target) = target else {
            self.message = Some(match (dir, &self.events_note) {
                (_, Some(n)) => n.clone(),
                (Dir::Back, None) => "no earlier episode".into(),
                (Dir::Forward, None) => "no later episode".into(),
            });
            return Ok(());
        };
        if let Some(f) = self.source.at(target)? {
            self.show(f);
            self.follow = false;
        }
        Ok(())
    }

    /// The process rows the panel lists: filtered, sorted.
    pub fn processes(&self) -> Vec<&ProcRow> {
        let Some(s) = &self.snapshot else {
            return Vec::new();
        };
        let f = self.filter.to_lowercase();
        let mut rows: Vec<&ProcRow> = s
            .processes
            .iter()
            .filter(|p| {
                f.is_empty()
                    || p.comm.to_lowercase().contains(&f)
                    || p.cmdline.to_lowercase().contains(&f)
                    || p.cgroup.to_lowercase().contains(&f)
                    || p.pid.to_string() == f
            })
            .collect();
        let key = self.sort;
        rows.sort_by(|a, b| {
            let (x, y) = (key.of(a), key.of(b));
            y.unwrap_or(f64::NEG_INFINITY)
                .total_cmp(&x.unwrap_or(f64::NEG_INFINITY))
                .then_with(|| {
                    b.cpu_pct
                        .unwrap_or(-1.0)
                        .total_cmp(&a.cpu_pct.unwrap_or(-1.0))
                        .then(a.pid.cmp(&b.pid))
                })
        });
        rows
    }

    /// The cgroup rows: filtered, the most throttled and stalled first, then by CPU.
    pub fn cgroups(&self) -> Vec<&CgroupRow> {
        let Some(s) = &self.snapshot else {
            return Vec::new();
        };
        let f = self.filter.to_lowercase();
        let mut rows: Vec<&CgroupRow> = s
            .cgroups
            .iter()
            .filter(|c| {
                f.is_empty()
                    || c.path.to_lowercase().contains(&f)
                    || c.owner
                        .as_ref()
                        .is_some_and(|o| o.to_lowercase().contains(&f))
            })
            .collect();
        let z = |v: Option<f64>| v.unwrap_or(0.0);
        rows.sort_by(|a, b| {
            z(b.throttled_pct)
                .total_cmp(&z(a.throttled_pct))
                .then(z(b.reclaim_stalls_per_s).total_cmp(&z(a.reclaim_stalls_per_s)))
                .then(z(b.cpu_pct).total_cmp(&z(a.cpu_pct)))
                .then(z(b.mem_bytes).total_cmp(&z(a.mem_bytes)))
                .then(a.path.cmp(&b.path))
        });
        rows
    }

    /// The episodes to list for the shown time: those it falls in, then the nearest before
    /// (newest first), then those after.
    pub fn events_near(&self) -> Vec<(&EventRow, Relation)> {
        let Some(t) = self.shown() else {
            return Vec::new();
        };
        let mut at: Vec<_> = Vec::new();
        let mut before: Vec<_> = Vec::new();
        let mut after: Vec<_> = Vec::new();
        for e in &self.events {
            if e.from_ns <= t && (t <= e.to_ns || e.ongoing) {
                at.push((e, Relation::Now));
            } else if e.to_ns < t {
                before.push((e, Relation::Before));
            } else {
                after.push((e, Relation::After));
            }
        }
        before.reverse();
        at.into_iter().chain(before).chain(after).collect()
    }

    /// Seconds since the newest sample of a followed source, when it is late (a stopped
    /// recorder, a stalled host): three intervals without a sample.
    pub fn stale_s(&self, now_ns: i64) -> Option<f64> {
        if !self.follow {
            return None;
        }
        let s = self.snapshot.as_ref()?;
        let interval = self.source.interval()?.as_secs_f64();
        let age = (now_ns - s.ts_ns) as f64 / 1e9;
        (age > 3.0 * interval.max(1.0)).then_some(age)
    }
}

/// Where an episode lies against the shown time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    Now,
    Before,
    After,
}
