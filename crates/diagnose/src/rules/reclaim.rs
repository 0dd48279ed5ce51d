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

use jitterscope_model::metrics::{cgroup, mem, process, psi, tracer};

use super::{
    cgroup_culprit, confidence, finding, mib, moved_first, proc_culprit, rule, series_fact,
    top_procs, top_series, Take,
};
use crate::data::Data;
use crate::Finding;

rule! {
    "memory.direct-reclaim", "allocations stalled in direct or memcg reclaim", mechanism,
    reads: tracer::RECLAIM_STALLS_PER_S, tracer::RECLAIM_STALL_PCT,
        tracer::RECLAIM_STALL_MAX_USEC, mem::RECLAIM_ALLOCSTALL_PER_S,
        mem::RECLAIM_PGMAJFAULT_PER_S, mem::RECLAIM_PGSCAN_DIRECT_PER_S,
        mem::RECLAIM_PGSCAN_KSWAPD_PER_S, tracer::RECLAIM_PROC_STALLS_PER_S,
        tracer::RECLAIM_PROC_MEMCG_STALLS_PER_S, tracer::RECLAIM_PROC_STALL_PCT,
        tracer::RECLAIM_CGROUP_STALLS_PER_S, tracer::RECLAIM_CGROUP_STALL_PCT,
        tracer::RECLAIM_CGROUP_STALL_MAX_USEC, psi::SOME_PCT["memory"], mem::ZONE_FREE_OVER_MIN,
        cgroup::MEMORY_USAGE_OF_LIMIT_PCT, cgroup::MEMORY_HIGH_BYTES, cgroup::MEMORY_USAGE_BYTES,
        process::PROC_RSS_BYTES, mem::FREE_BYTES, cgroup::MEMORY_REFAULT_FILE_PER_S,
}

fn run(d: &Data) -> Vec<Finding> {
    let traced = d.stats(&tracer::RECLAIM_STALLS_PER_S, &[]);
    let allocstall = d.stats(&mem::RECLAIM_ALLOCSTALL_PER_S, &[]);
    let stalls = if traced.n > 0 {
        traced.sum
    } else {
        allocstall.sum
    };
    if stalls < 5.0 {
        return Vec::new();
    }
    let who = top_procs(d, &tracer::RECLAIM_PROC_STALLS_PER_S);
    let memcg: f64 = top_procs(d, &tracer::RECLAIM_PROC_MEMCG_STALLS_PER_S)
        .iter()
        .map(|x| x.value)
        .sum();
    let is_memcg = memcg >= 0.5 * stalls;
    let cgroups = top_series(d, &tracer::RECLAIM_CGROUP_STALLS_PER_S, |s| s.sum);
    let stall_pct = d.stats(&tracer::RECLAIM_STALL_PCT, &[]);
    // By time stalled or by count (log scale: 5 stalls 0.5, 1000 0.95), whichever is higher.
    let mut conf =
        confidence(stall_pct.mean, 0.1, 5.0).max(confidence(stalls.log10(), 5f64.log10(), 3.0));
    // Stalls that come with a working set faulted back are part of page-cache thrashing, which
    // names the cause (memory.pagecache-thrash); here they are the symptom.
    let majflt = d.stats(&mem::RECLAIM_PGMAJFAULT_PER_S, &[]);
    let thrash = majflt.sum >= 1000.0 && majflt.mean >= 10.0 * majflt.base_median.max(1.0);
    // Or the stalled cgroup's own file pages come back as refaults: said, and left to the
    // chain to rank (a thrash at the limit with a victim re-reading is the stalls' cause;
    // one process re-reading its own file between its allocations is not).
    let cg_refaults = cgroups
        .first()
        .map(|(s, _)| d.stats(&cgroup::MEMORY_REFAULT_FILE_PER_S, &[s.label(0)]));
    let cg_thrash = cg_refaults.as_ref().is_some_and(|r| {
        r.sum >= 10_000.0
            && r.mean
                >= 10.0
                    * if r.base_n > 0 {
                        r.base_median.max(1.0)
                    } else {
                        1.0
                    }
    });
    if thrash {
        conf = conf.min(0.8);
    }
    // Who grew: RSS growth over the window, among processes seen.
    let mut growers: Vec<(&crate::data::Series, f64)> = d
        .each(&process::PROC_RSS_BYTES)
        .filter_map(|s| {
            let st = d.stats_of(s);
            (st.n >= 2).then_some((s, st.last - st.first))
        })
        .filter(|g| g.1 > 0.0)
        .collect();
    growers.sort_by(|a, b| b.1.total_cmp(&a.1));
    let limit_cg = cgroups.first().map(|c| c.0.label(0).to_string());
    let culprit = match (&who.first(), &limit_cg) {
        (Some(p), _) => proc_culprit(d, p.pid, &p.comm, super::Res::Memory),
        (None, Some(cg)) => cgroup_culprit(d, cg),
        _ => Default::default(),
    };
    // Memcg reclaim by tasks of a cgroup that is nowhere near a limit is not an allocation
    // stalled at its limit: a task reclaims on purpose (writing memory.reclaim, as proactive
    // reclaimers do, and shrinker-scale on 5.19+) or for an ancestor. Its time is real, but it
    // is the reclaimer's own work and it ranks below what it causes: the kernel matrix's 6.1
    // guest put it over the shrinker cost of shrinker-scale's memory.reclaim rounds.
    let near_limit = |cg: &str| {
        let of_limit = d.stats(&cgroup::MEMORY_USAGE_OF_LIMIT_PCT, &[cg]);
        let high = d.stats(&cgroup::MEMORY_HIGH_BYTES, &[cg]);
        let usage = d.stats(&cgroup::MEMORY_USAGE_BYTES, &[cg]);
        (of_limit.n > 0 && of_limit.max >= 80.0)
            || (high.n > 0 && usage.n > 0 && usage.max >= 0.8 * high.mean)
    };
    let on_purpose = is_memcg && limit_cg.as_deref().is_some_and(|cg| !near_limit(cg));
    if on_purpose {
        conf = conf.min(0.5);
    }
    let kind = if on_purpose {
        format!(
            "memory-cgroup reclaim by tasks of {}, far from any limit of it: reclaim on purpose (memory.reclaim) or for an ancestor",
            limit_cg.as_deref().unwrap_or("a cgroup")
        )
    } else if is_memcg {
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
                .map(|p| format!(", mostly {} ({})", p.comm, p.pid))
                .unwrap_or_default()
        ),
        conf,
        culprit,
    );
    f.onset = onset(d, limit_cg.as_deref().filter(|_| is_memcg));
    if traced.n > 0 {
        f.cite(
            d,
            &tracer::RECLAIM_STALLS_PER_S,
            &[],
            Take::Sum,
            "reclaim stalls (tracer: direct + memcg)",
        );
        f.cite(
            d,
            &tracer::RECLAIM_STALL_MAX_USEC,
            &[],
            Take::Max,
            "longest stall",
        );
        f.cite(
            d,
            &tracer::RECLAIM_STALL_PCT,
            &[],
            Take::Mean,
            "time stalled, % of the interval summed over threads",
        );
    }
    f.cite(
        d,
        &mem::RECLAIM_ALLOCSTALL_PER_S,
        &[],
        Take::Sum,
        "global direct-reclaim entries (vmstat allocstall)",
    );
    f.cite_procs(&who, 3, "stalls of", "");
    for (s, n) in cgroups.iter().take(2) {
        let cg = s.label(0);
        f.evidence.push(series_fact(
            s,
            *n,
            Take::Sum,
            format!("stalls in memory cgroup {cg}"),
        ));
        if d.stats(&cgroup::MEMORY_USAGE_OF_LIMIT_PCT, &[cg]).n > 0 {
            f.cite(
                d,
                &cgroup::MEMORY_USAGE_OF_LIMIT_PCT,
                &[cg],
                Take::Max,
                "its memory usage, % of its limit",
            );
        }
    }
    if let Some((s, g)) = growers.first() {
        let (pid, comm) = s.pid_comm().unwrap_or((0, ""));
        f.evidence.push(series_fact(
            s,
            *g,
            Take::Growth,
            format!(
                "largest RSS growth in the window: {comm} ({pid}) +{} MiB",
                mib(*g)
            ),
        ));
    }
    if d.stats(&psi::SOME_PCT, &["memory"]).n > 0 {
        f.cite(
            d,
            &psi::SOME_PCT,
            &["memory"],
            Take::Max,
            "memory pressure (PSI some)",
        );
    }
    let zmin = d
        .each(&mem::ZONE_FREE_OVER_MIN)
        .map(|s| (s, d.stats_of(s)))
        .filter(|(_, st)| st.n > 0)
        .min_by(|a, b| a.1.max.total_cmp(&b.1.max));
    if let Some((z, _)) = zmin {
        let labels: Vec<&str> = z.labels.iter().map(String::as_str).collect();
        f.cite(
            d,
            &mem::ZONE_FREE_OVER_MIN,
            &labels,
            Take::Max,
            "free pages over the min watermark (lowest zone)",
        );
    }
    if cg_thrash && !thrash {
        f.notes.push(format!(
            "{:.0} file refaults in {} came with the stalls: see memory.pagecache-thrash for who evicts whom",
            cg_refaults.map_or(0.0, |r| r.sum),
            limit_cg.as_deref().unwrap_or("the cgroup")
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
            (d.get(&mem::RECLAIM_PGSCAN_KSWAPD_PER_S, &[]), 1.0),
            (d.get(&mem::RECLAIM_PGSCAN_DIRECT_PER_S, &[]), 1.0),
            (d.get(&tracer::RECLAIM_STALLS_PER_S, &[]), 1.0),
            (d.get(&psi::SOME_PCT, &["memory"]), 1.0),
        ],
    );
    if on_purpose {
        f.remediation.push("if the reclaim is on purpose (a memory.reclaim writer), pace it: each write stalls the writer and walks every memcg's shrinkers".into());
    } else if is_memcg {
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

/// When the stalls began. For reclaim at a cgroup's limit, when that cgroup's tasks began to
/// stall: the host's count also holds every other cgroup's stalls, and a busy neighbour that
/// stalls now and then would put the onset before whatever filled this cgroup, and the chain's
/// order test would refuse the link to its cause.
fn onset(d: &Data, memcg: Option<&str>) -> Option<i64> {
    if let Some(s) = memcg.and_then(|cg| d.get(&tracer::RECLAIM_CGROUP_STALLS_PER_S, &[cg])) {
        return d.onset_over_baseline(s, 1.0);
    }
    [
        d.get(&tracer::RECLAIM_STALLS_PER_S, &[]),
        d.get(&mem::RECLAIM_ALLOCSTALL_PER_S, &[]),
    ]
    .into_iter()
    .flatten()
    .filter_map(|s| d.onset_over_baseline(s, 1.0))
    .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A neighbour that stalls a little from the start, and a cgroup at its limit whose tasks
    /// stall hard later: the finding is about the second, and begins when it does.
    #[test]
    fn stalls_at_a_limit_begin_when_that_cgroup_s_do() {
        let mut d = Data::seconds(20, 5);
        for i in 6..20 {
            let lab = if i >= 12 { 500.0 } else { 0.0 };
            d.push(&tracer::RECLAIM_STALLS_PER_S, &[], i, 2.0 + lab);
            d.push(&tracer::RECLAIM_CGROUP_STALLS_PER_S, &["/soak"], i, 2.0);
            d.push(&tracer::RECLAIM_PROC_STALLS_PER_S, &["9", "cc1"], i, 2.0);
            d.push(
                &tracer::RECLAIM_PROC_MEMCG_STALLS_PER_S,
                &["9", "cc1"],
                i,
                2.0,
            );
            if i >= 12 {
                d.push(&tracer::RECLAIM_CGROUP_STALLS_PER_S, &["/lab"], i, lab);
                d.push(&tracer::RECLAIM_PROC_STALLS_PER_S, &["7", "reader"], i, lab);
                d.push(
                    &tracer::RECLAIM_PROC_MEMCG_STALLS_PER_S,
                    &["7", "reader"],
                    i,
                    lab,
                );
            }
            d.push(&cgroup::MEMORY_USAGE_OF_LIMIT_PCT, &["/lab"], i, 99.0);
        }
        let f = run(&d);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title.contains("at the limit of /lab"),
            "{}",
            f[0].title
        );
        assert_eq!(f[0].onset, Some(12_000_000_000));
        // Global reclaim has no one cgroup: the host's stalls say when it began.
        assert_eq!(onset(&d, None), Some(6_000_000_000));
    }
}
