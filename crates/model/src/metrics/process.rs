//! Per-process metrics and host-wide process-state counts.

use jitterscope_sources::process::{Process, PF_EXITING};

use super::{gauge, metrics, rate};
use crate::eval::Ctx;
use crate::registry::Emit;

fn each<'a, 'c>(
    cx: &'c Ctx<'a>,
) -> impl Iterator<Item = (&'a Process, Option<&'a Process>)> + use<'a, 'c> {
    cx.cur
        .processes
        .iter()
        .flatten()
        .map(move |p| (p, cx.prev_process(p.stat.pid, p.stat.starttime_ticks)))
}

fn proc_rate(cx: &Ctx, out: &mut Emit, f: fn(&Process) -> Option<u64>, k: f64) {
    for (c, p) in each(cx) {
        let mut pid = itoa::Buffer::new();
        let pid = pid.format(c.stat.pid);
        rate(cx, out, &[pid, &c.stat.comm], f(c), p.and_then(f), k);
    }
}

fn proc_gauge(cx: &Ctx, out: &mut Emit, f: fn(&Process, &Ctx) -> Option<f64>) {
    for (c, _) in each(cx) {
        let mut pid = itoa::Buffer::new();
        let pid = pid.format(c.stat.pid);
        gauge(out, &[pid, &c.stat.comm], f(c, cx));
    }
}

/// Each process's CPU time since it started, user and system, in seconds: the kernel's
/// counters, so a scrape every 15 s still sees every second of CPU.
fn cpu_seconds(cx: &Ctx, out: &mut Emit) {
    let hz = cx.user_hz();
    for (c, _) in each(cx) {
        let mut pid = itoa::Buffer::new();
        let pid = pid.format(c.stat.pid);
        out(
            &[pid, &c.stat.comm, "user"],
            Some(c.stat.utime_ticks as f64 / hz),
        );
        out(
            &[pid, &c.stat.comm, "system"],
            Some(c.stat.stime_ticks as f64 / hz),
        );
    }
}

/// A memory gauge of a process that is still running: an exited process (zombie, or exiting
/// with its mm released) reads 0 because it has no memory map any more, which is unknown, not
/// a process that shrank to nothing.
fn mem_gauge(cx: &Ctx, out: &mut Emit, f: fn(&Process, &Ctx) -> Option<f64>) {
    for (c, _) in each(cx) {
        if !c.stat.exited() {
            let mut pid = itoa::Buffer::new();
            let pid = pid.format(c.stat.pid);
            gauge(out, &[pid, &c.stat.comm], f(c, cx));
        }
    }
}

/// Whether the process waited for (reaped) a child since the previous sample: its children's
/// fault and CPU counters rose. The kernel then added the child's whole lifetime I/O to this
/// process's /proc/<pid>/io (kernel/exit.c, wait_task_zombie), which no reading can separate
/// from its own: a shell running `cat` on a large file would seem to read it itself.
fn reaped(c: &Process, p: &Process) -> bool {
    c.stat.cminflt > p.stat.cminflt || c.stat.children_ticks > p.stat.children_ticks
}

/// An I/O counter's rate, split by [`reaped`]: `own` keeps the intervals without a reap,
/// the other the intervals with one.
fn io_rate(cx: &Ctx, out: &mut Emit, f: fn(&Process) -> Option<u64>, own: bool) {
    for (c, p) in each(cx) {
        let Some(p) = p else { continue };
        if reaped(c, p) == own {
            continue;
        }
        let mut pid = itoa::Buffer::new();
        let pid = pid.format(c.stat.pid);
        rate(cx, out, &[pid, &c.stat.comm], f(c), f(p), 1.0);
    }
}

/// The processes that ended since the previous sample: those now zombies (or exiting without
/// memory) that were running then, and those gone from /proc that were running then. `f`
/// gives the value from the process as last seen (the zombie when there was one).
fn ended(cx: &Ctx, out: &mut Emit, f: fn(&Process) -> Option<f64>) {
    let (Some(cur), Some(prev)) = (cx.cur.processes.as_ref(), cx.prev) else {
        return;
    };
    let mut emit = |p: &Process| {
        let mut pid = itoa::Buffer::new();
        let pid = pid.format(p.stat.pid);
        gauge(out, &[pid, &p.stat.comm], f(p));
    };
    // Once per exit: at the first sample that sees it, or later when the value only became
    // known then (seen exiting, then as a zombie).
    for c in cur.iter().filter(|c| c.stat.exited()) {
        if cx
            .prev_process(c.stat.pid, c.stat.starttime_ticks)
            .is_none_or(|p| !p.stat.exited() || (f(p).is_none() && f(c).is_some()))
        {
            emit(c);
        }
    }
    for p in prev.processes.iter().flatten() {
        if !p.stat.exited() && !cx.has_process(p.stat.pid, p.stat.starttime_ticks) {
            emit(p);
        }
    }
}

fn ticks_pct(cx: &Ctx, out: &mut Emit, f: fn(&Process) -> Option<u64>) {
    // ticks/s / USER_HZ * 100 = % of one CPU
    let k = 100.0 / cx.user_hz();
    proc_rate(cx, out, f, k);
}

fn count_state(cx: &Ctx, out: &mut Emit, pred: fn(&Process) -> bool) {
    if let Some(ps) = cx.cur.processes.as_ref() {
        out(&[], Some(ps.iter().filter(|p| pred(p)).count() as f64));
    }
}

metrics! {
    reads: PROCESSES;
    PROCS_COUNT = ("procs.count", Count, Gauge, "Processes on the host", |cx, out| count_state(cx, out, |_| true)),
    PROCS_RUNNING = ("procs.running", Count, Gauge, "Processes in state R (running or runnable)", |cx, out| count_state(cx, out, |p| p.stat.state == 'R')),
    PROCS_D_STATE = ("procs.d_state", Count, Gauge, "Processes in state D (uninterruptible: I/O, reclaim, locks)", |cx, out| count_state(cx, out, |p| p.stat.state == 'D')),
    PROCS_ZOMBIE = ("procs.zombie", Count, Gauge, "Zombie processes (state Z)", |cx, out| count_state(cx, out, |p| p.stat.state == 'Z')),
    PROCS_EXITED_PER_S = ("procs.exited_per_s", PerSecond, Gauge, "Processes that ended since the previous sample, per second", |cx, out| {
        if cx.dt_s > 0.0 && cx.prev.is_some() && cx.cur.processes.is_some() {
            let mut n = 0u32;
            ended(cx, &mut |_: &[&str], _: Option<f64>| n += 1, |_| Some(1.0));
            out(&[], Some(f64::from(n) / cx.dt_s));
        }
    }),
    PROCS_EXITING = ("procs.exiting", Count, Gauge, "Processes in the middle of exiting (PF_EXITING): batch exits contend on kernel locks", |cx, out| count_state(cx, out, |p| p.stat.flags & PF_EXITING != 0)),
    PROC_CPU_PCT = ("proc.<pid>.<comm>.cpu_pct", Percent, Rate, "CPU (user + system) as % of one CPU (/proc/<pid>/stat utime+stime)", |cx, out| ticks_pct(cx, out, |p| Some(p.stat.utime_ticks + p.stat.stime_ticks))),
    PROC_USR_PCT = ("proc.<pid>.<comm>.usr_pct", Percent, Rate, "User CPU as % of one CPU (/proc/<pid>/stat utime)", |cx, out| ticks_pct(cx, out, |p| Some(p.stat.utime_ticks))),
    PROC_SYS_PCT = ("proc.<pid>.<comm>.sys_pct", Percent, Rate, "Kernel CPU as % of one CPU (/proc/<pid>/stat stime)", |cx, out| ticks_pct(cx, out, |p| Some(p.stat.stime_ticks))),
    PROC_CPU_SECONDS = ("proc.<pid>.<comm>.cpu_<mode>_seconds", Seconds, Counter, "CPU time since the process started, user or system, seconds (/proc/<pid>/stat utime, stime)", cpu_seconds),
    PROC_RUNQ_WAIT_PCT = ("proc.<pid>.<comm>.runq_wait_pct", Percent, Rate, "Time the main thread was runnable but waiting for a CPU, % of the interval (/proc/<pid>/schedstat is the thread-group leader's own: other threads' waits are not in it)", |cx, out| proc_rate(cx, out, |p| p.schedstat.as_ref().map(|s| s.wait_ns), 1e-7)),
    PROC_RSS_BYTES = ("proc.<pid>.<comm>.rss_bytes", Bytes, Gauge, "Resident memory (/proc/<pid>/stat rss x page size)", |cx, out| mem_gauge(cx, out, |p, cx| Some((p.stat.rss_pages * cx.cur.host.page_size_bytes) as f64))),
    PROC_ANON_BYTES = ("proc.<pid>.<comm>.anon_bytes", Bytes, Gauge, "Resident anonymous memory (/proc/<pid>/status RssAnon)", |cx, out| mem_gauge(cx, out, |p, _| p.status.as_ref()?.rss_anon_bytes.map(|v| v as f64))),
    PROC_FILE_BYTES = ("proc.<pid>.<comm>.file_bytes", Bytes, Gauge, "Resident file-backed memory (/proc/<pid>/status RssFile)", |cx, out| mem_gauge(cx, out, |p, _| p.status.as_ref()?.rss_file_bytes.map(|v| v as f64))),
    PROC_SHMEM_BYTES = ("proc.<pid>.<comm>.shmem_bytes", Bytes, Gauge, "Resident shared memory (/proc/<pid>/status RssShmem)", |cx, out| mem_gauge(cx, out, |p, _| p.status.as_ref()?.rss_shmem_bytes.map(|v| v as f64))),
    PROC_SWAP_BYTES = ("proc.<pid>.<comm>.swap_bytes", Bytes, Gauge, "Swapped-out memory (/proc/<pid>/status VmSwap)", |cx, out| mem_gauge(cx, out, |p, _| p.status.as_ref()?.swap_bytes.map(|v| v as f64))),
    PROC_THREADS = ("proc.<pid>.<comm>.threads", Count, Gauge, "Threads (/proc/<pid>/stat num_threads)", |cx, out| proc_gauge(cx, out, |p, _| Some(p.stat.num_threads as f64))),
    PROC_MINFLT_PER_S = ("proc.<pid>.<comm>.minflt_per_s", PerSecond, Rate, "Minor page faults per second (/proc/<pid>/stat)", |cx, out| proc_rate(cx, out, |p| Some(p.stat.minflt), 1.0)),
    PROC_MAJFLT_PER_S = ("proc.<pid>.<comm>.majflt_per_s", PerSecond, Rate, "Major page faults (I/O) per second (/proc/<pid>/stat)", |cx, out| proc_rate(cx, out, |p| Some(p.stat.majflt), 1.0)),
    PROC_VCSW_PER_S = ("proc.<pid>.<comm>.vcsw_per_s", PerSecond, Rate, "Voluntary context switches (blocking) per second (/proc/<pid>/status)", |cx, out| proc_rate(cx, out, |p| p.status.as_ref()?.voluntary_ctxt_switches, 1.0)),
    PROC_IVCSW_PER_S = ("proc.<pid>.<comm>.ivcsw_per_s", PerSecond, Rate, "Involuntary context switches (preemption) per second (/proc/<pid>/status)", |cx, out| proc_rate(cx, out, |p| p.status.as_ref()?.nonvoluntary_ctxt_switches, 1.0)),
    PROC_READ_BYTES_PER_S = ("proc.<pid>.<comm>.read_bytes_per_s", BytesPerSecond, Rate, "Bytes fetched from storage per second (/proc/<pid>/io read_bytes), in the intervals it reaped no child (see reaped_read_bytes_per_s)", |cx, out| io_rate(cx, out, |p| p.io.as_ref().map(|i| i.read_bytes), true)),
    PROC_WRITE_BYTES_PER_S = ("proc.<pid>.<comm>.write_bytes_per_s", BytesPerSecond, Rate, "Bytes sent to storage per second (/proc/<pid>/io write_bytes), in the intervals it reaped no child (see reaped_write_bytes_per_s)", |cx, out| io_rate(cx, out, |p| p.io.as_ref().map(|i| i.write_bytes), true)),
    PROC_REAPED_READ_BYTES_PER_S = ("proc.<pid>.<comm>.reaped_read_bytes_per_s", BytesPerSecond, Rate, "Bytes fetched from storage per second in an interval in which the process reaped a child: the kernel adds a reaped child's lifetime I/O to its parent's counters, so this is the children's I/O plus its own", |cx, out| io_rate(cx, out, |p| p.io.as_ref().map(|i| i.read_bytes), false)),
    PROC_REAPED_WRITE_BYTES_PER_S = ("proc.<pid>.<comm>.reaped_write_bytes_per_s", BytesPerSecond, Rate, "Bytes sent to storage per second in an interval in which the process reaped a child (its children's lifetime writes plus its own)", |cx, out| io_rate(cx, out, |p| p.io.as_ref().map(|i| i.write_bytes), false)),
    PROC_EXITED = ("proc.<pid>.<comm>.exited", Count, Gauge, "1 in the first sample after the process ended (a zombie, or gone from /proc): its series end there, and a zombie's memory reads as unknown, not 0", |cx, out| ended(cx, out, |_| Some(1.0))),
    PROC_EXIT_SIGNAL = ("proc.<pid>.<comm>.exit_signal", Ratio, Gauge, "The number of the signal that ended the process (9 SIGKILL: the OOM killer, kill -9), when the recorder saw it as a zombie (/proc/<pid>/stat exit_code)", |cx, out| ended(cx, out, |p| p.stat.exit_signal().map(f64::from))),
}

#[cfg(test)]
mod tests {
    use jitterscope_sources::process::{PidIo, PidStat, Process};

    use crate::derive::evaluate;
    use crate::metrics::all;
    use crate::sample::{HostInfo, Sample};

    fn proc(pid: u32, comm: &str, state: char, rss_pages: u64, read: u64, cminflt: u64) -> Process {
        Process {
            stat: PidStat {
                pid,
                comm: comm.into(),
                state,
                rss_pages,
                starttime_ticks: 100 + u64::from(pid),
                cminflt,
                exit_code: Some(if state == 'Z' { 9 } else { 0 }),
                ..Default::default()
            },
            io: Some(PidIo {
                read_bytes: read,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sample(s: u64, procs: Vec<Process>) -> Sample {
        let mut x = Sample::new(
            (s * 1_000_000_000) as i64,
            s * 1_000_000_000,
            1_000_000_000,
            HostInfo {
                page_size_bytes: 4096,
                ..Default::default()
            },
        );
        x.processes = Some(procs);
        x
    }

    fn value(cur: &Sample, prev: &Sample, series: &str) -> Option<f64> {
        let v = evaluate(all(), cur, Some(prev), &[]);
        let mut it = v.iter().filter(|v| v.series == series);
        let first = it.next().and_then(|v| v.value);
        assert!(it.next().is_none(), "{series} twice");
        first
    }

    #[test]
    fn the_kill_signal_is_kept_when_the_exit_is_first_seen_before_the_zombie() {
        // Seen exiting (PF_EXITING, no memory) with its code not yet readable, then as a zombie.
        let mut exiting = proc(10, "worker", 'R', 0, 0, 0);
        exiting.stat.flags = jitterscope_sources::process::PF_EXITING;
        exiting.stat.exit_code = Some(0);
        let prev = sample(1, vec![exiting]);
        let cur = sample(2, vec![proc(10, "worker", 'Z', 0, 0, 0)]);
        assert_eq!(
            value(&prev, &sample(0, vec![]), "proc.10.worker.exited"),
            Some(1.0)
        );
        assert_eq!(value(&cur, &prev, "proc.10.worker.exit_signal"), Some(9.0));
        // The exit itself is counted once.
        assert_eq!(value(&cur, &prev, "proc.10.worker.exited"), None);
        // And once known, the signal is not repeated.
        let later = sample(3, vec![proc(10, "worker", 'Z', 0, 0, 0)]);
        assert_eq!(value(&later, &cur, "proc.10.worker.exit_signal"), None);
    }

    #[test]
    fn an_ended_process_is_not_a_process_that_shrank() {
        let prev = sample(
            1,
            vec![
                proc(10, "worker", 'R', 1000, 0, 0),
                proc(11, "gone", 'S', 50, 0, 0),
                proc(12, "sh", 'S', 10, 1 << 20, 5),
            ],
        );
        let cur = sample(
            2,
            vec![
                // Killed, not yet reaped: the kernel reports no memory for it.
                proc(10, "worker", 'Z', 0, 0, 0),
                // Reaped a child that read 1 GiB: its counters jump by the child's I/O.
                proc(12, "sh", 'S', 10, (1 << 20) + (1 << 30), 9),
            ],
        );
        assert_eq!(value(&cur, &prev, "proc.10.worker.rss_bytes"), None);
        assert_eq!(
            value(&prev, &cur, "proc.10.worker.rss_bytes"),
            Some(4096000.0)
        );
        assert_eq!(value(&cur, &prev, "proc.10.worker.exited"), Some(1.0));
        assert_eq!(value(&cur, &prev, "proc.10.worker.exit_signal"), Some(9.0));
        assert_eq!(value(&cur, &prev, "proc.11.gone.exited"), Some(1.0));
        assert_eq!(value(&cur, &prev, "proc.11.gone.exit_signal"), None);
        assert_eq!(value(&cur, &prev, "proc.12.sh.exited"), None);
        assert_eq!(value(&cur, &prev, "procs.exited_per_s"), Some(2.0));
        // The reap's jump is not the shell's own read rate.
        assert_eq!(value(&cur, &prev, "proc.12.sh.read_bytes_per_s"), None);
        assert_eq!(
            value(&cur, &prev, "proc.12.sh.reaped_read_bytes_per_s"),
            Some((1u64 << 30) as f64)
        );
        // A zombie seen again is not a second exit.
        let later = sample(3, vec![proc(10, "worker", 'Z', 0, 0, 0)]);
        assert_eq!(value(&later, &cur, "proc.10.worker.exited"), None);
    }
}
