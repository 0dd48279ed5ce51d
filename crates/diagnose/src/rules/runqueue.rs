//! `sched.runqueue-latency` — threads waiting long for a CPU. A resource rule
//! (`mechanism: false`).
//!
//! **Evidence.** Run-queue wait p99 and maximum (runqlat tracer), per CPU cgroup when
//! recorded, and the processes that waited most (`proc.<pid>.<comm>.runq_wait_pct`).
//!
//! **Thresholds.** Window mean p99 >= 5 ms and >= 10x the baseline median (when there is a
//! baseline): a few ms is a lost timeslice, a jump over the host's own normal is queueing.
//! Confidence 0.5 at 5 ms, 0.95 at 50 ms.
//!
//! **Remediation.** Fewer runnable threads than CPUs for latency-critical work: a CPU quota or
//! lower priority for the rest, or more CPUs.

use jitterscope_model::metrics::{process, tracer};
use jitterscope_model::registry::Sel;

use super::{confidence, evidence, finding, proc_culprit, top_procs, top_series, Rule, Take};
use crate::data::Data;
use crate::Finding;

/// The rule.
pub const RULE: Rule = Rule {
    id: "sched.runqueue-latency",
    summary: "threads waiting long for a CPU",
    mechanism: false,
    select: &[
        Sel::all(&tracer::RUNQLAT_P99_USEC),
        Sel::all(&tracer::RUNQLAT_MAX_USEC),
        Sel::all(&tracer::RUNQLAT_CGROUP_P99_USEC),
        Sel::all(&process::PROC_RUNQ_WAIT_PCT),
    ],
    run,
};

fn run(d: &Data) -> Vec<Finding> {
    let st = d.stats(&tracer::RUNQLAT_P99_USEC, &[]);
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
    let cgs = top_series(d, &tracer::RUNQLAT_CGROUP_P99_USEC, |s| s.mean);
    let waiting = top_procs(d, &process::PROC_RUNQ_WAIT_PCT);
    let mut f = finding(
        &RULE,
        d,
        format!(
            "run-queue latency: p99 {:.1} ms{}",
            st.mean / 1000.0,
            cgs.first()
                .map(|(s, v)| format!(", worst in {} ({:.1} ms)", s.label(0), v / 1000.0))
                .unwrap_or_default()
        ),
        confidence(st.mean / 1000.0, 5.0, 50.0),
        waiting
            .first()
            .map(|p| proc_culprit(d, p.pid, &p.comm))
            .unwrap_or_default(),
    );
    f.evidence.push(evidence(
        d,
        &tracer::RUNQLAT_P99_USEC,
        &[],
        Take::Mean,
        "run-queue wait, 99th percentile",
    ));
    f.evidence.push(evidence(
        d,
        &tracer::RUNQLAT_MAX_USEC,
        &[],
        Take::Max,
        "longest wait",
    ));
    f.remediation.push("fewer runnable threads than CPUs for latency-critical work: a CPU quota or lower priority for the rest, or more CPUs".into());
    vec![f]
}
