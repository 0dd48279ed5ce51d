//! CPU time (/proc/stat, host and per CPU), scheduler counters and load average.

use jitterscope_sources::system::stat::{CpuTimes, Stat};

use super::{gauge, metrics, rate};
use crate::eval::Ctx;
use crate::registry::{Emit, EvalFn};

type Field = fn(&CpuTimes) -> Option<u64>;
/// The host-wide and the per-CPU evaluation of one /proc/stat field.
type HostAndPerCpu = (EvalFn, EvalFn);

fn busy_total(t: &CpuTimes) -> u64 {
    // guest time is already included in user time, so it is not added again.
    t.user_ticks
        + t.nice_ticks
        + t.system_ticks
        + t.idle_ticks
        + t.iowait_ticks.unwrap_or(0)
        + t.irq_ticks.unwrap_or(0)
        + t.softirq_ticks.unwrap_or(0)
        + t.steal_ticks.unwrap_or(0)
}

/// Share of one field in the interval's total ticks: exact however many CPUs and whatever the
/// tick rate, and immune to the interval being a little longer or shorter than configured.
fn share(cx: &Ctx, out: &mut Emit, labels: &[&str], cur: &CpuTimes, prev: &CpuTimes, f: Field) {
    let (Some(c), Some(p)) = (f(cur), f(prev)) else {
        return;
    };
    match (
        cx.delta(Some(c), Some(p)),
        cx.delta(Some(busy_total(cur)), Some(busy_total(prev))),
    ) {
        (_, Some(0)) => {}
        (Some(n), Some(d)) => out(labels, Some(n as f64 / d as f64 * 100.0)),
        _ => out(labels, None),
    }
}

fn host(cx: &Ctx, out: &mut Emit, f: Field) {
    if let (Some(c), Some(p)) = (&cx.cur.stat, cx.prev.and_then(|p| p.stat.as_ref())) {
        share(cx, out, &[], &c.total, &p.total, f);
    }
}

fn per_cpu(cx: &Ctx, out: &mut Emit, f: Field) {
    let (Some(c), Some(p)) = (&cx.cur.stat, cx.prev.and_then(|p| p.stat.as_ref())) else {
        return;
    };
    for cc in &c.cpus {
        if let Some(pc) = p.cpus.iter().find(|x| x.cpu == cc.cpu) {
            let id = cc.cpu.to_string();
            share(cx, out, &[&id], &cc.times, &pc.times, f);
        }
    }
}

fn stat_rate(cx: &Ctx, out: &mut Emit, f: fn(&Stat) -> Option<u64>) {
    let c = cx.cur.stat.as_ref().and_then(f);
    let p = cx.prev.and_then(|p| p.stat.as_ref()).and_then(f);
    rate(cx, out, &[], c, p, 1.0);
}

/// Mean run-queue wait per timeslice over the interval, every thread's (the task iterator's
/// sums; absent when processes come from /proc, which has only the leaders').
fn wait_per_slice_us(cx: &Ctx, out: &mut Emit) {
    let scan = |s: &crate::sample::Sample| {
        s.process_scan
            .as_ref()
            .and_then(|p| p.thread_wait_ns.zip(p.thread_slices))
    };
    let cur = scan(cx.cur);
    let prev = cx.prev.and_then(scan);
    let wait = cx.delta(cur.map(|c| c.0), prev.map(|p| p.0));
    let slices = cx.delta(cur.map(|c| c.1), prev.map(|p| p.1));
    if let (Some(w), Some(n)) = (wait, slices.filter(|&n| n > 0)) {
        out(&[], Some(w as f64 / n as f64 / 1000.0));
    }
}

fn stat_gauge(cx: &Ctx, out: &mut Emit, f: fn(&Stat) -> Option<u64>) {
    gauge(out, &[], cx.cur.stat.as_ref().and_then(f).map(|v| v as f64));
}

/// The host's CPU time since boot by mode, in seconds (/proc/stat's USER_HZ ticks): the kernel's
/// own counters, as node_exporter's `node_cpu_seconds_total`, so `rate()` over any range of
/// any scrape interval is exact, where a 1 s percentage sampled every 15 s is one second in 15.
fn seconds_by_mode(cx: &Ctx, out: &mut Emit) {
    let Some(s) = &cx.cur.stat else { return };
    let t = &s.total;
    let hz = cx.user_hz();
    for (mode, ticks) in [
        ("user", Some(t.user_ticks)),
        ("nice", Some(t.nice_ticks)),
        ("system", Some(t.system_ticks)),
        ("idle", Some(t.idle_ticks)),
        ("iowait", t.iowait_ticks),
        ("irq", t.irq_ticks),
        ("softirq", t.softirq_ticks),
        ("steal", t.steal_ticks),
    ] {
        if let Some(ticks) = ticks {
            out(&[mode], Some(ticks as f64 / hz));
        }
    }
}

macro_rules! cpu_pair {
    ($f:expr) => {
        (
            (|cx: &Ctx, out: &mut Emit| host(cx, out, $f)) as EvalFn,
            (|cx: &Ctx, out: &mut Emit| per_cpu(cx, out, $f)) as EvalFn,
        )
    };
}

const USR: HostAndPerCpu = cpu_pair!(|t| Some(t.user_ticks));
const NICE: HostAndPerCpu = cpu_pair!(|t| Some(t.nice_ticks));
const SYS: HostAndPerCpu = cpu_pair!(|t| Some(t.system_ticks));
const IDLE: HostAndPerCpu = cpu_pair!(|t| Some(t.idle_ticks));
const IOWAIT: HostAndPerCpu = cpu_pair!(|t| t.iowait_ticks);
const IRQ: HostAndPerCpu = cpu_pair!(|t| t.irq_ticks);
const SOFTIRQ: HostAndPerCpu = cpu_pair!(|t| t.softirq_ticks);
const STEAL: HostAndPerCpu = cpu_pair!(|t| t.steal_ticks);

metrics! {
    reads: NONE;
    USR_PCT = ("cpu.usr_pct", Percent, Rate, "User time (excluding nice) as % of all CPUs (/proc/stat)", USR.0),
    NICE_PCT = ("cpu.nice_pct", Percent, Rate, "Niced user time as % of all CPUs (/proc/stat)", NICE.0),
    SYS_PCT = ("cpu.sys_pct", Percent, Rate, "Kernel time as % of all CPUs: reclaim, lock contention, syscalls (/proc/stat)", SYS.0),
    IRQ_PCT = ("cpu.irq_pct", Percent, Rate, "Hard-interrupt time as % of all CPUs (/proc/stat)", IRQ.0),
    SOFTIRQ_PCT = ("cpu.softirq_pct", Percent, Rate, "Soft-interrupt time as % of all CPUs (/proc/stat)", SOFTIRQ.0),
    IOWAIT_PCT = ("cpu.iowait_pct", Percent, Rate, "Idle time with I/O outstanding as % of all CPUs (/proc/stat)", IOWAIT.0),
    STEAL_PCT = ("cpu.steal_pct", Percent, Rate, "Time stolen by the hypervisor as % of all CPUs (/proc/stat)", STEAL.0),
    IDLE_PCT = ("cpu.idle_pct", Percent, Rate, "Idle time as % of all CPUs (/proc/stat)", IDLE.0),
    SECONDS = ("cpu.<mode>_seconds", Seconds, Counter, "CPU time of all CPUs since boot by mode (user, nice, system, idle, iowait, irq, softirq, steal), seconds (/proc/stat)", seconds_by_mode),
    PER_CPU_USR_PCT = ("cpu.<cpu>.usr_pct", Percent, Rate, "User time of one CPU, % (/proc/stat cpuN)", USR.1),
    PER_CPU_NICE_PCT = ("cpu.<cpu>.nice_pct", Percent, Rate, "Niced user time of one CPU, % (/proc/stat cpuN)", NICE.1),
    PER_CPU_SYS_PCT = ("cpu.<cpu>.sys_pct", Percent, Rate, "Kernel time of one CPU, % (/proc/stat cpuN)", SYS.1),
    PER_CPU_IRQ_PCT = ("cpu.<cpu>.irq_pct", Percent, Rate, "Hard-interrupt time of one CPU, % (/proc/stat cpuN)", IRQ.1),
    PER_CPU_SOFTIRQ_PCT = ("cpu.<cpu>.softirq_pct", Percent, Rate, "Soft-interrupt time of one CPU, % (/proc/stat cpuN)", SOFTIRQ.1),
    PER_CPU_IOWAIT_PCT = ("cpu.<cpu>.iowait_pct", Percent, Rate, "I/O wait of one CPU, % (/proc/stat cpuN)", IOWAIT.1),
    PER_CPU_STEAL_PCT = ("cpu.<cpu>.steal_pct", Percent, Rate, "Steal time of one CPU, % (/proc/stat cpuN)", STEAL.1),
    PER_CPU_IDLE_PCT = ("cpu.<cpu>.idle_pct", Percent, Rate, "Idle time of one CPU, % (/proc/stat cpuN)", IDLE.1),
    SCHED_CTXT_PER_S = ("sched.ctxt_per_s", PerSecond, Rate, "Context switches per second, all CPUs (/proc/stat ctxt)", |cx, out| stat_rate(cx, out, |s| s.context_switches)),
    SCHED_FORKS_PER_S = ("sched.forks_per_s", PerSecond, Rate, "Processes and threads created per second (/proc/stat processes)", |cx, out| stat_rate(cx, out, |s| s.forks)),
    SCHED_PROCS_RUNNING = ("sched.procs_running", Count, Gauge, "Runnable tasks right now (/proc/stat procs_running)", |cx, out| stat_gauge(cx, out, |s| s.procs_running)),
    SCHED_PROCS_BLOCKED = ("sched.procs_blocked", Count, Gauge, "Tasks blocked on I/O right now (/proc/stat procs_blocked)", |cx, out| stat_gauge(cx, out, |s| s.procs_blocked)),
    SCHED_WAIT_PER_SLICE_USEC = ("sched.wait_per_slice_usec", Microseconds, Rate, "Mean run-queue wait per timeslice, every thread of the host (sched_info run_delay over pcount, from the BPF task iterator): what attaches the runqlat tracer", wait_per_slice_us),
    LOAD_AVG1 = ("load.avg1", Ratio, Gauge, "1-minute load average (/proc/loadavg)", |cx, out| gauge(out, &[], cx.cur.loadavg.as_ref().map(|l| l.load1))),
    LOAD_AVG5 = ("load.avg5", Ratio, Gauge, "5-minute load average (/proc/loadavg)", |cx, out| gauge(out, &[], cx.cur.loadavg.as_ref().map(|l| l.load5))),
    LOAD_AVG15 = ("load.avg15", Ratio, Gauge, "15-minute load average (/proc/loadavg)", |cx, out| gauge(out, &[], cx.cur.loadavg.as_ref().map(|l| l.load15))),
    LOAD_THREADS = ("load.threads", Count, Gauge, "Threads on the system (/proc/loadavg)", |cx, out| gauge(out, &[], cx.cur.loadavg.as_ref().map(|l| l.threads as f64))),
}

#[cfg(test)]
mod tests {
    use crate::derive::evaluate;
    use crate::metrics::all;
    use crate::sample::Sample;
    use jitterscope_sources::process::ProcessScanStats;

    fn at(s: u64, scan: Option<(u64, u64)>) -> Sample {
        let mut x = Sample {
            mono_ns: s * 1_000_000_000,
            interval_ns: 1_000_000_000,
            ..Default::default()
        };
        x.process_scan = Some(ProcessScanStats {
            thread_wait_ns: scan.map(|s| s.0),
            thread_slices: scan.map(|s| s.1),
            ..Default::default()
        });
        x
    }

    fn mean(cur: &Sample, prev: &Sample) -> Option<f64> {
        evaluate(all(), cur, Some(prev), &[])
            .into_iter()
            .find(|v| v.series == "sched.wait_per_slice_usec")
            .and_then(|v| v.value)
    }

    #[test]
    fn mean_wait_per_timeslice_is_the_interval_s_wait_over_its_slices() {
        // 3 ms of waits over 1,500 timeslices: 2 us each.
        let prev = at(1, Some((10_000_000, 500)));
        let cur = at(2, Some((13_000_000, 2_000)));
        assert_eq!(mean(&cur, &prev), Some(2.0));
        // No timeslice, a counter gone back (a new recorder) or /proc as the source: no value.
        assert_eq!(mean(&at(2, Some((10_000_000, 500))), &prev), None);
        assert_eq!(mean(&at(2, Some((1_000, 10))), &prev), None);
        assert_eq!(mean(&at(2, None), &prev), None);
    }
}
