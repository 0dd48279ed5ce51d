//! `cpu.softirq-storm` — one CPU's time going to soft interrupts.
//!
//! **Mechanism.** Interrupt handlers defer their bulk to soft interrupts (softirqs): network
//! receive and transmit (NET_RX, NET_TX), block I/O completions (BLOCK), timers, RCU
//! callbacks, tasklets. A softirq runs on the CPU that raised it, ahead of every task there,
//! when the interrupt returns or when the raising code re-enables bottom halves; after about
//! 2 ms (or 10 restarts) the rest goes to that CPU's `ksoftirqd/N` thread. A NIC queue whose
//! interrupts all land on one CPU (no RSS/RPS, IRQ affinity to one core), or loopback traffic
//! (whose receive half runs on the sending CPU), makes that CPU spend a large share of its
//! time there: the tasks on it wait for the CPU while the host as a whole looks idle, which is
//! why a host-wide `%soft` hides it and only the per-CPU view shows it.
//!
//! **Evidence.** The CPU's softirq share (`cpu.<cpu>.softirq_pct`, /proc/stat) against its
//! baseline; the vector that rose most on that CPU (`cpu.<cpu>.softirq.<vec>_per_s`,
//! /proc/softirqs); the host-wide share; `ksoftirqd/N`'s CPU when the work overflowed to it;
//! the process whose system time rose most (with tick accounting, a softirq taken while a task
//! ran is charged to it as system time, and a loopback or socket flow's softirq is raised by
//! its own sends).
//!
//! **Thresholds.** One CPU >= 10% in softirq on average over the window (mpstat's `%soft` at
//! which the per-CPU view is worth a look), at least 5 points and twice above its baseline
//! median. Confidence 0.5 at 10%, 0.95 at 40%.
//!
//! **Remediation.** By vector: for NET_RX/NET_TX spread the receive work (RSS queues and IRQ
//! affinity, RPS/RFS in software, threaded NAPI on 5.12+), and bound one softirq run
//! (`net.core.netdev_budget`, `netdev_budget_usecs` on 4.12+); for BLOCK complete on the
//! submitting CPU (`rq_affinity` = 2) and spread the device's queue interrupts; for RCU
//! offload callbacks (`rcu_nocbs=`); for timers, find who arms them.
//!
//! **References.** Documentation/networking/scaling.rst (RSS, RPS, RFS, XPS);
//! Documentation/networking/napi.rst (threaded NAPI); Documentation/block/queue-sysfs.rst
//! (rq_affinity); Brendan Gregg, softirqs(8) and softirqs.py in bcc.

use jitterscope_model::metrics::{cpu, irq, process};
use jitterscope_model::registry::Unit;

use super::{confidence, fact, finding, moved_first, proc_culprit, rule, top_procs_by, Res, Take};
use crate::data::{Data, Series, Stats};
use crate::{Culprit, Finding};

rule! {
    "cpu.softirq-storm",
    "one CPU's time going to soft interrupts (network receive, I/O completion, timers) ahead of its tasks",
    mechanism,
    reads: cpu::PER_CPU_SOFTIRQ_PCT, cpu::SOFTIRQ_PCT, irq::PER_CPU_SOFTIRQ_PER_S,
        irq::SOFTIRQ_PER_S, process::PROC_SYS_PCT, process::PROC_CPU_PCT,
}

/// A CPU's softirq share from which it is a storm, %.
pub const SHARE: f64 = 10.0;

/// Above its baseline by at least this many points (and twice it).
const RISE: f64 = 5.0;

/// The rise of a series' window mean over its baseline median (over 0 without a baseline).
fn rise(st: &Stats) -> f64 {
    st.mean - if st.base_n > 0 { st.base_median } else { 0.0 }
}

fn run(d: &Data) -> Vec<Finding> {
    // The CPU that went furthest above its own baseline, among those past the thresholds.
    let mut storm: Option<(&Series, Stats)> = None;
    for s in d.each(&cpu::PER_CPU_SOFTIRQ_PCT) {
        let st = d.stats_of(s);
        let base = if st.base_n > 0 { st.base_median } else { 0.0 };
        if st.n == 0 || st.mean < SHARE || st.mean < base + RISE || st.mean < 2.0 * base {
            continue;
        }
        if storm.as_ref().is_none_or(|(_, b)| rise(&st) > rise(b)) {
            storm = Some((s, st));
        }
    }
    let Some((series, st)) = storm else {
        return Vec::new();
    };
    let cpu_id = series.label(0).to_string();

    // The vector that rose most on that CPU.
    let mut vectors: Vec<(&Series, Stats)> = d
        .each(&irq::PER_CPU_SOFTIRQ_PER_S)
        .filter(|s| s.label(0) == cpu_id)
        .map(|s| (s, d.stats_of(s)))
        .filter(|(_, st)| st.n > 0 && rise(st) > 0.0)
        .collect();
    vectors.sort_by(|a, b| rise(&b.1).total_cmp(&rise(&a.1)));
    let vector = vectors.first().map(|(s, _)| s.label(1).to_string());

    // A process's level is its time-weighted average (`Data::avg`): its series are read at
    // spaced samples in a long window, where the mean would count each value once per sample.
    let avg = Data::avg;
    // Softirq work past its budget runs in ksoftirqd/N, a task the scheduler sees.
    let ksoftirqd = format!("ksoftirqd/{cpu_id}");
    let kthread = top_procs_by(d, &process::PROC_CPU_PCT, avg)
        .into_iter()
        .find(|p| p.comm == ksoftirqd);
    // The process whose system time rose most: the softirq taken while it ran, or raised by
    // its own sends, is charged to it.
    let raiser = top_procs_by(d, &process::PROC_SYS_PCT, |s| {
        avg(s) - if s.base_n > 0 { s.base_median } else { 0.0 }
    })
    .into_iter()
    .find(|p| !p.comm.starts_with("ksoftirqd/"));

    let culprit = match (&kthread, &raiser) {
        // Deferred work that took more of the CPU than any task's system time: the storm has
        // no task of its own on this CPU (a NIC's interrupts, not a local flow).
        (Some(k), r) if r.as_ref().is_none_or(|r| k.value >= r.value) => Culprit {
            pid: Some(k.pid),
            comm: Some(k.comm.clone()),
            ..Default::default()
        },
        (_, Some(r)) => proc_culprit(d, r.pid, &r.comm, Res::Cpu),
        _ => Culprit::default(),
    };
    let base = (st.base_n > 0).then_some(st.base_median);
    let mut f = finding(
        &RULE,
        d,
        format!(
            "softirq storm on CPU {cpu_id}: {:.0}% of its time in soft interrupts{}{}{}",
            st.mean,
            base.map(|b| format!(" (baseline {b:.1}%)"))
                .unwrap_or_default(),
            vector
                .as_ref()
                .map(|v| format!(", mostly {v}"))
                .unwrap_or_default(),
            match (&culprit.comm, culprit.pid) {
                (Some(c), Some(p)) if c.starts_with("ksoftirqd/") =>
                    format!("; overflowing to {c} ({p})"),
                (Some(c), Some(p)) => format!("; raised by {c} ({p})"),
                _ => String::new(),
            }
        ),
        confidence(st.mean, SHARE, 40.0),
        culprit,
    );
    f.cite(
        d,
        &cpu::PER_CPU_SOFTIRQ_PCT,
        &[&cpu_id],
        Take::Mean,
        format!("CPU {cpu_id}'s time in soft interrupts"),
    );
    f.cite(
        d,
        &cpu::SOFTIRQ_PCT,
        &[],
        Take::Mean,
        "all CPUs' time in soft interrupts: what a host-wide view shows of it",
    );
    for (s, _) in vectors.iter().take(2) {
        f.cite(
            d,
            &irq::PER_CPU_SOFTIRQ_PER_S,
            &[&cpu_id, s.label(1)],
            Take::Mean,
            format!("{} soft interrupts run on CPU {cpu_id}", s.label(1)),
        );
    }
    if let Some(k) = &kthread {
        f.evidence.push(fact(
            format!("proc.{}.{}.cpu_pct", k.pid, k.comm),
            k.value,
            Unit::Percent,
            format!("{ksoftirqd}'s CPU, mean: softirq work past its budget deferred to the thread"),
        ));
    }
    if let Some(r) = &raiser {
        f.evidence.push(fact(
            format!("proc.{}.{}.sys_pct", r.pid, r.comm),
            r.value,
            Unit::Percent,
            format!(
                "{} ({})'s system CPU, mean rise over its baseline: the process whose kernel time grew most (a softirq taken while it ran, or raised by its sends, is charged to it)",
                r.comm, r.pid
            ),
        ));
    }
    f.moved_first = moved_first(
        d,
        &vectors
            .iter()
            .take(1)
            .map(|(s, _)| (Some(*s), 100.0))
            .chain(std::iter::once((Some(series), RISE)))
            .collect::<Vec<_>>(),
    );
    f.onset = d.onset_over_baseline(series, RISE);
    remediate(&mut f, d, &cpu_id, vector.as_deref());
    f.references = vec![
        "https://docs.kernel.org/networking/scaling.html",
        "https://docs.kernel.org/networking/napi.html",
        "https://docs.kernel.org/block/queue-sysfs.html",
        "https://github.com/iovisor/bcc/blob/master/tools/softirqs_example.txt",
    ];
    vec![f]
}

/// What to change, by vector and kernel.
fn remediate(f: &mut Finding, d: &Data, cpu_id: &str, vector: Option<&str>) {
    let kernel = d.kernel_version();
    let at_least = |maj: u32, min: u32| kernel.is_some_and(|k| (k.major, k.minor) >= (maj, min));
    match vector {
        Some("NET_RX" | "NET_TX") => {
            f.remediation.push(format!(
                "spread the network work off CPU {cpu_id}: more NIC queues (ethtool -L) with their interrupts on several CPUs (/proc/irq/<n>/smp_affinity, irqbalance); without hardware queues, RPS (/sys/class/net/<dev>/queues/rx-<n>/rps_cpus) and RFS (net.core.rps_sock_flow_entries) spread it in software"
            ));
            if at_least(5, 12) {
                f.remediation.push("threaded NAPI (echo 1 > /sys/class/net/<dev>/threaded, kernel 5.12+) moves receive polling into kernel threads the scheduler can place and account".into());
            }
            f.remediation.push(if at_least(4, 12) {
                "bound one softirq run: net.core.netdev_budget (packets) and net.core.netdev_budget_usecs (time); past them the rest waits in ksoftirqd, where tasks compete fairly with it".into()
            } else {
                "bound one softirq run with net.core.netdev_budget (packets; netdev_budget_usecs needs 4.12+); past it the rest waits in ksoftirqd".into()
            });
            f.remediation.push("for traffic on loopback, batch messages (fewer, larger writes) or use a Unix socket: loopback's receive half runs on the sender's CPU".into());
        }
        Some("BLOCK" | "IRQ_POLL") => f.remediation.push(format!(
            "I/O completions on CPU {cpu_id}: complete on the submitting CPU (echo 2 > /sys/block/<dev>/queue/rq_affinity) and spread the device's queue interrupts (/proc/irq/<n>/smp_affinity), or move the heaviest I/O user"
        )),
        Some("RCU") => f.remediation.push(
            "RCU callbacks: offload them from latency-sensitive CPUs with the rcu_nocbs= boot parameter (and rcutree.use_softirq=0, 5.3+, moves RCU core processing into per-CPU threads)".into(),
        ),
        Some("TIMER" | "HRTIMER") => f.remediation.push(format!(
            "timers expiring on CPU {cpu_id}: find who arms them (perf record -e timer:timer_expire_entry, or bcc's softirqs -d) and coarsen their timeouts; nohz_full= keeps housekeeping timers off isolated CPUs"
        )),
        Some(v) => f.remediation.push(format!(
            "{v} soft interrupts on CPU {cpu_id}: move the interrupt source that raises them (its /proc/irq/<n>/smp_affinity) or the latency-sensitive tasks off that CPU"
        )),
        None => {}
    }
    f.remediation.push(format!(
        "meanwhile, keep latency-sensitive threads off CPU {cpu_id} (taskset, cpuset): its softirqs run ahead of any task on it"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten baseline seconds, then ten in the window: CPU 1 at `share` % softirq and a NET_RX
    /// rise there, CPU 0 quiet, `lab-flood` (pid 50) with rising system time.
    fn data(share: f64, ksoftirqd_pct: f64) -> Data {
        let mut d = Data::seconds(20, 10);
        for i in 0..20u32 {
            let on = i >= 10;
            d.push(&cpu::PER_CPU_SOFTIRQ_PCT, &["0"], i, 0.2);
            d.push(
                &cpu::PER_CPU_SOFTIRQ_PCT,
                &["1"],
                i,
                if on { share } else { 0.3 },
            );
            d.push(
                &cpu::SOFTIRQ_PCT,
                &[],
                i,
                if on { share / 2.0 } else { 0.25 },
            );
            d.push(
                &irq::PER_CPU_SOFTIRQ_PER_S,
                &["1", "NET_RX"],
                i,
                if on { 600_000.0 } else { 5.0 },
            );
            d.push(&irq::PER_CPU_SOFTIRQ_PER_S, &["1", "TIMER"], i, 250.0);
            d.push(
                &process::PROC_SYS_PCT,
                &["50", "lab-flood"],
                i,
                if on { 60.0 } else { 0.0 },
            );
            d.push(&process::PROC_SYS_PCT, &["7", "busy-app"], i, 30.0);
            d.push(
                &process::PROC_CPU_PCT,
                &["21", "ksoftirqd/1"],
                i,
                if on { ksoftirqd_pct } else { 0.0 },
            );
        }
        d
    }

    #[test]
    fn a_cpu_in_softirq_names_the_vector_and_the_raiser() {
        let f = run(&data(25.0, 2.0));
        assert_eq!(f.len(), 1, "{f:#?}");
        let f = &f[0];
        assert!(
            f.title.starts_with(
                "softirq storm on CPU 1: 25% of its time in soft interrupts (baseline 0.3%), mostly NET_RX; raised by lab-flood (50)"
            ),
            "{}",
            f.title
        );
        // busy-app's system time is high but flat: not a rise.
        assert_eq!(f.culprit.comm.as_deref(), Some("lab-flood"));
        assert_eq!(f.evidence[0].signal, "cpu.1.softirq_pct");
        assert_eq!(f.evidence[0].baseline, Some(0.3));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.signal == "cpu.1.softirq.NET_RX_per_s"));
        assert!(f.remediation[0].contains("RPS"), "{:?}", f.remediation);
        assert!(f.onset.is_some());
        let moved: Vec<&str> = f.moved_first.iter().map(|m| m.signal.as_str()).collect();
        assert!(
            moved.contains(&"cpu.1.softirq.NET_RX_per_s") && moved.contains(&"cpu.1.softirq_pct"),
            "{moved:?}"
        );
    }

    #[test]
    fn deferred_work_names_ksoftirqd() {
        let f = run(&data(45.0, 80.0));
        assert_eq!(f[0].culprit.comm.as_deref(), Some("ksoftirqd/1"));
        assert!(f[0].title.contains("overflowing to ksoftirqd/1 (21)"));
        assert_eq!(f[0].confidence, 0.95);
    }

    #[test]
    fn below_the_share_or_at_its_usual_level_is_not() {
        assert!(run(&data(8.0, 0.0)).is_empty());
        // A CPU that always spends 20% in softirq (a router's) has no episode.
        let mut d = Data::seconds(20, 10);
        for i in 0..20u32 {
            d.push(&cpu::PER_CPU_SOFTIRQ_PCT, &["3"], i, 20.0);
        }
        assert!(run(&d).is_empty());
    }
}
