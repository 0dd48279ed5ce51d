//! `cpu.saturation` — every CPU busy: runnable threads queue. A resource rule: it names a
//! saturated resource and who uses it, not a kernel mechanism (`mechanism: false`): a busy host
//! is not by itself jitter, but queueing on it is.
//!
//! **Evidence.** usr+sys+irq+softirq+steal (100 − idle − iowait), the busiest process
//! (`proc.<pid>.<comm>.cpu_pct`), the load average.
//!
//! **Thresholds.** Mean busy >= 80% over the window, the usual capacity-planning line;
//! confidence 0.5 there, 0.95 at 99%.
//!
//! **Remediation.** Capacity, or less batch work (nice, SCHED_IDLE, a CPU quota on its cgroup).

use jitterscope_model::metrics::{cpu, process};
use jitterscope_model::registry::Unit;

use super::{confidence, fact, finding, proc_culprit, rule, top_procs, Take};
use crate::data::Data;
use crate::Finding;

rule! {
    "cpu.saturation", "every CPU busy: runnable threads queue", resource,
    reads: cpu::IDLE_PCT, cpu::IOWAIT_PCT, cpu::USR_PCT, cpu::SYS_PCT, process::PROC_CPU_PCT,
        cpu::LOAD_AVG1,
}

fn run(d: &Data) -> Vec<Finding> {
    let idle = d.stats(&cpu::IDLE_PCT, &[]);
    let iowait = d.stats(&cpu::IOWAIT_PCT, &[]);
    if idle.n == 0 {
        return Vec::new();
    }
    let busy = 100.0 - idle.mean - iowait.mean;
    if busy < 80.0 {
        return Vec::new();
    }
    let top = top_procs(d, &process::PROC_CPU_PCT).into_iter().next();
    let mut f = finding(
        &RULE,
        d,
        format!(
            "CPU saturated: {busy:.0}% busy on average{}",
            top.as_ref()
                .map(|p| format!(
                    ", {} ({}) used {:.0}% of a CPU",
                    p.comm,
                    p.pid,
                    p.value / d.window_len().max(1) as f64
                ))
                .unwrap_or_default()
        ),
        confidence(busy, 80.0, 99.0),
        top.as_ref()
            .map(|p| proc_culprit(d, p.pid, &p.comm, super::Res::Cpu))
            .unwrap_or_default(),
    );
    f.evidence.push(fact(
        "cpu busy",
        busy,
        Unit::Percent,
        "100 - idle - iowait, mean over the window",
    ));
    f.cite(d, &cpu::USR_PCT, &[], Take::Mean, "user CPU");
    f.cite(d, &cpu::SYS_PCT, &[], Take::Mean, "system CPU");
    f.cite(d, &cpu::LOAD_AVG1, &[], Take::Max, "load average (1 min)");
    f.remediation.push("more CPU, or less work: lower the batch work's priority (nice, SCHED_IDLE) or cap its cgroup so latency-sensitive threads get a CPU".into());
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(idle: f64) -> Data {
        let mut d = Data::seconds(5, 0);
        for i in 0..5u32 {
            d.push(&cpu::IDLE_PCT, &[], i, idle);
            d.push(&cpu::IOWAIT_PCT, &[], i, 1.0);
            d.push(&cpu::USR_PCT, &[], i, 99.0 - idle);
            d.push(&process::PROC_CPU_PCT, &["5", "batch"], i, 180.0);
        }
        d
    }

    #[test]
    fn all_cpus_busy_names_the_busiest_process() {
        let f = run(&data(2.0));
        assert_eq!(f.len(), 1);
        assert!(f[0].title.contains("97% busy"), "{}", f[0].title);
        assert!(
            f[0].title.contains("batch (5) used 180% of a CPU"),
            "{}",
            f[0].title
        );
        assert!(run(&data(40.0)).is_empty());
    }
}
