//! Resource rules: `cpu.saturation`, `cpu.imbalance`, `sched.runqueue-latency`,
//! `io.saturation`. They name a saturated resource and who uses it, not a kernel mechanism
//! (`mechanism: false`): a busy host is not by itself jitter, but queueing on it is.
//!
//! - **cpu.saturation**: all CPUs busy (usr+sys+irq+softirq+steal mean >= 80%) — runnable
//!   threads queue. Culprit: the process with most CPU. Remediation: capacity, or limit the
//!   batch work (nice, a CPU quota on its cgroup).
//! - **cpu.imbalance**: one CPU >= 90% busy while the others average <= 30% — a
//!   single-threaded hot spot or a restricted affinity/cpuset; more CPUs do not help.
//! - **sched.runqueue-latency**: run-queue wait p99 (`runqlat.p99_usec`) >= 5 ms and >= 10x the
//!   baseline — threads wait for a CPU; per cgroup when recorded.
//! - **io.saturation**: a disk >= 90% busy (`util_pct`) on average, with tasks in D state:
//!   requests queue even when each is fast (low await).
//!
//! Thresholds are the usual capacity-planning lines (80-90% busy); confidence by how far past.

use super::{confidence, evidence, fact, finding, proc_culprit, top_labels, top_procs, Rule, Take};
use crate::data::Data;
use crate::Finding;

/// `cpu.saturation`.
pub const SATURATION: Rule = Rule {
    id: "cpu.saturation",
    summary: "every CPU busy: runnable threads queue",
    mechanism: false,
    select: &[
        "cpu.idle_pct",
        "cpu.iowait_pct",
        "cpu.usr_pct",
        "cpu.sys_pct",
        "proc.*.cpu_pct",
        "load.avg1",
    ],
    run: saturation,
};

/// `cpu.imbalance`.
pub const IMBALANCE: Rule = Rule {
    id: "cpu.imbalance",
    summary: "one CPU pinned while the others idle",
    mechanism: false,
    select: &["cpu.*.idle_pct", "cpu.*.iowait_pct", "proc.*.cpu_pct"],
    run: imbalance,
};

/// `sched.runqueue-latency`.
pub const RUNQUEUE: Rule = Rule {
    id: "sched.runqueue-latency",
    summary: "threads waiting long for a CPU",
    mechanism: false,
    select: &[
        "runqlat.p99_usec",
        "runqlat.max_usec",
        "runqlat.cgroup.*.p99_usec",
        "proc.*.runq_wait_pct",
    ],
    run: runqueue,
};

/// `io.saturation`.
pub const IO: Rule = Rule {
    id: "io.saturation",
    summary: "a disk busy all the time, tasks waiting in D state",
    mechanism: false,
    select: &[
        "disk.*.util_pct",
        "disk.*.await_ms",
        "disk.*.queue_depth",
        "sched.procs_blocked",
        "proc.*.read_bytes_per_s",
        "proc.*.write_bytes_per_s",
    ],
    run: io,
};

fn busiest(d: &Data) -> Option<(u32, String, f64)> {
    top_procs(d, "proc.", ".cpu_pct").into_iter().next()
}

fn saturation(d: &Data) -> Vec<Finding> {
    let idle = d.stats("cpu.idle_pct");
    let iowait = d.stats("cpu.iowait_pct");
    if idle.n == 0 {
        return Vec::new();
    }
    let busy = 100.0 - idle.mean - iowait.mean;
    if busy < 80.0 {
        return Vec::new();
    }
    let top = busiest(d);
    let mut f = finding(
        &SATURATION,
        d,
        format!(
            "CPU saturated: {busy:.0}% busy on average{}",
            top.as_ref()
                .map(|(p, c, s)| format!(
                    ", {c} ({p}) used {:.0}% of a CPU",
                    s / d.window_len().max(1) as f64
                ))
                .unwrap_or_default()
        ),
        confidence(busy, 80.0, 99.0),
        top.as_ref()
            .map(|(p, c, _)| proc_culprit(d, *p, c))
            .unwrap_or_default(),
    );
    f.evidence.push(fact(
        "cpu busy",
        busy,
        "percent",
        "100 - idle - iowait, mean over the window",
    ));
    f.evidence.push(evidence(
        d,
        "cpu.usr_pct",
        Take::Mean,
        "percent",
        "user CPU",
    ));
    f.evidence.push(evidence(
        d,
        "cpu.sys_pct",
        Take::Mean,
        "percent",
        "system CPU",
    ));
    f.evidence.push(evidence(
        d,
        "load.avg1",
        Take::Max,
        "threads",
        "load average (1 min)",
    ));
    f.remediation.push("more CPU, or less work: lower the batch work's priority (nice, SCHED_IDLE) or cap its cgroup so latency-sensitive threads get a CPU".into());
    vec![f]
}

fn imbalance(d: &Data) -> Vec<Finding> {
    let busy: Vec<(String, f64)> = top_labels(d, "cpu.", ".idle_pct", |s| 100.0 - s.mean);
    if busy.len() < 2 {
        return Vec::new();
    }
    let (cpu, hot) = busy[0].clone();
    let rest = busy[1..].iter().map(|x| x.1).sum::<f64>() / (busy.len() - 1) as f64;
    if hot < 90.0 || rest > 30.0 {
        return Vec::new();
    }
    let top = busiest(d);
    let mut f = finding(
        &IMBALANCE,
        d,
        format!("CPU imbalance: cpu{cpu} {hot:.0}% busy while the other CPUs average {rest:.0}%"),
        confidence(hot - rest, 60.0, 95.0),
        top.as_ref()
            .map(|(p, c, _)| proc_culprit(d, *p, c))
            .unwrap_or_default(),
    );
    f.evidence.push(fact(
        format!("cpu.{cpu}.idle_pct"),
        100.0 - hot,
        "percent",
        format!("cpu{cpu} idle"),
    ));
    f.evidence.push(fact(
        "other CPUs busy",
        rest,
        "percent",
        "mean busy of the other CPUs",
    ));
    f.remediation.push("a single thread or a restricted affinity: check `taskset -p <pid>` and the cgroup's cpuset; parallelise the hot thread or widen its CPU set".into());
    vec![f]
}

fn runqueue(d: &Data) -> Vec<Finding> {
    let st = d.stats("runqlat.p99_usec");
    if st.n == 0 || st.mean < 5000.0 {
        return Vec::new();
    }
    let base = if st.base_n > 0 {
        st.base_median.max(1.0)
    } else {
        1.0
    };
    if st.base_n > 0 && st.mean / base < 10.0 {
        return Vec::new();
    }
    let cgs = top_labels(d, "runqlat.cgroup.", ".p99_usec", |s| s.mean);
    let waiting = top_procs(d, "proc.", ".runq_wait_pct");
    let mut f = finding(
        &RUNQUEUE,
        d,
        format!(
            "run-queue latency: p99 {:.1} ms{}",
            st.mean / 1000.0,
            cgs.first()
                .map(|(c, v)| format!(", worst in {c} ({:.1} ms)", v / 1000.0))
                .unwrap_or_default()
        ),
        confidence(st.mean / 1000.0, 5.0, 50.0),
        waiting
            .first()
            .map(|(p, c, _)| proc_culprit(d, *p, c))
            .unwrap_or_default(),
    );
    f.evidence.push(evidence(
        d,
        "runqlat.p99_usec",
        Take::Mean,
        "us",
        "run-queue wait, 99th percentile",
    ));
    f.evidence.push(evidence(
        d,
        "runqlat.max_usec",
        Take::Max,
        "us",
        "longest wait",
    ));
    f.remediation.push("fewer runnable threads than CPUs for latency-critical work: a CPU quota or lower priority for the rest, or more CPUs".into());
    vec![f]
}

fn io(d: &Data) -> Vec<Finding> {
    let disks = top_labels(d, "disk.", ".util_pct", |s| s.mean);
    let Some((disk, util)) = disks.first().cloned() else {
        return Vec::new();
    };
    let dstate = d.stats("sched.procs_blocked");
    if util < 90.0 || dstate.mean < 0.5 {
        return Vec::new();
    }
    let mut users = top_procs(d, "proc.", ".write_bytes_per_s");
    users.extend(top_procs(d, "proc.", ".read_bytes_per_s"));
    users.sort_by(|a, b| b.2.total_cmp(&a.2));
    let mut f = finding(
        &IO,
        d,
        format!(
            "I/O saturation: {disk} {util:.0}% busy, {:.1} tasks in D state on average",
            dstate.mean
        ),
        confidence(util, 90.0, 100.0),
        users
            .first()
            .map(|(p, c, _)| proc_culprit(d, *p, c))
            .unwrap_or_default(),
    );
    f.evidence.push(evidence(
        d,
        &format!("disk.{disk}.util_pct"),
        Take::Mean,
        "percent",
        "time the disk had requests in flight",
    ));
    f.evidence.push(evidence(
        d,
        &format!("disk.{disk}.await_ms"),
        Take::Mean,
        "ms",
        "mean request time",
    ));
    f.evidence.push(evidence(
        d,
        "sched.procs_blocked",
        Take::Max,
        "count",
        "tasks in uninterruptible sleep",
    ));
    f.remediation.push(format!(
        "limit the heaviest I/O user's cgroup (io.max / blkio throttle) or move it off {disk}"
    ));
    vec![f]
}
