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
//! on a sliding window, with its judgement of the growth's shape (grown for 20 s or more, not
//! levelled off). An episode opens only once the growth has lasted 90 s: a point in time has
//! no future, and a service warming up after its start grows as steadily as a leak for about
//! a minute before it levels off (the rule, which sees the whole window, says "too soon to
//! tell" below 0.5 meanwhile). The episode starts where the growth did. A trend runs to its
//! last new high, and ends after 60 s without one.
//!
//! **Online and offline, one detector.** `record` derives these signals from each sample
//! ([`Online`]), feeds them to the detectors below and writes both the values and the marks
//! (an episode started, an episode ended) to the store's signals lane as they happen.
//! `events` runs the same detectors over any range: from the signals lane when the range's
//! segments have one (a day of it is a few MB), else derived from the samples themselves, as
//! for stores written before it existed. The episodes the recorder marked live are flagged
//! `online`.

mod load;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::data::Data;
use crate::rfc3339;
pub use jitterscope_detect::{Change, Episode, LeakDetector, Online, SpikeDetector, LEAK_KIND};
pub use jitterscope_model::signals::{Mark, MarkState, Signal, SignalRecord, SIGNALS};
pub use load::{load, Loaded};

/// What a leak trend is, as `events` prints it.
pub const LEAK_WHAT: &str = "process memory growing steadily (RSS)";

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

/// Every episode of the window of `d`, in time order; `marks` flag those the recorder marked.
pub fn detect(d: &Data, marks: &[Mark]) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    let start = d.start as u32;
    let event = |kind: &'static str, what: &'static str, series: &str, e: Episode| Event {
        id: id_of(kind, e.from, e.to),
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
        online: marked_live(marks, kind, series, e.from, e.to),
    };
    for sig in SIGNALS {
        for s in d.each(sig.metric) {
            let labels: Vec<&str> = s.labels.iter().map(String::as_str).collect();
            if !sig.matches(s.def, &labels) {
                continue;
            }
            let name = s.name();
            let mut det = SpikeDetector::new(sig.floor);
            for &(i, v) in &s.points {
                if let Some(Change::Ended(e)) = det.push(i, d.at(i), v, i >= start) {
                    out.push(event(sig.kind, sig.what, &name, e));
                }
            }
            if let Some(e) = det.finish() {
                out.push(event(sig.kind, sig.what, &name, e));
            }
        }
    }
    for s in d.each(jitterscope_model::signals::RSS) {
        let name = s.name();
        let mut det = LeakDetector::default();
        for &(i, v) in &s.points {
            if let Some(Change::Ended(e)) = det.push(d.at(i), v, i >= start) {
                out.push(event(LEAK_KIND, LEAK_WHAT, &name, e));
            }
        }
        if let Some(e) = det.finish() {
            out.push(event(LEAK_KIND, LEAK_WHAT, &name, e));
        }
    }
    out.sort_by(|a, b| a.from_ns.cmp(&b.from_ns).then(a.id.cmp(&b.id)));
    out
}

/// Whether the recorder marked the episode `[from, to]` of `kind` on `series` as it happened: a
/// start mark inside it, or, for an episode already under way when the range began (whose
/// `from` is the range's first sample), a start mark before it whose end, if marked, is not
/// before `from`.
fn marked_live(marks: &[Mark], kind: &str, series: &str, from: i64, to: i64) -> bool {
    let ours = |m: &&Mark| m.kind == kind && m.series == series;
    marks
        .iter()
        .filter(ours)
        .filter(|m| m.state == MarkState::Start && m.from_ns <= to)
        .any(|start| {
            start.from_ns >= from
                || !marks.iter().filter(ours).any(|end| {
                    end.state == MarkState::End && end.from_ns == start.from_ns && end.to_ns < from
                })
        })
}

/// The id of an episode of `kind` from `from_ns` to its last up sample `to_ns`:
/// `<kind>@<start epoch s>+<seconds, at least 1>`. `events`, the web UI and a fleet's rows
/// (whose marks carry the same bounds) all name an episode by it.
pub fn id_of(kind: &str, from_ns: i64, to_ns: i64) -> String {
    format!(
        "{kind}@{}+{}",
        from_ns / 1_000_000_000,
        (to_ns.saturating_sub(from_ns) / 1_000_000_000).max(1)
    )
}

/// The episode a recorder's mark describes (a fleet store's row is one), as `events` gives
/// it; `None` for a kind this build does not watch.
pub fn event_of_mark(m: &Mark, online: bool) -> Option<Event> {
    let (kind, what) = SIGNALS
        .iter()
        .map(|s| (s.kind, s.what))
        .chain([(LEAK_KIND, LEAK_WHAT)])
        .find(|(k, _)| *k == m.kind)?;
    Some(Event {
        id: id_of(kind, m.from_ns, m.to_ns),
        kind,
        what,
        series: m.series.clone(),
        from: rfc3339(m.from_ns),
        to: rfc3339(m.to_ns),
        from_ns: m.from_ns,
        to_ns: m.to_ns,
        peak: m.peak,
        baseline: m.baseline,
        threshold: m.threshold,
        online,
    })
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
    use jitterscope_model::metrics::{irq, process};

    fn data(values: &[f64], start: usize) -> Data {
        let mut d = Data {
            ts: (0..values.len() as i64)
                .map(|i| (1_000 + i) * 1_000_000_000)
                .collect(),
            start,
            ..Default::default()
        };
        for (i, v) in values.iter().enumerate() {
            d.push(&irq::TLB_PER_S, &[], i as u32, *v);
        }
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
        for (i, v) in values.iter().enumerate() {
            d.push(&process::PROC_RSS_BYTES, &["7", "app"], i as u32, *v);
        }
        detect(&d, &[])
    }

    #[test]
    fn steady_rss_growth_is_a_leak_trend_and_flat_or_noisy_is_not() {
        // 100 MiB, then 1 MiB/s for 120 s, then flat for 90 s.
        let mut v = vec![100.0 * MIB; 20];
        v.extend((1..=120).map(|i| (100.0 + i as f64) * MIB));
        v.extend(vec![220.0 * MIB; 90]);
        let ev = leak(&v, 10);
        assert_eq!(ev.len(), 1, "{ev:?}");
        let e = &ev[0];
        assert_eq!(e.kind, "leak-trend");
        assert_eq!(e.peak, 220.0 * MIB);
        assert!(e.from_ns >= 1_010_000_000_000, "{e:?}");
        assert!(
            e.from_ns <= 1_020_000_000_000,
            "starts where the growth did: {e:?}"
        );
        assert_eq!(e.to_ns, 1_139_000_000_000, "ends at its last new high");
        assert!(leak(&[300.0 * MIB; 100], 10).is_empty());
        // Up and down by 40 MiB: grows overall, but not steadily.
        let saw: Vec<f64> = (0..100)
            .map(|i| (100.0 + i as f64 * 0.5 + if i % 2 == 0 { 40.0 } else { 0.0 }) * MIB)
            .collect();
        assert!(leak(&saw, 10).is_empty(), "{:?}", leak(&saw, 10));
    }

    #[test]
    fn warm_ups_and_short_lived_growth_are_no_leak_trend() {
        // A service just started: 60 -> 84 MiB in 45 s, then flat for four minutes.
        let mut v: Vec<f64> = (0..45)
            .map(|i| (60.0 + 24.0 * i as f64 / 45.0) * MIB)
            .collect();
        v.extend(vec![84.0 * MIB; 240]);
        assert!(leak(&v, 0).is_empty(), "{:?}", leak(&v, 0));
        // A cache filling for 80 s with the rate decaying as it fills (a database warming
        // up), then flat.
        let v: Vec<f64> = (0..400)
            .map(|i| (200.0 + 300.0 * (1.0 - (-(i as f64) / 25.0).exp())) * MIB)
            .collect();
        assert!(leak(&v, 0).is_empty(), "{:?}", leak(&v, 0));
        // Compiler runs one after another in one process series each: 25 MiB in 6 s, gone.
        for k in 0..10 {
            let v: Vec<f64> = (0..7).map(|i| (8.0 + 4.0 * i as f64) * MIB).collect();
            assert!(leak(&v, 0).is_empty(), "run {k}");
        }
        // A leak in a service started with the window: no episode in its first 90 s, one
        // once it kept growing, starting where it started.
        let v: Vec<f64> = (0..80).map(|i| (60.0 + i as f64) * MIB).collect();
        assert!(leak(&v, 0).is_empty(), "{:?}", leak(&v, 0));
        let v: Vec<f64> = (0..150).map(|i| (60.0 + i as f64) * MIB).collect();
        let ev = leak(&v, 0);
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert!(ev[0].from_ns <= 1_002_000_000_000, "{ev:?}");
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

    /// lab check's window begins after its workload started: two-incidents' throttling, at
    /// 96% from its first second, was marked live during the set-up and `events` said it was
    /// not, as it took only start marks inside the range.
    #[test]
    fn an_episode_under_way_when_the_range_begins_was_marked_live_before_it() {
        let mut v = vec![5.0; 100];
        v.extend(vec![6000.0; 20]);
        v.extend(vec![5.0; 20]);
        // The range begins 5 samples into the storm.
        let ev = detect(&data(&v, 105), &[]);
        assert_eq!(ev.len(), 1, "{ev:?}");
        let e = &ev[0];
        assert_eq!(e.from_ns, 1_105_000_000_000);
        let at = |i: i64| (1_000 + i) * 1_000_000_000;
        let m = |state, from, to| Mark {
            kind: e.kind.to_string(),
            series: e.series.clone(),
            state,
            from_ns: at(from),
            to_ns: at(to),
            peak: 6000.0,
            baseline: 5.0,
            threshold: 1000.0,
        };
        let live = |marks: &[Mark]| detect(&data(&v, 105), marks)[0].online;
        assert!(live(&[m(MarkState::Start, 100, 100)]));
        assert!(live(&[
            m(MarkState::Start, 100, 100),
            m(MarkState::End, 100, 119)
        ]));
        // An earlier episode that ended before the range is not this one.
        assert!(!live(&[
            m(MarkState::Start, 80, 80),
            m(MarkState::End, 80, 90)
        ]));
        // Nor is a mark of another series.
        let mut other = m(MarkState::Start, 100, 100);
        other.series.push_str("-other");
        assert!(!live(&[other]));
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
