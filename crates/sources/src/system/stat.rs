//! /proc/stat: CPU time per CPU and in total, context switches, forks, run queue, interrupts.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, parse_u64, ParseError};

/// Time spent per CPU state, in USER_HZ ticks (1/100 s on every mainstream architecture;
/// `sysconf(_SC_CLK_TCK)`). Columns after `idle` were added over time (iowait 2.5.41,
/// irq/softirq 2.6.0, steal 2.6.11, guest 2.6.24, guest_nice 2.6.33); a column the kernel
/// does not print is `None`, never 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuTimes {
    /// User mode, including guest time (the kernel adds guest to user).
    pub user_ticks: u64,
    /// User mode at positive nice, including guest_nice.
    pub nice_ticks: u64,
    /// Kernel mode, excluding irq and softirq.
    pub system_ticks: u64,
    /// Idle.
    pub idle_ticks: u64,
    /// Idle with I/O outstanding (unreliable per CPU; a hint, not a measure).
    pub iowait_ticks: Option<u64>,
    /// Servicing hard interrupts (zero unless IRQ time accounting is enabled).
    pub irq_ticks: Option<u64>,
    /// Servicing softirqs.
    pub softirq_ticks: Option<u64>,
    /// Stolen by the hypervisor.
    pub steal_ticks: Option<u64>,
    /// Running a guest vCPU (already included in `user_ticks`).
    pub guest_ticks: Option<u64>,
    /// Running a niced guest vCPU (already included in `nice_ticks`).
    pub guest_nice_ticks: Option<u64>,
}

/// One `cpuN` line. Offline CPUs have no line, so CPUs are identified by id, not position.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuStat {
    /// CPU id (N of `cpuN`).
    pub cpu: u32,
    /// Its times.
    pub times: CpuTimes,
}

/// The parsed file. Lines absent on a kernel are `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stat {
    /// The `cpu` line: the sum over all CPUs.
    pub total: CpuTimes,
    /// The `cpuN` lines, in file order.
    pub cpus: Vec<CpuStat>,
    /// `ctxt`: context switches since boot.
    pub context_switches: Option<u64>,
    /// `btime`: boot time, seconds since the Unix epoch.
    pub boot_time_sec: Option<u64>,
    /// `processes`: forks (processes and threads created) since boot.
    pub forks: Option<u64>,
    /// `procs_running`: runnable tasks right now (a gauge).
    pub procs_running: Option<u64>,
    /// `procs_blocked`: tasks in uninterruptible I/O wait right now (a gauge).
    pub procs_blocked: Option<u64>,
    /// First number of `intr`: all interrupts serviced since boot.
    pub interrupts_total: Option<u64>,
    /// First number of `softirq`: all softirqs serviced since boot.
    pub softirqs_total: Option<u64>,
}

fn parse_cpu_times<'a>(
    mut it: impl Iterator<Item = &'a [u8]>,
    n: usize,
) -> Result<CpuTimes, ParseError> {
    let mut req = |what| match it.next() {
        Some(f) => parse_u64(f, n, what),
        None => Err(ParseError::new(n, format!("cpu line without {what}"))),
    };
    let mut t = CpuTimes {
        user_ticks: req("user")?,
        nice_ticks: req("nice")?,
        system_ticks: req("system")?,
        idle_ticks: req("idle")?,
        ..CpuTimes::default()
    };
    let optional = [
        &mut t.iowait_ticks,
        &mut t.irq_ticks,
        &mut t.softirq_ticks,
        &mut t.steal_ticks,
        &mut t.guest_ticks,
        &mut t.guest_nice_ticks,
    ];
    for slot in optional {
        match it.next() {
            Some(f) => *slot = Some(parse_u64(f, n, "cpu time")?),
            None => break,
        }
    }
    Ok(t)
}

fn first_number<'a>(
    mut it: impl Iterator<Item = &'a [u8]>,
    n: usize,
    what: &str,
) -> Result<u64, ParseError> {
    let f = it
        .next()
        .ok_or_else(|| ParseError::new(n, format!("{what} without a value")))?;
    parse_u64(f, n, what)
}

/// Parses /proc/stat. Requires the `cpu` total line; ignores lines it does not know (`page`,
/// `swap` on 2.4 kernels).
pub fn parse_stat(buf: &[u8]) -> Result<Stat, ParseError> {
    let mut s = Stat::default();
    let mut seen_total = false;
    for (n, l) in lines(buf) {
        let mut it = fields(l);
        let Some(key) = it.next() else { continue };
        match key {
            b"cpu" => {
                s.total = parse_cpu_times(it, n)?;
                seen_total = true;
            }
            _ if key.starts_with(b"cpu") => {
                let cpu = super::parse_u32(&key[3..], n, "cpu id")?;
                let times = parse_cpu_times(it, n)?;
                s.cpus.push(CpuStat { cpu, times });
            }
            b"ctxt" => s.context_switches = Some(first_number(it, n, "ctxt")?),
            b"btime" => s.boot_time_sec = Some(first_number(it, n, "btime")?),
            b"processes" => s.forks = Some(first_number(it, n, "processes")?),
            b"procs_running" => s.procs_running = Some(first_number(it, n, "procs_running")?),
            b"procs_blocked" => s.procs_blocked = Some(first_number(it, n, "procs_blocked")?),
            // Only the totals: the per-IRQ columns are in /proc/interrupts with names.
            b"intr" => s.interrupts_total = Some(first_number(it, n, "intr")?),
            b"softirq" => s.softirqs_total = Some(first_number(it, n, "softirq")?),
            _ => {}
        }
    }
    if !seen_total {
        return Err(ParseError::new(0, "no cpu total line"));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::fixtures;

    #[test]
    fn parses_captured_stat() {
        let s = parse_stat(&fixtures::read("host/proc/stat")).unwrap();
        assert_eq!(s.cpus.len(), 2);
        assert_eq!(s.cpus[1].cpu, 1);
        assert_eq!(s.total.user_ticks, 18228);
        assert_eq!(s.total.guest_nice_ticks, Some(0));
        assert_eq!(s.total.steal_ticks, Some(13));
        // The total line is the sum of the CPU lines.
        let user: u64 = s.cpus.iter().map(|c| c.times.user_ticks).sum();
        assert_eq!(user, s.total.user_ticks);
        assert_eq!(s.context_switches, Some(263347));
        assert_eq!(s.boot_time_sec, Some(1795306709));
        assert_eq!(s.forks, Some(4482));
        assert_eq!(s.procs_running, Some(2));
        assert_eq!(s.procs_blocked, Some(0));
        assert_eq!(s.interrupts_total, Some(171648));
        assert_eq!(s.softirqs_total, Some(85929));
    }

    #[test]
    fn old_kernel_has_fewer_columns() {
        let s = parse_stat(&fixtures::read("edge/stat-2.6.18")).unwrap();
        assert_eq!(s.total.steal_ticks, Some(0));
        assert_eq!(s.total.guest_ticks, None);
        assert_eq!(s.total.guest_nice_ticks, None);
        assert_eq!(s.cpus.len(), 2);
        assert_eq!(s.softirqs_total, None);
    }

    #[test]
    fn offline_cpu_keeps_ids() {
        let s = parse_stat(b"cpu 1 2 3 4\ncpu0 1 1 1 1\ncpu2 0 1 2 3\n").unwrap();
        let ids: Vec<u32> = s.cpus.iter().map(|c| c.cpu).collect();
        assert_eq!(ids, [0, 2]);
        assert_eq!(s.total.iowait_ticks, None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_stat(b"").is_err());
        assert!(parse_stat(b"cpu 1 2 3\n").is_err());
        assert!(parse_stat(b"cpu 1 2 3 4\ncpux 1 2 3 4\n").is_err());
        assert!(parse_stat(b"cpu 1 2 3 4\nctxt\n").is_err());
        assert!(parse_stat(b"cpu 1 2 3 x\n").is_err());
    }
}
