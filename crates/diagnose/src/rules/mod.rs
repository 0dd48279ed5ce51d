//! The rules, one module each, and what they share.

pub mod cfs;
pub mod dcache;
pub mod dirty;
pub mod imbalance;
pub mod io;
pub mod leak;
pub mod lookups;
pub mod memhigh;
pub mod mmaplock;
pub mod oom;
pub mod pagecache;
pub mod reclaim;
pub mod runqueue;
pub mod saturation;
pub mod shrinker;
pub mod softirq;
pub mod steal;
pub mod swapin;
pub mod tlb;

use jitterscope_model::registry::{MetricDef, Sel, Unit};
use jitterscope_sources::cgroup::identify;

use crate::data::{Data, Series};
use crate::{rfc3339, Culprit, Evidence, Finding, Moved, Span};

/// The series a rule reads: `sels! { cpu::SYS_PCT, psi::SOME_PCT["memory"] }` is every series
/// of `cpu.sys_pct` and the memory series of `psi.<resource>.some_pct`.
macro_rules! sels {
    ($($m:ident::$d:ident $([$($l:expr),* $(,)?])?),* $(,)?) => {
        &[$(jitterscope_model::registry::Sel::of(
            &jitterscope_model::metrics::$m::$d,
            &[$($($l),*)?],
        )),*]
    };
}
pub(crate) use sels;

/// Negative dentries over the baseline from which the dentry cache is bloated: above it the
/// swelling is `memory.dcache-bloat`'s finding (which names the producer with the look-up
/// rule's pattern helpers), below it failing look-ups are `fs.failing-lookups`' own. Here,
/// between the two rules, so neither depends on the other both ways.
pub const DENTRY_RISE: f64 = 100_000.0;

/// Declares a rule module's `RULE`: its id, what it detects, its tier (`mechanism`, or
/// `resource` for plain saturation) and the series it reads (as in [`sels!`]); its evaluation
/// is the module's `run`.
macro_rules! rule {
    ($id:literal, $summary:literal, $tier:ident, reads: $($sel:tt)*) => {
        /// The rule.
        pub const RULE: $crate::rules::Rule = $crate::rules::Rule {
            id: $id,
            summary: $summary,
            mechanism: $crate::rules::rule!(@$tier),
            select: $crate::rules::sels! { $($sel)* },
            run,
        };
    };
    (@mechanism) => {
        true
    };
    (@resource) => {
        false
    };
}
pub(crate) use rule;

/// A rule: its id, what it is about, the series it reads and its evaluation.
pub struct Rule {
    /// Stable id (`memory.dcache-bloat`).
    pub id: &'static str,
    /// What it detects, one line.
    pub summary: &'static str,
    /// Names a kernel mechanism (false for plain resource saturation).
    pub mechanism: bool,
    /// The series it reads.
    pub select: &'static [Sel],
    /// Evaluation.
    pub run: fn(&Data) -> Vec<Finding>,
}

/// Every rule.
pub static RULES: &[Rule] = &[
    cfs::RULE,
    reclaim::RULE,
    dcache::RULE,
    lookups::RULE,
    shrinker::RULE,
    tlb::RULE,
    pagecache::RULE,
    leak::RULE,
    oom::RULE,
    saturation::RULE,
    imbalance::RULE,
    runqueue::RULE,
    io::RULE,
    softirq::RULE,
    steal::RULE,
    memhigh::RULE,
    swapin::RULE,
    mmaplock::RULE,
    dirty::RULE,
];

/// 0.5 at `lo`, 0.95 at `hi` and beyond: how far past its threshold a signal went.
pub(crate) fn confidence(x: f64, lo: f64, hi: f64) -> f64 {
    let t = ((x - lo) / (hi - lo)).clamp(0.0, 1.0);
    ((0.5 + 0.45 * t) * 100.0).round() / 100.0
}

/// The window as a span.
pub(crate) fn span(d: &Data) -> Span {
    let (f, t) = d.span();
    Span {
        from: rfc3339(f),
        to: rfc3339(t),
    }
}

/// How a statistic was taken, for [`evidence`].
#[derive(Clone, Copy)]
pub(crate) enum Take {
    Max,
    Mean,
    Sum,
    Last,
    /// Last minus first value in the window (a level that grew).
    Growth,
}

impl Take {
    fn stat(self) -> &'static str {
        match self {
            Take::Max => "max",
            Take::Mean => "mean",
            Take::Sum => "total",
            Take::Last => "last",
            Take::Growth => "growth",
        }
    }

    /// The unit of the statistic of a series in `unit`: a per-second rate summed over the
    /// window is a count (stalls, bytes), not a rate.
    /// The name of the statistic of `series`: a per-second series totalled over the window
    /// is a total (`…read_bytes_per_s` → `…read_bytes_total`), never a rate's name over a
    /// count; other statistics keep the series' name.
    fn name(self, series: &str) -> String {
        match self {
            Take::Sum => match series.strip_suffix("_per_s") {
                Some(base) => format!("{base}_total"),
                None => format!("{series}_total"),
            },
            _ => series.to_string(),
        }
    }

    fn unit(self, unit: Unit) -> Unit {
        match self {
            Take::Sum => unit.summed(),
            _ => unit,
        }
    }
}

/// Evidence from the series of `def` with `labels`, with its baseline median when the
/// baseline has it; the unit is the metric's.
pub(crate) fn evidence(
    d: &Data,
    def: &'static MetricDef,
    labels: &[&str],
    take: Take,
    note: impl Into<String>,
) -> Evidence {
    let st = d.stats(def, labels);
    let value = match take {
        Take::Max => st.max,
        Take::Mean => st.mean,
        Take::Sum => st.sum,
        Take::Last => st.last,
        Take::Growth => st.last - st.first,
    };
    let series = def.series_name(labels);
    Evidence {
        signal: take.name(&series),
        series: Some(series),
        source: Some(crate::SeriesRef {
            def,
            labels: labels.iter().map(|l| l.to_string()).collect(),
        }),
        value: round(value),
        stat: take.stat(),
        over_s: None,
        baseline: (st.base_n > 0).then(|| round(st.base_median)),
        unit: take.unit(def.unit),
        note: note.into(),
    }
}

impl Finding {
    /// Adds [`evidence`] of the series of `def` with `labels`, when it has values in the
    /// window.
    pub(crate) fn cite(
        &mut self,
        d: &Data,
        def: &'static MetricDef,
        labels: &[&str],
        take: Take,
        note: impl Into<String>,
    ) {
        // A series without a value in the window is unknown: a line reading 0 would say it
        // was measured and quiet.
        if d.stats(def, labels).n > 0 {
            self.evidence.push(evidence(d, def, labels, take, note));
        }
    }

    /// Cites the window sums of the first `n` processes of a ranking, each noted
    /// `{what} {comm} ({pid}){after}` (whatever the ranking was by, the value is the sum).
    pub(crate) fn cite_procs(&mut self, procs: &[ProcSum], n: usize, what: &str, after: &str) {
        for p in procs.iter().take(n) {
            let note = format!("{what} {} ({}){after}", p.comm, p.pid);
            self.evidence
                .push(series_fact(p.series, p.sum, Take::Sum, note));
        }
    }
}

/// Evidence of a series' statistic computed by the rule (a per-process sum merged over the
/// names a process had, a growth): named after the series, in the unit `take` gives it.
pub(crate) fn series_fact(s: &Series, value: f64, take: Take, note: impl Into<String>) -> Evidence {
    let series = s.name();
    Evidence {
        signal: take.name(&series),
        series: Some(series),
        source: Some(s.source()),
        value: round(value),
        stat: take.stat(),
        over_s: None,
        baseline: None,
        unit: take.unit(s.def.unit),
        note: note.into(),
    }
}

/// Evidence that is not a recorded series (a count, a derived figure).
pub(crate) fn fact(
    signal: impl Into<String>,
    value: f64,
    unit: Unit,
    note: impl Into<String>,
) -> Evidence {
    Evidence {
        signal: signal.into(),
        series: None,
        source: None,
        value: round(value),
        stat: "derived",
        over_s: None,
        baseline: None,
        unit,
        note: note.into(),
    }
}

pub(crate) fn round(v: f64) -> f64 {
    if v.abs() >= 100.0 {
        v.round()
    } else {
        (v * 100.0).round() / 100.0
    }
}

/// The container or systemd unit a cgroup path belongs to: the runtime, and the names the
/// recorder read from the runtime's files where it could (`podman checkout-api
/// (0123456789ab)`, `containerd shop/cart-7d9f/checkout-api (0123456789ab)`), else the short
/// id that `docker ps` shows.
pub(crate) fn container_of(d: &Data, path: &str) -> Option<String> {
    match d.containers.get(path) {
        Some(id) => id.label(),
        None => identify(path).label(),
    }
}

/// The resource a rule is about, which decides the cgroup that names a process's culprit: on
/// cgroup v1 a process sits in one cgroup per hierarchy, and the one whose limit or
/// accounting explains the finding is the one of that resource (a reader in a memory cgroup
/// of its own and the root cpu cgroup is a memory culprit in its memory cgroup).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Res {
    Cpu,
    Memory,
    Io,
}

/// A process culprit with its cgroup (of the hierarchy of `res`) and container from the
/// processes seen in the window.
pub(crate) fn proc_culprit(d: &Data, pid: u32, comm: &str, res: Res) -> Culprit {
    let p = d.procs.get(&pid);
    let cgroup = p.and_then(|p| match res {
        Res::Cpu => p.cgroup.clone(),
        Res::Memory => p.memory_cgroup.clone(),
        Res::Io => p.io_cgroup.clone(),
    });
    Culprit {
        pid: Some(pid),
        comm: Some(comm.to_string()),
        container: cgroup.as_deref().and_then(|cg| container_of(d, cg)),
        cgroup,
        ..Default::default()
    }
}

/// A cgroup culprit.
pub(crate) fn cgroup_culprit(d: &Data, path: &str) -> Culprit {
    Culprit {
        cgroup: Some(path.to_string()),
        container: container_of(d, path),
        ..Default::default()
    }
}

/// One process's share of a per-process metric over the window.
pub(crate) struct ProcSum<'d> {
    /// Process id.
    pub pid: u32,
    /// The name it had longest.
    pub comm: String,
    /// The ranking statistic, summed over its series.
    pub value: f64,
    /// Its window sum (a count, for a rate), summed over its series.
    pub sum: f64,
    /// Its series under that name.
    pub series: &'d Series,
}

/// The series of per-process metric `def`, by window sum, largest first. A process that
/// renamed itself (exec, prctl) has a series per name: they are one process, summed under the
/// name it had longest.
pub(crate) fn top_procs<'d>(d: &'d Data, def: &'static MetricDef) -> Vec<ProcSum<'d>> {
    top_procs_by(d, def, |s| s.sum)
}

/// Processes that spent a share of the window in what a tracer's per-process `_pct` series
/// `def` times (a lock wait, a throttling sleep), summed over their threads: at least `min_pct`
/// % of the window on average and `min_s` thread-seconds in all, and `ratio` times their own
/// baseline level when they had one (3 baseline points or more). Largest share first, as
/// `value`. A tracer's row of a process exists only in the seconds it spent any such time, so
/// the share is the window sum spread over the whole window, not the mean of those seconds.
pub(crate) fn procs_time_share<'d>(
    d: &'d Data,
    def: &'static MetricDef,
    min_pct: f64,
    min_s: f64,
    ratio: f64,
) -> Vec<ProcSum<'d>> {
    let secs = d.window_seconds();
    if secs <= 0.0 {
        return Vec::new();
    }
    top_procs_by(d, def, |st| st.sum / secs)
        .into_iter()
        .filter(|p| {
            let st = d.stats_of(p.series);
            let base = if st.base_n >= 3 { st.base_median } else { 0.0 };
            // %-seconds over 100: thread-seconds.
            p.value >= min_pct && p.sum / 100.0 >= min_s && p.value >= ratio * base
        })
        .collect()
}

/// Like [`top_procs`], ranking by `f` of each series' statistics instead of the sum.
pub(crate) fn top_procs_by<'d>(
    d: &'d Data,
    def: &'static MetricDef,
    f: impl Fn(&crate::data::Stats) -> f64,
) -> Vec<ProcSum<'d>> {
    let mut by_pid: std::collections::HashMap<u32, (ProcSum<'d>, usize)> = Default::default();
    for s in d.each(def) {
        let Some((pid, comm)) = s.pid_comm() else {
            continue;
        };
        let st = d.stats_of(s);
        let e = by_pid.entry(pid).or_insert_with(|| {
            (
                ProcSum {
                    pid,
                    comm: comm.to_string(),
                    value: 0.0,
                    sum: 0.0,
                    series: s,
                },
                0,
            )
        });
        e.0.value += f(&st);
        e.0.sum += st.sum;
        if st.n > e.1 || (st.n == 0 && e.1 == 0) {
            e.0.comm = comm.to_string();
            e.0.series = s;
            e.1 = st.n;
        }
    }
    let mut v: Vec<ProcSum<'d>> = by_pid
        .into_values()
        .map(|(p, _)| p)
        .filter(|p| p.value > 0.0)
        .collect();
    v.sort_by(|a, b| b.value.total_cmp(&a.value).then(a.pid.cmp(&b.pid)));
    v
}

/// The series of `def` by window statistic `f`, largest first (only those above 0).
pub(crate) fn top_series<'d>(
    d: &'d Data,
    def: &'static MetricDef,
    f: impl Fn(&crate::data::Stats) -> f64,
) -> Vec<(&'d Series, f64)> {
    let mut v: Vec<(&Series, f64)> = d
        .each(def)
        .filter_map(|s| {
            let x = f(&d.stats_of(s));
            (x > 0.0).then_some((s, x))
        })
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

/// Orders the series by when each first rose above its baseline (and its floor); series that
/// are absent or never rose are left out.
pub(crate) fn moved_first(d: &Data, signals: &[(Option<&Series>, f64)]) -> Vec<Moved> {
    let mut on: Vec<(i64, String)> = signals
        .iter()
        .filter_map(|&(s, floor)| {
            let s = s?;
            d.onset_over_baseline(s, floor).map(|t| (t, s.name()))
        })
        .collect();
    on.sort();
    let first = on.first().map(|x| x.0).unwrap_or(0);
    on.into_iter()
        .map(|(t, s)| Moved {
            signal: s,
            at: rfc3339(t),
            lag_s: (t - first) as f64 / 1e9,
        })
        .collect()
}

/// "top kernel functions: a 12.0%, b 8.1%" from the window's stack samples.
pub(crate) fn kernel_hot_note(d: &Data, n: usize) -> Option<Evidence> {
    if d.kernel_hot.is_empty() {
        return None;
    }
    let list: Vec<String> = d
        .kernel_hot
        .iter()
        .take(n)
        .map(|h| format!("{} {:.1}%", h.name, h.self_pct))
        .collect();
    Some(fact(
        "profile.kernel_hot",
        d.kernel_hot[0].self_pct,
        Unit::Percent,
        format!(
            "hottest kernel functions in the window's {} stack samples (self): {}",
            d.profile_samples,
            list.join(", ")
        ),
    ))
}

/// A finding with the common fields filled.
pub(crate) fn finding(
    rule: &Rule,
    d: &Data,
    title: String,
    confidence: f64,
    culprit: Culprit,
) -> Finding {
    Finding {
        rule_id: rule.id,
        title,
        confidence,
        mechanism: rule.mechanism,
        window: span(d),
        culprit,
        evidence: Vec::new(),
        moved_first: Vec::new(),
        remediation: Vec::new(),
        notes: Vec::new(),
        references: Vec::new(),
        causes: Vec::new(),
        caused_by: Vec::new(),
        onset: None,
    }
}

pub(crate) use jitterscope_sources::units::mib;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_are_named_as_their_runtime_names_them() {
        const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let podman = format!("/machine.slice/libpod-{HEX}.scope");
        let pod = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e3d4c_0000_1111_2222_333344445555.slice/cri-containerd-{HEX}.scope"
        );
        let mut d = Data::default();
        // Recorded without names (or before they were read): the short id, as before.
        assert_eq!(
            container_of(&d, &podman).as_deref(),
            Some("podman 0123456789ab")
        );
        assert_eq!(
            container_of(&d, "/system.slice/nginx.service").as_deref(),
            Some("nginx.service")
        );
        assert_eq!(container_of(&d, "/"), None);
        let named = |path: &str, name: &str, pod: Option<&str>, ns: Option<&str>| {
            let mut id = identify(path);
            id.name = Some(name.into());
            id.pod = pod.map(Into::into);
            id.namespace = ns.map(Into::into);
            (path.to_string(), id)
        };
        d.containers.extend([
            named(&podman, "checkout-api", None, None),
            named(&pod, "checkout-api", Some("cart-7d9f"), Some("shop")),
        ]);
        assert_eq!(
            container_of(&d, &podman).as_deref(),
            Some("podman checkout-api (0123456789ab)")
        );
        assert_eq!(
            cgroup_culprit(&d, &pod).container.as_deref(),
            Some("containerd shop/cart-7d9f/checkout-api (0123456789ab)")
        );
    }

    #[test]
    fn confidence_scale() {
        assert_eq!(confidence(10.0, 10.0, 20.0), 0.5);
        assert_eq!(confidence(20.0, 10.0, 20.0), 0.95);
        assert_eq!(confidence(100.0, 10.0, 20.0), 0.95);
        assert_eq!(confidence(15.0, 10.0, 20.0), 0.73);
    }

    #[test]
    fn a_missing_series_is_not_cited_as_zero() {
        use jitterscope_model::metrics::cgroup;
        let mut d = Data::seconds(4, 1);
        d.push(&cgroup::CPU_THROTTLED_PCT, &["/a"], 2, 50.0);
        let mut f = finding(&RULES[0], &d, "t".into(), 0.5, Culprit::default());
        f.cite(&d, &cgroup::CPU_USAGE_PCT, &["/a"], Take::Max, "usage");
        assert!(f.evidence.is_empty());
        f.cite(
            &d,
            &cgroup::CPU_THROTTLED_PCT,
            &["/a"],
            Take::Max,
            "throttled",
        );
        assert_eq!(f.evidence.len(), 1);
    }

    #[test]
    fn rule_ids_unique() {
        jitterscope_testkit::assert_unique(RULES.iter().map(|r| r.id), "rule ids");
        // Every rule's inputs fit their metrics' placeholders (Select::labels panics otherwise).
        for r in RULES {
            for s in r.select {
                let _ = s.select();
            }
        }
    }
}
