//! The process table as columns: the detail lane's codecs 3, 4 and 5.
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
//! | 90–92 | codec 5 only: `matched` (presence runs: the rows found in the base), `base_skip` (per matched row, zigzag of its base row's index minus the one after the last matched row's), `renamed` (presence runs over the matched rows whose names changed) |
//!
//! A presence column is run lengths, alternately absent and present, starting with absent rows
//! (all present: `[0, rows]`). An optional column is such runs and then the values of the rows
//! that have one (`stat.exit_code`, the `status` fields, `cgroups`). A process whose `status`
//! was read with every field absent thus stays distinct from one whose `status` was not read.
//!
//! **Self-contained (codecs 3 and 4).** A record never refers to another, so a reader can
//! start at any record. What repeats from one sample to the next (the dictionary, pids, start
//! times, every counter of an idle process) is left to the store's zstd, which compresses a
//! minute of records in one frame: an unchanged column is a copy of the bytes one record back.
//! Counters are kept as values, not as differences from the row before, which would change
//! whenever either process moved.
//!
//! **Deltas (codec 5).** zstd matches repeated bytes but cannot subtract: a counter that moved
//! is new bytes, however little it moved. On a busy host every process moves every second
//! (`bench/busy.sh`: 250 shells waking twice a second), so most of the lane was the low digits
//! of counters. A delta table is written against the **base**, the table of the record before
//! it in the same store frame: a row whose process (pid and start time) is in the base stores
//! each field as the wrapping difference from its base row's, zigzag-coded (an unchanged field
//! is 0; a gauge that went down is a small number; any u64 comes back exactly), does not repeat
//! its pid and start time, and writes its comm, command line and cgroups only when one of them
//! changed (an exec, a rename, a move). New rows are written as in codec 4. Measured on a
//! 126 s recording of `bench/busy.sh`'s load (40,324 rows): the lane from 234 to 158 KB after
//! zstd, its raw bytes from 2.56 to 1.45 MB. What remains is information: the per-second changes
//! of schedstat's run and wait time, coded on their own, are about 73 KB of order-0 entropy.
//!
//! The first table of every store frame is self-contained (the writer says where frames start,
//! `jitterscope_store::Writer::starts_frame`), so a read needs nothing before the frame holding
//! its first record, and damage costs at most the tables after it in its frame — which a
//! damaged zstd frame costs anyway. A reader decodes the tables of a frame in order
//! (`codec::DetailChain`); a base it does not hold (the one before was lost) is an error, never
//! a wrong table: each delta names its base's timestamp and row count.
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
//! the named codecs did (in a delta table: a difference of 0, the base row's value). A field added to `Process` needs its column here (a new tag; tags are
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

    #[prost(uint32, repeated, tag = "90")]
    matched: Vec<u32>,
    #[prost(uint32, repeated, tag = "91")]
    base_skip: Vec<u32>,
    #[prost(uint32, repeated, tag = "92")]
    renamed: Vec<u32>,
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

/// The table a delta table's matched rows are differences from (the previous detail payload of
/// the same frame), and its rows by identity.
pub(crate) struct Base<'a> {
    pub(crate) procs: &'a [Process],
    pub(crate) index: &'a HashMap<(u32, u64), u32>,
}

/// A process's identity across samples: its pid and start time (a reused pid starts later).
pub(crate) fn identity(p: &Process) -> (u32, u64) {
    (p.stat.pid, p.stat.starttime_ticks)
}

/// Zigzag of a 64-bit difference: small differences either way become small varints.
fn zz64(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzz64(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn zz32(d: i32) -> u32 {
    ((d << 1) ^ (d >> 31)) as u32
}

fn unzz32(v: u32) -> i32 {
    ((v >> 1) as i32) ^ -((v & 1) as i32)
}

/// A value as a delta table stores it: the wrapping difference from the base row's (zigzag),
/// or the value itself where there is no base value. `undelta` inverts it exactly.
fn delta(cur: u64, base: Option<u64>) -> u64 {
    base.map_or(cur, |b| zz64(cur.wrapping_sub(b) as i64))
}

fn undelta(v: u64, base: Option<u64>) -> u64 {
    base.map_or(v, |b| b.wrapping_add(unzz64(v) as u64))
}

fn delta32(cur: u32, base: Option<u32>) -> u32 {
    base.map_or(cur, |b| zz32(cur.wrapping_sub(b) as i32))
}

fn undelta32(v: u32, base: Option<u32>) -> u32 {
    base.map_or(v, |b| b.wrapping_add(unzz32(v) as u32))
}

fn delta_i64(cur: i64, base: Option<i64>) -> i64 {
    base.map_or(cur, |b| cur.wrapping_sub(b))
}

fn undelta_i64(v: i64, base: Option<i64>) -> i64 {
    base.map_or(v, |b| b.wrapping_add(v))
}

fn delta_i32(cur: i32, base: Option<i32>) -> i32 {
    base.map_or(cur, |b| cur.wrapping_sub(b))
}

fn undelta_i32(v: i32, base: Option<i32>) -> i32 {
    base.map_or(v, |b| b.wrapping_add(v))
}

/// Whether a matched row's names (comm, command line, cgroups) differ from its base row's: an
/// exec, a rename (`prctl(PR_SET_NAME)`) or a move to another cgroup. The recorder shares each
/// process's command line and cgroup paths between samples, so the pointers decide most rows.
fn renamed(p: &Process, b: &Process) -> bool {
    let same_cgroups = match (&p.cgroups, &b.cgroups) {
        (None, None) => true,
        (Some(x), Some(y)) => Arc::ptr_eq(x, y) || x == y,
        _ => false,
    };
    p.stat.comm != b.stat.comm
        || !(Arc::ptr_eq(&p.cmdline, &b.cmdline) || p.cmdline == b.cmdline)
        || !same_cgroups
}

impl Table {
    /// The columns of `procs`, with schedstat's run and wait time in µs when `sched_us`
    /// (codec 4), else in ns (codec 3).
    pub(crate) fn of(procs: &[Process], sched_us: bool) -> Table {
        Self::of_with(procs, sched_us, None)
    }

    /// As [`of`](Table::of); with a `base`, a delta table (codec 5, always µs): rows found in
    /// the base by identity store their differences from their base row (see the module
    /// documentation).
    pub(crate) fn of_with(procs: &[Process], sched_us: bool, base: Option<&Base>) -> Table {
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
        let mut last_base: i64 = -1;
        for p in procs {
            let s = &p.stat;
            let b: Option<&Process> = base.and_then(|base| {
                let i = *base.index.get(&identity(p))?;
                let row = base.procs.get(i as usize)?;
                // Rows mostly keep their order: the skip from the row after the last one
                // matched is 0.
                t.base_skip
                    .push(zz64(i64::from(i).wrapping_sub(last_base + 1)) as u32);
                last_base = i64::from(i);
                Some(row)
            });
            if base.is_some() {
                push_run(&mut t.matched, b.is_some());
            }
            // A matched row is its base row's process: pid and start time are not repeated.
            if b.is_none() {
                t.pid.push(i64::from(s.pid) - pid0);
                pid0 = i64::from(s.pid);
                // Wrapping: a difference of two u64 read back with a wrapping add is exact.
                t.starttime_ticks
                    .push((s.starttime_ticks as i64).wrapping_sub(start0));
                start0 = s.starttime_ticks as i64;
            }
            let named = match b {
                None => true,
                Some(b) => {
                    let r = renamed(p, b);
                    push_run(&mut t.renamed, r);
                    r
                }
            };
            let bs = b.map(|b| &b.stat);
            t.state
                .push(delta32(u32::from(s.state), bs.map(|b| u32::from(b.state))));
            t.ppid.push(delta32(s.ppid, bs.map(|b| b.ppid)));
            t.flags.push(delta32(s.flags, bs.map(|b| b.flags)));
            t.minflt.push(delta(s.minflt, bs.map(|b| b.minflt)));
            t.majflt.push(delta(s.majflt, bs.map(|b| b.majflt)));
            t.cminflt.push(delta(s.cminflt, bs.map(|b| b.cminflt)));
            t.children_ticks
                .push(delta(s.children_ticks, bs.map(|b| b.children_ticks)));
            t.utime_ticks
                .push(delta(s.utime_ticks, bs.map(|b| b.utime_ticks)));
            t.stime_ticks
                .push(delta(s.stime_ticks, bs.map(|b| b.stime_ticks)));
            t.nice.push(delta_i64(s.nice, bs.map(|b| b.nice)));
            t.num_threads
                .push(delta(s.num_threads, bs.map(|b| b.num_threads)));
            t.vsize_bytes
                .push(delta(s.vsize_bytes, bs.map(|b| b.vsize_bytes)));
            t.rss_pages
                .push(delta(s.rss_pages, bs.map(|b| b.rss_pages)));
            t.processor
                .push(delta32(s.processor, bs.map(|b| b.processor)));
            t.delayacct_blkio_ticks.push(delta(
                s.delayacct_blkio_ticks,
                bs.map(|b| b.delayacct_blkio_ticks),
            ));
            push_opt(
                &mut t.exit_code_runs,
                &mut t.exit_code,
                s.exit_code
                    .map(|c| delta_i32(c, bs.and_then(|b| b.exit_code))),
            );

            let st = p.status.as_ref();
            let bst = b.and_then(|b| b.status.as_ref());
            push_run(&mut t.status, st.is_some());
            // Each status field: its value, or its difference where the base row has one.
            let f = |g: fn(&PidStatus) -> Option<u64>| {
                st.and_then(g).map(|v| delta(v, bst.and_then(g)))
            };
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
                let bio = b.and_then(|b| b.io.as_ref());
                let g = |f: fn(&PidIo) -> u64| delta(f(io), bio.map(f));
                t.rchar.push(g(|i| i.rchar));
                t.wchar.push(g(|i| i.wchar));
                t.read_bytes.push(g(|i| i.read_bytes));
                t.write_bytes.push(g(|i| i.write_bytes));
                t.cancelled_write_bytes.push(g(|i| i.cancelled_write_bytes));
            }
            push_run(&mut t.schedstat, p.schedstat.is_some());
            if let Some(s) = &p.schedstat {
                let bsc = b.and_then(|b| b.schedstat.as_ref());
                if sched_us {
                    t.run_us
                        .push(delta(s.run_ns / 1000, bsc.map(|b| b.run_ns / 1000)));
                    t.wait_us
                        .push(delta(s.wait_ns / 1000, bsc.map(|b| b.wait_ns / 1000)));
                } else {
                    t.run_ns.push(delta(s.run_ns, bsc.map(|b| b.run_ns)));
                    t.wait_ns.push(delta(s.wait_ns, bsc.map(|b| b.wait_ns)));
                }
                t.timeslices
                    .push(delta(s.timeslices, bsc.map(|b| b.timeslices)));
            }

            // Names: every row of a self-contained table, the new and renamed rows of a delta.
            if named {
                t.comm.push(dict.of(&s.comm));
                let set = p.cgroups.as_deref().map(|c| {
                    let next = (t.cgroup_sets.len() / 5) as u32;
                    let key =
                        [&c.cpu, &c.cpuacct, &c.memory, &c.blkio, &c.v2].map(Option::as_deref);
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
        }
        t.strings = dict.strings;
        t
    }

    /// The processes of this table, in the order they were written; `sched_us` as it was
    /// written with.
    pub(crate) fn processes(&self, sched_us: bool) -> Result<Vec<Process>, TableError> {
        self.processes_with(sched_us, None)
    }

    /// As [`processes`](Table::processes); with a `base`, the table is a delta table (codec 5)
    /// whose matched rows are differences from rows of `base`.
    pub(crate) fn processes_with(
        &self,
        sched_us: bool,
        base: Option<&[Process]>,
    ) -> Result<Vec<Process>, TableError> {
        if self.rows > MAX_ROWS {
            return Err(TableError("more rows than a host can have processes"));
        }
        let n = self.rows as usize;
        let mut matched = OptRows::presence(&self.matched, n)?;
        let delta = base.is_some();
        let base = base.unwrap_or(&[]);
        let n_matched = if delta { matched.count } else { 0 };
        if self.base_skip.len() != n_matched {
            return Err(TableError("base rows do not have one per matched row"));
        }
        let mut renamed = OptRows::presence(&self.renamed, n_matched)?;
        let n_new = n - n_matched;
        let n_named = n_new + if delta { renamed.count } else { 0 };
        // A table always has pids (a delta table, of its new rows); without them a damaged
        // `rows` alone would say how much to allocate.
        if self.pid.len() != n_new {
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

        let comm = col(&self.comm, n_named)?;
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
        let starttime_ticks = col(&self.starttime_ticks, n_new)?;
        let vsize_bytes = col(&self.vsize_bytes, n)?;
        let rss_pages = col(&self.rss_pages, n)?;
        let processor = col(&self.processor, n)?;
        let delayacct_blkio_ticks = col(&self.delayacct_blkio_ticks, n)?;
        let cmdline = col(&self.cmdline, n_named)?;
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
        let mut cgroups = OptRows::new(&self.cgroups_runs, &self.cgroups, n_named)?;

        let mut out = Vec::with_capacity(n);
        let (mut pid, mut start) = (0i64, 0u64);
        let (mut io_row, mut sched_row) = (0, 0);
        let (mut new_row, mut named_row, mut matched_row) = (0, 0, 0);
        let mut last_base: i64 = -1;
        for i in 0..n {
            let b: Option<&Process> = match delta && matched.next_present() {
                false => None,
                true => {
                    let skip = unzz64(u64::from(self.base_skip[matched_row]));
                    matched_row += 1;
                    let k = last_base.wrapping_add(1).wrapping_add(skip);
                    last_base = k;
                    let row = usize::try_from(k)
                        .ok()
                        .and_then(|k| base.get(k))
                        .ok_or(TableError("base row out of range"))?;
                    Some(row)
                }
            };
            let bs = b.map(|b| &b.stat);
            let named = match b {
                None => true,
                Some(_) => renamed.next_present(),
            };
            let (row_pid, row_start) = match bs {
                Some(b) => (b.pid, b.starttime_ticks),
                None => {
                    pid = pid.wrapping_add(self.pid[new_row]);
                    start = start.wrapping_add(get(starttime_ticks, new_row) as u64);
                    new_row += 1;
                    (
                        u32::try_from(pid).map_err(|_| TableError("pid out of range"))?,
                        start,
                    )
                }
            };
            let named_at = named.then(|| {
                named_row += 1;
                named_row - 1
            });
            let state = undelta32(get(state, i), bs.map(|b| u32::from(b.state)));
            let stat = PidStat {
                pid: row_pid,
                comm: match (named_at, comm, bs) {
                    (Some(k), Some(c), _) => string(c[k])?.clone(),
                    (None, _, Some(b)) => b.comm.clone(),
                    _ => String::new(),
                },
                state: char::from_u32(state).ok_or(TableError("state is no char"))?,
                ppid: undelta32(get(ppid, i), bs.map(|b| b.ppid)),
                flags: undelta32(get(flags, i), bs.map(|b| b.flags)),
                minflt: undelta(get(minflt, i), bs.map(|b| b.minflt)),
                majflt: undelta(get(majflt, i), bs.map(|b| b.majflt)),
                cminflt: undelta(get(cminflt, i), bs.map(|b| b.cminflt)),
                children_ticks: undelta(get(children_ticks, i), bs.map(|b| b.children_ticks)),
                utime_ticks: undelta(get(utime_ticks, i), bs.map(|b| b.utime_ticks)),
                stime_ticks: undelta(get(stime_ticks, i), bs.map(|b| b.stime_ticks)),
                nice: undelta_i64(get(nice, i), bs.map(|b| b.nice)),
                num_threads: undelta(get(num_threads, i), bs.map(|b| b.num_threads)),
                starttime_ticks: row_start,
                vsize_bytes: undelta(get(vsize_bytes, i), bs.map(|b| b.vsize_bytes)),
                rss_pages: undelta(get(rss_pages, i), bs.map(|b| b.rss_pages)),
                processor: undelta32(get(processor, i), bs.map(|b| b.processor)),
                delayacct_blkio_ticks: undelta(
                    get(delayacct_blkio_ticks, i),
                    bs.map(|b| b.delayacct_blkio_ticks),
                ),
                exit_code: exit_code
                    .next()
                    .map(|c| undelta_i32(c, bs.and_then(|b| b.exit_code))),
            };
            // Each status field has a slot in every row: read them all, so that the columns
            // stay in step.
            let bst = b.and_then(|b| b.status.as_ref());
            let un = |v: Option<u64>, g: fn(&PidStatus) -> Option<u64>| {
                v.map(|v| undelta(v, bst.and_then(g)))
            };
            let st = PidStatus {
                rss_anon_bytes: un(rss_anon_bytes.next(), |s| s.rss_anon_bytes),
                rss_file_bytes: un(rss_file_bytes.next(), |s| s.rss_file_bytes),
                rss_shmem_bytes: un(rss_shmem_bytes.next(), |s| s.rss_shmem_bytes),
                swap_bytes: un(swap_bytes.next(), |s| s.swap_bytes),
                voluntary_ctxt_switches: un(vcs.next(), |s| s.voluntary_ctxt_switches),
                nonvoluntary_ctxt_switches: un(nvcs.next(), |s| s.nonvoluntary_ctxt_switches),
            };
            let status = match status.next_present() {
                true => Some(st),
                false if st == PidStatus::default() => None,
                false => return Err(TableError("a status field in a row without status")),
            };
            let io = io.next_present().then(|| {
                let k = io_row;
                io_row += 1;
                let bio = b.and_then(|b| b.io.as_ref());
                let un = |c: Option<&[u64]>, f: fn(&PidIo) -> u64| undelta(get(c, k), bio.map(f));
                PidIo {
                    rchar: un(rchar, |i| i.rchar),
                    wchar: un(wchar, |i| i.wchar),
                    read_bytes: un(read_bytes, |i| i.read_bytes),
                    write_bytes: un(write_bytes, |i| i.write_bytes),
                    cancelled_write_bytes: un(cancelled, |i| i.cancelled_write_bytes),
                }
            });
            let schedstat = schedstat.next_present().then(|| {
                let k = sched_row;
                sched_row += 1;
                let bsc = b.and_then(|b| b.schedstat.as_ref());
                // A base row's times as this table's unit stores them.
                let unit = |ns: u64| ns / scale;
                PidSchedstat {
                    run_ns: undelta(get(run_ns, k), bsc.map(|b| unit(b.run_ns)))
                        .saturating_mul(scale),
                    wait_ns: undelta(get(wait_ns, k), bsc.map(|b| unit(b.wait_ns)))
                        .saturating_mul(scale),
                    timeslices: undelta(get(timeslices, k), bsc.map(|b| b.timeslices)),
                }
            });
            let (cgroups, cmdline) = match (named_at, b) {
                (None, Some(b)) => (b.cgroups.clone(), b.cmdline.clone()),
                _ => {
                    let cgroups = match cgroups.next() {
                        None => None,
                        Some(s) => Some(
                            sets.get(s as usize)
                                .ok_or(TableError("cgroup set index out of range"))?
                                .clone(),
                        ),
                    };
                    let cmdline = match (named_at, cmdline) {
                        (Some(k), Some(c)) => {
                            let k = c[k] as usize;
                            let s = self
                                .strings
                                .get(k)
                                .ok_or(TableError("string index out of range"))?;
                            cmdlines[k]
                                .get_or_insert_with(|| Arc::from(s.as_str()))
                                .clone()
                        }
                        _ => Arc::from(""),
                    };
                    (cgroups, cmdline)
                }
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

    fn index_of(procs: &[Process]) -> HashMap<(u32, u64), u32> {
        procs
            .iter()
            .enumerate()
            .map(|(i, p)| (identity(p), i as u32))
            .collect()
    }

    /// A delta table of `procs` against `base`, through its bytes, read back against `base`.
    fn delta_round_trip(procs: &[Process], base: &[Process]) -> (Vec<Process>, Table) {
        let index = index_of(base);
        let b = Base {
            procs: base,
            index: &index,
        };
        let t = Table::of_with(procs, true, Some(&b));
        let mut bytes = Vec::new();
        prost::Message::encode(&t, &mut bytes).unwrap();
        let t = <Table as prost::Message>::decode(&bytes[..]).unwrap();
        (t.processes_with(true, Some(base)).unwrap(), t)
    }

    /// `procs` as codec 4 keeps them (schedstat's times to the µs).
    fn as_stored(procs: &[Process]) -> Vec<Process> {
        let mut v = procs.to_vec();
        for p in &mut v {
            if let Some(s) = p.schedstat.as_mut() {
                crate::codec::round_schedstat(s);
            }
        }
        v
    }

    /// Codec 5: every row comes back exactly, whatever changed against its base row — counters
    /// up, gauges down, values wrapping, parts and optional fields appearing and going, names
    /// changing — and rows new, gone, reordered, or with a reused pid.
    #[test]
    fn a_delta_table_reads_back_exactly() {
        let base = as_stored(&[full(1), full(2), full(3), full(4), full(5)]);
        let mut cur: Vec<Process> = Vec::new();
        // Unchanged.
        cur.push(base[0].clone());
        // A new process between the old ones.
        cur.push(full(9));
        // Counters up, gauges down, wrapping both ways, the state and CPU moved.
        let mut p = base[1].clone();
        p.stat.utime_ticks += 3;
        p.stat.rss_pages -= 1;
        p.stat.vsize_bytes = u64::MAX;
        p.stat.minflt = 0;
        p.stat.nice = -20;
        p.stat.state = 'D';
        p.stat.processor = u32::MAX;
        p.stat.exit_code = None;
        let s = p.schedstat.as_mut().unwrap();
        s.run_ns += 1_234_000;
        s.wait_ns = 0;
        p.status.as_mut().unwrap().rss_anon_bytes = None;
        p.status.as_mut().unwrap().swap_bytes = Some(u64::MAX);
        p.io.as_mut().unwrap().rchar += 10;
        cur.push(p);
        // Renamed by an exec, moved to another cgroup; parts gone.
        let mut p = base[3].clone();
        p.stat.comm = "exec'd".into();
        p.cmdline = Arc::from("/bin/new --arg");
        p.cgroups = None;
        p.io = None;
        p.schedstat = None;
        cur.push(p);
        // Order swapped: base[2] after base[3]; its parts come back.
        let mut p = base[2].clone();
        p.status = None;
        p.stat.exit_code = Some(-9);
        cur.push(p);
        // base[4]'s pid reused by a later process: a new row, not a delta.
        let mut p = full(11);
        p.stat.pid = base[4].stat.pid;
        p.stat.starttime_ticks = base[4].stat.starttime_ticks + 1;
        cur.push(p);
        let mut only_cgroups = base[0].clone();
        only_cgroups.stat.pid += 1_000_000;
        cur.push(only_cgroups);
        let cur = as_stored(&cur);
        let (back, t) = delta_round_trip(&cur, &base);
        assert_eq!(back, cur);
        // Matched rows repeat neither their identity nor, unless renamed, their names.
        assert_eq!(t.pid.len(), 3, "new rows only");
        assert_eq!(t.comm.len(), 4, "new and renamed rows");
        assert!(t.strings.contains(&"/bin/new --arg".to_string()));
        // A row whose names did not change shares its base row's allocations.
        assert!(Arc::ptr_eq(&back[0].cmdline, &base[0].cmdline));
        // Against no match at all, or an empty base, every row is new.
        assert_eq!(delta_round_trip(&cur, &[]).0, cur);
        assert_eq!(delta_round_trip(&[], &base).0, vec![]);
    }

    /// What an unchanged process costs in a delta table: its columns are zeros.
    #[test]
    fn an_unchanged_table_is_zeros() {
        let base = as_stored(&[full(1), full(2), full(3)]);
        let (back, t) = delta_round_trip(&base, &base);
        assert_eq!(back, base);
        assert!(t.strings.is_empty() && t.pid.is_empty() && t.cgroup_sets.is_empty());
        for c in [&t.utime_ticks, &t.run_us, &t.vsize_bytes, &t.rchar] {
            assert!(c.iter().all(|&v| v == 0), "{c:?}");
        }
        assert!(t.base_skip.iter().all(|&v| v == 0));
        assert_eq!(t.matched, vec![0, 3]);
    }

    #[test]
    fn damaged_delta_tables_are_errors() {
        let base = as_stored(&[full(1), full(2)]);
        let index = index_of(&base);
        let b = Base {
            procs: &base,
            index: &index,
        };
        let mut cur = base.clone();
        cur.push(full(3));
        let t = Table::of_with(&cur, true, Some(&b));
        assert_eq!(
            t.processes_with(true, Some(&base)).unwrap(),
            as_stored(&cur)
        );
        type Break = fn(&mut Table);
        let broken: Vec<(&str, Break)> = vec![
            ("base row past the base", |t| t.base_skip[1] = 8),
            ("base row before the first", |t| t.base_skip[0] = 1),
            ("matched runs", |t| t.matched = vec![0, 5]),
            ("renamed runs", |t| t.renamed = vec![3]),
            ("skips without matches", |t| t.base_skip.push(0)),
            ("new rows' pids", |t| t.pid.push(1)),
            ("names", |t| t.comm.push(0)),
        ];
        for (what, f) in broken {
            let mut t = t.clone();
            f(&mut t);
            assert!(t.processes_with(true, Some(&base)).is_err(), "{what}");
        }
        // Read against a shorter base, a matched row points past it.
        assert!(t.processes_with(true, Some(&base[..1])).is_err());
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
