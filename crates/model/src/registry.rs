//! Every metric described once: its name, unit, kind, help and how it is derived.
//!
//! A metric name is a template; `<placeholders>` name the instance it is about
//! (`cgroup.<cgroup>.cpu.throttled_pct`, `proc.<pid>.<comm>.rss_bytes`). A series is a template
//! with its placeholders filled in. `dump --list`, OpenMetrics names, the status line and (later)
//! the rules' evidence ids and the views' columns all come from this one table; the definitions
//! themselves live in [`crate::metrics`], one module per source.

use crate::derive::Ctx;

/// The unit of a metric, part of its name as a suffix too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Percent (0–100; of one CPU for process and cgroup CPU, of all CPUs for host CPU).
    Percent,
    /// Events per second.
    PerSecond,
    /// Bytes.
    Bytes,
    /// Bytes per second.
    BytesPerSecond,
    /// Pages (of the kernel's page size).
    Pages,
    /// A plain count.
    Count,
    /// Milliseconds.
    Milliseconds,
    /// Microseconds.
    Microseconds,
    /// Nanoseconds.
    Nanoseconds,
    /// Seconds.
    Seconds,
    /// A ratio without unit (load average, CPU cores).
    Ratio,
}

impl Unit {
    /// Short text used by `dump --list` and OpenMetrics `# UNIT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Percent => "percent",
            Unit::PerSecond => "per_second",
            Unit::Bytes => "bytes",
            Unit::BytesPerSecond => "bytes_per_second",
            Unit::Pages => "pages",
            Unit::Count => "count",
            Unit::Milliseconds => "milliseconds",
            Unit::Microseconds => "microseconds",
            Unit::Nanoseconds => "nanoseconds",
            Unit::Seconds => "seconds",
            Unit::Ratio => "ratio",
        }
    }
}

/// How a metric's value relates to the raw data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A level read from one sample (memory in use, threads).
    Gauge,
    /// A raw cumulative counter as the kernel reports it.
    Counter,
    /// A per-second rate or a percentage of time derived from two consecutive samples; a counter
    /// that went backwards (reset, wrap, pid reuse) yields "unknown", never a made-up value.
    Rate,
}

impl Kind {
    /// Text for `dump --list`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Rate => "rate",
        }
    }
}

/// Receives the values a metric produces for one sample: the placeholder values (in template
/// order) and the value (`None` = unknown for this interval).
pub type Emit<'e> = dyn FnMut(&[&str], Option<f64>) + 'e;

/// How a metric produces its series for one sample.
pub type EvalFn = fn(&Ctx, &mut Emit);

/// One metric.
pub struct MetricDef {
    /// Name template, e.g. `cgroup.<cgroup>.cpu.throttled_pct`.
    pub name: &'static str,
    /// Unit.
    pub unit: Unit,
    /// Kind.
    pub kind: Kind,
    /// One-line help: what it measures, from which kernel file.
    pub help: &'static str,
    /// Produces the metric's series for one sample (with the previous one for rates).
    pub eval: EvalFn,
}

impl std::fmt::Debug for MetricDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricDef")
            .field("name", &self.name)
            .finish()
    }
}

impl MetricDef {
    /// The placeholder names of the template, in order (`["cgroup"]`).
    pub fn placeholders(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut rest = self.name;
        while let Some(a) = rest.find('<') {
            let Some(b) = rest[a..].find('>') else { break };
            out.push(&rest[a + 1..a + b]);
            rest = &rest[a + b + 1..];
        }
        out
    }

    /// The series name for placeholder values `labels`.
    pub fn series_name(&self, labels: &[&str]) -> String {
        let mut out = String::with_capacity(self.name.len() + 16);
        self.write_series_name(labels, &mut out);
        out
    }

    /// Appends the series name for `labels` to `out`.
    pub fn write_series_name(&self, labels: &[&str], out: &mut String) {
        write_series_name(&self.literals(), labels, out);
    }

    /// The literal pieces of the template around its placeholders (`["cgroup.", ".cpu.x"]`
    /// for `cgroup.<cgroup>.cpu.x`): split once, then joined with label values per series.
    pub fn literals(&self) -> Vec<&'static str> {
        let mut out = Vec::with_capacity(3);
        let mut rest = self.name;
        while let Some(a) = rest.find('<') {
            let Some(b) = rest[a..].find('>') else { break };
            out.push(&rest[..a]);
            rest = &rest[a + b + 1..];
        }
        out.push(rest);
        out
    }

    /// The literal text before the first placeholder.
    pub fn literal_prefix(&self) -> &'static str {
        &self.name[..self.name.find('<').unwrap_or(self.name.len())]
    }

    /// The large sample parts this metric reads (by its name's first component: `proc.` and
    /// `procs.` read processes, `cgroup.` cgroups, `slab.` slab caches, `profile.` the stack slice). A test checks every
    /// metric gives the same values when only these parts are decoded.
    pub fn parts(&self) -> crate::codec::Parts {
        use crate::codec::Parts;
        match self.name.split('.').next() {
            Some("proc" | "procs") => Parts::PROCESSES,
            Some("cgroup") => Parts::CGROUPS,
            Some("slab") => Parts::SLABINFO,
            Some("profile") => Parts::PROFILE,
            _ => Parts::NONE,
        }
    }

    /// Whether any series of this metric could match `p` (a cheap test on literal prefixes used
    /// to skip evaluating metrics a selection cannot reach).
    pub fn may_match(&self, p: &crate::glob::Pattern) -> bool {
        let (a, b) = (self.literal_prefix(), p.literal_prefix());
        if self.placeholders().is_empty() {
            return p.matches(self.name);
        }
        a.starts_with(b) || b.starts_with(a)
    }
}

/// How a pattern relates to every series one metric can emit, decided from the template alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// No series of the metric can match.
    Never,
    /// Every series of the metric matches.
    Always,
    /// Depends on the label values: match each series name.
    Check,
}

impl MetricDef {
    /// Whether `p` can match this metric's series, and whether it needs checking per series.
    /// Diagnosis selects `proc.*.cpu_pct` next to some 40 other process metrics: without this,
    /// every one of them was evaluated and its name matched for each of 500 processes, which
    /// was 40% of diagnosing an hour.
    pub fn fit(&self, p: &crate::glob::Pattern) -> Fit {
        if !self.may_match(p) {
            return Fit::Never;
        }
        let lits = self.literals();
        if lits.len() < 2 {
            // No placeholder: `may_match` matched the name itself.
            return Fit::Always;
        }
        let (first, last) = (lits[0], lits[lits.len() - 1]);
        let suffix = p.literal_suffix();
        if !(last.ends_with(suffix) || suffix.ends_with(last)) {
            return Fit::Never;
        }
        // Every name is `first + labels... + last`, and `first`, `last` are distinct pieces, so a
        // `prefix*suffix` pattern whose ends lie inside them matches whatever the labels are.
        match p.star_split() {
            Some((a, b)) if first.starts_with(a) && last.ends_with(b) => Fit::Always,
            _ => Fit::Check,
        }
    }
}

/// Appends the series name made of template `literals` (see [`MetricDef::literals`]) and
/// placeholder values `labels` to `out`.
pub fn write_series_name(literals: &[&str], labels: &[&str], out: &mut String) {
    for (i, lit) in literals.iter().enumerate() {
        out.push_str(lit);
        if i + 1 < literals.len() {
            out.push_str(labels.get(i).copied().unwrap_or(""));
        }
    }
}

/// The whole registry, in the order `dump --list` prints it.
pub fn all() -> &'static [&'static MetricDef] {
    crate::metrics::ALL.as_slice()
}

/// The sample parts needed to evaluate every metric that may match `select` (all metrics when
/// `select` is empty).
pub fn parts_for(select: &[crate::glob::Pattern]) -> crate::codec::Parts {
    all()
        .iter()
        .filter(|d| select.is_empty() || select.iter().any(|p| d.may_match(p)))
        .fold(crate::codec::Parts::NONE, |acc, d| acc.union(d.parts()))
}

/// Looks a metric up by its template name.
pub fn find(name: &str) -> Option<&'static MetricDef> {
    all().iter().copied().find(|d| d.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glob::Pattern;

    proptest::proptest! {
        /// `fit` decided from the template agrees with matching the names the metric emits.
        #[test]
        fn fit_agrees_with_matching(
            labels in proptest::collection::vec("[a-z0-9./_*-]{0,12}", 3),
            pick in 0usize..1000,
            pat in proptest::sample::select(vec![
                "proc.*.cpu_pct", "proc.*.rss_bytes", "proc.*", "*", "cgroup.*.cpu.throttled_pct",
                "cgroup.*.memory.*", "cpu.sys_pct", "cpu.?.sys_pct", "cpu.*.idle_pct", "proc.1*",
                "*_pct", "slab.*", "proc.*.*.threads", "disk.*.util_pct", "c*u.sys_pct",
            ]),
        ) {
            let defs = all();
            let def = defs[pick % defs.len()];
            let p = Pattern::new(pat);
            let refs: Vec<&str> = labels.iter().map(|s| s.as_str()).collect();
            let mut name = String::new();
            def.write_series_name(&refs, &mut name);
            match def.fit(&p) {
                Fit::Never => proptest::prop_assert!(!p.matches(&name), "{} ~ {}", pat, name),
                Fit::Always => proptest::prop_assert!(p.matches(&name), "{} ~ {}", pat, name),
                Fit::Check => {}
            }
        }
    }

    #[test]
    fn fit_sorts_process_metrics() {
        let rss = find("proc.<pid>.<comm>.rss_bytes").expect("rss metric");
        assert_eq!(rss.fit(&Pattern::new("proc.*.cpu_pct")), Fit::Never);
        assert_eq!(rss.fit(&Pattern::new("proc.*.rss_bytes")), Fit::Always);
        assert_eq!(rss.fit(&Pattern::new("proc.1*.rss_bytes")), Fit::Check);
        assert_eq!(rss.fit(&Pattern::new("proc.1?.*")), Fit::Check);
        assert_eq!(rss.fit(&Pattern::new("cpu.*")), Fit::Never);
    }

    #[test]
    fn names_are_unique_lowercase_dotted_with_units() {
        let mut seen = std::collections::HashSet::new();
        for d in all() {
            assert!(seen.insert(d.name), "duplicate metric {}", d.name);
            assert!(!d.help.is_empty(), "{} has no help", d.name);
            let plain: String = {
                let mut s = String::new();
                let mut depth = 0;
                for c in d.name.chars() {
                    match c {
                        '<' => depth += 1,
                        '>' => depth -= 1,
                        c if depth == 0 => s.push(c),
                        _ => {}
                    }
                }
                s
            };
            assert!(
                plain
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_'),
                "{} is not lower-case dotted",
                d.name
            );
            // The unit is visible in the name, never only in a comment.
            let suffix_ok = match d.unit {
                Unit::Percent => plain.ends_with("_pct"),
                Unit::PerSecond => plain.ends_with("_per_s"),
                Unit::Bytes => plain.ends_with("_bytes"),
                Unit::BytesPerSecond => plain.ends_with("_bytes_per_s"),
                Unit::Pages => plain.ends_with("_pages"),
                Unit::Milliseconds => plain.ends_with("_ms"),
                Unit::Microseconds => plain.ends_with("_usec"),
                Unit::Nanoseconds => plain.ends_with("_ns"),
                Unit::Seconds => plain.ends_with("_seconds"),
                Unit::Count | Unit::Ratio => true,
            };
            assert!(suffix_ok, "{}: unit {:?} not in the name", d.name, d.unit);
        }
    }

    #[test]
    fn series_names_fill_placeholders() {
        let d = find("cgroup.<cgroup>.cpu.throttled_pct").unwrap();
        assert_eq!(d.placeholders(), vec!["cgroup"]);
        assert_eq!(
            d.series_name(&["/docker/abc"]),
            "cgroup./docker/abc.cpu.throttled_pct"
        );
        let p = find("proc.<pid>.<comm>.rss_bytes").unwrap();
        assert_eq!(p.series_name(&["12", "nginx"]), "proc.12.nginx.rss_bytes");
        assert!(p.may_match(&crate::glob::Pattern::new("proc.*.rss_bytes")));
        assert!(!p.may_match(&crate::glob::Pattern::new("cgroup.*")));
    }
}
