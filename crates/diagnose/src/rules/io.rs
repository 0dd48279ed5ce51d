//! `io.saturation` — a disk busy all the time, tasks waiting in D state: requests queue even
//! when each is fast (low await). A resource rule (`mechanism: false`).
//!
//! **Evidence.** The busiest disk's `util_pct` and `await_ms`, tasks in D state
//! (`sched.procs_blocked`), the heaviest readers and writers.
//!
//! **Thresholds.** A disk >= 90% busy on average and at least half a task in D state on
//! average; confidence 0.5 at 90%, 0.95 at 100%.
//!
//! **Remediation.** Throttle the heaviest user's cgroup (io.max / blkio) or move it to another
//! device.

use jitterscope_model::metrics::{cpu, disk, process};

use super::{confidence, finding, proc_culprit, rule, top_procs, top_series, Take};
use crate::data::Data;
use crate::Finding;

rule! {
    "io.saturation", "a disk busy all the time, tasks waiting in D state", resource,
    reads: disk::UTIL_PCT, disk::AWAIT_MS, disk::QUEUE_DEPTH, cpu::SCHED_PROCS_BLOCKED,
        process::PROC_READ_BYTES_PER_S, process::PROC_WRITE_BYTES_PER_S,
}

fn run(d: &Data) -> Vec<Finding> {
    let disks = top_series(d, &disk::UTIL_PCT, |s| s.mean);
    let Some((disk, util)) = disks.first().map(|(s, v)| (s.label(0), *v)) else {
        return Vec::new();
    };
    let dstate = d.stats(&cpu::SCHED_PROCS_BLOCKED, &[]);
    if util < 90.0 || dstate.mean < 0.5 {
        return Vec::new();
    }
    let mut users = top_procs(d, &process::PROC_WRITE_BYTES_PER_S);
    users.extend(top_procs(d, &process::PROC_READ_BYTES_PER_S));
    users.sort_by(|a, b| b.value.total_cmp(&a.value));
    let mut f = finding(
        &RULE,
        d,
        format!(
            "I/O saturation: {disk} {util:.0}% busy, {:.1} tasks in D state on average",
            dstate.mean
        ),
        confidence(util, 90.0, 100.0),
        users
            .first()
            .map(|p| proc_culprit(d, p.pid, &p.comm, super::Res::Io))
            .unwrap_or_default(),
    );
    f.cite(
        d,
        &disk::UTIL_PCT,
        &[disk],
        Take::Mean,
        "time the disk had requests in flight",
    );
    f.cite(d, &disk::AWAIT_MS, &[disk], Take::Mean, "mean request time");
    f.cite(
        d,
        &cpu::SCHED_PROCS_BLOCKED,
        &[],
        Take::Max,
        "tasks in uninterruptible sleep",
    );
    f.remediation.push(format!(
        "limit the heaviest I/O user's cgroup (io.max / blkio throttle) or move it off {disk}"
    ));
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten samples in the window: disk `sda` at `util` %, `blocked` tasks in D state, a writer.
    fn data(util: f64, blocked: f64) -> Data {
        let mut d = Data::seconds(10, 0);
        for i in 0..10u32 {
            d.push(&disk::UTIL_PCT, &["sda"], i, util);
            d.push(&disk::UTIL_PCT, &["sdb"], i, 3.0);
            d.push(&disk::AWAIT_MS, &["sda"], i, 0.4);
            d.push(&cpu::SCHED_PROCS_BLOCKED, &[], i, blocked);
            d.push(&process::PROC_WRITE_BYTES_PER_S, &["77", "backup"], i, 4e8);
            d.push(&process::PROC_READ_BYTES_PER_S, &["78", "app"], i, 1e6);
        }
        d
    }

    #[test]
    fn a_busy_disk_with_blocked_tasks_names_its_heaviest_user() {
        let f = run(&data(99.0, 3.0));
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title
                .starts_with("I/O saturation: sda 99% busy, 3.0 tasks"),
            "{}",
            f[0].title
        );
        assert_eq!(f[0].culprit.comm.as_deref(), Some("backup"));
        assert_eq!(f[0].evidence[1].signal, "disk.sda.await_ms");
        assert!(f[0].remediation[0].contains("off sda"));
    }

    #[test]
    fn busy_without_waiters_or_waiters_without_busy_is_not() {
        assert!(run(&data(99.0, 0.0)).is_empty());
        assert!(run(&data(60.0, 5.0)).is_empty());
    }
}
