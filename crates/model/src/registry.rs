//! Every metric described once: its name, unit, kind, help and how it is derived.
//!
//! A metric name is a template; `<placeholders>` name the instance it is about
//! (`cgroup.<cgroup>.cpu.throttled_pct`, `proc.<pid>.<comm>.rss_bytes`). A series is a template
//! with its placeholders filled in. `dump --list`, OpenMetrics names, the status line, the rules'
//! evidence, the signals, the views' columns, the web charts and the lab checks all come from
//! this one table; the definitions themselves live in [`crate::metrics`], one named static per
//! metric, so code addresses a series as (definition, labels) and never spells a name.

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
    /// A ratio without unit (load average, queue depth).
    Ratio,
    /// CPUs' worth of time (a CFS quota over its period).
    Cores,
    /// Milliseconds per second: a share of time summed over CPUs (throttled time).
    MillisecondsPerSecond,
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
            Unit::Cores => "cores",
            Unit::MillisecondsPerSecond => "milliseconds_per_second",
        }
    }

    /// A short symbol for axis titles and screens (`%`, `/s`, `µs`).
    pub fn symbol(self) -> &'static str {
        match self {
            Unit::Percent => "%",
            Unit::PerSecond => "/s",
            Unit::Bytes => "bytes",
            Unit::BytesPerSecond => "bytes/s",
            Unit::Pages => "pages",
            Unit::Count => "count",
            Unit::Milliseconds => "ms",
            Unit::Microseconds => "µs",
            Unit::Nanoseconds => "ns",
            Unit::Seconds => "s",
            Unit::Ratio => "ratio",
            Unit::Cores => "cores",
            Unit::MillisecondsPerSecond => "ms/s",
        }
    }

    /// The unit of a per-second value summed over the seconds it covers (a count for events
    /// per second, bytes for bytes per second); other units are their own.
    pub fn summed(self) -> Unit {
        match self {
            Unit::PerSecond => Unit::Count,
            Unit::BytesPerSecond => Unit::Bytes,
            Unit::MillisecondsPerSecond => Unit::Milliseconds,
            u => u,
        }
    }
}

impl serde::Serialize for Unit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
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

pub use crate::eval::{Emit, EvalFn};

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
    /// Templates it was recorded under before a rename, same placeholders in the same order:
    /// a store written then still reads as this metric (see [`parse_series`]).
    pub aliases: &'static [&'static str],
    /// The large sample parts its evaluation reads, which a read must decode.
    pub parts: crate::codec::Parts,
}

// Names are unique (a test checks), so a definition is known by its name: handles compare,
// hash and sort by it wherever they are stored.
impl PartialEq for MetricDef {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other) || self.name == other.name
    }
}

impl Eq for MetricDef {}

impl std::hash::Hash for MetricDef {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.name.hash(h)
    }
}

impl PartialOrd for MetricDef {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MetricDef {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name.cmp(other.name)
    }
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
        literals_of(self.name)
    }

    /// The glob that matches every series of the metric: each placeholder as `*`
    /// (`cgroup.*.cpu.throttled_pct`).
    pub fn glob(&self) -> String {
        self.literals().join("*")
    }

    /// The placeholder values of `series` when it is a series of this metric, else `None`.
    /// Each placeholder takes at least one character; where a literal separates two of them,
    /// its first occurrence splits (a pid has no dots, a comm may: `proc.42.python3.11.x`).
    pub fn labels_of(&self, series: &str) -> Option<Vec<String>> {
        labels_in(&self.literals(), series)
    }

    /// The literal text before the first placeholder.
    pub fn literal_prefix(&self) -> &'static str {
        &self.name[..self.name.find('<').unwrap_or(self.name.len())]
    }

    /// The large sample parts this metric reads, as its definition declares them.
    pub fn parts(&self) -> crate::codec::Parts {
        self.parts
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
        // The metric's own glob (each placeholder a `*`), as selections print themselves.
        if p.as_str() == lits.join("*") {
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
    out.push_str(literals.first().copied().unwrap_or_default());
    write_series_rest(literals, labels, out);
}

/// Like [`write_series_name`], leaving out the first literal.
pub(crate) fn write_series_rest(literals: &[&str], labels: &[&str], out: &mut String) {
    for (i, lit) in literals.iter().enumerate().skip(1) {
        out.push_str(labels.get(i - 1).copied().unwrap_or_default());
        // Most separators are one character ("."), which needs no call to copy.
        match lit.as_bytes() {
            &[b] => out.push(char::from(b)),
            _ => out.push_str(lit),
        }
    }
}

/// The metric and placeholder values of a series name, trying `defs` in order; among metrics
/// whose templates all fit, the one with the most literal text wins (`cpu.<cpu>.usr_pct`
/// before `cpu.<cpu>.<x>` would, had such a metric existed). A name recorded before its
/// metric was renamed parses as the metric, by the metric's aliases, when no current name
/// fits.
pub fn parse_series(
    defs: &[&'static MetricDef],
    series: &str,
) -> Option<(&'static MetricDef, Vec<String>)> {
    defs.iter()
        .filter_map(|&d| Some((d, d.labels_of(series)?)))
        .max_by_key(|(d, _)| d.literals().iter().map(|l| l.len()).sum::<usize>())
        .or_else(|| {
            defs.iter()
                .flat_map(|&d| d.aliases.iter().map(move |a| (d, literals_of(a))))
                .filter_map(|(d, lits)| {
                    let n: usize = lits.iter().map(|l| l.len()).sum();
                    Some((d, labels_in(&lits, series)?, n))
                })
                .max_by_key(|(_, _, n)| *n)
                .map(|(d, labels, _)| (d, labels))
        })
}

/// The literal pieces of a name template around its placeholders.
fn literals_of(template: &'static str) -> Vec<&'static str> {
    let mut out = Vec::with_capacity(3);
    let mut rest = template;
    while let Some(a) = rest.find('<') {
        let Some(b) = rest[a..].find('>') else { break };
        out.push(&rest[..a]);
        rest = &rest[a + b + 1..];
    }
    out.push(rest);
    out
}

/// The placeholder values of `series` under a template split into `lits`.
fn labels_in(lits: &[&str], series: &str) -> Option<Vec<String>> {
    if lits.len() == 1 {
        return (lits[0] == series).then(Vec::new);
    }
    let (first, last) = (lits[0], lits[lits.len() - 1]);
    let inner = series.strip_prefix(first)?.strip_suffix(last)?;
    let mut out = Vec::with_capacity(lits.len() - 1);
    let mut rest = inner;
    for lit in &lits[1..lits.len() - 1] {
        // At least one character (whatever its width) for this label, then the literal.
        let first = rest.chars().next()?.len_utf8();
        let at = rest[first..].find(lit)? + first;
        out.push(rest[..at].to_string());
        rest = &rest[at + lit.len()..];
    }
    if rest.is_empty() {
        return None;
    }
    out.push(rest.to_string());
    Some(out)
}

/// A selection written in code, where it must be a constant (a rule's inputs, a signal): a
/// metric and one glob per placeholder (none: every series). [`Sel::select`] prepares it.
#[derive(Debug, Clone, Copy)]
pub struct Sel {
    /// The metric.
    pub def: &'static MetricDef,
    /// Label globs, one per placeholder in template order; empty for every series.
    pub labels: &'static [&'static str],
}

impl Sel {
    /// Every series of `def`.
    pub const fn all(def: &'static MetricDef) -> Sel {
        Sel { def, labels: &[] }
    }

    /// The series of `def` whose placeholder values match `labels`.
    pub const fn of(def: &'static MetricDef, labels: &'static [&'static str]) -> Sel {
        Sel { def, labels }
    }

    /// As a [`Select`].
    pub fn select(&self) -> Select {
        Select::labels(self.def, self.labels)
    }
}

/// A selection of one metric's series: every series, or those whose placeholder values match
/// one glob each (`*` for any). Its text form is the series glob `dump --select` takes
/// (`cgroup.*jitterscope-lab/*.cpu.throttled_pct`).
#[derive(Debug, Clone, PartialEq)]
pub struct Select {
    /// The metric.
    pub def: &'static MetricDef,
    /// One glob per placeholder; empty selects every series.
    labels: Vec<crate::glob::Pattern>,
}

impl Select {
    /// Every series of `def`.
    pub fn all(def: &'static MetricDef) -> Self {
        Select {
            def,
            labels: Vec::new(),
        }
    }

    /// The series of `def` whose placeholder values match `labels`: one glob per placeholder,
    /// in template order, or none for every series.
    ///
    /// # Panics
    /// When `labels` is neither empty nor one per placeholder: selections are written in code,
    /// and `PROC_RSS_BYTES` with one label would silently select a pid, not a comm.
    pub fn labels(def: &'static MetricDef, labels: &[&str]) -> Self {
        let n = def.placeholders().len();
        assert!(
            labels.is_empty() || labels.len() == n,
            "{}: {} label globs for {n} placeholders",
            def.name,
            labels.len()
        );
        let mut pats: Vec<crate::glob::Pattern> = labels
            .iter()
            .map(|l| crate::glob::Pattern::new(l))
            .collect();
        if pats.iter().all(|p| p.as_str() == "*") {
            pats.clear();
        }
        Select { def, labels: pats }
    }

    /// Whether it takes every series of its metric.
    pub fn is_all(&self) -> bool {
        self.labels.is_empty()
    }

    /// Whether the series of `def` with placeholder values `labels` is selected.
    pub fn matches(&self, def: &MetricDef, labels: &[&str]) -> bool {
        def == self.def && self.labels.iter().zip(labels).all(|(p, l)| p.matches(l))
    }
}

impl std::fmt::Display for Select {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.labels.is_empty() {
            return f.write_str(&self.def.glob());
        }
        let globs: Vec<&str> = self.labels.iter().map(|p| p.as_str()).collect();
        f.write_str(&self.def.series_name(&globs))
    }
}

impl serde::Serialize for Select {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glob::Pattern;
    use crate::metrics::{all, find};

    /// A metric renamed from `cgroup.<cgroup>.cpu.throttle_share` (its old name an alias).
    static RENAMED: MetricDef = MetricDef {
        name: "cgroup.<cgroup>.cpu.throttled_share_pct",
        aliases: &["cgroup.<cgroup>.cpu.throttle_share"],
        parts: crate::codec::Parts::CGROUPS,
        ..RENAMED_SHAPE
    };

    /// A store written before a rename reads as the renamed metric, with its labels; a name
    /// under no template and no alias is unknown; a current name wins over an alias.
    #[test]
    fn a_name_recorded_before_a_rename_reads_as_the_metric() {
        let defs: &[&'static MetricDef] = &[&crate::metrics::cgroup::CPU_THROTTLED_PCT, &RENAMED];
        let (d, l) = parse_series(defs, "cgroup./web.cpu.throttle_share").expect("by alias");
        assert_eq!(d.name, RENAMED.name);
        assert_eq!(l, ["/web"]);
        assert_eq!(
            d.series_name(&["/web"]),
            "cgroup./web.cpu.throttled_share_pct"
        );
        let (d, _) = parse_series(defs, "cgroup./web.cpu.throttled_share_pct").unwrap();
        assert_eq!(d.name, RENAMED.name);
        let (d, _) = parse_series(defs, "cgroup./web.cpu.throttled_pct").unwrap();
        assert_eq!(d, &crate::metrics::cgroup::CPU_THROTTLED_PCT);
        assert!(parse_series(defs, "cgroup./web.cpu.throttle_ratio").is_none());
        assert!(RENAMED
            .labels_of("cgroup./web.cpu.throttle_share")
            .is_none());
    }

    /// Aliases keep a metric's placeholders, in order, and none takes every series of
    /// another metric (else a store's series of a metric a read did not ask for would read as
    /// this one). Free-text labels (a cgroup path, a `memory.stat` field) can make some name
    /// fit both, which is why a current template always wins over an alias.
    #[test]
    fn aliases_keep_their_placeholders_and_collide_with_nothing() {
        let check = |d: &MetricDef, others: &[&'static MetricDef]| {
            for a in d.aliases {
                let def = MetricDef {
                    name: a,
                    ..RENAMED_SHAPE
                };
                assert_eq!(def.placeholders(), d.placeholders(), "{a} of {}", d.name);
                let glob = Pattern::new(&def.glob());
                for o in others.iter().filter(|o| o.name != d.name) {
                    assert_ne!(o.fit(&glob), Fit::Always, "{a} of {} is {}", d.name, o.name);
                }
            }
        };
        for d in all() {
            check(d, all());
        }
        // The check itself: the test metric's alias passes, while an alias that is another
        // metric's template would not.
        check(&RENAMED, all());
        let t = &crate::metrics::cgroup::CPU_THROTTLED_PCT;
        assert_eq!(t.fit(&Pattern::new(&t.glob())), Fit::Always);
    }

    const RENAMED_SHAPE: MetricDef = MetricDef {
        name: "",
        unit: Unit::Count,
        kind: Kind::Gauge,
        help: "",
        eval: |_, _| {},
        aliases: &[],
        parts: crate::codec::Parts::NONE,
    };

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
        assert_eq!(rss.fit(&Pattern::new("proc.*.*.rss_bytes")), Fit::Always);
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
                Unit::MillisecondsPerSecond => plain.ends_with("_ms_per_s"),
                Unit::PerSecond => plain.ends_with("_per_s") && !plain.ends_with("_ms_per_s"),
                Unit::Cores => plain.ends_with("_cores"),
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
    fn series_names_parse_back_to_their_metric_and_labels() {
        use crate::metrics::{cgroup, cpu, process};
        let cases: [(&MetricDef, &[&str]); 4] = [
            (&process::PROC_RSS_BYTES, &["42", "python3.11"]),
            (&cgroup::CPU_THROTTLED_PCT, &["/kubepods/pod.a/b.c"]),
            (&cpu::PER_CPU_USR_PCT, &["3"]),
            (&cpu::USR_PCT, &[]),
        ];
        for (def, labels) in cases {
            let name = def.series_name(labels);
            let (d, l) = parse_series(all(), &name).expect(&name);
            assert_eq!(
                (d, l.iter().map(String::as_str).collect::<Vec<_>>()),
                (def, labels.to_vec())
            );
        }
        assert_eq!(process::PROC_RSS_BYTES.labels_of("proc..x.rss_bytes"), None);
        assert_eq!(
            process::PROC_RSS_BYTES.labels_of("proc.é.x.rss_bytes"),
            Some(vec!["é".to_string(), "x".to_string()])
        );
        assert_eq!(process::PROC_RSS_BYTES.labels_of("cpu.usr_pct"), None);
        assert_eq!(
            cgroup::CPU_THROTTLED_PCT.glob(),
            "cgroup.*.cpu.throttled_pct"
        );
    }

    #[test]
    fn selects_match_labels_and_print_as_globs() {
        use crate::metrics::{cgroup, process};
        let s = Select::labels(&cgroup::CPU_THROTTLED_PCT, &["*jitterscope-lab/*"]);
        assert_eq!(s.to_string(), "cgroup.*jitterscope-lab/*.cpu.throttled_pct");
        assert!(s.matches(&cgroup::CPU_THROTTLED_PCT, &["/jitterscope-lab/x"]));
        assert!(!s.matches(&cgroup::CPU_THROTTLED_PCT, &["/other"]));
        assert!(!s.matches(&cgroup::CPU_USAGE_PCT, &["/jitterscope-lab/x"]));
        let any = Select::labels(&process::PROC_RSS_BYTES, &["*", "*"]);
        assert!(any.is_all());
        assert_eq!(any.to_string(), "proc.*.*.rss_bytes");
        let comm = Select::labels(&process::PROC_RSS_BYTES, &["*", "lab-leak"]);
        let pid_only =
            std::panic::catch_unwind(|| Select::labels(&process::PROC_RSS_BYTES, &["7"]));
        assert!(
            pid_only.is_err(),
            "one glob for two placeholders is refused"
        );
        assert!(comm.matches(&process::PROC_RSS_BYTES, &["7", "lab-leak"]));
        assert!(!comm.matches(&process::PROC_RSS_BYTES, &["7", "other"]));
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
