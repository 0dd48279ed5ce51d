//! Derivation of metric values from two consecutive samples: many metrics evaluated at once,
//! each series kept or not by a selection. What one metric's evaluation sees is `eval.rs`
//! (re-exported here).

pub use crate::eval::{emit_delta_pct, Ctx, Rate, MAX_RATE_GAP_S};
use crate::glob::Pattern;
use crate::registry::{Fit, MetricDef, Select};
use crate::sample::Sample;

/// One evaluated series value.
#[derive(Debug, Clone)]
pub struct SeriesValue {
    /// The metric it belongs to.
    pub def: &'static MetricDef,
    /// Placeholder values, in template order.
    pub labels: Vec<String>,
    /// The full series name.
    pub series: String,
    /// The value; `None` means unknown for this interval.
    pub value: Option<f64>,
}

/// Evaluates the metrics in `defs` for one sample, keeping the series any of `select` matches
/// (all of them when `select` is empty).
pub fn evaluate(
    defs: &[&'static MetricDef],
    cur: &Sample,
    prev: Option<&Sample>,
    select: &[Pattern],
) -> Vec<SeriesValue> {
    let mut out = Vec::new();
    for_each_series(defs, cur, prev, select, |def, labels, series, value| {
        out.push(SeriesValue {
            def,
            labels: labels.iter().map(|s| s.to_string()).collect(),
            series: series.to_string(),
            value,
        })
    });
    out
}

/// Like [`evaluate`], handing each series to `f` (metric, placeholder values, series name,
/// value) without allocating per series: dumping a minute of a busy host is ~400k series, and
/// building each as owned strings was most of the time.
pub fn for_each_series(
    defs: &[&'static MetricDef],
    cur: &Sample,
    prev: Option<&Sample>,
    select: &[Pattern],
    f: impl FnMut(&'static MetricDef, &[&str], &str, Option<f64>),
) {
    Selection::new(defs, select).for_each(cur, prev, f)
}

/// A selection prepared once for many samples: the metrics to evaluate, their template pieces,
/// and how to tell which of their series are wanted. Code selects by handle ([`Selection::of`]),
/// so each series is kept or not by its placeholder values; user globs ([`Selection::new`]) are
/// checked against the few patterns that may match each metric, not all of them: diagnosis once
/// selected ~60 patterns, and matching every emitted series against every one of them was a
/// quarter of its time.
pub struct Selection {
    pats: Vec<Pattern>,
    entries: Vec<Entry>,
}

/// A selected metric: its definition, template pieces, and which series to keep.
struct Entry {
    def: &'static MetricDef,
    literals: Vec<&'static str>,
    keep: Keep,
}

/// Which series of a selected metric are kept.
enum Keep {
    /// Every one.
    All,
    /// Those whose name matches one of these patterns (indexes into `Selection::pats`).
    Names(Vec<usize>),
    /// Those whose placeholder values match one of these selects.
    Labels(Vec<Select>),
}

impl Selection {
    /// Prepares user globs `select` over `defs` (all series when `select` is empty). Duplicate
    /// patterns count once.
    pub fn new(defs: &[&'static MetricDef], select: &[Pattern]) -> Self {
        let mut pats: Vec<Pattern> = Vec::new();
        for p in select {
            if !pats.iter().any(|q| q.as_str() == p.as_str()) {
                pats.push(p.clone());
            }
        }
        let entries = defs
            .iter()
            .filter_map(|&def| {
                let keep = if pats.is_empty() {
                    Keep::All
                } else {
                    let fits: Vec<Fit> = pats.iter().map(|p| def.fit(p)).collect();
                    if fits.contains(&Fit::Always) {
                        Keep::All
                    } else {
                        let cand: Vec<usize> =
                            (0..pats.len()).filter(|&i| fits[i] == Fit::Check).collect();
                        if cand.is_empty() {
                            return None;
                        }
                        Keep::Names(cand)
                    }
                };
                Some(Entry {
                    def,
                    literals: def.literals(),
                    keep,
                })
            })
            .collect();
        Selection { pats, entries }
    }

    /// Prepares the series `selects` name (nothing when empty; unlike [`Selection::new`], whose
    /// empty list is everything), each metric evaluated once however many selects name it, in
    /// registry order. Only metrics in the registry's table are reached: a definition missing
    /// from its module's `metrics!` block cannot exist, so none is.
    pub fn of(selects: &[Select]) -> Self {
        let entries = crate::metrics::all()
            .iter()
            .filter_map(|&def| {
                let mine: Vec<&Select> = selects.iter().filter(|s| s.def == def).collect();
                if mine.is_empty() {
                    return None;
                }
                let keep = if mine.iter().any(|s| s.is_all()) {
                    Keep::All
                } else {
                    Keep::Labels(mine.into_iter().cloned().collect())
                };
                Some(Entry {
                    def,
                    literals: def.literals(),
                    keep,
                })
            })
            .collect();
        Selection {
            pats: Vec::new(),
            entries,
        }
    }

    /// The sample parts the selected metrics read.
    pub fn parts(&self) -> crate::codec::Parts {
        self.entries
            .iter()
            .fold(crate::codec::Parts::NONE, |acc, e| acc.union(e.def.parts()))
    }

    /// Whether nothing is selected.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Like [`for_each`](Selection::for_each) for a caller that needs no series names: each
    /// series is first offered to `pre` by its placeholder values, and a name is built only
    /// where a user glob must match it. An exporter that keeps ten processes of a thousand
    /// skips the other 990 names.
    pub fn for_each_labels(
        &self,
        cur: &Sample,
        prev: Option<&Sample>,
        pre: impl Fn(&'static MetricDef, &[&str]) -> bool,
        mut f: impl FnMut(&'static MetricDef, &[&str], Option<f64>),
    ) {
        self.walk(cur, prev, pre, |def, parts, _, _, value| {
            f(def, parts.labels, value)
        })
    }

    /// Evaluates the selected series of `cur` (against `prev`) and hands each to `f`.
    pub fn for_each(
        &self,
        cur: &Sample,
        prev: Option<&Sample>,
        mut f: impl FnMut(&'static MetricDef, &[&str], &str, Option<f64>),
    ) {
        self.walk(
            cur,
            prev,
            |_, _| true,
            |def, parts, name, built, value| {
                if !built {
                    name.clear();
                    parts.write_to(name);
                }
                f(def, parts.labels, name, value)
            },
        )
    }

    /// Like [`for_each`](Selection::for_each), handing each series' name in pieces: a writer
    /// that copies the name into its output anyway saves building it first (a quarter of a
    /// one-minute CSV dump's main thread, callgrind).
    pub fn for_each_parts(
        &self,
        cur: &Sample,
        prev: Option<&Sample>,
        mut f: impl FnMut(&'static MetricDef, NameParts<'_>, Option<f64>),
    ) {
        self.walk(
            cur,
            prev,
            |_, _| true,
            |def, parts, _, _, value| f(def, parts, value),
        )
    }

    /// Hands `f` each selected series that `pre` accepts (by its placeholder values, before any
    /// name is built), with a name buffer and whether the series' name is in it already (built
    /// to match a glob).
    fn walk(
        &self,
        cur: &Sample,
        prev: Option<&Sample>,
        pre: impl Fn(&'static MetricDef, &[&str]) -> bool,
        mut f: impl FnMut(&'static MetricDef, NameParts<'_>, &mut String, bool, Option<f64>),
    ) {
        let cx = Ctx::new(cur, prev);
        let mut name = String::with_capacity(128);
        for e in &self.entries {
            let def = e.def;
            let mut emit = |labels: &[&str], value: Option<f64>| {
                if !pre(def, labels) {
                    return;
                }
                let parts = NameParts {
                    literals: &e.literals,
                    labels,
                };
                let built = match &e.keep {
                    Keep::All => false,
                    Keep::Labels(sel) => {
                        if !sel.iter().any(|s| s.matches(def, labels)) {
                            return;
                        }
                        false
                    }
                    Keep::Names(c) => {
                        name.clear();
                        parts.write_to(&mut name);
                        if !c.iter().any(|&i| self.pats[i].matches(&name)) {
                            return;
                        }
                        true
                    }
                };
                f(def, parts, &mut name, built, value);
            };
            (def.eval)(&cx, &mut emit);
        }
    }
}

/// A series name in pieces: its metric template's literal text, with the placeholder values
/// between (`["proc.", ".", ".rss_bytes"]` around `["42", "bash"]`).
#[derive(Clone, Copy, Debug)]
pub struct NameParts<'a> {
    literals: &'a [&'static str],
    /// The placeholder values, in template order.
    pub labels: &'a [&'a str],
}

impl NameParts<'_> {
    /// Appends the name to `out`.
    pub fn write_to(&self, out: &mut String) {
        crate::registry::write_series_name(self.literals, self.labels, out);
    }

    /// The name's text before its first placeholder value (all of it when it has none): the
    /// same for every series of the metric.
    pub fn head(&self) -> &'static str {
        self.literals.first().copied().unwrap_or_default()
    }

    /// Appends the name after its [`head`](NameParts::head).
    pub fn write_rest(&self, out: &mut String) {
        crate::registry::write_series_rest(self.literals, self.labels, out);
    }
}
