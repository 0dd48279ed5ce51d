//! `memory.pagecache-thrash` — a working set evicted from the page cache and read back.
//!
//! **Mechanism.** When one reader streams more file data than memory (or its cgroup) holds,
//! the LRU evicts everything older, including other processes' hot file pages. Those come back
//! from disk: refaults (the kernel's shadow entries recognise pages evicted recently) and major
//! faults for mapped files, each a disk read in the victim's path. Case 5: a fast SSD reader
//! pushed a service's files out; disk reads rose before kswapd and the major faults.
//!
//! **Evidence.** `reclaim.refault_file_per_s`, `reclaim.pgmajfault_per_s`,
//! `reclaim.pgsteal_*`, the page cache and anonymous memory levels (cache churn with flat anon
//! is thrash, not a leak), the processes with most major faults (victims) and most read bytes
//! (driver), the disk with most reads, and the order in which those moved.
//!
//! **Thresholds.** A finding when file refaults sum to >= 10,000 pages in the window at >= 10x
//! the baseline, or major faults to >= 1,000 at >= 10x: a few refaults are normal LRU aging.
//! Confidence by the refault ratio, 0.5 at 10x, 0.95 at 1000x; at least 0.85 when a process
//! took >= 1,000 major faults (the harm itself), at most 0.6 when none did (files re-read by
//! their own reader, nobody else harmed).
//!
//! **Remediation.** Confine the streaming reader (its own memory cgroup with a limit, so it
//! recycles its own cache; `POSIX_FADV_DONTNEED`/`O_DIRECT` in the reader); protect the
//! victim's cgroup with `memory.low`/`min`; `vm.watermark_scale_factor` when kswapd lags.
//!
//! **References.** Documentation/admin-guide/mm/workingset (mm/workingset.c comments);
//! Documentation/admin-guide/cgroup-v2.rst (memory.low).

use jitterscope_model::metrics::{disk, mem, process};

use super::{
    confidence, fact, finding, mib, moved_first, proc_culprit, rule, series_fact, top_procs,
    top_procs_by, top_series, Take,
};
use crate::data::Data;
use crate::Finding;
use jitterscope_model::registry::Unit;

rule! {
    "memory.pagecache-thrash",
    "file working sets evicted and read back (refaults, major faults)",
    mechanism,
    reads: mem::RECLAIM_REFAULT_FILE_PER_S, mem::RECLAIM_PGMAJFAULT_PER_S,
        mem::RECLAIM_PGSTEAL_KSWAPD_PER_S, mem::RECLAIM_PGSTEAL_DIRECT_PER_S,
        mem::RECLAIM_PGSCAN_KSWAPD_PER_S, mem::CACHED_BYTES, mem::ANON_BYTES,
        disk::READ_BYTES_PER_S, process::PROC_READ_BYTES_PER_S, process::PROC_MAJFLT_PER_S,
}

fn run(d: &Data) -> Vec<Finding> {
    let rf = d.stats(&mem::RECLAIM_REFAULT_FILE_PER_S, &[]);
    let mj = d.stats(&mem::RECLAIM_PGMAJFAULT_PER_S, &[]);
    let ratio = |s: &crate::data::Stats| {
        s.mean
            / if s.base_n > 0 {
                s.base_median.max(1.0)
            } else {
                1.0
            }
    };
    let (rr, mr) = (ratio(&rf), ratio(&mj));
    let refaulting = rf.sum >= 10_000.0 && rr >= 10.0;
    let faulting = mj.sum >= 1000.0 && mr >= 10.0;
    if !refaulting && !faulting {
        return Vec::new();
    }
    let victims = top_procs(d, &process::PROC_MAJFLT_PER_S);
    // Ranked without each process's largest sample: a parent reaping a child inherits the
    // child's lifetime I/O counters (kernel/exit.c adds them to the parent's), which shows as a
    // one-sample spike of the parent.
    let readers = top_procs_by(d, &process::PROC_READ_BYTES_PER_S, |s| s.sum - s.max);
    // Without a process faulting its pages back, refaults are a reader re-reading its own
    // files: thrash of its own cache, weaker evidence of harm to others.
    let harmed = faulting && victims.first().is_some_and(|v| v.value >= 1000.0);
    let disks = top_series(d, &disk::READ_BYTES_PER_S, |s| s.mean);
    let culprit = readers
        .first()
        .map(|p| proc_culprit(d, p.pid, &p.comm))
        .unwrap_or_default();
    let mut f = finding(
        &RULE,
        d,
        format!(
            "page-cache thrashing: {:.0} file refaults, {:.0} major faults{}{}",
            rf.sum,
            mj.sum,
            readers
                .first()
                .map(|p| format!(
                    ", driven by {} ({}) reading {} MiB/s",
                    p.comm,
                    p.pid,
                    mib(p.value / d.window_len().max(1) as f64)
                ))
                .unwrap_or_default(),
            victims
                .first()
                .map(|p| format!("; {} ({}) faults its pages back", p.comm, p.pid))
                .unwrap_or_default()
        ),
        if harmed {
            // A process faulting thousands of pages back is the harm itself, whatever the
            // baseline's refault rate was.
            confidence(rr.max(mr), 10.0, 1000.0).max(0.85)
        } else {
            confidence(rr.max(mr), 10.0, 1000.0).min(0.6)
        },
        culprit,
    );
    f.cite(
        d,
        &mem::RECLAIM_REFAULT_FILE_PER_S,
        &[],
        Take::Sum,
        "file pages evicted then read back (refaults)",
    );
    if !harmed {
        f.notes.push(
            "no process faulted mapped pages back: the refaults are files being re-read after eviction".into(),
        );
    }
    f.cite(
        d,
        &mem::RECLAIM_PGMAJFAULT_PER_S,
        &[],
        Take::Sum,
        "major faults (page read from disk)",
    );
    f.cite_procs(&victims, 2, "major faults of", ": the victim");
    f.cite_procs(&readers, 2, "read from storage by", " in the window");
    if let Some((s, v)) = disks.first() {
        f.evidence.push(series_fact(
            s,
            *v,
            Take::Mean,
            format!("reads of {} (mean)", s.label(0)),
        ));
    }
    let cache = d.stats(&mem::CACHED_BYTES, &[]);
    let anon = d.stats(&mem::ANON_BYTES, &[]);
    if cache.n > 1 && anon.n > 1 {
        f.evidence.push(fact(
            format!("{} / {}", mem::CACHED_BYTES.name, mem::ANON_BYTES.name),
            cache.last - cache.first,
            Unit::Bytes,
            format!(
                "page cache {:+} MiB, anonymous memory {:+} MiB over the window: churn without a leak",
                mib(cache.last - cache.first),
                mib(anon.last - anon.first)
            ),
        ));
    }
    f.moved_first = moved_first(
        d,
        &[
            (disks.first().map(|(s, _)| *s), 1_048_576.0),
            (d.get(&mem::RECLAIM_REFAULT_FILE_PER_S, &[]), 100.0),
            (d.get(&mem::RECLAIM_PGMAJFAULT_PER_S, &[]), 10.0),
            (d.get(&mem::RECLAIM_PGSCAN_KSWAPD_PER_S, &[]), 100.0),
        ],
    );
    if let Some(comm) = readers.first().map(|p| &p.comm) {
        f.remediation.push(format!(
            "give {comm} its own memory cgroup with a limit, so it recycles its own page cache instead of everyone's (or have it read with POSIX_FADV_DONTNEED / O_DIRECT)"
        ));
    }
    if let Some(comm) = victims.first().map(|p| &p.comm) {
        f.remediation.push(format!("protect {comm}'s working set: memory.low / memory.min on its cgroup (v2), or mlock the hot file"));
    }
    f.remediation
        .push("if kswapd lags the stream, wake it earlier: vm.watermark_scale_factor=200".into());
    f.references = vec![
        "https://docs.kernel.org/admin-guide/cgroup-v2.html#memory",
        "https://github.com/torvalds/linux/blob/master/mm/workingset.c",
    ];
    vec![f]
}
