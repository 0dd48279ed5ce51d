//! Per-process files under /proc/<pid>: stat, status, io, schedstat, cgroup and cmdline.
//!
//! The recorder reads every process every second, so this is the most expensive source: peers
//! measured 40–270 µs per process per sample. Most of that is path resolution in procfs on
//! open(), not generating the text. [`ProcessReader`] therefore keeps each process's files open
//! and re-reads them with `pread(fd, 0)` (procfs seq_files regenerate on a read from offset 0),
//! which turns four opens+reads+closes per process into four preads. A reaped process answers
//! ESRCH on its old descriptors even if its pid is reused, so stale handles cannot mix two
//! processes. Descriptors are bounded by the RLIMIT_NOFILE budget; past it the reader falls back
//! to open-read-close for the remaining processes.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cgroup::{parse_proc_pid_cgroup, CgroupNs, ProcCgroupPaths};
use crate::fileio::{
    fields, lines, lossy, parse_i64, parse_u64, trim_ascii, ParseError, ReadError,
};
use crate::redact::Redactor;
use crate::Root;

/// Scans between re-reads of a process's /proc/<pid>/cgroup once it has been seen twice.
pub const CGROUP_REFRESH_SCANS: u32 = 10;

/// Scans after which status and io are re-read even for a process that has not run: a safety
/// net for anything that changes those files without the process running (e.g. swap-out
/// moving RSS between counters while the total stays put).
pub const FULL_REFRESH_SCANS: u32 = 30;

/// `/proc/<pid>/stat`, the fields the recorder keeps (raw, as the kernel reports them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PidStat {
    /// Process id.
    pub pid: u32,
    /// Command name (up to 15 bytes, may contain spaces and parentheses).
    pub comm: String,
    /// State letter: R running, S sleeping, D uninterruptible, Z zombie, T stopped, t traced,
    /// X dead, I idle kernel thread.
    pub state: char,
    /// Parent pid.
    pub ppid: u32,
    /// Kernel task flags (`PF_*`); PF_EXITING (0x4) marks a process that is exiting.
    pub flags: u32,
    /// Minor faults (counter).
    pub minflt: u64,
    /// Major faults, i.e. faults that needed I/O (counter).
    pub majflt: u64,
    /// Minor faults of the children it waited for (counter). It rises when the process reaps
    /// a child: the kernel then also folds the child's lifetime I/O counters into this
    /// process's `/proc/<pid>/io` (kernel/exit.c, wait_task_zombie).
    pub cminflt: u64,
    /// CPU time of the children it waited for, user + system, USER_HZ ticks (counter).
    pub children_ticks: u64,
    /// User CPU time, USER_HZ ticks (counter).
    pub utime_ticks: u64,
    /// System CPU time, USER_HZ ticks (counter).
    pub stime_ticks: u64,
    /// Nice value (-20..19).
    pub nice: i64,
    /// Number of threads.
    pub num_threads: u64,
    /// Start time after boot, USER_HZ ticks; with pid it identifies a process across pid reuse.
    pub starttime_ticks: u64,
    /// Virtual size, bytes.
    pub vsize_bytes: u64,
    /// Resident set, pages.
    pub rss_pages: u64,
    /// CPU last run on.
    pub processor: u32,
    /// Aggregated block I/O delay, USER_HZ ticks (needs delay accounting; 0 otherwise).
    pub delayacct_blkio_ticks: u64,
    /// The exit status in waitpid(2) form, which a zombie still shows (field 52, 3.5+; 0 for
    /// a live process): the signal that killed it is its low 7 bits.
    pub exit_code: Option<i32>,
}

impl PidStat {
    /// Whether the process has exited (a zombie, dead, or exiting with its memory already
    /// released): its memory fields read 0 because it has no mm any more, not because it
    /// shrank.
    pub fn exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
            || (self.flags & PF_EXITING != 0 && self.flags & PF_KTHREAD == 0 && self.rss_pages == 0)
    }

    /// The signal that ended an exited process (SIGKILL is 9), None while it runs or when it
    /// exited by itself. do_exit() sets exit_code before it releases the memory, so a process
    /// seen exiting without memory (not yet a zombie) already says how it ended.
    pub fn exit_signal(&self) -> Option<i32> {
        let c = self.exit_code?;
        (self.exited() && c & 0x7f != 0).then_some(c & 0x7f)
    }
}

/// `PF_EXITING` from include/linux/sched.h: set when a task starts exiting.
pub const PF_EXITING: u32 = 0x4;
/// `PF_KTHREAD`: kernel threads (kswapd, kworkers) have no user memory.
pub const PF_KTHREAD: u32 = 0x0020_0000;

/// Parses `/proc/<pid>/stat`. The comm field is delimited by the first '(' and the *last* ')'
/// because the command name itself may contain both.
pub fn parse_pid_stat(buf: &[u8]) -> Result<PidStat, ParseError> {
    let open = buf
        .iter()
        .position(|&c| c == b'(')
        .ok_or_else(|| ParseError::new(1, "no '(' before comm"))?;
    let close = buf
        .iter()
        .rposition(|&c| c == b')')
        .filter(|&c| c > open)
        .ok_or_else(|| ParseError::new(1, "no ')' after comm"))?;
    let pid = parse_u64(&buf[..open], 1, "pid")?;
    let comm = lossy(&buf[open + 1..close]);
    // Field numbers below follow proc(5), counting pid as 1 and comm as 2.
    let mut f: [&[u8]; 50] = [&[]; 50];
    let mut n = 0;
    for (i, v) in fields(&buf[close + 1..]).enumerate() {
        if i >= f.len() {
            break;
        }
        f[i] = v;
        n = i + 1;
    }
    if n < 22 {
        return Err(ParseError::new(1, format!("only {n} fields after comm")));
    }
    let field = |no: usize| f[no - 3];
    let num = |no: usize, what: &str| parse_u64(field(no), 1, what);
    let state = match field(3) {
        [c] if c.is_ascii_alphabetic() => *c as char,
        _ => return Err(ParseError::new(1, "bad state")),
    };
    Ok(PidStat {
        pid: u32::try_from(pid).map_err(|_| ParseError::new(1, "pid out of range"))?,
        comm,
        state,
        ppid: num(4, "ppid")? as u32,
        flags: num(9, "flags")? as u32,
        minflt: num(10, "minflt")?,
        majflt: num(12, "majflt")?,
        cminflt: num(11, "cminflt")?,
        children_ticks: num(16, "cutime")?.saturating_add(num(17, "cstime")?),
        utime_ticks: num(14, "utime")?,
        stime_ticks: num(15, "stime")?,
        nice: parse_i64(field(19), 1, "nice")?,
        num_threads: num(20, "num_threads")?,
        starttime_ticks: num(22, "starttime")?,
        vsize_bytes: if n >= 21 { num(23, "vsize")? } else { 0 },
        rss_pages: if n >= 22 {
            // rss can be reported as a negative number transiently on some kernels; treat as 0.
            parse_i64(field(24), 1, "rss")?.max(0) as u64
        } else {
            0
        },
        processor: if n >= 37 {
            num(39, "processor")? as u32
        } else {
            0
        },
        delayacct_blkio_ticks: if n >= 40 {
            num(42, "delayacct_blkio_ticks")?
        } else {
            0
        },
        exit_code: if n >= 50 {
            Some(parse_i64(field(52), 1, "exit_code")? as i32)
        } else {
            None
        },
    })
}

/// The fields of `/proc/<pid>/status` that /proc/<pid>/stat does not have.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PidStatus {
    /// Resident anonymous memory, bytes (RssAnon).
    pub rss_anon_bytes: Option<u64>,
    /// Resident file-backed memory, bytes (RssFile).
    pub rss_file_bytes: Option<u64>,
    /// Resident shared memory (tmpfs, shm), bytes (RssShmem).
    pub rss_shmem_bytes: Option<u64>,
    /// Swapped-out anonymous memory, bytes (VmSwap).
    pub swap_bytes: Option<u64>,
    /// Voluntary context switches: the task blocked (counter).
    pub voluntary_ctxt_switches: Option<u64>,
    /// Involuntary context switches: the task was preempted (counter).
    pub nonvoluntary_ctxt_switches: Option<u64>,
}

fn kb_value(v: &[u8], line: usize, what: &str) -> Result<u64, ParseError> {
    let v = trim_ascii(v);
    let num = v.strip_suffix(b"kB").unwrap_or(v);
    Ok(parse_u64(num, line, what)?.saturating_mul(1024))
}

/// Parses `/proc/<pid>/status`, keeping only the fields listed in [`PidStatus`]. Kernel threads
/// have no Rss* lines; those stay `None`.
pub fn parse_pid_status(buf: &[u8]) -> Result<PidStatus, ParseError> {
    let mut s = PidStatus::default();
    let mut seen_any = false;
    for (n, l) in lines(buf) {
        let Some(colon) = l.iter().position(|&c| c == b':') else {
            continue;
        };
        let (k, v) = (&l[..colon], &l[colon + 1..]);
        seen_any = true;
        match k {
            b"RssAnon" => s.rss_anon_bytes = Some(kb_value(v, n, "RssAnon")?),
            b"RssFile" => s.rss_file_bytes = Some(kb_value(v, n, "RssFile")?),
            b"RssShmem" => s.rss_shmem_bytes = Some(kb_value(v, n, "RssShmem")?),
            b"VmSwap" => s.swap_bytes = Some(kb_value(v, n, "VmSwap")?),
            b"voluntary_ctxt_switches" => {
                s.voluntary_ctxt_switches = Some(parse_u64(v, n, k_str(k))?)
            }
            b"nonvoluntary_ctxt_switches" => {
                s.nonvoluntary_ctxt_switches = Some(parse_u64(v, n, k_str(k))?)
            }
            _ => {}
        }
    }
    if !seen_any {
        return Err(ParseError::new(0, "no 'Key: value' lines"));
    }
    Ok(s)
}

fn k_str(k: &[u8]) -> &str {
    std::str::from_utf8(k).unwrap_or("field")
}

/// `/proc/<pid>/io` (readable by the owner or root).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PidIo {
    /// Bytes passed to read-like syscalls (counter).
    pub rchar: u64,
    /// Bytes passed to write-like syscalls (counter).
    pub wchar: u64,
    /// Bytes this process caused to be fetched from storage (counter).
    pub read_bytes: u64,
    /// Bytes this process caused to be sent to storage (counter).
    pub write_bytes: u64,
    /// Written bytes whose writeback was cancelled by truncation (counter).
    pub cancelled_write_bytes: u64,
}

/// Parses `/proc/<pid>/io`.
pub fn parse_pid_io(buf: &[u8]) -> Result<PidIo, ParseError> {
    let mut io = PidIo::default();
    let mut seen = 0;
    for (n, l) in lines(buf) {
        let Some(colon) = l.iter().position(|&c| c == b':') else {
            return Err(ParseError::new(n, "expected 'key: value'"));
        };
        let (k, v) = (&l[..colon], &l[colon + 1..]);
        let slot = match k {
            b"rchar" => &mut io.rchar,
            b"wchar" => &mut io.wchar,
            b"read_bytes" => &mut io.read_bytes,
            b"write_bytes" => &mut io.write_bytes,
            b"cancelled_write_bytes" => &mut io.cancelled_write_bytes,
            _ => continue,
        };
        *slot = parse_u64(v, n, k_str(k))?;
        seen += 1;
    }
    if seen == 0 {
        return Err(ParseError::new(0, "no known io fields"));
    }
    Ok(io)
}

/// `/proc/<pid>/schedstat`: time on CPU, time waiting on a run queue, and timeslices.
/// The run-queue wait is per-process scheduling latency, the signal behind "load soars".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PidSchedstat {
    /// Time spent running, ns (counter).
    pub run_ns: u64,
    /// Time spent runnable but waiting for a CPU, ns (counter).
    pub wait_ns: u64,
    /// Number of timeslices run (counter).
    pub timeslices: u64,
}

/// Parses `/proc/<pid>/schedstat`.
pub fn parse_pid_schedstat(buf: &[u8]) -> Result<PidSchedstat, ParseError> {
    let mut it = fields(buf);
    let mut next = |what| parse_u64(it.next().unwrap_or_default(), 1, what);
    Ok(PidSchedstat {
        run_ns: next("run_ns")?,
        wait_ns: next("wait_ns")?,
        timeslices: next("timeslices")?,
    })
}

/// One process in one sample: everything the recorder keeps about it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Process {
    /// /proc/<pid>/stat.
    pub stat: PidStat,
    /// /proc/<pid>/status memory and context-switch fields (None when unreadable).
    pub status: Option<PidStatus>,
    /// /proc/<pid>/io (None without permission, e.g. when not root).
    pub io: Option<PidIo>,
    /// /proc/<pid>/schedstat (None when the kernel has no schedstats).
    pub schedstat: Option<PidSchedstat>,
    /// The process's cgroups (v1 cpu/cpuacct/memory and v2 paths) from /proc/<pid>/cgroup.
    /// Re-read on the first two scans of a process (launchers move a child right after fork)
    /// and then every [`CGROUP_REFRESH_SCANS`] scans: membership rarely changes, and this file
    /// was a sixth of the per-process kernel cost.
    ///
    /// Named `cgroups` because recordings of the first development build stored the raw text
    /// under `cgroup`; a new name lets those decode (the old field is ignored) instead of failing.
    /// Shared with the reader's cache: cloning it per sample is a reference count, not four
    /// string copies.
    pub cgroups: Option<Arc<ProcCgroupPaths>>,
    /// Command line, read once when the process is first seen (empty for kernel threads).
    pub cmdline: Arc<str>,
}

/// What one pass over /proc cost and skipped, for the recorder's self-metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessScanStats {
    /// Processes listed in /proc.
    pub listed: u64,
    /// Processes that vanished between listing and reading (skipped).
    pub vanished: u64,
    /// Files that could not be parsed (the process is kept with that part missing).
    pub parse_errors: u64,
    /// Processes read through open-read-close because the descriptor budget was spent.
    pub unkept: u64,
    /// Open descriptors held for processes after the pass.
    pub open_fds: u64,
    /// Processes whose leader thread had not run since the previous pass, whose status (and,
    /// when single-threaded, io) were carried forward instead of re-read.
    pub carried_forward: u64,
    /// Single-threaded processes that had not run and whose RSS (from statm) was unchanged,
    /// whose stat was carried forward instead of re-read.
    pub stat_carried_forward: u64,
    /// /proc was not listed because no fork happened since the last listing.
    pub listing_skipped: bool,
    /// The processes came from the BPF task iterator (`crate::task_records`), not from their /proc
    /// files; the carry-forward counts above are then 0.
    pub task_iter: bool,
    /// Run-queue wait of every thread on the host since the recorder started, ns: each
    /// thread's `sched_info.run_delay` gained between scans, summed (task iterator only: /proc
    /// would take a file per thread).
    pub thread_wait_ns: Option<u64>,
    /// Timeslices (`sched_info.pcount`) of every thread since the recorder started, as above.
    pub thread_slices: Option<u64>,
}

/// A file of one process: kept open when the budget allows, else reopened for each read.
pub(crate) struct PidFile {
    pub(crate) path: PathBuf,
    pub(crate) file: Option<File>,
}

impl PidFile {
    /// Reads the file into `buf` and returns its length. `buf` only ever grows: re-zeroing a
    /// 4 KiB buffer five times per process per second showed up in profiles.
    pub(crate) fn read(&mut self, buf: &mut Vec<u8>) -> Result<usize, ReadError> {
        let err = |path: &PathBuf, source| ReadError::Io {
            path: path.clone(),
            source,
        };
        match &self.file {
            Some(f) => {
                if buf.len() < 4096 {
                    buf.resize(4096, 0);
                }
                loop {
                    let n = f.read_at(buf, 0).map_err(|e| err(&self.path, e))?;
                    // procfs text files of one process are small; grow only if a read fills
                    // the buffer (cgroup can be long with deep paths).
                    if n < buf.len() || buf.len() >= 1 << 20 {
                        return Ok(n);
                    }
                    let l = buf.len();
                    buf.resize(l * 4, 0);
                }
            }
            None => {
                crate::fileio::read_into(&self.path, buf)?;
                Ok(buf.len())
            }
        }
    }
}

/// Reads a command line, its secrets masked by `r`; empty when unreadable (kernel threads
/// have none) or when `r` keeps none.
pub(crate) fn read_cmdline(
    path: &std::path::Path,
    buf: &mut Vec<u8>,
    max: usize,
    r: &Redactor,
) -> Arc<str> {
    if !r.keeps_cmdlines() {
        return Arc::from("");
    }
    match crate::fileio::read_into(path, buf) {
        Ok(()) => r.cmdline(buf, max).into(),
        Err(_) => Arc::from(""),
    }
}

/// The resident-pages field (the second) of `/proc/<pid>/statm`.
pub fn parse_statm_resident(buf: &[u8]) -> Result<u64, ParseError> {
    parse_u64(fields(buf).nth(1).unwrap_or_default(), 1, "statm resident")
}

/// Reads one optional file of a process; a vanished file is `None`, a malformed one is `None`
/// and counted.
pub(crate) fn read_part<T>(
    f: &mut PidFile,
    buf: &mut Vec<u8>,
    parse: fn(&[u8]) -> Result<T, ParseError>,
    errors: &mut u64,
) -> Option<T> {
    let n = f.read(buf).ok()?;
    match parse(&buf[..n]) {
        Ok(v) => Some(v),
        Err(_) => {
            *errors += 1;
            None
        }
    }
}

struct PidHandle {
    starttime_ticks: u64,
    stat: PidFile,
    statm: PidFile,
    status: PidFile,
    io: PidFile,
    schedstat: PidFile,
    cgroup: PidFile,
    cmdline: Arc<str>,
    cmdline_path: PathBuf,
    last_stat: Option<PidStat>,
    last_statm_resident: Option<u64>,
    io_denied: bool,
    cgroup_paths: Option<Arc<ProcCgroupPaths>>,
    scans: u32,
    /// status and io as last read, with the run time and RSS they were read at.
    last_status: Option<PidStatus>,
    last_io: Option<PidIo>,
    last_run_ns: Option<u64>,
    last_rss_pages: u64,
}

/// Reads every process under `<root>/proc` each time [`ProcessReader::scan`] is called.
pub struct ProcessReader {
    proc_dir: PathBuf,
    handles: HashMap<u32, PidHandle>,
    buf: Vec<u8>,
    fd_budget: u64,
    fds_open: u64,
    max_cmdline: usize,
    /// What of a command line is kept ([`crate::redact`]).
    redactor: Arc<Redactor>,
    /// Pids read by the last scan, sorted.
    known: Vec<u32>,
    /// The fork counter when /proc was last listed.
    listed_at_forks: Option<u64>,
    scans_since_listing: u32,
    /// Resolves /proc/<pid>/cgroup paths when the recorder runs in a cgroup namespace.
    ns: CgroupNs,
}

const FILES_PER_PID: u64 = 6;

/// Scans after which /proc is listed even if the fork counter has not moved.
pub const RELIST_SCANS: u32 = 60;

impl ProcessReader {
    /// A reader of `<root>/proc`. `fd_budget` bounds the descriptors kept open (use
    /// [`default_fd_budget`]).
    pub fn new(root: &Root, fd_budget: u64) -> Self {
        ProcessReader {
            proc_dir: root.path("/proc"),
            handles: HashMap::new(),
            buf: Vec::with_capacity(4096),
            fd_budget,
            fds_open: 0,
            max_cmdline: 4096,
            redactor: Arc::new(Redactor::default()),
            known: Vec::new(),
            listed_at_forks: None,
            scans_since_listing: 0,
            ns: CgroupNs::for_root(root),
        }
    }

    /// Keeps command lines as `r` says (secrets masked, or none at all) from now on.
    pub fn set_redactor(&mut self, r: Arc<Redactor>) {
        self.redactor = r;
    }

    fn open_handle(&mut self, pid: u32) -> Result<PidHandle, ReadError> {
        let dir = self.proc_dir.join(pid.to_string());
        let keep = self.fds_open + FILES_PER_PID <= self.fd_budget;
        let mk = |name: &str| -> PidFile {
            let path = dir.join(name);
            let file = if keep { File::open(&path).ok() } else { None };
            PidFile { path, file }
        };
        let mut stat = mk("stat");
        // The first read both validates the pid and records its start time.
        let n = stat.read(&mut self.buf)?;
        let st = parse_pid_stat(&self.buf[..n]).map_err(|source| ReadError::Parse {
            path: stat.path.clone(),
            source,
        })?;
        let h = PidHandle {
            starttime_ticks: st.starttime_ticks,
            stat,
            status: mk("status"),
            io: mk("io"),
            schedstat: mk("schedstat"),
            cgroup: mk("cgroup"),
            statm: mk("statm"),
            cmdline: read_cmdline(
                &dir.join("cmdline"),
                &mut self.buf,
                self.max_cmdline,
                &self.redactor,
            ),
            cmdline_path: dir.join("cmdline"),
            last_stat: Some(st.clone()),
            last_statm_resident: None,
            io_denied: false,
            cgroup_paths: None,
            scans: 0,
            last_status: None,
            last_io: None,
            last_run_ns: None,
            last_rss_pages: 0,
        };
        self.fds_open += h.open_count();
        Ok(h)
    }

    /// Reads every process. Processes that vanish mid-read are skipped and counted; a pid reused
    /// by a new process gets fresh handles (its old descriptors answer ESRCH).
    pub fn scan(
        &mut self,
        out: &mut Vec<Process>,
        forks: Option<u64>,
    ) -> Result<ProcessScanStats, ReadError> {
        let mut stats = ProcessScanStats::default();
        // /proc/stat's `processes` counts every fork on the host. If it has not moved since the
        // last listing, no process can have appeared, so the known pids are read without
        // listing /proc (13% of the recorder's CPU on a quiet host); exits still show as ESRCH
        // on the kept descriptors. Listed anyway every RELIST_SCANS scans.
        let skip_listing = forks.is_some()
            && forks == self.listed_at_forks
            && !self.known.is_empty()
            && self.scans_since_listing < RELIST_SCANS;
        let pids = if skip_listing {
            self.scans_since_listing += 1;
            stats.listing_skipped = true;
            std::mem::take(&mut self.known)
        } else {
            let rd = std::fs::read_dir(&self.proc_dir).map_err(|source| ReadError::Io {
                path: self.proc_dir.clone(),
                source,
            })?;
            let mut pids: Vec<u32> = rd
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
                .collect();
            pids.sort_unstable();
            self.listed_at_forks = forks;
            self.scans_since_listing = 0;
            // Drop handles of processes no longer listed.
            let gone: Vec<u32> = self
                .handles
                .keys()
                .filter(|pid| pids.binary_search(pid).is_err())
                .copied()
                .collect();
            for pid in gone {
                if let Some(h) = self.handles.remove(&pid) {
                    self.fds_open -= h.open_count();
                }
            }
            pids
        };
        stats.listed = pids.len() as u64;

        out.clear();
        out.reserve(pids.len());
        for pid in pids {
            match self.read_one(pid, true, &mut stats) {
                Ok(Some(p)) => out.push(p),
                // Without a listing, a gone pid exited since the last scan; it did not vanish
                // between listing and reading.
                Ok(None) if skip_listing => {}
                Ok(None) => stats.vanished += 1,
                Err(e) => return Err(e),
            }
        }
        self.known = out.iter().map(|p| p.stat.pid).collect();
        stats.open_fds = self.fds_open;
        Ok(stats)
    }

    /// Reads the processes `pids` (no listing), appending them to `out`; those gone are skipped.
    /// The task iterator's path reads through this the few processes it does not show.
    pub fn read_pids(
        &mut self,
        pids: &[u32],
        out: &mut Vec<Process>,
        stats: &mut ProcessScanStats,
    ) -> Result<(), ReadError> {
        for &pid in pids {
            if let Some(p) = self.read_one(pid, true, stats)? {
                out.push(p);
            }
        }
        let keep: std::collections::HashSet<u32> = pids.iter().copied().collect();
        let gone: Vec<u32> = self
            .handles
            .keys()
            .filter(|p| !keep.contains(p))
            .copied()
            .collect();
        for pid in gone {
            if let Some(h) = self.handles.remove(&pid) {
                self.fds_open -= h.open_count();
            }
        }
        Ok(())
    }

    /// Drops the handles of `pid` and, on the first attempt, reads it afresh.
    fn reopen(
        &mut self,
        pid: u32,
        retry: bool,
        stats: &mut ProcessScanStats,
    ) -> Result<Option<Process>, ReadError> {
        if let Some(h) = self.handles.remove(&pid) {
            self.fds_open -= h.open_count();
        }
        if retry {
            self.read_one(pid, false, stats)
        } else {
            Ok(None)
        }
    }

    fn read_one(
        &mut self,
        pid: u32,
        retry: bool,
        stats: &mut ProcessScanStats,
    ) -> Result<Option<Process>, ReadError> {
        if !self.handles.contains_key(&pid) {
            match self.open_handle(pid) {
                Ok(h) => {
                    self.handles.insert(pid, h);
                }
                Err(e) if e.is_missing() => return Ok(None),
                Err(ReadError::Parse { .. }) => {
                    stats.parse_errors += 1;
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
        let h = self.handles.get_mut(&pid).expect("inserted above");
        if h.stat.file.is_none() {
            stats.unkept += 1;
        }
        let buf = &mut self.buf;
        let ns = &self.ns;
        let mut parse_errors = 0;
        let refresh = h.scans.is_multiple_of(FULL_REFRESH_SCANS);
        let schedstat = match h.schedstat.read(buf) {
            Ok(n) => match parse_pid_schedstat(&buf[..n]) {
                Ok(s) => Some(s),
                Err(_) => {
                    parse_errors += 1;
                    None
                }
            },
            // Exited, or exited and the pid was reused: reopen once if still listed.
            Err(e) if e.is_missing() => return self.reopen(pid, retry, stats),
            Err(_) => None,
        };
        let run_ns = schedstat.as_ref().map(|s| s.run_ns);
        let leader_idle = run_ns.is_some() && run_ns == h.last_run_ns && !refresh;
        // A single-threaded process whose thread has not run since the last scan has the same
        // CPU times, faults, threads, comm (exec needs to run) and exit state as then; only its
        // RSS can move (reclaim, swap-out), which statm shows at a fifth of stat's cost
        // (do_task_stat was the largest kernel cost of a scan).
        // statm's resident count is exact while stat's rss is an approximate per-CPU counter
        // sum on current kernels, so statm is compared with its own previous value.
        let mut stat = None;
        if leader_idle {
            if let Some(last) = h.last_stat.as_ref().filter(|l| l.num_threads == 1) {
                if let Ok(n) = h.statm.read(buf) {
                    let resident = parse_statm_resident(&buf[..n]).ok();
                    if resident.is_some() && resident == h.last_statm_resident {
                        stat = Some(last.clone());
                        stats.stat_carried_forward += 1;
                    }
                    h.last_statm_resident = resident;
                }
            }
        } else {
            h.last_statm_resident = None;
        }
        let stat = match stat {
            Some(s) => s,
            None => {
                let s = match h.stat.read(buf) {
                    Ok(n) => match parse_pid_stat(&buf[..n]) {
                        Ok(s) => s,
                        Err(_) => {
                            stats.parse_errors += 1;
                            return Ok(None);
                        }
                    },
                    Err(e) if e.is_missing() => return self.reopen(pid, retry, stats),
                    Err(e) => return Err(e),
                };
                if s.starttime_ticks != h.starttime_ticks {
                    // Only reachable in open-per-read mode, where a path can reach a new process.
                    return self.reopen(pid, retry, stats);
                }
                if h.last_stat.as_ref().is_some_and(|l| l.comm != s.comm) {
                    // The process exec'd: its command line changed too.
                    h.cmdline =
                        read_cmdline(&h.cmdline_path, buf, self.max_cmdline, &self.redactor);
                }
                h.last_stat = Some(s.clone());
                s
            }
        };
        // schedstat and status's context-switch counts are the thread-group leader's; stat's
        // rss and io are the whole process's. A leader that has not run since the last scan
        // cannot have switched context, and with an unchanged RSS the memory split is unchanged
        // too, so its last status is still exact and is not re-read. io is carried forward only
        // for single-threaded processes, where the leader is the whole process. On a typical
        // host most processes sleep through any given second, and status is the most expensive
        // file to generate. schedstat's run time is exact to the nanosecond.
        let idle = leader_idle && stat.rss_pages == h.last_rss_pages;
        let status = if idle {
            stats.carried_forward += 1;
            h.last_status.clone()
        } else {
            let status = read_part(&mut h.status, buf, parse_pid_status, &mut parse_errors);
            h.last_status = status.clone();
            status
        };
        let io = if idle && stat.num_threads == 1 {
            h.last_io.clone()
        } else if h.io_denied {
            None
        } else {
            let mut io = None;
            match h.io.read(buf) {
                Ok(n) => {
                    io = parse_pid_io(&buf[..n]).ok();
                    if io.is_none() {
                        parse_errors += 1;
                    }
                }
                // Do not retry a denied file every second for the process's lifetime.
                Err(e) if e.is_permission() => h.io_denied = true,
                Err(_) => {}
            }
            h.last_io = io.clone();
            io
        };
        h.last_run_ns = run_ns;
        h.last_rss_pages = stat.rss_pages;
        refresh_cgroups(
            ns,
            &mut h.cgroup,
            buf,
            &mut h.cgroup_paths,
            h.scans,
            stat.flags,
            &mut parse_errors,
        );
        h.scans = h.scans.wrapping_add(1);
        stats.parse_errors += parse_errors;
        let cgroup = h.cgroup_paths.clone();
        Ok(Some(Process {
            stat,
            status,
            io,
            schedstat,
            cgroups: cgroup,
            cmdline: h.cmdline.clone(),
        }))
    }
}

/// Re-reads a process's cgroups when due: on its first two scans (launchers move a child right
/// after fork) and every [`CGROUP_REFRESH_SCANS`]. An exiting task's v1 paths read "/"
/// (proc_cgroup_show prints the real path only for the unified hierarchy once PF_EXITING is
/// set): the paths it had while it ran are kept, and one first seen exiting gets no v1 paths
/// rather than the root's. Shared by the /proc reader and the task iterator's assembler.
pub(crate) fn refresh_cgroups(
    ns: &CgroupNs,
    file: &mut PidFile,
    buf: &mut Vec<u8>,
    paths: &mut Option<Arc<ProcCgroupPaths>>,
    scans: u32,
    flags: u32,
    errors: &mut u64,
) {
    let exiting = flags & PF_EXITING != 0;
    let due = scans < 2 || scans.is_multiple_of(CGROUP_REFRESH_SCANS);
    if !due || (exiting && paths.is_some()) {
        return;
    }
    let read = read_part(
        file,
        buf,
        |b| parse_proc_pid_cgroup(b).map(|c| c.to_paths()),
        errors,
    )
    .map(|p| ns.apply(p))
    .map(|mut p| {
        if exiting {
            p.forget_v1();
        } else if let Some(old) = paths.as_deref().filter(|old| p.v1_at_root_only(old)) {
            // The task started exiting after its flags were read (the task iterator reads them
            // before this file): its v1 paths read "/" as an exiting task's do, and the ones
            // it ran in stand. (A 5.10 guest's lab worker was charged to "/" so.)
            p.keep_v1_of(old);
        }
        Arc::new(p)
    });
    // Keep the shared copy when nothing changed, so consecutive samples share it.
    if read.is_some() && read != *paths {
        *paths = read;
    }
}

impl PidHandle {
    fn open_count(&self) -> u64 {
        [
            &self.stat,
            &self.statm,
            &self.status,
            &self.io,
            &self.schedstat,
            &self.cgroup,
        ]
        .iter()
        .filter(|f| f.file.is_some())
        .count() as u64
    }
}

/// Descriptors the process reader may keep: the soft RLIMIT_NOFILE minus a reserve for the
/// store, cgroup walks and everything else the recorder opens.
pub fn default_fd_budget() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and has no other effects.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0;
    if !ok {
        return 0;
    }
    rl.rlim_cur.saturating_sub(512)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/host");

    fn fixture_pids() -> Vec<u32> {
        let mut v: Vec<u32> = std::fs::read_dir(format!("{FX}/proc"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn parses_captured_stat_of_init_and_kthread() {
        let init = parse_pid_stat(&std::fs::read(format!("{FX}/proc/1/stat")).unwrap()).unwrap();
        assert_eq!(init.pid, 1);
        assert_eq!(init.ppid, 0);
        assert!(init.rss_pages > 0);
        assert_eq!(init.flags & PF_KTHREAD, 0);
        let kt = parse_pid_stat(&std::fs::read(format!("{FX}/proc/2/stat")).unwrap()).unwrap();
        assert_eq!(kt.comm, "kthreadd");
        assert_ne!(kt.flags & PF_KTHREAD, 0);
        assert_eq!(kt.rss_pages, 0);
    }

    #[test]
    fn a_zombie_says_it_exited_and_how() {
        // Captured by scripts/capture-exit-fixtures.sh: a child killed by SIGKILL, not yet
        // waited for. Its rss field is 0 because it has no mm any more, not because it shrank.
        let z =
            parse_pid_stat(&std::fs::read(format!("{FX}/../edge/zombie-sigkill.stat")).unwrap())
                .unwrap();
        assert_eq!(z.state, 'Z');
        assert_eq!(z.rss_pages, 0);
        assert!(z.exited());
        assert_eq!(z.exit_signal(), Some(9));
        let init = parse_pid_stat(&std::fs::read(format!("{FX}/proc/1/stat")).unwrap()).unwrap();
        assert!(!init.exited());
        assert_eq!(init.exit_signal(), None);
        assert_eq!(init.exit_code, Some(0));
        // A kernel thread has no mm either, and has not exited.
        let kt = parse_pid_stat(&std::fs::read(format!("{FX}/proc/2/stat")).unwrap()).unwrap();
        assert!(!kt.exited());
        // Still exiting (PF_EXITING, memory gone), not yet a zombie: the signal is known.
        let mut exiting = z.clone();
        exiting.state = 'R';
        exiting.flags |= PF_EXITING;
        assert!(exiting.exited());
        assert_eq!(exiting.exit_signal(), Some(9));
        // A live process with a stale code says nothing.
        let mut live = exiting.clone();
        live.flags &= !PF_EXITING;
        assert_eq!(live.exit_signal(), None);
    }

    #[test]
    fn comm_with_spaces_and_parens() {
        let line = b"4242 (a) b (c)) R 1 4242 4242 0 -1 4194560 10 0 2 0 7 3 0 0 20 0 1 0 555 1000 20 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 9 0 0\n";
        let s = parse_pid_stat(line).unwrap();
        assert_eq!(s.comm, "a) b (c)");
        assert_eq!(s.state, 'R');
        assert_eq!(s.minflt, 10);
        assert_eq!(s.majflt, 2);
        assert_eq!(s.utime_ticks, 7);
        assert_eq!(s.stime_ticks, 3);
        assert_eq!(s.starttime_ticks, 555);
        assert_eq!(s.rss_pages, 20);
        assert_eq!(s.processor, 1);
        assert_eq!(s.delayacct_blkio_ticks, 9);
    }

    #[test]
    fn parses_captured_status_io_schedstat() {
        let pids = fixture_pids();
        let user = pids
            .iter()
            .copied()
            .find(|&p| p > 2)
            .expect("a user pid in fixture");
        let st =
            parse_pid_status(&std::fs::read(format!("{FX}/proc/{user}/status")).unwrap()).unwrap();
        assert!(st.rss_anon_bytes.unwrap() > 0);
        assert!(st.voluntary_ctxt_switches.is_some());
        let io = parse_pid_io(&std::fs::read(format!("{FX}/proc/{user}/io")).unwrap()).unwrap();
        assert!(io.rchar > 0);
        let ss =
            parse_pid_schedstat(&std::fs::read(format!("{FX}/proc/1/schedstat")).unwrap()).unwrap();
        assert!(ss.run_ns > 0);
        // A kernel thread's status has no Rss lines.
        let kt = parse_pid_status(&std::fs::read(format!("{FX}/proc/2/status")).unwrap()).unwrap();
        assert_eq!(kt.rss_anon_bytes, None);
    }

    #[test]
    fn reader_on_fixture_root() {
        let mut r = ProcessReader::new(&Root::new(FX), 1000);
        let mut out = Vec::new();
        let st = r.scan(&mut out, None).unwrap();
        assert_eq!(st.listed as usize, fixture_pids().len());
        assert_eq!(out.len(), fixture_pids().len());
        assert!(out.iter().any(|p| p.stat.pid == 1
            && p.cgroups
                .as_ref()
                .is_some_and(|c| c.cpu.as_deref() == Some("/"))));
        assert!(out.iter().any(|p| p.stat.comm == "kthreadd"));
    }

    #[test]
    fn reader_live_sees_itself_and_children_vanishing() {
        let mut r = ProcessReader::new(&Root::default(), 100_000);
        let mut out = Vec::new();
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let cpid = child.id();
        r.scan(&mut out, None).unwrap();
        let mine = out.iter().find(|p| p.stat.pid == me).expect("self listed");
        assert!(mine.stat.num_threads >= 1);
        assert!(out
            .iter()
            .any(|p| p.stat.pid == cpid && &*p.cmdline == "sleep 30"));
        child.kill().unwrap();
        child.wait().unwrap();
        // The kept descriptors of the reaped child now answer ESRCH: skipped, not an error.
        r.scan(&mut out, None).unwrap();
        assert!(!out.iter().any(|p| p.stat.pid == cpid));
    }

    #[test]
    fn process_vanishing_between_listing_and_reading_is_skipped_and_counted() {
        // A pid directory that is listed but whose files are gone is what a process exiting
        // between readdir and open looks like.
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        std::fs::create_dir_all(root.path("/proc/1")).unwrap();
        std::fs::create_dir_all(root.path("/proc/777")).unwrap();
        for f in ["stat", "status", "io", "schedstat", "cgroup", "cmdline"] {
            if let Ok(b) = std::fs::read(format!("{FX}/proc/1/{f}")) {
                std::fs::write(root.path(format!("/proc/1/{f}")), b).unwrap();
            }
        }
        // A stat that is truncated mid-write by a dying process: counted as a parse error.
        std::fs::create_dir_all(root.path("/proc/778")).unwrap();
        std::fs::write(root.path("/proc/778/stat"), b"778 (half").unwrap();
        let mut r = ProcessReader::new(&root, 100);
        let mut out = Vec::new();
        let st = r.scan(&mut out, None).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].stat.pid, 1);
        assert_eq!(st.listed, 3);
        assert_eq!(st.vanished, 2);
        assert_eq!(st.parse_errors, 1);
    }

    /// A process that becomes a zombie keeps the v1 cgroups it had while it ran: the kernel
    /// shows an exiting task's v1 paths as "/" (captured on this machine by
    /// scripts/capture-exit-fixtures.sh), which made a leak's memory cgroup the root.
    #[test]
    fn a_zombie_keeps_the_cgroups_it_ran_in() {
        let edge = format!("{FX}/../edge");
        let zombie_stat = std::fs::read_to_string(format!("{edge}/zombie-sigkill.stat")).unwrap();
        let (head, rest) = zombie_stat.split_once(") ").unwrap();
        let mut f: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
        // Running: state S, PF_EXITING clear, some RSS (fields 3, 9 and 24 of stat).
        f[0] = "S".into();
        f[6] = (f[6].parse::<u32>().unwrap() & !PF_EXITING).to_string();
        f[21] = "1000".into();
        let running_stat = format!("{head}) {}\n", f.join(" "));
        let pid: u32 = head.split(' ').next().unwrap().parse().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let d = root.path(format!("/proc/{pid}"));
        std::fs::create_dir_all(&d).unwrap();
        for f in ["status", "io", "cmdline"] {
            if let Ok(b) = std::fs::read(format!("{FX}/proc/1/{f}")) {
                std::fs::write(d.join(f), b).unwrap();
            }
        }
        let write = |stat: &str, cgroup: &str, run_ns: u64| {
            std::fs::write(d.join("stat"), stat).unwrap();
            std::fs::write(
                d.join("cgroup"),
                std::fs::read(format!("{edge}/{cgroup}")).unwrap(),
            )
            .unwrap();
            std::fs::write(d.join("schedstat"), format!("{run_ns} 0 1\n")).unwrap();
        };
        let memory = |p: &Process| p.cgroups.as_ref().and_then(|c| c.memory.clone());
        let mut r = ProcessReader::new(&root, 100);
        let mut out = Vec::new();
        write(&running_stat, "parent-v1.cgroup", 100);
        for n in 0..2 {
            r.scan(&mut out, None).unwrap();
            assert_eq!(
                memory(&out[0]).as_deref(),
                Some("/jitterscope-fixture-zombie"),
                "scan {n}"
            );
        }
        write(&zombie_stat, "zombie-v1.cgroup", 200);
        for n in 0..2 * CGROUP_REFRESH_SCANS {
            r.scan(&mut out, None).unwrap();
            assert!(out[0].stat.exited(), "scan {n}");
            assert_eq!(
                memory(&out[0]).as_deref(),
                Some("/jitterscope-fixture-zombie"),
                "scan {n}"
            );
        }
        // First seen exiting: no v1 path at all rather than the root's.
        let mut r = ProcessReader::new(&root, 100);
        r.scan(&mut out, None).unwrap();
        let c = out[0].cgroups.as_ref().unwrap();
        assert_eq!((c.memory.as_deref(), c.cpu.as_deref()), (None, None));
        assert_eq!(c.v2.as_deref(), Some("/"));
    }

    #[test]
    fn sleeping_process_status_is_carried_forward_busy_one_is_reread() {
        let mut r = ProcessReader::new(&Root::default(), 100_000);
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut busy = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let pause = || std::thread::sleep(std::time::Duration::from_millis(200));
        let mut first = Vec::new();
        r.scan(&mut first, None).unwrap();
        pause();
        // The first idle scan records statm's resident count; the next one can compare it.
        let mut second = Vec::new();
        r.scan(&mut second, None).unwrap();
        pause();
        let mut third = Vec::new();
        let st = r.scan(&mut third, None).unwrap();
        let find = |v: &[Process], pid: u32| v.iter().find(|p| p.stat.pid == pid).cloned().unwrap();
        let (s1, s3) = (find(&first, sleeper.id()), find(&third, sleeper.id()));
        let (b2, b3) = (find(&second, busy.id()), find(&third, busy.id()));
        sleeper.kill().unwrap();
        busy.kill().unwrap();
        sleeper.wait().unwrap();
        busy.wait().unwrap();
        assert!(st.carried_forward >= 1, "{st:?}");
        // The sleeper is single-threaded and did not run: even its stat was carried forward.
        assert!(st.stat_carried_forward >= 1, "{st:?}");
        assert_eq!(s1.stat, s3.stat);
        assert_eq!(s1.status, s3.status);
        assert!(s1.status.is_some());
        // The busy loop ran in between, so it was read afresh: its CPU time moved.
        assert!(b3.schedstat.unwrap().run_ns > b2.schedstat.unwrap().run_ns);
        assert!(
            b3.stat.utime_ticks + b3.stat.stime_ticks >= b2.stat.utime_ticks + b2.stat.stime_ticks
        );
    }

    #[test]
    fn listing_is_skipped_only_while_the_fork_counter_stands_still() {
        let mut r = ProcessReader::new(&Root::default(), 100_000);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let cpid = child.id();
        let mut out = Vec::new();
        assert!(!r.scan(&mut out, Some(7)).unwrap().listing_skipped);
        let st = r.scan(&mut out, Some(7)).unwrap();
        assert!(st.listing_skipped);
        assert!(out.iter().any(|p| p.stat.pid == cpid));
        child.kill().unwrap();
        child.wait().unwrap();
        // An exit needs no listing: the kept descriptors answer ESRCH.
        let st = r.scan(&mut out, Some(7)).unwrap();
        assert!(st.listing_skipped);
        assert!(!out.iter().any(|p| p.stat.pid == cpid));
        assert_eq!(st.vanished, 0);
        // A fork happened: list again.
        assert!(!r.scan(&mut out, Some(8)).unwrap().listing_skipped);
        // Without a counter, always list.
        assert!(!r.scan(&mut out, None).unwrap().listing_skipped);
        assert!(!r.scan(&mut out, None).unwrap().listing_skipped);
    }

    #[test]
    fn exec_refreshes_comm_and_cmdline() {
        let mut r = ProcessReader::new(&Root::default(), 100_000);
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 0.3; exec sleep 30"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut out = Vec::new();
        r.scan(&mut out, None).unwrap();
        let before = out.iter().find(|p| p.stat.pid == pid).cloned().unwrap();
        // Poll rather than sleep a fixed time: on a loaded CI machine the exec may be late.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let after = loop {
            std::thread::sleep(std::time::Duration::from_millis(100));
            r.scan(&mut out, None).unwrap();
            let p = out.iter().find(|p| p.stat.pid == pid).cloned().unwrap();
            if p.stat.comm != "sh" || std::time::Instant::now() > deadline {
                break p;
            }
        };
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(before.stat.comm, "sh");
        assert_eq!(after.stat.comm, "sleep");
        assert_eq!(&*after.cmdline, "sleep 30");
    }

    #[test]
    fn fd_budget_zero_still_reads() {
        let mut r = ProcessReader::new(&Root::default(), 0);
        let mut out = Vec::new();
        let st = r.scan(&mut out, None).unwrap();
        assert!(!out.is_empty());
        assert_eq!(st.open_fds, 0);
        assert!(st.unkept > 0);
    }

    #[test]
    fn cmdline_formatting() {
        // Formatting is the redactor's: every command line goes through it.
        let r = Redactor::default();
        assert_eq!(
            r.cmdline(b"python3\0-m\0http.server\0", 100),
            "python3 -m http.server"
        );
        assert_eq!(r.cmdline(b"abcdef", 3), "abc");
        assert_eq!(r.cmdline(b"", 3), "");
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = parse_pid_stat(&b);
            let _ = parse_pid_status(&b);
            let _ = parse_pid_io(&b);
            let _ = parse_pid_schedstat(&b);
        }

        #[test]
        fn stat_mutations_never_panic(cut in 0usize..400, pos in 0usize..400, byte in proptest::num::u8::ANY) {
            let mut b = std::fs::read(format!("{FX}/proc/1/stat")).unwrap();
            if pos < b.len() { b[pos] = byte; }
            b.truncate(cut.min(b.len()));
            let _ = parse_pid_stat(&b);
        }
    }
}
