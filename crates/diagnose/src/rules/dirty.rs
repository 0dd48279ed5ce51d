//! `io.dirty-throttling` — writers put to sleep for dirtying page cache faster than it is
//! written back.
//!
//! **Mechanism.** A `write()` into the page cache returns before the data reaches the disk; the
//! pages stay dirty until writeback sends them. So that dirty memory cannot outrun the disk,
//! `balance_dirty_pages()` checks every writer after it dirtied a batch of pages: past the
//! midpoint between the background and the hard dirty limits (`vm.dirty_background_*`,
//! `vm.dirty_*`; on cgroup v2 also its memory cgroup's share of them, scaled to what the cgroup
//! may use) it sleeps the writer, longer the further over it is, until its rate matches what
//! the device writes back. The writer (a logger, a database checkpoint, a `cp`) stalls in
//! `write()` for up to 200 ms at a time, and any latency-critical thread of it with it; a
//! small cgroup's dirty limit is small, so a container throttles long before the host would.
//!
//! **Evidence.** The dirty tracer (`writeback:balance_dirty_pages`, the sleeps by the writer
//! and its memory cgroup): sleeps per process, the time its threads slept
//! (`dirty.proc.<pid>.<comm>.paused_pct`) and the longest sleep; the host's dirty and
//! writeback page cache; the writer's write rate; the busiest disk; its cgroup's limit.
//!
//! **Thresholds.** A process whose threads slept >= 10% of the window in all (0.1
//! thread-seconds per second) and >= 1 s over it, at >= 5x its own baseline level when it slept
//! in the baseline too. Confidence 0.5 at 10%, 0.95 at 100% (a thread asleep all the time).
//!
//! **Remediation.** Spread the writes (fsync in smaller steps, O_DIRECT for bulk copies). When no
//! disk is busy, a cap on the writeback itself: on v2 writeback is charged to the dirtying
//! cgroup, so its `io.max` is its writeback rate. Give a v2 cgroup that must write fast more
//! memory (its dirty limits scale with it); start writeback earlier (a lower
//! `vm.dirty_background_*`; on a host without cgroup writers, `vm.dirty_bytes` in bytes rather
//! than a ratio of a large memory — lowering it throttles v2 cgroups sooner). With a busy disk
//! shared with other work, cap the writer (`io.max`) so the waiting stays with it.
//!
//! **References.** Documentation/admin-guide/sysctl/vm.rst (dirty_*); Documentation/
//! admin-guide/cgroup-v2.rst ("Writeback"); LWN "IO-less dirty throttling" (2011).

use jitterscope_model::metrics::{cgroup, disk, mem, process, tracer};

use super::{
    confidence, finding, mib, moved_first, proc_culprit, procs_time_share, rule, series_fact,
    top_series, Res, Take,
};
use crate::data::Data;
use crate::Finding;

rule! {
    "io.dirty-throttling",
    "writers put to sleep in balance_dirty_pages for dirtying page cache faster than the disk writes it back",
    mechanism,
    reads: tracer::DIRTY_PROC_PAUSES_PER_S, tracer::DIRTY_PROC_PAUSED_PCT,
        tracer::DIRTY_PROC_PAUSE_MAX_USEC, mem::DIRTY_BYTES, mem::WRITEBACK_BYTES,
        process::PROC_WRITE_BYTES_PER_S, disk::WRITE_BYTES_PER_S, disk::UTIL_PCT,
        cgroup::MEMORY_LIMIT_BYTES, cgroup::MEMORY_EVENTS_PER_S["*", "max"],
}

/// Mean utilisation from which a disk is the bottleneck of the writeback.
const BUSY_DISK_PCT: f64 = 50.0;

/// Least share of the window the process's threads slept, summed over threads, %.
pub const PAUSED_PCT: f64 = 10.0;

/// Least time slept over the window, thread-seconds.
const PAUSED_S: f64 = 1.0;

/// Least ratio of the window's level to the process's own baseline level.
const RATIO: f64 = 5.0;

fn run(d: &Data) -> Vec<Finding> {
    let writers = procs_time_share(
        d,
        &tracer::DIRTY_PROC_PAUSED_PCT,
        PAUSED_PCT,
        PAUSED_S,
        RATIO,
    );
    let Some(top) = writers.first() else {
        return Vec::new();
    };
    let (pid, comm) = (top.pid, top.comm.clone());
    let pid_s = pid.to_string();
    let labels = [pid_s.as_str(), comm.as_str()];
    let pauses = d.stats(&tracer::DIRTY_PROC_PAUSES_PER_S, &labels);
    let longest = d.stats(&tracer::DIRTY_PROC_PAUSE_MAX_USEC, &labels);
    let culprit = proc_culprit(d, pid, &comm, Res::Memory);
    let memcg = culprit.cgroup.clone().filter(|c| c != "/");
    // Per-cgroup dirty limits are cgroup v2's writeback (memory.events is v2's file): on v1 only
    // the host's limits apply, and the cgroup's memory limit has no part in the throttling.
    let v2 = memcg
        .as_deref()
        .is_some_and(|cg| d.get(&cgroup::MEMORY_EVENTS_PER_S, &[cg, "max"]).is_some());
    let limit = memcg
        .as_deref()
        .filter(|_| v2)
        .map(|cg| d.stats(&cgroup::MEMORY_LIMIT_BYTES, &[cg]))
        .filter(|l| l.n > 0 && l.last > 0.0);
    let disks = top_series(d, &disk::UTIL_PCT, |s| s.mean);
    let busy_disk = disks.first().filter(|(_, v)| *v >= BUSY_DISK_PCT);
    let mut f = finding(
        &RULE,
        d,
        format!(
            "write throttling: {comm} ({pid}) slept {:.0}% of the time in balance_dirty_pages ({:.0} sleeps{}){}",
            top.value,
            pauses.sum,
            if longest.n > 0 {
                format!(", longest {:.0} ms", longest.max / 1000.0)
            } else {
                String::new()
            },
            match (&memcg, &limit) {
                (Some(cg), Some(l)) => format!(
                    ", its memory cgroup {cg} limited to {:.0} MiB",
                    mib(l.last)
                ),
                _ => String::new(),
            }
        ),
        confidence(top.value, PAUSED_PCT, 100.0),
        culprit,
    );
    f.evidence.push(series_fact(
        top.series,
        top.value,
        Take::Mean,
        format!("time {comm}'s threads slept in balance_dirty_pages, % of the window summed over threads"),
    ));
    f.cite(
        d,
        &tracer::DIRTY_PROC_PAUSES_PER_S,
        &labels,
        Take::Sum,
        "throttling sleeps",
    );
    f.cite(
        d,
        &tracer::DIRTY_PROC_PAUSE_MAX_USEC,
        &labels,
        Take::Max,
        "longest sleep",
    );
    f.cite(
        d,
        &process::PROC_WRITE_BYTES_PER_S,
        &labels,
        Take::Mean,
        "its writes reaching storage",
    );
    f.cite(
        d,
        &mem::DIRTY_BYTES,
        &[],
        Take::Max,
        "dirty page cache (host)",
    );
    f.cite(
        d,
        &mem::WRITEBACK_BYTES,
        &[],
        Take::Max,
        "page cache under writeback (host)",
    );
    match (busy_disk, disks.first()) {
        (Some((s, v)), _) => f.evidence.push(series_fact(
            s,
            *v,
            Take::Mean,
            format!("the busiest disk, {}: the device is what the writeback waits for", s.label(0)),
        )),
        (None, Some((s, v))) => f.evidence.push(series_fact(
            s,
            *v,
            Take::Mean,
            format!(
                "no disk was busy (the busiest, {}): the writeback was held back short of the device",
                s.label(0)
            ),
        )),
        (None, None) => {}
    }
    if let (Some(cg), Some(_)) = (&memcg, &limit) {
        f.cite(
            d,
            &cgroup::MEMORY_LIMIT_BYTES,
            &[cg],
            Take::Last,
            "its memory cgroup's limit (on cgroup v2 its dirty limits are a share of it)",
        );
    }
    f.cite_procs(&writers[1..], 2, "also throttled:", "");
    let series = d.get(&tracer::DIRTY_PROC_PAUSED_PCT, &labels);
    f.moved_first = moved_first(
        d,
        &[(d.get(&mem::DIRTY_BYTES, &[]), 0.0), (series, PAUSED_PCT)],
    );
    f.onset = series.and_then(|s| d.onset_over_baseline(s, PAUSED_PCT));
    let who = format!("{comm} ({pid})");
    f.remediation.push(format!(
        "let {who} write in steps the disk can take: fsync (or sync_file_range) every few MiB instead of leaving it all to writeback, or O_DIRECT for bulk copies"
    ));
    if busy_disk.is_none() {
        let cg = memcg.as_deref().unwrap_or("its cgroup");
        f.remediation.push(format!(
            "no disk was busy: look for a cap on the writeback itself. On cgroup v2 writeback is charged to the cgroup that dirtied the pages, so an io.max (wbps/wiops) on {cg} or a parent is also {who}'s writeback rate: raise it if these sleeps are not what it is for. Else the device behind the filesystem (a network or throttled volume) is slow"
        ));
    }
    if let (Some(cg), Some(l)) = (&memcg, &limit) {
        f.remediation.push(format!(
            "on cgroup v2 the dirty limits of {cg} are vm.dirty_ratio/dirty_background_ratio of what it may use ({:.0} MiB; memory.high or a parent's limit can make it less): give it more memory, or write less at once",
            mib(l.last)
        ));
    }
    if v2 && memcg.is_some() {
        f.remediation.push("start writeback earlier with a lower vm.dirty_background_ratio (or _bytes): the host's vm.dirty_* settings also set every cgroup's share, so lowering vm.dirty_ratio/dirty_bytes throttles containers sooner, not later".into());
    } else {
        f.remediation.push("start writeback earlier and throttle less abruptly: vm.dirty_background_bytes a few times the disk's write rate per second and vm.dirty_bytes a few times that (bytes, not ratios, on large-memory hosts)".into());
    }
    if busy_disk.is_some() {
        f.remediation.push(format!(
            "if other work shares the disk, cap {who}'s writes (io.max on cgroup v2) so the waiting stays with it"
        ));
    }
    f.references = vec![
        "https://docs.kernel.org/admin-guide/sysctl/vm.html#dirty-background-bytes",
        "https://docs.kernel.org/admin-guide/cgroup-v2.html#writeback",
        "https://lwn.net/Articles/456904/",
    ];
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten baseline seconds, ten in which `cp` (pid 5) sleeps `pct`% of the time in 20 sleeps a
    /// second; its baseline sleeps `base_pct`%.
    fn data(pct: f64, base_pct: f64, util: f64) -> Data {
        let mut d = Data::seconds(20, 10);
        for i in 0..20u32 {
            let l = &["5", "cp"];
            let v = if i >= 10 { pct } else { base_pct };
            if v > 0.0 {
                d.push(&tracer::DIRTY_PROC_PAUSED_PCT, l, i, v);
                d.push(&tracer::DIRTY_PROC_PAUSES_PER_S, l, i, 20.0);
                d.push(&tracer::DIRTY_PROC_PAUSE_MAX_USEC, l, i, 48_000.0);
            }
            d.push(&mem::DIRTY_BYTES, &[], i, 30.0 * 1048576.0);
            d.push(&disk::UTIL_PCT, &["vda"], i, util);
            d.push(&cgroup::MEMORY_EVENTS_PER_S, &["/writer", "max"], i, 0.0);
            d.push(
                &cgroup::MEMORY_LIMIT_BYTES,
                &["/writer"],
                i,
                128.0 * 1048576.0,
            );
        }
        d.procs.insert(
            5,
            crate::data::Proc {
                memory_cgroup: Some("/writer".into()),
                ..Default::default()
            },
        );
        d
    }

    #[test]
    fn a_throttled_writer_is_named_with_its_cgroup_and_limit() {
        let f = run(&data(60.0, 0.0, 90.0));
        assert_eq!(f.len(), 1, "{f:#?}");
        let f = &f[0];
        assert_eq!(
            f.title,
            "write throttling: cp (5) slept 60% of the time in balance_dirty_pages (200 sleeps, longest 48 ms), its memory cgroup /writer limited to 128 MiB"
        );
        assert_eq!(f.culprit.cgroup.as_deref(), Some("/writer"));
        assert!(f.confidence > 0.7);
        assert!(f.remediation[1].contains("128 MiB"));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.note.starts_with("the busiest disk, vda")));
        assert!(f
            .remediation
            .iter()
            .any(|r| r.contains("cap cp (5)'s writes")));
    }

    /// An idle disk: the cap on the writeback is the lead, not a cap to add.
    #[test]
    fn an_idle_disk_points_at_a_writeback_cap() {
        let f = run(&data(60.0, 0.0, 2.0));
        assert_eq!(f.len(), 1);
        assert!(f[0].remediation[1].starts_with("no disk was busy"));
        assert!(f[0].remediation[1].contains("io.max"));
        assert!(!f[0]
            .remediation
            .iter()
            .any(|r| r.contains("cap cp (5)'s writes")));
    }

    #[test]
    fn brief_or_usual_throttling_is_not_an_episode() {
        assert!(run(&data(5.0, 0.0, 90.0)).is_empty());
        assert!(run(&data(60.0, 50.0, 90.0)).is_empty());
    }
}
