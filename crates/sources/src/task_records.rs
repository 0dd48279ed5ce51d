//! Processes from a BPF task iterator's records instead of their /proc files (issue 23).
//!
//! `jitterscope-bpf`'s `tasks` program copies, in one `read()`, the kernel fields that
//! `/proc/<pid>/{stat,status,io,schedstat}` are generated from: one [`TaskThread`] per task, and
//! for a thread-group leader a [`TaskLeader`] with the process-wide ones. [`TaskAssembler`]
//! computes from them what fs/proc/array.c (`do_task_stat`, `proc_pid_status`) and
//! fs/proc/base.c (`proc_pid_schedstat`, `do_io_accounting`) compute, field by field, into the
//! same [`Process`] the /proc reader produces, so every metric is defined once.
//!
//! What is not a copy of a kernel field:
//! - utime/stime: /proc reports `thread_group_cputime_adjusted()`, which scales the tick-sampled
//!   user/system split to the scheduler's exact run time and keeps both monotonic through
//!   `signal->prev_cputime`, state that each /proc read updates. [`cputime_adjust`] is the same
//!   algorithm, and the state is kept here per process: starting from the kernel's (what /proc
//!   would start from) and taking the kernel's again whenever another reader of /proc (ps, top)
//!   has moved it further. The result is what the /proc reader would have printed had it read at
//!   the same moments.
//! - RssAnon/RssFile/RssShmem/VmSwap: since "mm: fix the inaccurate memory statistics issue for
//!   users" (6.16, backported to some stable kernels) status sums the per-CPU parts of the rss
//!   counters while stat's rss still reads their central count; the program sends both and
//!   [`TaskAssembler::status_sums`] says which one status uses on this kernel.
//! - Kernel threads' names: `proc_task_name()` shows a workqueue worker's id and last work
//!   (`kworker/0:1-events`) and a kthread's untruncated name; [`proc_task_name`] rebuilds them.
//!
//! The cgroup paths and the command line still come from /proc, read as rarely as the /proc
//! reader reads them (a command line once and after an exec, the cgroups on the first two scans
//! and every [`crate::process::CGROUP_REFRESH_SCANS`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::cgroup::CgroupNs;
use crate::cgroup::ProcCgroupPaths;
use crate::fileio::lossy;
use crate::process::{
    read_cmdline, refresh_cgroups, PidFile, PidIo, PidSchedstat, PidStat, PidStatus, Process,
    ProcessScanStats,
};
use crate::redact::Redactor;
use crate::Root;

/// `NSEC_PER_SEC / USER_HZ`: /proc's clock ticks (`nsec_to_clock_t`) are 10 ms everywhere.
pub const NS_PER_TICK: u64 = 10_000_000;

/// `JS_T_*` in tasks.bpf.c: what a record holds.
pub mod bits {
    /// A [`super::TaskLeader`] follows the thread record.
    pub const LEADER: u32 = 1 << 0;
    /// `get_task_mm()` would return an mm: the memory fields are valid.
    pub const MM: u32 = 1 << 1;
    /// `lock_task_sighand()` would succeed: ppid, thread count and group exit code are valid.
    pub const SIGHAND: u32 = 1 << 2;
    /// The kernel has CONFIG_SCHED_INFO (`/proc/<pid>/schedstat` exists).
    pub const SCHED_INFO: u32 = 1 << 3;
    /// The kernel has CONFIG_TASK_XACCT (`/proc/<pid>/io` has values).
    pub const IO: u32 = 1 << 4;
    /// `rss_sum` holds per-CPU sums (percpu_counter kernels, 6.2+).
    pub const RSS_SUM: u32 = 1 << 5;
    /// Workqueue workers are named by `format_worker_id()` (6.10+), not by their comm.
    pub const WQ_ID_FMT: u32 = 1 << 6;
    /// A workqueue worker attached to a pool.
    pub const WQ_POOL: u32 = 1 << 7;
    /// ... running a work item (its description gets '+', else '-').
    pub const WQ_BUSY: u32 = 1 << 8;
    /// ... a rescuer (`kworker/R-<workqueue>`).
    pub const WQ_RESCUER: u32 = 1 << 9;
    /// `name` holds a kernel thread's untruncated name.
    pub const FULL_NAME: u32 = 1 << 10;
}

/// `PF_KTHREAD`.
const PF_KTHREAD: u32 = 0x0020_0000;
/// `PF_WQ_WORKER`.
const PF_WQ_WORKER: u32 = 0x0000_0020;
/// `SIGNAL_STOP_STOPPED | SIGNAL_GROUP_EXIT`: do_task_stat then reports the group's exit code.
const SIGNAL_GROUP_EXIT_OR_STOPPED: u32 = 0x1 | 0x4;
/// Indexes of `mm->rss_stat` (enum MM_*, unchanged since 4.x).
const MM_FILEPAGES: usize = 0;
const MM_ANONPAGES: usize = 1;
const MM_SWAPENTS: usize = 2;
const MM_SHMEMPAGES: usize = 3;

/// One task's record: the fields /proc sums over the threads of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskThread {
    /// Thread id (`task->pid`).
    pub tid: u32,
    /// Process id (`task->tgid`).
    pub tgid: u32,
    /// [`bits`].
    pub bits: u32,
    /// `task->flags` (`PF_*`).
    pub flags: u32,
    /// Minor faults of this thread.
    pub min_flt: u64,
    /// Major faults of this thread.
    pub maj_flt: u64,
    /// Tick-sampled user time, ns.
    pub utime_ns: u64,
    /// Tick-sampled system time, ns.
    pub stime_ns: u64,
    /// `se.sum_exec_runtime`: exact run time, ns.
    pub sum_exec_runtime_ns: u64,
    /// `task->ioac`: rchar, wchar, syscr, syscw, read_bytes, write_bytes, cancelled_write_bytes.
    pub io: [u64; 7],
    /// `sched_info.run_delay`: time this thread spent runnable on a run queue, ns.
    pub run_delay_ns: u64,
    /// `sched_info.pcount`: timeslices this thread has run.
    pub pcount: u64,
}

/// A thread-group leader's process-wide fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskLeader {
    /// `task->comm`, NUL-padded.
    pub comm: [u8; 16],
    /// A kernel thread's full name, or a rescuer's workqueue name, NUL-padded.
    pub name: [u8; 64],
    /// A workqueue worker's last work description, NUL-padded.
    pub desc: [u8; 32],
    /// `task->__state`.
    pub state: u32,
    /// `task->exit_state`.
    pub exit_state: u32,
    /// `task->exit_code`.
    pub exit_code: i32,
    /// `signal->group_exit_code`.
    pub group_exit_code: i32,
    /// `signal->flags`.
    pub sig_flags: u32,
    /// `real_parent->tgid`.
    pub ppid: u32,
    /// `task->static_prio` (nice + 120).
    pub static_prio: i32,
    /// `signal->nr_threads`.
    pub nr_threads: u32,
    /// `task_cpu()`.
    pub cpu: u32,
    /// The worker's pool's CPU (-1: unbound).
    pub wq_pool_cpu: i32,
    /// The worker's pool's id.
    pub wq_pool_id: i32,
    /// The worker's id in its pool.
    pub wq_worker_id: i32,
    /// The worker's pool's nice.
    pub wq_nice: i32,
    /// `task->start_boottime`, ns.
    pub start_boottime_ns: u64,
    /// `mm->total_vm`, pages.
    pub total_vm_pages: u64,
    /// `mm->rss_stat[i]`'s central count (what `get_mm_counter()` reads), pages.
    pub rss_count: [i64; 4],
    /// ... plus every CPU's unflushed part (`get_mm_counter_sum()`), pages.
    pub rss_sum: [i64; 4],
    /// Voluntary context switches of the leader thread.
    pub nvcsw: u64,
    /// Involuntary context switches of the leader thread.
    pub nivcsw: u64,
    /// Block I/O delay (with swap-in before 5.18), ns.
    pub blkio_delay_ns: u64,
    /// Minor faults of the dead threads.
    pub sig_min_flt: u64,
    /// Major faults of the dead threads.
    pub sig_maj_flt: u64,
    /// Minor faults of the reaped children.
    pub sig_cmin_flt: u64,
    /// User time of the dead threads, ns.
    pub sig_utime_ns: u64,
    /// System time of the dead threads, ns.
    pub sig_stime_ns: u64,
    /// Run time of the dead threads, ns.
    pub sig_sum_sched_runtime_ns: u64,
    /// User time of the reaped children, ns.
    pub sig_cutime_ns: u64,
    /// System time of the reaped children, ns.
    pub sig_cstime_ns: u64,
    /// I/O accounting of the dead threads (and reaped children), as `io`.
    pub sig_io: [u64; 7],
    /// `signal->prev_cputime.utime`, ns.
    pub prev_utime_ns: u64,
    /// `signal->prev_cputime.stime`, ns.
    pub prev_stime_ns: u64,
}

impl Default for TaskLeader {
    fn default() -> Self {
        TaskLeader {
            comm: [0; 16],
            name: [0; 64],
            desc: [0; 32],
            state: 0,
            exit_state: 0,
            exit_code: 0,
            group_exit_code: 0,
            sig_flags: 0,
            ppid: 0,
            static_prio: 0,
            nr_threads: 0,
            cpu: 0,
            wq_pool_cpu: 0,
            wq_pool_id: 0,
            wq_worker_id: 0,
            wq_nice: 0,
            start_boottime_ns: 0,
            total_vm_pages: 0,
            rss_count: [0; 4],
            rss_sum: [0; 4],
            nvcsw: 0,
            nivcsw: 0,
            blkio_delay_ns: 0,
            sig_min_flt: 0,
            sig_maj_flt: 0,
            sig_cmin_flt: 0,
            sig_utime_ns: 0,
            sig_stime_ns: 0,
            sig_sum_sched_runtime_ns: 0,
            sig_cutime_ns: 0,
            sig_cstime_ns: 0,
            sig_io: [0; 7],
            prev_utime_ns: 0,
            prev_stime_ns: 0,
        }
    }
}

/// One task as the iterator emitted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    /// Every task's part.
    pub thread: TaskThread,
    /// A leader's part.
    pub leader: Option<Box<TaskLeader>>,
}

/// `nsec_to_clock_t()`.
pub fn ticks(ns: u64) -> u64 {
    ns / NS_PER_TICK
}

/// The state letter of `get_task_state()`: `__task_state_index()` over `TASK_REPORT` bits, with
/// idle kernel threads (`TASK_IDLE`) shown as I and rt-lock waiters and frozen tasks as D.
pub fn state_letter(state: u32, exit_state: u32) -> char {
    const TASK_UNINTERRUPTIBLE: u32 = 0x2;
    const TASK_REPORT: u32 = 0x7f;
    const TASK_NOLOAD: u32 = 0x400;
    const TASK_RTLOCK_WAIT: u32 = 0x1000;
    const TASK_FROZEN: u32 = 0x8000;
    const TASK_REPORT_IDLE: u32 = TASK_REPORT + 1;
    let mut s = (state | exit_state) & TASK_REPORT;
    if state & (TASK_UNINTERRUPTIBLE | TASK_NOLOAD) == TASK_UNINTERRUPTIBLE | TASK_NOLOAD {
        s = TASK_REPORT_IDLE;
    }
    if state & (TASK_RTLOCK_WAIT | TASK_FROZEN) != 0 {
        s = TASK_UNINTERRUPTIBLE;
    }
    // fls(): index of the highest set bit, 1-based; 0 for none (running).
    let idx = (32 - s.leading_zeros()) as usize;
    *b"RSDTtXZPI".get(idx).unwrap_or(&b'?') as char
}

/// `cputime_adjust()` (kernel/sched/cputime.c): splits the exact run time `rtime` in the ratio of
/// the tick-sampled `utime`/`stime`, never letting either go below what `prev` last reported;
/// updates `prev` and returns (utime, stime) in ns. x86's `mul_u64_u64_div_u64` is exact, as the
/// 128-bit arithmetic here is.
pub fn cputime_adjust(rtime: u64, utime: u64, stime: u64, prev: &mut (u64, u64)) -> (u64, u64) {
    let (pu, ps) = *prev;
    if pu.saturating_add(ps) >= rtime {
        return *prev;
    }
    let mut st = if stime == 0 {
        0
    } else if utime == 0 {
        rtime
    } else {
        let s = (stime as u128 * rtime as u128 / (stime as u128 + utime as u128)) as u64;
        s.min(rtime)
    };
    if st < ps {
        st = ps;
    }
    let mut ut = rtime - st;
    if ut < pu {
        ut = pu;
        st = rtime - ut;
    }
    *prev = (ut, st);
    (ut, st)
}

/// A NUL-padded kernel string.
fn cstr(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

/// The name `proc_task_name()` prints in `/proc/<pid>/stat` (at most 63 bytes): a workqueue
/// worker's id and last work (`wq_worker_comm()`), a kernel thread's untruncated name
/// (`get_kthread_comm()`), or the comm.
pub fn proc_task_name(flags: u32, bits_: u32, l: &TaskLeader) -> String {
    let comm = cstr(&l.comm);
    let mut name: Vec<u8> = if flags & PF_WQ_WORKER != 0 {
        let mut n = if bits_ & bits::WQ_ID_FMT != 0 {
            // format_worker_id()
            if bits_ & bits::WQ_RESCUER != 0 {
                let mut v = b"kworker/R-".to_vec();
                v.extend_from_slice(cstr(&l.name));
                v
            } else if bits_ & bits::WQ_POOL != 0 {
                if l.wq_pool_cpu >= 0 {
                    format!(
                        "kworker/{}:{}{}",
                        l.wq_pool_cpu,
                        l.wq_worker_id,
                        if l.wq_nice < 0 { "H" } else { "" }
                    )
                    .into_bytes()
                } else {
                    format!("kworker/u{}:{}", l.wq_pool_id, l.wq_worker_id).into_bytes()
                }
            } else {
                b"kworker/dying".to_vec()
            }
        } else {
            comm.to_vec()
        };
        let desc = cstr(&l.desc);
        if bits_ & bits::WQ_POOL != 0 && !desc.is_empty() {
            n.push(if bits_ & bits::WQ_BUSY != 0 {
                b'+'
            } else {
                b'-'
            });
            n.extend_from_slice(desc);
        }
        n
    } else if flags & PF_KTHREAD != 0 && bits_ & bits::FULL_NAME != 0 {
        cstr(&l.name).to_vec()
    } else {
        comm.to_vec()
    };
    // char tcomm[64], and scnprintf stops there.
    name.truncate(63);
    lossy(&name)
}

/// What /proc sums over a process's threads.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    min_flt: u64,
    maj_flt: u64,
    utime: u64,
    stime: u64,
    rtime: u64,
    io: [u64; 7],
}

impl Sums {
    fn add(&mut self, t: &TaskThread) {
        self.min_flt = self.min_flt.wrapping_add(t.min_flt);
        self.maj_flt = self.maj_flt.wrapping_add(t.maj_flt);
        self.utime = self.utime.wrapping_add(t.utime_ns);
        self.stime = self.stime.wrapping_add(t.stime_ns);
        self.rtime = self.rtime.wrapping_add(t.sum_exec_runtime_ns);
        for (a, b) in self.io.iter_mut().zip(t.io) {
            *a = a.wrapping_add(b);
        }
    }
}

/// What is kept per process between scans.
struct Handle {
    start_boottime_ns: u64,
    /// cputime_adjust()'s state as this reader has advanced it.
    prev_cputime: (u64, u64),
    comm: Vec<u8>,
    cmdline: Arc<str>,
    cgroup: PidFile,
    cgroup_paths: Option<Arc<ProcCgroupPaths>>,
    scans: u32,
}

/// Turns the iterator's records into the processes of one sample.
pub struct TaskAssembler {
    proc_dir: PathBuf,
    handles: HashMap<u32, Handle>,
    sums: HashMap<u32, Sums>,
    seen: Vec<u32>,
    buf: Vec<u8>,
    page_size: u64,
    fd_budget: u64,
    fds_open: u64,
    max_cmdline: usize,
    /// What of a command line is kept ([`crate::redact`]).
    redactor: Arc<Redactor>,
    /// Whether status's Rss*/VmSwap are the per-CPU sums on this kernel.
    pub status_sums: bool,
    /// Resolves /proc/<pid>/cgroup paths when the recorder runs in a cgroup namespace.
    ns: CgroupNs,
    /// Every thread's run-queue wait at the last scan, for [`ThreadWaits`].
    waits: ThreadWaits,
}

/// The host's run-queue wait and timeslices summed over every thread, kept as counters that
/// only grow. A sum over the live threads would not: a thread that exits takes its wait with
/// it, and with 50 short processes a second the host's sum fell as often as it rose. So each
/// thread adds what it gained since the last scan (matched by tid, sorted), and a thread new
/// since then adds all it has. What a thread gained between its last scan and its exit is not
/// counted.
#[derive(Debug, Default)]
struct ThreadWaits {
    /// (tid, run_delay_ns, pcount) of the last scan, sorted by tid.
    last: Vec<(u32, u64, u64)>,
    next: Vec<(u32, u64, u64)>,
    wait_ns: u64,
    slices: u64,
    /// Whether a scan has set the baseline.
    started: bool,
}

impl ThreadWaits {
    /// Adds one scan's threads; returns the counters, or None when the kernel keeps no
    /// sched_info (no record has it).
    fn scan(&mut self, records: &[TaskRecord]) -> Option<(u64, u64)> {
        self.next.clear();
        self.next.extend(
            records
                .iter()
                .filter(|r| r.thread.bits & bits::SCHED_INFO != 0)
                .map(|r| (r.thread.tid, r.thread.run_delay_ns, r.thread.pcount)),
        );
        if self.next.is_empty() {
            return None;
        }
        // The iterator walks tasks in pid order: already sorted, which this checks cheaply.
        self.next.sort_unstable_by_key(|w| w.0);
        if self.started {
            let mut last = self.last.iter().peekable();
            for &(tid, wait, n) in &self.next {
                while last.next_if(|l| l.0 < tid).is_some() {}
                let (w0, n0) = match last.peek() {
                    // The same thread, unless its tid was reused (its counters went back).
                    Some(l) if l.0 == tid && wait >= l.1 && n >= l.2 => (l.1, l.2),
                    _ => (0, 0),
                };
                self.wait_ns = self.wait_ns.wrapping_add(wait - w0);
                self.slices = self.slices.wrapping_add(n - n0);
            }
        }
        self.started = true;
        std::mem::swap(&mut self.last, &mut self.next);
        Some((self.wait_ns, self.slices))
    }
}

impl TaskAssembler {
    /// An assembler reading the cgroups and command lines under `<root>/proc`, keeping at most
    /// `fd_budget` descriptors open. `status_sums`: see [`TaskAssembler::status_sums`].
    pub fn new(root: &Root, fd_budget: u64, status_sums: bool) -> Self {
        // SAFETY: sysconf has no side effects.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        TaskAssembler {
            proc_dir: root.path("/proc"),
            handles: HashMap::new(),
            sums: HashMap::new(),
            seen: Vec::new(),
            buf: Vec::with_capacity(4096),
            page_size: if page > 0 { page as u64 } else { 4096 },
            fd_budget,
            fds_open: 0,
            max_cmdline: 4096,
            redactor: Arc::new(Redactor::default()),
            status_sums,
            ns: CgroupNs::for_root(root),
            waits: ThreadWaits::default(),
        }
    }

    /// Keeps command lines as `r` says (secrets masked, or none at all) from now on.
    pub fn set_redactor(&mut self, r: Arc<Redactor>) {
        self.redactor = r;
    }

    /// Builds `out` (cleared first) from one read's records, in pid order.
    pub fn assemble(&mut self, records: &[TaskRecord], out: &mut Vec<Process>) -> ProcessScanStats {
        let mut stats = ProcessScanStats {
            task_iter: true,
            ..Default::default()
        };
        self.sums.clear();
        for r in records {
            self.sums.entry(r.thread.tgid).or_default().add(&r.thread);
        }
        out.clear();
        self.seen.clear();
        for r in records {
            let Some(l) = r.leader.as_deref() else {
                continue;
            };
            let sums = self.sums.get(&r.thread.tgid).copied().unwrap_or_default();
            let p = self.process(&r.thread, l, &sums, &mut stats);
            self.seen.push(r.thread.tgid);
            out.push(p);
        }
        out.sort_by_key(|p| p.stat.pid);
        // Processes gone since the last scan: drop what was kept for them.
        self.seen.sort_unstable();
        let gone: Vec<u32> = self
            .handles
            .keys()
            .filter(|p| self.seen.binary_search(p).is_err())
            .copied()
            .collect();
        for pid in gone {
            if let Some(h) = self.handles.remove(&pid) {
                self.fds_open -= h.cgroup.file.is_some() as u64;
            }
        }
        stats.listed = out.len() as u64;
        stats.open_fds = self.fds_open;
        if let Some((wait_ns, slices)) = self.waits.scan(records) {
            stats.thread_wait_ns = Some(wait_ns);
            stats.thread_slices = Some(slices);
        }
        stats
    }

    fn process(
        &mut self,
        t: &TaskThread,
        l: &TaskLeader,
        s: &Sums,
        stats: &mut ProcessScanStats,
    ) -> Process {
        let pid = t.tgid;
        let sighand = t.bits & bits::SIGHAND != 0;
        let mm = t.bits & bits::MM != 0;
        let stale = self
            .handles
            .get(&pid)
            .is_some_and(|h| h.start_boottime_ns != l.start_boottime_ns);
        if stale {
            // The pid was reused: nothing of the old process carries over.
            if let Some(h) = self.handles.remove(&pid) {
                self.fds_open -= h.cgroup.file.is_some() as u64;
            }
        }
        if !self.handles.contains_key(&pid) {
            let dir = self.proc_dir.join(pid.to_string());
            let path = dir.join("cgroup");
            let keep = self.fds_open < self.fd_budget;
            let file = if keep {
                std::fs::File::open(&path).ok()
            } else {
                None
            };
            self.fds_open += file.is_some() as u64;
            let h = Handle {
                start_boottime_ns: l.start_boottime_ns,
                prev_cputime: (0, 0),
                comm: cstr(&l.comm).to_vec(),
                cmdline: read_cmdline(
                    &dir.join("cmdline"),
                    &mut self.buf,
                    self.max_cmdline,
                    &self.redactor,
                ),
                cgroup: PidFile { path, file },
                cgroup_paths: None,
                scans: 0,
            };
            self.handles.insert(pid, h);
        }
        let h = self.handles.get_mut(&pid).expect("inserted above");
        if h.cgroup.file.is_none() {
            stats.unkept += 1;
        }
        if cstr(&l.comm) != h.comm.as_slice() {
            // The process exec'd: its command line changed too.
            h.comm = cstr(&l.comm).to_vec();
            let path = self.proc_dir.join(pid.to_string()).join("cmdline");
            h.cmdline = read_cmdline(&path, &mut self.buf, self.max_cmdline, &self.redactor);
        }

        // thread_group_cputime() + cputime_adjust(): another /proc reader may have moved the
        // kernel's state past ours; /proc would continue from the one further on.
        let kernel_prev = (l.prev_utime_ns, l.prev_stime_ns);
        if kernel_prev.0.saturating_add(kernel_prev.1)
            >= h.prev_cputime.0.saturating_add(h.prev_cputime.1)
        {
            h.prev_cputime = kernel_prev;
        }
        let (ut, st) = cputime_adjust(
            l.sig_sum_sched_runtime_ns.wrapping_add(s.rtime),
            l.sig_utime_ns.wrapping_add(s.utime),
            l.sig_stime_ns.wrapping_add(s.stime),
            &mut h.prev_cputime,
        );
        let exit_code = if sighand && l.sig_flags & SIGNAL_GROUP_EXIT_OR_STOPPED != 0 {
            l.group_exit_code
        } else {
            l.exit_code
        };
        let count = |i: usize| l.rss_count[i].max(0) as u64;
        let stat = PidStat {
            pid,
            comm: proc_task_name(t.flags, t.bits, l),
            state: state_letter(l.state, l.exit_state),
            ppid: if sighand { l.ppid } else { 0 },
            flags: t.flags,
            minflt: l.sig_min_flt.wrapping_add(s.min_flt),
            majflt: l.sig_maj_flt.wrapping_add(s.maj_flt),
            cminflt: l.sig_cmin_flt,
            children_ticks: ticks(l.sig_cutime_ns).saturating_add(ticks(l.sig_cstime_ns)),
            utime_ticks: ticks(ut),
            stime_ticks: ticks(st),
            nice: l.static_prio as i64 - 120,
            num_threads: if sighand { l.nr_threads as u64 } else { 0 },
            starttime_ticks: ticks(l.start_boottime_ns),
            vsize_bytes: if mm {
                l.total_vm_pages.saturating_mul(self.page_size)
            } else {
                0
            },
            rss_pages: if mm {
                count(MM_FILEPAGES) + count(MM_ANONPAGES) + count(MM_SHMEMPAGES)
            } else {
                0
            },
            processor: l.cpu,
            delayacct_blkio_ticks: ticks(l.blkio_delay_ns),
            exit_code: Some(exit_code),
        };
        let sums = self.status_sums && t.bits & bits::RSS_SUM != 0;
        let page = self.page_size;
        let mem = |i: usize| {
            mm.then(|| {
                let v = if sums { l.rss_sum[i] } else { l.rss_count[i] };
                (v.max(0) as u64).saturating_mul(page)
            })
        };
        let status = PidStatus {
            rss_anon_bytes: mem(MM_ANONPAGES),
            rss_file_bytes: mem(MM_FILEPAGES),
            rss_shmem_bytes: mem(MM_SHMEMPAGES),
            swap_bytes: mem(MM_SWAPENTS),
            voluntary_ctxt_switches: Some(l.nvcsw),
            nonvoluntary_ctxt_switches: Some(l.nivcsw),
        };
        // do_io_accounting(whole): the dead threads' sum plus every live thread's.
        let io = (t.bits & bits::IO != 0).then(|| {
            let v = |i: usize| l.sig_io[i].wrapping_add(s.io[i]);
            PidIo {
                rchar: v(0),
                wchar: v(1),
                read_bytes: v(4),
                write_bytes: v(5),
                cancelled_write_bytes: v(6),
            }
        });
        // proc_pid_schedstat(): the leader thread's own.
        let schedstat = (t.bits & bits::SCHED_INFO != 0).then_some(PidSchedstat {
            run_ns: t.sum_exec_runtime_ns,
            wait_ns: t.run_delay_ns,
            timeslices: t.pcount,
        });

        // The cgroups as the /proc reader reads them.
        refresh_cgroups(
            &self.ns,
            &mut h.cgroup,
            &mut self.buf,
            &mut h.cgroup_paths,
            h.scans,
            stat.flags,
            &mut stats.parse_errors,
        );
        h.scans = h.scans.wrapping_add(1);
        Process {
            stat,
            status: Some(status),
            io,
            schedstat,
            cgroups: h.cgroup_paths.clone(),
            cmdline: h.cmdline.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_letters_follow_task_state_index() {
        assert_eq!(state_letter(0, 0), 'R');
        assert_eq!(state_letter(0x1, 0), 'S');
        assert_eq!(state_letter(0x2, 0), 'D');
        assert_eq!(state_letter(0x4, 0), 'T');
        assert_eq!(state_letter(0x8, 0), 't');
        assert_eq!(state_letter(0, 0x10), 'X');
        assert_eq!(state_letter(0, 0x20), 'Z');
        // TASK_DEAD (0x80) with EXIT_ZOMBIE: still a zombie.
        assert_eq!(state_letter(0x80, 0x20), 'Z');
        assert_eq!(state_letter(0x40, 0), 'P');
        // TASK_IDLE = TASK_UNINTERRUPTIBLE | TASK_NOLOAD.
        assert_eq!(state_letter(0x402, 0), 'I');
        // A frozen sleeper shows as D (6.1+: TASK_FROZEN).
        assert_eq!(state_letter(0x8001, 0), 'D');
        // TASK_WAKEKILL | TASK_UNINTERRUPTIBLE (TASK_KILLABLE) reads as D.
        assert_eq!(state_letter(0x102, 0), 'D');
    }

    #[test]
    fn cputime_adjust_splits_exact_runtime_and_stays_monotonic() {
        let mut prev = (0, 0);
        // No ticks yet: all user.
        assert_eq!(cputime_adjust(100, 0, 0, &mut prev), (100, 0));
        // 3:1 user:system by ticks, 1000 ns ran.
        let mut prev = (0, 0);
        assert_eq!(cputime_adjust(1000, 30, 10, &mut prev), (750, 250));
        // The ratio then swings to system, but user never goes back.
        assert_eq!(cputime_adjust(1100, 10, 30, &mut prev), (750, 350));
        // Run time that did not grow: the last answer again.
        assert_eq!(cputime_adjust(1100, 1, 1, &mut prev), (750, 350));
        // Huge values do not overflow.
        let mut prev = (0, 0);
        let r = u64::MAX / 2;
        assert_eq!(cputime_adjust(r, r, r, &mut prev), (r - r / 2, r / 2));
    }

    fn leader(comm: &str) -> TaskLeader {
        let mut l = TaskLeader::default();
        l.comm[..comm.len()].copy_from_slice(comm.as_bytes());
        l
    }

    fn set(dst: &mut [u8], s: &str) {
        dst[..s.len()].copy_from_slice(s.as_bytes());
    }

    #[test]
    fn kernel_thread_names_are_rebuilt_as_proc_shows_them() {
        // A user process: its comm, whatever `name` holds.
        assert_eq!(proc_task_name(0, 0, &leader("bash")), "bash");
        // A kthread with its untruncated name (`get_kthread_comm`).
        let mut l = leader("irq/9-acpi_long");
        set(&mut l.name, "irq/9-acpi_longer_name");
        assert_eq!(
            proc_task_name(PF_KTHREAD, bits::FULL_NAME, &l),
            "irq/9-acpi_longer_name"
        );
        // 6.10+ workers: format_worker_id() plus the last work.
        let mut w = leader("kworker/0:1");
        w.wq_pool_cpu = 0;
        w.wq_worker_id = 1;
        set(&mut w.desc, "events");
        let wq = PF_KTHREAD | PF_WQ_WORKER;
        let b = bits::WQ_ID_FMT | bits::WQ_POOL;
        assert_eq!(proc_task_name(wq, b, &w), "kworker/0:1-events");
        assert_eq!(
            proc_task_name(wq, b | bits::WQ_BUSY, &w),
            "kworker/0:1+events"
        );
        w.wq_nice = -20;
        assert_eq!(proc_task_name(wq, b, &w), "kworker/0:1H-events");
        w.wq_pool_cpu = -1;
        w.wq_pool_id = 8;
        w.wq_worker_id = 2;
        assert_eq!(proc_task_name(wq, b, &w), "kworker/u8:2-events");
        let mut r = leader("kworker/R-mm_pe");
        set(&mut r.name, "mm_percpu_wq");
        assert_eq!(
            proc_task_name(wq, bits::WQ_ID_FMT | bits::WQ_RESCUER, &r),
            "kworker/R-mm_percpu_wq"
        );
        assert_eq!(
            proc_task_name(wq, bits::WQ_ID_FMT, &leader("x")),
            "kworker/dying"
        );
        // Before 6.10: the comm, then the work.
        assert_eq!(proc_task_name(wq, bits::WQ_POOL, &w), "kworker/0:1-events");
    }

    #[test]
    fn threads_are_summed_into_their_process_and_the_leader_keeps_its_own_schedstat() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = TaskAssembler::new(&Root::new(dir.path()), 0, true);
        let all = bits::SIGHAND | bits::MM | bits::IO | bits::SCHED_INFO | bits::RSS_SUM;
        let th = |tid, min_flt, rt, io0| TaskThread {
            tid,
            tgid: 100,
            bits: all,
            min_flt,
            utime_ns: rt / 2,
            stime_ns: rt / 2,
            sum_exec_runtime_ns: rt,
            io: [io0, 0, 0, 0, 0, 0, 0],
            ..Default::default()
        };
        let mut l = leader("app");
        l.nr_threads = 2;
        l.static_prio = 125;
        l.sig_min_flt = 1000;
        l.sig_sum_sched_runtime_ns = 5 * NS_PER_TICK;
        l.sig_utime_ns = 5 * NS_PER_TICK;
        l.sig_io = [7, 0, 0, 0, 0, 0, 0];
        l.rss_count = [10, 20, 5, 1];
        l.rss_sum = [11, 22, 5, 1];
        l.start_boottime_ns = 123 * NS_PER_TICK + 5;
        let mut lead = th(100, 1, 10 * NS_PER_TICK, 100);
        lead.bits |= bits::LEADER;
        let recs = vec![
            TaskRecord {
                thread: lead,
                leader: Some(Box::new(l)),
            },
            TaskRecord {
                thread: th(101, 2, 20 * NS_PER_TICK, 10),
                leader: None,
            },
        ];
        let mut out = Vec::new();
        let st = a.assemble(&recs, &mut out);
        assert!(st.task_iter);
        assert_eq!(out.len(), 1);
        let p = &out[0];
        assert_eq!(p.stat.pid, 100);
        assert_eq!(p.stat.minflt, 1003);
        assert_eq!(p.stat.nice, 5);
        assert_eq!(p.stat.num_threads, 2);
        assert_eq!(p.stat.starttime_ticks, 123);
        // 35 ticks of run time: 5 dead + 10 + 20; the split is user:system 20:15 by ticks.
        assert_eq!(p.stat.utime_ticks + p.stat.stime_ticks, 35);
        assert_eq!(p.stat.utime_ticks, 20);
        // stat's rss reads the central counts, status the per-CPU sums.
        assert_eq!(p.stat.rss_pages, 10 + 20 + 1);
        let s = p.status.as_ref().unwrap();
        assert_eq!(s.rss_anon_bytes, Some(22 * a.page_size));
        assert_eq!(s.rss_file_bytes, Some(11 * a.page_size));
        assert_eq!(p.io.as_ref().unwrap().rchar, 117);
        // schedstat is the leader thread's own run time.
        assert_eq!(p.schedstat.as_ref().unwrap().run_ns, 10 * NS_PER_TICK);
        // A kernel thread (no mm) has no Rss lines, as /proc/<pid>/status.
        let mut k = recs.clone();
        k[0].thread.bits &= !bits::MM;
        a.assemble(&k, &mut out);
        assert_eq!(out[0].status.as_ref().unwrap().rss_anon_bytes, None);
        assert_eq!(out[0].stat.vsize_bytes, 0);
    }
}

#[cfg(test)]
mod thread_waits {
    use super::*;

    fn rec(tid: u32, wait: u64, n: u64) -> TaskRecord {
        TaskRecord {
            thread: TaskThread {
                tid,
                tgid: tid,
                bits: bits::SCHED_INFO,
                run_delay_ns: wait,
                pcount: n,
                ..Default::default()
            },
            leader: None,
        }
    }

    #[test]
    fn every_thread_adds_what_it_gained_and_an_exit_takes_nothing_back() {
        let mut w = ThreadWaits::default();
        // The first scan is the baseline.
        assert_eq!(
            w.scan(&[rec(1, 1_000, 10), rec(2, 5_000, 50)]),
            Some((0, 0))
        );
        // 1 gains 500 ns in 5 slices, 2 exits (its 5,000 ns stay counted), 3 is new.
        assert_eq!(
            w.scan(&[rec(1, 1_500, 15), rec(3, 700, 7)]),
            Some((1_200, 12))
        );
        // 3's tid reused by a thread with less: all of the new one's counts.
        assert_eq!(
            w.scan(&[rec(3, 100, 1), rec(1, 1_500, 15)]),
            Some((1_300, 13))
        );
        // A kernel without sched_info: no counters.
        let mut none = rec(1, 0, 0);
        none.thread.bits = 0;
        assert_eq!(w.scan(&[none]), None);
    }
}
