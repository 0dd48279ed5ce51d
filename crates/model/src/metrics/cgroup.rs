//! Per-cgroup CPU (usage, quota, CFS throttling), memory and pressure, v1 and v2 alike; block
//! I/O from v2 `io.stat` only.

use jitterscope_sources::cgroup::{Cgroup, CpuStats, IoStats, MemoryStats};

use super::{gauge, metrics, rate};
use crate::eval::{emit_delta_pct, Ctx};
use crate::registry::Emit;

fn each<'a, 'c>(
    cx: &'c Ctx<'a>,
) -> impl Iterator<Item = (&'a Cgroup, Option<&'a Cgroup>)> + use<'a, 'c> {
    cx.cur
        .cgroups
        .iter()
        .flatten()
        .map(move |c| (c, cx.prev_cgroup(&c.path)))
}

fn cpu_rate(cx: &Ctx, out: &mut Emit, f: fn(&CpuStats) -> Option<u64>, k: f64) {
    for (c, p) in each(cx) {
        let cv = c.cpu.as_ref().and_then(f);
        let pv = p.and_then(|p| p.cpu.as_ref()).and_then(f);
        rate(cx, out, &[&c.path], cv, pv, k);
    }
}

/// The rate of an `io.stat` counter summed over devices.
fn io_rate(cx: &Ctx, out: &mut Emit, f: fn(&IoStats) -> u64) {
    for (c, p) in each(cx) {
        let cv = c.io.as_ref().map(f);
        let pv = p.and_then(|p| p.io.as_ref()).map(f);
        rate(cx, out, &[&c.path], cv, pv, 1.0);
    }
}

fn mem_gauge(cx: &Ctx, out: &mut Emit, f: fn(&MemoryStats) -> Option<u64>) {
    for (c, _) in each(cx) {
        gauge(
            out,
            &[&c.path],
            c.memory.as_ref().and_then(f).map(|v| v as f64),
        );
    }
}

/// File refaults of the cgroup and its descendants. v2's memory.stat is hierarchical; v1's
/// plain keys are the cgroup's own pages and its `total_` keys the subtree's, which is what v2
/// reports. The split into `_anon`/`_file` came in 5.9; before it, `workingset_refault` was
/// file refaults only (anonymous pages had no shadow entries).
fn refault_file(m: &MemoryStats) -> Option<u64> {
    [
        "total_workingset_refault_file",
        "total_workingset_refault",
        "workingset_refault_file",
        "workingset_refault",
    ]
    .iter()
    .find_map(|k| m.stat(k))
}

/// User CPU in ns from whichever file the hierarchy has (v2 µs, v1 USER_HZ ticks).
fn user_ns(c: &CpuStats, hz: u64) -> Option<u64> {
    c.user_usec
        .map(|u| u * 1000)
        .or_else(|| c.user_ticks.map(|t| t * 1_000_000_000 / hz.max(1)))
}

fn system_ns(c: &CpuStats, hz: u64) -> Option<u64> {
    c.system_usec
        .map(|u| u * 1000)
        .or_else(|| c.system_ticks.map(|t| t * 1_000_000_000 / hz.max(1)))
}

fn quota_cores(c: &CpuStats) -> Option<f64> {
    match (c.quota_us, c.period_us) {
        (Some(q), Some(p)) if p > 0 => Some(q as f64 / p as f64),
        _ => None,
    }
}

fn pressure(
    c: &Cgroup,
) -> [(
    &'static str,
    Option<&jitterscope_sources::system::pressure::Pressure>,
); 4] {
    [
        ("cpu", c.pressure.cpu.as_ref()),
        ("memory", c.pressure.memory.as_ref()),
        ("io", c.pressure.io.as_ref()),
        ("irq", None),
    ]
}

metrics! {
    reads: CGROUPS;
    CPU_USAGE_PCT = ("cgroup.<cgroup>.cpu.usage_pct", Percent, Rate, "CPU used by the cgroup as % of one CPU (v1 cpuacct.usage, v2 cpu.stat usage_usec)", |cx, out| cpu_rate(cx, out, |c| c.usage_ns, 1e-7)),
    CPU_USER_PCT = ("cgroup.<cgroup>.cpu.user_pct", Percent, Rate, "User CPU of the cgroup as % of one CPU (v1 cpuacct.stat, v2 cpu.stat user_usec)", |cx, out| {
            let hz = cx.cur.host.user_hz;
            for (c, p) in each(cx) {
                let cv = c.cpu.as_ref().and_then(|x| user_ns(x, hz));
                let pv = p.and_then(|p| p.cpu.as_ref()).and_then(|x| user_ns(x, hz));
                rate(cx, out, &[&c.path], cv, pv, 1e-7);
            }
        }),
    CPU_SYSTEM_PCT = ("cgroup.<cgroup>.cpu.system_pct", Percent, Rate, "Kernel CPU of the cgroup as % of one CPU (v1 cpuacct.stat, v2 cpu.stat system_usec)", |cx, out| {
            let hz = cx.cur.host.user_hz;
            for (c, p) in each(cx) {
                let cv = c.cpu.as_ref().and_then(|x| system_ns(x, hz));
                let pv = p.and_then(|p| p.cpu.as_ref()).and_then(|x| system_ns(x, hz));
                rate(cx, out, &[&c.path], cv, pv, 1e-7);
            }
        }),
    CPU_USAGE_NS = ("cgroup.<cgroup>.cpu.usage_ns", Nanoseconds, Counter, "CPU time used by the cgroup since it was created (v1 cpuacct.usage, v2 cpu.stat usage_usec)", |cx, out| {
            for (c, _) in each(cx) {
                gauge(out, &[&c.path], c.cpu.as_ref().and_then(|c| c.usage_ns).map(|v| v as f64));
            }
        }),
    CPU_USER_NS = ("cgroup.<cgroup>.cpu.user_ns", Nanoseconds, Counter, "User CPU time of the cgroup since it was created (v1 cpuacct.stat, v2 cpu.stat user_usec)", |cx, out| {
            let hz = cx.cur.host.user_hz;
            for (c, _) in each(cx) {
                gauge(out, &[&c.path], c.cpu.as_ref().and_then(|x| user_ns(x, hz)).map(|v| v as f64));
            }
        }),
    CPU_SYSTEM_NS = ("cgroup.<cgroup>.cpu.system_ns", Nanoseconds, Counter, "Kernel CPU time of the cgroup since it was created (v1 cpuacct.stat, v2 cpu.stat system_usec)", |cx, out| {
            let hz = cx.cur.host.user_hz;
            for (c, _) in each(cx) {
                gauge(out, &[&c.path], c.cpu.as_ref().and_then(|x| system_ns(x, hz)).map(|v| v as f64));
            }
        }),
    CPU_QUOTA_CORES = ("cgroup.<cgroup>.cpu.quota_cores", Cores, Gauge, "CFS quota / period in CPUs; absent when unlimited (v1 cpu.cfs_quota_us, v2 cpu.max)", |cx, out| {
            for (c, _) in each(cx) {
                gauge(out, &[&c.path], c.cpu.as_ref().and_then(quota_cores));
            }
        }),
    CPU_BURST_CORES = ("cgroup.<cgroup>.cpu.burst_cores", Cores, Gauge, "CFS burst / period in CPUs (v1 cpu.cfs_burst_us, v2 cpu.max.burst; 5.14+)", |cx, out| {
            for (c, _) in each(cx) {
                let b = c.cpu.as_ref().and_then(|c| match (c.burst_us, c.period_us) {
                    (Some(b), Some(p)) if p > 0 => Some(b as f64 / p as f64),
                    _ => None,
                });
                gauge(out, &[&c.path], b);
            }
        }),
    CPU_USAGE_OF_QUOTA_PCT = ("cgroup.<cgroup>.cpu.usage_of_quota_pct", Percent, Rate, "CPU usage as % of the CFS quota: throttling while this is low is the case-2 signature", |cx, out| {
            for (c, p) in each(cx) {
                let Some(cpu) = c.cpu.as_ref() else { continue };
                let Some(q) = quota_cores(cpu) else { continue };
                let pv = p.and_then(|p| p.cpu.as_ref()).and_then(|c| c.usage_ns);
                match cx.rate(cpu.usage_ns, pv) {
                    crate::eval::Rate::Value(ns_per_s) if q > 0.0 => out(&[&c.path], Some(ns_per_s / 1e9 / q * 100.0)),
                    crate::eval::Rate::Unknown => out(&[&c.path], None),
                    _ => {}
                }
            }
        }),
    CPU_THROTTLED_PCT = ("cgroup.<cgroup>.cpu.throttled_pct", Percent, Rate, "Throttled share of enforcement periods: delta nr_throttled / delta nr_periods (cpu.stat)", |cx, out| {
            for (c, p) in each(cx) {
                let cc = c.cpu.as_ref();
                let pc = p.and_then(|p| p.cpu.as_ref());
                emit_delta_pct(
                    cx,
                    out,
                    &[&c.path],
                    (cc.and_then(|c| c.nr_throttled), pc.and_then(|c| c.nr_throttled)),
                    (cc.and_then(|c| c.nr_periods), pc.and_then(|c| c.nr_periods)),
                );
            }
        }),
    CPU_THROTTLED_MS_PER_S = ("cgroup.<cgroup>.cpu.throttled_ms_per_s", MillisecondsPerSecond, Rate, "Milliseconds of throttling per second, summed over the cgroup's CPUs (v1 throttled_time, v2 throttled_usec)", |cx, out| cpu_rate(cx, out, |c| c.throttled_ns, 1e-6)),
    CPU_NR_THROTTLED_PER_S = ("cgroup.<cgroup>.cpu.nr_throttled_per_s", PerSecond, Rate, "Enforcement periods in which the cgroup was throttled, per second (cpu.stat nr_throttled)", |cx, out| cpu_rate(cx, out, |c| c.nr_throttled, 1.0)),
    CPU_NR_PERIODS_PER_S = ("cgroup.<cgroup>.cpu.nr_periods_per_s", PerSecond, Rate, "Enforcement periods with runnable tasks, per second (cpu.stat nr_periods)", |cx, out| cpu_rate(cx, out, |c| c.nr_periods, 1.0)),
    CPU_BURSTS_PER_S = ("cgroup.<cgroup>.cpu.bursts_per_s", PerSecond, Rate, "Periods in which the cgroup used burst capacity, per second (cpu.stat nr_bursts; 5.14+)", |cx, out| cpu_rate(cx, out, |c| c.nr_bursts, 1.0)),
    MEMORY_USAGE_BYTES = ("cgroup.<cgroup>.memory.usage_bytes", Bytes, Gauge, "Memory charged to the cgroup (v1 memory.usage_in_bytes, v2 memory.current)", |cx, out| mem_gauge(cx, out, |m| m.usage_bytes)),
    MEMORY_LIMIT_BYTES = ("cgroup.<cgroup>.memory.limit_bytes", Bytes, Gauge, "Hard memory limit; absent when unlimited (v1 memory.limit_in_bytes, v2 memory.max)", |cx, out| mem_gauge(cx, out, |m| m.limit_bytes)),
    MEMORY_HIGH_BYTES = ("cgroup.<cgroup>.memory.high_bytes", Bytes, Gauge, "v2 memory.high throttling threshold; absent when unlimited", |cx, out| mem_gauge(cx, out, |m| m.high_bytes)),
    MEMORY_SWAP_BYTES = ("cgroup.<cgroup>.memory.swap_bytes", Bytes, Gauge, "Swap used by the cgroup (v2 memory.swap.current)", |cx, out| mem_gauge(cx, out, |m| m.swap_bytes)),
    MEMORY_USAGE_OF_LIMIT_PCT = ("cgroup.<cgroup>.memory.usage_of_limit_pct", Percent, Gauge, "Memory usage as % of the hard limit", |cx, out| {
            for (c, _) in each(cx) {
                let v = c.memory.as_ref().and_then(|m| match (m.usage_bytes, m.limit_bytes) {
                    (Some(u), Some(l)) if l > 0 => Some(u as f64 / l as f64 * 100.0),
                    _ => None,
                });
                gauge(out, &[&c.path], v);
            }
        }),
    MEMORY_STAT = ("cgroup.<cgroup>.memory.stat.<field>", Count, Gauge, "Every memory.stat value of the cgroup as the kernel reports it (bytes or pages per the kernel docs)", |cx, out| {
            for (c, _) in each(cx) {
                for (k, v) in c.memory.iter().flat_map(|m| &m.stat) {
                    out(&[&c.path, k], Some(*v as f64));
                }
            }
        }),
    MEMORY_REFAULT_FILE_PER_S = ("cgroup.<cgroup>.memory.refault_file_per_s", PerSecond, Rate, "File pages evicted from the cgroup and faulted back in per second, the cgroup and its descendants: where page-cache thrashing happens (memory.stat workingset_refault_file on v2, total_workingset_refault_file on v1; workingset_refault before 5.9)", |cx, out| {
            for (c, p) in each(cx) {
                let cv = c.memory.as_ref().and_then(refault_file);
                let pv = p.and_then(|p| p.memory.as_ref()).and_then(refault_file);
                rate(cx, out, &[&c.path], cv, pv, 1.0);
            }
        }),
    MEMORY_EVENTS_PER_S = ("cgroup.<cgroup>.memory.events.<event>_per_s", PerSecond, Rate, "memory.events counters per second: low, high (throttled), max (hit limit), oom, oom_kill (v2)", |cx, out| {
            for (c, p) in each(cx) {
                let Some(m) = c.memory.as_ref() else { continue };
                let pm = p.and_then(|p| p.memory.as_ref());
                for (k, v) in &m.events {
                    rate(cx, out, &[&c.path, k], Some(*v), pm.and_then(|pm| pm.event(k)), 1.0);
                }
            }
        }),
    MEMORY_FAILCNT_PER_S = ("cgroup.<cgroup>.memory.failcnt_per_s", PerSecond, Rate, "Times the cgroup hit its v1 memory limit, per second (memory.failcnt)", |cx, out| {
            for (c, p) in each(cx) {
                let cv = c.memory.as_ref().and_then(|m| m.failcnt);
                let pv = p.and_then(|p| p.memory.as_ref()).and_then(|m| m.failcnt);
                rate(cx, out, &[&c.path], cv, pv, 1.0);
            }
        }),
    MEMORY_OOM_KILL_PER_S = ("cgroup.<cgroup>.memory.oom_kill_per_s", PerSecond, Rate, "OOM kills inside the cgroup per second (v1 memory.oom_control, v2 memory.events oom_kill)", |cx, out| {
            for (c, p) in each(cx) {
                let f = |m: &MemoryStats| m.oom_kill.or_else(|| m.event("oom_kill"));
                let cv = c.memory.as_ref().and_then(f);
                let pv = p.and_then(|p| p.memory.as_ref()).and_then(f);
                rate(cx, out, &[&c.path], cv, pv, 1.0);
            }
        }),
    IO_READ_BYTES_PER_S = ("cgroup.<cgroup>.io.read_bytes_per_s", BytesPerSecond, Rate, "Bytes the cgroup read per second, summed over devices (rbytes of v2 io.stat; absent on cgroup v1)", |cx, out| io_rate(cx, out, |i| i.read_bytes)),
    IO_WRITE_BYTES_PER_S = ("cgroup.<cgroup>.io.write_bytes_per_s", BytesPerSecond, Rate, "Bytes the cgroup wrote per second, summed over devices; buffered writes count when written back (wbytes of v2 io.stat; absent on cgroup v1)", |cx, out| io_rate(cx, out, |i| i.write_bytes)),
    IO_READS_PER_S = ("cgroup.<cgroup>.io.reads_per_s", PerSecond, Rate, "Read I/Os the cgroup issued per second, summed over devices (rios of v2 io.stat; absent on cgroup v1)", |cx, out| io_rate(cx, out, |i| i.read_ios)),
    IO_WRITES_PER_S = ("cgroup.<cgroup>.io.writes_per_s", PerSecond, Rate, "Write I/Os the cgroup issued per second, summed over devices (wios of v2 io.stat; absent on cgroup v1)", |cx, out| io_rate(cx, out, |i| i.write_ios)),
    PRESSURE_SOME_PCT = ("cgroup.<cgroup>.pressure.<resource>.some_pct", Percent, Rate, "Share of the interval in which some task of the cgroup stalled (cgroup *.pressure total)", |cx, out| {
            for (c, p) in each(cx) {
                super::psi::stall_pct(cx, out, &[&c.path], pressure(c), p.map(pressure), |x| x.some.as_ref());
            }
        }),
    PRESSURE_FULL_PCT = ("cgroup.<cgroup>.pressure.<resource>.full_pct", Percent, Rate, "Share of the interval in which all tasks of the cgroup stalled at once", |cx, out| {
            for (c, p) in each(cx) {
                super::psi::stall_pct(cx, out, &[&c.path], pressure(c), p.map(pressure), |x| x.full.as_ref());
            }
        }),
    PIDS = ("cgroup.<cgroup>.pids", Count, Gauge, "Tasks in the cgroup (pids.current)", |cx, out| {
            for (c, _) in each(cx) {
                gauge(out, &[&c.path], c.pids_current.map(|v| v as f64));
            }
        }),
}
