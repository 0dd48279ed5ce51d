//! One interval of the system-wide stack sampler: every call stack seen and how often.
//!
//! Not raw perf records: stacks are aggregated per interval and interned. A slice is
//! self-contained (its own string, module and frame tables), so any second of the store can be
//! read on its own; the store's zstd window removes the repetition of those tables between
//! consecutive seconds.
//!
//! Kernel frames are named when recorded (kernel addresses are only meaningful within one boot).
//! User frames are stored as (module, file offset), the module identified by path and build id,
//! and named when read; code without a file (JIT) is named when recorded from the process's
//! perf map, while the process lives.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// What a frame is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    /// Kernel function, named.
    Kernel,
    /// User code in a file: `module` and `offset` (file offset, for symbolization when read).
    User,
    /// User code named when recorded: a JIT's perf map, the vDSO, and code of processes in
    /// another mount namespace (containers), whose file paths mean nothing on the host later.
    Jit,
    /// An address no mapping explained: `offset` holds it.
    #[default]
    Unknown,
}

/// One frame of a stack, interned in [`Profile::frames`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Frame {
    /// What the frame is.
    pub kind: FrameKind,
    /// Index in [`Profile::strings`] of the function name (kernel, JIT); 0 otherwise.
    pub name: u32,
    /// Index in [`Profile::modules`] (user frames).
    pub module: u32,
    /// File offset (user) or address (unknown).
    pub offset: u64,
}

/// An executable file user frames point into.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Module {
    /// Index in [`Profile::strings`] of the path as the process mapped it.
    pub path: u32,
    /// GNU build id, hex (empty when the file has none): a file replaced since recording is
    /// detected instead of being misnamed.
    pub build_id: String,
}

/// One distinct stack of one thread and how many samples hit it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stack {
    /// Process id (0: the idle task / kernel threads without one).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Index in [`Profile::strings`]: process name (its main thread's comm).
    pub comm: u32,
    /// Index in [`Profile::strings`]: thread name.
    pub thread: u32,
    /// Index in [`Profile::strings`]: cgroup path (v1 `cpu` hierarchy, else v2).
    pub cgroup: u32,
    /// Indexes in [`Profile::frames`], leaf first.
    pub frames: Vec<u32>,
    /// Samples.
    pub count: u32,
}

/// The stack samples of one interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Profile {
    /// Sampling frequency per CPU, Hz.
    pub hz: u32,
    /// CLOCK_MONOTONIC start of the samples included, ns.
    pub start_mono_ns: u64,
    /// CLOCK_MONOTONIC end (exclusive), ns.
    pub end_mono_ns: u64,
    /// Samples in this slice (sum of the stacks' counts).
    pub samples: u64,
    /// Samples the kernel could not write because a ring buffer was full (PERF_RECORD_LOST).
    pub lost: u64,
    /// Samples not kept: unparsable records or stacks over the per-interval bound.
    pub dropped: u64,
    /// Interned strings; index 0 is always "".
    pub strings: Vec<String>,
    /// Interned modules.
    pub modules: Vec<Module>,
    /// Interned frames.
    pub frames: Vec<Frame>,
    /// Distinct stacks.
    pub stacks: Vec<Stack>,
}

impl Profile {
    /// The string at `i` ("" when out of range: a damaged slice never panics a reader).
    pub fn str(&self, i: u32) -> &str {
        self.strings
            .get(i as usize)
            .map(|s| s.as_str())
            .unwrap_or("")
    }

    /// The frame at `i`, if any.
    pub fn frame(&self, i: u32) -> Option<&Frame> {
        self.frames.get(i as usize)
    }

    /// The module at `i`, if any.
    pub fn module(&self, i: u32) -> Option<&Module> {
        self.modules.get(i as usize)
    }

    /// Adds `other` (a later slice) into this one: same stacks add up, the time range grows.
    /// Used when a slice arrives late and joins the next one.
    pub fn merge(&mut self, other: &Profile) {
        let mut b = Builder::from_profile(std::mem::take(self));
        b.add_profile(other);
        *self = b.finish();
    }
}

/// Builds a [`Profile`] while interning strings, modules, frames and stacks.
#[derive(Debug, Default)]
pub struct Builder {
    p: Profile,
    strings: HashMap<String, u32>,
    modules: HashMap<Module, u32>,
    frames: HashMap<Frame, u32>,
    stacks: HashMap<StackKey, u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct StackKey {
    pid: u32,
    tid: u32,
    comm: u32,
    thread: u32,
    cgroup: u32,
    frames: Vec<u32>,
}

impl Builder {
    /// An empty profile of `hz` covering `[start, end)` (CLOCK_MONOTONIC ns).
    pub fn new(hz: u32, start_mono_ns: u64, end_mono_ns: u64) -> Self {
        let mut b = Builder::default();
        b.p.hz = hz;
        b.p.start_mono_ns = start_mono_ns;
        b.p.end_mono_ns = end_mono_ns;
        b.string("");
        b
    }

    fn from_profile(p: Profile) -> Self {
        let mut b = Builder::new(p.hz, p.start_mono_ns, p.end_mono_ns);
        b.add_profile(&p);
        b
    }

    /// Counts lost and dropped samples.
    pub fn add_lost(&mut self, lost: u64, dropped: u64) {
        self.p.lost += lost;
        self.p.dropped += dropped;
    }

    /// The index of `s`.
    pub fn string(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.p.strings.len() as u32;
        self.p.strings.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    /// The index of the module at `path` with `build_id`.
    pub fn module(&mut self, path: &str, build_id: &str) -> u32 {
        let m = Module {
            path: self.string(path),
            build_id: build_id.to_string(),
        };
        if let Some(&i) = self.modules.get(&m) {
            return i;
        }
        let i = self.p.modules.len() as u32;
        self.p.modules.push(m.clone());
        self.modules.insert(m, i);
        i
    }

    /// The index of `f`.
    pub fn frame(&mut self, f: Frame) -> u32 {
        if let Some(&i) = self.frames.get(&f) {
            return i;
        }
        let i = self.p.frames.len() as u32;
        self.p.frames.push(f.clone());
        self.frames.insert(f, i);
        i
    }

    /// Number of distinct stacks so far.
    pub fn stacks(&self) -> usize {
        self.p.stacks.len()
    }

    /// Adds `count` samples of a stack (`frames` leaf first, already interned).
    #[allow(clippy::too_many_arguments)]
    pub fn add_stack(
        &mut self,
        pid: u32,
        tid: u32,
        comm: &str,
        thread: &str,
        cgroup: &str,
        frames: Vec<u32>,
        count: u32,
    ) {
        let key = StackKey {
            pid,
            tid,
            comm: self.string(comm),
            thread: self.string(thread),
            cgroup: self.string(cgroup),
            frames,
        };
        self.p.samples += count as u64;
        if let Some(&i) = self.stacks.get(&key) {
            let s = &mut self.p.stacks[i as usize];
            s.count = s.count.saturating_add(count);
            return;
        }
        let i = self.p.stacks.len() as u32;
        self.p.stacks.push(Stack {
            pid: key.pid,
            tid: key.tid,
            comm: key.comm,
            thread: key.thread,
            cgroup: key.cgroup,
            frames: key.frames.clone(),
            count,
        });
        self.stacks.insert(key, i);
    }

    /// Adds every stack of `o`, re-interned; widens the range to cover it.
    pub fn add_profile(&mut self, o: &Profile) {
        if self.p.hz == 0 {
            self.p.hz = o.hz;
        }
        self.p.start_mono_ns = self.p.start_mono_ns.min(o.start_mono_ns);
        self.p.end_mono_ns = self.p.end_mono_ns.max(o.end_mono_ns);
        self.add_lost(o.lost, o.dropped);
        let frames: Vec<u32> = o
            .frames
            .iter()
            .map(|f| {
                let mut f = f.clone();
                match f.kind {
                    FrameKind::Kernel | FrameKind::Jit => f.name = self.string(o.str(f.name)),
                    FrameKind::User => {
                        f.module = match o.module(f.module) {
                            Some(m) => {
                                let path = o.str(m.path).to_string();
                                self.module(&path, &m.build_id.clone())
                            }
                            None => 0,
                        }
                    }
                    FrameKind::Unknown => {}
                }
                self.frame(f)
            })
            .collect();
        for s in &o.stacks {
            let fr: Vec<u32> = s
                .frames
                .iter()
                .filter_map(|&i| frames.get(i as usize).copied())
                .collect();
            let (comm, thread, cgroup) = (o.str(s.comm), o.str(s.thread), o.str(s.cgroup));
            self.add_stack(s.pid, s.tid, comm, thread, cgroup, fr, s.count);
        }
    }

    /// The profile.
    pub fn finish(self) -> Profile {
        self.p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(b: &mut Builder, name: &str) -> u32 {
        let name = b.string(name);
        b.frame(Frame {
            kind: FrameKind::Kernel,
            name,
            ..Default::default()
        })
    }

    #[test]
    fn interning_and_merge() {
        let mut a = Builder::new(99, 10, 20);
        let f1 = kernel(&mut a, "do_idle");
        let f2 = kernel(&mut a, "cpu_startup_entry");
        a.add_stack(0, 0, "swapper/0", "swapper/0", "", vec![f1, f2], 3);
        a.add_stack(0, 0, "swapper/0", "swapper/0", "", vec![f1, f2], 2);
        let a = a.finish();
        assert_eq!(a.stacks.len(), 1);
        assert_eq!(a.samples, 5);
        assert_eq!(a.str(0), "");

        let mut b = Builder::new(99, 20, 30);
        let m = b.module("/usr/bin/x", "ab");
        let u = b.frame(Frame {
            kind: FrameKind::User,
            module: m,
            offset: 0x1234,
            ..Default::default()
        });
        let k = kernel(&mut b, "do_idle");
        b.add_stack(7, 8, "x", "x", "/a", vec![u], 1);
        let c = kernel(&mut b, "cpu_startup_entry");
        b.add_stack(0, 0, "swapper/0", "swapper/0", "", vec![k, c], 4);
        let b = b.finish();

        let mut m = a.clone();
        m.merge(&b);
        assert_eq!((m.start_mono_ns, m.end_mono_ns), (10, 30));
        assert_eq!(m.samples, 10);
        assert_eq!(m.stacks.len(), 2);
        let idle = m.stacks.iter().find(|s| s.pid == 0).unwrap();
        assert_eq!(idle.count, 9);
        let x = m.stacks.iter().find(|s| s.pid == 7).unwrap();
        let f = m.frame(x.frames[0]).unwrap();
        assert_eq!(m.str(m.module(f.module).unwrap().path), "/usr/bin/x");
        assert_eq!(f.offset, 0x1234);
    }

    #[test]
    fn damaged_indexes_do_not_panic() {
        let p = Profile {
            strings: vec![],
            stacks: vec![Stack {
                frames: vec![99],
                comm: 5,
                count: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(p.str(5), "");
        assert!(p.frame(99).is_none());
        let mut q = Profile::default();
        q.merge(&p);
        assert_eq!(q.stacks[0].frames, Vec::<u32>::new());
    }
}
