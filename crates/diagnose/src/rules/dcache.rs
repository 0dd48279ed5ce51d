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
//! grow >= 1,000/s on average: below that the cache is doing its job. Confidence on a log
//! scale: 0.5 at +100k, 0.95 at +1M.
//!
//! A level over 1,000,000 that did not rise counts only when reclaim shrank it in the window:
//! the superblock shrinker freed >= 100,000 dentries and inodes. A large, quiet cache left by
//! an earlier episode costs nothing until reclaim has to walk it, and blaming it for an
//! unrelated window (a CPU-bound control in the lab did exactly that) would hide the real
//! cause. Calls alone are not shrinking: every memory-cgroup reclaim pass calls
//! `super_cache_scan`, and in CI a page-cache thrash whose passes freed nothing was ranked
//! below a 2.76M pile left by an earlier test, "shrunk by reclaim". Such a pile is what
//! reclaim had to walk, not what set it off, so its confidence grows with what was freed
//! (0.5 at 100k) and stays at most 0.6: below a finding whose own signals moved, and below
//! the least confidence of a cause in a chain.
//!
//! **Remediation.** NSS: `NSS_SDB_USE_CACHE=yes` in the producer's environment stops the probe
//! (and `NSS_SDB_USE_CACHE=no` sets it off). Otherwise: fix or cache the probing; bound the
//! producer's cgroup memory (dentries are charged to it, so its reclaim shrinks them).
//!
//! **References.** Red Hat bz1044666 / NSS bug 1183153 (sdb_measureAccess);
//! Documentation/filesystems/vfs.rst (dentry cache).

use jitterscope_model::metrics::{cpu, mem, tracer};
use jitterscope_model::registry::Unit;

use super::lookups::{pattern_fact, uses_softokn, Names};
use super::{
    confidence, fact, finding, moved_first, proc_culprit, rule, top_procs, top_series, ProcSum,
    Take,
};
use crate::data::Data;
use crate::Finding;

/// The superblock shrinker, which frees dentries and inodes.
const SUPER: &[&str] = &["super_cache_scan"];

/// Negative dentries over the baseline from which the cache is bloated, and dentries and
/// inodes the superblock shrinker must free in a window before a standing pile counts as
/// shrunk (chain.rs takes the same to link a pile to the reclaim that freed it). Defined with
/// the rules, as `fs.failing-lookups` leaves a swelling cache to this rule by it.
pub use super::DENTRY_RISE as RISE;

/// A standing pile (no rise) from this size on is worth naming when reclaim shrinks it.
const PILE: f64 = 1_000_000.0;

/// Most confidence of a standing pile: below `chain`'s least confidence of a cause.
const PILE_CONFIDENCE: f64 = 0.6;

rule! {
    "memory.dcache-bloat", "negative dentries from failed look-ups filling slab", mechanism,
    reads: mem::DENTRY_NR_NEGATIVE, mem::DENTRY_NR_DENTRY, mem::DENTRY_NEGATIVE_GROWTH_PER_S,
        mem::SLAB_TOTAL_BYTES, mem::SLAB_CACHE_TOTAL_BYTES["dentry"],
        tracer::LOOKUPS_PROC_ENOENT_PER_S, tracer::LOOKUPS_PATTERN_SAMPLES,
        tracer::SHRINKER_FREED_PER_S["super_cache_scan"],
        tracer::SHRINKER_TIME_PCT["super_cache_scan"], cpu::SYS_PCT,
}

fn run(d: &Data) -> Vec<Finding> {
    let neg = d.stats(&mem::DENTRY_NR_NEGATIVE, &[]);
    if neg.n == 0 {
        return Vec::new();
    }
    let base = if neg.base_n > 0 {
        neg.base_median
    } else {
        neg.first
    };
    let rise = neg.max - base;
    let growth = d.stats(&mem::DENTRY_NEGATIVE_GROWTH_PER_S, &[]);
    let freed = d.stats(&tracer::SHRINKER_FREED_PER_S, SUPER);
    let level_only = rise < RISE && growth.mean < 1000.0;
    if level_only && (neg.max < PILE || freed.sum < RISE) {
        return Vec::new();
    }
    let patterns = top_series(d, &tracer::LOOKUPS_PATTERN_SAMPLES, |s| s.sum);
    // Only names that differ each time leave new negative dentries; the same few names
    // missed again and again hit the ones they left. Beside a busy SQLite (its hot-journal
    // look-ups fail 16k times a second) the prober, with fewer failures, was not named.
    let mut producers: Vec<(ProcSum, Names)> = top_procs(d, &tracer::LOOKUPS_PROC_ENOENT_PER_S)
        .into_iter()
        .map(|p| {
            let names = Names::of(d, &p.comm, &patterns);
            (p, names)
        })
        .collect();
    producers.sort_by_key(|(_, n)| n.repeated);
    let names = producers
        .first()
        .map(|(_, n)| n.patterns.clone())
        .filter(|p| !p.is_empty());
    let producers: Vec<ProcSum> = producers.into_iter().map(|(p, _)| p).collect();
    let culprit = producers
        .first()
        .map(|p| proc_culprit(d, p.pid, &p.comm, super::Res::Memory))
        .unwrap_or_default();
    let nss = producers.first().and_then(|p| uses_softokn(d, p.pid));
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
                format!(
                    "{:.0} negative dentries, reclaim shrinking them ({:.0} dentries and inodes freed)",
                    neg.max, freed.sum
                )
            } else {
                format!("+{rise:.0} negative dentries")
            },
            producers
                .first()
                .map(|p| format!(", {:.0} failed look-ups by {} ({})", p.value, p.comm, p.pid))
                .unwrap_or_default(),
            if nss.is_some() {
                " — NSS softokn's access probe"
            } else {
                ""
            }
        ),
        // Orders of magnitude matter, not the exact count: +100k is 0.5, +1M 0.95.
        if level_only {
            confidence(freed.sum.log10(), 5.0, 6.0).min(PILE_CONFIDENCE)
        } else {
            confidence(rise.max(neg.max - 900_000.0).max(1.0).log10(), 5.0, 6.0)
        },
        culprit,
    );
    f.cite(
        d,
        &mem::DENTRY_NR_NEGATIVE,
        &[],
        Take::Max,
        format!("negative dentries (+{rise:.0} over the baseline)"),
    );
    f.cite(
        d,
        &mem::DENTRY_NEGATIVE_GROWTH_PER_S,
        &[],
        Take::Max,
        "growth of negative dentries",
    );
    let slab = d.stats(&mem::SLAB_TOTAL_BYTES, &[]);
    let dent = d.stats(&mem::SLAB_CACHE_TOTAL_BYTES, &["dentry"]);
    if slab.n > 0 && dent.n > 0 && slab.max > 0.0 {
        f.evidence.push(fact(
            format!(
                "{} share",
                mem::SLAB_CACHE_TOTAL_BYTES.series_name(&["dentry"])
            ),
            dent.max * 100.0 / slab.max,
            Unit::Percent,
            format!(
                "dentry cache share of slab ({} of {} MiB)",
                super::mib(dent.max),
                super::mib(slab.max)
            ),
        ));
    }
    f.cite_procs(&producers, 3, "failed look-ups by", " in the window");
    // The culprit's own names when the recording says which command failed on each.
    f.evidence
        .extend(pattern_fact(names.as_deref().unwrap_or(&patterns)));
    if freed.n > 0 {
        f.cite(
            d,
            &tracer::SHRINKER_FREED_PER_S,
            SUPER,
            Take::Sum,
            "dentries and inodes the superblock shrinker freed",
        );
    }
    f.moved_first = moved_first(
        d,
        &[
            (d.get(&mem::DENTRY_NEGATIVE_GROWTH_PER_S, &[]), 1000.0),
            (d.get(&tracer::SHRINKER_FREED_PER_S, SUPER), 1.0),
            (d.get(&cpu::SYS_PCT, &[]), 10.0),
        ],
    );
    match (&nss, producers.first()) {
        (Some(lib), Some(ProcSum { comm, .. })) => {
            f.remediation.push(format!(
                "{comm} runs NSS softokn ({lib}), whose sdb_measureAccess probes non-existent files to time the database directory: set NSS_SDB_USE_CACHE=yes in {comm}'s environment (and make sure nothing sets NSS_SDB_USE_CACHE=no)"
            ));
        }
        (None, Some(ProcSum { comm, .. })) => {
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
        let mut d = Data::seconds(8, 3);
        for i in 0..8u32 {
            d.push(&mem::DENTRY_NR_NEGATIVE, &[], i, neg);
            d.push(&mem::DENTRY_NEGATIVE_GROWTH_PER_S, &[], i, 1.0);
            if i >= 3 {
                d.push(&tracer::SHRINKER_FREED_PER_S, SUPER, i, freed);
            }
        }
        d
    }

    #[test]
    fn a_quiet_large_cache_is_not_a_cause() {
        assert!(run(&data(2_486_011.0, 0.0)).is_empty());
        // Reclaim passes that call the superblock shrinker and free next to nothing (CI: a
        // page-cache thrash in its memory cgroup, beside a 2.76M pile an earlier test left)
        // do not make the pile a cause.
        let mut d = data(2_759_475.0, 0.0);
        for i in 3..8u32 {
            d.push(&tracer::SHRINKER_TIME_PCT, SUPER, i, 0.4);
        }
        assert!(run(&d).is_empty());
        assert!(run(&data(2_486_011.0, 5000.0)).is_empty());
        assert!(run(&data(50_000.0, 50_000.0)).is_empty());
    }

    #[test]
    fn a_standing_pile_that_reclaim_shrinks_is_named_below_a_cause() {
        let f = run(&data(2_486_011.0, 50_000.0));
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title.contains(
                "2486011 negative dentries, reclaim shrinking them (250000 dentries and inodes freed)"
            ),
            "{}",
            f[0].title
        );
        assert!(f[0].confidence >= 0.5, "{}", f[0].confidence);
        let f = run(&data(2_486_011.0, 2_000_000.0));
        assert_eq!(f[0].confidence, PILE_CONFIDENCE);
    }

    #[test]
    fn a_rise_of_a_million_is_confident() {
        let mut d = data(100_000.0, 0.0);
        for i in 3..8u32 {
            d.push(&mem::DENTRY_NR_NEGATIVE, &[], i, 1_100_000.0);
        }
        let f = run(&d);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].confidence, 0.95, "{}", f[0].title);
        assert!(
            f[0].title.contains("+1000000 negative dentries"),
            "{}",
            f[0].title
        );
    }

    /// `lab check negative-dentry --beside soak`: the soak's SQLite fails its journal's one
    /// name more often than the prober fails its unique ones, while negative dentries rise.
    #[test]
    fn the_producer_of_varying_names_is_named_over_one_repeating_a_name() {
        let mut d = data(100_000.0, 0.0);
        for i in 3..8u32 {
            d.push(
                &mem::DENTRY_NR_NEGATIVE,
                &[],
                i,
                100_000.0 + 60_000.0 * i as f64,
            );
            for (pid, comm, v, pat, n) in [
                (20, "lab-sqlite", 16_000.0, "/srv/db.sqlite-journal", 40.0),
                (
                    30,
                    "lab-nss-probe",
                    9_000.0,
                    "/var/tmp/x/.*_dbaccess.tmp",
                    20.0,
                ),
            ] {
                d.push(
                    &tracer::LOOKUPS_PROC_ENOENT_PER_S,
                    &[&pid.to_string(), comm],
                    i,
                    v,
                );
                d.push(&tracer::LOOKUPS_PATTERN_SAMPLES, &[pat], i, n);
            }
        }
        let comms = |c: &str| std::collections::BTreeSet::from([c.to_string()]);
        d.lookup_comms
            .insert("/srv/db.sqlite-journal".into(), comms("lab-sqlite"));
        d.lookup_comms
            .insert("/var/tmp/x/.*_dbaccess.tmp".into(), comms("lab-nss-probe"));
        let f = run(&d);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].culprit.comm.as_deref(), Some("lab-nss-probe"), "{f:?}");
        assert!(
            f[0].title.contains("by lab-nss-probe (30)"),
            "{}",
            f[0].title
        );
        let names = f[0]
            .evidence
            .iter()
            .find(|e| e.signal == "lookups.pattern")
            .unwrap();
        assert!(names.note.contains("_dbaccess"), "{}", names.note);
        assert!(!names.note.contains("sqlite"), "{}", names.note);
        // Without the command names of each pattern (older recordings): the most failures.
        d.lookup_comms.clear();
        assert_eq!(run(&d)[0].culprit.comm.as_deref(), Some("lab-sqlite"));
    }
}
