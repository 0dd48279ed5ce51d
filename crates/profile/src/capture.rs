//! From perf sample records to per-interval [`Profile`] slices.
//!
//! Samples are buffered with their time for at most about one interval; everything needed to
//! name their frames later is captured as each sample is added, while the process lives and
//! with the mappings it ran with: kernel names (kernel addresses mean nothing after a reboot), user addresses
//! normalized to (file, build id, file offset), JIT code named from the process's perf map,
//! and the thread's names and cgroup. A cut at time `t` turns the buffered samples before `t`
//! into one interned slice.

// FxHash: these maps are keyed by addresses and pids the kernel gives us, hashed for every
// frame of every sample; SipHash's flood resistance buys nothing here and costs measurably.
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use jitterscope_model::profile::{Builder, Frame, FrameKind, Profile};

pub use crate::maps::Mapping;
pub use crate::unwind::UserStack;

/// Callchain entries at or above this are context markers, not addresses.
pub const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;
/// Marker: the following entries are kernel addresses.
pub const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;
/// Marker: the following entries are user addresses.
pub const PERF_CONTEXT_USER: u64 = (-512i64) as u64;

pub use crate::MAX_DEPTH;

/// Distinct stacks kept per slice; samples of further stacks are counted as dropped.
pub const MAX_STACKS: usize = 20_000;

/// One sample's stack, split by context, leaf first. Every address after the first of each
/// part is a return address and is stored minus one, so it falls inside the call instruction
/// (a call that does not return can be the last instruction of its function).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawStack {
    /// Process id.
    pub pid: u32,
    /// The process's generation (exec count) when sampled; set by [`Aggregator::add`].
    pub gen: u32,
    /// Thread id.
    pub tid: u32,
    /// Kernel addresses, leaf first.
    pub kernel: Vec<u64>,
    /// User addresses, leaf first.
    pub user: Vec<u64>,
    /// Interpreter frames named at capture, each to go just before user frame `.0` (see
    /// [`crate::python::splice`]).
    pub python: Vec<(u32, Arc<str>)>,
}

impl RawStack {
    /// Splits a PERF_SAMPLE_CALLCHAIN array. Entries before any context marker, and those of
    /// guest or hypervisor contexts, are ignored.
    pub fn from_callchain(pid: u32, tid: u32, chain: &[u64]) -> Self {
        let mut s = RawStack {
            pid,
            gen: 0,
            tid,
            kernel: Vec::new(),
            user: Vec::new(),
            python: Vec::new(),
        };
        let mut ctx = 0u64;
        for &a in chain {
            if a >= PERF_CONTEXT_MAX {
                ctx = a;
                continue;
            }
            let part = match ctx {
                PERF_CONTEXT_KERNEL => &mut s.kernel,
                PERF_CONTEXT_USER => &mut s.user,
                _ => continue,
            };
            if part.len() >= MAX_DEPTH || a == 0 {
                continue;
            }
            part.push(if part.is_empty() { a } else { a - 1 });
        }
        s
    }
}

/// Where a user address points, captured while its process lived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserFrame {
    /// In a mapped file.
    Elf {
        /// Path as mapped.
        path: Arc<str>,
        /// GNU build id, hex; empty when none.
        build_id: Arc<str>,
        /// File offset.
        offset: u64,
    },
    /// Named now (JIT perf map, vDSO).
    Named(Arc<str>),
    /// Nothing explained it (the process was gone, or anonymous code without a perf map).
    Unknown(u64),
}

/// A thread's identity at first sight.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Task {
    /// Process name.
    pub comm: Arc<str>,
    /// Thread name.
    pub thread: Arc<str>,
    /// Cgroup path.
    pub cgroup: Arc<str>,
}

/// What the aggregator needs from the running system; [`crate::system::SystemResolver`] is the
/// real one, tests use recorded or synthetic ones. The event methods keep a resolver's view of
/// each process's mappings current; they are called in record order, so a sample is always
/// named against the mappings it ran with.
pub trait Resolver {
    /// Names of kernel addresses ("0x…" for unknown ones), in order.
    fn kernel(&mut self, addrs: &[u64]) -> Vec<Arc<str>>;
    /// Where each of `addrs` in process `pid` points, in order.
    fn user(&mut self, pid: u32, addrs: &[u64]) -> Vec<UserFrame>;
    /// The names and cgroup of a thread.
    fn task(&mut self, pid: u32, tid: u32) -> Task;
    /// The cgroup of a thread whose names perf's records already gave (its process's and its
    /// own): only what the records do not say is read.
    fn task_named(&mut self, pid: u32, tid: u32, comm: Arc<str>, thread: Arc<str>) -> Task {
        Task {
            comm,
            thread,
            ..self.task(pid, tid)
        }
    }
    /// The user stack of a sample of `pid` unwound from its copied stack (leaf first, return
    /// addresses minus one), or `None` when this resolver cannot unwind.
    fn unwind(&mut self, _pid: u32, _stack: &UserStack) -> Option<Vec<u64>> {
        None
    }
    /// The interpreter frames (Python) of the sample of thread `tid` taken at `time_ns`,
    /// placed among its native user frames `user`; empty when there are none.
    fn interpreted(
        &mut self,
        _pid: u32,
        _tid: u32,
        _time_ns: u64,
        _user: &[u64],
    ) -> Vec<(u32, Arc<str>)> {
        Vec::new()
    }
    /// A new executable mapping (MMAP2 record).
    fn mmap(&mut self, _pid: u32, _m: Mapping) {}
    /// A new process (not a thread): it starts with its parent's mappings.
    fn fork(&mut self, _parent: u32, _child: u32) {}
    /// The process exec'd (`exec`: its mappings are replaced by the ones that follow) or exited.
    fn gone(&mut self, _pid: u32, _exec: bool) {}
}

#[derive(Debug, Default)]
struct PidCache {
    frames: HashMap<u64, UserFrame>,
    tasks: HashMap<u32, Task>,
}

/// Buffers samples and cuts them into slices; see the module documentation.
pub struct Aggregator<R> {
    hz: u32,
    resolver: R,
    buf: Vec<(u64, RawStack)>,
    start_ns: u64,
    lost: u64,
    dropped: u64,
    kernel: HashMap<u64, Arc<str>>,
    /// Named frames and tasks per (pid, generation); a generation ends at exec or exit, so a
    /// sample taken before it keeps its names while later ones get new ones.
    pids: HashMap<(u32, u32), PidCache>,
    gens: HashMap<u32, u32>,
    /// Thread names from COMM and FORK records, for threads gone before /proc could be read.
    names: HashMap<u32, Arc<str>>,
    /// Ended generations (pid, generation, exited): dropped once no buffered sample needs them.
    stale: Vec<(u32, u32, bool)>,
    unwound: u64,
}

impl<R: Resolver> Aggregator<R> {
    /// An aggregator for a sampler at `hz`, starting at `start_ns` (CLOCK_MONOTONIC).
    pub fn new(hz: u32, start_ns: u64, resolver: R) -> Self {
        Aggregator {
            hz,
            resolver,
            buf: Vec::new(),
            start_ns,
            lost: 0,
            dropped: 0,
            kernel: HashMap::default(),
            pids: HashMap::default(),
            gens: HashMap::default(),
            names: HashMap::default(),
            stale: Vec::new(),
            unwound: 0,
        }
    }

    /// The resolver.
    pub fn resolver(&mut self) -> &mut R {
        &mut self.resolver
    }

    /// Adds one sample taken at `time_ns` with the copy of its user stack, if it has one: the
    /// user part becomes the unwound stack, completed by the frame-pointer chain (see
    /// [`crate::unwind::merge`]).
    pub fn add_with_stack(&mut self, time_ns: u64, mut s: RawStack, stack: Option<&UserStack>) {
        if let Some(st) = stack.filter(|_| s.pid != 0) {
            if let Some(dwarf) = self.resolver.unwind(s.pid, st) {
                self.unwound += 1;
                s.user = crate::unwind::merge(dwarf, std::mem::take(&mut s.user));
            }
        }
        if s.pid != 0 {
            s.python = self.resolver.interpreted(s.pid, s.tid, time_ns, &s.user);
        }
        self.add(time_ns, s)
    }

    /// Samples whose user stacks were unwound from a copy so far.
    pub fn unwound(&self) -> u64 {
        self.unwound
    }

    /// Adds one sample taken at `time_ns`, naming what it needs now (see [`Resolver`]).
    pub fn add(&mut self, time_ns: u64, mut s: RawStack) {
        s.gen = self.gens.get(&s.pid).copied().unwrap_or(0);
        self.capture(&s);
        self.buf.push((time_ns, s));
    }

    fn capture(&mut self, s: &RawStack) {
        let missing: Vec<u64> = s
            .kernel
            .iter()
            .copied()
            .filter(|a| !self.kernel.contains_key(a))
            .collect();
        if !missing.is_empty() {
            let names = self.resolver.kernel(&missing);
            self.kernel.extend(missing.into_iter().zip(names));
        }
        let c = self.pids.entry((s.pid, s.gen)).or_default();
        if s.pid != 0 {
            let mut missing: Vec<u64> = s
                .user
                .iter()
                .copied()
                .filter(|a| !c.frames.contains_key(a))
                .collect();
            if !missing.is_empty() {
                missing.sort_unstable();
                missing.dedup();
                let frames = self.resolver.user(s.pid, &missing);
                c.frames.extend(missing.into_iter().zip(frames));
            }
        }
        if let std::collections::hash_map::Entry::Vacant(e) = c.tasks.entry(s.tid) {
            // A thread started or renamed since the recorder started has its names in the
            // COMM and FORK records; reading /proc/<pid>/comm for them was a sixth of the
            // profiler's time on a host that forks 50 processes a second.
            let known = self
                .names
                .get(&s.pid)
                .zip(self.names.get(&s.tid))
                .map(|(c, t)| (c.clone(), t.clone()));
            let mut t = match known {
                Some((comm, thread)) => self.resolver.task_named(s.pid, s.tid, comm, thread),
                None => self.resolver.task(s.pid, s.tid),
            };
            // Gone before it could be read (a short-lived process): the names its fork and exec
            // records gave.
            if t.thread.is_empty() {
                if let Some(n) = self.names.get(&s.tid) {
                    t.thread = n.clone();
                }
            }
            if t.comm.is_empty() {
                if let Some(n) = self.names.get(&s.pid) {
                    t.comm = n.clone();
                }
            }
            e.insert(t);
        }
    }

    /// Counts samples the kernel lost and records that could not be used.
    pub fn add_lost(&mut self, lost: u64, dropped: u64) {
        self.lost += lost;
        self.dropped += dropped;
    }

    /// A new executable mapping of `pid`.
    pub fn mmap(&mut self, pid: u32, m: Mapping) {
        self.resolver.mmap(pid, m);
    }

    /// A new thread `tid` of process `pid`, forked by thread `ptid` of `ppid` (a new process
    /// when `pid != ppid`): it starts with its parent's name and mappings.
    pub fn fork(&mut self, ppid: u32, ptid: u32, pid: u32, tid: u32) {
        let g = self.gens.get(&ppid).copied().unwrap_or(0);
        let name = self.names.get(&ptid).cloned().or_else(|| {
            let c = self.pids.get(&(ppid, g))?;
            Some(c.tasks.get(&ptid)?.thread.clone())
        });
        if let Some(n) = name {
            self.names.insert(tid, n);
        }
        if pid != ppid {
            self.resolver.fork(ppid, pid);
        }
    }

    /// A thread exited; the process too when `pid == tid`.
    pub fn exited(&mut self, pid: u32, tid: u32) {
        self.names.remove(&tid);
        if pid == tid {
            self.gone(pid, false);
        }
    }

    /// A process exec'd or exited: what was named for it so far stays with the samples taken
    /// before; later samples are named afresh.
    pub fn gone(&mut self, pid: u32, exec: bool) {
        let g = self.gens.entry(pid).or_insert(0);
        let old = *g;
        *g = g.wrapping_add(1);
        self.stale.push((pid, old, !exec));
        self.resolver.gone(pid, exec);
    }

    /// A thread was named (exec, prctl): its names are read again at its next sample, and
    /// `comm` stands in if it is gone by then.
    pub fn renamed(&mut self, pid: u32, tid: u32, comm: Arc<str>) {
        self.names.insert(tid, comm);
        let g = self.gens.get(&pid).copied().unwrap_or(0);
        if let Some(c) = self.pids.get_mut(&(pid, g)) {
            c.tasks.remove(&tid);
        }
    }

    /// Drops what ended generations named, once no buffered sample needs it.
    pub fn sweep(&mut self) {
        let stale = std::mem::take(&mut self.stale);
        for (pid, g, exited) in stale {
            if self.buf.iter().any(|(_, s)| s.pid == pid && s.gen == g) {
                self.stale.push((pid, g, exited));
                continue;
            }
            self.pids.remove(&(pid, g));
            let next = g.wrapping_add(1);
            if exited && self.gens.get(&pid) == Some(&next) && !self.pids.contains_key(&(pid, next))
            {
                self.gens.remove(&pid);
            }
        }
    }

    /// The slice of every buffered sample taken before `end_ns`; later ones stay for the next.
    pub fn cut(&mut self, end_ns: u64) -> Profile {
        let mut b = Builder::new(self.hz, self.start_ns, end_ns.max(self.start_ns));
        b.add_lost(
            std::mem::take(&mut self.lost),
            std::mem::take(&mut self.dropped),
        );
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.buf)
            .into_iter()
            .partition(|(t, _)| *t < end_ns);
        self.buf = later;
        // Identical samples first add up, so each distinct stack is interned once.
        let mut counts: HashMap<RawStack, u32> = HashMap::default();
        for (_, s) in now {
            *counts.entry(s).or_default() += 1;
        }
        let mut counts: Vec<(RawStack, u32)> = counts.into_iter().collect();
        counts.sort_unstable();
        let mut dropped = 0u64;
        let empty = Task::default();
        for (s, n) in counts {
            if b.stacks() >= MAX_STACKS {
                dropped += n as u64;
                continue;
            }
            let mut frames = Vec::with_capacity(s.kernel.len() + s.user.len());
            for a in &s.kernel {
                let name = match self.kernel.get(a) {
                    Some(n) => b.string(n),
                    None => b.string(&format!("0x{a:x}")),
                };
                frames.push(b.frame(Frame {
                    kind: FrameKind::Kernel,
                    name,
                    ..Default::default()
                }));
            }
            let c = self.pids.get(&(s.pid, s.gen));
            let mut py = s.python.iter().peekable();
            for (i, a) in s.user.iter().enumerate() {
                while let Some((_, n)) = py.next_if(|(at, _)| *at as usize <= i) {
                    frames.push(interpreted(&mut b, n));
                }
                let f = match c.and_then(|c| c.frames.get(a)) {
                    Some(UserFrame::Elf {
                        path,
                        build_id,
                        offset,
                    }) => Frame {
                        kind: FrameKind::User,
                        module: b.module(path, build_id),
                        offset: *offset,
                        ..Default::default()
                    },
                    Some(UserFrame::Named(n)) => Frame {
                        kind: FrameKind::Jit,
                        name: b.string(n),
                        ..Default::default()
                    },
                    Some(UserFrame::Unknown(_)) | None => Frame {
                        kind: FrameKind::Unknown,
                        offset: *a,
                        ..Default::default()
                    },
                };
                frames.push(b.frame(f));
            }
            for (_, n) in py {
                frames.push(interpreted(&mut b, n));
            }
            let t = c.and_then(|c| c.tasks.get(&s.tid)).unwrap_or(&empty);
            b.add_stack(s.pid, s.tid, &t.comm, &t.thread, &t.cgroup, frames, n);
        }
        b.add_lost(0, dropped);
        self.start_ns = end_ns.max(self.start_ns);
        self.sweep();
        b.finish()
    }
}

/// An interpreter frame: named when captured, like JIT code.
fn interpreted(b: &mut Builder, name: &str) -> u32 {
    let name = b.string(name);
    b.frame(Frame {
        kind: FrameKind::Jit,
        name,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names kernel addresses `k<hex>`, user ones as offsets in `/bin/p<pid>`, tasks `t<tid>`.
    #[derive(Default)]
    struct Fake {
        user_calls: usize,
    }

    impl Resolver for Fake {
        fn kernel(&mut self, addrs: &[u64]) -> Vec<Arc<str>> {
            addrs.iter().map(|a| format!("k{a:x}").into()).collect()
        }
        fn user(&mut self, pid: u32, addrs: &[u64]) -> Vec<UserFrame> {
            self.user_calls += 1;
            addrs
                .iter()
                .map(|&a| UserFrame::Elf {
                    path: format!("/bin/p{pid}").into(),
                    build_id: "".into(),
                    offset: a - 0x1000,
                })
                .collect()
        }
        fn task(&mut self, pid: u32, tid: u32) -> Task {
            if pid >= 90 {
                return Task::default(); // gone before it could be read
            }
            Task {
                comm: format!("p{pid}").into(),
                thread: format!("t{tid}").into(),
                cgroup: "/g".into(),
            }
        }
    }

    const K: u64 = PERF_CONTEXT_KERNEL;
    const U: u64 = PERF_CONTEXT_USER;

    #[test]
    fn callchain_split() {
        let s = RawStack::from_callchain(5, 6, &[K, 0xa0, 0xb0, 0xc0, U, 0x10, 0x20]);
        assert_eq!(s.kernel, vec![0xa0, 0xaf, 0xbf]);
        assert_eq!(s.user, vec![0x10, 0x1f]);
        // A marker of another context (guest) hides what follows it; zero entries vanish.
        let g = RawStack::from_callchain(1, 1, &[(-2048i64) as u64, 0x1, U, 0, 0x30]);
        assert!(g.kernel.is_empty());
        assert_eq!(g.user, vec![0x30]);
        let deep: Vec<u64> = std::iter::once(K).chain(1..=200).collect();
        assert_eq!(
            RawStack::from_callchain(1, 1, &deep).kernel.len(),
            MAX_DEPTH
        );
    }

    #[test]
    fn cut_splits_by_time_and_interns() {
        let mut a = Aggregator::new(99, 0, Fake::default());
        for t in [10, 20, 30] {
            a.add(
                t,
                RawStack::from_callchain(7, 8, &[K, 0xa0, 0xb0, U, 0x1100]),
            );
        }
        a.add(40, RawStack::from_callchain(7, 9, &[U, 0x1200]));
        a.add(150, RawStack::from_callchain(0, 0, &[K, 0xc0]));
        a.add_lost(2, 0);
        let p = a.cut(100);
        assert_eq!((p.start_mono_ns, p.end_mono_ns, p.hz), (0, 100, 99));
        assert_eq!((p.samples, p.lost), (4, 2));
        assert_eq!(p.stacks.len(), 2);
        let s = p.stacks.iter().find(|s| s.tid == 8).unwrap();
        assert_eq!(s.count, 3);
        assert_eq!(
            (p.str(s.comm), p.str(s.thread), p.str(s.cgroup)),
            ("p7", "t8", "/g")
        );
        let names: Vec<String> = s
            .frames
            .iter()
            .map(|&i| {
                let f = p.frame(i).unwrap();
                match f.kind {
                    FrameKind::Kernel => p.str(f.name).to_string(),
                    FrameKind::User => {
                        let m = p.module(f.module).unwrap();
                        format!("{}+{:x}", p.str(m.path), f.offset)
                    }
                    k => format!("{k:?}"),
                }
            })
            .collect();
        assert_eq!(names, ["ka0", "kaf", "/bin/p7+100"]);

        let q = a.cut(200);
        assert_eq!(
            (q.start_mono_ns, q.end_mono_ns, q.samples, q.lost),
            (100, 200, 1, 0)
        );
        assert_eq!(q.stacks[0].pid, 0);
        assert!(a.cut(300).stacks.is_empty());
    }

    #[test]
    fn names_are_captured_once_per_generation() {
        let mut a = Aggregator::new(99, 0, Fake::default());
        a.add(1, RawStack::from_callchain(7, 7, &[U, 0x1100]));
        a.add(2, RawStack::from_callchain(7, 7, &[U, 0x1100]));
        assert_eq!(a.resolver().user_calls, 1, "cached address named again");
        // exec: samples before keep their names, samples after are named afresh.
        a.gone(7, true);
        a.add(3, RawStack::from_callchain(7, 7, &[U, 0x1100]));
        assert_eq!(a.resolver().user_calls, 2);
        a.sweep();
        assert!(
            a.pids.contains_key(&(7, 0)),
            "dropped while samples still need it"
        );
        let p = a.cut(10);
        assert_eq!(
            p.stacks.len(),
            1,
            "same stack and names in both generations"
        );
        assert_eq!(p.stacks[0].count, 3);
        assert!(!a.pids.contains_key(&(7, 0)));
        // exit: everything about the pid goes once its samples are cut.
        a.exited(7, 7);
        a.cut(20);
        assert!(
            a.pids.is_empty() && a.gens.is_empty(),
            "{:?} {:?}",
            a.pids.keys(),
            a.gens
        );
    }

    #[test]
    fn short_lived_processes_keep_the_names_their_records_gave() {
        let mut a = Aggregator::new(99, 0, Fake::default());
        // Process 90 execs as "short"; its thread 91 is forked from it; 92 is forked from 7,
        // whose name only /proc gave.
        a.renamed(90, 90, "short".into());
        a.fork(90, 90, 90, 91);
        a.add(1, RawStack::from_callchain(7, 7, &[U, 0x1100]));
        a.fork(7, 7, 92, 92);
        a.add(2, RawStack::from_callchain(90, 91, &[U, 0x1100]));
        a.add(3, RawStack::from_callchain(92, 92, &[U, 0x1100]));
        a.exited(90, 91);
        a.exited(90, 90);
        let p = a.cut(10);
        let names = |pid: u32| {
            let s = p.stacks.iter().find(|s| s.pid == pid).unwrap();
            (p.str(s.comm).to_string(), p.str(s.thread).to_string())
        };
        assert_eq!(names(90), ("short".into(), "short".into()));
        assert_eq!(
            names(92),
            ("t7".into(), "t7".into()),
            "name inherited at fork"
        );
        assert!(!a.names.contains_key(&90) && !a.names.contains_key(&91));
    }

    #[test]
    fn names_from_records_are_not_read_again() {
        // Process 8, forked by 7 and renamed: perf's records say both of its names, so only
        // its cgroup comes from the resolver (the fake would call it p8/t8).
        let mut a = Aggregator::new(99, 0, Fake::default());
        a.fork(7, 7, 8, 8);
        a.renamed(8, 8, "worker".into());
        a.add(1, RawStack::from_callchain(8, 8, &[U, 0x1100]));
        // A thread started before the recorder: read as before.
        a.add(2, RawStack::from_callchain(5, 6, &[U, 0x1100]));
        let p = a.cut(10);
        let names = |pid: u32| {
            let s = p.stacks.iter().find(|s| s.pid == pid).unwrap();
            (
                p.str(s.comm).to_string(),
                p.str(s.thread).to_string(),
                p.str(s.cgroup).to_string(),
            )
        };
        assert_eq!(names(8), ("worker".into(), "worker".into(), "/g".into()));
        assert_eq!(names(5), ("p5".into(), "t6".into(), "/g".into()));
    }

    #[test]
    fn stack_bound_counts_dropped() {
        let mut a = Aggregator::new(99, 0, Fake::default());
        for i in 0..(MAX_STACKS as u64 + 5) {
            a.add(1, RawStack::from_callchain(1, 1, &[K, 0x1000 + i]));
        }
        let p = a.cut(2);
        assert_eq!(p.stacks.len(), MAX_STACKS);
        assert_eq!(p.dropped, 5);
    }
}
