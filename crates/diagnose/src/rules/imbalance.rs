//! `cpu.imbalance` — one CPU pinned while the others idle: a single-threaded hot spot or a
//! restricted affinity/cpuset; more CPUs do not help. A resource rule (`mechanism: false`).
//!
//! **Evidence.** Per-CPU idle (`cpu.<cpu>.idle_pct`), the busiest process.
//!
//! **Thresholds.** One CPU >= 90% busy on average while the others average <= 30%;
//! confidence by the gap (0.5 at 60 points, 0.95 at 95).
//!
//! **Remediation.** Check the thread's affinity and the cgroup's cpuset; parallelise the hot
//! thread or widen its CPU set.

use jitterscope_model::metrics::{cpu, process};
use jitterscope_model::registry::Unit;

use super::{confidence, fact, finding, proc_culprit, rule, top_procs};
use crate::data::Data;
use crate::Finding;

rule! {
    "cpu.imbalance", "one CPU pinned while the others idle", resource,
    reads: cpu::PER_CPU_IDLE_PCT, cpu::PER_CPU_IOWAIT_PCT, process::PROC_CPU_PCT,
}

fn run(d: &Data) -> Vec<Finding> {
    // Busy = 100 - idle, per CPU, by the window's mean (CPUs with no sample left out).
    let mut busy: Vec<(&str, f64)> = d
        .each(&cpu::PER_CPU_IDLE_PCT)
        .filter_map(|s| {
            let st = d.stats_of(s);
            (st.n > 0).then(|| (s.label(0), 100.0 - st.mean))
        })
        .collect();
    busy.sort_by(|a, b| b.1.total_cmp(&a.1));
    if busy.len() < 2 {
        return Vec::new();
    }
    let (cpu, hot) = busy[0];
    let rest = busy[1..].iter().map(|x| x.1).sum::<f64>() / (busy.len() - 1) as f64;
    if hot < 90.0 || rest > 30.0 {
        return Vec::new();
    }
    let top = top_procs(d, &process::PROC_CPU_PCT).into_iter().next();
    let mut f = finding(
        &RULE,
        d,
        format!("CPU imbalance: cpu{cpu} {hot:.0}% busy while the other CPUs average {rest:.0}%"),
        confidence(hot - rest, 60.0, 95.0),
        top.as_ref()
            .map(|p| proc_culprit(d, p.pid, &p.comm, super::Res::Cpu))
            .unwrap_or_default(),
    );
    f.evidence.push(fact(
        cpu::PER_CPU_IDLE_PCT.series_name(&[cpu]),
        100.0 - hot,
        Unit::Percent,
        format!("cpu{cpu} idle"),
    ));
    f.evidence.push(fact(
        "other CPUs busy",
        rest,
        Unit::Percent,
        "mean busy of the other CPUs",
    ));
    f.remediation.push("a single thread or a restricted affinity: check `taskset -p <pid>` and the cgroup's cpuset; parallelise the hot thread or widen its CPU set".into());
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two baseline samples and eight in the window: `cpus` CPUs, each with its idle % in
    /// the window, and a busy process.
    fn data(idle: &[f64]) -> Data {
        let mut d = Data::seconds(10, 2);
        for i in 0..10u32 {
            for (c, &v) in idle.iter().enumerate() {
                let v = if i < 2 { 95.0 } else { v };
                d.push(&cpu::PER_CPU_IDLE_PCT, &[&c.to_string()], i, v);
            }
            d.push(&process::PROC_CPU_PCT, &["42", "hot"], i, 99.0);
        }
        d
    }

    #[test]
    fn one_pinned_cpu_among_idle_ones_is_an_imbalance() {
        let f = run(&data(&[90.0, 2.0, 85.0, 92.0]));
        assert_eq!(f.len(), 1);
        assert!(f[0].title.contains("cpu1 98% busy"), "{}", f[0].title);
        assert_eq!(f[0].culprit.comm.as_deref(), Some("hot"));
        assert_eq!(f[0].evidence[0].signal, "cpu.1.idle_pct");
        assert!(!f[0].mechanism);
    }

    #[test]
    fn completely_idle_cpus_count_among_the_others() {
        // One pinned CPU, three doing nothing at all: the clearest imbalance there is.
        let f = run(&data(&[100.0, 1.0, 100.0, 100.0]));
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title.contains("other CPUs average 0%"),
            "{}",
            f[0].title
        );
    }

    #[test]
    fn evenly_busy_or_one_cpu_is_not() {
        assert!(run(&data(&[5.0, 3.0, 4.0, 6.0])).is_empty(), "all busy");
        assert!(
            run(&data(&[50.0, 2.0])).is_empty(),
            "the others are not idle"
        );
        assert!(
            run(&data(&[2.0])).is_empty(),
            "one CPU cannot be imbalanced"
        );
    }
}
