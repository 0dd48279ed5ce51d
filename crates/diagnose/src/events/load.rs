//! The signals of a range: read from the signals lane, or derived from the samples where the
//! store predates the lane.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use jitterscope_model::registry::{parse_series, MetricDef};
use jitterscope_model::signals::{Derive, Mark, LANE_VERSION, RSS, SHOWN, SIGNALS};
use jitterscope_model::stored::SampleReader;
use jitterscope_store::Lane;

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

/// Names already parsed back to their metric, labels and current name (`None`: a name this
/// build does not know, a newer metric or one renamed without an alias, which is left out and
/// counted in the read's damage).
type Known = HashMap<String, Option<(&'static MetricDef, Vec<String>, String)>>;

/// What lane series `name` is: its metric, labels and current name (a name recorded before a
/// rename resolves to the new one), parsed once per name; `None` (counted once in the read's
/// damage) for a name no metric knows.
fn resolve<'k>(
    d: &mut Data,
    known: &'k mut Known,
    defs: &[&'static MetricDef],
    name: &str,
) -> Option<&'k (&'static MetricDef, Vec<String>, String)> {
    known
        .entry(name.to_string())
        .or_insert_with(|| {
            let parsed = parse_series(defs, name).map(|(def, labels)| {
                let l: Vec<&str> = labels.iter().map(String::as_str).collect();
                let now = def.series_name(&l);
                (def, labels, now)
            });
            if parsed.is_none() {
                d.damage.unknown_series += 1;
            }
            parsed
        })
        .as_ref()
}

/// Appends value `v` of lane series `name` at sample `idx`, under the name its metric has now.
/// The lane holds the same few dozen names every second, so each is parsed once: parsing
/// every value made a day's `events` five times slower.
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
    if let Some((def, labels, now)) = resolve(d, known, defs, name) {
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        d.push_point(def, &labels, now, idx, v);
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
        let unknown = d.damage.unknown_series;
        d.damage = pairs.damage();
        d.damage.unknown_series = unknown;
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
    let mut known = Known::new();
    let mut recs = reader.signals(lo.saturating_add(1), to)?;
    for (ts, sr) in recs.by_ref() {
        let idx = d.ts.len() as u32;
        d.ts.push(ts);
        out.version = out.version.min(sr.version);
        for (name, v) in &sr.values {
            push(d, &mut known, &defs, idx, name, *v);
        }
        // A mark names its series as the lane recorded it: under the current name too, so
        // that an episode recorded before a rename is still found marked live.
        for mut m in sr.marks {
            if let Some((_, _, now)) = resolve(d, &mut known, &defs, &m.series) {
                m.series.clone_from(now);
            }
            out.marks.push(m);
        }
    }
    let damage = recs.damage();
    if damage.lost_any() {
        *out = Loaded {
            version: LANE_VERSION,
            ..Default::default()
        };
        return Ok(false);
    }
    let unknown = d.damage.unknown_series;
    d.damage = damage;
    d.damage.unknown_series = unknown;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitterscope_model::signals::SignalRecord;
    use jitterscope_model::Sample;

    /// A metric renamed from `cgroup.<cgroup>.cpu.throttle_share` (its old name an alias).
    static RENAMED: MetricDef = MetricDef {
        name: "cgroup.<cgroup>.cpu.throttled_share_pct",
        unit: jitterscope_model::registry::Unit::Percent,
        kind: jitterscope_model::registry::Kind::Rate,
        help: "test",
        eval: |_, _| {},
        aliases: &["cgroup.<cgroup>.cpu.throttle_share"],
        parts: jitterscope_model::codec::Parts::CGROUPS,
    };

    /// Values and marks a lane recorded under a metric's old name read under its new one,
    /// with the values recorded under the new name, as one series.
    #[test]
    fn a_name_recorded_before_a_rename_reads_under_the_new_one() {
        let defs: &[&'static MetricDef] = &[&RENAMED];
        let mut d = Data::default();
        let mut known = Known::new();
        let (old, now) = (
            "cgroup./web.cpu.throttle_share",
            "cgroup./web.cpu.throttled_share_pct",
        );
        for (i, name, v) in [(0, old, 5.0), (1, old, 6.0), (2, now, 7.0)] {
            push(&mut d, &mut known, defs, i, name, v);
        }
        assert_eq!(d.series.len(), 1, "{:?}", d.series.keys());
        assert_eq!(d.series[now].points, [(0, 5.0), (1, 6.0), (2, 7.0)]);
        assert_eq!(d.series[now].labels, ["/web"]);
        let (_, _, mark_name) = resolve(&mut d, &mut known, defs, old).unwrap();
        assert_eq!(mark_name, now);
        assert_eq!(d.damage.unknown_series, 0);
    }

    /// A lane whose records hold a name this build knows and one it does not (a metric
    /// renamed without an alias): the known one reads, the other is counted, once, in the
    /// damage and its note.
    #[test]
    fn a_lane_name_this_build_does_not_know_is_counted_not_dropped_silently() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = jitterscope_testkit::sample_writer(dir.path()).unwrap();
        let known = "psi.cpu.some_pct";
        for i in 1..=5i64 {
            let mut s = Sample {
                ts_ns: i * 1_000_000_000,
                mono_ns: i as u64 * 1_000_000_000,
                ..Default::default()
            };
            let rec = SignalRecord {
                values: vec![
                    (known.to_string(), i as f64),
                    ("psi.cpu.some_share_v0".to_string(), i as f64),
                ],
                marks: Vec::new(),
                version: LANE_VERSION,
            };
            w.append(&mut s, &rec).unwrap();
        }
        w.close().unwrap();
        let l = load(dir.path(), 0, 10_000_000_000, 0).unwrap();
        assert!(l.from_signals_lane);
        let pts = &l.data.series[known].points;
        assert_eq!(pts.len(), 5);
        assert_eq!(l.data.damage.unknown_series, 1);
        let note = l.data.damage.note().expect("a note");
        assert!(
            note.contains("left out 1 series of the signals lane"),
            "{note}"
        );
        assert!(!note.contains("damaged"), "{note}");
        assert!(!l.data.damage.lost_any() && l.data.damage.is_empty());
    }
}
