//! Holes in a diagnosed window: stretches with no sample, where the recorder was stopped or
//! starved, or where damaged records were skipped. A rule judges the samples it has; a
//! mechanism that peaked inside a hole is seen smeared over the rates of the sample after it,
//! or not at all, so the report lowers its confidences and says why.
//!
//! A hole is a gap between two consecutive samples longer than [`GAP_FACTOR`] times the median
//! gap, clipped to the window. Only gaps between samples count: before the first sample read
//! and after the last one the recording may simply not have started yet or gone on yet (a
//! window asked past the end of a recording is not a hole in its data, and the read stops at
//! the window's end, so a recorder stopped before it and restarted after it cannot be told
//! from one that stopped for good). The fraction is of the part of the window the recording
//! spans, for the same reason.

use jitterscope_model::time::rfc3339;
use serde::Serialize;

/// A gap longer than this many median gaps is a hole. The recorder skips a slot when it was
/// starved for more than one (a gap of 2 intervals happens on a busy host and loses nothing
/// of the rates); 3 intervals means at least two samples missing.
pub const GAP_FACTOR: f64 = 2.5;

/// Holes covering at most this fraction of the window leave the confidences as they are: a
/// few skipped samples do not change what the rest show.
pub const TOLERATED: f64 = 0.05;

/// One stretch without samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hole {
    /// Start: the last sample before it, or the window's start (RFC 3339).
    pub from: String,
    /// End: the first sample after it, or the window's end (RFC 3339).
    pub to: String,
    /// Its length in seconds.
    pub seconds: f64,
}

/// The holes of a window, when they cover more than [`TOLERATED`] of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Holes {
    /// The stretches without samples, in time order.
    pub holes: Vec<Hole>,
    /// Their total length in seconds.
    pub seconds: f64,
    /// Seconds of the window the recording spans: what the fraction is of.
    pub of_seconds: f64,
    /// `seconds / of_seconds`; each finding's confidence was multiplied by `1 - fraction`.
    pub fraction: f64,
}

/// The holes of the window `(from, to]` in the sample times `ts` (sorted; they may reach
/// before the window, into the baseline), or `None` when they cover at most [`TOLERATED`].
pub fn find(ts: &[i64], from: i64, to: i64) -> Option<Holes> {
    let gaps: Vec<i64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
    // Two gaps cannot say which is the usual one.
    if gaps.len() < 3 {
        return None;
    }
    let mut sorted: Vec<f64> = gaps.iter().map(|&g| g as f64).collect();
    let typical = crate::data::median(&mut sorted);
    if typical <= 0.0 {
        return None;
    }
    let lo = from.max(ts[0]);
    let hi = to.min(ts[ts.len() - 1]);
    if hi <= lo {
        return None;
    }
    let mut holes = Vec::new();
    let mut total = 0i64;
    for w in ts.windows(2) {
        if ((w[1] - w[0]) as f64) <= GAP_FACTOR * typical {
            continue;
        }
        let (a, b) = (w[0].max(lo), w[1].min(hi));
        if b > a {
            total += b - a;
            holes.push(Hole {
                from: rfc3339(a),
                to: rfc3339(b),
                seconds: crate::rules::round((b - a) as f64 / 1e9),
            });
        }
    }
    let fraction = total as f64 / (hi - lo) as f64;
    (fraction > TOLERATED).then(|| Holes {
        holes,
        seconds: crate::rules::round(total as f64 / 1e9),
        of_seconds: crate::rules::round((hi - lo) as f64 / 1e9),
        fraction: (fraction * 1000.0).round() / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    /// One sample a second at these seconds.
    fn at(secs: &[i64]) -> Vec<i64> {
        secs.iter().map(|s| s * S).collect()
    }

    fn every_second(from: i64, to: i64, except: std::ops::Range<i64>) -> Vec<i64> {
        let v: Vec<i64> = (from..=to).filter(|s| !except.contains(s)).collect();
        at(&v)
    }

    #[test]
    fn a_stopped_recorder_is_a_hole_of_its_length() {
        // Baseline 0..=10, window (10, 70], nothing from 21 to 32.
        let ts = every_second(0, 70, 21..33);
        let h = find(&ts, 10 * S, 70 * S).unwrap();
        assert_eq!(h.holes.len(), 1);
        assert_eq!(h.holes[0].seconds, 13.0);
        assert_eq!(h.holes[0].from, rfc3339(20 * S));
        assert_eq!(h.holes[0].to, rfc3339(33 * S));
        assert_eq!(h.of_seconds, 60.0);
        assert_eq!(h.fraction, 0.217);
    }

    #[test]
    fn late_samples_and_small_holes_are_tolerated() {
        // A sample two intervals late is not a hole.
        let ts = every_second(0, 70, 30..31);
        assert_eq!(find(&ts, 10 * S, 70 * S), None);
        // A real hole, but of 3 s in 60 s: 5%.
        let ts = every_second(0, 70, 30..32);
        assert_eq!(find(&ts, 10 * S, 70 * S), None);
        let ts = every_second(0, 70, 30..33);
        assert!(find(&ts, 10 * S, 70 * S).is_some());
    }

    #[test]
    fn a_window_beyond_the_recording_is_not_a_hole() {
        // Recorded 0..=40; the window asks up to 100 and from before the first sample.
        let ts = every_second(0, 40, 0..0);
        assert_eq!(find(&ts, 10 * S, 100 * S), None);
        assert_eq!(find(&ts, -50 * S, 30 * S), None);
        // A hole in what was recorded is still one, of the recorded part of the window.
        let ts = every_second(0, 40, 20..30);
        let h = find(&ts, 10 * S, 100 * S).unwrap();
        assert_eq!(h.seconds, 11.0);
        assert_eq!(h.of_seconds, 30.0);
    }

    #[test]
    fn a_hole_across_the_window_start_counts_inside_it() {
        // Nothing from 6 to 19; the window starts at 10.
        let ts = every_second(0, 40, 6..20);
        let h = find(&ts, 10 * S, 40 * S).unwrap();
        assert_eq!(h.holes[0].from, rfc3339(10 * S));
        assert_eq!(h.holes[0].seconds, 10.0);
        assert_eq!(h.of_seconds, 30.0);
    }

    #[test]
    fn the_usual_gap_is_the_recording_s_own() {
        // Every 10 s: a gap of 20 s is two intervals, not a hole.
        let ts = at(&[0, 10, 20, 30, 50, 60, 70, 80]);
        assert_eq!(find(&ts, 0, 80 * S), None);
        // Too few samples to know the interval.
        assert_eq!(find(&at(&[0, 1, 50]), 0, 50 * S), None);
    }
}
