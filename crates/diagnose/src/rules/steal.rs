//! `cpu.steal` — the hypervisor ran something else on this virtual machine's CPUs.
//!
//! **Mechanism.** A vCPU is a thread of the hypervisor's host. When the host runs other work on
//! the physical CPU (another tenant's vCPUs, its own I/O threads), or a burstable instance has
//! spent its CPU credits, the guest's vCPU is runnable but not running: the time passes in the
//! guest without any of its tasks making progress. Paravirtual steal accounting (KVM's steal
//! time, Xen's runstate, VMware's steal clock) reports it as `steal` in /proc/stat. Every task on that vCPU
//! sees the stall; nothing inside the guest caused it, and nothing inside it can fix it.
//!
//! **Evidence.** `cpu.steal_pct` (all CPUs) and the most stolen CPU's `cpu.<cpu>.steal_pct`
//! against their baseline medians; the CPUs stolen from.
//!
//! **Thresholds.** One CPU >= 10% stolen on average over the window, or all CPUs >= 5%; and at
//! least 3 points above the baseline (the window worse than usual: the episode). Confidence
//! 0.5 at 10%, 0.95 at 40% of the worst CPU. A steady steal, as high before the window as in
//! it, is chronic oversubscription rather than this episode's cause: no finding.
//!
//! **Culprit.** None inside the guest: the finding says so, and names the CPUs.
//!
//! **Remediation.** A larger or non-burstable instance type (or one with credits to spare), a
//! dedicated host, or, where the operator owns the hypervisor, vCPUs pinned to physical CPUs
//! not shared with other guests.
//!
//! **References.** Documentation/virt/kvm/x86/msr.rst (MSR_KVM_STEAL_TIME); the /proc/stat
//! section of Documentation/filesystems/proc.rst; Brendan Gregg, "Systems Performance", 2nd ed.,
//! 11.1 (CPU steal).

use jitterscope_model::metrics::cpu;
use jitterscope_model::registry::Unit;

use super::{confidence, fact, finding, moved_first, rule, Take};
use crate::data::{Data, Series, Stats};
use crate::{Culprit, Finding};

rule! {
    "cpu.steal",
    "the hypervisor ran other work on this virtual machine's CPUs: its tasks stalled with nothing inside to blame",
    mechanism,
    reads: cpu::STEAL_PCT, cpu::PER_CPU_STEAL_PCT,
}

/// One CPU's stolen share from which the window is an episode, %.
pub const CPU_SHARE: f64 = 10.0;

/// All CPUs' stolen share from which the window is an episode, %.
pub const HOST_SHARE: f64 = 5.0;

/// Above the baseline by at least this many points.
const RISE: f64 = 3.0;

fn base(st: &Stats) -> f64 {
    if st.base_n > 0 {
        st.base_median
    } else {
        0.0
    }
}

fn run(d: &Data) -> Vec<Finding> {
    let host = d.stats(&cpu::STEAL_PCT, &[]);
    let mut cpus: Vec<(&Series, Stats)> = d
        .each(&cpu::PER_CPU_STEAL_PCT)
        .map(|s| (s, d.stats_of(s)))
        .filter(|(_, st)| st.n > 0)
        .collect();
    cpus.sort_by(|a, b| b.1.mean.total_cmp(&a.1.mean));
    // The CPU that went furthest over its own baseline among those past the thresholds (a CPU
    // stolen from all along must not hide one that just started), else the most stolen.
    let past = |st: &Stats| st.mean >= CPU_SHARE && st.mean >= base(st) + RISE;
    let worst = cpus
        .iter()
        .filter(|(_, st)| past(st))
        .max_by(|a, b| (a.1.mean - base(&a.1)).total_cmp(&(b.1.mean - base(&b.1))))
        .or(cpus.first());
    let cpu_hit = worst.is_some_and(|(_, st)| past(st));
    let host_hit = host.n > 0 && host.mean >= HOST_SHARE && host.mean >= base(&host) + RISE;
    if !cpu_hit && !host_hit {
        return Vec::new();
    }
    let stolen: Vec<String> = cpus
        .iter()
        .filter(|(_, st)| st.mean >= RISE)
        .take(8)
        .map(|(s, st)| format!("CPU {} {:.0}%", s.label(0), st.mean))
        .collect();
    let top = worst.map(|(_, st)| st.mean).unwrap_or(host.mean);
    let mut f = finding(
        &RULE,
        d,
        format!(
            "CPU steal: the hypervisor took {:.0}% of all CPUs{} (baseline {:.1}%); no process in this machine caused it",
            host.mean,
            if stolen.is_empty() {
                String::new()
            } else {
                format!(" ({})", stolen.join(", "))
            },
            base(&host),
        ),
        confidence(top, CPU_SHARE, 40.0),
        Culprit::default(),
    );
    f.cite(
        d,
        &cpu::STEAL_PCT,
        &[],
        Take::Mean,
        "time the hypervisor did not run this machine's CPUs, all CPUs",
    );
    if let Some((s, _)) = worst {
        f.cite(
            d,
            &cpu::PER_CPU_STEAL_PCT,
            &[s.label(0)],
            Take::Mean,
            format!("the most stolen CPU, {}", s.label(0)),
        );
        f.cite(
            d,
            &cpu::PER_CPU_STEAL_PCT,
            &[s.label(0)],
            Take::Max,
            "its worst second",
        );
    }
    f.evidence.push(fact(
        "cpus stolen from",
        stolen.len() as f64,
        Unit::Count,
        "CPUs with >= 3% steal on average: all of them is a host or instance-wide shortage, one or two a noisy neighbour on those physical cores",
    ));
    f.moved_first = moved_first(d, &[(d.get(&cpu::STEAL_PCT, &[]), RISE)]);
    f.onset = worst.and_then(|(s, _)| d.onset_over_baseline(s, RISE));
    f.notes.push("steal is time the guest's vCPUs were runnable but the hypervisor ran something else: look at the hypervisor's side (other guests, the instance's CPU credits), not at this machine's processes".into());
    f.remediation.push("on a burstable instance type (CPU credits), move to a fixed-performance type or one whose baseline covers this load: spent credits show as steal".into());
    f.remediation.push("a larger instance, or a dedicated host, so this machine's vCPUs do not share physical cores with other tenants".into());
    f.remediation.push("where you run the hypervisor: pin this guest's vCPUs to physical CPUs no other guest uses, and do not overcommit vCPUs on them".into());
    f.references = vec![
        "https://docs.kernel.org/virt/kvm/x86/msr.html",
        "https://docs.kernel.org/filesystems/proc.html",
    ];
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten baseline seconds at `before` % steal on CPU 0, then ten at `during`; CPU 1 quiet.
    fn data(before: f64, during: f64) -> Data {
        let mut d = Data::seconds(20, 10);
        for i in 0..20u32 {
            let v = if i >= 10 { during } else { before };
            d.push(&cpu::PER_CPU_STEAL_PCT, &["0"], i, v);
            d.push(&cpu::PER_CPU_STEAL_PCT, &["1"], i, 0.5);
            d.push(&cpu::STEAL_PCT, &[], i, (v + 0.5) / 2.0);
        }
        d
    }

    #[test]
    fn steal_on_a_cpu_names_the_hypervisor_not_a_process() {
        let f = run(&data(0.5, 30.0));
        assert_eq!(f.len(), 1);
        let f = &f[0];
        assert!(
            f.title
                .starts_with("CPU steal: the hypervisor took 15% of all CPUs (CPU 0 30%)"),
            "{}",
            f.title
        );
        assert!(f.title.contains("no process in this machine caused it"));
        assert_eq!(f.culprit, Culprit::default());
        assert_eq!(f.evidence[1].signal, "cpu.0.steal_pct");
        assert_eq!(f.evidence[1].baseline, Some(0.5));
        assert!(f.onset.is_some());
    }

    #[test]
    fn a_cpu_stolen_from_all_along_does_not_hide_a_new_one() {
        let mut d = Data::seconds(20, 10);
        for i in 0..20u32 {
            d.push(&cpu::PER_CPU_STEAL_PCT, &["0"], i, 30.0);
            d.push(
                &cpu::PER_CPU_STEAL_PCT,
                &["1"],
                i,
                if i >= 10 { 20.0 } else { 0.0 },
            );
            d.push(&cpu::STEAL_PCT, &[], i, if i >= 10 { 25.0 } else { 15.0 });
        }
        let f = run(&d);
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].evidence[1].signal, "cpu.1.steal_pct",
            "{:#?}",
            f[0].evidence
        );
    }

    #[test]
    fn little_or_chronic_steal_is_not_this_episode() {
        assert!(run(&data(0.5, 6.0)).is_empty());
        // As high before the window as in it: oversubscribed all along.
        assert!(run(&data(28.0, 30.0)).is_empty());
    }
}
