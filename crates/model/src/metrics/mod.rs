//! The metric definitions, one module per source, each a named static: code refers to a metric
//! by its handle (`metrics::cgroup::CPU_THROTTLED_PCT`), so renaming or removing a definition
//! fails the build of every user instead of leaving an empty column. [`ALL`] is the table of
//! them all ([`all`], [`find`]); the types are `registry.rs`'s.

use std::collections::HashMap;
use std::sync::LazyLock;

use crate::eval::{Ctx, Emit};
use crate::registry::MetricDef;

pub mod cgroup;
pub mod cpu;
pub mod disk;
pub mod irq;
pub mod mem;
pub mod net;
pub mod process;
pub mod profile;
pub mod psi;
pub mod recorder;
pub mod tracer;

/// Every metric, grouped by source in the order `dump --list` shows them.
pub static ALL: LazyLock<Vec<&'static MetricDef>> = LazyLock::new(|| {
    [
        cpu::DEFS,
        mem::DEFS,
        irq::DEFS,
        psi::DEFS,
        disk::DEFS,
        net::DEFS,
        cgroup::DEFS,
        process::DEFS,
        tracer::DEFS,
        profile::DEFS,
        recorder::DEFS,
    ]
    .concat()
});

/// The whole registry, in the order `dump --list` prints it.
pub fn all() -> &'static [&'static MetricDef] {
    ALL.as_slice()
}

/// The sample parts needed to evaluate every metric that may match `select` (all metrics when
/// `select` is empty).
pub fn parts_for(select: &[crate::glob::Pattern]) -> crate::codec::Parts {
    all()
        .iter()
        .filter(|d| select.is_empty() || select.iter().any(|p| d.may_match(p)))
        .fold(crate::codec::Parts::NONE, |acc, d| acc.union(d.parts()))
}

/// Looks a metric up by its template name (for names that come from outside the code: the
/// command line, stored data; code uses the handles in this module).
pub fn find(name: &str) -> Option<&'static MetricDef> {
    all().iter().copied().find(|d| d.name == name)
}

/// Declares a source's metrics: one public static per definition, named after it (its help is
/// its doc), and the module's `DEFS` table in declaration order, which is the order
/// `dump --list` shows. A renamed metric lists the templates it had after its name, each
/// after a `|` (`("mem.new_name" | "mem.old_name", …)`), so that stores written before the
/// rename still read. `reads:` declares the large sample parts the module's metrics need
/// decoded (`NONE`, `PROCESSES`, `CGROUPS`, `PROFILE`), and `Kind in PART` one metric's own
/// where it differs (the slab caches among memory's); a test checks each metric gives the
/// same values with only its parts decoded.
macro_rules! metrics {
    (@parts $m:ident) => {
        $crate::codec::Parts::$m
    };
    (@parts $m:ident $p:ident) => {
        $crate::codec::Parts::$p
    };
    (reads: $mparts:ident; $($id:ident = ($name:literal $(| $alias:literal)*, $unit:ident, $kind:ident $(in $part:ident)?, $help:literal, $eval:expr $(,)?)),* $(,)?) => {
        $(
            #[doc = $help]
            #[doc = ""]
            #[doc = concat!("Series: `", $name, "`.")]
            pub static $id: $crate::registry::MetricDef = $crate::registry::MetricDef {
                name: $name,
                unit: $crate::registry::Unit::$unit,
                kind: $crate::registry::Kind::$kind,
                help: $help,
                eval: $eval,
                aliases: &[$($alias),*],
                parts: $crate::metrics::metrics!(@parts $mparts $($part)?),
            };
        )*
        pub(super) static DEFS: &[&$crate::registry::MetricDef] = &[$(&$id),*];
    };
}
pub(crate) use metrics;

/// Emits a gauge value under `labels` when present.
pub(crate) fn gauge(out: &mut Emit, labels: &[&str], v: Option<f64>) {
    if let Some(v) = v {
        out(labels, Some(v));
    }
}

/// Emits the per-second rate of a counter, scaled by `k`.
pub(crate) fn rate(
    cx: &Ctx,
    out: &mut Emit,
    labels: &[&str],
    cur: Option<u64>,
    prev: Option<u64>,
    k: f64,
) {
    cx.rate(cur, prev).emit(out, labels, k);
}

/// Pairs each current entity with the previous sample's entity of the same key.
pub(crate) fn pairs<'a, T>(
    cur: &'a [T],
    prev: Option<&'a [T]>,
    key: impl Fn(&T) -> &str,
) -> Vec<(&'a T, Option<&'a T>)> {
    let Some(prev) = prev else {
        return cur.iter().map(|c| (c, None)).collect();
    };
    if prev.len() <= 16 {
        return cur
            .iter()
            .map(|c| (c, prev.iter().find(|p| key(p) == key(c))))
            .collect();
    }
    let idx: HashMap<&str, &T> = prev.iter().map(|p| (key(p), p)).collect();
    cur.iter().map(|c| (c, idx.get(key(c)).copied())).collect()
}
