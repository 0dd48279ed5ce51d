//! The always-on sampler: one `cpu-clock` perf event per online CPU with kernel and user call
//! chains, read by a thread of its own, cut into one [`Profile`] per recorder interval.
//!
//! The rings are drained every 250 ms (and at each cut) by the `profiler` thread, which also does everything that
//! can block (reading a process's mappings waits for its `mmap_lock`, which a process in
//! reclaim can hold for long): the recorder's loop only asks for the slice up to its sample's
//! time and waits a bounded time for it. A slice that is late joins the next sample.

use std::io;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use jitterscope_model::collector::{Collector, Notes};
use jitterscope_model::profile::Profile;
use jitterscope_model::sample::{monotonic_ns, Sample};
use perf_event::data::endian::Native;
use perf_event::data::parse::{ParseConfig, Parser};
use perf_event::data::Record as Rec;
use perf_event::events::Software;
use perf_event::{Builder, Clock, SampleFlag, Sampler};

use crate::capture::{Aggregator, Mapping, RawStack, Resolver};
use crate::system::hex;
use crate::system::SystemResolver;
use crate::unwind::{UserStack, DEFAULT_STACK_BYTES, REGS_MASK};

/// Default frequency: 99 Hz rather than 100 so sampling does not run in lockstep with timer
/// ticks and other periodic work (which would over- or under-count it).
pub const DEFAULT_HZ: u32 = 99;

/// Ring buffer pages per CPU with frame-pointer stacks only (128 KiB): a second of samples with
/// deep stacks at 99 Hz is about 100 KB, and the rings are drained four times a second.
pub const RING_PAGES: usize = 32;

/// Ring buffer pages per CPU when samples carry stack copies (512 KiB): 99 samples of 8 KiB are
/// about 0.8 MB a second on a busy CPU, so a ring holds over half a second between drains.
/// With its header page that is perf_event_mlock_kb's default (516 KiB), the most a process
/// without CAP_IPC_LOCK may map per CPU.
pub const RING_PAGES_STACKS: usize = 128;

/// How often the rings are drained between cuts. Naming no longer depends on catching a
/// process alive (its mappings come from the records), so this only bounds the rings' fill;
/// each wake-up has a fixed cost (10 Hz was a tenth of the profiler's CPU).
const DRAIN_EVERY: Duration = Duration::from_millis(250);

/// misc bit of a COMM record written by exec.
const MISC_COMM_EXEC: u16 = 1 << 13;

/// The sampler's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Samples per second per CPU.
    pub hz: u32,
    /// Ring buffer pages per CPU.
    pub ring_pages: usize,
    /// Bytes of user stack copied per sample for DWARF unwinding (see [`crate::unwind`]); 0
    /// keeps the kernel's frame-pointer walk only.
    pub stack_bytes: u32,
    /// Whether CPython processes' interpreter frames are read at each sample (see
    /// [`crate::python`]).
    pub python: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            hz: DEFAULT_HZ,
            ring_pages: RING_PAGES_STACKS,
            stack_bytes: DEFAULT_STACK_BYTES,
            python: true,
        }
    }
}

impl Config {
    /// Frame-pointer stacks only, as before DWARF unwinding.
    pub fn frame_pointers(hz: u32) -> Self {
        Config {
            hz,
            ring_pages: RING_PAGES,
            stack_bytes: 0,
            python: true,
        }
    }
}

/// The perf event attributes of the sampler on `cpu` (also what parses its records), copying
/// `stack_bytes` of user stack and the user registers with each sample (none when 0).
pub fn builder(cpu: usize, hz: u32, stack_bytes: u32) -> Builder<'static> {
    let mut b = Builder::new(Software::CPU_CLOCK);
    let mut flags = SampleFlag::IP
        | SampleFlag::TID
        | SampleFlag::TIME
        | SampleFlag::CPU
        | SampleFlag::CALLCHAIN;
    if stack_bytes > 0 {
        flags |= SampleFlag::REGS_USER | SampleFlag::STACK_USER;
        // The kernel wants a multiple of 8.
        b.sample_regs_user(REGS_MASK)
            .sample_stack_user(stack_bytes & !7);
    }
    b.one_cpu(cpu)
        .any_pid()
        .sample_frequency(hz as u64)
        .sample(flags)
        .clockid(Clock::MONOTONIC)
        .include_kernel()
        .exclude_hv(true)
        // Executable mappings (with the file's build id, 5.12+), forks, execs and exits keep
        // each process's view of its mappings current without re-reading /proc; renames say
        // when a thread's name is stale.
        .mmap(true)
        .mmap2(true)
        .build_id(true)
        .comm(true)
        .comm_exec(true)
        .task(true)
        // Side-band records carry their time, so records of all CPUs can be put in order.
        .sample_id_all(true)
        .enabled(false);
    b
}

/// The online CPUs (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
pub fn online_cpus() -> io::Result<Vec<usize>> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(s.trim())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {s:?}")))
}

/// Parses a kernel CPU list (`0-3,6`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// Opens and enables one sampling event per online CPU.
pub fn open(cfg: &Config) -> Result<Vec<Sampler>, String> {
    if cfg.hz == 0 {
        return Err("sampling frequency is 0".into());
    }
    let cpus = online_cpus().map_err(|e| format!("cannot list online CPUs: {e}"))?;
    let mut rings = Vec::with_capacity(cpus.len());
    for cpu in cpus {
        let c = match builder(cpu, cfg.hz, cfg.stack_bytes).build() {
            // Kernels before 5.12 have no build ids in MMAP2 records: they are read from the
            // files instead.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                builder(cpu, cfg.hz, cfg.stack_bytes)
                    .build_id(false)
                    .build()
            }
            r => r,
        }
        .map_err(|e| open_error(cpu, &e))?;
        let mut s = c
            .sampled(cfg.ring_pages * page_size())
            .map_err(|e| format!("cannot map the ring buffer of CPU {cpu}: {e}"))?;
        s.enable()
            .map_err(|e| format!("cannot enable sampling on CPU {cpu}: {e}"))?;
        rings.push(s);
    }
    Ok(rings)
}

fn page_size() -> usize {
    jitterscope_model::sample::HostInfo::page_size() as usize
}

fn open_error(cpu: usize, e: &io::Error) -> String {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) if paranoid.parse().is_ok_and(|p: i32| p > 2) => {
            format!(
                "perf_event_open on CPU {cpu}: {e} (kernel.perf_event_paranoid is {paranoid}: \
                 above 2, Debian's and Ubuntu's kernels allow it only with CAP_SYS_ADMIN; set 2)"
            )
        }
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "perf_event_open on CPU {cpu}: {e} (kernel.perf_event_paranoid is {paranoid}; \
             system-wide sampling needs CAP_PERFMON (or CAP_SYS_ADMIN), or paranoid <= 0)"
        ),
        Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::EOPNOTSUPP) => {
            format!("perf_event_open on CPU {cpu}: {e} (this kernel has no cpu-clock sampling)")
        }
        _ => format!("perf_event_open on CPU {cpu}: {e}"),
    }
}

/// One ring record, owned, with the time it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A stack sample, with the copy of its user stack when the sampler takes them.
    Sample(RawStack, Option<Box<UserStack>>),
    /// A new executable mapping.
    Mmap(u32, Mapping),
    /// A new thread (`pid == ppid`) or process.
    Fork {
        /// New process.
        pid: u32,
        /// Its parent process.
        ppid: u32,
        /// New thread.
        tid: u32,
        /// The thread that forked.
        ptid: u32,
    },
    /// A thread's new name; `exec` when an exec set it.
    Comm {
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
        /// New name.
        comm: Arc<str>,
        /// Set by exec.
        exec: bool,
    },
    /// A thread exited (the process, when `pid == tid`).
    Exit {
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
    },
    /// Samples the kernel lost (ring full).
    Lost(u64),
    /// A record that did not parse.
    Bad,
}

/// The time of a side-band record: with `sample_id_all`, the sample id (pid/tid, time,
/// cpu/res for our sample type) closes every non-sample record.
fn tail_time(body: &[u8]) -> u64 {
    let n = body.len();
    match (n >= 16).then(|| body.get(n - 16..n - 8)).flatten() {
        Some(b) => u64::from_ne_bytes(b.try_into().unwrap_or_default()),
        None => 0,
    }
}

/// The event of one parsed record (`body`: the record after its header, for the time of
/// side-band records). Records of no interest give `None`.
pub fn event(
    r: Result<Rec<'_>, perf_event::data::parse::ParseError>,
    misc: u16,
    body: &[u8],
) -> Option<(u64, Event)> {
    let t = tail_time(body);
    let r = match r {
        Ok(r) => r,
        Err(_) => return Some((t, Event::Bad)),
    };
    Some(match r {
        // Samples are parsed by `parse_sample`; one reaching here came without a layout.
        Rec::Sample(_) => (t, Event::Bad),
        Rec::Lost(l) => (t, Event::Lost(l.lost)),
        Rec::Mmap2(m) => (
            t,
            Event::Mmap(
                m.pid,
                Mapping {
                    start: m.addr,
                    end: m.addr.saturating_add(m.len),
                    pgoff: m.pgoff,
                    path: String::from_utf8_lossy(&m.filename).as_ref().into(),
                    inode: m.ino().unwrap_or(0),
                    build_id: m
                        .build_id()
                        .filter(|b| !b.is_empty())
                        .map(|b| hex(b).into()),
                },
            ),
        ),
        Rec::Fork(f) => (
            t,
            Event::Fork {
                pid: f.pid,
                ppid: f.ppid,
                tid: f.tid,
                ptid: f.ptid,
            },
        ),
        Rec::Comm(c) => (
            t,
            Event::Comm {
                pid: c.pid,
                tid: c.tid,
                comm: String::from_utf8_lossy(&c.comm).as_ref().into(),
                exec: misc & MISC_COMM_EXEC != 0,
            },
        ),
        Rec::Exit(e) => (
            t,
            Event::Exit {
                pid: e.pid,
                tid: e.tid,
            },
        ),
        _ => return None,
    })
}

/// Applies events to `agg` in time order. Each CPU's ring is in order but the rings are not
/// with each other: a process that mapped a library on one CPU and ran it on another, or exited
/// on another, must be seen in the order it happened (perf sorts the same way).
pub fn apply<R: Resolver>(mut events: Vec<(u64, Event)>, agg: &mut Aggregator<R>) {
    apply_drained(&mut events, agg);
}

/// [`apply`], leaving `events` empty with its allocation, for the next drain.
pub fn apply_drained<R: Resolver>(events: &mut Vec<(u64, Event)>, agg: &mut Aggregator<R>) {
    events.sort_by_key(|(t, _)| *t);
    for (t, e) in events.drain(..) {
        match e {
            Event::Sample(s, stack) => agg.add_with_stack(t, s, stack.as_deref()),
            Event::Mmap(pid, m) => agg.mmap(pid, m),
            Event::Fork {
                pid,
                ppid,
                tid,
                ptid,
            } => agg.fork(ppid, ptid, pid, tid),
            Event::Comm {
                pid,
                tid,
                comm,
                exec,
            } => {
                if exec {
                    agg.gone(pid, true);
                }
                agg.renamed(pid, tid, comm);
            }
            Event::Exit { pid, tid } => agg.exited(pid, tid),
            Event::Lost(n) => agg.add_lost(n, 0),
            Event::Bad => agg.add_lost(0, 1),
        }
    }
}

/// What a sample record of an event holds beyond the fixed part: the user registers and stack
/// copy, when the event takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// PERF_SAMPLE_REGS_USER and STACK_USER are set.
    pub stacks: bool,
    /// The user registers' mask.
    pub regs_mask: u64,
}

impl Layout {
    /// The layout of an event's samples, from its parse configuration.
    pub fn of(c: &ParseConfig<Native>) -> Self {
        let ty = c.sample_type();
        Layout {
            stacks: ty.contains(perf_event::data::SampleFlags::REGS_USER)
                && ty.contains(perf_event::data::SampleFlags::STACK_USER),
            regs_mask: c.regs_user(),
        }
    }
}

/// PERF_RECORD_SAMPLE.
const RECORD_SAMPLE: u32 = 9;

/// A sample record's body (after its header) in the layout [`builder`] asks for: IP, TID, TIME,
/// CPU, CALLCHAIN, then REGS_USER and STACK_USER when copying stacks.
///
/// Parsed here rather than by perf-event-data: its 0.1.8 reads the registers even when the
/// sample says it has none (abi NONE: kernel threads, the idle task), so every such sample of
/// an event that copies user stacks failed to parse (a third of all samples on a busy host).
pub fn parse_sample(b: &[u8], layout: Layout) -> Option<(u64, Event)> {
    let mut c = Cursor { b, at: 0 };
    let _ip = c.u64()?;
    let (pid, tid) = (c.u32()?, c.u32()?);
    let time = c.u64()?;
    let _cpu = c.u64()?;
    let nr = usize::try_from(c.u64()?).ok()?;
    // Collected from a slice of the exact length, so each vector is allocated once: collecting
    // `nr` fallible reads grew it by doubling (realloc was 3% of the recorder's samples).
    let chain: Vec<u64> = words(c.bytes(nr.checked_mul(8)?)?).collect();
    let mut stack = None;
    if layout.stacks {
        let abi = c.u64()?;
        // No registers follow when the sample has no user state (abi NONE).
        let n = if abi == 0 {
            0
        } else {
            layout.regs_mask.count_ones()
        };
        let regs: Vec<u64> = words(c.bytes(n as usize * 8)?).collect();
        // Likewise, dyn_size follows the copy only when there is one.
        let size = usize::try_from(c.u64()?).ok()?;
        if size > 0 {
            let data = c.bytes(size)?;
            let used = usize::try_from(c.u64()?).ok()?;
            stack = UserStack::from_sample(abi, layout.regs_mask, &regs, data.get(..used)?)
                .map(Box::new);
        }
    }
    Some((
        time,
        Event::Sample(RawStack::from_callchain(pid, tid, &chain), stack),
    ))
}

/// The native-endian u64s of `b` (whose length the caller made a multiple of 8).
fn words(b: &[u8]) -> impl ExactSizeIterator<Item = u64> + '_ {
    b.chunks_exact(8)
        .map(|w| <[u8; 8]>::try_from(w).map_or(0, u64::from_ne_bytes))
}

/// Reads a record's fields in order; every read is bounds-checked.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let v = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(v)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.bytes(8)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.bytes(4)?.try_into().ok()?))
    }
}

/// The event of one ring record: its type, header misc bits, body (after the header), the
/// event's sample layout, and the crate's parse of it (used for records other than samples).
pub fn event_of_record<'a>(
    ty: u32,
    misc: u16,
    body: &[u8],
    layout: Layout,
    parse: impl FnOnce() -> Result<Rec<'a>, perf_event::data::parse::ParseError>,
) -> Option<(u64, Event)> {
    if ty == RECORD_SAMPLE {
        return Some(parse_sample(body, layout).unwrap_or((0, Event::Bad)));
    }
    event(parse(), misc, body)
}

/// Reads every record waiting in `ring` as events. Returns the records read.
pub fn drain(ring: &mut Sampler, out: &mut Vec<(u64, Event)>) -> usize {
    let layout = Layout::of(ring.config());
    let mut n = 0;
    while let Some(rec) = ring.next_record() {
        n += 1;
        let misc = rec.misc();
        let body = rec.to_contiguous();
        if let Some(e) = event_of_record(rec.ty(), misc, &body, layout, || rec.parse_record()) {
            out.push(e);
        }
    }
    n
}

/// The event of one record given as bytes (its 8-byte header included), as the rings hold
/// them. `config` is the event's (`ParseConfig::from(*builder(..).attrs())`).
pub fn event_of_bytes(bytes: &[u8], config: &ParseConfig<Native>) -> Option<(u64, Event)> {
    let misc = match bytes.get(4..6) {
        Some(m) => u16::from_ne_bytes([m[0], m[1]]),
        None => return Some((0, Event::Bad)),
    };
    let ty = match bytes.get(0..4) {
        Some(t) => u32::from_ne_bytes([t[0], t[1], t[2], t[3]]),
        None => return Some((0, Event::Bad)),
    };
    let mut p = Parser::new(bytes, config.clone());
    event_of_record(
        ty,
        misc,
        bytes.get(8..).unwrap_or_default(),
        Layout::of(config),
        || p.parse::<Rec<'_>>(),
    )
}

enum Req {
    Cut(u64),
    Stop,
}

/// The sampler as a recorder [`Collector`]: its part of each sample is the slice up to the
/// sample's time.
pub struct ProfileCollector {
    /// What the profiler thread has to say (once each).
    said: Arc<std::sync::Mutex<Vec<String>>>,
    tx: Sender<Req>,
    rx: Receiver<Profile>,
    outstanding: u32,
    thread: Option<JoinHandle<()>>,
}

impl ProfileCollector {
    /// Opens the events and starts the `profiler` thread. An error is one line saying why
    /// sampling is not possible here.
    pub fn start(cfg: &Config) -> Result<Self, String> {
        let mut rings = open(cfg)?;
        let fds: Vec<_> = rings.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
        let python = cfg.python;
        let notes = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let said = notes.clone();
        let (hz, start) = (cfg.hz, monotonic_ns());
        let (tx, req_rx) = channel::<Req>();
        let (out_tx, rx) = channel::<Profile>();
        let thread = std::thread::Builder::new()
            .name("profiler".into())
            .spawn(move || {
                // blazesym's caches are not Send: the resolver lives on this thread.
                let mut resolver = SystemResolver::new();
                if python {
                    // The rings are moved here with their descriptors and dropped after the
                    // resolver, at this thread's end.
                    resolver.enable_python(fds);
                }
                let mut agg = Aggregator::new(hz, start, resolver);
                // Kept from one drain to the next: allocated anew each time (hundreds of
                // events), it was one of the large allocations that made glibc consolidate
                // its free lists on every drain.
                let mut events = Vec::new();
                loop {
                    let req = req_rx.recv_timeout(DRAIN_EVERY);
                    // The interpreter records first: each is written before its perf sample,
                    // so every sample drained below finds its record already read.
                    agg.resolver().drain_python(monotonic_ns());
                    for r in rings.iter_mut() {
                        drain(r, &mut events);
                    }
                    let held = events.len();
                    apply_drained(&mut events, &mut agg);
                    // A burst's room is given back once drains are small again.
                    if events.capacity() > 4 * held.max(256) {
                        events.shrink_to(2 * held);
                    }
                    let new = std::mem::take(&mut agg.resolver().notes);
                    if !new.is_empty() {
                        if let Ok(mut n) = said.lock() {
                            n.extend(new);
                        }
                    }
                    match req {
                        Ok(Req::Cut(t)) => {
                            if out_tx.send(agg.cut(t)).is_err() {
                                return;
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => agg.sweep(),
                        Ok(Req::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .map_err(|e| format!("cannot start the profiler thread: {e}"))?;
        let mut c = Self::with_thread(tx, rx, thread);
        c.said = notes;
        Ok(c)
    }

    fn with_thread(tx: Sender<Req>, rx: Receiver<Profile>, thread: JoinHandle<()>) -> Self {
        ProfileCollector {
            said: Arc::default(),
            tx,
            rx,
            outstanding: 0,
            thread: Some(thread),
        }
    }
}

impl Collector for ProfileCollector {
    fn name(&self) -> &'static str {
        "profile"
    }

    fn collect(&mut self, sample: &mut Sample, notes: &mut Notes) {
        if let Ok(mut said) = self.said.lock() {
            for m in said.drain(..) {
                notes.once(&m.clone(), || m);
            }
        }
        let mut got: Option<Profile> = None;
        let take = |p: Profile, got: &mut Option<Profile>| match got {
            Some(g) => g.merge(&p),
            None => *got = Some(p),
        };
        // A slice that came late (the thread was busy past the last wait) joins this sample.
        while let Ok(p) = self.rx.try_recv() {
            self.outstanding -= 1;
            take(p, &mut got);
        }
        if self.outstanding > 0 {
            // Still behind: no new cut and no wait, so a profiler stuck for long (on a process's
            // mappings) costs the recorder one bounded wait, not one per sample. Its next
            // slice covers the gap.
            notes.once("profile:behind", || {
                "profile: the profiler thread fell behind; its slices join later samples".into()
            });
            sample.profile = got;
            return;
        }
        if self.tx.send(Req::Cut(sample.mono_ns)).is_err() {
            notes.once("profile:dead", || {
                "profile: the profiler thread stopped".into()
            });
            return;
        }
        self.outstanding += 1;
        let wait = Duration::from_nanos(sample.interval_ns / 4).min(Duration::from_millis(250));
        if let Ok(p) = self.rx.recv_timeout(wait) {
            self.outstanding -= 1;
            take(p, &mut got);
        }
        sample.profile = got;
    }
}

impl Drop for ProfileCollector {
    fn drop(&mut self) {
        let _ = self.tx.send(Req::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use jitterscope_model::profile::Builder;
    use std::time::Instant;

    /// A profiler thread that answers its first cut late.
    fn slow_profiler() -> ProfileCollector {
        let (tx, req_rx) = channel::<Req>();
        let (out_tx, rx) = channel::<Profile>();
        let thread = std::thread::spawn(move || {
            let mut start = 0;
            let mut first = true;
            while let Ok(Req::Cut(t)) = req_rx.recv() {
                if std::mem::take(&mut first) {
                    std::thread::sleep(Duration::from_millis(600));
                }
                let mut b = Builder::new(99, start, t);
                b.add_stack(1, 1, "x", "x", "", vec![], 1);
                start = t;
                let _ = out_tx.send(b.finish());
            }
        });
        ProfileCollector::with_thread(tx, rx, thread)
    }

    fn collect(c: &mut ProfileCollector, mono_ns: u64) -> (Option<Profile>, Duration) {
        let mut s = Sample {
            mono_ns,
            interval_ns: 1_000_000_000,
            ..Default::default()
        };
        let t = Instant::now();
        c.collect(&mut s, &mut Notes::default());
        (s.profile, t.elapsed())
    }

    #[test]
    fn a_late_profiler_costs_one_bounded_wait_and_its_slice_joins_later() {
        let mut c = slow_profiler();
        let (p, d) = collect(&mut c, 1000);
        assert!(p.is_none());
        assert!(
            d >= Duration::from_millis(240) && d < Duration::from_millis(500),
            "{d:?}"
        );
        // Still behind: no wait at all.
        let (p, d) = collect(&mut c, 2000);
        assert!(p.is_none());
        assert!(
            d < Duration::from_millis(100),
            "waited {d:?} on a profiler known to be behind"
        );
        std::thread::sleep(Duration::from_millis(500));
        // Caught up: the late slice [0, 1000) and the new one [1000, 3000) arrive merged.
        let (p, _) = collect(&mut c, 3000);
        let p = p.expect("slices");
        assert_eq!((p.start_mono_ns, p.end_mono_ns, p.samples), (0, 3000, 2));
        let (p, _) = collect(&mut c, 4000);
        assert_eq!(
            p.map(|p| (p.start_mono_ns, p.end_mono_ns)),
            Some((3000, 4000))
        );
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
        assert_eq!(parse_cpu_list("0-99999999"), None);
    }
}
