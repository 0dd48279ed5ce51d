//! Where the screen's samples come from, and how the shown time moves through them.
//!
//! - [`StoreSource`] reads a store: `replay` moves through it, `top` follows its newest record
//!   while a recorder writes it.
//! - [`LiveSource`] runs the collectors itself (no recorder, or `top --direct`) and keeps the
//!   last minutes in memory so `t` can still step back; episodes come from the same online
//!   detector the recorder runs.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use jitterscope_diagnose::events::{Event, Mark, MarkState, Online};
use jitterscope_model::codec::Parts;
use jitterscope_model::collector::{CollectorSet, Notes};
use jitterscope_model::sample::{monotonic_ns, HostInfo, Sample};
use jitterscope_model::stored::{Damage, SampleReader};
use serde::Serialize;

/// The sample shown and the one before it (rates need both).
#[derive(Debug, Clone)]
pub struct Frame {
    pub cur: Arc<Sample>,
    pub prev: Option<Arc<Sample>>,
}

/// One episode as the screen lists it: from `events` over a store, or from the live detector.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    /// `events`' id (`<kind>@<start s>+<seconds>`), which `diagnose --event` takes.
    pub id: String,
    pub kind: String,
    pub what: String,
    pub series: String,
    pub from_ns: i64,
    pub to_ns: i64,
    /// Still going at the newest sample (live detection only).
    pub ongoing: bool,
    pub peak: f64,
    pub baseline: f64,
    pub threshold: f64,
    /// Marked by the recorder as it happened.
    pub live: bool,
}

impl From<&Event> for EventRow {
    fn from(e: &Event) -> Self {
        EventRow {
            id: e.id.clone(),
            kind: e.kind.to_string(),
            what: e.what.to_string(),
            series: e.series.clone(),
            from_ns: e.from_ns,
            to_ns: e.to_ns,
            ongoing: false,
            peak: e.peak,
            baseline: e.baseline,
            threshold: e.threshold,
            live: e.online,
        }
    }
}

/// Which way a step goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Back,
    Forward,
}

/// A source of samples.
pub trait Source {
    /// One line saying what is shown (`store /var/lib/jitterscope`, `live collection`).
    fn describe(&self) -> String;
    /// Whether new samples arrive (`top`).
    fn is_live(&self) -> bool;
    /// The newest sample.
    fn latest(&mut self) -> Result<Option<Frame>>;
    /// The last sample at or before `t`.
    fn at(&mut self, t: i64) -> Result<Option<Frame>>;
    /// The nearest sample before (after) `t`.
    fn step(&mut self, t: i64, dir: Dir) -> Result<Option<Frame>>;
    /// Live sources: does what is due now (collect a sample, look for a new record); true
    /// when a new sample arrived. Never waits.
    fn poll(&mut self) -> Result<bool>;
    /// How long until [`poll`](Source::poll) has something to do.
    fn due_in(&self) -> Duration;
    /// Episodes this source detected itself (live collection); stores leave this to `events`.
    fn own_events(&self) -> Option<Vec<EventRow>> {
        None
    }
    /// The store directory, when there is one (events and findings are read from it).
    fn store(&self) -> Option<&Path> {
        None
    }
    /// The sampling interval, when known.
    fn interval(&self) -> Option<Duration>;
}

/// Windows tried, widest last, when looking for the nearest record: most steps find it in the
/// first, a gap of hours in a later one, and only an empty stretch of days reads everything.
const SEARCH: [i64; 5] = [
    5_000_000_000,
    120_000_000_000,
    3_600_000_000_000,
    86_400_000_000_000,
    i64::MAX / 4,
];

/// Decoded samples kept: stepping back makes the old `prev` the new `cur`.
const CACHE: usize = 8;

/// A store, replayed or followed.
pub struct StoreSource {
    reader: SampleReader,
    dir: PathBuf,
    follow: bool,
    cache: VecDeque<Arc<Sample>>,
    newest: Option<i64>,
    interval: Option<Duration>,
    checked: Option<std::time::Instant>,
    /// Records skipped because they did not decode.
    damage: Damage,
    /// What the listing of record times skipped (see `times`).
    times_damage: Damage,
}

/// How often a followed store is checked for a new record: `latest` decompresses the tail
/// frame, so not on every key press.
const FOLLOW_CHECK: Duration = Duration::from_millis(500);

impl StoreSource {
    /// Opens the store at `dir`; `follow` for `top` on a store a recorder writes.
    pub fn open(dir: &Path, follow: bool) -> Result<Self> {
        let reader = SampleReader::open(dir)
            .with_context(|| format!("cannot open store {}", dir.display()))?;
        Ok(StoreSource {
            reader,
            dir: dir.to_path_buf(),
            follow,
            cache: VecDeque::new(),
            newest: None,
            interval: None,
            checked: None,
            damage: Damage::default(),
            times_damage: Damage::default(),
        })
    }

    /// The first and last record times.
    pub fn bounds(&self) -> Result<Option<(i64, i64)>> {
        Ok(self.reader.store().time_bounds()?)
    }

    /// Caches a decoded sample (the last [`CACHE`]).
    fn keep(&mut self, s: Sample) -> Arc<Sample> {
        let s = Arc::new(s);
        if s.interval_ns > 0 {
            self.interval = Some(Duration::from_nanos(s.interval_ns));
        }
        if self.cache.len() >= CACHE {
            self.cache.pop_front();
        }
        self.cache.push_back(s.clone());
        s
    }

    /// The timestamps of records in `[from, to]`, in file order (damage skipped and counted,
    /// as every read of samples does).
    fn times(&mut self, from: i64, to: i64) -> Result<Vec<i64>> {
        let mut out = Vec::new();
        let mut range = self.reader.store().range_main(from, to)?;
        let mut damage = Damage::default();
        for r in range.by_ref() {
            match r {
                Ok(r) => out.push(r.ts_ns),
                Err(e) => damage.unreadable(e),
            }
        }
        damage.add(&jitterscope_model::stored::store_damage(&range));
        // Steps read widening windows over the same records: the widest read's damage
        // stands for them all, rather than each window adding its count again.
        if damage.samples_lost + damage.unreadable + damage.corrupt
            >= self.times_damage.samples_lost
                + self.times_damage.unreadable
                + self.times_damage.corrupt
        {
            self.times_damage = damage;
        }
        Ok(out)
    }

    /// The sample recorded at exactly `ts` (the first such record), decoded with its detail.
    fn sample(&mut self, ts: i64) -> Result<Option<Arc<Sample>>> {
        if let Some(s) = self.cache.iter().find(|s| s.ts_ns == ts) {
            return Ok(Some(s.clone()));
        }
        let s = self.reader.sample_at(ts, Parts::ALL, &mut self.damage)?;
        Ok(s.map(|s| self.keep(s)))
    }

    /// The last record time at or before `t`.
    fn time_at_or_before(&mut self, t: i64) -> Result<Option<i64>> {
        for w in SEARCH {
            let ts = self.times(t.saturating_sub(w), t)?;
            if let Some(&last) = ts.iter().filter(|&&x| x <= t).max() {
                return Ok(Some(last));
            }
        }
        Ok(None)
    }

    /// The first record time at or after `t`.
    fn time_at_or_after(&mut self, t: i64) -> Result<Option<i64>> {
        for w in SEARCH {
            let ts = self.times(t, t.saturating_add(w))?;
            if let Some(&first) = ts.iter().filter(|&&x| x >= t).min() {
                return Ok(Some(first));
            }
        }
        Ok(None)
    }

    fn frame(&mut self, ts: i64) -> Result<Option<Frame>> {
        let Some(cur) = self.sample(ts)? else {
            return Ok(None);
        };
        let prev = match self.time_at_or_before(ts - 1)? {
            Some(p) => self.sample(p)?,
            None => None,
        };
        Ok(Some(Frame { cur, prev }))
    }
}

impl Source for StoreSource {
    fn describe(&self) -> String {
        format!(
            "{} {}{}",
            if self.follow { "following" } else { "store" },
            self.dir.display(),
            {
                let mut d = self.damage.clone();
                d.add(&self.times_damage);
                d
            }
            .note()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
        )
    }

    fn is_live(&self) -> bool {
        self.follow
    }

    fn latest(&mut self) -> Result<Option<Frame>> {
        let ts = match self.newest {
            Some(ts) if self.cache.iter().any(|s| s.ts_ns == ts) => ts,
            _ => {
                let Some(ts) = self.reader.store().latest_ts()? else {
                    return Ok(None);
                };
                self.newest = Some(ts);
                if self.sample(ts)?.is_none() {
                    return Ok(None);
                }
                ts
            }
        };
        self.frame(ts)
    }

    fn at(&mut self, t: i64) -> Result<Option<Frame>> {
        match self.time_at_or_before(t)? {
            Some(ts) => self.frame(ts),
            None => Ok(None),
        }
    }

    fn step(&mut self, t: i64, dir: Dir) -> Result<Option<Frame>> {
        let ts = match dir {
            Dir::Back => self.time_at_or_before(t - 1)?,
            Dir::Forward => self.time_at_or_after(t + 1)?,
        };
        match ts {
            Some(ts) => self.frame(ts),
            None => Ok(None),
        }
    }

    fn poll(&mut self) -> Result<bool> {
        if !self.follow || self.due_in() > Duration::ZERO {
            return Ok(false);
        }
        self.checked = Some(std::time::Instant::now());
        let Some(ts) = self.reader.store().latest_ts()? else {
            return Ok(false);
        };
        if Some(ts) == self.newest {
            return Ok(false);
        }
        self.newest = Some(ts);
        Ok(self.sample(ts)?.is_some())
    }

    fn due_in(&self) -> Duration {
        match (self.follow, self.checked) {
            (false, _) => Duration::from_secs(3600),
            (true, None) => Duration::ZERO,
            (true, Some(t)) => FOLLOW_CHECK.saturating_sub(t.elapsed()),
        }
    }

    fn store(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    fn interval(&self) -> Option<Duration> {
        self.interval
    }
}

/// Samples kept in memory by live collection (two minutes at one second).
pub const LIVE_HISTORY: usize = 120;

/// The collectors, run by the view itself.
pub struct LiveSource {
    set: CollectorSet,
    host: HostInfo,
    interval: Duration,
    next_ns: u64,
    notes: Notes,
    history: VecDeque<Arc<Sample>>,
    online: Online,
    events: Vec<EventRow>,
    what: String,
}

impl LiveSource {
    /// Collects with `set` every `interval`; `what` names the collectors in the title line.
    pub fn new(set: CollectorSet, host: HostInfo, interval: Duration, what: String) -> Self {
        LiveSource {
            set,
            host,
            interval,
            next_ns: monotonic_ns(),
            notes: Notes::default(),
            history: VecDeque::new(),
            online: Online::new(),
            events: Vec::new(),
            what,
        }
    }

    /// Collects one sample now.
    pub fn collect(&mut self) {
        let mono = monotonic_ns();
        let mut s = Sample::new(
            jitterscope_model::sample::wall_ns(),
            mono,
            self.interval.as_nanos() as u64,
            self.host.clone(),
        );
        self.set.collect(&mut s, &mut self.notes);
        self.notes.drain();
        let rec = self
            .online
            .step(&s, self.history.back().map(|p| p.as_ref()));
        for m in &rec.marks {
            self.mark(m);
        }
        if self.history.len() >= LIVE_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(Arc::new(s));
    }

    fn mark(&mut self, m: &Mark) {
        let found = self
            .events
            .iter_mut()
            .find(|e| e.kind == m.kind && e.series == m.series && e.from_ns == m.from_ns);
        let row = EventRow {
            id: format!(
                "{}@{}+{}",
                m.kind,
                m.from_ns.div_euclid(1_000_000_000),
                ((m.to_ns - m.from_ns) / 1_000_000_000).max(1)
            ),
            kind: m.kind.clone(),
            what: m.kind.clone(),
            series: m.series.clone(),
            from_ns: m.from_ns,
            to_ns: m.to_ns,
            ongoing: m.state == MarkState::Start,
            peak: m.peak,
            baseline: m.baseline,
            threshold: m.threshold,
            live: true,
        };
        match found {
            Some(e) => *e = row,
            None => self.events.push(row),
        }
    }

    fn frame_of(&self, i: usize) -> Frame {
        Frame {
            cur: self.history[i].clone(),
            prev: i.checked_sub(1).map(|j| self.history[j].clone()),
        }
    }
}

impl Source for LiveSource {
    fn describe(&self) -> String {
        format!("direct, {}", self.what)
    }

    fn is_live(&self) -> bool {
        true
    }

    fn latest(&mut self) -> Result<Option<Frame>> {
        Ok((!self.history.is_empty()).then(|| self.frame_of(self.history.len() - 1)))
    }

    fn at(&mut self, t: i64) -> Result<Option<Frame>> {
        Ok(self
            .history
            .iter()
            .rposition(|s| s.ts_ns <= t)
            .map(|i| self.frame_of(i)))
    }

    fn step(&mut self, t: i64, dir: Dir) -> Result<Option<Frame>> {
        let i = match dir {
            Dir::Back => self.history.iter().rposition(|s| s.ts_ns < t),
            Dir::Forward => self.history.iter().position(|s| s.ts_ns > t),
        };
        Ok(i.map(|i| self.frame_of(i)))
    }

    fn poll(&mut self) -> Result<bool> {
        if monotonic_ns() < self.next_ns {
            return Ok(false);
        }
        let step = self.interval.as_nanos() as u64;
        // Missed ticks are skipped, not caught up in a burst; the gap shows as missing.
        let now = monotonic_ns();
        self.next_ns += step.max(1) * (1 + (now - self.next_ns) / step.max(1));
        self.collect();
        Ok(true)
    }

    fn due_in(&self) -> Duration {
        Duration::from_nanos(self.next_ns.saturating_sub(monotonic_ns()))
    }

    fn own_events(&self) -> Option<Vec<EventRow>> {
        Some(self.events.clone())
    }

    fn interval(&self) -> Option<Duration> {
        Some(self.interval)
    }
}
