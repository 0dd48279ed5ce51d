//! The process table as columns: the detail lane's codecs 3 and 4.
//!
//! Codecs 1 and 2 wrote the process table as one MessagePack map per process, so a busy host's
//! 600 processes repeated every field name 600 times (about 430 KB a sample before zstd). zstd
//! took most of that back, but the writer paid for serializing and compressing it and every
//! reader for decompressing and walking it. Codec 3 writes one Protocol Buffers message
//! ([`Table`], encoded by prost) whose fields are **columns**: one packed array per field of
//! [`Process`], in row order. Each value is one varint; strings go through a dictionary.
//!
//! | tags | column |
//! |---|---|
//! | 1 | `rows`: the number of processes |
//! | 2 | `strings`: each distinct comm, cmdline and cgroup path of the table, once |
//! | 3 | `cgroup_sets`: each distinct set of a process's cgroups once, five numbers a set (`cpu`, `cpuacct`, `memory`, `blkio`, `v2`), each an index into `strings` plus one (0: none) |
//! | 10–29 | `stat.*`: `pid` and `starttime_ticks` as the difference from the row before (zigzag; rows come in /proc order, by pid, and both mostly increase), `comm` as an index into `strings`, `state` as its code point, the rest as values |
//! | 30–42 | `status` presence, then each field of `PidStatus` as an optional column |
//! | 50–55 | `io` presence, then each field of `PidIo`, one value per row that has `io` |
//! | 70–75 | `schedstat` presence, then each field of `PidSchedstat`, likewise: `run_ns` and `wait_ns` in ns (71, 72; codec 3) or µs (74, 75; codec 4), `timeslices` (73) |
//! | 80–82 | `cgroups`: an optional index into `cgroup_sets`; `cmdline`: an index into `strings` |
//!
//! A presence column is run lengths, alternately absent and present, starting with absent rows
//! (all present: `[0, rows]`). An optional column is such runs and then the values of the rows
//! that have one (`stat.exit_code`, the `status` fields, `cgroups`). A process whose `status`
//! was read with every field absent thus stays distinct from one whose `status` was not read.
//!
//! **Self-contained.** A record never refers to another, so a damaged record costs only its own
//! processes and a reader can start at any record. What repeats from one sample to the next
//! (the dictionary, pids, start times, every counter of an idle process) is left to the store's
//! zstd, which compresses a minute of records in one frame: an unchanged column is a copy of
//! the bytes one record back. Counters are therefore kept as values, not as differences from
//! the row before, which would change whenever either process moved. Differences from the
//! previous sample would save about a quarter of the lane's bytes on a busy host (measured:
//! schedstat's nanosecond counters are most of what is left, and they are information, not
//! redundancy), at the price of records that depend on each other.
//!
//! **Run and wait time in µs (codec 4).** schedstat's two time counters were most of the lane's
//! bytes after zstd (measured on a 100 s recording of `bench/busy.sh`'s load, 32,009 process
//! rows: `run_ns` 96 KB, `wait_ns` 73 KB of 217 KB), and their last three digits are noise at
//! one sample a second: a kernel clock read at each enqueue and switch, summed. Codec 4 keeps
//! them to the µs (the value divided by 1000, rounded down, multiplied back on reading), which
//! took these two columns plus `timeslices` from 193 to 135 KB after zstd on that recording. A
//! difference of two readings, which is all any metric takes from them, is then exact to ±1 µs:
//! 0.0001% of a one-second interval. Codec 3 tables (ns) still read exactly.
//!
//! **Evolution.** Protocol Buffers skips fields it does not know (a newer build's columns) and
//! leaves empty the ones it does not find, which read as the field's default in every row, as
//! the named codecs did. A field added to `Process` needs its column here (a new tag; tags are
//! never reused); `every_field_has_a_column` fails until it has one.
//!
//! prost rather than the MessagePack of the other codecs: a packed varint array decodes in a
//! tight loop, where rmp-serde visits every value through serde. Measured on a recorded busy
//! host (620 processes), decoding a table took 0.3 M instructions instead of 3.5 M, and the
//! bytes after zstd were within 2% of MessagePack columns.

use std::sync::Arc;

use jitterscope_sources::cgroup::ProcCgroupPaths;
use jitterscope_sources::process::{PidIo, PidSchedstat, PidStat, PidStatus, Process};
// FxHash: the writer looks up three strings per process per sample, and std's SipHash made
// two thirds of encoding a table (measured with callgrind). No key comes from a peer.
use rustc_hash::FxHashMap as HashMap;

/// Most rows a table may declare: the kernel's largest `pid_max` (2^22), so a damaged `rows`
/// cannot make a reader allocate beyond what a host can have.
const MAX_ROWS: u32 = 1 << 22;

/// The process table of one sample, by column (see the module documentation).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Table {
    #[prost(uint32, tag = "1")]
    rows: u32,
    #[prost(string, repeated, tag = "2")]
    strings: Vec<String>,
    #[prost(uint32, repeated, tag = "3")]
    cgroup_sets: Vec<u32>,

    #[prost(sint64, repeated, tag = "10")]
    pid: Vec<i64>,
    #[prost(uint32, repeated, tag = "11")]
    comm: Vec<u32>,
    #[prost(uint32, repeated, tag = "12")]
    state: Vec<u32>,
    #[prost(uint32, repeated, tag = "13")]
    ppid: Vec<u32>,
    #[prost(uint32, repeated, tag = "14")]
    flags: Vec<u32>,
    #[prost(uint64, repeated, tag = "15")]
    minflt: Vec<u64>,
    #[prost(uint64, repeated, tag = "16")]
    majflt: Vec<u64>,
    #[prost(uint64, repeated, tag = "17")]
    cminflt: Vec<u64>,
    #[prost(uint64, repeated, tag = "18")]
    children_ticks: Vec<u64>,
    #[prost(uint64, repeated, tag = "19")]
    utime_ticks: Vec<u64>,
    #[prost(uint64, repeated, tag = "20")]
    stime_ticks: Vec<u64>,
    #[prost(sint64, repeated, tag = "21")]
    nice: Vec<i64>,
    #[prost(uint64, repeated, tag = "22")]
    num_threads: Vec<u64>,
    #[prost(sint64, repeated, tag = "23")]
    starttime_ticks: Vec<i64>,
    #[prost(uint64, repeated, tag = "24")]
    vsize_bytes: Vec<u64>,
    #[prost(uint64, repeated, tag = "25")]
    rss_pages: Vec<u64>,
    #[prost(uint32, repeated, tag = "26")]
    processor: Vec<u32>,
    #[prost(uint64, repeated, tag = "27")]
    delayacct_blkio_ticks: Vec<u64>,
    #[prost(uint32, repeated, tag = "28")]
    exit_code_runs: Vec<u32>,
    #[prost(sint32, repeated, tag = "29")]
    exit_code: Vec<i32>,

    #[prost(uint32, repeated, tag = "30")]
    status: Vec<u32>,
    #[prost(uint32, repeated, tag = "31")]
    rss_anon_bytes_runs: Vec<u32>,
    #[prost(uint64, repeated, tag = "32")]
    rss_anon_bytes: Vec<u64>,
    #[prost(uint32, repeated, tag = "33")]
    rss_file_bytes_runs: Vec<u32>,
    #[prost(uint64, repeated, tag = "34")]
    rss_file_bytes: Vec<u64>,
    #[prost(uint32, repeated, tag = "35")]
    rss_shmem_bytes_runs: Vec<u32>,
    #[prost(uint64, repeated, tag = "36")]
    rss_shmem_bytes: Vec<u64>,
    #[prost(uint32, repeated, tag = "37")]
    swap_bytes_runs: Vec<u32>,
    #[prost(uint64, repeated, tag = "38")]
    swap_bytes: Vec<u64>,
    #[prost(uint32, repeated, tag = "39")]
    voluntary_ctxt_switches_runs: Vec<u32>,
    #[prost(uint64, repeated, tag = "40")]
    voluntary_ctxt_switches: Vec<u64>,
    #[prost(uint32, repeated, tag = "41")]
    nonvoluntary_ctxt_switches_runs: Vec<u32>,
    #[prost(uint64, repeated, tag = "42")]
    nonvoluntary_ctxt_switches: Vec<u64>,

    #[prost(uint32, repeated, tag = "50")]
    io: Vec<u32>,
    #[prost(uint64, repeated, tag = "51")]
    rchar: Vec<u64>,
    #[prost(uint64, repeated, tag = "52")]
    wchar: Vec<u64>,
    #[prost(uint64, repeated, tag = "53")]
    read_bytes: Vec<u64>,
    #[prost(uint64, repeated, tag = "54")]
    write_bytes: Vec<u64>,
    #[prost(uint64, repeated, tag = "55")]
    cancelled_write_bytes: Vec<u64>,

    #[prost(uint32, repeated, tag = "70")]
    schedstat: Vec<u32>,
    #[prost(uint64, repeated, tag = "71")]
    run_ns: Vec<u64>,
    #[prost(uint64, repeated, tag = "72")]
    wait_ns: Vec<u64>,
    #[prost(uint64, repeated, tag = "73")]
    timeslices: Vec<u64>,
    #[prost(uint64, repeated, tag = "74")]
    run_us: Vec<u64>,
    #[prost(uint64, repeated, tag = "75")]
    wait_us: Vec<u64>,

    #[prost(uint32, repeated, tag = "80")]
    cgroups_runs: Vec<u32>,
    #[prost(uint32, repeated, tag = "81")]
    cgroups: Vec<u32>,
    #[prost(uint32, repeated, tag = "82")]
    cmdline: Vec<u32>,
}

/// Why a table does not decode into processes.
#[derive(Debug, thiserror::Error)]
#[error("malformed process table: {0}")]
pub struct TableError(&'static str);

/// Adds a row to presence runs.
fn push_run(runs: &mut Vec<u32>, present: bool) {
    if runs.is_empty() {
        runs.push(0);
    }
    // Runs alternate from absent: the last one is of present rows when its index is odd.
    if runs.len().is_multiple_of(2) != present {
        runs.push(0);
    }
    if let Some(r) = runs.last_mut() {
        *r += 1;
    }
}

/// Adds a row to an optional column.
fn push_opt<T>(runs: &mut Vec<u32>, values: &mut Vec<T>, v: Option<T>) {
    push_run(runs, v.is_some());
    values.extend(v);
}

/// The strings of a table, each kept once with its index.
#[derive(Default)]
struct Dict<'a> {
    index: HashMap<&'a str, u32>,
    strings: Vec<String>,
}

impl<'a> Dict<'a> {
    fn of(&mut self, s: &'a str) -> u32 {
        let strings = &mut self.strings;
        *self.index.entry(s).or_insert_with(|| {
            strings.push(s.to_owned());
            (strings.len() - 1) as u32
        })
    }

    fn opt(&mut self, s: &'a Option<String>) -> u32 {
        s.as_deref().map_or(0, |s| self.of(s) + 1)
    }
}

impl Table {
    /// The columns of `procs`, with schedstat's run and wait time in µs when `sched_us`
    /// (codec 4), else in ns (codec 3).
    pub(crate) fn of(procs: &[Process], sched_us: bool) -> Table {
        let n = procs.len();
        let mut t = Table {
            rows: n as u32,
            ..Default::default()
        };
        for c in [
            &mut t.comm,
            &mut t.state,
            &mut t.ppid,
            &mut t.flags,
            &mut t.processor,
            &mut t.cmdline,
        ] {
            c.reserve_exact(n);
        }
        for c in [
            &mut t.minflt,
            &mut t.majflt,
            &mut t.cminflt,
            &mut t.children_ticks,
            &mut t.utime_ticks,
            &mut t.stime_ticks,
            &mut t.num_threads,
            &mut t.vsize_bytes,
            &mut t.rss_pages,
            &mut t.delayacct_blkio_ticks,
        ] {
            c.reserve_exact(n);
        }
        for c in [&mut t.pid, &mut t.nice, &mut t.starttime_ticks] {
            c.reserve_exact(n);
        }
        let mut dict = Dict::default();
        let mut sets: HashMap<[Option<&str>; 5], u32> = HashMap::default();
        let (mut pid0, mut start0) = (0i64, 0i64);
        for p in procs {
            let s = &p.stat;
            t.pid.push(i64::from(s.pid) - pid0);
            pid0 = i64::from(s.pid);
            t.comm.push(dict.of(&s.comm));
            t.state.push(u32::from(s.state));
            t.ppid.push(s.ppid);
            t.flags.push(s.flags);
            t.minflt.push(s.minflt);
            t.majflt.push(s.majflt);
            t.cminflt.push(s.cminflt);
            t.children_ticks.push(s.children_ticks);
            t.utime_ticks.push(s.utime_ticks);
            t.stime_ticks.push(s.stime_ticks);
            t.nice.push(s.nice);
            t.num_threads.push(s.num_threads);
            // Wrapping: a difference of two u64 read back with a wrapping add is exact.
            t.starttime_ticks
                .push((s.starttime_ticks as i64).wrapping_sub(start0));
            start0 = s.starttime_ticks as i64;
            t.vsize_bytes.push(s.vsize_bytes);
            t.rss_pages.push(s.rss_pages);
            t.processor.push(s.processor);
            t.delayacct_blkio_ticks.push(s.delayacct_blkio_ticks);
            push_opt(&mut t.exit_code_runs, &mut t.exit_code, s.exit_code);

            let st = p.status.as_ref();
            push_run(&mut t.status, st.is_some());
            let f = |g: fn(&PidStatus) -> Option<u64>| st.and_then(g);
            push_opt(
                &mut t.rss_anon_bytes_runs,
                &mut t.rss_anon_bytes,
                f(|s| s.rss_anon_bytes),
            );
            push_opt(
                &mut t.rss_file_bytes_runs,
                &mut t.rss_file_bytes,
                f(|s| s.rss_file_bytes),
            );
            push_opt(
                &mut t.rss_shmem_bytes_runs,
                &mut t.rss_shmem_bytes,
                f(|s| s.rss_shmem_bytes),
            );
            push_opt(
                &mut t.swap_bytes_runs,
                &mut t.swap_bytes,
                f(|s| s.swap_bytes),
            );
            push_opt(
                &mut t.voluntary_ctxt_switches_runs,
                &mut t.voluntary_ctxt_switches,
                f(|s| s.voluntary_ctxt_switches),
            );
            push_opt(
                &mut t.nonvoluntary_ctxt_switches_runs,
                &mut t.nonvoluntary_ctxt_switches,
                f(|s| s.nonvoluntary_ctxt_switches),
            );

            push_run(&mut t.io, p.io.is_some());
            if let Some(io) = &p.io {
                t.rchar.push(io.rchar);
                t.wchar.push(io.wchar);
                t.read_bytes.push(io.read_bytes);
                t.write_bytes.push(io.write_bytes);
                t.cancelled_write_bytes.push(io.cancelled_write_bytes);
            }
            push_run(&mut t.schedstat, p.schedstat.is_some());
            if let Some(s) = &p.schedstat {
                if sched_us {
                    t.run_us.push(s.run_ns / 1000);
                    t.wait_us.push(s.wait_ns / 1000);
                } else {
                    t.run_ns.push(s.run_ns);
                    t.wait_ns.push(s.wait_ns);
                }
                t.timeslices.push(s.timeslices);
            }

            let set = p.cgroups.as_deref().map(|c| {
                let next = (t.cgroup_sets.len() / 5) as u32;
                let key = [&c.cpu, &c.cpuacct, &c.memory, &c.blkio, &c.v2].map(Option::as_deref);
                *sets.entry(key).or_insert_with(|| {
                    for path in [&c.cpu, &c.cpuacct, &c.memory, &c.blkio, &c.v2] {
                        t.cgroup_sets.push(dict.opt(path));
                    }
                    next
                })
            });
            push_opt(&mut t.cgroups_runs, &mut t.cgroups, set);
            t.cmdline.push(dict.of(&p.cmdline));
        }
        t.strings = dict.strings;
        t
    }

    /// The processes of this table, in the order they were written; `sched_us` as it was
    /// written with.
    pub(crate) fn processes(&self, sched_us: bool) -> Result<Vec<Process>, TableError> {
        if self.rows > MAX_ROWS {
            return Err(TableError("more rows than a host can have processes"));
        }
        let n = self.rows as usize;
        // A table always has pids; without them a damaged `rows` alone would say how much to
        // allocate.
        if self.pid.len() != n {
            return Err(TableError("stat.pid does not have one value per row"));
        }
        let string = |i: u32| -> Result<&String, TableError> {
            self.strings
                .get(i as usize)
                .ok_or(TableError("string index out of range"))
        };
        let opt_string = |i: u32| -> Result<Option<String>, TableError> {
            match i {
                0 => Ok(None),
                i => string(i - 1).map(|s| Some(s.clone())),
            }
        };
        if !self.cgroup_sets.len().is_multiple_of(5) {
            return Err(TableError("cgroup sets are not five paths each"));
        }
        // One allocation per distinct cgroup set and command line, shared by their rows as the
        // recorder shares each process's between samples.
        let sets = self
            .cgroup_sets
            .chunks_exact(5)
            .map(|c| {
                Ok(Arc::new(ProcCgroupPaths {
                    cpu: opt_string(c[0])?,
                    cpuacct: opt_string(c[1])?,
                    memory: opt_string(c[2])?,
                    blkio: opt_string(c[3])?,
                    v2: opt_string(c[4])?,
                }))
            })
            .collect::<Result<Vec<_>, TableError>>()?;
        let mut cmdlines: Vec<Option<Arc<str>>> = vec![None; self.strings.len()];

        let comm = col(&self.comm, n)?;
        let state = col(&self.state, n)?;
        let ppid = col(&self.ppid, n)?;
        let flags = col(&self.flags, n)?;
        let minflt = col(&self.minflt, n)?;
        let majflt = col(&self.majflt, n)?;
        let cminflt = col(&self.cminflt, n)?;
        let children_ticks = col(&self.children_ticks, n)?;
        let utime_ticks = col(&self.utime_ticks, n)?;
        let stime_ticks = col(&self.stime_ticks, n)?;
        let nice = col(&self.nice, n)?;
        let num_threads = col(&self.num_threads, n)?;
        let starttime_ticks = col(&self.starttime_ticks, n)?;
        let vsize_bytes = col(&self.vsize_bytes, n)?;
        let rss_pages = col(&self.rss_pages, n)?;
        let processor = col(&self.processor, n)?;
        let delayacct_blkio_ticks = col(&self.delayacct_blkio_ticks, n)?;
        let cmdline = col(&self.cmdline, n)?;
        let mut exit_code = OptRows::new(&self.exit_code_runs, &self.exit_code, n)?;
        let mut status = OptRows::presence(&self.status, n)?;
        let mut rss_anon_bytes = OptRows::new(&self.rss_anon_bytes_runs, &self.rss_anon_bytes, n)?;
        let mut rss_file_bytes = OptRows::new(&self.rss_file_bytes_runs, &self.rss_file_bytes, n)?;
        let mut rss_shmem_bytes =
            OptRows::new(&self.rss_shmem_bytes_runs, &self.rss_shmem_bytes, n)?;
        let mut swap_bytes = OptRows::new(&self.swap_bytes_runs, &self.swap_bytes, n)?;
        let mut vcs = OptRows::new(
            &self.voluntary_ctxt_switches_runs,
            &self.voluntary_ctxt_switches,
            n,
        )?;
        let mut nvcs = OptRows::new(
            &self.nonvoluntary_ctxt_switches_runs,
            &self.nonvoluntary_ctxt_switches,
            n,
        )?;
        let mut io = OptRows::presence(&self.io, n)?;
        let with_io = io.count;
        let rchar = col(&self.rchar, with_io)?;
        let wchar = col(&self.wchar, with_io)?;
        let read_bytes = col(&self.read_bytes, with_io)?;
        let write_bytes = col(&self.write_bytes, with_io)?;
        let cancelled = col(&self.cancelled_write_bytes, with_io)?;
        let mut schedstat = OptRows::presence(&self.schedstat, n)?;
        let with_sched = schedstat.count;
        let (run, wait, scale) = match sched_us {
            true => (&self.run_us, &self.wait_us, 1000),
            false => (&self.run_ns, &self.wait_ns, 1),
        };
        let run_ns = col(run, with_sched)?;
        let wait_ns = col(wait, with_sched)?;
        let timeslices = col(&self.timeslices, with_sched)?;
        let mut cgroups = OptRows::new(&self.cgroups_runs, &self.cgroups, n)?;

        let mut out = Vec::with_capacity(n);
        let (mut pid, mut start) = (0i64, 0u64);
        let (mut io_row, mut sched_row) = (0, 0);
        for i in 0..n {
            pid = pid.wrapping_add(self.pid[i]);
            start = start.wrapping_add(get(starttime_ticks, i) as u64);
            let stat = PidStat {
                pid: u32::try_from(pid).map_err(|_| TableError("pid out of range"))?,
                comm: match comm {
                    Some(c) => string(c[i])?.clone(),
                    None => String::new(),
                },
                state: char::from_u32(get(state, i)).ok_or(TableError("state is no char"))?,
                ppid: get(ppid, i),
                flags: get(flags, i),
                minflt: get(minflt, i),
                majflt: get(majflt, i),
                cminflt: get(cminflt, i),
                children_ticks: get(children_ticks, i),
                utime_ticks: get(utime_ticks, i),
                stime_ticks: get(stime_ticks, i),
                nice: get(nice, i),
                num_threads: get(num_threads, i),
                starttime_ticks: start,
                vsize_bytes: get(vsize_bytes, i),
                rss_pages: get(rss_pages, i),
                processor: get(processor, i),
                delayacct_blkio_ticks: get(delayacct_blkio_ticks, i),
                exit_code: exit_code.next(),
            };
            // Each status field has a slot in every row: read them all, so that the columns
            // stay in step.
            let st = PidStatus {
                rss_anon_bytes: rss_anon_bytes.next(),
                rss_file_bytes: rss_file_bytes.next(),
                rss_shmem_bytes: rss_shmem_bytes.next(),
                swap_bytes: swap_bytes.next(),
                voluntary_ctxt_switches: vcs.next(),
                nonvoluntary_ctxt_switches: nvcs.next(),
            };
            let status = match status.next_present() {
                true => Some(st),
                false if st == PidStatus::default() => None,
                false => return Err(TableError("a status field in a row without status")),
            };
            let io = io.next_present().then(|| {
                let k = io_row;
                io_row += 1;
                PidIo {
                    rchar: get(rchar, k),
                    wchar: get(wchar, k),
                    read_bytes: get(read_bytes, k),
                    write_bytes: get(write_bytes, k),
                    cancelled_write_bytes: get(cancelled, k),
                }
            });
            let schedstat = schedstat.next_present().then(|| {
                let k = sched_row;
                sched_row += 1;
                PidSchedstat {
                    run_ns: get(run_ns, k).saturating_mul(scale),
                    wait_ns: get(wait_ns, k).saturating_mul(scale),
                    timeslices: get(timeslices, k),
                }
            });
            let cgroups = match cgroups.next() {
                None => None,
                Some(s) => Some(
                    sets.get(s as usize)
                        .ok_or(TableError("cgroup set index out of range"))?
                        .clone(),
                ),
            };
            let cmdline = match cmdline {
                Some(c) => {
                    let k = c[i] as usize;
                    let s = self
                        .strings
                        .get(k)
                        .ok_or(TableError("string index out of range"))?;
                    cmdlines[k]
                        .get_or_insert_with(|| Arc::from(s.as_str()))
                        .clone()
                }
                None => Arc::from(""),
            };
            out.push(Process {
                stat,
                status,
                io,
                schedstat,
                cgroups,
                cmdline,
            });
        }
        Ok(out)
    }
}

/// A column with one value per row (or per row that has its part): `None` when absent (a field
/// the table's writer did not know: its default in every row), an error when present with
/// another length.
fn col<T>(v: &[T], n: usize) -> Result<Option<&[T]>, TableError> {
    match v.len() {
        0 => Ok(None),
        l if l == n => Ok(Some(v)),
        _ => Err(TableError("a column does not have one value per row")),
    }
}

fn get<T: Copy + Default>(c: Option<&[T]>, i: usize) -> T {
    c.map_or_else(T::default, |c| c[i])
}

/// Walks presence runs, and the values of an optional column, row by row.
struct OptRows<'a, T> {
    runs: std::slice::Iter<'a, u32>,
    left: u32,
    present: bool,
    values: std::slice::Iter<'a, T>,
    /// Rows present.
    count: usize,
}

impl<'a, T: Copy> OptRows<'a, T> {
    /// Checks that `runs` cover `n` rows exactly (or are empty: a column its writer did not
    /// have, absent in every row) and that `values` has one value per present row.
    fn new(runs: &'a [u32], values: &'a [T], n: usize) -> Result<Self, TableError> {
        let rows = Self::rows(runs, values, n)?;
        if rows.count != values.len() {
            return Err(TableError(
                "an optional column's values do not match its rows",
            ));
        }
        Ok(rows)
    }

    fn rows(runs: &'a [u32], values: &'a [T], n: usize) -> Result<Self, TableError> {
        let (mut total, mut present) = (0u64, 0u64);
        for (i, &r) in runs.iter().enumerate() {
            total += u64::from(r);
            if i % 2 == 1 {
                present += u64::from(r);
            }
        }
        if !runs.is_empty() && total != n as u64 {
            return Err(TableError("presence runs do not cover the rows"));
        }
        Ok(OptRows {
            runs: runs.iter(),
            left: 0,
            // Runs start with absent rows: the first run read turns this.
            present: true,
            values: values.iter(),
            count: present as usize,
        })
    }

    /// Whether the next row is present.
    fn next_present(&mut self) -> bool {
        while self.left == 0 {
            match self.runs.next() {
                Some(&l) => {
                    self.left = l;
                    self.present = !self.present;
                }
                // No runs (checked to cover every row otherwise): absent.
                None => return false,
            }
        }
        self.left -= 1;
        self.present
    }

    /// The next row's value.
    fn next(&mut self) -> Option<T> {
        if self.next_present() {
            self.values.next().copied()
        } else {
            None
        }
    }
}

impl<'a> OptRows<'a, ()> {
    /// Presence runs alone (`status`, `io`, `schedstat`).
    fn presence(runs: &'a [u32], n: usize) -> Result<Self, TableError> {
        Self::rows(runs, &[], n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip_with(procs: &[Process], sched_us: bool) -> Vec<Process> {
        let mut b = Vec::new();
        prost::Message::encode(&Table::of(procs, sched_us), &mut b).unwrap();
        <Table as prost::Message>::decode(&b[..])
            .unwrap()
            .processes(sched_us)
            .unwrap()
    }

    fn round_trip(procs: &[Process]) -> Vec<Process> {
        round_trip_with(procs, false)
    }

    /// A process with every field, at every depth, set to something other than its default,
    /// built through serde so that a field added to `Process` gets set here too.
    fn full(seed: u64) -> Process {
        use serde_json::Value;
        // Leaves in order get distinct small numbers (they fit every integer type) and strings;
        // None leaves are strings under `cgroups` (paths) and numbers elsewhere.
        fn fill(v: &mut Value, n: &mut u64, paths: bool) {
            *n += 1;
            match v {
                Value::Object(m) => {
                    for (k, v) in m.iter_mut() {
                        fill(v, n, paths || k == "cgroups");
                    }
                }
                Value::String(s) if s.chars().count() == 1 => *v = "R".into(),
                Value::String(_) => *v = format!("/s/{n} x").into(),
                Value::Null if paths => *v = format!("/cg/{n}").into(),
                _ => *v = (*n * 7 + 1).into(),
            }
        }
        let p = Process {
            status: Some(PidStatus::default()),
            io: Some(PidIo::default()),
            schedstat: Some(PidSchedstat::default()),
            cgroups: Some(Arc::default()),
            ..Default::default()
        };
        let mut v = serde_json::to_value(&p).unwrap();
        let mut n = seed * 1000;
        fill(&mut v, &mut n, false);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn every_field_has_a_column() {
        let p = full(7);
        // Nothing left at its default: a field the filler missed would hide a missing column.
        let json = serde_json::to_string(&p).unwrap();
        assert!(
            !json.contains("null") && !json.contains(":0,") && !json.contains(":0}"),
            "{json}"
        );
        let back = round_trip(std::slice::from_ref(&p));
        assert_eq!(back, vec![p]);
    }

    #[test]
    fn rows_keep_their_order_and_what_each_lacks() {
        let a = full(1);
        let mut b = full(2);
        b.status = Some(PidStatus::default()); // read, every field absent (a kernel thread)
        b.io = None;
        b.stat.exit_code = None;
        let mut c = full(3);
        c.status = None;
        c.schedstat = None;
        c.cgroups = None;
        c.stat.pid = 1; // below the row before: a negative difference
        c.stat.starttime_ticks = u64::MAX; // wraps
        c.stat.comm = a.stat.comm.clone(); // shares a's string
        c.cgroups = b.cgroups.clone();
        let a = Process {
            stat: PidStat {
                exit_code: Some(-9),
                nice: -20,
                vsize_bytes: u64::MAX,
                ..a.stat.clone()
            },
            ..a
        };
        let rows = vec![a, b, c.clone(), full(4), c];
        assert_eq!(round_trip(&rows), rows);
        assert_eq!(round_trip(&[]), vec![]);
        // Rows sharing a command line or cgroup set share one allocation once read.
        let back = round_trip(&rows);
        assert!(Arc::ptr_eq(&back[2].cmdline, &back[4].cmdline));
        assert!(Arc::ptr_eq(
            back[1].cgroups.as_ref().unwrap(),
            back[2].cgroups.as_ref().unwrap()
        ));
    }

    #[test]
    fn a_column_its_writer_did_not_have_reads_as_defaults() {
        let rows = vec![full(1), full(2)];
        let mut t = Table::of(&rows, false);
        t.wait_ns.clear();
        t.rss_anon_bytes.clear();
        t.rss_anon_bytes_runs.clear();
        t.comm.clear();
        let back = t.processes(false).unwrap();
        for (b, r) in back.iter().zip(&rows) {
            assert_eq!(b.schedstat.as_ref().unwrap().wait_ns, 0);
            assert_eq!(
                b.schedstat.as_ref().unwrap().run_ns,
                r.schedstat.as_ref().unwrap().run_ns
            );
            assert_eq!(b.status.as_ref().unwrap().rss_anon_bytes, None);
            assert_eq!(b.stat.comm, "");
            assert_eq!(b.stat.utime_ticks, r.stat.utime_ticks);
        }
    }

    #[test]
    fn columns_that_do_not_fit_are_errors() {
        let rows = vec![full(1), full(2)];
        let t = Table::of(&rows, false);
        type Break = fn(&mut Table);
        let broken: Vec<(&str, Break)> = vec![
            ("rows", |t| t.rows = 3),
            ("rows huge", |t| t.rows = u32::MAX),
            ("short column", |t| t.utime_ticks.truncate(1)),
            ("io values", |t| t.rchar.push(1)),
            ("runs", |t| t.status = vec![0, 3]),
            ("opt values", |t| t.exit_code.push(1)),
            ("string index", |t| t.comm[0] = 99),
            ("cmdline index", |t| t.cmdline[1] = 99),
            ("set index", |t| t.cgroups[0] = 99),
            ("set path", |t| t.cgroup_sets[0] = 99),
            ("set width", |t| t.cgroup_sets.push(1)),
            ("pid", |t| t.pid[0] = -1),
            ("state", |t| t.state[0] = 0xD800),
            ("status field without status", |t| t.status = vec![1, 1]),
        ];
        for (what, f) in broken {
            let mut t = t.clone();
            f(&mut t);
            assert!(t.processes(false).is_err(), "{what}");
        }
    }

    /// Codec 4: run and wait time to the µs (rounded down), everything else exact; a value
    /// that would overflow when multiplied back (only damage writes one) saturates.
    #[test]
    fn run_and_wait_time_keep_their_microseconds() {
        let mut rows = vec![full(1), full(2), full(3)];
        let times = [(1_234_567_891, 999), (0, 1_000), (u64::MAX, 7_001)];
        for (p, (run, wait)) in rows.iter_mut().zip(times) {
            let s = p.schedstat.as_mut().unwrap();
            (s.run_ns, s.wait_ns) = (run, wait);
        }
        rows[1].schedstat = None;
        let back = round_trip_with(&rows, true);
        let mut want = rows.clone();
        for p in &mut want {
            if let Some(s) = p.schedstat.as_mut() {
                crate::codec::round_schedstat(s);
            }
        }
        assert_eq!(back, want);
        assert_eq!(back[0].schedstat.as_ref().unwrap().run_ns, 1_234_567_000);
        assert_eq!(back[0].schedstat.as_ref().unwrap().wait_ns, 0);
        assert_eq!(back[2].schedstat.as_ref().unwrap().wait_ns, 7_000);
        // The ns columns are not written, and a damaged µs value saturates.
        let mut t = Table::of(&rows, true);
        assert!(t.run_ns.is_empty() && t.wait_ns.is_empty());
        t.run_us[0] = u64::MAX;
        assert_eq!(
            t.processes(true).unwrap()[0]
                .schedstat
                .as_ref()
                .unwrap()
                .run_ns,
            u64::MAX
        );
        // Read as codec 3, the same table has no ns columns: their defaults, as any missing column.
        assert_eq!(
            t.processes(false).unwrap()[0]
                .schedstat
                .as_ref()
                .unwrap()
                .run_ns,
            0
        );
    }
}
