//! The rules, one module each, and what they share.

pub mod cfs;
pub mod cpu;
pub mod dcache;
pub mod leak;
pub mod pagecache;
pub mod reclaim;
pub mod shrinker;
pub mod tlb;

use jitterscope_sources::cgroup::{identify, Runtime};

use crate::data::{pid_comm, Data};
use crate::{rfc3339, Culprit, Evidence, Finding, Moved, Span};

/// A rule: its id, what it is about, the series it reads and its evaluation.
pub struct Rule {
    /// Stable id (`memory.dcache-bloat`).
    pub id: &'static str,
    /// What it detects, one line.
    pub summary: &'static str,
    /// Names a kernel mechanism (false for plain resource saturation).
    pub mechanism: bool,
    /// Series globs it reads.
    pub select: &'static [&'static str],
    /// Evaluation.
    pub run: fn(&Data) -> Vec<Finding>,
}

/// Every rule.
pub static RULES: &[Rule] = &[
    cfs::RULE,
    reclaim::RULE,
    dcache::RULE,
    shrinker::RULE,
    tlb::RULE,
    pagecache::RULE,
    leak::RULE,
    cpu::SATURATION,
    cpu::IMBALANCE,
    cpu::RUNQUEUE,
    cpu::IO,
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
}

/// Evidence from series `name`, with its baseline median when the baseline has it.
pub(crate) fn evidence(
    d: &Data,
    name: &str,
    take: Take,
    unit: &'static str,
    note: impl Into<String>,
) -> Evidence {
    let st = d.stats(name);
    let (value, stat) = match take {
        Take::Max => (st.max, "max"),
        Take::Mean => (st.mean, "mean"),
        Take::Sum => (st.sum, "sum over the window"),
        Take::Last => (st.last, "last"),
    };
    Evidence {
        signal: name.to_string(),
        value: round(value),
        stat,
        baseline: (st.base_n > 0).then(|| round(st.base_median)),
        unit,
        note: note.into(),
    }
}

/// Evidence that is not a recorded series (a count, a derived figure).
pub(crate) fn fact(
    signal: impl Into<String>,
    value: f64,
    unit: &'static str,
    note: impl Into<String>,
) -> Evidence {
    Evidence {
        signal: signal.into(),
        value: round(value),
        stat: "derived",
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

/// The container (runtime and short id) or systemd unit a cgroup path belongs to.
pub(crate) fn container_of(path: &str) -> Option<String> {
    let id = identify(path);
    match (&id.runtime, id.short_id()) {
        (Runtime::None, _) => None,
        (r, Some(short)) => Some(format!("{r:?} {short}").to_lowercase()),
        (_, None) => id.systemd_unit.clone(),
    }
}

/// A process culprit with its cgroup and container from the processes seen in the window.
pub(crate) fn proc_culprit(d: &Data, pid: u32, comm: &str) -> Culprit {
    let p = d.procs.get(&pid);
    let cgroup = p.and_then(|p| p.cgroup.clone());
    Culprit {
        pid: Some(pid),
        comm: Some(comm.to_string()),
        container: cgroup.as_deref().and_then(container_of),
        cgroup,
        ..Default::default()
    }
}

/// A cgroup culprit.
pub(crate) fn cgroup_culprit(path: &str) -> Culprit {
    Culprit {
        cgroup: Some(path.to_string()),
        container: container_of(path),
        ..Default::default()
    }
}

/// Per-process series matching `prefix<pid>.<comm>suffix`, by window sum, largest first. A
/// process that renamed itself (exec, prctl) has a series per name: they are one process,
/// summed under the name it had longest.
pub(crate) fn top_procs(d: &Data, prefix: &str, suffix: &str) -> Vec<(u32, String, f64)> {
    top_procs_by(d, prefix, suffix, |s| s.sum)
}

/// Like [`top_procs`], ranking by `f` of each series' statistics instead of the sum.
pub(crate) fn top_procs_by(
    d: &Data,
    prefix: &str,
    suffix: &str,
    f: impl Fn(&crate::data::Stats) -> f64,
) -> Vec<(u32, String, f64)> {
    let mut by_pid: std::collections::HashMap<u32, (String, f64, f64)> = Default::default();
    for (name, s) in d.matching(&format!("{prefix}*{suffix}")) {
        let Some((pid, comm)) = pid_comm(name, prefix, suffix) else {
            continue;
        };
        let st = d.stats_of(s);
        let e = by_pid
            .entry(pid)
            .or_insert_with(|| (comm.to_string(), 0.0, -1.0));
        e.1 += f(&st);
        if st.n as f64 > e.2 {
            e.0 = comm.to_string();
            e.2 = st.n as f64;
        }
    }
    let mut v: Vec<(u32, String, f64)> = by_pid
        .into_iter()
        .filter(|(_, (_, sum, _))| *sum > 0.0)
        .map(|(pid, (comm, sum, _))| (pid, comm, sum))
        .collect();
    v.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    v
}

/// Per-label series `prefix<label>suffix`, by window statistic `f`, largest first.
pub(crate) fn top_labels(
    d: &Data,
    prefix: &str,
    suffix: &str,
    f: impl Fn(&crate::data::Stats) -> f64,
) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = d
        .matching(&format!("{prefix}*{suffix}"))
        .filter_map(|(name, s)| {
            let label = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
            let x = f(&d.stats_of(s));
            (x > 0.0).then(|| (label.to_string(), x))
        })
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

/// Orders the signals by when each first rose above its baseline (and `floor`); signals that
/// never rose are left out.
pub(crate) fn moved_first(d: &Data, signals: &[(&str, f64)]) -> Vec<Moved> {
    let mut on: Vec<(i64, &str)> = signals
        .iter()
        .filter_map(|&(s, floor)| d.onset_over_baseline(s, floor).map(|t| (t, s)))
        .collect();
    on.sort();
    let first = on.first().map(|x| x.0).unwrap_or(0);
    on.into_iter()
        .map(|(t, s)| Moved {
            signal: s.to_string(),
            at: rfc3339(t),
            lag_s: (t - first) as f64 / 1e9,
        })
        .collect()
}

/// (major, minor) of a kernel release string (`6.18.0-1-amd64`).
pub(crate) fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let maj = it.next()?.parse().ok()?;
    let min = it.next()?.parse().ok()?;
    Some((maj, min))
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
        "percent",
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
    }
}

/// MiB, for text.
pub(crate) fn mib(b: f64) -> f64 {
    (b / 1048576.0 * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_scale() {
        assert_eq!(confidence(10.0, 10.0, 20.0), 0.5);
        assert_eq!(confidence(20.0, 10.0, 20.0), 0.95);
        assert_eq!(confidence(100.0, 10.0, 20.0), 0.95);
        assert_eq!(confidence(15.0, 10.0, 20.0), 0.73);
    }

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.18.0-1-amd64"), Some((6, 18)));
        assert_eq!(kernel_version("4.19.112+"), Some((4, 19)));
        assert_eq!(kernel_version("garbage"), None);
    }

    #[test]
    fn rule_ids_unique() {
        let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len());
    }
}
