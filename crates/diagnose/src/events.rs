//! Episodes: the stretches of time in which a jitter signal rose clearly above its own recent
//! level. `jitterscope events` lists them; `diagnose --event ID` diagnoses one.
//!
//! **Baseline.** Per series, the median and the median absolute deviation (MAD) of the
//! previous 5 minutes, recomputed every 30 samples. Both are robust: a host that is always
//! busy has a high median and no events, and one spike does not move the baseline it is
//! judged against.
//!
//! **Threshold.** A sample is "up" when it exceeds both the signal's floor and
//! `median + 6 x MAD`. The floor sets what matters at all, e.g. 1,000 TLB IPIs/s or 20% of
//! periods throttled. The MAD term keeps a noisy-but-normal signal quiet.
//!
//! **Episode.** Up samples, with gaps of at most 2 samples, form one episode. Its id is
//! `<kind>@<start epoch s>+<seconds>` (`tlb-storm@1795331290+12`), which is enough to diagnose
//! it later without detecting again.
//!
//! **Leak trends.** The RSS of the 10 largest processes of each sample; a process is leaking
//! while its last 5 minutes (at least 5 samples) grew by 16 MiB and 5% or more, with at least
//! 80% of steps up and a line fitting them with R² >= 0.8: the `memory.leak` rule's test, run
//! on a sliding window. A trend runs to its last new high, and ends after 60 s without one.
//!
//! **Online and offline, one detector.** `record` derives these signals from each sample
//! ([`Online`]), feeds them to the detectors below and writes both the values and the marks
//! (an episode started, an episode ended) to the store's signals lane as they happen.
//! `events` runs the same detectors over any range: from the signals lane when the range's
//! segments have one (a day of it is a few MB), else derived from the samples themselves, as
//! for stores written before it existed. The episodes the recorder marked live are flagged
//! `online`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;

use anyhow::{Context, Result};
use jitterscope_model::codec::{self, Parts};
use jitterscope_model::derive::Selection;
use jitterscope_model::glob::Pattern;
use jitterscope_model::registry::{all, parts_for};
use jitterscope_model::Sample;
use jitterscope_store::{Lane, Reader};
use serde::{Deserialize, Serialize};

use crate::data::{median_mad, Data};
use crate::rfc3339;
use crate::rules::leak::fit;

/// A signal watched for episodes.
pub struct Signal {
    /// Episode kind, in ids.
    pub kind: &'static str,
    /// What it is, for people.
    pub what: &'static str,
    /// Series glob (several series: one episode stream each, e.g. per cgroup).
    pub series: &'static str,
    /// Below this, never an episode.
    pub floor: f64,
}

/// The watched signals.
pub static SIGNALS: &[Signal] = &[
    Signal {
        kind: "sys-cpu",
        what: "system CPU spike",
        series: "cpu.sys_pct",
        floor: 20.0,
    },
    Signal {
        kind: "runq-latency",
        what: "run-queue latency spike (p99)",
        series: "runqlat.p99_usec",
        floor: 5000.0,
    },
    Signal {
        kind: "throttling",
        what: "CFS throttling burst",
        series: "cgroup.*.cpu.throttled_pct",
        floor: 20.0,
    },
    Signal {
        kind: "reclaim-stalls",
        what: "reclaim stall burst",
        series: "reclaim.stalls_per_s",
        floor: 1.0,
    },
    Signal {
        kind: "allocstall",
        what: "direct-reclaim entries",
        series: "reclaim.allocstall_per_s",
        floor: 1.0,
    },
    Signal {
        kind: "tlb-storm",
        what: "TLB-shootdown IPI storm",
        series: "irq.tlb_per_s",
        floor: 1000.0,
    },
    Signal {
        kind: "memory-pressure",
        what: "memory pressure spike (PSI some)",
        series: "psi.memory.some_pct",
        floor: 5.0,
    },
    Signal {
        kind: "d-state",
        what: "surge of tasks blocked on I/O (D state)",
        series: "sched.procs_blocked",
        floor: 4.0,
    },
    Signal {
        kind: "negative-dentries",
        what: "negative dentries growing",
        series: "dentry.negative_growth_per_s",
        floor: 1000.0,
    },
];

/// Leak trends: the series watched, of the [`LEAK_TOP`] largest processes of each sample.
pub const LEAK_SERIES: &str = "proc.*.rss_bytes";
/// Processes whose RSS is kept per sample.
pub const LEAK_TOP: usize = 10;
/// Episode kind of leak trends.
const LEAK_KIND: &str = "leak-trend";
const LEAK_WHAT: &str = "process memory growing steadily (RSS)";
/// Leak trend window, in points (5 minutes at 1 s).
const LEAK_WINDOW: usize = 300;
/// Fewest points a trend is judged on.
const LEAK_MIN_POINTS: usize = 5;
/// Least growth over the window (and at least 5% of where it started).
const LEAK_MIN_GROWTH: f64 = 16.0 * 1048576.0;
/// Longest time without a new high within one trend, ns.
const LEAK_GAP_NS: i64 = 60_000_000_000;

/// One episode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// `<kind>@<start epoch s>+<seconds>`.
    pub id: String,
    /// Episode kind.
    pub kind: &'static str,
    /// What it is.
    pub what: &'static str,
    /// The series that rose.
    pub series: String,
    /// First up sample (RFC 3339).
    pub from: String,
    /// Last up sample (RFC 3339).
    pub to: String,
    /// Its start, ns since the epoch.
    pub from_ns: i64,
    /// Its end, ns since the epoch.
    pub to_ns: i64,
    /// Largest value.
    pub peak: f64,
    /// Baseline when it started: the median (leak trends: the RSS where the trend began).
    pub baseline: f64,
    /// Threshold it crossed.
    pub threshold: f64,
    /// Whether the recorder marked it in the store as it happened.
    pub online: bool,
}

/// Baseline window, in samples (5 minutes at 1 s).
const WINDOW: usize = 300;
/// Baseline recomputed every this many samples.
const STEP: usize = 30;
/// Gap (samples below the threshold) that still joins two up stretches.
const GAP: u32 = 2;

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
        let leaking = self.leaking();
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
            None if leaking && self.ended_peak.is_none_or(|p| v > p) => {
                let (t0, v0) = self.pts[0];
                let e = Episode {
                    from: t0.max(first_eligible),
                    to: ts,
                    peak: v,
                    baseline: v0,
                    threshold: v0 + LEAK_MIN_GROWTH.max(0.05 * v0),
                };
                self.open = Some(e);
                Some(Change::Started(e))
            }
            None => None,
        }
    }

    /// Whether the window passes the `memory.leak` test. The cheap tests go first: most
    /// processes fail them, and the line fit runs only for the few that grow.
    fn leaking(&self) -> bool {
        let n = self.pts.len();
        if n < LEAK_MIN_POINTS {
            return false;
        }
        let (t0, first) = self.pts[0];
        let growth = self.pts[n - 1].1 - first;
        if growth < LEAK_MIN_GROWTH || growth < 0.05 * first {
            return false;
        }
        if (self.ups as f64) < 0.8 * (n - 1) as f64 {
            return false;
        }
        let xy: Vec<(f64, f64)> = self
            .pts
            .iter()
            .map(|&(t, v)| ((t - t0) as f64 / 1e9, v))
            .collect();
        fit(&xy).is_some_and(|(slope, r2)| slope > 0.0 && r2 >= 0.8)
    }

    /// The trend still open at the end of the data, if any.
    pub fn finish(&mut self) -> Option<Episode> {
        self.open.take()
    }
}

/// Derives the watched signals of a sample: every series of [`SIGNALS`] and the RSS of the
/// [`LEAK_TOP`] largest processes. The recorder and the offline fallback both call this, so
/// the signals lane holds exactly what `events` would derive from the samples.
pub struct Signals {
    spikes: Selection,
    rss: Selection,
    /// Signal index of each series name seen (None: no signal matches it).
    kinds: HashMap<String, Option<usize>>,
}

impl Default for Signals {
    fn default() -> Self {
        Self::new()
    }
}

impl Signals {
    /// Prepares the selections.
    pub fn new() -> Self {
        let pats: Vec<Pattern> = SIGNALS.iter().map(|s| Pattern::new(s.series)).collect();
        Signals {
            spikes: Selection::new(all(), &pats),
            rss: Selection::new(all(), &[Pattern::new(LEAK_SERIES)]),
            kinds: HashMap::new(),
        }
    }

    /// The sample parts [`values`](Signals::values) reads.
    pub fn parts() -> Parts {
        let pats: Vec<Pattern> = SIGNALS.iter().map(|s| Pattern::new(s.series)).collect();
        parts_for(&pats).union(Parts::PROCESSES)
    }

    /// The signal values of `cur` (rates against `prev`), finite values only, into `out`.
    pub fn values(&self, cur: &Sample, prev: &Sample, out: &mut Vec<(String, f64)>) {
        out.clear();
        self.spikes.for_each(cur, Some(prev), |_, _, name, v| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                out.push((name.to_string(), v));
            }
        });
        let mut rss: Vec<(String, f64)> = Vec::new();
        self.rss.for_each(cur, Some(prev), |_, _, name, v| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                rss.push((name.to_string(), v));
            }
        });
        // Largest first; equal sizes by name, so the same processes are kept every second.
        rss.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        rss.truncate(LEAK_TOP);
        out.extend(rss);
    }

    /// The [`SIGNALS`] entry a series belongs to.
    fn kind(&mut self, series: &str) -> Option<usize> {
        if let Some(k) = self.kinds.get(series) {
            return *k;
        }
        let k = SIGNALS
            .iter()
            .position(|s| Pattern::new(s.series).matches(series));
        self.kinds.insert(series.to_string(), k);
        k
    }
}

/// Whether an episode mark opens or closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MarkState {
    /// The episode's first up sample.
    Start,
    /// The episode ended (written a few samples after its last up sample).
    End,
}

/// An episode mark the recorder wrote as it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// Episode kind.
    pub kind: String,
    /// The series.
    pub series: String,
    /// Start or end.
    pub state: MarkState,
    /// The episode so far.
    pub from_ns: i64,
    /// Its last up sample so far.
    pub to_ns: i64,
    /// Its largest value so far.
    pub peak: f64,
    /// Its baseline.
    pub baseline: f64,
    /// Its threshold.
    pub threshold: f64,
}

/// One sample's record in the signals lane.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SignalRecord {
    /// The sample's signal values.
    pub values: Vec<(String, f64)>,
    /// Episodes that started or ended at this sample.
    pub marks: Vec<Mark>,
}

/// Codec byte of signals records (MessagePack with field names, as samples).
const SIGNALS_CODEC: u8 = 1;

impl SignalRecord {
    /// Encodes into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(SIGNALS_CODEC);
        let mut ser = rmp_serde::Serializer::new(&mut *out).with_struct_map();
        // Strings and floats only: cannot fail.
        Serialize::serialize(self, &mut ser).expect("signals record encodes");
    }

    /// Decodes a record; `None` for anything else.
    pub fn decode(b: &[u8]) -> Option<Self> {
        match b.split_first() {
            Some((&SIGNALS_CODEC, rest)) => rmp_serde::from_slice(rest).ok(),
            _ => None,
        }
    }
}

/// Episode detection as `record` runs: one detector per series, fed every sample.
pub struct Online {
    signals: Signals,
    idx: u32,
    spikes: HashMap<String, (usize, SpikeDetector, u32)>,
    leaks: HashMap<String, (LeakDetector, u32)>,
}

impl Default for Online {
    fn default() -> Self {
        Self::new()
    }
}

impl Online {
    /// No history yet.
    pub fn new() -> Self {
        Online {
            signals: Signals::new(),
            idx: 0,
            spikes: HashMap::new(),
            leaks: HashMap::new(),
        }
    }

    /// Derives the signals of `cur` (against `prev`; none for the first sample), advances the
    /// detectors, and returns the record for the signals lane with any marks.
    pub fn step(&mut self, cur: &Sample, prev: Option<&Sample>) -> SignalRecord {
        let mut rec = SignalRecord::default();
        let idx = self.idx;
        self.idx += 1;
        let Some(prev) = prev else {
            return rec;
        };
        self.signals.values(cur, prev, &mut rec.values);
        let ts = cur.ts_ns;
        for (name, v) in &rec.values {
            let mark = |c: Change, kind: &str| {
                let (state, e) = match c {
                    Change::Started(e) => (MarkState::Start, e),
                    Change::Ended(e) => (MarkState::End, e),
                };
                Mark {
                    kind: kind.to_string(),
                    series: name.clone(),
                    state,
                    from_ns: e.from,
                    to_ns: e.to,
                    peak: e.peak,
                    baseline: e.baseline,
                    threshold: e.threshold,
                }
            };
            if let Some(k) = self.signals.kind(name) {
                let (_, det, last) = self
                    .spikes
                    .entry(name.clone())
                    .or_insert_with(|| (k, SpikeDetector::new(SIGNALS[k].floor), idx));
                *last = idx;
                if let Some(c) = det.push(idx, ts, *v, true) {
                    rec.marks.push(mark(c, SIGNALS[k].kind));
                }
            } else {
                let (det, last) = self.leaks.entry(name.clone()).or_default();
                *last = idx;
                if let Some(c) = det.push(ts, *v, true) {
                    rec.marks.push(mark(c, LEAK_KIND));
                }
            }
        }
        // Series gone for a baseline window (a removed cgroup, an exited process): their
        // open episodes end here, and their state goes.
        let stale = |last: u32| idx.saturating_sub(last) > WINDOW as u32;
        let mut ended = Vec::new();
        self.spikes.retain(|name, (k, det, last)| {
            if !stale(*last) {
                return true;
            }
            if let Some(e) = det.finish() {
                ended.push((SIGNALS[*k].kind, name.clone(), e));
            }
            false
        });
        self.leaks.retain(|name, (det, last)| {
            if !stale(*last) {
                return true;
            }
            if let Some(e) = det.finish() {
                ended.push((LEAK_KIND, name.clone(), e));
            }
            false
        });
        for (kind, series, e) in ended {
            rec.marks.push(Mark {
                kind: kind.to_string(),
                series,
                state: MarkState::End,
                from_ns: e.from,
                to_ns: e.to,
                peak: e.peak,
                baseline: e.baseline,
                threshold: e.threshold,
            });
        }
        rec
    }
}

/// Encodes samples for the store as the recorder writes them: the main payload, the process
/// table in the detail lane, and the signals lane with the episode marks of online detection.
#[derive(Default)]
pub struct SampleEncoder {
    online: Online,
    main: Vec<u8>,
    detail: Vec<u8>,
    signals: Vec<u8>,
}

/// One encoded sample: what to pass to the store's `append_lanes`, and the marks it carries.
pub struct Encoded<'a> {
    /// The main payload.
    pub main: &'a [u8],
    /// Payloads of the lanes.
    pub lanes: Vec<(Lane, &'a [u8])>,
    /// Episodes that started or ended with this sample.
    pub marks: Vec<Mark>,
}

impl SampleEncoder {
    /// A fresh encoder (online detection starts without history).
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs online detection on `sample` (after `prev`) and encodes it. The sample is left
    /// as it was.
    pub fn encode(
        &mut self,
        sample: &mut Sample,
        prev: Option<&Sample>,
    ) -> Result<Encoded<'_>, codec::CodecError> {
        let sig = self.online.step(sample, prev);
        sig.encode(&mut self.signals);
        codec::encode_lanes(sample, &mut self.main, &mut self.detail)?;
        let mut lanes = vec![(Lane::Signals, &self.signals[..])];
        if !self.detail.is_empty() {
            lanes.push((Lane::Detail, &self.detail[..]));
        }
        Ok(Encoded {
            main: &self.main,
            lanes,
            marks: sig.marks,
        })
    }
}

/// The signals of a range, and the recorder's marks in it.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Signal series by sample index (`start` is the range's first sample).
    pub data: Data,
    /// Marks written by the recorder in the range.
    pub marks: Vec<Mark>,
    /// Whether they came from the signals lane (else derived from the samples).
    pub from_signals_lane: bool,
}

/// Loads the signals of `(from - lookback, to]`: from the signals lane when every segment of
/// the range has one, else by deriving them from the samples.
pub fn load(dir: &Path, from: i64, to: i64, lookback_ns: i64) -> Result<Loaded> {
    let reader =
        Reader::open(dir).with_context(|| format!("cannot open store {}", dir.display()))?;
    let lo = from.saturating_sub(lookback_ns);
    let mut out = Loaded::default();
    let d = &mut out.data;
    let push = |d: &mut Data, ts: i64, values: &[(String, f64)]| {
        let idx = d.ts.len() as u32;
        d.ts.push(ts);
        for (name, v) in values {
            d.push_point(name, idx, *v);
        }
    };
    if reader.lane_covers(Lane::Signals, lo, to)? {
        out.from_signals_lane = true;
        for rec in reader.range_lane(Lane::Signals, lo.saturating_add(1), to)? {
            let rec = rec?;
            let Some(sr) = SignalRecord::decode(&rec.payload) else {
                d.undecodable += 1;
                continue;
            };
            push(d, rec.ts_ns, &sr.values);
            if rec.ts_ns > from {
                out.marks.extend(sr.marks);
            }
        }
    } else {
        let signals = Signals::new();
        let parts = Signals::parts();
        let mut prev: Option<Sample> = None;
        let mut values = Vec::new();
        // One sample before the range so its first sample has rates.
        for rec in reader.range(lo.saturating_sub(5_000_000_000), to)? {
            let rec = rec?;
            let Some(sample) = d.decode(&rec, parts) else {
                continue;
            };
            if sample.ts_ns > lo {
                if let Some(p) = prev.as_ref() {
                    signals.values(&sample, p, &mut values);
                    push(d, sample.ts_ns, &values);
                }
            }
            prev = Some(sample);
        }
    }
    d.start = d.ts.partition_point(|&t| t <= from);
    Ok(out)
}

/// Writes every sample of the store at `src` into a new store at `dst` the way `record` writes
/// them now (main payload, detail lane, signals lane with the online detector's marks), and
/// returns the number of marks. Stores recorded before the lanes existed gain them; the tests
/// use it to compare both read paths on the same recordings.
pub fn rewrite(src: &Path, dst: &Path) -> Result<usize> {
    let mut c = jitterscope_store::StoreConfig::new(dst);
    c.retain = std::time::Duration::from_secs(100 * 365 * 86400);
    let mut w = jitterscope_store::Writer::open(c)?;
    let mut enc = SampleEncoder::new();
    let mut prev: Option<Sample> = None;
    let mut marks = 0;
    for rec in Reader::open(src)?.range(i64::MIN, i64::MAX)? {
        let rec = rec?;
        let mut s = codec::decode_lanes(&rec.payload, rec.detail.as_deref(), Parts::ALL)?;
        let e = enc.encode(&mut s, prev.as_ref())?;
        marks += e.marks.len();
        w.append_lanes(s.ts_ns, e.main, &e.lanes)?;
        prev = Some(s);
    }
    w.close()?;
    Ok(marks)
}

/// Every episode of the window of `d`, in time order; `marks` flag those the recorder marked.
pub fn detect(d: &Data, marks: &[Mark]) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    let start = d.start as u32;
    let event = |kind: &'static str, what: &'static str, series: &str, e: Episode| Event {
        id: format!(
            "{}@{}+{}",
            kind,
            e.from / 1_000_000_000,
            ((e.to - e.from) / 1_000_000_000).max(1)
        ),
        kind,
        what,
        series: series.to_string(),
        from: rfc3339(e.from),
        to: rfc3339(e.to),
        from_ns: e.from,
        to_ns: e.to,
        peak: e.peak,
        baseline: e.baseline,
        threshold: e.threshold,
        online: marks.iter().any(|m| {
            m.state == MarkState::Start
                && m.kind == kind
                && m.series == series
                && (e.from..=e.to).contains(&m.from_ns)
        }),
    };
    for sig in SIGNALS {
        for (name, s) in d.matching(sig.series) {
            let mut det = SpikeDetector::new(sig.floor);
            for &(i, v) in &s.points {
                if let Some(Change::Ended(e)) = det.push(i, d.at(i), v, i >= start) {
                    out.push(event(sig.kind, sig.what, name, e));
                }
            }
            if let Some(e) = det.finish() {
                out.push(event(sig.kind, sig.what, name, e));
            }
        }
    }
    for (name, s) in d.matching(LEAK_SERIES) {
        let mut det = LeakDetector::default();
        for &(i, v) in &s.points {
            if let Some(Change::Ended(e)) = det.push(d.at(i), v, i >= start) {
                out.push(event(LEAK_KIND, LEAK_WHAT, name, e));
            }
        }
        if let Some(e) = det.finish() {
            out.push(event(LEAK_KIND, LEAK_WHAT, name, e));
        }
    }
    out.sort_by(|a, b| a.from_ns.cmp(&b.from_ns).then(a.id.cmp(&b.id)));
    out
}

/// Parses an event id into its window (from, to) in ns.
pub fn parse_id(id: &str) -> Option<(i64, i64)> {
    let (_, rest) = id.rsplit_once('@')?;
    let (start, secs) = rest.split_once('+')?;
    let start: i64 = start.parse().ok()?;
    let secs: i64 = secs.parse().ok()?;
    if secs < 0 {
        return None;
    }
    let from = start.checked_mul(1_000_000_000)?;
    Some((from, from.checked_add(secs.checked_mul(1_000_000_000)?)?))
}

/// Events per kind, for a summary line.
pub fn counts(ev: &[Event]) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for e in ev {
        *m.entry(e.kind).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Series;

    fn data(values: &[f64], start: usize) -> Data {
        let mut d = Data {
            ts: (0..values.len() as i64)
                .map(|i| (1_000 + i) * 1_000_000_000)
                .collect(),
            start,
            ..Default::default()
        };
        d.series.insert(
            "irq.tlb_per_s".into(),
            Series {
                points: values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (i as u32, *v))
                    .collect(),
            },
        );
        d
    }

    #[test]
    fn a_storm_over_a_quiet_baseline_is_one_episode() {
        let mut v = vec![5.0; 100];
        v.extend([5000.0, 8000.0, 10.0, 7000.0, 6000.0]); // one gap sample: same episode
        v.extend(vec![5.0; 20]);
        let ev = detect(&data(&v, 50), &[]);
        assert_eq!(ev.len(), 1, "{ev:?}");
        let e = &ev[0];
        assert_eq!(e.kind, "tlb-storm");
        assert_eq!(e.peak, 8000.0);
        assert_eq!(e.id, "tlb-storm@1100+4");
        assert_eq!(
            parse_id(&e.id),
            Some((1_100_000_000_000, 1_104_000_000_000))
        );
    }

    #[test]
    fn a_steady_busy_host_has_no_events() {
        // Always around 5000/s: above the floor, but that is its normal.
        let v: Vec<f64> = (0..400).map(|i| 5000.0 + (i % 7) as f64 * 100.0).collect();
        assert!(detect(&data(&v, 310), &[]).is_empty());
    }

    #[test]
    fn long_gaps_split_episodes_and_the_baseline_period_is_not_reported() {
        let mut v = vec![0.0; 20];
        v.extend([3000.0; 3]); // in the baseline part: not reported
        v.extend(vec![0.0; 20]);
        v.extend([3000.0; 2]);
        v.extend(vec![0.0; 5]);
        v.extend([3000.0; 2]);
        let ev = detect(&data(&v, 30), &[]);
        assert_eq!(ev.len(), 2, "{ev:?}");
    }

    const MIB: f64 = 1048576.0;

    fn leak(values: &[f64], start: usize) -> Vec<Event> {
        let mut d = data(&[], 0);
        d.series.clear();
        d.ts = (0..values.len() as i64)
            .map(|i| (1_000 + i) * 1_000_000_000)
            .collect();
        d.start = start;
        d.series.insert(
            "proc.7.app.rss_bytes".into(),
            Series {
                points: values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (i as u32, *v))
                    .collect(),
            },
        );
        detect(&d, &[])
    }

    #[test]
    fn steady_rss_growth_is_a_leak_trend_and_flat_or_noisy_is_not() {
        // 100 MiB, then 2 MiB/s for 30 s, then flat for 60 s.
        let mut v = vec![100.0 * MIB; 20];
        v.extend((1..=30).map(|i| (100.0 + 2.0 * i as f64) * MIB));
        v.extend(vec![160.0 * MIB; 60]);
        let ev = leak(&v, 10);
        assert_eq!(ev.len(), 1, "{ev:?}");
        let e = &ev[0];
        assert_eq!(e.kind, "leak-trend");
        assert_eq!(e.peak, 160.0 * MIB);
        assert!(e.from_ns >= 1_010_000_000_000, "{e:?}");
        assert_eq!(e.to_ns, 1_049_000_000_000, "ends at its last new high");
        assert!(leak(&[300.0 * MIB; 100], 10).is_empty());
        // Up and down by 40 MiB: grows overall, but not steadily.
        let saw: Vec<f64> = (0..100)
            .map(|i| (100.0 + i as f64 * 0.5 + if i % 2 == 0 { 40.0 } else { 0.0 }) * MIB)
            .collect();
        assert!(leak(&saw, 10).is_empty(), "{:?}", leak(&saw, 10));
    }

    #[test]
    fn online_detection_marks_what_offline_detection_finds() {
        let mut v = vec![5.0; 100];
        v.extend([5000.0, 8000.0, 10.0, 7000.0, 6000.0]);
        v.extend(vec![5.0; 20]);
        let offline = detect(&data(&v, 0), &[]);
        let mut det = SpikeDetector::new(1000.0);
        let mut changes = Vec::new();
        for (i, x) in v.iter().enumerate() {
            changes.extend(det.push(i as u32, (1_000 + i as i64) * 1_000_000_000, *x, true));
        }
        assert_eq!(offline.len(), 1);
        match changes.as_slice() {
            [Change::Started(s), Change::Ended(e)] => {
                assert_eq!(s.from, offline[0].from_ns);
                assert_eq!(
                    (e.from, e.to, e.peak),
                    (offline[0].from_ns, offline[0].to_ns, 8000.0)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn signal_records_round_trip_and_garbage_is_refused() {
        let r = SignalRecord {
            values: vec![("irq.tlb_per_s".into(), 3000.0)],
            marks: vec![Mark {
                kind: "tlb-storm".into(),
                series: "irq.tlb_per_s".into(),
                state: MarkState::Start,
                from_ns: 1,
                to_ns: 1,
                peak: 3000.0,
                baseline: 1.5,
                threshold: 1000.0,
            }],
        };
        let mut b = Vec::new();
        r.encode(&mut b);
        assert_eq!(SignalRecord::decode(&b), Some(r));
        assert_eq!(SignalRecord::decode(&[]), None);
        assert_eq!(SignalRecord::decode(&[9, 0x80]), None);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut with_codec = vec![SIGNALS_CODEC];
            with_codec.extend(&b);
            let _ = SignalRecord::decode(&with_codec);
            let _ = SignalRecord::decode(&b);
        }
    }

    #[test]
    fn ids_parse_or_fail_cleanly() {
        assert_eq!(parse_id("x@10+5"), Some((10_000_000_000, 15_000_000_000)));
        assert_eq!(parse_id("x@10"), None);
        assert_eq!(parse_id("x@a+5"), None);
        assert_eq!(parse_id("x@10+-5"), None);
        assert_eq!(parse_id(&format!("x@{}+1", i64::MAX)), None);
    }
}
