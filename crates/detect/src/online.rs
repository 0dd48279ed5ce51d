//! Episode detection as `record` runs: one detector per watched series, fed every sample; the
//! record it returns (the sample's signal values and any episode marks) is what the recorder
//! writes to the signals lane.

use std::collections::HashMap;

use jitterscope_model::signals::{
    Derive, Mark, MarkState, SignalRecord, Value, Watched, LANE_VERSION,
};
use jitterscope_model::Sample;

use crate::detectors::{Change, Episode, LeakDetector, SpikeDetector, WINDOW};
use crate::LEAK_KIND;

/// One detector per series, fed every sample.
pub struct Online {
    derive: Derive,
    values: Vec<Value>,
    idx: u32,
    /// Per spike series: its signal's kind, detector and the last sample index it had a value.
    spikes: HashMap<String, (&'static str, SpikeDetector, u32)>,
    leaks: HashMap<String, (LeakDetector, u32)>,
}

impl Default for Online {
    fn default() -> Self {
        Self::new()
    }
}

fn mark(kind: &str, series: &str, state: MarkState, e: Episode) -> Mark {
    Mark {
        kind: kind.to_string(),
        series: series.to_string(),
        state,
        from_ns: e.from,
        to_ns: e.to,
        peak: e.peak,
        baseline: e.baseline,
        threshold: e.threshold,
    }
}

fn change_mark(kind: &str, series: &str, c: Change) -> Mark {
    match c {
        Change::Started(e) => mark(kind, series, MarkState::Start, e),
        Change::Ended(e) => mark(kind, series, MarkState::End, e),
    }
}

impl Online {
    /// No history yet.
    pub fn new() -> Self {
        Online {
            derive: Derive::new(),
            values: Vec::new(),
            idx: 0,
            spikes: HashMap::new(),
            leaks: HashMap::new(),
        }
    }

    /// Derives the signals of `cur` (against `prev`; none for the first sample), advances the
    /// detectors, and returns the record for the signals lane with any marks.
    pub fn step(&mut self, cur: &Sample, prev: Option<&Sample>) -> SignalRecord {
        let mut rec = SignalRecord {
            version: LANE_VERSION,
            ..Default::default()
        };
        let idx = self.idx;
        self.idx += 1;
        let Some(prev) = prev else {
            return rec;
        };
        self.derive.values(cur, prev, &mut self.values);
        let ts = cur.ts_ns;
        for v in &self.values {
            match v.watched {
                Watched::Spike(sig) => {
                    // Looked up before inserting: the same names come every second, and an
                    // `entry` would copy each name each second to find it.
                    if !self.spikes.contains_key(&v.series) {
                        let d = (sig.kind, SpikeDetector::new(sig.floor), idx);
                        self.spikes.insert(v.series.clone(), d);
                    }
                    let (kind, det, last) = self.spikes.get_mut(&v.series).expect("inserted");
                    *last = idx;
                    if let Some(c) = det.push(idx, ts, v.value, true) {
                        rec.marks.push(change_mark(kind, &v.series, c));
                    }
                }
                Watched::Shown => {}
                Watched::Rss => {
                    if !self.leaks.contains_key(&v.series) {
                        self.leaks.insert(v.series.clone(), Default::default());
                    }
                    let (det, last) = self.leaks.get_mut(&v.series).expect("inserted");
                    *last = idx;
                    if let Some(c) = det.push(ts, v.value, true) {
                        rec.marks.push(change_mark(LEAK_KIND, &v.series, c));
                    }
                }
            }
        }
        rec.values = self.values.drain(..).map(|v| (v.series, v.value)).collect();
        // Series gone for a baseline window (a removed cgroup, an exited process): their
        // open episodes end here, and their state goes.
        let stale = |last: u32| idx.saturating_sub(last) > WINDOW as u32;
        let mut ended = Vec::new();
        self.spikes.retain(|name, (kind, det, last)| {
            // A series missing as long as a gap that ends an episode (its cgroup removed,
            // its tracer detached) ends its open episode now, with the bounds `events` gives
            // it, rather than after the baseline window: a deleted container's throttling
            // would otherwise stay open for five minutes. The baseline stays for the window.
            if idx.saturating_sub(*last) > crate::detectors::GAP {
                if let Some(e) = det.finish() {
                    ended.push(mark(kind, name, MarkState::End, e));
                }
            }
            !stale(*last)
        });
        self.leaks.retain(|name, (det, last)| {
            if !stale(*last) {
                return true;
            }
            if let Some(e) = det.finish() {
                ended.push(mark(LEAK_KIND, name, MarkState::End, e));
            }
            false
        });
        rec.marks.extend(ended);
        rec
    }
}
