//! A scenario's signature: what must show in the recorded series while it runs, as checks
//! that compare one statistic of the matching series against a threshold. Evaluated on the
//! store the recorder wrote during `lab check`, through the same metric registry as `dump`.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};
use jitterscope_model::derive::Selection;
use jitterscope_model::eval::Ctx;
use jitterscope_model::registry::Select;
use jitterscope_model::stored::{Damage, SampleReader};
use serde::Serialize;

/// The statistic a check takes of its series over the scenario's active window. Each sample's
/// value is the sum of every series the selection takes in it (several pids of one comm, say).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "stat")]
pub enum Stat {
    /// Largest value.
    Max,
    /// Smallest value (a level that must never read as gone).
    Min,
    /// Mean value.
    Mean,
    /// Sum of the values. A per-second rate is weighed by its interval's length, so the sum is
    /// the count over the window however far the intervals strayed from 1 s (a guest under
    /// emulation stretches some: one 384 MiB read summed as 402,641,106 bytes unweighed).
    Sum,
    /// Largest value minus the baseline's mean (a level that must climb).
    Rise,
    /// Mean over the mean of the baseline, the baseline taken as at least `floor` so a quiet
    /// host's near-zero does not make any noise a huge ratio.
    Ratio {
        /// Smallest baseline used.
        floor: f64,
    },
    /// Last value minus first value (growth of a level such as RSS).
    Growth,
    /// Number of distinct series that had a value.
    Series,
}

impl Stat {
    fn name(self) -> &'static str {
        match self {
            Stat::Max => "max",
            Stat::Min => "min",
            Stat::Mean => "mean",
            Stat::Sum => "sum",
            Stat::Rise => "rise over baseline",
            Stat::Ratio { .. } => "ratio to baseline",
            Stat::Growth => "growth",
            Stat::Series => "series",
        }
    }
}

/// The comparison a check makes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmp {
    /// Passes when the statistic is at least this.
    AtLeast(f64),
    /// Passes when the statistic is below this (no data counts as 0: nothing happened).
    Below(f64),
}

/// One check of a signature.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What it shows, in words.
    pub what: String,
    /// The series: a metric and label globs (prints as `proc.*.lab-madvise.dontneed_per_s`).
    pub series: Select,
    /// Statistic.
    pub stat: Stat,
    /// Comparison.
    pub cmp: Cmp,
}

impl Check {
    /// Shorthand.
    pub fn new(what: impl Into<String>, series: Select, stat: Stat, cmp: Cmp) -> Self {
        Check {
            what: what.into(),
            series,
            stat,
            cmp,
        }
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    /// The check.
    #[serde(flatten)]
    pub check: Check,
    /// The statistic measured (None: no data).
    pub value: Option<f64>,
    /// The baseline's mean, when the statistic uses it.
    pub baseline: Option<f64>,
    /// Samples with a value in the active window.
    pub samples: usize,
    /// Whether it passed.
    pub pass: bool,
}

impl CheckResult {
    /// One readable line: `PASS  what: stat 87.2 >= 50 (series)`.
    pub fn line(&self) -> String {
        let (op, t) = match self.check.cmp {
            Cmp::AtLeast(t) => (">=", t),
            Cmp::Below(t) => ("<", t),
        };
        let v = match self.value {
            Some(v) => fmt_num(v),
            None => "no data".into(),
        };
        let base = match (self.baseline, self.check.stat) {
            (Some(b), Stat::Rise | Stat::Ratio { .. }) => format!(", baseline {}", fmt_num(b)),
            _ => String::new(),
        };
        format!(
            "{}  {}: {} {v} {op} {}{base}  [{}]",
            if self.pass { "PASS" } else { "FAIL" },
            self.check.what,
            self.check.stat.name(),
            fmt_num(t),
            self.check.series
        )
    }
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Time windows of a run, in ns since the epoch (sample times).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Windows {
    /// Samples in `(from, to]` before the scenario started.
    pub baseline: (i64, i64),
    /// Samples in `(from, to]` that cover the scenario's workload.
    pub active: (i64, i64),
}

/// Per-check values collected while reading the store.
#[derive(Default)]
struct Acc {
    baseline: Vec<f64>,
    active: Vec<f64>,
    series: BTreeSet<String>,
}

/// Evaluates `checks` on the samples of the store at `dir`; also what the read skipped.
pub fn evaluate(dir: &Path, checks: &[Check], w: Windows) -> Result<(Vec<CheckResult>, Damage)> {
    let reader =
        SampleReader::open(dir).with_context(|| format!("cannot open store {}", dir.display()))?;
    let selects: Vec<Select> = checks.iter().map(|c| c.series.clone()).collect();
    let sel = Selection::of(&selects);
    let mut accs: Vec<Acc> = checks.iter().map(|_| Acc::default()).collect();
    let mut pairs = reader.pairs(w.baseline.0.saturating_add(1), w.active.1, sel.parts())?;
    while let Some((sample, prev)) = pairs.next() {
        let ts = sample.ts_ns;
        let active = if ts > w.active.0 && ts <= w.active.1 {
            true
        } else if ts > w.baseline.0 && ts <= w.baseline.1 {
            false
        } else {
            continue;
        };
        if prev.is_none() {
            continue;
        }
        // The interval the rates were taken over: the monotonic one, when the previous sample
        // is usable for rates (same boot, no long gap), else a nominal second for the rates
        // that need no previous sample (the tracers').
        let secs = Some(Ctx::new(sample, prev).dt_s)
            .filter(|s| *s > 0.0)
            .unwrap_or(1.0);
        let mut sums: Vec<Option<f64>> = vec![None; checks.len()];
        sel.for_each(sample, prev, |def, labels, name, value| {
            let Some(v) = value.filter(|v| v.is_finite()) else {
                return;
            };
            for (i, c) in checks.iter().enumerate() {
                if c.series.matches(def, labels) {
                    // Per-second series only (their unit sums to another: bytes/s to bytes);
                    // a percentage or a level sums as it is.
                    let w = if c.stat == Stat::Sum && def.unit.summed() != def.unit {
                        secs
                    } else {
                        1.0
                    };
                    *sums[i].get_or_insert(0.0) += v * w;
                    if active {
                        accs[i].series.insert(name.to_string());
                    }
                }
            }
        });
        for (acc, s) in accs.iter_mut().zip(sums) {
            if let Some(s) = s {
                if active {
                    acc.active.push(s);
                } else {
                    acc.baseline.push(s);
                }
            }
        }
    }
    let results = checks.iter().zip(accs).map(|(c, a)| judge(c, &a)).collect();
    Ok((results, pairs.damage()))
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn judge(c: &Check, a: &Acc) -> CheckResult {
    let base = mean(&a.baseline);
    let act = &a.active;
    let value = match c.stat {
        Stat::Max => act.iter().copied().reduce(f64::max),
        Stat::Min => act.iter().copied().reduce(f64::min),
        Stat::Mean => mean(act),
        Stat::Sum => (!act.is_empty()).then(|| act.iter().sum()),
        Stat::Rise => act
            .iter()
            .copied()
            .reduce(f64::max)
            .map(|m| m - base.unwrap_or(0.0)),
        Stat::Ratio { floor } => mean(act).map(|m| m / base.unwrap_or(0.0).max(floor)),
        Stat::Growth => match (act.first(), act.last()) {
            (Some(f), Some(l)) if act.len() >= 2 => Some(l - f),
            _ => None,
        },
        Stat::Series => Some(a.series.len() as f64),
    };
    let pass = match (c.cmp, value) {
        (Cmp::AtLeast(t), Some(v)) => v >= t,
        (Cmp::AtLeast(_), None) => false,
        (Cmp::Below(t), v) => v.unwrap_or(0.0) < t,
    };
    CheckResult {
        check: c.clone(),
        value,
        baseline: base,
        samples: act.len(),
        pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(baseline: &[f64], active: &[f64]) -> Acc {
        Acc {
            baseline: baseline.to_vec(),
            active: active.to_vec(),
            series: ["a".to_string(), "b".to_string()].into(),
        }
    }

    fn v(stat: Stat, cmp: Cmp, a: &Acc) -> (Option<f64>, bool) {
        let r = judge(
            &Check::new(
                "x",
                Select::all(&jitterscope_model::metrics::cpu::USR_PCT),
                stat,
                cmp,
            ),
            a,
        );
        (r.value, r.pass)
    }

    #[test]
    fn statistics() {
        let a = acc(&[10.0, 20.0], &[5.0, 40.0, 30.0]);
        assert_eq!(v(Stat::Max, Cmp::AtLeast(40.0), &a), (Some(40.0), true));
        assert_eq!(v(Stat::Mean, Cmp::AtLeast(26.0), &a), (Some(25.0), false));
        assert_eq!(v(Stat::Sum, Cmp::Below(76.0), &a), (Some(75.0), true));
        assert_eq!(v(Stat::Rise, Cmp::AtLeast(25.0), &a), (Some(25.0), true));
        assert_eq!(v(Stat::Growth, Cmp::AtLeast(25.0), &a), (Some(25.0), true));
        assert_eq!(v(Stat::Series, Cmp::AtLeast(2.0), &a), (Some(2.0), true));
        assert_eq!(v(Stat::Min, Cmp::AtLeast(6.0), &a), (Some(5.0), false));
        assert_eq!(
            v(Stat::Ratio { floor: 1.0 }, Cmp::AtLeast(10.0), &a),
            (Some(25.0 / 15.0), false)
        );
        // The floor keeps a near-zero baseline from inflating the ratio.
        let q = acc(&[0.1], &[50.0]);
        assert_eq!(
            v(Stat::Ratio { floor: 100.0 }, Cmp::Below(10.0), &q),
            (Some(0.5), true)
        );
    }

    #[test]
    fn no_data_fails_at_least_and_passes_below() {
        let a = acc(&[], &[]);
        assert_eq!(v(Stat::Max, Cmp::AtLeast(1.0), &a), (None, false));
        assert_eq!(v(Stat::Sum, Cmp::Below(1.0), &a), (None, true));
        // Growth needs two samples.
        let one = acc(&[], &[5.0]);
        assert_eq!(v(Stat::Growth, Cmp::AtLeast(0.0), &one), (None, false));
    }

    /// A reader whose seconds were stretched (as under emulation): the sum of its per-second
    /// read rate is still the bytes it read, where the unweighed sum fell short.
    #[test]
    fn a_rates_sum_is_the_count_however_long_the_intervals() {
        use jitterscope_model::metrics::process::PROC_READ_BYTES_PER_S;
        use jitterscope_model::sample::Sample;
        use jitterscope_model::signals::SignalRecord;
        use jitterscope_sources::process::{PidIo, Process};

        let dir = tempfile::tempdir().unwrap();
        let mut w = jitterscope_testkit::sample_writer(dir.path()).unwrap();
        // (seconds since start, bytes read so far): 4,000,000 bytes over 4.7 s in 4 intervals.
        let at = [
            (1.0, 0),
            (2.0, 1_000_000),
            (3.5, 2_500_000),
            (4.7, 3_000_000),
            (5.7, 4_000_000),
        ];
        for (t, bytes) in at {
            let ns = (t * 1e9) as u64;
            let mut p = Process::default();
            p.stat.pid = 7;
            p.stat.starttime_ticks = 7;
            p.stat.comm = "reader".into();
            p.stat.state = 'D';
            p.io = Some(PidIo {
                read_bytes: bytes,
                ..Default::default()
            });
            let mut s = Sample {
                ts_ns: ns as i64,
                mono_ns: ns,
                interval_ns: 1_000_000_000,
                processes: Some(vec![p]),
                ..Default::default()
            };
            jitterscope_model::codec::round_as_stored(&mut s);
            w.append(&mut s, &SignalRecord::default()).unwrap();
        }
        w.close().unwrap();
        let check = |stat| {
            Check::new(
                "reads",
                Select::labels(&PROC_READ_BYTES_PER_S, &["*", "reader"]),
                stat,
                Cmp::AtLeast(4_000_000.0),
            )
        };
        let (r, damage) = evaluate(
            dir.path(),
            &[check(Stat::Sum), check(Stat::Max)],
            Windows {
                baseline: (0, 0),
                active: (0, 6_000_000_000),
            },
        )
        .unwrap();
        assert!(damage.is_empty(), "{damage:?}");
        let sum = r[0].value.unwrap();
        assert!((sum - 4_000_000.0).abs() < 1.0, "{sum}");
        assert_eq!(r[0].samples, 4);
        // Other statistics take the rates as they are: the fastest second read 1,000,000.
        assert_eq!(r[1].value, Some(1_000_000.0));
    }

    #[test]
    fn line_says_what_failed() {
        let r = judge(
            &Check::new(
                "throttled",
                Select::labels(
                    &jitterscope_model::metrics::cgroup::CPU_THROTTLED_PCT,
                    &["x"],
                ),
                Stat::Mean,
                Cmp::AtLeast(50.0),
            ),
            &acc(&[], &[12.5]),
        );
        assert_eq!(
            r.line(),
            "FAIL  throttled: mean 12.50 >= 50  [cgroup.x.cpu.throttled_pct]"
        );
    }
}
