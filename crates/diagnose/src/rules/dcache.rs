//! `memory.dcache-bloat` — the dentry cache swollen by failed look-ups (negative dentries).
//!
//! **Mechanism.** Every failed path look-up (`stat`, `access`, `open` of a name that does not
//! exist) leaves a negative dentry so the next miss is fast. A process probing unique names
//! leaves one per name, forever: millions of them fill slab, and reclaim must then shrink the
//! dentry cache (`super_cache_scan`) — sys-CPU spikes and allocation stalls for everyone.
//! Case 1: NSS's `sdb_measureAccess` probed ~10,000 `.<n>_dbaccess.tmp` names per call.
//!
//! **Evidence.** `dentry.nr_negative` (level and growth), `slab.dentry.total_bytes` share of
//! `slab.total_bytes`, the failed look-ups per process (`lookups.proc.*.enoent_per_s`) and the
//! name patterns sampled (`lookups.pattern.*`), the superblock shrinker's work, and whether the
//! producer runs code from NSS's softokn (`libsoftokn3`) in its stack samples or mappings.
//!
//! **Thresholds.** A finding when negative dentries rose by >= 100,000 over the baseline, or
//! grow >= 1,000/s on average: below that the cache is doing its job. A level over 1,000,000
//! that did not rise counts only when reclaim shrank the dentry cache in the window
//! (`super_cache_scan` freed objects or took time): a large, quiet cache left by an earlier
//! episode costs nothing until reclaim has to walk it, and blaming it for an unrelated
//! window (a CPU-bound control in the lab did exactly that) would hide the real cause.
//! Confidence on a log scale: 0.5 at +100k, 0.95 at +1M.
//!
//! **Remediation.** NSS: `NSS_SDB_USE_CACHE=yes` in the producer's environment stops the probe
//! (and `NSS_SDB_USE_CACHE=no` sets it off). Otherwise: fix or cache the probing; bound the
//! producer's cgroup memory (dentries are charged to it, so its reclaim shrinks them).
//!
//! **References.** Red Hat bz1044666 / NSS bug 1183153 (sdb_measureAccess);
//! Documentation/filesystems/vfs.rst (dentry cache).

use std::collections::BTreeSet;

use super::{
    confidence, evidence, fact, finding, moved_first, proc_culprit, top_labels, top_procs, Rule,
    Take,
};
use crate::data::Data;
use crate::Finding;

/// The rule.
pub const RULE: Rule = Rule {
    id: "memory.dcache-bloat",
    summary: "negative dentries from failed look-ups filling slab",
    mechanism: true,
    select: &[
        "dentry.nr_negative",
        "dentry.nr_dentry",
        "dentry.negative_growth_per_s",
        "slab.total_bytes",
        "slab.dentry.total_bytes",
        "lookups.proc.*.enoent_per_s",
        "lookups.pattern.*.samples",
        "shrinker.super_cache_scan.freed_per_s",
        "shrinker.super_cache_scan.time_pct",
        "cpu.sys_pct",
    ],
    run,
};

/// Whether a process runs NSS's softokn: from its recorded stack samples, else (if it still
/// runs) its mappings.
fn uses_softokn(d: &Data, pid: u32) -> Option<String> {
    let hit = |paths: &BTreeSet<String>| paths.iter().find(|p| p.contains("libsoftokn3")).cloned();
    if let Some(p) = d.modules.get(&pid).and_then(hit) {
        return Some(p);
    }
    let maps = d.live_file(pid, "maps")?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libsoftokn3"))
        .map(str::to_string)
}

fn run(d: &Data) -> Vec<Finding> {
    let neg = d.stats("dentry.nr_negative");
    if neg.n == 0 {
        return Vec::new();
    }
    let base = if neg.base_n > 0 {
        neg.base_median
    } else {
        neg.first
    };
    let rise = neg.max - base;
    let growth = d.stats("dentry.negative_growth_per_s");
    let shrunk = d.stats("shrinker.super_cache_scan.freed_per_s").max > 0.0
        || d.stats("shrinker.super_cache_scan.time_pct").max > 0.0;
    let level_only = rise < 100_000.0 && growth.mean < 1000.0;
    if level_only && (neg.max < 1_000_000.0 || !shrunk) {
        return Vec::new();
    }
    let producers = top_procs(d, "lookups.proc.", ".enoent_per_s");
    let patterns = top_labels(d, "lookups.pattern.", ".samples", |s| s.sum);
    let culprit = producers
        .first()
        .map(|(pid, comm, _)| proc_culprit(d, *pid, comm))
        .unwrap_or_default();
    let nss = producers
        .first()
        .and_then(|(pid, _, _)| uses_softokn(d, *pid));
    let mut culprit = culprit;
    if let Some(lib) = &nss {
        culprit.library = Some(lib.clone());
    }
    let mut f = finding(
        &RULE,
        d,
        format!(
            "dentry cache bloat: {}{}{}",
            if level_only {
                format!("{:.0} negative dentries, shrunk by reclaim", neg.max)
            } else {
                format!("+{rise:.0} negative dentries")
            },
            producers
                .first()
                .map(|(p, c, n)| format!(", {n:.0} failed look-ups by {c} ({p})"))
                .unwrap_or_default(),
            if nss.is_some() {
                " — NSS softokn's access probe"
            } else {
                ""
            }
        ),
        // Orders of magnitude matter, not the exact count: +100k is 0.5, +1M 0.95.
        confidence(rise.max(neg.max - 900_000.0).max(1.0).log10(), 5.0, 6.0),
        culprit,
    );
    f.evidence.push(evidence(
        d,
        "dentry.nr_negative",
        Take::Max,
        "count",
        format!("negative dentries (+{rise:.0} over the baseline)"),
    ));
    f.evidence.push(evidence(
        d,
        "dentry.negative_growth_per_s",
        Take::Max,
        "per_second",
        "growth of negative dentries",
    ));
    let slab = d.stats("slab.total_bytes");
    let dent = d.stats("slab.dentry.total_bytes");
    if slab.n > 0 && dent.n > 0 && slab.max > 0.0 {
        f.evidence.push(fact(
            "slab.dentry share",
            dent.max * 100.0 / slab.max,
            "percent",
            format!(
                "dentry cache share of slab ({} of {} MiB)",
                super::mib(dent.max),
                super::mib(slab.max)
            ),
        ));
    }
    for (pid, comm, n) in producers.iter().take(3) {
        f.evidence.push(fact(
            format!("lookups.proc.{pid}.{comm}.enoent_per_s"),
            *n,
            "count",
            format!("failed look-ups by {comm} ({pid}) in the window"),
        ));
    }
    if !patterns.is_empty() {
        let list: Vec<String> = patterns
            .iter()
            .take(5)
            .map(|(p, n)| format!("{p} ({n:.0})"))
            .collect();
        f.evidence.push(fact(
            "lookups.pattern",
            patterns[0].1,
            "samples",
            format!("names that failed, by pattern: {}", list.join(", ")),
        ));
    }
    if d.stats("shrinker.super_cache_scan.freed_per_s").n > 0 {
        f.evidence.push(evidence(
            d,
            "shrinker.super_cache_scan.freed_per_s",
            Take::Sum,
            "objects",
            "dentries and inodes the superblock shrinker freed",
        ));
    }
    f.moved_first = moved_first(
        d,
        &[
            ("dentry.negative_growth_per_s", 1000.0),
            ("shrinker.super_cache_scan.freed_per_s", 1.0),
            ("cpu.sys_pct", 10.0),
        ],
    );
    match (&nss, producers.first()) {
        (Some(lib), Some((_, comm, _))) => {
            f.remediation.push(format!(
                "{comm} runs NSS softokn ({lib}), whose sdb_measureAccess probes non-existent files to time the database directory: set NSS_SDB_USE_CACHE=yes in {comm}'s environment (and make sure nothing sets NSS_SDB_USE_CACHE=no)"
            ));
        }
        (None, Some((_, comm, _))) => {
            f.remediation.push(format!("stop {comm} probing unique non-existent names (the patterns above), or cache the answer"));
        }
        _ => f.remediation.push("find the producer: run the recorder with the lookups tracer (`--syscall-tracers always` attaches it from the start)".into()),
    }
    f.remediation.push("bound the producer's memory cgroup: its dentries are charged to it, so its own reclaim shrinks them before they crowd the host".into());
    f.references = vec![
        "https://bugzilla.mozilla.org/show_bug.cgi?id=1183153",
        "https://docs.kernel.org/filesystems/vfs.html",
    ];
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three baseline samples, then five in the window, with `neg` negative dentries, a
    /// growth of 1/s, and `freed` objects/s freed by the superblock shrinker in the window.
    fn data(neg: f64, freed: f64) -> Data {
        let mut d = Data {
            ts: (0..8).map(|i| i * 1_000_000_000).collect(),
            start: 3,
            ..Default::default()
        };
        for i in 0..8u32 {
            d.push_point("dentry.nr_negative", i, neg);
            d.push_point("dentry.negative_growth_per_s", i, 1.0);
            if i >= 3 {
                d.push_point("shrinker.super_cache_scan.freed_per_s", i, freed);
            }
        }
        d
    }

    #[test]
    fn a_quiet_large_cache_is_not_a_cause() {
        assert!(run(&data(2_486_011.0, 0.0)).is_empty());
        let f = run(&data(2_486_011.0, 5000.0));
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title
                .contains("2486011 negative dentries, shrunk by reclaim"),
            "{}",
            f[0].title
        );
        assert!(run(&data(50_000.0, 5000.0)).is_empty());
    }
}
