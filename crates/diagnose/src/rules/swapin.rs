//! `memory.swap-in` — anonymous memory read back from swap: a major fault, a disk read, in the
//! path of every access to an evicted page.
//!
//! **Mechanism.** When a memory cgroup is at its limit (or the host is out of free memory) and
//! swap is available, reclaim writes anonymous pages out to swap. A process that touches them
//! again takes a major fault and waits for the read (with readahead of neighbouring slots,
//! `vm.page-cluster`); each page it brings back needs a free page, which reclaim frees by
//! swapping out another. A working set larger than the memory it may use turns every access
//! into disk latency: a swap storm. The kernel counts pages read from swap in `pswpin`
//! (/proc/vmstat), each task's major faults in /proc/<pid>/stat, and the time in memory PSI.
//!
//! **Evidence.** `vmstat.pswpin_per_s` and `pswpout_per_s` against their baselines, the
//! processes with most major faults (`proc.<pid>.<comm>.majflt_per_s`) and their swapped-out
//! memory (`swap_bytes`), the victim's memory cgroup against its limit, memory PSI.
//!
//! **Thresholds.** >= 1,000 pages swapped in over the window at >= 10x the baseline's median
//! rate (a host that always swaps a little has no episode). Confidence by that ratio, 0.5 at
//! 10x, 0.95 at 1000x; at least 0.85 when one process took >= 1,000 major faults (the harm
//! itself, in one task's path).
//!
//! **Culprit.** The process that faulted most, in its memory cgroup. What evicted it: its own
//! cgroup's limit when the cgroup stood at it, else the process whose memory grew most.
//!
//! **Remediation.** Give the cgroup room for its working set (`memory.max`, or a limit on what
//! evicts it), protect the hot set (`memory.low`/`min` on v2, `mlock`), swap less eagerly
//! (per-cgroup `memory.swappiness` on v1; `vm.swappiness` on v2, and `memory.reclaim`'s
//! `swappiness=` from 6.8), or turn swap off for a latency-critical cgroup
//! (`memory.swap.max` 0): it is then reclaimed by its file pages or OOM-killed, not slowed.
//!
//! **References.** Documentation/admin-guide/cgroup-v2.rst (memory.swap.max, memory.low);
//! Documentation/admin-guide/sysctl/vm.rst (swappiness, page-cluster); Documentation/
//! accounting/psi.rst.

use jitterscope_model::metrics::{cgroup, mem, process, psi};
use jitterscope_sources::system::kernel::KernelVersion;

use super::{
    confidence, finding, mib, moved_first, proc_culprit, rule, series_fact, top_procs,
    top_procs_by, Res, Take,
};
use crate::data::Data;
use crate::Finding;

rule! {
    "memory.swap-in",
    "anonymous memory read back from swap: a disk read in the path of every access to an evicted page",
    mechanism,
    reads: mem::VMSTAT_FIELD_PER_S["pswpin"], mem::VMSTAT_FIELD_PER_S["pswpout"],
        mem::RECLAIM_PGMAJFAULT_PER_S, mem::SWAP_USED_BYTES, psi::SOME_PCT["memory"],
        process::PROC_MAJFLT_PER_S, process::PROC_SWAP_BYTES, process::PROC_RSS_BYTES,
        cgroup::MEMORY_USAGE_BYTES, cgroup::MEMORY_LIMIT_BYTES,
        cgroup::MEMORY_EVENTS_PER_S["*", "max"],
}

/// Pages swapped in over the window from which it is a storm.
pub const PAGES: f64 = 1000.0;

/// Ratio of the window's swap-in rate to the baseline's (floored at 1/s).
const RATIO: f64 = 10.0;

fn run(d: &Data) -> Vec<Finding> {
    let sin = d.stats(&mem::VMSTAT_FIELD_PER_S, &["pswpin"]);
    if sin.n == 0 || sin.sum < PAGES {
        return Vec::new();
    }
    let base = if sin.base_n > 0 { sin.base_median } else { 0.0 };
    let ratio = sin.mean / base.max(1.0);
    if ratio < RATIO {
        return Vec::new();
    }
    // Major faults of processes with memory out in swap: a reader of mapped files faults too,
    // on the page cache, and is not this storm's victim.
    let victims: Vec<_> = top_procs(d, &process::PROC_MAJFLT_PER_S)
        .into_iter()
        .filter(|v| {
            d.stats(&process::PROC_SWAP_BYTES, &[&v.pid.to_string(), &v.comm])
                .max
                > 0.0
        })
        .collect();
    let victim = victims.first();
    let culprit = victim
        .map(|v| proc_culprit(d, v.pid, &v.comm, Res::Memory))
        .unwrap_or_default();
    // What evicted it: the limit of the victim's own memory cgroup when it stood there, else
    // whoever grew most.
    let memcg = culprit.cgroup.clone();
    let at_limit = memcg.as_deref().is_some_and(|cg| {
        let usage = d.stats(&cgroup::MEMORY_USAGE_BYTES, &[cg]);
        let limit = d.stats(&cgroup::MEMORY_LIMIT_BYTES, &[cg]);
        usage.n > 0 && limit.n > 0 && limit.last > 0.0 && usage.max >= 0.95 * limit.last
    });
    let grower = top_procs_by(d, &process::PROC_RSS_BYTES, |st| st.last - st.first)
        .into_iter()
        .find(|p| Some(p.pid) != victim.map(|v| v.pid));
    let evictor = if at_limit {
        let cg = memcg.as_deref().unwrap_or("?");
        let limit = d.stats(&cgroup::MEMORY_LIMIT_BYTES, &[cg]).last;
        Some(format!(
            "its memory cgroup {cg} at its limit of {:.0} MiB",
            mib(limit)
        ))
    } else {
        grower
            .as_ref()
            .filter(|g| g.value >= 16.0 * 1048576.0)
            .map(|g| format!("{} ({}) grew {:.0} MiB", g.comm, g.pid, mib(g.value)))
    };
    let mut conf = confidence(ratio, RATIO, 1000.0);
    if victim.is_some_and(|v| v.sum >= 1000.0) {
        conf = conf.max(0.85);
    }
    let mut f = finding(
        &RULE,
        d,
        format!(
            "swap-in storm: {:.0} pages read back from swap ({:.0} MiB){}{}",
            sin.sum,
            mib(sin.sum * 4096.0),
            victim
                .map(|v| format!(", {} ({}) took {:.0} major faults", v.comm, v.pid, v.sum))
                .unwrap_or_default(),
            evictor
                .as_ref()
                .map(|e| format!("; evicted by {e}"))
                .unwrap_or_default()
        ),
        conf,
        culprit,
    );
    f.cite(
        d,
        &mem::VMSTAT_FIELD_PER_S,
        &["pswpin"],
        Take::Sum,
        "pages read back from swap (vmstat pswpin)",
    );
    f.cite(
        d,
        &mem::VMSTAT_FIELD_PER_S,
        &["pswpout"],
        Take::Sum,
        "pages written out to swap (vmstat pswpout): the same working set going back out",
    );
    f.cite_procs(&victims, 3, "major faults of", "");
    if let Some(v) = victim {
        f.cite(
            d,
            &process::PROC_SWAP_BYTES,
            &[&v.pid.to_string(), &v.comm],
            Take::Max,
            format!("{} ({})'s memory out in swap", v.comm, v.pid),
        );
    }
    if let Some(cg) = memcg.as_deref() {
        f.cite(
            d,
            &cgroup::MEMORY_USAGE_BYTES,
            &[cg],
            Take::Max,
            "its memory cgroup's usage",
        );
        f.cite(
            d,
            &cgroup::MEMORY_LIMIT_BYTES,
            &[cg],
            Take::Last,
            "its memory cgroup's limit",
        );
    }
    if !at_limit {
        if let Some(g) = &grower {
            f.evidence.push(series_fact(
                g.series,
                g.value,
                Take::Growth,
                format!("{} ({}) grew most in the window", g.comm, g.pid),
            ));
        }
    }
    f.cite(d, &mem::SWAP_USED_BYTES, &[], Take::Max, "swap in use");
    f.cite(
        d,
        &psi::SOME_PCT,
        &["memory"],
        Take::Mean,
        "memory pressure (PSI some): the time tasks waited on the swap-ins",
    );
    let sin_series = d.get(&mem::VMSTAT_FIELD_PER_S, &["pswpin"]);
    f.moved_first = moved_first(
        d,
        &[
            (d.get(&mem::VMSTAT_FIELD_PER_S, &["pswpout"]), 10.0),
            (sin_series, 10.0),
        ],
    );
    f.onset = sin_series.and_then(|s| d.onset_over_baseline(s, 10.0));
    let who = victim
        .map(|v| format!("{} ({})", v.comm, v.pid))
        .unwrap_or_else(|| "the faulting process".into());
    match memcg.as_deref().filter(|_| at_limit) {
        Some(cg) => f.remediation.push(format!(
            "raise the memory limit of {cg} to hold {who}'s working set, or make the working set smaller: at its limit every access to a swapped-out page is a disk read"
        )),
        None => f.remediation.push(format!(
            "give {who} the memory its working set needs: limit what evicts it (its own memory cgroup), or add memory"
        )),
    }
    // memory.events is cgroup v2's (v1 has failcnt): its series says which the cgroup is.
    let v2 = memcg
        .as_deref()
        .is_some_and(|cg| d.get(&cgroup::MEMORY_EVENTS_PER_S, &[cg, "max"]).is_some());
    let kernel = d.kernel_version();
    if v2 {
        f.remediation.push(format!(
            "protect {who}'s hot set with memory.low (or memory.min) on its cgroup: reclaim then takes from others first"
        ));
        f.remediation.push("cgroup v2 has no per-cgroup swappiness: lower vm.swappiness for the host, or set memory.swap.max to 0 on the latency-critical cgroup (it is then reclaimed by its file pages or OOM-killed, not slowed)".into());
        if kernel.is_some_and(|k| k >= KernelVersion::new(6, 8, 0)) {
            f.remediation.push("for proactive reclaim that spares anonymous memory: echo '<bytes> swappiness=0' > memory.reclaim (6.8+)".into());
        }
    } else {
        f.remediation.push(format!(
            "swap less eagerly in {who}'s cgroup: memory.swappiness (cgroup v1), or vm.swappiness for the host"
        ));
    }
    f.remediation.push(format!(
        "lock the latency-critical part of {who} in memory (mlock / mlockall, with RLIMIT_MEMLOCK raised): locked pages are never swapped out"
    ));
    f.references = vec![
        "https://docs.kernel.org/admin-guide/cgroup-v2.html#memory-interface-files",
        "https://docs.kernel.org/admin-guide/sysctl/vm.html#swappiness",
        "https://docs.kernel.org/accounting/psi.html",
    ];
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;

    const CG: &str = "/jitterscope-lab/swap-in";

    /// Ten baseline seconds without swapping, ten with `rate` pages swapped in a second and
    /// `app` (pid 5, in a memory cgroup at its 64 MiB limit) faulting them.
    fn data(rate: f64, base_rate: f64) -> Data {
        let mut d = Data::seconds(20, 10);
        for i in 0..20u32 {
            let on = i >= 10;
            d.push(
                &mem::VMSTAT_FIELD_PER_S,
                &["pswpin"],
                i,
                if on { rate } else { base_rate },
            );
            d.push(
                &mem::VMSTAT_FIELD_PER_S,
                &["pswpout"],
                i,
                if on { rate } else { 0.0 },
            );
            d.push(
                &process::PROC_MAJFLT_PER_S,
                &["5", "app"],
                i,
                if on { rate / 2.0 } else { 0.0 },
            );
            d.push(
                &process::PROC_MAJFLT_PER_S,
                &["6", "cron"],
                i,
                if on { 1.0 } else { 0.0 },
            );
            d.push(
                &process::PROC_SWAP_BYTES,
                &["5", "app"],
                i,
                32.0 * 1048576.0,
            );
            d.push(&cgroup::MEMORY_USAGE_BYTES, &[CG], i, 64.0 * 1048576.0);
            d.push(&cgroup::MEMORY_LIMIT_BYTES, &[CG], i, 64.0 * 1048576.0);
        }
        d.procs.insert(
            5,
            crate::data::Proc {
                memory_cgroup: Some(CG.into()),
                ..Default::default()
            },
        );
        d
    }

    #[test]
    fn a_swap_storm_names_the_faulting_process_and_its_full_cgroup() {
        let f = run(&data(2000.0, 0.0));
        assert_eq!(f.len(), 1, "{f:#?}");
        let f = &f[0];
        assert!(
            f.title.starts_with(
                "swap-in storm: 20000 pages read back from swap (78 MiB), app (5) took 10000 major faults; evicted by its memory cgroup /jitterscope-lab/swap-in at its limit of 64 MiB"
            ),
            "{}",
            f.title
        );
        assert_eq!(f.culprit.comm.as_deref(), Some("app"));
        assert_eq!(f.culprit.cgroup.as_deref(), Some(CG));
        assert!(f.confidence >= 0.85);
        assert!(f.remediation[0].starts_with("raise the memory limit of /jitterscope-lab/swap-in"));
    }

    #[test]
    fn a_little_or_the_usual_swapping_is_not_a_storm() {
        assert!(run(&data(50.0, 0.0)).is_empty());
        // Always swapping in at this rate: no episode here.
        assert!(run(&data(2000.0, 1500.0)).is_empty());
    }
}
