//! The process collector's fast path: every process's stat, status, io and schedstat fields
//! from one read of a BPF task iterator (tasks.bpf.c) instead of four /proc files per process
//! (issue 23). `jitterscope_sources::task_records` turns the records into the same `Process` the /proc
//! reader makes; /proc stays the fallback where the iterator cannot load, and is still what the
//! command lines and cgroup paths are read from.
//!
//! Not a tracer: nothing is attached to a kernel event, and the program runs only inside the
//! recorder's own `read()`, so it costs the rest of the host nothing between samples.

use std::io::Read;

use jitterscope_model::collector::{Collector, Notes};
use jitterscope_model::sample::Sample;
use jitterscope_model::sources::ProcessCollector;
use jitterscope_sources::process::{
    default_fd_budget, parse_pid_stat, parse_pid_status, ProcessReader, RELIST_SCANS,
};
use jitterscope_sources::redact::Redactor;
use jitterscope_sources::task_records::{bits, TaskAssembler, TaskLeader, TaskRecord, TaskThread};
use jitterscope_sources::Root;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/tasks.skel.rs"));
}
use skel::*;

const THREAD: usize = std::mem::size_of::<types::js_task_thread>();
const LEADER: usize = std::mem::size_of::<types::js_task_leader>();

/// The loaded iterator program.
pub struct TaskIter {
    skel: TasksSkel<'static>,
    link: libbpf_rs::Link,
    buf: Vec<u8>,
}

impl TaskIter {
    /// Loads the program and creates its iterator link; the error says what is missing.
    pub fn load() -> Result<Self, String> {
        if !crate::env::has_btf() {
            return Err("the kernel exposes no BTF (/sys/kernel/btf/vmlinux)".into());
        }
        crate::verifier::install();
        let _ = crate::verifier::take();
        let mut open = TasksSkelBuilder::default()
            .open(crate::object_storage())
            .map_err(|e| format!("opening the BPF object: {e}"))?;
        let cpus =
            libbpf_rs::num_possible_cpus().map_err(|e| format!("counting possible CPUs: {e}"))?;
        open.maps
            .rodata_data
            .as_deref_mut()
            .ok_or("the BPF object has no read-only data")?
            .js_nr_cpus = cpus as u32;
        let skel = open.load().map_err(|e| crate::load_error(&e))?;
        let link = skel
            .progs
            .js_tasks
            .attach()
            .map_err(|e| format!("creating the task iterator (kernel 5.8+): {e}"))?;
        Ok(TaskIter {
            skel,
            link,
            buf: Vec::with_capacity(1 << 18),
        })
    }

    /// Every task now: one iterator session, read to its end.
    pub fn read(&mut self, out: &mut Vec<TaskRecord>) -> Result<(), String> {
        let mut it =
            libbpf_rs::Iter::new(&self.link).map_err(|e| format!("bpf_iter_create: {e}"))?;
        self.buf.clear();
        it.read_to_end(&mut self.buf)
            .map_err(|e| format!("reading the task iterator: {e}"))?;
        parse(&self.buf, out)
    }

    /// Leaders the program could not write (no scratch buffer), since load.
    pub fn missed(&self) -> u64 {
        self.skel
            .maps
            .bss_data
            .as_deref()
            .map_or(0, |b| b.js_missed)
    }
}

fn text<const N: usize>(src: &[i8]) -> [u8; N] {
    let mut d = [0u8; N];
    for (d, s) in d.iter_mut().zip(src) {
        *d = *s as u8;
    }
    d
}

/// Splits an iterator read into records: a thread record, followed by a leader's when its
/// LEADER bit is set. The iterator writes a task's records whole or not at all.
pub fn parse(buf: &[u8], out: &mut Vec<TaskRecord>) -> Result<(), String> {
    out.clear();
    let mut at = 0;
    while at < buf.len() {
        if buf.len() - at < THREAD {
            return Err(format!(
                "task iterator: {} stray bytes at the end",
                buf.len() - at
            ));
        }
        // SAFETY: THREAD bytes are there; the type is plain old data (integers only).
        let t: types::js_task_thread =
            unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
        at += THREAD;
        let thread = TaskThread {
            tid: t.tid,
            tgid: t.tgid,
            bits: t.bits,
            flags: t.flags,
            min_flt: t.min_flt,
            maj_flt: t.maj_flt,
            utime_ns: t.utime_ns,
            stime_ns: t.stime_ns,
            sum_exec_runtime_ns: t.sum_exec_runtime_ns,
            io: t.io,
            run_delay_ns: t.run_delay_ns,
            pcount: t.pcount,
        };
        let leader = if t.bits & bits::LEADER != 0 {
            if buf.len() - at < LEADER {
                return Err("task iterator: a leader record cut short".into());
            }
            // SAFETY: as above.
            let l: types::js_task_leader =
                unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
            at += LEADER;
            Some(Box::new(TaskLeader {
                comm: text(&l.comm),
                name: text(&l.name),
                desc: text(&l.desc),
                state: l.state,
                exit_state: l.exit_state,
                exit_code: l.exit_code,
                group_exit_code: l.group_exit_code,
                sig_flags: l.sig_flags,
                ppid: l.ppid,
                static_prio: l.static_prio,
                nr_threads: l.nr_threads,
                cpu: l.cpu,
                wq_pool_cpu: l.wq_pool_cpu,
                wq_pool_id: l.wq_pool_id,
                wq_worker_id: l.wq_worker_id,
                wq_nice: l.wq_nice,
                start_boottime_ns: l.start_boottime_ns,
                total_vm_pages: l.total_vm,
                rss_count: l.rss_count,
                rss_sum: l.rss_sum,
                nvcsw: l.nvcsw,
                nivcsw: l.nivcsw,
                blkio_delay_ns: l.blkio_delay_ns,
                sig_min_flt: l.sig_min_flt,
                sig_maj_flt: l.sig_maj_flt,
                sig_cmin_flt: l.sig_cmin_flt,
                sig_utime_ns: l.sig_utime_ns,
                sig_stime_ns: l.sig_stime_ns,
                sig_sum_sched_runtime_ns: l.sig_sum_sched_runtime_ns,
                sig_cutime_ns: l.sig_cutime_ns,
                sig_cstime_ns: l.sig_cstime_ns,
                sig_io: l.sig_io,
                prev_utime_ns: l.prev_utime_ns,
                prev_stime_ns: l.prev_stime_ns,
            }))
        } else {
            None
        };
        out.push(TaskRecord { thread, leader });
    }
    Ok(())
}

/// The running kernel's (major, minor), from uname.
fn kernel_version() -> Option<(u32, u32)> {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut it = rel.trim().split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Whether /proc/<pid>/status's Rss* lines are the per-CPU sums (`get_mm_counter_sum`, 6.16
/// and the stable kernels it was backported to) or the central counts. Decided on a process
/// whose two values differ and stay put across a read of its status file; by the version when
/// no process settles it.
fn status_uses_sums(iter: &mut TaskIter, root: &Root) -> bool {
    let by_version = kernel_version().is_some_and(|v| v >= (6, 16));
    let mut first = Vec::new();
    let mut again = Vec::new();
    if iter.read(&mut first).is_err() {
        return by_version;
    }
    const ANON: usize = 1;
    let differs = |l: &TaskLeader| l.rss_count[ANON] != l.rss_sum[ANON];
    let candidates: Vec<&TaskRecord> = first
        .iter()
        .filter(|r| r.thread.bits & bits::RSS_SUM != 0 && r.thread.bits & bits::MM != 0)
        .filter(|r| r.leader.as_deref().is_some_and(differs))
        .take(8)
        .collect();
    let page = 4096u64.max(unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64);
    let statuses: Vec<Option<u64>> = candidates
        .iter()
        .map(|r| {
            let path = root.path(format!("/proc/{}/status", r.thread.tgid));
            let b = std::fs::read(path).ok()?;
            parse_pid_status(&b).ok()?.rss_anon_bytes
        })
        .collect();
    if iter.read(&mut again).is_err() {
        return by_version;
    }
    for (r, status) in candidates.iter().zip(statuses) {
        let (Some(status), Some(l)) = (status, r.leader.as_deref()) else {
            continue;
        };
        let still = again.iter().any(|a| {
            a.thread.tgid == r.thread.tgid
                && a.leader.as_deref().is_some_and(|b| {
                    b.start_boottime_ns == l.start_boottime_ns
                        && b.rss_count[ANON] == l.rss_count[ANON]
                        && b.rss_sum[ANON] == l.rss_sum[ANON]
                })
        });
        if !still {
            continue;
        }
        if status == l.rss_sum[ANON].max(0) as u64 * page {
            return true;
        }
        if status == l.rss_count[ANON].max(0) as u64 * page {
            return false;
        }
    }
    by_version
}

/// Checks that the iterator sees this process as /proc does: a recorder in a child pid or time
/// namespace would get the kernel's initial-namespace pids and boot times.
fn same_view(iter: &mut TaskIter, root: &Root) -> Result<(), String> {
    let me = std::process::id();
    let mut recs = Vec::new();
    iter.read(&mut recs)?;
    let mine = recs
        .iter()
        .find(|r| r.thread.tgid == me && r.leader.is_some())
        .ok_or("the task iterator does not show this process (a pid namespace?)")?;
    let stat = std::fs::read(root.path("/proc/self/stat"))
        .map_err(|e| format!("reading /proc/self/stat: {e}"))?;
    let stat = parse_pid_stat(&stat).map_err(|e| format!("/proc/self/stat: {e}"))?;
    let l = mine.leader.as_deref().expect("checked above");
    let start = jitterscope_sources::task_records::ticks(l.start_boottime_ns);
    if stat.pid != me || start != stat.starttime_ticks {
        return Err(format!(
            "the task iterator's view differs from /proc's (pid {me}: start {start} vs {}; a pid or time namespace?)",
            stat.starttime_ticks
        ));
    }
    Ok(())
}

/// Where the process table comes from (`record --proc-source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcSource {
    /// The task iterator when it loads, else /proc.
    Auto,
    /// The task iterator, or fail.
    Bpf,
    /// /proc only.
    Procfs,
}

struct Fast {
    iter: TaskIter,
    asm: TaskAssembler,
    records: Vec<TaskRecord>,
    /// Reads the processes the iterator does not show.
    proc: ProcessReader,
    /// Those processes, as of the last listing of /proc.
    hidden: Vec<u32>,
    scans_since_listing: u32,
    root: Root,
}

/// The process collector (`processes` in the sample and the self-metrics) with the task
/// iterator as its fast path and the /proc reader as its fallback.
pub struct TaskCollector {
    fast: Option<Fast>,
    fallback: ProcessCollector,
    out: Vec<jitterscope_sources::process::Process>,
}

impl TaskCollector {
    /// Loads the iterator and checks it against /proc. The error says why it cannot be used;
    /// the caller keeps the /proc collector then.
    /// `cmdlines`: what of each command line is kept (secrets masked, or none).
    pub fn start(root: &Root, cmdlines: std::sync::Arc<Redactor>) -> Result<Self, String> {
        if root.dir() != std::path::Path::new("/") {
            return Err("it reads the running kernel, not the tree under --root".into());
        }
        let mut iter = TaskIter::load()?;
        same_view(&mut iter, root)?;
        let sums = status_uses_sums(&mut iter, root);
        let mut asm = TaskAssembler::new(root, default_fd_budget(), sums);
        asm.set_redactor(cmdlines.clone());
        let mut proc = ProcessReader::new(root, default_fd_budget());
        proc.set_redactor(cmdlines.clone());
        Ok(TaskCollector {
            fast: Some(Fast {
                iter,
                asm,
                records: Vec::new(),
                proc,
                hidden: Vec::new(),
                scans_since_listing: RELIST_SCANS,
                root: root.clone(),
            }),
            fallback: ProcessCollector::with_redactor(root, cmdlines),
            out: Vec::new(),
        })
    }

    /// Reads every process once through the iterator (for tests and comparisons).
    pub fn scan(
        &mut self,
    ) -> Result<
        (
            Vec<jitterscope_sources::process::Process>,
            jitterscope_sources::process::ProcessScanStats,
        ),
        String,
    > {
        let f = self
            .fast
            .as_mut()
            .ok_or("the task iterator is not loaded")?;
        let stats = f.scan(&mut self.out)?;
        Ok((std::mem::take(&mut self.out), stats))
    }
}

impl Fast {
    fn scan(
        &mut self,
        out: &mut Vec<jitterscope_sources::process::Process>,
    ) -> Result<jitterscope_sources::process::ProcessScanStats, String> {
        self.iter.read(&mut self.records)?;
        let mut stats = self.asm.assemble(&self.records, out);
        // Some kernels keep tasks from the iterator (this machine's pid 1); /proc is listed now
        // and then to find them, and they are read there. A pid the iterator shows again is
        // dropped from the list.
        self.scans_since_listing += 1;
        if self.scans_since_listing >= RELIST_SCANS {
            self.scans_since_listing = 0;
            let listed: Vec<u32> = std::fs::read_dir(self.root.path("/proc"))
                .map(|rd| {
                    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            self.hidden = listed
                .into_iter()
                .filter(|p| out.binary_search_by_key(p, |q| q.stat.pid).is_err())
                .collect();
        } else {
            self.hidden
                .retain(|p| out.binary_search_by_key(p, |q| q.stat.pid).is_err());
        }
        if !self.hidden.is_empty() {
            let n = out.len();
            self.proc
                .read_pids(&self.hidden, out, &mut stats)
                .map_err(|e| e.to_string())?;
            stats.listed += (out.len() - n) as u64;
            out.sort_by_key(|p| p.stat.pid);
        }
        Ok(stats)
    }
}

impl Collector for TaskCollector {
    fn name(&self) -> &'static str {
        "processes"
    }

    fn collect(&mut self, sample: &mut Sample, notes: &mut Notes) {
        if let Some(f) = self.fast.as_mut() {
            match f.scan(&mut self.out) {
                Ok(stats) => {
                    if !f.hidden.is_empty() {
                        let (n, first) = (f.hidden.len(), f.hidden[0]);
                        notes.once("processes:hidden", || {
                            format!("processes: {n} not shown by the task iterator (pid {first} first); read through /proc")
                        });
                    }
                    if f.iter.missed() > 0 {
                        notes.once("processes:missed", || {
                            "processes: the task iterator could not write some processes".into()
                        });
                    }
                    sample.processes = Some(std::mem::take(&mut self.out));
                    sample.process_scan = Some(stats);
                    return;
                }
                Err(e) => {
                    // Not expected once loaded; /proc from here on rather than a hole.
                    notes.once("processes:iter-failed", || {
                        format!(
                            "processes: the task iterator failed ({e}); reading /proc from now on"
                        )
                    });
                    self.fast = None;
                }
            }
        }
        self.fallback.collect(sample, notes);
    }
}
