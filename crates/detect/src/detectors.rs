//! The two detectors, one point at a time, so the recorder's online detection and `events`
//! over a range are the same code: spikes over a robust rolling baseline, and leak trends.

use std::collections::VecDeque;

use crate::stats::median_mad;
use crate::trend::{
    fit, judge, steady_growth, Shape, Verdict, CONFIRM_S, MIN_GROWTH_BYTES, MIN_GROWTH_SHARE,
};

/// Baseline window, in samples (5 minutes at 1 s).
pub const WINDOW: usize = 300;
/// Baseline recomputed every this many samples.
const STEP: usize = 30;
/// Gap (samples below the threshold) that still joins two up stretches.
pub const GAP: u32 = 2;
/// Leak trend window, in points (5 minutes at 1 s).
const LEAK_WINDOW: usize = 300;
/// Longest time without a new high within one trend, ns.
const LEAK_GAP_NS: i64 = 60_000_000_000;

/// An episode found by a detector (times in ns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Episode {
    /// First up sample.
    pub from: i64,
    /// Last up sample.
    pub to: i64,
    /// Largest value.
    pub peak: f64,
    /// Baseline when it started.
    pub baseline: f64,
    /// Threshold it crossed.
    pub threshold: f64,
}

/// What one point did to a detector's state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change {
    /// An episode started (its first point so far).
    Started(Episode),
    /// An episode ended.
    Ended(Episode),
}

/// Spike detection on one series, one point at a time.
#[derive(Debug, Clone)]
pub struct SpikeDetector {
    floor: f64,
    hist: VecDeque<f64>,
    seen: usize,
    computed_at: Option<usize>,
    base: (f64, f64),
    open: Option<(u32, Episode)>,
}

impl SpikeDetector {
    /// A detector for a signal with this floor.
    pub fn new(floor: f64) -> Self {
        SpikeDetector {
            floor,
            hist: VecDeque::with_capacity(WINDOW + 1),
            seen: 0,
            computed_at: None,
            base: (0.0, 0.0),
            open: None,
        }
    }

    /// Feeds the point of sample number `idx` at `ts`. Points not `eligible` (before the range
    /// asked for) only feed the baseline.
    pub fn push(&mut self, idx: u32, ts: i64, v: f64, eligible: bool) -> Option<Change> {
        if self.computed_at.is_none_or(|c| self.seen >= c + STEP) {
            let mut w: Vec<f64> = self.hist.iter().copied().collect();
            self.base = if w.is_empty() {
                (0.0, 0.0)
            } else {
                median_mad(&mut w)
            };
            self.computed_at = Some(self.seen);
        }
        self.hist.push_back(v);
        if self.hist.len() > WINDOW {
            self.hist.pop_front();
        }
        self.seen += 1;
        if !eligible {
            return None;
        }
        let threshold = self.floor.max(self.base.0 + 6.0 * self.base.1);
        let up = v > threshold;
        match (&mut self.open, up) {
            (Some((end_idx, e)), true) => {
                *end_idx = idx;
                e.to = ts;
                e.peak = e.peak.max(v);
                None
            }
            (Some((end_idx, _)), false) => {
                if idx.saturating_sub(*end_idx) > GAP {
                    self.open.take().map(|(_, e)| Change::Ended(e))
                } else {
                    None
                }
            }
            (None, true) => {
                let e = Episode {
                    from: ts,
                    to: ts,
                    peak: v,
                    baseline: self.base.0,
                    threshold,
                };
                self.open = Some((idx, e));
                Some(Change::Started(e))
            }
            (None, false) => None,
        }
    }

    /// The episode still open at the end of the data, if any.
    pub fn finish(&mut self) -> Option<Episode> {
        self.open.take().map(|(_, e)| e)
    }
}

/// Leak-trend detection on one process's RSS, one point at a time.
#[derive(Debug, Clone, Default)]
pub struct LeakDetector {
    pts: VecDeque<(i64, f64)>,
    /// Steps within `pts` that did not go down.
    ups: usize,
    first_eligible: Option<i64>,
    open: Option<Episode>,
    /// Peak of the trend that ended last, while the window still holds its growth: a new
    /// trend must pass it.
    ended_peak: Option<f64>,
}

impl LeakDetector {
    /// Feeds the RSS at `ts`; see [`SpikeDetector::push`] for `eligible`.
    pub fn push(&mut self, ts: i64, v: f64, eligible: bool) -> Option<Change> {
        if let Some(&(_, last)) = self.pts.back() {
            if v >= last {
                self.ups += 1;
            }
        }
        self.pts.push_back((ts, v));
        if self.pts.len() > LEAK_WINDOW {
            let (_, a) = self.pts.pop_front().expect("not empty");
            if self.pts.front().is_some_and(|&(_, b)| b >= a) {
                self.ups -= 1;
            }
        }
        if !eligible {
            return None;
        }
        let first_eligible = *self.first_eligible.get_or_insert(ts);
        let shape = self.leaking();
        let leaking = shape.is_some();
        if !leaking {
            self.ended_peak = None;
        }
        match &mut self.open {
            // A trend lasts until its last new high; it ends once no new high came for a while,
            // even though its growth keeps the window "leaking" for minutes after.
            Some(e) => {
                if leaking && v > e.peak {
                    e.peak = v;
                    e.to = ts;
                }
                if ts - e.to > LEAK_GAP_NS {
                    let e = self.open.take().expect("open");
                    if leaking {
                        self.ended_peak = Some(e.peak);
                    }
                    return Some(Change::Ended(e));
                }
                None
            }
            // Opened only once the growth has lasted [`CONFIRM_S`]: what comes next is
            // unknown here, and a service warming up grows as steadily as a leak for about a
            // minute before it levels off. The episode still starts where the growth did.
            None if shape.is_some_and(|s| s.grew_s >= CONFIRM_S)
                && self.ended_peak.is_none_or(|p| v > p) =>
            {
                let (t0, v0) = self.pts[0];
                let e = Episode {
                    from: t0.max(first_eligible),
                    to: ts,
                    peak: v,
                    baseline: v0,
                    threshold: v0 + MIN_GROWTH_BYTES.max(MIN_GROWTH_SHARE * v0),
                };
                self.open = Some(e);
                Some(Change::Started(e))
            }
            None => None,
        }
    }

    /// The shape of the window's growth when it passes the `memory.leak` test for a live
    /// process (steady, long enough, not levelled off), whether or not it is confirmed yet.
    fn leaking(&self) -> Option<Shape> {
        let (&(t0, first), &(_, last)) = (self.pts.front()?, self.pts.back()?);
        let xy = || -> Vec<(f64, f64)> {
            self.pts
                .iter()
                .map(|&(t, v)| ((t - t0) as f64 / 1e9, v))
                .collect()
        };
        let mut pts = None;
        steady_growth(self.pts.len(), first, last, self.ups, || {
            fit(pts.insert(xy()))
        })?;
        let shape = Shape::of(pts.as_deref()?)?;
        matches!(
            judge(shape, false),
            Some(Verdict::Leak | Verdict::Unconfirmed)
        )
        .then_some(shape)
    }

    /// The trend still open at the end of the data, if any.
    pub fn finish(&mut self) -> Option<Episode> {
        self.open.take()
    }
}
