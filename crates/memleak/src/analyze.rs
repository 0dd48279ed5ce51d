//! The run: readings of a process over time, what grew between the first and the last, and a
//! plain verdict.

use std::io;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use jitterscope_sources::smaps::{parse_smaps, Mapping};

use crate::census::{self, Census, Growth};
use crate::growth::{compare, scan_order, MappingGrowth, Totals};
use crate::procmem::{for_each_chunk, ProcMem};
use crate::pymalloc::{PyHeap, Scanner};
use crate::runtime::{
    allocator, glibc_arenas, mapped_paths, python_version, worker_server, Allocator, GlibcArenas,
    WorkerServer,
};

/// Why a run could not be done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such process.
    #[error("no process with pid {0}")]
    NoSuchProcess(u32),
    /// Not allowed to read it.
    #[error("cannot read the memory of pid {pid} ({comm}): permission denied; {hint}")]
    Permission {
        /// The pid.
        pid: u32,
        /// Its name.
        comm: String,
        /// What would allow it.
        hint: String,
    },
    /// It exited (or its pid was reused) during the run.
    #[error("pid {pid} exited during the run, after {readings} of its readings")]
    Exited {
        /// The pid.
        pid: u32,
        /// Readings taken.
        readings: usize,
    },
    /// A snapshot file from another process.
    #[error("{0}")]
    Mismatch(String),
    /// Anything else reading /proc.
    #[error("cannot read /proc/{pid}/{file}: {err}")]
    Io {
        /// The pid.
        pid: u32,
        /// The file.
        file: &'static str,
        /// The error.
        err: io::Error,
    },
}

/// How to take the readings.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Census settings. Its budget bounds the bytes read per full reading, which feeds the
    /// census and the Python heap scan from the same reads.
    pub census: census::Options,
}

/// Everything read from a process at one moment; also what `--snapshot` writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    /// The pid.
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// Its start time (clock ticks after boot), to tell a reused pid apart.
    pub starttime: u64,
    /// The boot it ran in.
    pub boot_id: String,
    /// When, ns since the epoch.
    pub ts_ns: i64,
    /// Every mapping.
    pub mappings: Vec<Mapping>,
    /// The strings of its writable memory (bounded for the file).
    pub census: Option<Census>,
    /// Its Python small-object heap, for an interpreter.
    pub python_heap: Option<PyHeap>,
}

/// A process being read.
pub struct Target {
    /// The pid.
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// Its command line, spaces between arguments.
    pub cmdline: String,
    /// Its executable.
    pub exe: String,
    starttime: u64,
    boot_id: String,
    mem: ProcMem,
}

use jitterscope_sources::units::wall_ns as now_ns;

fn permission_hint() -> String {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let yama = match scope {
        Some(0) | None => String::new(),
        Some(1) => "; YAMA ptrace_scope is 1: only a parent may read a process unless it has CAP_SYS_PTRACE".into(),
        Some(2) => "; YAMA ptrace_scope is 2: only CAP_SYS_PTRACE may read another process".into(),
        Some(_) => "; YAMA ptrace_scope is 3: no process may be read, even by root, until reboot".into(),
    };
    format!("run as root, or as its user with CAP_SYS_PTRACE (e.g. sudo){yama}")
}

impl Target {
    /// Opens a process for reading, with errors that say what is missing.
    pub fn open(pid: u32) -> Result<Target, Error> {
        let dir = format!("/proc/{pid}");
        let stat = std::fs::read(format!("{dir}/stat")).map_err(|_| Error::NoSuchProcess(pid))?;
        let st = jitterscope_sources::process::parse_pid_stat(&stat)
            .map_err(|_| Error::NoSuchProcess(pid))?;
        let cmdline = std::fs::read(format!("{dir}/cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .replace('\0', " ")
            })
            .unwrap_or_default();
        let mem = ProcMem::open(pid).map_err(|e| match e.kind() {
            io::ErrorKind::PermissionDenied => Error::Permission {
                pid,
                comm: st.comm.clone(),
                hint: permission_hint(),
            },
            io::ErrorKind::NotFound => Error::NoSuchProcess(pid),
            _ => Error::Io {
                pid,
                file: "mem",
                err: e,
            },
        })?;
        let exe = std::fs::read_link(format!("{dir}/exe"))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        Ok(Target {
            pid,
            comm: st.comm,
            cmdline,
            exe,
            starttime: st.starttime_ticks,
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            mem,
        })
    }

    /// Whether the pid still is this process, and it has not exited (a zombie keeps its
    /// /proc entry, with no memory, until its parent reaps it).
    fn alive(&self) -> bool {
        std::fs::read(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|b| jitterscope_sources::process::parse_pid_stat(&b).ok())
            .is_some_and(|s| s.starttime_ticks == self.starttime && !matches!(s.state, 'Z' | 'X'))
    }

    /// Its mappings now.
    pub fn mappings(&self, readings: usize) -> Result<Vec<Mapping>, Error> {
        let gone = || Error::Exited {
            pid: self.pid,
            readings,
        };
        let b = match std::fs::read(format!("/proc/{}/smaps", self.pid)) {
            Ok(b) if !b.is_empty() || self.alive() => b,
            Ok(_) => return Err(gone()),
            Err(e) if e.kind() == io::ErrorKind::NotFound || !self.alive() => return Err(gone()),
            Err(e) => {
                return Err(Error::Io {
                    pid: self.pid,
                    file: "smaps",
                    err: e,
                })
            }
        };
        if !self.alive() {
            return Err(gone());
        }
        parse_smaps(&b).map_err(|e| Error::Io {
            pid: self.pid,
            file: "smaps",
            err: io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        })
    }

    /// The Python version, for an interpreter.
    pub fn python(&self, m: &[Mapping]) -> Option<String> {
        python_version(&self.exe, &mapped_paths(m))
    }

    /// A full reading: mappings, census, and the Python heap of an interpreter. `before`, an
    /// earlier reading's mappings, puts the regions that grew first in the scan order.
    pub fn snapshot(
        &self,
        o: Options,
        before: Option<&[Mapping]>,
        readings: usize,
    ) -> Result<Snapshot, Error> {
        let mappings = self.mappings(readings)?;
        let regions = scan_order(&mappings, before);
        // One pass: every chunk read once feeds both the census and the pool scan, so the
        // target's mmap lock is taken half as often as with two passes.
        let started = Instant::now();
        let mut c = Census::default();
        let mut key = Vec::new();
        let mut pools = self.python(&mappings).map(|_| Scanner::new(&self.mem));
        let r = for_each_chunk(&self.mem, &regions, o.census.budget_bytes, |addr, b| {
            census::scan(b, o.census, &mut key, &mut c.counts);
            if let Some(p) = pools.as_mut() {
                p.feed(addr, b);
            }
        });
        c.bytes_scanned = r.scanned;
        c.bytes_skipped = r.skipped;
        c.seconds = started.elapsed().as_secs_f64();
        let census = c;
        let python_heap = pools.map(Scanner::finish);
        if !self.alive() {
            return Err(Error::Exited {
                pid: self.pid,
                readings,
            });
        }
        Ok(Snapshot {
            pid: self.pid,
            comm: self.comm.clone(),
            starttime: self.starttime,
            boot_id: self.boot_id.clone(),
            ts_ns: now_ns(),
            mappings,
            census: Some(census),
            python_heap,
        })
    }

    /// Whether `s` was taken of this same process (not of an earlier one with its pid).
    pub fn same_process(&self, s: &Snapshot) -> Result<(), Error> {
        if s.pid != self.pid || s.starttime != self.starttime || s.boot_id != self.boot_id {
            return Err(Error::Mismatch(format!(
                "the snapshot is of pid {} ({}) started at tick {}, not of this pid {} ({}) started at tick {}",
                s.pid, s.comm, s.starttime, self.pid, self.comm, self.starttime
            )));
        }
        Ok(())
    }
}

/// Sizes at one reading.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Seconds since the first reading.
    pub t: f64,
    /// Totals.
    #[serde(flatten)]
    pub totals: Totals,
}

/// A Python type's allocated blocks in the first and the last reading.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypeGrowth {
    /// Type name.
    pub name: String,
    /// Blocks before.
    pub before: u64,
    /// Blocks after.
    pub after: u64,
    /// Bytes after.
    pub bytes_after: u64,
}

/// The Python heap in the first and the last reading.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PythonHeap {
    /// Interpreter version.
    pub version: String,
    /// Small-object bytes (pymalloc) before.
    pub bytes_before: u64,
    /// After.
    pub bytes_after: u64,
    /// Allocated blocks before.
    pub blocks_before: u64,
    /// After.
    pub blocks_after: u64,
    /// Types whose block count grew, most first.
    pub types: Vec<TypeGrowth>,
}

/// What `memleak` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The pid.
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// Its command line.
    pub cmdline: String,
    /// Seconds between the first and the last reading.
    pub seconds: f64,
    /// Sizes at each reading.
    pub readings: Vec<Point>,
    /// Resident growth per second over the run (least squares over the readings).
    pub rss_bytes_per_s: f64,
    /// Whether it grew: by at least 8 MiB and 2% of where it started.
    pub growing: bool,
    /// Mappings whose size changed, largest growth first (at most 10).
    pub mappings: Vec<MappingGrowth>,
    /// Strings whose count grew most (at most 20).
    pub strings: Vec<Growth>,
    /// Bytes the last census read, and its speed.
    pub census_bytes: u64,
    /// MiB per second of the last census.
    pub census_mib_per_s: f64,
    /// For a Python interpreter, its own heap.
    pub python: Option<PythonHeap>,
    /// The allocator.
    pub allocator: Option<Allocator>,
    /// For glibc malloc, its arenas in the last reading.
    pub glibc_arenas: Option<GlibcArenas>,
    /// The worker server it runs under.
    pub worker_server: Option<WorkerServer>,
    /// The plain verdict.
    pub verdict: String,
    /// What to do next.
    pub advice: Vec<String>,
}

fn slope(points: &[Point]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.t).sum::<f64>() / n;
    let my = points.iter().map(|p| p.totals.rss as f64).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.t - mx).powi(2)).sum();
    let sxy: f64 = points
        .iter()
        .map(|p| (p.t - mx) * (p.totals.rss as f64 - my))
        .sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

use jitterscope_sources::units::mib_text as mib;

/// Compares the first and the last full reading (with the mappings-only readings between).
pub fn analyze(
    t: &Target,
    first: &Snapshot,
    last: &Snapshot,
    mid: &[(i64, Vec<Mapping>)],
) -> Report {
    let t0 = first.ts_ns;
    let secs = ((last.ts_ns - t0) as f64 / 1e9).max(1e-9);
    let mut readings = vec![Point {
        t: 0.0,
        totals: Totals::of(&first.mappings),
    }];
    readings.extend(mid.iter().map(|(ts, m)| Point {
        t: (ts - t0) as f64 / 1e9,
        totals: Totals::of(m),
    }));
    readings.push(Point {
        t: secs,
        totals: Totals::of(&last.mappings),
    });
    let (a, b) = (readings[0].totals, readings[readings.len() - 1].totals);
    let grew = (b.rss + b.swap) as i64 - (a.rss + a.swap) as i64;
    let growing = grew as f64 >= (8.0 * 1048576.0f64).max(0.02 * (a.rss + a.swap) as f64);
    let mut mappings = compare(&first.mappings, &last.mappings, secs);
    mappings.truncate(10);
    let empty = Census::default();
    let strings = census::growth(
        first.census.as_ref().unwrap_or(&empty),
        last.census.as_ref().unwrap_or(&empty),
        20,
    );
    let lc = last.census.as_ref().unwrap_or(&empty);
    let paths = mapped_paths(&last.mappings);
    let python = match (
        t.python(&last.mappings),
        &first.python_heap,
        &last.python_heap,
    ) {
        (Some(version), Some(p0), Some(p1)) => Some(python_heap(version, p0, p1)),
        _ => None,
    };
    let alloc = allocator(&paths);
    let arenas = alloc
        .as_ref()
        .filter(|a| a.name == "glibc malloc")
        .map(|_| glibc_arenas(&last.mappings));
    let ws = worker_server(&t.cmdline);
    let (verdict, mut advice) = verdict(
        growing,
        grew,
        &mappings,
        python.as_ref(),
        alloc.as_ref(),
        &strings,
    );
    if growing {
        if let Some(w) = &ws {
            advice.push(format!("{}: {}", w.name, w.mitigation));
        }
        advice.push("bound it meanwhile: a memory limit on its cgroup turns a host-wide stall into a restart of one process".into());
    }
    Report {
        pid: t.pid,
        comm: t.comm.clone(),
        cmdline: t.cmdline.clone(),
        seconds: secs,
        rss_bytes_per_s: slope(&readings),
        readings,
        growing,
        mappings,
        strings,
        census_bytes: lc.bytes_scanned,
        census_mib_per_s: lc.bytes_scanned as f64 / 1048576.0 / lc.seconds.max(1e-9),
        python,
        allocator: alloc,
        glibc_arenas: arenas,
        worker_server: ws,
        verdict,
        advice,
    }
}

fn python_heap(version: String, p0: &PyHeap, p1: &PyHeap) -> PythonHeap {
    let mut types: Vec<TypeGrowth> = p1
        .types
        .iter()
        .map(|t| TypeGrowth {
            name: t.name.clone(),
            before: p0
                .types
                .iter()
                .find(|x| x.name == t.name)
                .map_or(0, |x| x.count),
            after: t.count,
            bytes_after: t.bytes,
        })
        .filter(|g| g.after > g.before)
        .collect();
    types.sort_by_key(|t| std::cmp::Reverse(t.after - t.before));
    types.truncate(10);
    PythonHeap {
        version,
        bytes_before: p0.allocated_bytes,
        bytes_after: p1.allocated_bytes,
        blocks_before: p0.allocated_blocks,
        blocks_after: p1.allocated_blocks,
        types,
    }
}

fn verdict(
    growing: bool,
    grew: i64,
    mappings: &[MappingGrowth],
    py: Option<&PythonHeap>,
    alloc: Option<&Allocator>,
    strings: &[Growth],
) -> (String, Vec<String>) {
    let mut advice = Vec::new();
    if !growing {
        return (
            format!(
                "no growth: resident memory changed by {} over the run",
                mib(grew as f64)
            ),
            advice,
        );
    }
    let top: Vec<String> = mappings
        .iter()
        .filter(|m| m.after > m.before)
        .take(3)
        .map(|m| {
            format!(
                "{} at {} (+{})",
                m.name,
                m.start,
                mib((m.after - m.before) as f64)
            )
        })
        .collect();
    let where_ = if top.is_empty() {
        String::new()
    } else {
        format!("; it grows in {}", top.join(", "))
    };
    if let Some(s) = strings.first() {
        advice.push(format!(
            "the string that piles up most: \"{}\" ({} -> {} copies): find what creates it",
            s.string, s.before, s.after
        ));
    }
    let v = match py {
        Some(p) => {
            let py_grew = p.bytes_after as i64 - p.bytes_before as i64;
            if py_grew as f64 >= 0.5 * grew as f64 {
                let types: Vec<String> = p
                    .types
                    .iter()
                    .take(3)
                    .map(|t| format!("{} +{}", t.name, t.after - t.before))
                    .collect();
                advice.push("Python objects are kept alive: look for what holds them (a growing list, dict or cache; tracemalloc snapshots show where they are allocated)".into());
                format!(
                    "Python objects grow: {} of the {} growth is in the interpreter's own heap (types {}){where_}",
                    mib(py_grew as f64),
                    mib(grew as f64),
                    types.join(", ")
                )
            } else {
                advice.push("memory grows that Python's small-object heap does not hold: a C extension's allocations (or objects over 512 bytes, which Python takes from malloc); the strings above name what is in it".into());
                format!(
                    "grows outside the Python heap (native / C extension): {} grew while the interpreter's small-object heap changed by {}{where_}",
                    mib(grew as f64),
                    mib(py_grew as f64)
                )
            }
        }
        None => {
            if let Some(a) = alloc {
                advice.push(format!(
                    "allocator: {}{}; its own statistics are not readable from outside: malloc_stats()/malloc_info() (glibc) or mallctl stats (jemalloc) from inside the process tell allocated from retained",
                    a.name,
                    a.version.as_deref().map(|v| format!(" {v}")).unwrap_or_default()
                ));
            }
            format!("memory grows by {}{where_}", mib(grew as f64))
        }
    };
    (v, advice)
}

/// Takes `samples` readings `interval` apart (the first and the last full, the ones between
/// mappings only) and reports. With `first`, that earlier snapshot is the first reading.
pub fn run(
    t: &Target,
    o: Options,
    interval: Duration,
    samples: usize,
    first: Option<Snapshot>,
    mut on_reading: impl FnMut(usize, &Totals),
) -> Result<(Report, Snapshot), Error> {
    let mut mid = Vec::new();
    let total = samples.max(2);
    let first = match first {
        // Against an earlier snapshot: one reading now.
        Some(s) => {
            t.same_process(&s)?;
            on_reading(0, &Totals::of(&s.mappings));
            s
        }
        None => {
            let s = t.snapshot(o, None, 0)?;
            on_reading(0, &Totals::of(&s.mappings));
            for i in 1..total - 1 {
                std::thread::sleep(interval);
                let m = t.mappings(i)?;
                on_reading(i, &Totals::of(&m));
                mid.push((now_ns(), m));
            }
            std::thread::sleep(interval);
            s
        }
    };
    let last = t.snapshot(o, Some(&first.mappings), total - 1)?;
    on_reading(total - 1, &Totals::of(&last.mappings));
    Ok((analyze(t, &first, &last, &mid), last))
}
