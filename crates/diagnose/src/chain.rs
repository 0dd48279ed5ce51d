//! Cause chains: which findings of a report set off which.
//!
//! Several rules often fire on one incident, and all of them are true: a streaming reader
//! thrashes the page cache, and the allocations of its cgroup stall in reclaim; a leak fills
//! its cgroup, reclaim runs, and the OOM killer ends it. An operator acts on the root. A link
//! is made only where the kernel's mechanism is known to lead from one to the other
//! ([`CONSEQUENCES`]) *and* this incident shows it:
//!
//! - **a shared actor**: the same process is culprit of both, or named in the other's
//!   evidence (the leaking process stalls in reclaim; the OOM victim is the leaking process);
//!   or the same cgroup (the thrash's reader and the stalls are in one memory cgroup);
//! - **the order**: when both rules know when their mechanism started, the cause did not start
//!   after the consequence (a little slack for sampling).
//!
//! - **a confident cause**: at least 0.7; a weak finding does not become the root of a
//!   confident one, unless the data show the mechanism itself (the reader is the task that
//!   stalled, and its anonymous memory stayed flat: it stalled allocating page cache).
//!
//! Without a shared actor there is no link, however plausible: two findings on one host stay
//! separate. The report then lists each root, followed by what it caused.

use std::fmt::Write;

use jitterscope_model::metrics::{process, tracer};

use crate::data::Data;
use crate::rules::{
    cfs, dcache, dirty, leak, memhigh, mmaplock, oom, pagecache, reclaim, runqueue, saturation,
    shrinker, swapin, tlb, Rule,
};
use crate::{Finding, Link};

/// The series the links read besides the rules' (a link's direct evidence). Without them
/// loaded, the minor-fault test of thrash → reclaim saw no values and let every flat RSS
/// through.
pub const READS: &[jitterscope_model::registry::Sel] = crate::rules::sels! {
    process::PROC_ANON_BYTES, process::PROC_MINFLT_PER_S,
    tracer::SHRINKER_FREED_PER_S["super_cache_scan"],
};

/// Cause rule, consequence rule, and how the first leads to the second. By handle: a rule
/// renamed or removed is a compile error here, not a link that silently never forms.
pub const CONSEQUENCES: &[(&Rule, &Rule, &str)] = &[
    (
        &leak::RULE,
        &oom::RULE,
        "a process that keeps growing ends at its cgroup's limit or the host's memory, where the OOM killer stops it",
    ),
    (
        &reclaim::RULE,
        &oom::RULE,
        "reclaim that cannot free enough for an allocation ends in the OOM killer",
    ),
    (
        &leak::RULE,
        &reclaim::RULE,
        "a growing process fills memory (or its cgroup) until allocations must reclaim first",
    ),
    (
        &leak::RULE,
        &pagecache::RULE,
        "a growing process takes the room of the file pages in its cgroup (or the host), its own program and libraries among them: they are evicted and read back, and the refaults are the growth's cost",
    ),
    (
        &pagecache::RULE,
        &reclaim::RULE,
        "a streaming reader fills the page cache of its cgroup (or the host), so allocations there must evict it first: the stalls are the thrash's cost",
    ),
    (
        &dcache::RULE,
        &reclaim::RULE,
        "negative dentries are slab charged to the cgroup of the process that looked the names up: they fill it (or the host) until allocations must reclaim, and each reclaim pass shrinks them first",
    ),
    (
        &dcache::RULE,
        &shrinker::RULE,
        "millions of negative dentries make every reclaim pass walk and free them through the superblock shrinker",
    ),
    (
        &dcache::RULE,
        &saturation::RULE,
        "walking and freeing the bloated dentry cache is kernel CPU time",
    ),
    (
        &shrinker::RULE,
        &saturation::RULE,
        "shrinker calls out of proportion to what they free are kernel CPU time",
    ),
    (
        &tlb::RULE,
        &saturation::RULE,
        "every shootdown interrupts the other CPUs running the process: kernel CPU time",
    ),
    (
        &tlb::RULE,
        &mmaplock::RULE,
        "munmap and madvise hold the process's mmap_lock while they wait for the shootdown IPIs to be answered, so every shootdown lengthens the hold the other threads sleep out",
    ),
    (
        &dirty::RULE,
        &reclaim::RULE,
        "dirty pages and pages under writeback cannot be reclaimed until the disk has them: a writer's cgroup filled with them makes its allocations reclaim slowly, waiting on the writeback it is throttled for",
    ),
    (
        &cfs::RULE,
        &runqueue::RULE,
        "a throttled cgroup's threads wait, runnable, for the next CFS period",
    ),
    (
        &memhigh::RULE,
        &reclaim::RULE,
        "a cgroup over its memory.high makes each of its tasks reclaim from it on the way back to user space: those are its memcg reclaim stalls, before the penalty sleep",
    ),
    (
        &swapin::RULE,
        &reclaim::RULE,
        "a working set larger than the memory it may use: each page swapped back in needs a free page, which reclaim frees by swapping another out, so the stalls are the swap storm's cost",
    ),
    (
        &leak::RULE,
        &swapin::RULE,
        "a growing process takes the room of other processes' anonymous memory, which is swapped out and faulted back in",
    ),
    (
        &leak::RULE,
        &memhigh::RULE,
        "a growing process takes its cgroup over memory.high, where it is throttled rather than killed: the leak shows as slowness",
    ),
];

/// Least confidence of a cause: a weak finding (files re-read by their own reader, nobody
/// else harmed) is not promoted to the root of a confident one.
const MIN_CAUSE_CONFIDENCE: f64 = 0.7;

/// Slack in the order test: onsets are found on one-second samples.
const ORDER_SLACK_NS: i64 = 2_000_000_000;

/// How much later than its consequence a cause's own signal may begin. A thrash is seen by its
/// refaults, and a page can only be read back after it was evicted: at a cgroup's limit the
/// evictions are the reclaim that stalls, so the stalls lead the refaults by the time the cache
/// takes to fill and the victim to come back to its file. two-incidents beside the soak had
/// the stalls 2.0004 s before the refaults, and the order test took the stalls for a root of
/// their own, ranked above the thrash.
fn order_slack(cause: &Finding, effect: &Finding) -> i64 {
    if cause.is(&pagecache::RULE) && effect.is(&reclaim::RULE) {
        3 * ORDER_SLACK_NS
    } else {
        ORDER_SLACK_NS
    }
}

/// What two findings share: a process or a cgroup named by both.
fn shared(cause: &Finding, effect: &Finding) -> Option<String> {
    let cites = |f: &Finding, about: &dyn Fn(&crate::SeriesRef) -> bool| {
        f.evidence
            .iter()
            .any(|e| e.source.as_ref().is_some_and(about))
    };
    for (a, b) in [(cause, effect), (effect, cause)] {
        if let (Some(pid), Some(comm)) = (a.culprit.pid, a.culprit.comm.as_deref()) {
            if b.culprit.pid == Some(pid) {
                return Some(format!("both name {comm} ({pid})"));
            }
            if cites(b, &|s| s.is_process(pid, comm)) {
                return Some(format!(
                    "{comm} ({pid}), the culprit of {}, is in the evidence of {}",
                    a.rule_id, b.rule_id
                ));
            }
        }
    }
    for (a, b) in [(cause, effect), (effect, cause)] {
        let Some(cg) = a.culprit.cgroup.as_deref().filter(|c| *c != "/") else {
            continue;
        };
        if b.culprit.cgroup.as_deref() == Some(cg) {
            return Some(format!("both in cgroup {cg}"));
        }
        // A limit reaches every cgroup below it: a pod's thrash and its container's stalls.
        if let Some(sub) = b
            .culprit
            .cgroup
            .as_deref()
            .filter(|b| *b != cg && within(b, cg))
        {
            return Some(format!("{sub} is inside {cg}"));
        }
        if cites(b, &|s| s.label("cgroup") == Some(cg)) {
            return Some(format!(
                "cgroup {cg}, the culprit's of {}, is in the evidence of {}",
                a.rule_id, b.rule_id
            ));
        }
    }
    None
}

/// Whether cgroup path `p` is `cg` or below it.
fn within(p: &str, cg: &str) -> bool {
    crate::rules::pagecache::within(p, cg)
}

/// Whether the cause can reach where the consequence happened: its own cgroup, one above or
/// below it, or the host. Two incidents in unrelated cgroups stay two roots, whatever they
/// name in common in their evidence (a process culprit of both is one place, whatever its
/// cgroups in two v1 hierarchies read).
fn reaches(cause: &Finding, effect: &Finding) -> bool {
    if cause.culprit.pid.is_some() && cause.culprit.pid == effect.culprit.pid {
        return true;
    }
    match (
        cause.culprit.cgroup.as_deref().filter(|c| *c != "/"),
        effect.culprit.cgroup.as_deref().filter(|c| *c != "/"),
    ) {
        (Some(a), Some(b)) => within(a, b) || within(b, a),
        _ => true,
    }
}

/// Direct evidence of the mechanism between two findings, from the data, which makes a cause
/// below [`MIN_CAUSE_CONFIDENCE`] a cause all the same. In both, the task that stalled is the
/// cause's culprit, and:
/// - page-cache thrash → reclaim: its anonymous memory stayed flat, so what it allocated (and
///   stalled for) was page cache for its reads, not memory of its own;
/// - dentry bloat → reclaim: the superblock shrinker freed at least [`dcache::RISE`] dentries
///   and inodes meanwhile, so the reclaim it stalled in was shrinking the cache it had filled.
///   Its confidence grows with the order of magnitude of the pile (0.64 at +200k), and a
///   smaller pile charged to a tight cgroup sets off reclaim all the same (the lab's
///   negative-dentry at its default 30 s had reclaim ranked first, 0.74, its cause second).
fn direct_evidence(d: &Data, cause: &Finding, effect: &Finding) -> Option<String> {
    if !effect.is(&reclaim::RULE) {
        return None;
    }
    let (pid, comm) = (cause.culprit.pid?, cause.culprit.comm.as_deref()?);
    if effect.culprit.pid != Some(pid) {
        return None;
    }
    if cause.is(&pagecache::RULE) {
        flat_anon(d, pid, comm)
    } else if cause.is(&dcache::RULE) {
        let freed = d.stats(&tracer::SHRINKER_FREED_PER_S, &["super_cache_scan"]);
        (freed.sum >= dcache::RISE).then(|| {
            format!(
                "{comm} ({pid}) both made the negative dentries and stalled in reclaim, while the superblock shrinker freed {:.0} dentries and inodes",
                freed.sum
            )
        })
    } else {
        None
    }
}

/// The reader stalled allocating page cache: its anonymous memory was flat over the window,
/// and it took few minor faults. Both are needed: a burst of anonymous memory that is mapped,
/// touched and unmapped between two samples leaves RSS flat at every sample (the lab's
/// reclaim-storm, three 128 MiB bursts a second, read as flat in one run of two), but each of
/// its pages is a minor fault, and `read()` allocates page cache without faulting.
fn flat_anon(d: &Data, pid: u32, comm: &str) -> Option<String> {
    let labels = [pid.to_string(), comm.to_string()];
    let labels = [labels[0].as_str(), labels[1].as_str()];
    let anon = d.get(&process::PROC_ANON_BYTES, &labels)?;
    let start = d.start as u32;
    let vals: Vec<f64> = anon
        .points
        .iter()
        .filter(|(i, _)| *i >= start)
        .map(|p| p.1)
        .collect();
    let (lo, hi) = vals
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
    // Evidence is what was measured: a process seen in a sample or two, or whose fault counts
    // are missing, shows nothing flat (CI once linked reclaim-storm's bursts to a thrash on
    // "0 minor faults a second" that were no values at all).
    let minflt = d.stats(&process::PROC_MINFLT_PER_S, &labels);
    if vals.len() < MIN_POINTS || minflt.n + 1 < MIN_POINTS {
        return None;
    }
    if hi - lo >= FLAT_ANON_BYTES || minflt.mean > FLAT_MINFLT_PER_S {
        return None;
    }
    Some(format!(
        "{comm} ({pid}) both read and stalled, with its anonymous memory flat (within {} MiB) and {:.0} minor faults a second: it stalled allocating page cache for its reads",
        crate::rules::mib(hi - lo).max(0.1),
        minflt.mean
    ))
}

/// Samples of a process in the window before its memory can be called flat: a rate needs two
/// samples, so `MIN_POINTS - 1` rates.
const MIN_POINTS: usize = 3;

/// Anonymous memory that moved less than this over the window is flat.
const FLAT_ANON_BYTES: f64 = 16.0 * 1_048_576.0;

/// Minor faults per second (mean over the window) above which a process is allocating
/// anonymous memory: 1 MiB/s of 4 KiB pages.
const FLAT_MINFLT_PER_S: f64 = 256.0;

/// Why `cause` set `effect` off, when the report shows it.
fn reason(d: &Data, cause: &Finding, effect: &Finding) -> Option<String> {
    let (_, _, how) = CONSEQUENCES
        .iter()
        .find(|(c, e, _)| cause.is(c) && effect.is(e))?;
    let direct = direct_evidence(d, cause, effect);
    if cause.confidence < MIN_CAUSE_CONFIDENCE && direct.is_none() {
        return None;
    }
    if !reaches(cause, effect) {
        return None;
    }
    let actor = shared(cause, effect)?;
    let mut r = format!("{how}; {}", direct.unwrap_or(actor));
    if let (Some(a), Some(b)) = (cause.onset, effect.onset) {
        if a > b + order_slack(cause, effect) {
            return None;
        }
        if a <= b + ORDER_SLACK_NS {
            let _ = write!(
                r,
                "; {} started {:.0} s before {}",
                cause.rule_id,
                (b - a).max(0) as f64 / 1e9,
                effect.rule_id
            );
        } else {
            let _ = write!(
                r,
                "; {} was seen {:.0} s before {}, whose own signal follows it",
                effect.rule_id,
                (a - b) as f64 / 1e9,
                cause.rule_id
            );
        }
    }
    Some(r)
}

/// Links the findings (ranked: mechanisms first, each tier by confidence) and reorders them so
/// that each root comes first, followed by the findings it caused, depth first; the links are
/// by place in the returned list.
pub fn link(d: &Data, findings: Vec<Finding>) -> Vec<Finding> {
    let n = findings.len();
    // edges[i]: (j, reason) with i causing j.
    let mut edges: Vec<Vec<(usize, String)>> = vec![Vec::new(); n];
    let mut has_cause = vec![false; n];
    for i in 0..n {
        for j in 0..n {
            if i == j {
                continue;
            }
            // One link per pair, and none back (a chain is a tree, never a cycle).
            if edges[j].iter().any(|(k, _)| *k == i) {
                continue;
            }
            if let Some(r) = reason(d, &findings[i], &findings[j]) {
                edges[i].push((j, r));
                has_cause[j] = true;
            }
        }
    }
    // Each cause's consequences in the order they started (leak, then reclaim, then the kill).
    for es in edges.iter_mut() {
        es.sort_by_key(|(j, _)| (findings[*j].onset.unwrap_or(i64::MAX), *j));
    }
    // Roots in rank order, each followed by its consequences.
    let mut order = Vec::with_capacity(n);
    let mut placed = vec![false; n];
    fn visit(
        i: usize,
        edges: &[Vec<(usize, String)>],
        placed: &mut [bool],
        order: &mut Vec<usize>,
    ) {
        if placed[i] {
            return;
        }
        placed[i] = true;
        order.push(i);
        for (j, _) in &edges[i] {
            visit(*j, edges, placed, order);
        }
    }
    // A chain takes the place of its best-ranked member: the root moves up to where its
    // consequence ranked, never the consequence down.
    fn best(i: usize, edges: &[Vec<(usize, String)>], seen: &mut [bool]) -> usize {
        if seen[i] {
            return usize::MAX;
        }
        seen[i] = true;
        edges[i]
            .iter()
            .map(|(j, _)| best(*j, edges, seen))
            .fold(i, usize::min)
    }
    let mut roots: Vec<(usize, usize)> = (0..n)
        .filter(|&i| !has_cause[i])
        .map(|i| (best(i, &edges, &mut vec![false; n]), i))
        .collect();
    roots.sort();
    for (_, i) in roots {
        visit(i, &edges, &mut placed, &mut order);
    }
    // A cycle's members have causes but no root: keep them in rank order.
    for i in 0..n {
        visit(i, &edges, &mut placed, &mut order);
    }
    let mut pos = vec![0; n];
    for (p, &i) in order.iter().enumerate() {
        pos[i] = p;
    }
    let ids: Vec<&'static str> = findings.iter().map(|f| f.rule_id).collect();
    let mut slots: Vec<Option<Finding>> = findings.into_iter().map(Some).collect();
    let mut out: Vec<Finding> = order.iter().map(|&i| slots[i].take().unwrap()).collect();
    for (i, es) in edges.into_iter().enumerate() {
        for (j, r) in es {
            out[pos[i]].causes.push(Link {
                finding: pos[j] + 1,
                rule_id: ids[j],
                reason: r.clone(),
            });
            out[pos[j]].caused_by.push(Link {
                finding: pos[i] + 1,
                rule_id: ids[i],
                reason: r,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Culprit, Evidence, Span};

    fn f(rule_id: &'static str, pid: Option<u32>, cgroup: Option<&str>, onset: i64) -> Finding {
        Finding {
            rule_id,
            title: rule_id.into(),
            confidence: 0.9,
            mechanism: true,
            window: Span {
                from: String::new(),
                to: String::new(),
            },
            culprit: Culprit {
                pid,
                comm: pid.map(|_| "app".into()),
                cgroup: cgroup.map(str::to_string),
                ..Default::default()
            },
            evidence: Vec::new(),
            moved_first: Vec::new(),
            remediation: Vec::new(),
            notes: Vec::new(),
            references: Vec::new(),
            causes: Vec::new(),
            caused_by: Vec::new(),
            onset: Some(onset),
        }
    }

    #[test]
    fn the_root_comes_first_with_its_consequences_under_it() {
        // Ranked by confidence the stalls came first; the thrash caused them.
        let reclaim = f(
            "memory.direct-reclaim",
            Some(7),
            Some("/lab"),
            3_000_000_000,
        );
        let thrash = f("memory.pagecache-thrash", Some(7), Some("/lab"), 0);
        let other = f("cpu.cfs-throttling", None, Some("/else"), 0);
        let out = link(&Data::default(), vec![reclaim, other, thrash]);
        let ids: Vec<&str> = out.iter().map(|f| f.rule_id).collect();
        assert_eq!(
            ids,
            [
                "memory.pagecache-thrash",
                "memory.direct-reclaim",
                "cpu.cfs-throttling"
            ]
        );
        assert_eq!(out[0].causes.len(), 1);
        assert_eq!(out[0].causes[0].finding, 2);
        assert_eq!(out[1].caused_by[0].finding, 1);
        assert!(out[1].caused_by[0].reason.contains("both name app (7)"));
        assert!(out[1].caused_by[0].reason.contains("3 s before"));
        assert!(out[2].causes.is_empty() && out[2].caused_by.is_empty());
    }

    /// two-incidents beside the soak: the limited cgroup's stalls were seen 2.0004 s before its
    /// refaults, since a page is read back only after the reclaim evicted it.
    #[test]
    fn a_thrash_is_the_cause_of_stalls_seen_before_its_refaults() {
        let reclaim = f(
            "memory.direct-reclaim",
            Some(7),
            Some("/lab"),
            6_106_000_000,
        );
        let thrash = f(
            "memory.pagecache-thrash",
            Some(8),
            Some("/lab"),
            8_106_400_000,
        );
        let out = link(&Data::default(), vec![reclaim.clone(), thrash.clone()]);
        assert_eq!(out[0].rule_id, "memory.pagecache-thrash");
        let why = &out[1].caused_by[0].reason;
        assert!(why.contains("both in cgroup /lab"), "{why}");
        assert!(why.contains("direct-reclaim was seen 2 s before"), "{why}");
        // Not for ever: a thrash that began well after the stalls did not cause them.
        let late = f(
            "memory.pagecache-thrash",
            Some(8),
            Some("/lab"),
            20_000_000_000,
        );
        let out = link(&Data::default(), vec![reclaim.clone(), late]);
        assert!(out.iter().all(|f| f.causes.is_empty()));
        // Nor for other pairs: throttling's own signal does not lag the waits it causes.
        let throttled = f("cpu.cfs-throttling", None, Some("/lab"), 8_106_400_000);
        let waits = f("sched.runqueue-latency", None, Some("/lab"), 6_106_000_000);
        let out = link(&Data::default(), vec![waits, throttled]);
        assert!(out.iter().all(|f| f.causes.is_empty()));
    }

    #[test]
    fn no_link_is_invented() {
        // Different processes and cgroups: a known consequence, but nothing shows it here.
        let out = link(
            &Data::default(),
            vec![
                f("memory.direct-reclaim", Some(7), Some("/a"), 0),
                f("memory.pagecache-thrash", Some(8), Some("/b"), 0),
            ],
        );
        assert!(out
            .iter()
            .all(|f| f.causes.is_empty() && f.caused_by.is_empty()));
        // A cause that started well after its supposed consequence is not its cause.
        let out = link(
            &Data::default(),
            vec![
                f("memory.direct-reclaim", Some(7), None, 0),
                f("memory.pagecache-thrash", Some(7), None, 10_000_000_000),
            ],
        );
        assert!(out.iter().all(|f| f.causes.is_empty()));
        // The root cgroup is shared by everything: it is no evidence.
        let out = link(
            &Data::default(),
            vec![
                f("memory.direct-reclaim", None, Some("/"), 0),
                f("memory.pagecache-thrash", None, Some("/"), 0),
            ],
        );
        assert!(out.iter().all(|f| f.causes.is_empty()));
    }

    /// Issue 18's case: the thrash's confidence is low (the victim re-read with read(), no
    /// major faults), but the reader is the task that stalled, for page cache.
    #[test]
    fn a_weak_thrash_is_the_cause_when_the_reader_stalled_for_page_cache() {
        let mut d = Data::seconds(10, 2);
        for i in 0..10 {
            d.push(
                &process::PROC_ANON_BYTES,
                &["7", "app"],
                i,
                4e6 + f64::from(i),
            );
        }
        let mut thrash = f("memory.pagecache-thrash", Some(7), None, 0);
        thrash.confidence = 0.6;
        let reclaim = f("memory.direct-reclaim", Some(7), None, 1_000_000_000);
        // Its fault counts unknown: flat RSS alone is not shown to be page cache.
        let out = link(&d, vec![reclaim.clone(), thrash.clone()]);
        assert!(out.iter().all(|f| f.causes.is_empty()));
        for i in 1..10 {
            d.push(&process::PROC_MINFLT_PER_S, &["7", "app"], i, 3.0);
        }
        let out = link(&d, vec![reclaim.clone(), thrash.clone()]);
        assert_eq!(out[0].rule_id, "memory.pagecache-thrash");
        assert!(
            out[0].causes[0].reason.contains("anonymous memory flat"),
            "{:?}",
            out[0].causes
        );
        // The same process allocating anonymous memory as it stalls: its own allocations
        // stalled, not the stream's page cache.
        let mut d = Data::seconds(10, 2);
        for i in 0..10 {
            d.push(
                &process::PROC_ANON_BYTES,
                &["7", "app"],
                i,
                f64::from(i % 2) * 128e6,
            );
        }
        let out = link(&d, vec![reclaim.clone(), thrash.clone()]);
        assert!(out.iter().all(|f| f.causes.is_empty()));
        // Flat at every sample, but faulting in 100k pages a second: bursts of anonymous
        // memory mapped and unmapped between samples (the lab's reclaim-storm).
        let mut d = Data::seconds(10, 2);
        for i in 0..10 {
            d.push(&process::PROC_ANON_BYTES, &["7", "app"], i, 4e6);
            d.push(&process::PROC_MINFLT_PER_S, &["7", "app"], i, 100_000.0);
        }
        let out = link(&d, vec![reclaim, thrash]);
        assert!(out.iter().all(|f| f.causes.is_empty()));
    }

    /// The lab's negative-dentry at its default length: +200k negative dentries (0.64) by the
    /// process that then stalled in reclaim (0.74) while the superblock shrinker freed them.
    #[test]
    fn a_weak_dentry_pile_is_the_cause_when_reclaim_shrank_it_under_its_maker() {
        let freeing = |per_s: f64| {
            let mut d = Data::seconds(10, 2);
            for i in 0..10 {
                d.push(
                    &tracer::SHRINKER_FREED_PER_S,
                    &["super_cache_scan"],
                    i,
                    per_s,
                );
            }
            d
        };
        let mut pile = f("memory.dcache-bloat", Some(7), None, 0);
        pile.confidence = 0.64;
        let mut reclaim = f("memory.direct-reclaim", Some(7), None, 0);
        reclaim.confidence = 0.74;
        let out = link(&freeing(60_000.0), vec![reclaim.clone(), pile.clone()]);
        assert_eq!(out[0].rule_id, "memory.dcache-bloat");
        assert!(
            out[0].causes[0].reason.contains("freed 480000 dentries"),
            "{:?}",
            out[0].causes
        );
        // Reclaim that freed (almost) no dentries did not work on the pile.
        let out = link(&freeing(100.0), vec![reclaim.clone(), pile.clone()]);
        assert_eq!(out[0].rule_id, "memory.direct-reclaim");
        assert!(out.iter().all(|f| f.causes.is_empty()));
        // Another process stalled: nothing shows the pile made it stall.
        reclaim.culprit.pid = Some(8);
        let out = link(&freeing(60_000.0), vec![reclaim, pile]);
        assert!(out.iter().all(|f| f.causes.is_empty()));
    }

    /// A leak at its cgroup's limit evicts its own program's pages, which it faults back: the
    /// thrash (0.85 in the lab's oom-leak on a cold page cache) is the leak's consequence, not
    /// the root.
    #[test]
    fn a_leak_is_the_root_of_the_thrash_it_squeezes_out() {
        let mut leak = f("memory.leak", Some(7), Some("/lab"), 0);
        leak.confidence = 0.72;
        let mut thrash = f(
            "memory.pagecache-thrash",
            Some(7),
            Some("/lab"),
            7_000_000_000,
        );
        thrash.confidence = 0.85;
        let out = link(&Data::default(), vec![thrash, leak]);
        let ids: Vec<&str> = out.iter().map(|f| f.rule_id).collect();
        assert_eq!(ids, ["memory.leak", "memory.pagecache-thrash"]);
        assert!(out[0].causes[0]
            .reason
            .contains("the refaults are the growth's cost"));
    }

    #[test]
    fn a_leak_that_ends_in_an_oom_kill_through_reclaim() {
        let mut reclaim = f(
            "memory.direct-reclaim",
            Some(9),
            Some("/lab"),
            2_000_000_000,
        );
        reclaim.evidence.push(Evidence {
            signal: "reclaim.proc.5.app.stalls_total".into(),
            series: Some("reclaim.proc.5.app.stalls_per_s".into()),
            source: Some(crate::SeriesRef {
                def: &jitterscope_model::metrics::tracer::RECLAIM_PROC_STALLS_PER_S,
                labels: vec!["5".into(), "app".into()],
            }),
            value: 1.0,
            stat: "total",
            over_s: None,
            baseline: None,
            unit: jitterscope_model::registry::Unit::Count,
            note: String::new(),
        });
        let out = link(
            &Data::default(),
            vec![
                f("memory.oom-kill", Some(5), Some("/lab"), 5_000_000_000),
                reclaim,
                f("memory.leak", Some(5), Some("/lab"), 0),
            ],
        );
        let ids: Vec<&str> = out.iter().map(|f| f.rule_id).collect();
        assert_eq!(
            ids,
            ["memory.leak", "memory.direct-reclaim", "memory.oom-kill"]
        );
        assert_eq!(out[0].causes.len(), 2, "{:?}", out[0].causes);
        let oom = out.iter().find(|f| f.rule_id == "memory.oom-kill").unwrap();
        assert_eq!(oom.caused_by.len(), 2);
    }
}
