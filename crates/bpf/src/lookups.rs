//! Path look-ups failing with ENOENT per process, with sampled names (lookups.bpf.c).
//!
//! On x86-64 the one program (BTF-typed `raw_syscalls:sys_exit`) is attached in windows, not
//! for as long as the tracer is: any system-call hook sends every system call of every task
//! through the kernel's slow path, and on a loop of failing `stat()` every call also runs the
//! program (the former enter/exit pairs, attached throughout, cost it +85% of its CPU time;
//! this tracer may take 2%). A window opens for [`BASE_WINDOW`] at a random point of every
//! [`BASE_EVERY`] (the regular sample, scaled up to the time outside the other windows), and
//! whenever `/proc/sys/fs/dentry-state` shows negative dentries created at [`TRIGGER_RATE`]
//! or faster (then it stays open while they are, for at most [`TRIGGER_SHARE`] of the time;
//! seen in full, not scaled). NSS's probe (tens of thousands of new names in a few tens of ms)
//! opens a window within [`POLL`] and is seen nearly whole (98% of the e2e test's 50,000-name
//! burst on a loaded host), unless the program was detached less than an RCU grace period
//! before (the load's attach check; a regular window that just closed, about 2% of the time):
//! the kernel then makes the attach wait for a whole new grace period (10 to 20 ms on an idle
//! two-core host, measured with sched_switch stacks in `tracepoint_add_func`), and the
//! burst's first names go unseen for that long.
//!
//! A steady storm of failures on names already cached is estimated from the regular windows.
//! That estimate runs low for a loop made only of such calls, because the windows slow the
//! very calls they count (x0.76 to x0.95 for a loop of failing `access()` in the e2e test):
//! well within the rules' factor-of-ten thresholds.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use jitterscope_model::signals;
use jitterscope_model::tracers::{
    path_pattern, LookupName, LookupPattern, LookupProc, Lookups, TracerId, Tracers,
};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

use crate::delta::{Deltas, Layout};
use crate::env::has_tracepoint;
use crate::tp_format::{check, field, Record};
use crate::{begin_read, create_other, Env, Tracer, TracerDef};

use crate::{drain_procs, load_and_attach, open_skel};

#[allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code, unused)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/lookups.skel.rs"));
}
use skel::*;

/// js_lookup_proc: comm (2 words), cgroup, named_gen, calls[2][3], enoent[2][3] (by window
/// kind: regular, triggered; then stat, access, open).
const LAYOUT: Layout = Layout {
    words: 16,
    keep: &[0, 1, 2, 3],
    named_gen: Some(3),
};
const _: () = assert!(std::mem::size_of::<types::js_lookup_proc>() == LAYOUT.words * 8);
const NAME_SLOTS: u32 = 64;
/// Patterns and raw names kept per interval: enough to see who probes what, small enough that
/// a storm of unique names does not bloat the store.
const MAX_PATTERNS: usize = 8;
const MAX_NAMES: usize = 16;

pub(crate) static DEF: TracerDef = TracerDef {
    id: TracerId::LOOKUPS,
    demand: Some(&signals::NEGATIVE_DENTRIES),
    unmeasured_attaches: false,
    release_below: None,
    load: |env, tracefs| Ok(Box::new(load(env, tracefs?)?)),
    records,
};

pub(crate) struct LookupsTracer {
    /// Declared first, so dropped (its thread stopped, its window closed) before the skeleton.
    windows: Option<Windows>,
    links: Vec<libbpf_rs::Link>,
    skel: LookupsSkel<'static>,
    procs: Deltas<u32>,
    procs_batch: crate::map_batch::Batch,
    syscalls: Vec<&'static str>,
    dropped: u64,
}

/// The traced syscalls and which argument is the path, as in lookups.bpf.c's ENTER list.
const SYSCALLS: &[(&str, usize)] = &[
    ("newstat", 0),
    ("newlstat", 0),
    ("newfstatat", 1),
    ("statx", 1),
    ("access", 0),
    ("faccessat", 1),
    ("faccessat2", 1),
    ("open", 0),
    ("openat", 1),
    ("openat2", 1),
];

/// The record fields the programs read: the path argument at entry, the result at exit.
pub(crate) fn records() -> Vec<Record> {
    let args = std::mem::offset_of!(types::sys_enter_args, args);
    let mut v = Vec::new();
    for &(sc, argi) in SYSCALLS {
        v.push(Record {
            event: format!("syscalls/sys_enter_{sc}"),
            fields: vec![("filename", args + 8 * argi, 8)],
        });
        v.push(Record {
            event: format!("syscalls/sys_exit_{sc}"),
            fields: vec![field!(types::sys_exit_args, ret, "ret")],
        });
    }
    v
}

type Loaded = (LookupsSkel<'static>, Vec<libbpf_rs::Link>);

/// Opens and loads the object with the windowed program (`windowed`) or the syscall
/// tracepoint pairs that exist in `tracefs`; attaches the latter now if `attach_now`.
fn open_and_load(
    env: &Env,
    tracefs: &Path,
    windowed: bool,
    attach_now: bool,
    syscalls: &mut Vec<&'static str>,
) -> Result<Loaded, String> {
    let mut open = open_skel!(LookupsSkelBuilder, env);
    // Per-CPU values: keep the map near 2 MiB whatever the number of CPUs.
    let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1).max(1);
    let per_entry = std::mem::size_of::<types::js_lookup_proc>() * cpus;
    let entries = ((2 << 20) / per_entry).clamp(256, 4096) as u32;
    open.maps
        .lookup_procs
        .set_max_entries(entries)
        .map_err(|e| format!("sizing lookup_procs: {e}"))?;
    syscalls.clear();
    for mut prog in open.open_object_mut().progs_mut() {
        let sec = prog.section().to_string_lossy().into_owned();
        if sec == "tp_btf/sys_exit" {
            prog.set_autoload(windowed);
            continue;
        }
        let Some(tp) = sec.strip_prefix("tracepoint/syscalls/") else {
            continue;
        };
        // Which of these syscalls exist depends on the architecture (arm64 has no stat, access
        // or open): load only the pairs whose tracepoints exist.
        let present = !windowed && has_tracepoint(tracefs, "syscalls", tp);
        prog.set_autoload(present);
        if present {
            if let Some(sc) = tp.strip_prefix("sys_enter_") {
                syscalls.push(syscall_name(sc));
            }
        }
    }
    if windowed {
        syscalls.extend(SYSCALLS.iter().map(|&(sc, _)| syscall_name(sc)));
        // Only the enter/exit pairs keep calls in flight.
        open.maps
            .lookup_pending
            .set_max_entries(1)
            .map_err(|e| format!("sizing lookup_pending: {e}"))?;
    } else if syscalls.is_empty() {
        return Err(
            "none of the stat/access/open syscall tracepoints exists on this kernel".into(),
        );
    }
    load_and_attach(
        open,
        |s| create_other(&s.maps.lookup_procs),
        "syscall tracepoints",
        attach_now && !windowed,
    )
}

fn syscall_name(sc: &str) -> &'static str {
    match sc {
        "newstat" => "stat",
        "newlstat" => "lstat",
        "newfstatat" => "newfstatat",
        "statx" => "statx",
        "access" => "access",
        "faccessat" => "faccessat",
        "faccessat2" => "faccessat2",
        "open" => "open",
        "openat" => "openat",
        "openat2" => "openat2",
        _ => "?",
    }
}

pub(crate) fn load(env: &mut Env, tracefs: &Path) -> Result<LookupsTracer, String> {
    let attach_now = !env.defer_on_demand;
    let mut syscalls = Vec::new();
    // The windowed program reads x86-64 registers; elsewhere (or if the kernel refuses it) the
    // syscall tracepoints, attached for as long as the tracer is.
    let windowed = if cfg!(target_arch = "x86_64") {
        open_and_load(env, tracefs, true, attach_now, &mut syscalls)
            .and_then(|s| Ok((Windows::start(&s.0)?, s)))
    } else {
        Err("the windowed program reads x86-64 registers".into())
    };
    let ((skel, links), windows) = match windowed {
        Ok((w, s)) => {
            if attach_now {
                w.arm(true);
            }
            (s, Some(w))
        }
        Err(btf_err) => {
            check(tracefs, &records()).map_err(|e| format!("tp_btf: {btf_err}; {e}"))?;
            let s = open_and_load(env, tracefs, false, attach_now, &mut syscalls)
                .map_err(|e| format!("tp_btf: {btf_err}; {e}"))?;
            (s, None)
        }
    };
    Ok(LookupsTracer {
        windows,
        links,
        skel,
        procs: Deltas::new(LAYOUT),
        procs_batch: Default::default(),
        syscalls,
        dropped: 0,
    })
}

/// A regular window opens once in every `BASE_EVERY`, at a random point of it.
const BASE_EVERY: Duration = Duration::from_secs(1);
/// How long a regular window stays open.
const BASE_WINDOW: Duration = Duration::from_millis(20);
/// How often the windows' thread looks at the negative-dentry count.
const POLL: Duration = Duration::from_millis(10);
/// Negative dentries created per second that open a triggered window: ten times the
/// `negative-dentries` floor. At the floor itself, this busy build host (compilers probing
/// include paths) kept the trigger budget spent, the program attached ~7% of the time, and a
/// storm of failing `stat()` (the costliest case: the slow path and the program on every
/// call) +2.5% slower. A short burst below this rate leaves fewer than 10,000 names; a long
/// one is sampled by the regular windows. NSS's probe creates hundreds of thousands a second.
const TRIGGER_RATE: f64 = 10_000.0;
/// The most of the time triggered windows may take in the long run, and the longest one
/// (its budget's capacity).
const TRIGGER_SHARE: f64 = 0.05;
const TRIGGER_BURST: Duration = Duration::from_millis(300);

/// What the windows' thread and the tracer share.
#[derive(Default)]
struct WindowState {
    /// Attached (by the collector): windows open.
    armed: bool,
    /// Attachments so far. A detach and the next attach can both come before the windows'
    /// thread looks (the census detaches and a symptom attaches again; under load the thread
    /// may not run in between): the count still tells it that the tracer was attached anew.
    arms: u64,
    /// The tracer is gone: close and end.
    stop: bool,
    /// Window time since the last read, ns, by kind (regular, triggered), closed windows.
    done_ns: [u64; 2],
    /// The open window: its kind and since when (its time so far is added at each read).
    open: Option<(usize, Instant)>,
}

impl WindowState {
    fn arm(&mut self, on: bool) {
        self.armed = on;
        if on {
            self.arms += 1;
        }
    }
}

struct Shared {
    state: Mutex<WindowState>,
    wake: Condvar,
}

/// The thread that attaches the program in windows, and its state.
struct Windows {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The program's window kind: its `lookup_window` map, written by the windows' thread before
/// it attaches the program and when a window changes kind.
struct KindCell(OwnedFd);

impl KindCell {
    fn set(&self, kind: usize) {
        let (key, value) = (0u32, kind as u32);
        // SAFETY: a 4-byte key and value of the map's sizes, read by the call only. A failure
        // leaves the previous kind, which only misfiles a window's counts between the kinds.
        unsafe {
            libbpf_rs::libbpf_sys::bpf_map_update_elem(
                self.0.as_raw_fd(),
                (&key as *const u32).cast(),
                (&value as *const u32).cast(),
                0,
            )
        };
    }
}

impl Windows {
    fn start(skel: &LookupsSkel<'static>) -> Result<Windows, String> {
        let prog = skel
            .progs
            .lookups_exit
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| format!("duplicating the program's descriptor: {e}"))?;
        let kind = KindCell(
            skel.maps
                .lookup_window
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| format!("duplicating the window map's descriptor: {e}"))?,
        );
        // A kernel that loads the program but refuses to attach it falls back at load, not
        // silently at each window.
        drop(attach_raw(&prog)?);
        let shared = Arc::new(Shared {
            state: Mutex::new(WindowState::default()),
            wake: Condvar::new(),
        });
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("lookups-windows".into())
            .spawn(move || run_windows(&theirs, &prog, &kind))
            .map_err(|e| format!("starting the windows' thread: {e}"))?;
        Ok(Windows {
            shared,
            thread: Some(thread),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WindowState> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn arm(&self, on: bool) {
        self.lock().arm(on);
        self.shared.wake.notify_all();
    }

    /// Window time since the last call, ns, by kind (an open window's so far included).
    fn take_times(&self) -> [u64; 2] {
        let mut st = self.lock();
        let now = Instant::now();
        if let Some((k, since)) = st.open {
            st.done_ns[k] += now.duration_since(since).as_nanos() as u64;
            st.open = Some((k, now));
        }
        std::mem::take(&mut st.done_ns)
    }
}

impl Drop for Windows {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Attaches a BTF-typed program (`prog`) at its tracepoint; the link is closed with the fd.
fn attach_raw(prog: &OwnedFd) -> Result<OwnedFd, String> {
    // SAFETY: a NULL name makes the kernel take the program's own BTF target; the fd is ours.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_raw_tracepoint_open(std::ptr::null(), prog.as_raw_fd())
    };
    if fd < 0 {
        return Err(format!(
            "attaching tp_btf/sys_exit: {}",
            std::io::Error::from_raw_os_error(-fd)
        ));
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The negative dentries now (None when the kernel does not count them).
struct NegativeDentries(Option<std::fs::File>);

impl NegativeDentries {
    fn open() -> Self {
        NegativeDentries(std::fs::File::open("/proc/sys/fs/dentry-state").ok())
    }

    fn read(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let f = self.0.as_ref()?;
        let mut buf = [0u8; 128];
        let n = f.read_at(&mut buf, 0).ok()?;
        // The count is the fifth field (since 5.0; before, that field is always 0 and nothing
        // triggers).
        let d = jitterscope_sources::system::dentry::parse_dentry_state(&buf[..n], true).ok()?;
        d.nr_negative
    }
}

/// The factor from the regular windows' counts to the interval's: the time outside the
/// triggered windows over the regular windows' time (1 when there was none, e.g. an interval
/// shorter than [`BASE_EVERY`], whose counts are then those seen).
fn regular_scale(span_ns: u64, [regular, triggered]: [u64; 2]) -> f64 {
    if regular == 0 || span_ns == 0 {
        return 1.0;
    }
    (span_ns.saturating_sub(triggered).max(regular)) as f64 / regular as f64
}

/// A small PRNG for the regular windows' placement (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next_below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

/// The windows' loop: while armed, every [`POLL`] it decides whether a window should be open
/// and of which kind, and opens, changes or closes it. Attaching and detaching happen outside
/// the lock, so the sampling thread's read never waits for them.
fn run_windows(shared: &Shared, prog: &OwnedFd, kind: &KindCell) {
    let lock = || {
        shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let per_poll = (TRIGGER_RATE * POLL.as_secs_f64()).max(1.0) as u64;
    let dentries = NegativeDentries::open();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let mut rng = Rng(seed);
    let mut base_offset =
        || Duration::from_nanos(rng.next_below((BASE_EVERY - BASE_WINDOW).as_nanos() as u64));
    let mut link: Option<OwnedFd> = None;
    let mut open: Option<usize> = None;
    let mut last_neg: Option<u64> = None;
    // The regular window of the current period opens at base_at, or at the first look after
    // it when this thread woke late (a loaded host), and stays open until base_until.
    let mut period = Instant::now();
    let mut base_at = period + base_offset();
    let mut base_until: Option<Instant> = None;
    let mut budget = TRIGGER_BURST.as_secs_f64();
    let mut hot_until: Option<Instant> = None;
    let mut last_tick = Instant::now();
    let mut seen_arms = 0u64;
    loop {
        let (armed, stop, arms) = {
            let st = lock();
            (st.armed, st.stop, st.arms)
        };
        if stop || !armed {
            // Close the window (its time counts) and wait to be armed again.
            {
                let mut st = lock();
                if let Some((k, since)) = st.open.take() {
                    st.done_ns[k] += since.elapsed().as_nanos() as u64;
                }
            }
            link = None;
            open = None;
            if stop {
                return;
            }
            drop(
                shared
                    .wake
                    .wait_while(lock(), |s| !s.armed && !s.stop)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            continue;
        }
        if arms != seen_arms {
            // Attached anew (whether or not this thread saw the detach): a regular window
            // within a second from now, and the trigger's rate from fresh looks.
            seen_arms = arms;
            last_neg = None;
            hot_until = None;
            period = Instant::now();
            base_at = period + base_offset();
            base_until = None;
            last_tick = period;
        }
        let now = Instant::now();
        budget = (budget + now.duration_since(last_tick).as_secs_f64() * TRIGGER_SHARE)
            .min(TRIGGER_BURST.as_secs_f64());
        last_tick = now;
        if now >= period + BASE_EVERY {
            period = now;
            base_at = now + base_offset();
        }
        // A base_until before base_at is the previous period's window; skipping this period's
        // because the thread woke after its 20 ms would leave the second unsampled.
        if now >= base_at && base_until.is_none_or(|u| u < base_at) {
            base_until = Some(now + BASE_WINDOW);
        }
        // Negative dentries created since the last look at the trigger's rate or faster keep a
        // triggered window open until three looks after they stop: on a loaded host the
        // producer may not run for a poll or two, and closing then lost a quarter of a
        // 50,000-name burst in the e2e test.
        let neg = dentries.read();
        if let (Some(n), Some(l)) = (neg, last_neg) {
            if n.saturating_sub(l) >= per_poll {
                hot_until = Some(now + 3 * POLL);
            }
        }
        last_neg = neg;
        let triggered = hot_until.is_some_and(|h| now <= h) && budget > 0.0;
        let want = if triggered {
            Some(1)
        } else if base_until.is_some_and(|u| now < u) {
            Some(0)
        } else {
            None
        };
        if want != open {
            if let Some(k) = want {
                // The kind first, so the window's first events carry it.
                kind.set(k);
                // A window that cannot be attached stays closed and its time uncounted, so
                // the estimates hold for the time that was seen (load checked that the
                // program attaches).
                if link.is_none() {
                    link = attach_raw(prog).ok();
                }
            }
            let at = Instant::now();
            let now_open = if link.is_some() { want } else { None };
            {
                let mut st = lock();
                if let Some((k, since)) = st.open.take() {
                    st.done_ns[k] += at.duration_since(since).as_nanos() as u64;
                }
                st.open = now_open.map(|k| (k, at));
            }
            if now_open.is_none() {
                link = None;
            }
            open = now_open;
        }
        if open == Some(1) {
            budget -= POLL.as_secs_f64();
        }
        // Sleep one poll (or less, to open the regular window on time), unless disarmed.
        let mut next = now + POLL;
        if open.is_none() && base_at > now && base_at < next {
            next = base_at;
        }
        drop(
            shared
                .wake
                .wait_timeout_while(
                    lock(),
                    next.saturating_duration_since(Instant::now()),
                    |s| s.armed && !s.stop,
                )
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }
}

fn family(f: u32) -> &'static str {
    match f {
        0 => "stat",
        1 => "access",
        _ => "open",
    }
}

/// Groups sampled names by [`path_pattern`], most frequent first.
pub(crate) fn patterns(names: &[LookupName]) -> Vec<LookupPattern> {
    let mut by: HashMap<String, LookupPattern> = HashMap::new();
    for n in names {
        let p = by
            .entry(path_pattern(&n.path))
            .or_insert_with_key(|k| LookupPattern {
                pattern: k.clone(),
                example: n.path.clone(),
                ..Default::default()
            });
        p.samples += 1;
        if p.comms.len() < 4 && !p.comms.contains(&n.comm) {
            p.comms.push(n.comm.clone());
        }
    }
    let mut v: Vec<_> = by.into_values().collect();
    v.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.pattern.cmp(&b.pattern))
    });
    v.truncate(MAX_PATTERNS);
    v
}

impl Tracer for LookupsTracer {
    fn new_generation(&mut self) {
        crate::next_generation!(self.skel);
        // Names sampled since the last read (while a detach was under way) would otherwise be
        // read with the interval after next, which reuses their half.
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            bss.names_seen = [0; 2];
        }
    }

    fn how(&self) -> String {
        if self.windows.is_some() {
            format!(
                "BTF-typed raw_syscalls:sys_exit ({}) in windows: {} ms at a random point of every {} ms, and while negative dentries are created at >= {}/s (at most {:.0}% of the time)",
                self.syscalls.join(", "),
                BASE_WINDOW.as_millis(),
                BASE_EVERY.as_millis(),
                TRIGGER_RATE,
                TRIGGER_SHARE * 100.0
            )
        } else {
            format!(
                "syscall tracepoints ({}) (fallback: every system call takes the slow path while attached)",
                self.syscalls.join(", ")
            )
        }
    }

    fn attach(&mut self) -> (Vec<libbpf_rs::Link>, Option<String>) {
        match &self.windows {
            Some(w) => {
                w.arm(true);
                (Vec::new(), None)
            }
            None => {
                use libbpf_rs::skel::Skel;
                crate::attach_each(self.skel.object())
            }
        }
    }

    fn detach(&mut self) -> Vec<libbpf_rs::Link> {
        if let Some(w) = &self.windows {
            w.arm(false);
        }
        std::mem::take(&mut self.links)
    }

    fn links(&mut self) -> &mut Vec<libbpf_rs::Link> {
        &mut self.links
    }

    fn object(&self) -> Option<&libbpf_rs::Object> {
        use libbpf_rs::skel::Skel;
        Some(self.skel.object())
    }

    fn read(&mut self, env: &mut Env, out: &mut Tracers) {
        let mut t = Lookups::default();
        // Switch the kernel to the other half of the name sample first, then read this one.
        let (gen, dropped) = begin_read!(self.skel, self.dropped);
        t.dropped = dropped;
        let half = (gen & 1) as usize;
        let seen = self
            .skel
            .maps
            .bss_data
            .as_deref()
            .map_or(0, |bss| bss.names_seen[half]);
        t.failures_sampled_from = seen;
        let mut names = Vec::new();
        let base = half as u32 * NAME_SLOTS;
        for slot in base..base + seen.min(NAME_SLOTS as u64) as u32 {
            let Ok(Some(v)) = self
                .skel
                .maps
                .lookup_names
                .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
            else {
                continue;
            };
            if let Some(n) = parse_name(&v) {
                names.push(n);
            }
        }
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            bss.names_seen[half] = 0;
        }
        t.patterns = patterns(&names);
        names.truncate(MAX_NAMES);
        t.names = names;
        let scale = self
            .windows
            .as_ref()
            .map_or(1.0, |w| regular_scale(out.span_ns, w.take_times()));
        for e in drain_procs(
            &self.skel.maps.lookup_procs,
            &mut self.procs_batch,
            &mut self.procs,
            env.live_pids(),
        ) {
            let d = &e.d;
            // Word `at` (regular windows) scaled, plus word `at + 3` (triggered) as seen.
            let est = |at: usize| (d[at] as f64 * scale + d[at + 3] as f64).round() as u64;
            let (calls, enoent) = (|f: usize| est(4 + f), |f: usize| est(10 + f));
            t.procs.push(LookupProc {
                pid: e.pid,
                comm: e.comm,
                cgroup: env.cpu_cgroups.path(e.cgroup_id),
                stat_calls: calls(0),
                access_calls: calls(1),
                open_calls: calls(2),
                stat_enoent: enoent(0),
                access_enoent: enoent(1),
                open_enoent: enoent(2),
            });
        }
        out.lookups = Some(t);
    }
}

/// One js_lookup_name slot: tgid, family, comm[16], name[256].
pub(crate) fn parse_name(v: &[u8]) -> Option<LookupName> {
    let u32_at = |o: usize| Some(u32::from_ne_bytes(v.get(o..o + 4)?.try_into().ok()?));
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    let pid = u32_at(0)?;
    let fam = u32_at(4)?;
    let comm = text(v.get(8..24)?);
    let path = text(v.get(24..)?);
    if path.is_empty() {
        return None;
    }
    Some(LookupName {
        pid,
        comm,
        family: family(fam).into(),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(pid: u32, fam: u32, comm: &str, path: &str) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&pid.to_ne_bytes());
        v.extend_from_slice(&fam.to_ne_bytes());
        let mut c = [0u8; 16];
        c[..comm.len()].copy_from_slice(comm.as_bytes());
        v.extend_from_slice(&c);
        let mut n = [0u8; 256];
        n[..path.len()].copy_from_slice(path.as_bytes());
        v.extend_from_slice(&n);
        v
    }

    /// A detach and an attach that both come before the windows' thread looks (CI's loaded
    /// host: a_reattached_tracer_names_processes_again saw no event after its reattach) still
    /// open a regular window within a second of the attach, as after a detach it saw.
    #[test]
    fn a_window_opens_within_a_second_of_an_attach_the_thread_did_not_see_coming() {
        let test = "a_window_opens_within_a_second_of_an_attach_the_thread_did_not_see_coming";
        if !jitterscope_testkit::is_root() {
            jitterscope_testkit::skip(test, "needs root to load BPF programs");
            return;
        }
        let mut env = Env::new(&jitterscope_sources::Root::new("/"));
        let tracefs = match env.tracefs.clone() {
            Ok(t) => t,
            Err(e) => return jitterscope_testkit::skip(test, &e),
        };
        let t = match load(&mut env, &tracefs) {
            Ok(t) => t,
            Err(e) => return jitterscope_testkit::skip(test, &format!("lookups: {e}")),
        };
        let Some(w) = &t.windows else {
            return jitterscope_testkit::skip(test, "no windowed program (not x86-64)");
        };
        let window_within = |limit: Duration| {
            let t0 = Instant::now();
            while t0.elapsed() < limit {
                if w.take_times().iter().sum::<u64>() > 0 && w.lock().open.is_none() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            false
        };
        assert!(window_within(3 * BASE_EVERY), "a first window");
        // Three rounds: without the fix, the thread keeps its period and the next window
        // comes 0-1 s after the period's end, past the limit in about half the rounds.
        for round in 0..3 {
            {
                let mut st = w.lock();
                st.arm(false);
                st.arm(true);
            }
            w.shared.wake.notify_all();
            w.take_times();
            assert!(
                window_within(BASE_EVERY + Duration::from_millis(250)),
                "round {round}: no window within a second of the attach"
            );
        }
    }

    #[test]
    fn slot_layout_matches_the_kernel_struct() {
        assert_eq!(
            std::mem::size_of::<types::js_lookup_name>(),
            slot(0, 0, "", "").len()
        );
        let n = parse_name(&slot(
            42,
            1,
            "certutil",
            "/etc/pki/nssdb/.17_dOeSnotExist_.db",
        ))
        .unwrap();
        assert_eq!(
            (n.pid, n.comm.as_str(), n.family.as_str()),
            (42, "certutil", "access")
        );
        assert_eq!(n.path, "/etc/pki/nssdb/.17_dOeSnotExist_.db");
        assert!(
            parse_name(&slot(1, 0, "x", "")).is_none(),
            "an empty slot is skipped"
        );
        assert!(parse_name(&[1, 2, 3]).is_none());
    }

    #[test]
    fn regular_windows_scale_to_the_time_outside_the_triggered_ones() {
        const MS: u64 = 1_000_000;
        // 20 ms of regular window in a 1 s interval: its counts stand for the whole second.
        assert_eq!(regular_scale(1000 * MS, [20 * MS, 0]), 50.0);
        // 200 ms of it was triggered (seen whole): the regular sample stands for the other 800.
        assert_eq!(regular_scale(1000 * MS, [20 * MS, 200 * MS]), 40.0);
        // No regular window (an interval shorter than the period), or no span yet: as seen.
        assert_eq!(regular_scale(100 * MS, [0, 0]), 1.0);
        assert_eq!(regular_scale(0, [20 * MS, 0]), 1.0);
        // Never below 1: the windows cannot have seen more than happened.
        assert_eq!(regular_scale(30 * MS, [20 * MS, 25 * MS]), 1.0);
    }

    #[test]
    fn names_group_into_patterns() {
        let mk = |c: &str, p: &str| LookupName {
            pid: 1,
            comm: c.into(),
            family: "access".into(),
            path: p.into(),
        };
        let names = vec![
            mk("certutil", "/db/.1_dOeSnotExist_.db"),
            mk("certutil", "/db/.22_dOeSnotExist_.db"),
            mk("curl", "/db/.333_dOeSnotExist_.db"),
            mk("python3", "/usr/lib/python3.11/foo.py"),
        ];
        let p = patterns(&names);
        assert_eq!(p[0].pattern, "/db/.*_dOeSnotExist_.db");
        assert_eq!(p[0].samples, 3);
        assert_eq!(p[0].comms, vec!["certutil", "curl"]);
        assert_eq!(p[1].samples, 1);
    }

    proptest::proptest! {
        #[test]
        fn parse_name_never_panics(v in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = parse_name(&v);
        }
    }
}
