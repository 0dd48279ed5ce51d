//! Diagnosis: rules that read a recorded window (and the baseline before it) and name the
//! kernel mechanism behind the jitter, who set it off, what moved first and what to change.
//!
//! Each rule is one module under [`rules`], documented there: the mechanism, the evidence it
//! reads, its thresholds and why, the remediation and references. A rule returns zero or more
//! [`Finding`]s; [`diagnose`] ranks them by confidence.

#![deny(missing_docs)]

pub mod chain;
pub mod data;
pub mod events;
pub mod holes;
pub mod rules;
pub mod text;

use std::path::Path;

use anyhow::Result;
use jitterscope_model::time::rfc3339;
use serde::Serialize;

pub use data::Data;

/// Who set a mechanism off.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Culprit {
    /// Process id.
    pub pid: Option<u32>,
    /// Process name.
    pub comm: Option<String>,
    /// Cgroup path.
    pub cgroup: Option<String>,
    /// Container (runtime and short id) or systemd unit, from the cgroup path.
    pub container: Option<String>,
    /// Library involved (allocator, NSS softokn).
    pub library: Option<String>,
    /// Its version, when the file says.
    pub library_version: Option<String>,
}

/// One piece of evidence: a recorded value against its baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// What the value is, named for its statistic: the series itself for a level, a maximum
    /// or a mean of it (`reclaim.stall_max_usec`); for a per-second series totalled over the
    /// window, the total's name (`proc.<pid>.<comm>.read_bytes_total` for
    /// `….read_bytes_per_s`), never the rate's; or a short label for a derived figure.
    pub signal: String,
    /// The recorded series the value was computed from, as `dump --select` names it (absent
    /// for a derived figure).
    pub series: Option<String>,
    /// The same series as its metric and labels: what findings are compared by (the process
    /// or cgroup it is about), never the text of its name.
    #[serde(skip)]
    pub source: Option<SeriesRef>,
    /// The value in the window (what `stat` says: max, mean, total...).
    pub value: f64,
    /// How `value` was taken from the window: `max`, `mean`, `last`, `total` (a rate
    /// integrated over the window), `growth` (last minus first), `derived`.
    pub stat: &'static str,
    /// For `total` and `growth`: the seconds of the window they cover.
    pub over_s: Option<f64>,
    /// The baseline's median, when there was a baseline.
    pub baseline: Option<f64>,
    /// Unit (of the statistic: a per-second series summed over the window is a count).
    pub unit: jitterscope_model::registry::Unit,
    /// What it shows.
    pub note: String,
}

/// A recorded series as its metric and its labels (placeholder values, in template order).
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesRef {
    /// The metric.
    pub def: &'static jitterscope_model::registry::MetricDef,
    /// Its labels.
    pub labels: Vec<String>,
}

impl SeriesRef {
    /// The value of the template's `<placeholder>` (`pid`, `comm`, `cgroup`), when it has one.
    pub fn label(&self, placeholder: &str) -> Option<&str> {
        let i = self
            .def
            .placeholders()
            .iter()
            .position(|p| *p == placeholder)?;
        self.labels.get(i).map(String::as_str)
    }

    /// Whether it is a series of the process `pid` named `comm`.
    pub fn is_process(&self, pid: u32, comm: &str) -> bool {
        self.label("comm") == Some(comm)
            && self.label("pid").and_then(|p| p.parse().ok()) == Some(pid)
    }
}

/// When a signal first rose in the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Moved {
    /// The signal.
    pub signal: String,
    /// When it rose (RFC 3339).
    pub at: String,
    /// Seconds after the first signal rose.
    pub lag_s: f64,
}

/// A time window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Span {
    /// Start (RFC 3339).
    pub from: String,
    /// End (RFC 3339).
    pub to: String,
}

/// One diagnosis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Rule id (`cpu.cfs-throttling`).
    pub rule_id: &'static str,
    /// One-line title naming mechanism and culprit.
    pub title: String,
    /// 0..1.
    pub confidence: f64,
    /// Whether the rule names a kernel mechanism (false for plain resource saturation).
    pub mechanism: bool,
    /// When it happened.
    pub window: Span,
    /// Who.
    pub culprit: Culprit,
    /// The values it rests on.
    pub evidence: Vec<Evidence>,
    /// Lead/lag order of the signals involved.
    pub moved_first: Vec<Moved>,
    /// What to change, fitted to this host.
    pub remediation: Vec<String>,
    /// Further notes (kernel-bug windows, caveats).
    pub notes: Vec<String>,
    /// Where the mechanism is described.
    pub references: Vec<&'static str>,
    /// Findings this one set off (see [`chain`]), by their place in the report.
    pub causes: Vec<Link>,
    /// Findings that set this one off.
    pub caused_by: Vec<Link>,
    /// When the mechanism started in the window (ns since the epoch), when the rule knows:
    /// the order of two linked findings.
    #[serde(skip)]
    pub onset: Option<i64>,
}

impl Finding {
    /// Whether `rule` made it.
    pub fn is(&self, rule: &rules::Rule) -> bool {
        self.rule_id == rule.id
    }
}

/// A cause–consequence link between two findings of one report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    /// The other finding's number in the report (1 is the first).
    pub finding: usize,
    /// Its rule.
    pub rule_id: &'static str,
    /// Why they are linked: the known consequence, and the evidence for it here (a shared
    /// process or cgroup, the order in which their signals moved).
    pub reason: String,
}

/// The result of [`diagnose`].
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The window diagnosed.
    pub window: Span,
    /// Samples in the window.
    pub samples: usize,
    /// Samples in the baseline before it.
    pub baseline_samples: usize,
    /// Findings: mechanism findings by confidence, then resource findings by confidence.
    pub findings: Vec<Finding>,
    /// Records the read skipped because they were damaged.
    pub damaged: jitterscope_model::stored::Damage,
    /// Stretches of the window without samples, when they cover more than 5% of it (absent
    /// otherwise); the confidences are then lowered in proportion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holes: Option<holes::Holes>,
    /// What the window shows that is no finding: the recorder's own memory growing, which is
    /// the agent's budget, not a workload's leak.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Options of [`diagnose`].
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// How far before the window the baseline reaches.
    pub lookback_ns: i64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            lookback_ns: 10 * 60 * 1_000_000_000,
        }
    }
}

/// Diagnoses the samples in `(from, to]` of the store at `dir`.
pub fn diagnose(dir: &Path, from: i64, to: i64, opts: Options) -> Result<Report> {
    let select: Vec<jitterscope_model::registry::Select> = rules::RULES
        .iter()
        .flat_map(|r| r.select.iter())
        .chain(chain::READS)
        .map(|s| s.select())
        .collect();
    let d = Data::load(dir, from, to, opts.lookback_ns, &select, true)?;
    let mut r = evaluate(&d);
    if r.samples == 0 {
        // No sample to take the window's ends from: it is the one asked for (the baseline's
        // last sample and the epoch read as a window, over a segment lost to damage).
        r.window = Span {
            from: rfc3339(from),
            to: rfc3339(to),
        };
    }
    Ok(r)
}

/// The episodes in `(from, to]` of the store at `dir` (the 5 minutes before feed the first
/// baselines), and the records the read skipped as damaged.
pub fn events(
    dir: &Path,
    from: i64,
    to: i64,
) -> Result<(Vec<events::Event>, jitterscope_model::stored::Damage)> {
    let l = events::load(dir, from, to, 300 * 1_000_000_000)?;
    Ok((events::detect(&l.data, &l.marks), l.data.damage))
}

/// Runs every rule on loaded data.
pub fn evaluate(d: &Data) -> Report {
    let mut findings: Vec<Finding> = rules::RULES.iter().flat_map(|r| (r.run)(d)).collect();
    // Mechanism findings first, each tier by confidence: a saturated resource is context (and
    // often a consequence); the mechanism is the cause an operator acts on. A busy CPU on a
    // host with a steady leak must not hide the leak.
    findings.sort_by(|a, b| {
        b.mechanism
            .cmp(&a.mechanism)
            .then(b.confidence.total_cmp(&a.confidence))
    });
    // Then each root cause before what it set off.
    let mut findings = chain::link(d, findings);
    // After the links, which judge the evidence itself; one factor for all keeps the order.
    let holes = {
        let (from, to) = d.asked.unwrap_or_else(|| {
            let (first, last) = d.span();
            let before = d.start.checked_sub(1).and_then(|i| d.ts.get(i));
            (before.copied().unwrap_or(first), last)
        });
        holes::find(&d.ts, from, to)
    };
    if let Some(h) = &holes {
        for f in &mut findings {
            f.confidence = rules::round(f.confidence * (1.0 - h.fraction));
        }
    }
    let secs = d.window_seconds();
    for e in findings.iter_mut().flat_map(|f| f.evidence.iter_mut()) {
        if matches!(e.stat, "total" | "growth") {
            e.over_s = Some(rules::round(secs));
        }
    }
    let (from, to) = d.span();
    Report {
        window: Span {
            from: rfc3339(from),
            to: rfc3339(to),
        },
        samples: d.window_len(),
        baseline_samples: d.start,
        findings,
        damaged: d.damage.clone(),
        holes,
        notes: rules::leak::recorder_notes(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every rule's selects, with placeholders filled, as candidate series.
    fn names() -> Vec<(&'static jitterscope_model::MetricDef, Vec<&'static str>)> {
        let mut v = Vec::new();
        for r in rules::RULES {
            for s in r.select {
                let n = s.def.placeholders().len();
                for fill in [
                    "1",
                    "app",
                    "/a/b",
                    "sda",
                    "0",
                    "super_cache_scan",
                    "memory",
                    "dentry",
                ] {
                    let mut labels: Vec<&'static str> = vec![fill; n];
                    for (l, g) in labels.iter_mut().zip(s.labels) {
                        if !g.contains('*') {
                            *l = g;
                        }
                    }
                    v.push((s.def, labels));
                }
            }
        }
        v
    }

    proptest! {
        // Any values in any series (huge, negative, sparse) must give a report, never a panic,
        // with confidences in 0..=1.
        #[test]
        fn rules_survive_any_values(
            n in 1usize..30,
            start in 0usize..30,
            picks in proptest::collection::vec((0usize..400, 0u32..30, -1e12f64..1e12), 0..300),
        ) {
            let all = names();
            let mut d = Data::seconds(n, start);
            d.kernel = "4.19.0".into();
            d.ncpu = 2;
            for (k, i, v) in picks {
                let (def, labels) = &all[k % all.len()];
                let i = i % n as u32;
                let last = d.get(def, labels).and_then(|s| s.points.last()).map(|p| p.0);
                if last.is_none_or(|l| l < i) {
                    d.push(def, labels, i, v);
                }
            }
            let r = evaluate(&d);
            for f in &r.findings {
                prop_assert!((0.0..=1.0).contains(&f.confidence), "{}", f.confidence);
            }
        }
    }
}
