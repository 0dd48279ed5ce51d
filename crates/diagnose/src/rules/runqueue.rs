//! `sched.runqueue-latency` — threads waiting long for a CPU. A resource rule
//! (`mechanism: false`).
//!
//! **Evidence.** Run-queue wait p99 and maximum (runqlat tracer), per CPU cgroup when
//! recorded, and the processes that waited most (`proc.<pid>.<comm>.runq_wait_pct`, which is
//! the main thread's wait only: /proc/<pid>/schedstat is the thread-group leader's).
//!
//! **Thresholds.** Window mean p99 >= 5 ms and >= 10x the baseline median (when there is a
//! baseline): a few ms is a lost timeslice, a jump over the host's own normal is queueing.
//! Confidence 0.5 at 5 ms, 0.95 at 50 ms.
//!
//! **Remediation.** Fewer runnable threads than CPUs for latency-critical work: a CPU quota or
//! lower priority for the rest, or more CPUs.

use jitterscope_model::metrics::{process, tracer};

use super::{
    cgroup_culprit, confidence, finding, proc_culprit, rule, series_fact, top_procs, top_series,
    Take,
};
use crate::data::Data;
use crate::Finding;

rule! {
    "sched.runqueue-latency", "threads waiting long for a CPU", resource,
    reads: tracer::RUNQLAT_P99_USEC, tracer::RUNQLAT_MAX_USEC, tracer::RUNQLAT_CGROUP_P99_USEC,
        process::PROC_RUNQ_WAIT_PCT,
}

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
    // The waits are where they are worst: a process of that cgroup waited, and a thread
    // elsewhere (a kernel thread in `/`) that waited a little is not the culprit of a
    // cgroup's queueing. With no process of it seen waiting, the cgroup itself.
    let worst = cgs.first().map(|(s, _)| s.label(0)).filter(|cg| *cg != "/");
    let culprit = match worst {
        Some(cg) => waiting
            .iter()
            .find(|p| {
                d.procs
                    .get(&p.pid)
                    .and_then(|x| x.cgroup.as_deref())
                    .is_some_and(|x| super::pagecache::within(x, cg))
            })
            .map(|p| proc_culprit(d, p.pid, &p.comm, super::Res::Cpu))
            .unwrap_or_else(|| cgroup_culprit(d, cg)),
        None => waiting
            .first()
            .map(|p| proc_culprit(d, p.pid, &p.comm, super::Res::Cpu))
            .unwrap_or_default(),
    };
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
        culprit,
    );
    f.cite(
        d,
        &tracer::RUNQLAT_P99_USEC,
        &[],
        Take::Mean,
        "run-queue wait, 99th percentile",
    );
    f.cite(d, &tracer::RUNQLAT_MAX_USEC, &[], Take::Max, "longest wait");
    if let Some((s, v)) = cgs.first() {
        f.evidence.push(series_fact(
            s,
            *v,
            Take::Mean,
            format!("run-queue wait p99 of cgroup {}, the worst", s.label(0)),
        ));
    }
    f.remediation.push("fewer runnable threads than CPUs for latency-critical work: a CPU quota or lower priority for the rest, or more CPUs".into());
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five baseline samples at `base` µs of p99 and five in the window at `win` µs.
    fn data(base: f64, win: f64) -> Data {
        let mut d = Data::seconds(10, 5);
        d.procs.insert(
            9,
            crate::data::Proc {
                comm: "api".into(),
                cgroup: Some("/batch".into()),
                ..Default::default()
            },
        );
        d.procs.insert(
            15,
            crate::data::Proc {
                comm: "rcu_preempt".into(),
                cgroup: Some("/".into()),
                ..Default::default()
            },
        );
        for i in 0..10u32 {
            // A kernel thread that waited more, outside the cgroup where waits are worst.
            d.push(
                &process::PROC_RUNQ_WAIT_PCT,
                &["15", "rcu_preempt"],
                i,
                60.0,
            );
            let v = if i < 5 { base } else { win };
            d.push(&tracer::RUNQLAT_P99_USEC, &[], i, v);
            d.push(&tracer::RUNQLAT_MAX_USEC, &[], i, v * 2.0);
            d.push(&tracer::RUNQLAT_CGROUP_P99_USEC, &["/batch"], i, v);
            d.push(&process::PROC_RUNQ_WAIT_PCT, &["9", "api"], i, 40.0);
        }
        d
    }

    #[test]
    fn waits_of_milliseconds_far_over_the_baseline_are_found() {
        let f = run(&data(200.0, 20_000.0));
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title
                .contains("p99 20.0 ms, worst in /batch (20.0 ms)"),
            "{}",
            f[0].title
        );
        assert_eq!(f[0].culprit.comm.as_deref(), Some("api"));
        assert_eq!(f[0].culprit.cgroup.as_deref(), Some("/batch"));
        let e = &f[0].evidence[0];
        assert_eq!(
            (e.signal.as_str(), e.unit.as_str()),
            ("runqlat.p99_usec", "microseconds")
        );
        assert_eq!(e.baseline, Some(200.0));
    }

    #[test]
    fn short_or_usual_waits_are_not() {
        assert!(run(&data(200.0, 3000.0)).is_empty(), "under 5 ms");
        assert!(
            run(&data(8000.0, 20_000.0)).is_empty(),
            "this host's normal"
        );
    }
}
