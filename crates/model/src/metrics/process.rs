//! Per-process metrics and host-wide process-state counts.

use jitterscope_sources::process::{Process, PF_EXITING};

use super::{gauge, metrics, rate};
use crate::derive::Ctx;
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
        let pid = c.stat.pid.to_string();
        rate(cx, out, &[&pid, &c.stat.comm], f(c), p.and_then(f), k);
    }
}

fn proc_gauge(cx: &Ctx, out: &mut Emit, f: fn(&Process, &Ctx) -> Option<f64>) {
    for (c, _) in each(cx) {
        let pid = c.stat.pid.to_string();
        gauge(out, &[&pid, &c.stat.comm], f(c, cx));
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
    PROCS_COUNT = ("procs.count", Count, Gauge, "Processes on the host", |cx, out| count_state(cx, out, |_| true)),
    PROCS_RUNNING = ("procs.running", Count, Gauge, "Processes in state R (running or runnable)", |cx, out| count_state(cx, out, |p| p.stat.state == 'R')),
    PROCS_D_STATE = ("procs.d_state", Count, Gauge, "Processes in state D (uninterruptible: I/O, reclaim, locks)", |cx, out| count_state(cx, out, |p| p.stat.state == 'D')),
    PROCS_ZOMBIE = ("procs.zombie", Count, Gauge, "Zombie processes (state Z)", |cx, out| count_state(cx, out, |p| p.stat.state == 'Z')),
    PROCS_EXITING = ("procs.exiting", Count, Gauge, "Processes in the middle of exiting (PF_EXITING): batch exits contend on kernel locks", |cx, out| count_state(cx, out, |p| p.stat.flags & PF_EXITING != 0)),
    PROC_CPU_PCT = ("proc.<pid>.<comm>.cpu_pct", Percent, Rate, "CPU (user + system) as % of one CPU (/proc/<pid>/stat utime+stime)", |cx, out| ticks_pct(cx, out, |p| Some(p.stat.utime_ticks + p.stat.stime_ticks))),
    PROC_USR_PCT = ("proc.<pid>.<comm>.usr_pct", Percent, Rate, "User CPU as % of one CPU (/proc/<pid>/stat utime)", |cx, out| ticks_pct(cx, out, |p| Some(p.stat.utime_ticks))),
    PROC_SYS_PCT = ("proc.<pid>.<comm>.sys_pct", Percent, Rate, "Kernel CPU as % of one CPU (/proc/<pid>/stat stime)", |cx, out| ticks_pct(cx, out, |p| Some(p.stat.stime_ticks))),
    PROC_RUNQ_WAIT_PCT = ("proc.<pid>.<comm>.runq_wait_pct", Percent, Rate, "Time runnable but waiting for a CPU, % of the interval summed over threads (/proc/<pid>/schedstat)", |cx, out| proc_rate(cx, out, |p| p.schedstat.as_ref().map(|s| s.wait_ns), 1e-7)),
    PROC_RSS_BYTES = ("proc.<pid>.<comm>.rss_bytes", Bytes, Gauge, "Resident memory (/proc/<pid>/stat rss x page size)", |cx, out| proc_gauge(cx, out, |p, cx| Some((p.stat.rss_pages * cx.cur.host.page_size_bytes) as f64))),
    PROC_ANON_BYTES = ("proc.<pid>.<comm>.anon_bytes", Bytes, Gauge, "Resident anonymous memory (/proc/<pid>/status RssAnon)", |cx, out| proc_gauge(cx, out, |p, _| p.status.as_ref()?.rss_anon_bytes.map(|v| v as f64))),
    PROC_FILE_BYTES = ("proc.<pid>.<comm>.file_bytes", Bytes, Gauge, "Resident file-backed memory (/proc/<pid>/status RssFile)", |cx, out| proc_gauge(cx, out, |p, _| p.status.as_ref()?.rss_file_bytes.map(|v| v as f64))),
    PROC_SHMEM_BYTES = ("proc.<pid>.<comm>.shmem_bytes", Bytes, Gauge, "Resident shared memory (/proc/<pid>/status RssShmem)", |cx, out| proc_gauge(cx, out, |p, _| p.status.as_ref()?.rss_shmem_bytes.map(|v| v as f64))),
    PROC_SWAP_BYTES = ("proc.<pid>.<comm>.swap_bytes", Bytes, Gauge, "Swapped-out memory (/proc/<pid>/status VmSwap)", |cx, out| proc_gauge(cx, out, |p, _| p.status.as_ref()?.swap_bytes.map(|v| v as f64))),
    PROC_THREADS = ("proc.<pid>.<comm>.threads", Count, Gauge, "Threads (/proc/<pid>/stat num_threads)", |cx, out| proc_gauge(cx, out, |p, _| Some(p.stat.num_threads as f64))),
    PROC_MINFLT_PER_S = ("proc.<pid>.<comm>.minflt_per_s", PerSecond, Rate, "Minor page faults per second (/proc/<pid>/stat)", |cx, out| proc_rate(cx, out, |p| Some(p.stat.minflt), 1.0)),
    PROC_MAJFLT_PER_S = ("proc.<pid>.<comm>.majflt_per_s", PerSecond, Rate, "Major page faults (I/O) per second (/proc/<pid>/stat)", |cx, out| proc_rate(cx, out, |p| Some(p.stat.majflt), 1.0)),
    PROC_VCSW_PER_S = ("proc.<pid>.<comm>.vcsw_per_s", PerSecond, Rate, "Voluntary context switches (blocking) per second (/proc/<pid>/status)", |cx, out| proc_rate(cx, out, |p| p.status.as_ref()?.voluntary_ctxt_switches, 1.0)),
    PROC_IVCSW_PER_S = ("proc.<pid>.<comm>.ivcsw_per_s", PerSecond, Rate, "Involuntary context switches (preemption) per second (/proc/<pid>/status)", |cx, out| proc_rate(cx, out, |p| p.status.as_ref()?.nonvoluntary_ctxt_switches, 1.0)),
    PROC_READ_BYTES_PER_S = ("proc.<pid>.<comm>.read_bytes_per_s", BytesPerSecond, Rate, "Bytes fetched from storage per second (/proc/<pid>/io read_bytes)", |cx, out| proc_rate(cx, out, |p| p.io.as_ref().map(|i| i.read_bytes), 1.0)),
    PROC_WRITE_BYTES_PER_S = ("proc.<pid>.<comm>.write_bytes_per_s", BytesPerSecond, Rate, "Bytes sent to storage per second (/proc/<pid>/io write_bytes)", |cx, out| proc_rate(cx, out, |p| p.io.as_ref().map(|i| i.write_bytes), 1.0)),
}
