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

use std::collections::BTreeMap;

use serde::Serialize;

use crate::data::{Data, Series};
use crate::rfc3339;

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

/// The series globs [`detect`] reads.
pub fn select() -> Vec<&'static str> {
    SIGNALS.iter().map(|s| s.series).collect()
}

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
    /// Baseline median when it started.
    pub baseline: f64,
    /// Threshold it crossed.
    pub threshold: f64,
}

/// Baseline window, in samples (5 minutes at 1 s).
const WINDOW: usize = 300;
/// Baseline recomputed every this many samples.
const STEP: usize = 30;
/// Gap (samples below the threshold) that still joins two up stretches.
const GAP: u32 = 2;

fn median_mad(v: &mut [f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v[v.len() / 2];
    let mut dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    dev.sort_by(|a, b| a.total_cmp(b));
    (m, dev[dev.len() / 2])
}

/// An episode being built: point indexes of its first and last up sample, its peak, and the
/// baseline median and threshold when it started.
struct Open {
    start: usize,
    end: usize,
    peak: f64,
    median: f64,
    threshold: f64,
}

/// The episodes of one series (samples from `d.start` on are eligible; earlier ones only feed
/// the baseline).
fn episodes(d: &Data, sig: &'static Signal, name: &str, s: &Series) -> Vec<Event> {
    let mut out = Vec::new();
    let pts = &s.points;
    let mut base = (0.0, 0.0);
    let mut computed_at: Option<usize> = None;
    let mut cur: Option<Open> = None;
    let close = |c: Open, out: &mut Vec<Event>| {
        let (from, to) = (d.at(pts[c.start].0), d.at(pts[c.end].0));
        out.push(Event {
            id: format!(
                "{}@{}+{}",
                sig.kind,
                from / 1_000_000_000,
                ((to - from) / 1_000_000_000).max(1)
            ),
            kind: sig.kind,
            what: sig.what,
            series: name.to_string(),
            from: rfc3339(from),
            to: rfc3339(to),
            from_ns: from,
            to_ns: to,
            peak: c.peak,
            baseline: c.median,
            threshold: c.threshold,
        });
    };
    for (k, &(i, v)) in pts.iter().enumerate() {
        if computed_at.is_none_or(|c| k >= c + STEP) {
            let lo = k.saturating_sub(WINDOW);
            let mut w: Vec<f64> = pts[lo..k].iter().map(|p| p.1).collect();
            base = median_mad(&mut w);
            computed_at = Some(k);
        }
        if (i as usize) < d.start {
            continue;
        }
        let threshold = sig.floor.max(base.0 + 6.0 * base.1);
        let up = v > threshold;
        match (&mut cur, up) {
            (Some(c), true) => {
                c.end = k;
                c.peak = c.peak.max(v);
            }
            (Some(c), false) => {
                if pts[k].0 - pts[c.end].0 > GAP {
                    close(cur.take().expect("open episode"), &mut out);
                }
            }
            (None, true) => {
                cur = Some(Open {
                    start: k,
                    end: k,
                    peak: v,
                    median: base.0,
                    threshold,
                })
            }
            (None, false) => {}
        }
    }
    if let Some(c) = cur {
        close(c, &mut out);
    }
    out
}

/// Every episode of the window of `d`, in time order.
pub fn detect(d: &Data) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for sig in SIGNALS {
        for (name, s) in d.matching(sig.series) {
            out.extend(episodes(d, sig, name, s));
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
        let ev = detect(&data(&v, 50));
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
        assert!(detect(&data(&v, 310)).is_empty());
    }

    #[test]
    fn long_gaps_split_episodes_and_the_baseline_period_is_not_reported() {
        let mut v = vec![0.0; 20];
        v.extend([3000.0; 3]); // in the baseline part: not reported
        v.extend(vec![0.0; 20]);
        v.extend([3000.0; 2]);
        v.extend(vec![0.0; 5]);
        v.extend([3000.0; 2]);
        let ev = detect(&data(&v, 30));
        assert_eq!(ev.len(), 2, "{ev:?}");
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
