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

/// First byte of a stored slice in the columnar layout ([`Profile::to_columns`]). A slice
/// stored as a MessagePack map (before this layout) starts with a map marker (0x80–0x8f,
/// 0xde, 0xdf), never with 1.
pub const COLUMNAR: u8 = 1;

/// A slice as stored: one column per field rather than a map of field names per frame and per
/// stack, and each distinct call path (a stack's frame list) once. On a busy host nearly every
/// sample is its own stack (250 shells, each its own pid, running the same code), so a slice
/// was 180 stacks with the same few paths, each stack and frame spelling its field names:
/// 31.8 KB per second raw, 4.3 KB after the store's zstd; this layout is 10.9 KB raw, 3.1 KB
/// compressed (measured on a busy-host recording with bench/busy.sh's load). The columns are
/// still named, once per slice, so fields can be added as the sample's can.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Columns {
    hz: u32,
    start_mono_ns: u64,
    end_mono_ns: u64,
    samples: u64,
    lost: u64,
    dropped: u64,
    strings: Vec<String>,
    module_path: Vec<u32>,
    module_build_id: Vec<String>,
    /// [`FrameKind`] as 0 kernel, 1 user, 2 JIT, 3 unknown.
    frame_kind: Vec<u8>,
    frame_name: Vec<u32>,
    frame_module: Vec<u32>,
    frame_offset: Vec<u64>,
    /// Frames of each distinct call path, and the paths' frame indexes one after the other.
    path_len: Vec<u32>,
    path_frames: Vec<u32>,
    stack_pid: Vec<u32>,
    stack_tid: Vec<u32>,
    stack_comm: Vec<u32>,
    stack_thread: Vec<u32>,
    stack_cgroup: Vec<u32>,
    /// Index of the stack's call path.
    stack_path: Vec<u32>,
    stack_count: Vec<u32>,
}

impl FrameKind {
    fn code(self) -> u8 {
        match self {
            FrameKind::Kernel => 0,
            FrameKind::User => 1,
            FrameKind::Jit => 2,
            FrameKind::Unknown => 3,
        }
    }

    fn from_code(c: u8) -> FrameKind {
        match c {
            0 => FrameKind::Kernel,
            1 => FrameKind::User,
            2 => FrameKind::Jit,
            _ => FrameKind::Unknown,
        }
    }
}

/// Errors reading a stored slice.
#[derive(Debug, thiserror::Error)]
pub enum ColumnsError {
    /// The MessagePack did not decode.
    #[error("undecodable stack slice: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    /// Columns of one table disagree in length.
    #[error("stack slice columns of unequal length ({0})")]
    Ragged(&'static str),
}

impl Profile {
    /// The slice in the stored layout: [`COLUMNAR`], then the columns as MessagePack.
    pub fn to_columns(&self, out: &mut Vec<u8>) -> Result<(), rmp_serde::encode::Error> {
        let mut c = Columns {
            hz: self.hz,
            start_mono_ns: self.start_mono_ns,
            end_mono_ns: self.end_mono_ns,
            samples: self.samples,
            lost: self.lost,
            dropped: self.dropped,
            strings: self.strings.clone(),
            module_path: self.modules.iter().map(|m| m.path).collect(),
            module_build_id: self.modules.iter().map(|m| m.build_id.clone()).collect(),
            frame_kind: self.frames.iter().map(|f| f.kind.code()).collect(),
            frame_name: self.frames.iter().map(|f| f.name).collect(),
            frame_module: self.frames.iter().map(|f| f.module).collect(),
            frame_offset: self.frames.iter().map(|f| f.offset).collect(),
            ..Default::default()
        };
        let mut paths: HashMap<&[u32], u32> = HashMap::new();
        for s in &self.stacks {
            let next = paths.len() as u32;
            let id = *paths.entry(s.frames.as_slice()).or_insert_with(|| {
                c.path_len.push(s.frames.len() as u32);
                c.path_frames.extend_from_slice(&s.frames);
                next
            });
            c.stack_path.push(id);
            c.stack_pid.push(s.pid);
            c.stack_tid.push(s.tid);
            c.stack_comm.push(s.comm);
            c.stack_thread.push(s.thread);
            c.stack_cgroup.push(s.cgroup);
            c.stack_count.push(s.count);
        }
        out.push(COLUMNAR);
        let mut ser = rmp_serde::Serializer::new(out).with_struct_map();
        c.serialize(&mut ser)
    }

    /// Reads a slice written by [`Profile::to_columns`] (`b` without its first byte). Indexes
    /// are not checked here (readers of a profile never trust them); ragged columns are an error.
    pub fn from_columns(b: &[u8]) -> Result<Profile, ColumnsError> {
        let c: Columns = rmp_serde::from_slice(b)?;
        let nf = c.frame_kind.len();
        if c.frame_name.len() != nf || c.frame_module.len() != nf || c.frame_offset.len() != nf {
            return Err(ColumnsError::Ragged("frames"));
        }
        if c.module_build_id.len() != c.module_path.len() {
            return Err(ColumnsError::Ragged("modules"));
        }
        let ns = c.stack_pid.len();
        if [
            c.stack_tid.len(),
            c.stack_comm.len(),
            c.stack_thread.len(),
            c.stack_cgroup.len(),
            c.stack_path.len(),
            c.stack_count.len(),
        ]
        .iter()
        .any(|&n| n != ns)
        {
            return Err(ColumnsError::Ragged("stacks"));
        }
        let mut paths: Vec<&[u32]> = Vec::with_capacity(c.path_len.len());
        let mut at = 0usize;
        for &n in &c.path_len {
            let end = at
                .checked_add(n as usize)
                .filter(|&e| e <= c.path_frames.len())
                .ok_or(ColumnsError::Ragged("paths"))?;
            paths.push(&c.path_frames[at..end]);
            at = end;
        }
        let frames = (0..nf)
            .map(|i| Frame {
                kind: FrameKind::from_code(c.frame_kind[i]),
                name: c.frame_name[i],
                module: c.frame_module[i],
                offset: c.frame_offset[i],
            })
            .collect();
        let modules = c
            .module_path
            .iter()
            .zip(c.module_build_id)
            .map(|(&path, build_id)| Module { path, build_id })
            .collect();
        let stacks = (0..ns)
            .map(|i| Stack {
                pid: c.stack_pid[i],
                tid: c.stack_tid[i],
                comm: c.stack_comm[i],
                thread: c.stack_thread[i],
                cgroup: c.stack_cgroup[i],
                // A path index out of range (damage) leaves the stack without frames.
                frames: paths
                    .get(c.stack_path[i] as usize)
                    .map(|p| p.to_vec())
                    .unwrap_or_default(),
                count: c.stack_count[i],
            })
            .collect();
        Ok(Profile {
            hz: c.hz,
            start_mono_ns: c.start_mono_ns,
            end_mono_ns: c.end_mono_ns,
            samples: c.samples,
            lost: c.lost,
            dropped: c.dropped,
            strings: c.strings,
            modules,
            frames,
            stacks,
        })
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

    fn busy() -> Profile {
        let mut b = Builder::new(99, 1_000, 2_000);
        let m = b.module("/usr/bin/bash", "0123abcd");
        let u1 = b.frame(Frame {
            kind: FrameKind::User,
            module: m,
            offset: 0x4_5678,
            ..Default::default()
        });
        let u2 = b.frame(Frame {
            kind: FrameKind::User,
            module: m,
            offset: 0x1_0000,
            ..Default::default()
        });
        let k = kernel(&mut b, "asm_sysvec_apic_timer_interrupt");
        let unknown = b.frame(Frame {
            kind: FrameKind::Unknown,
            offset: 0x7fff_0000_1234,
            ..Default::default()
        });
        let jit = {
            let name = b.string("java.lang.Thread.run");
            b.frame(Frame {
                kind: FrameKind::Jit,
                name,
                ..Default::default()
            })
        };
        // 250 shells on the same code, and a few other paths.
        for pid in 1000..1250 {
            b.add_stack(pid, pid, "bash", "bash", "/user.slice", vec![u1, u2], 1);
        }
        b.add_stack(
            7,
            9,
            "java",
            "worker",
            "/docker/abc",
            vec![k, jit, unknown],
            3,
        );
        b.add_stack(0, 0, "swapper", "swapper", "", vec![], 2);
        b.add_lost(4, 5);
        b.finish()
    }

    #[test]
    fn the_columnar_layout_round_trips_and_keeps_each_call_path_once() {
        let p = busy();
        let mut b = Vec::new();
        p.to_columns(&mut b).unwrap();
        assert_eq!(b[0], COLUMNAR);
        assert_eq!(Profile::from_columns(&b[1..]).unwrap(), p);
        let mut named = Vec::new();
        p.serialize(&mut rmp_serde::Serializer::new(&mut named).with_struct_map())
            .unwrap();
        assert!(b.len() * 3 < named.len(), "{} vs {}", b.len(), named.len());
        // An empty slice too.
        let mut e = Vec::new();
        Profile::default().to_columns(&mut e).unwrap();
        assert_eq!(Profile::from_columns(&e[1..]).unwrap(), Profile::default());
    }

    #[test]
    fn damaged_columns_are_an_error_or_an_empty_stack_never_a_panic() {
        let p = busy();
        let mut c = Columns::default();
        let mut b = Vec::new();
        p.to_columns(&mut b).unwrap();
        let good: Columns = rmp_serde::from_slice(&b[1..]).unwrap();
        let enc = |c: &Columns| {
            let mut v = Vec::new();
            c.serialize(&mut rmp_serde::Serializer::new(&mut v).with_struct_map())
                .unwrap();
            v
        };
        c.frame_kind = vec![0, 1];
        c.frame_name = vec![0];
        assert!(matches!(
            Profile::from_columns(&enc(&c)),
            Err(ColumnsError::Ragged("frames"))
        ));
        let mut c = Columns {
            stack_pid: vec![1],
            ..Default::default()
        };
        assert!(Profile::from_columns(&enc(&c)).is_err());
        c = good;
        c.path_len[0] = u32::MAX;
        assert!(matches!(
            Profile::from_columns(&enc(&c)),
            Err(ColumnsError::Ragged("paths"))
        ));
        c.path_len[0] = 2;
        c.stack_path[0] = 999;
        let d = Profile::from_columns(&enc(&c)).unwrap();
        assert!(d.stacks[0].frames.is_empty());
        assert_eq!(d.stacks[1].frames, p.stacks[1].frames);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_read_as_a_slice_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = Profile::from_columns(&b);
        }

        #[test]
        fn a_mutated_slice_never_panics(at in 0usize..4000, byte in proptest::num::u8::ANY, cut in 0usize..4000) {
            let mut b = Vec::new();
            busy().to_columns(&mut b).unwrap();
            let n = b.len();
            b[1 + at % (n - 1)] = byte;
            b.truncate(1 + cut % n);
            let _ = Profile::from_columns(&b[1..]);
        }
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
