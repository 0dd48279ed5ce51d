//! The signals of a range: read from the signals lane, or derived from the samples where the
//! store predates the lane.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use jitterscope_model::codec::Parts;
use jitterscope_model::registry::{parse_series, MetricDef};
use jitterscope_model::signals::{Derive, Mark, SignalRecord, LANE_VERSION, RSS, SHOWN, SIGNALS};
use jitterscope_model::stored::{Encoder, SampleReader};
use jitterscope_model::Sample;
use jitterscope_store::Lane;

use super::Online;
use crate::data::Data;

/// The signals of a range, and the recorder's marks in it.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Signal series by sample index (`start` is the range's first sample).
    pub data: Data,
    /// Marks written by the recorder in the range and its lookback (an episode under way when
    /// the range begins was marked before it).
    pub marks: Vec<Mark>,
    /// Whether they came from the signals lane (else derived from the samples).
    pub from_signals_lane: bool,
    /// The oldest [`LANE_VERSION`] among the lane's records read (the current one when
    /// derived from the samples, which yields everything this build keeps): below it, a
    /// [`SHOWN`] series missing from a record may just not have been kept yet.
    pub version: u8,
}

/// The metrics the lane's series belong to.
fn lane_metrics() -> Vec<&'static MetricDef> {
    let mut v: Vec<&'static MetricDef> = SIGNALS.iter().map(|s| s.metric).collect();
    v.push(RSS);
    for s in SHOWN {
        if !v.contains(&s.def) {
            v.push(s.def);
        }
    }
    v
}

/// Names already parsed back to their metric and labels (`None`: a name this build does not
/// know, a renamed or newer metric, which is left out).
type Known = HashMap<String, Option<(&'static MetricDef, Vec<String>)>>;

/// Appends value `v` of lane series `name` at sample `idx`. The lane holds the same few dozen
/// names every second, so each is parsed once: parsing every value made a day's `events` five
/// times slower.
fn push(
    d: &mut Data,
    known: &mut Known,
    defs: &[&'static MetricDef],
    idx: u32,
    name: &str,
    v: f64,
) {
    if let Some(s) = d.series.get_mut(name) {
        s.points.push((idx, v));
        return;
    }
    let parsed = known
        .entry(name.to_string())
        .or_insert_with(|| parse_series(defs, name));
    if let Some((def, labels)) = parsed {
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        d.push_point(def, &labels, name, idx, v);
    }
}

/// Loads the signals of `(from - lookback, to]`: from the signals lane when every segment of
/// the range has one, else by deriving them from the samples.
pub fn load(dir: &Path, from: i64, to: i64, lookback_ns: i64) -> Result<Loaded> {
    let reader =
        SampleReader::open(dir).with_context(|| format!("cannot open store {}", dir.display()))?;
    let lo = from.saturating_sub(lookback_ns);
    let mut out = Loaded {
        version: LANE_VERSION,
        ..Default::default()
    };
    // A lane that lost records (garbage, a damaged frame) would hide what the main stream
    // still holds: the signals are then derived from the samples instead.
    if reader.store().lane_covers(Lane::Signals, lo, to)? && from_lane(&reader, &mut out, lo, to)? {
        out.from_signals_lane = true;
    } else {
        let d = &mut out.data;
        let derive = Derive::new();
        let mut values = Vec::new();
        let defs = lane_metrics();
        let mut known = Known::new();
        let mut pairs = reader.pairs(lo.saturating_add(1), to, derive.parts())?;
        while let Some((cur, prev)) = pairs.next() {
            let Some(prev) = prev else { continue };
            derive.values(cur, prev, &mut values);
            let idx = d.ts.len() as u32;
            d.ts.push(cur.ts_ns);
            for v in &values {
                push(d, &mut known, &defs, idx, &v.series, v.value);
            }
        }
        d.damage = pairs.damage();
    }
    let d = &mut out.data;
    d.start = d.ts.partition_point(|&t| t <= from);
    Ok(out)
}

/// Reads the signals of `(lo, to]` from the lane into `out`; false (and `out` left empty)
/// when the lane lost any record.
fn from_lane(reader: &SampleReader, out: &mut Loaded, lo: i64, to: i64) -> Result<bool> {
    let d = &mut out.data;
    let defs = lane_metrics();
    // The lane holds the same few dozen names every second: each is parsed once. A name
    // this build does not know (a renamed or newer metric) is left out.
    let mut known: HashMap<String, Option<(&'static MetricDef, Vec<String>)>> = HashMap::new();
    let mut recs = reader.signals(lo.saturating_add(1), to)?;
    for (ts, sr) in recs.by_ref() {
        let idx = d.ts.len() as u32;
        d.ts.push(ts);
        out.version = out.version.min(sr.version);
        for (name, v) in &sr.values {
            push(d, &mut known, &defs, idx, name, *v);
        }
        out.marks.extend(sr.marks);
    }
    let damage = recs.damage();
    if damage.lost_any() {
        *out = Loaded {
            version: LANE_VERSION,
            ..Default::default()
        };
        return Ok(false);
    }
    d.damage = damage;
    Ok(true)
}

/// Writes every sample of the store at `src` into a new store at `dst` the way `record` writes
/// them now (main payload, detail lane, signals lane with the online detector's marks), and
/// returns the number of marks. Stores recorded before the lanes existed gain them; the tests
/// use it to compare both read paths on the same recordings.
pub fn rewrite(src: &Path, dst: &Path) -> Result<usize> {
    let mut c = jitterscope_store::StoreConfig::new(dst);
    c.retain = std::time::Duration::from_secs(100 * 365 * 86400);
    let mut w = jitterscope_store::Writer::open(c)?;
    let mut online = Online::new();
    let mut enc = Encoder::new();
    let mut prev: Option<Sample> = None;
    let mut marks = 0;
    for mut s in SampleReader::open(src)?.samples(i64::MIN, i64::MAX, Parts::ALL)? {
        let rec: SignalRecord = online.step(&s, prev.as_ref());
        marks += rec.marks.len();
        let e = enc.encode(&mut s, &rec)?;
        w.append_lanes(s.ts_ns, e.main, &e.lanes)?;
        prev = Some(s);
    }
    w.close()?;
    Ok(marks)
}
