//! `memory.direct-reclaim` — allocations that stall because the allocating task must free
//! memory first.
//!
//! **Mechanism.** When free memory is below the zone's `min` watermark (global reclaim) or a
//! memory cgroup is at its limit (memcg reclaim), an allocation runs reclaim itself: it scans
//! LRU lists, writes back or drops page cache, shrinks slab. That is milliseconds to seconds
//! of latency in whatever code happened to allocate. kswapd is meant to keep free memory above
//! `low` so this never happens; it falls behind when allocation bursts outpace it.
//!
//! **Evidence.** The reclaim tracer (`reclaim.stalls_per_s`, `stall_pct`, `stall_max_usec`,
//! per process and per memory cgroup, memcg vs direct), `reclaim.allocstall_per_s`,
//! `pgscan_direct`/`kswapd`, zone free pages over `min`, memory PSI, cgroup usage of its limit,
//! and who grew (RSS growth in the window).
//!
//! **Thresholds.** A finding at >= 5 stalls in the window (from the tracer, else allocstall):
//! one stall is noise, a handful in seconds is a pattern. Confidence by the time stalled
//! (0.5 at 0.1% of the window summed over threads, 0.95 at 5%) or by the count (log scale,
//! 0.95 at 1,000), whichever is higher; at most 0.8 when major faults surge with the stalls,
//! since page-cache thrashing then names the cause better.
//!
//! **Remediation.** memcg: raise the limit or set `memory.high` below it (v2) so the cgroup is
//! throttled before it stalls, protect the latency-critical cgroup with `memory.low`/`min`;
//! global: wake kswapd earlier (`vm.watermark_scale_factor`), keep more free
//! (`vm.min_free_kbytes`).
//!
//! **References.** Documentation/admin-guide/sysctl/vm.rst (watermark_scale_factor,
//! min_free_kbytes); Documentation/admin-guide/cgroup-v2.rst (memory.high, memory.low).

use super::{
    cgroup_culprit, confidence, evidence, fact, finding, mib, moved_first, proc_culprit,
    top_labels, top_procs, Rule, Take,
};
use crate::data::{pid_comm, Data};
use crate::Finding;

/// The rule.
pub const RULE: Rule = Rule {
    id: "memory.direct-reclaim",
    summary: "allocations stalled in direct or memcg reclaim",
    mechanism: true,
    select: &[
        "reclaim.stalls_per_s",
        "reclaim.stall_pct",
        "reclaim.stall_max_usec",
        "reclaim.allocstall_per_s",
        "reclaim.pgmajfault_per_s",
        "reclaim.pgscan_direct_per_s",
        "reclaim.pgscan_kswapd_per_s",
        "reclaim.proc.*.stalls_per_s",
        "reclaim.proc.*.memcg_stalls_per_s",
        "reclaim.proc.*.stall_pct",
        "reclaim.cgroup.*.stalls_per_s",
        "reclaim.cgroup.*.stall_pct",
        "reclaim.cgroup.*.stall_max_usec",
        "psi.memory.some_pct",
        "zone.*.free_over_min",
        "cgroup.*.memory.usage_of_limit_pct",
        "proc.*.rss_bytes",
        "mem.free_bytes",
    ],
    run,
};

fn run(d: &Data) -> Vec<Finding> {
    let traced = d.stats("reclaim.stalls_per_s");
    let allocstall = d.stats("reclaim.allocstall_per_s");
    let stalls = if traced.n > 0 {
        traced.sum
    } else {
        allocstall.sum
    };
    if stalls < 5.0 {
        return Vec::new();
    }
    let who = top_procs(d, "reclaim.proc.", ".stalls_per_s");
    let memcg: f64 = top_procs(d, "reclaim.proc.", ".memcg_stalls_per_s")
        .iter()
        .map(|x| x.2)
        .sum();
    let is_memcg = memcg >= 0.5 * stalls;
    let cgroups = top_labels(d, "reclaim.cgroup.", ".stalls_per_s", |s| s.sum);
    let stall_pct = d.stats("reclaim.stall_pct");
    // By time stalled or by count (log scale: 5 stalls 0.5, 1000 0.95), whichever is higher.
    let mut conf =
        confidence(stall_pct.mean, 0.1, 5.0).max(confidence(stalls.log10(), 5f64.log10(), 3.0));
    // Stalls that come with a working set faulted back are part of page-cache thrashing, which
    // names the cause (memory.pagecache-thrash); here they are the symptom.
    let majflt = d.stats("reclaim.pgmajfault_per_s");
    let thrash = majflt.sum >= 1000.0 && majflt.mean >= 10.0 * majflt.base_median.max(1.0);
    if thrash {
        conf = conf.min(0.8);
    }
    // Who grew: RSS growth over the window, among processes seen.
    let mut growers: Vec<(u32, String, f64)> = d
        .matching("proc.*.rss_bytes")
        .filter_map(|(name, s)| {
            let (pid, comm) = pid_comm(name, "proc.", ".rss_bytes")?;
            let st = d.stats_of(s);
            (st.n >= 2).then(|| (pid, comm.to_string(), st.last - st.first))
        })
        .filter(|g| g.2 > 0.0)
        .collect();
    growers.sort_by(|a, b| b.2.total_cmp(&a.2));
    let limit_cg = cgroups.first().map(|c| c.0.clone());
    let culprit = match (&who.first(), &limit_cg) {
        (Some((pid, comm, _)), _) => proc_culprit(d, *pid, comm),
        (None, Some(cg)) => cgroup_culprit(cg),
        _ => Default::default(),
    };
    let kind = if is_memcg {
        format!(
            "memory-cgroup reclaim at the limit of {}",
            limit_cg.as_deref().unwrap_or("a cgroup")
        )
    } else {
        "global direct reclaim: free memory below the min watermark".to_string()
    };
    let mut f = finding(
        &RULE,
        d,
        format!(
            "{stalls:.0} reclaim stalls ({kind}){}",
            who.first()
                .map(|(p, c, _)| format!(", mostly {c} ({p})"))
                .unwrap_or_default()
        ),
        conf,
        culprit,
    );
    if traced.n > 0 {
        f.evidence.push(evidence(
            d,
            "reclaim.stalls_per_s",
            Take::Sum,
            "stalls",
            "reclaim stalls (tracer: direct + memcg)",
        ));
        f.evidence.push(evidence(
            d,
            "reclaim.stall_max_usec",
            Take::Max,
            "us",
            "longest stall",
        ));
        f.evidence.push(evidence(
            d,
            "reclaim.stall_pct",
            Take::Mean,
            "percent",
            "time stalled, % of the interval summed over threads",
        ));
    }
    f.evidence.push(evidence(
        d,
        "reclaim.allocstall_per_s",
        Take::Sum,
        "stalls",
        "global direct-reclaim entries (vmstat allocstall)",
    ));
    for (pid, comm, n) in who.iter().take(3) {
        f.evidence.push(fact(
            format!("reclaim.proc.{pid}.{comm}.stalls_per_s"),
            *n,
            "stalls",
            format!("stalls of {comm} ({pid})"),
        ));
    }
    for (cg, n) in cgroups.iter().take(2) {
        f.evidence.push(fact(
            format!("reclaim.cgroup.{cg}.stalls_per_s"),
            *n,
            "stalls",
            format!("stalls in memory cgroup {cg}"),
        ));
        let lim = format!("cgroup.{cg}.memory.usage_of_limit_pct");
        if d.stats(&lim).n > 0 {
            f.evidence.push(evidence(
                d,
                &lim,
                Take::Max,
                "percent",
                "its memory usage, % of its limit",
            ));
        }
    }
    if let Some((pid, comm, g)) = growers.first() {
        f.evidence.push(fact(
            format!("proc.{pid}.{comm}.rss_bytes"),
            *g,
            "bytes",
            format!(
                "largest RSS growth in the window: {comm} ({pid}) +{} MiB",
                mib(*g)
            ),
        ));
    }
    if d.stats("psi.memory.some_pct").n > 0 {
        f.evidence.push(evidence(
            d,
            "psi.memory.some_pct",
            Take::Max,
            "percent",
            "memory pressure (PSI some)",
        ));
    }
    let zmin = d
        .matching("zone.*.free_over_min")
        .map(|(n, s)| (n.to_string(), d.stats_of(s)))
        .filter(|(_, s)| s.n > 0)
        .min_by(|a, b| a.1.max.total_cmp(&b.1.max));
    if let Some((z, _)) = &zmin {
        f.evidence.push(evidence(
            d,
            z,
            Take::Max,
            "ratio",
            "free pages over the min watermark (lowest zone)",
        ));
    }
    if thrash {
        f.notes.push(format!(
            "{:.0} major faults came with the stalls: see memory.pagecache-thrash for who evicts whom",
            majflt.sum
        ));
    }
    f.moved_first = moved_first(
        d,
        &[
            ("reclaim.pgscan_kswapd_per_s", 1.0),
            ("reclaim.pgscan_direct_per_s", 1.0),
            ("reclaim.stalls_per_s", 1.0),
            ("psi.memory.some_pct", 1.0),
        ],
    );
    if is_memcg {
        let cg = limit_cg.clone().unwrap_or_else(|| "the cgroup".into());
        f.remediation.push(format!("raise the memory limit of {cg}, or shrink what it caches: it reclaims its own page cache on every burst"));
        f.remediation.push(format!("cgroup v2: set memory.high a little below memory.max on {cg} so the cgroup is throttled and reclaimed in the background before allocations stall"));
        f.remediation.push("protect latency-critical cgroups with memory.low / memory.min (v2) so their pages are reclaimed last".into());
    } else {
        f.remediation.push("wake kswapd earlier: sysctl vm.watermark_scale_factor=200 (default 10; the gap between min, low and high watermarks in 0.01% of memory)".into());
        f.remediation.push(
            "keep more memory free for bursts: raise vm.min_free_kbytes (e.g. to 1% of RAM)".into(),
        );
        f.remediation
            .push("protect latency-critical cgroups with memory.low / memory.min (v2)".into());
    }
    f.references = vec![
        "https://docs.kernel.org/admin-guide/sysctl/vm.html",
        "https://docs.kernel.org/admin-guide/cgroup-v2.html#memory",
    ];
    vec![f]
}
