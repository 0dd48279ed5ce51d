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
    top_procs_by, top_series, ProcSum, Take,
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
        process::PROC_REAPED_READ_BYTES_PER_S,
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
    // Short-lived readers (a shell's `cat`s) may never be seen running: their reads arrive in
    // the parent's counters when it reaps them, recorded apart from its own. Children the
    // recorder saw are already cited under their own names: only what they do not account
    // for is news.
    let unseen = |r: &ProcSum| {
        let seen: f64 = readers
            .iter()
            .filter(|c| d.procs.get(&c.pid).is_some_and(|p| p.ppid == r.pid))
            .map(|c| c.sum)
            .sum();
        r.sum - seen
    };
    let reapers = top_procs(d, &process::PROC_REAPED_READ_BYTES_PER_S);
    let reaper = reapers.first().filter(|r| {
        let rest = unseen(r);
        rest > 0.0 && rest >= 0.5 * readers.first().map_or(0.0, |p| p.sum)
    });
    // The driver: the largest reader, or the parent of unseen children that read more.
    let secs = d.window_seconds().max(1.0);
    let driver = match (readers.first(), reaper) {
        (_, Some(r)) if readers.first().is_none_or(|p| unseen(r) > p.sum) => Some(format!(
            ", driven by children of {} ({}) reading {} MiB/s",
            r.comm,
            r.pid,
            mib(unseen(r) / secs)
        )),
        (Some(p), _) => Some(format!(
            ", driven by {} ({}) reading {} MiB/s",
            p.comm,
            p.pid,
            mib(p.sum / secs)
        )),
        _ => None,
    };
    let culprit = match (readers.first(), reaper) {
        (_, Some(r)) if readers.first().is_none_or(|p| unseen(r) > p.sum) => {
            proc_culprit(d, r.pid, &r.comm, super::Res::Memory)
        }
        (Some(p), _) => proc_culprit(d, p.pid, &p.comm, super::Res::Memory),
        _ => Default::default(),
    };
    let mut f = finding(
        &RULE,
        d,
        format!(
            "page-cache thrashing: {:.0} file refaults, {:.0} major faults{}{}",
            rf.sum,
            mj.sum,
            driver.unwrap_or_default(),
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
    f.onset = [
        (d.get(&mem::RECLAIM_REFAULT_FILE_PER_S, &[]), 100.0),
        (d.get(&mem::RECLAIM_PGMAJFAULT_PER_S, &[]), 10.0),
    ]
    .into_iter()
    .filter_map(|(s, floor)| d.onset_over_baseline(s?, floor))
    .min();
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
    if let Some(r) = reaper {
        f.evidence.push(series_fact(
            r.series,
            r.sum,
            Take::Sum,
            format!(
                "read from storage by the children {} ({}) reaped in the window (the kernel adds a reaped child's lifetime I/O to its parent's counters)",
                r.comm, r.pid
            ),
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell whose short `cat` children stream a file: the children are never seen, their
    /// reads reach the shell's counters when it reaps them.
    #[test]
    fn reads_of_reaped_children_are_said_as_such() {
        let mut d = Data::seconds(12, 4);
        d.procs.insert(
            50,
            crate::data::Proc {
                comm: "bash".into(),
                memory_cgroup: Some("/batch".into()),
                ..Default::default()
            },
        );
        for i in 0..12u32 {
            let on = i >= 4;
            d.push(
                &mem::RECLAIM_REFAULT_FILE_PER_S,
                &[],
                i,
                if on { 50_000.0 } else { 10.0 },
            );
            d.push(
                &mem::RECLAIM_PGMAJFAULT_PER_S,
                &[],
                i,
                if on { 2_000.0 } else { 1.0 },
            );
            d.push(
                &process::PROC_MAJFLT_PER_S,
                &["60", "postgres"],
                i,
                if on { 1_500.0 } else { 0.0 },
            );
            if on {
                d.push(
                    &process::PROC_REAPED_READ_BYTES_PER_S,
                    &["50", "bash"],
                    i,
                    1e9,
                );
            }
        }
        let f = &run(&d)[0];
        assert!(
            f.title.contains("driven by children of bash (50)"),
            "{}",
            f.title
        );
        assert_eq!(f.culprit.cgroup.as_deref(), Some("/batch"));
        let e = f
            .evidence
            .iter()
            .find(|e| e.signal == "proc.50.bash.reaped_read_bytes_total")
            .expect("the reaped reads");
        assert!(e.note.contains("reaped"), "{}", e.note);
        assert_eq!(e.unit, Unit::Bytes);
        // Nothing credits the shell with reading it itself.
        assert!(!f
            .evidence
            .iter()
            .any(|e| e.signal == "proc.50.bash.read_bytes_total"));
    }
}
