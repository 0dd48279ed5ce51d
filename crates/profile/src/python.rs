//! CPython frames in native stacks (issue 22): which processes are interpreters, where their
//! structures are, and what the frame records of `jitterscope_bpf::python` name.
//!
//! At a sample, a BPF program on the sampler's own events copies the sampled thread's frame
//! chain as (code object, last instruction) pairs. Here, on the profiler thread and while the
//! process still lives (the same drain that names its native frames), each code object is read
//! from the process's memory once, its qualified name, file and line table kept, and the frames
//! are spliced into the native stack at the `_PyEval_EvalFrameDefault` calls that ran them:
//! the frames one C call of the evaluation loop ran sit just above it, as
//! `py:<qualname> (<file>:<line>)`.
//!
//! Supported: CPython 3.11 on x86-64, the layout `scripts/python-offsets.sh` printed from the
//! version's own headers. Other versions are recognised and said to be unsupported: their
//! frames are laid out differently (3.8–3.10 keep `PyFrameObject`s, 3.12 marks C entries with
//! shim frames, 3.13 moves the frame pointer into the thread state), and a layout is only added
//! here with a test on that version.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use jitterscope_bpf::python::{Offsets, PyRecord};

use crate::maps::Table;

/// One CPython version's layout: where the BPF program finds the frames, and where the code
/// objects' fields are for naming them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// (major, minor).
    pub version: (u8, u8),
    /// For the frame walk in BPF.
    pub walk: Offsets,
    /// PyCodeObject: `co_filename`.
    pub code_filename: u64,
    /// PyCodeObject: `co_name`.
    pub code_name: u64,
    /// PyCodeObject: `co_qualname`.
    pub code_qualname: u64,
    /// PyCodeObject: `co_firstlineno`.
    pub code_firstlineno: u64,
    /// PyCodeObject: `co_linetable`.
    pub code_linetable: u64,
    /// Start of the bytecode (`co_code_adaptive`), which `prev_instr` points into.
    pub code_bytecode: u64,
    /// PyBytesObject: `ob_size`.
    pub bytes_size: u64,
    /// PyBytesObject: `ob_sval`.
    pub bytes_data: u64,
    /// PyASCIIObject: `length`.
    pub str_length: u64,
    /// PyASCIIObject: `state`.
    pub str_state: u64,
    /// Where a compact ASCII string's characters start (`sizeof(PyASCIIObject)`).
    pub str_ascii_data: u64,
    /// Where another compact string's start (`sizeof(PyCompactUnicodeObject)`).
    pub str_compact_data: u64,
}

/// CPython 3.11, x86-64 (LP64). Printed by `scripts/python-offsets.sh` from Debian's
/// python3.11-dev 3.11.2 headers; the same structures hold for every 3.11.x.
pub const CPYTHON_311: Layout = Layout {
    version: (3, 11),
    walk: Offsets {
        runtime_interp_head: 40,
        runtime_tstate: 576,
        interp_threads_head: 16,
        tstate_next: 8,
        tstate_native_tid: 160,
        tstate_cframe: 56,
        cframe_current: 8,
        frame_code: 32,
        frame_previous: 48,
        frame_instr: 56,
        frame_entry: 68,
    },
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_firstlineno: 72,
    code_linetable: 136,
    code_bytecode: 184,
    bytes_size: 16,
    bytes_data: 32,
    str_length: 16,
    str_state: 32,
    str_ascii_data: 48,
    str_compact_data: 72,
};

/// The layouts this build knows.
pub const LAYOUTS: &[Layout] = &[CPYTHON_311];

/// The CPython version a mapped file's name says it is (`python3.11`, `libpython3.11.so.1.0`).
pub fn version_of_path(path: &str) -> Option<(u8, u8)> {
    let name = path.rsplit('/').next()?;
    let rest = name.strip_prefix("lib").unwrap_or(name);
    let rest = rest.strip_prefix("python3.")?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let after = &rest[digits.len()..];
    // `python3.11`, `python3.11d`, `libpython3.11.so…`; not `python3.11-config`.
    if !(after.is_empty() || after == "d" || after.starts_with(".so")) {
        return None;
    }
    Some((3, digits.parse().ok()?))
}

/// What one interpreter file gives: its version and the addresses (link-time) of what the
/// walk needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// (major, minor).
    pub version: (u8, u8),
    /// `_PyRuntime`.
    pub runtime: u64,
    /// `_PyEval_EvalFrameDefault`.
    pub eval: Range<u64>,
    /// PT_LOAD segments: (vaddr, file offset, file size).
    pub segments: Vec<(u64, u64, u64)>,
}

/// Reads `path`'s symbols and segments (a stripped interpreter still exports both symbols in
/// `.dynsym`). `Py_Version`, when the file has it (3.11+), must agree with the name.
pub fn read_image(path: &Path, named: (u8, u8)) -> Option<Image> {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    let find = |name: &str| {
        elf.dynamic_symbols()
            .chain(elf.symbols())
            .find(|s| s.name() == Ok(name))
            .map(|s| (s.address(), s.size()))
    };
    let (runtime, _) = find("_PyRuntime")?;
    let (eval, eval_size) = find("_PyEval_EvalFrameDefault")?;
    let segments: Vec<(u64, u64, u64)> = elf
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (s.address(), off, size)
        })
        .collect();
    if let Some((at, 8)) = find("Py_Version") {
        let v = elf
            .segments()
            .find_map(|s| s.data_range(at, 4).ok().flatten());
        if let Some(v) = v.and_then(|b| b.try_into().ok()).map(u32::from_le_bytes) {
            let found = ((v >> 24) as u8, (v >> 16) as u8);
            if found != named {
                return None;
            }
        }
    }
    Some(Image {
        version: named,
        runtime,
        eval: eval..eval + eval_size.max(1),
        segments,
    })
}

/// How far `table`'s mapping of `path` is moved from the file's link-time addresses.
pub fn load_bias(table: &Table, path: &str, image: &Image) -> Option<u64> {
    let m = table.iter().find(|m| m.path.as_ref() == path)?;
    let (vaddr, off, _) = image
        .segments
        .iter()
        .copied()
        .find(|&(_, off, size)| off <= m.pgoff && m.pgoff < off + size.max(1))
        .or_else(|| {
            image
                .segments
                .iter()
                .copied()
                .find(|&(_, off, _)| off & !0xfff == m.pgoff)
        })?;
    // The mapping's first byte is the file's byte `pgoff`, which the segment links at
    // `vaddr + (pgoff - off)`.
    let linked = vaddr.wrapping_add(m.pgoff).wrapping_sub(off);
    Some(m.start.wrapping_sub(linked))
}

/// An interpreter process as the walk needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    /// Its version's layout.
    pub layout: Layout,
    /// `_PyRuntime` in the process.
    pub runtime: u64,
    /// `_PyEval_EvalFrameDefault` in the process.
    pub eval: Range<u64>,
}

/// Finds an interpreter among `table`'s files: `Ok(None)` when the process runs none,
/// `Err` (once per version) when it runs one this build cannot walk. `root` prefixes paths
/// (a container's files are opened through `/proc/<pid>/root`).
pub fn find(
    table: &Table,
    root: &str,
    images: &mut HashMap<(Arc<str>, u64), Option<Image>>,
) -> Result<Option<Interpreter>, (u8, u8)> {
    for m in table.iter() {
        let Some(v) = version_of_path(&m.path) else {
            continue;
        };
        let Some(layout) = LAYOUTS.iter().find(|l| l.version == v) else {
            return Err(v);
        };
        let image = images
            .entry((m.path.clone(), m.inode))
            .or_insert_with(|| read_image(Path::new(&format!("{root}{}", m.path)), v));
        let Some(image) = image else { continue };
        let Some(bias) = load_bias(table, &m.path, image) else {
            continue;
        };
        return Ok(Some(Interpreter {
            layout: *layout,
            runtime: image.runtime.wrapping_add(bias),
            eval: image.eval.start.wrapping_add(bias)..image.eval.end.wrapping_add(bias),
        }));
    }
    Ok(None)
}

/// Reads `buf.len()` bytes of `pid`'s memory at `addr`.
fn read_mem(pid: u32, addr: u64, buf: &mut [u8]) -> bool {
    if buf.is_empty() {
        return true;
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` covers `buf`, which we own mutably; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    n == buf.len() as isize
}

fn read_u64(pid: u32, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read_mem(pid, addr, &mut b).then(|| u64::from_le_bytes(b))
}

/// Longest name or file read; longer ones are cut.
const MAX_TEXT: u64 = 1024;
/// Longest line table read.
const MAX_LINETABLE: u64 = 64 << 10;

/// A `str` object's text (compact strings, which code objects' names and files always are).
fn read_str(pid: u32, l: &Layout, obj: u64) -> Option<String> {
    let len = read_u64(pid, obj + l.str_length)?;
    let mut state = [0u8; 4];
    if !read_mem(pid, obj + l.str_state, &mut state) {
        return None;
    }
    let state = u32::from_le_bytes(state);
    // interned:2, kind:3, compact:1, ascii:1, ready:1
    let kind = (state >> 2) & 7;
    let compact = state & (1 << 5) != 0;
    let ascii = state & (1 << 6) != 0;
    if !compact {
        return None;
    }
    let n = len.min(MAX_TEXT);
    let data = if ascii {
        obj + l.str_ascii_data
    } else {
        obj + l.str_compact_data
    };
    let width = match kind {
        1 => 1,
        2 => 2,
        4 => 4,
        _ => return None,
    };
    let mut b = vec![0u8; (n * width) as usize];
    if !read_mem(pid, data, &mut b) {
        return None;
    }
    Some(match width {
        1 => b.iter().map(|&c| c as char).collect(),
        2 => b
            .chunks_exact(2)
            .map(|c| char::from_u32(u16::from_le_bytes([c[0], c[1]]) as u32).unwrap_or('?'))
            .collect(),
        _ => b
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('?'))
            .collect(),
    })
}

/// What naming a code object's frames needs, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    /// `co_qualname` (`Class.method`).
    pub qualname: String,
    /// `co_filename`.
    pub filename: String,
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// `co_linetable`, the location table.
    pub linetable: Vec<u8>,
    /// Address of the first instruction.
    pub bytecode: u64,
}

fn read_code(pid: u32, l: &Layout, code: u64) -> Option<Code> {
    let name = |off: u64| read_u64(pid, code + off).and_then(|s| read_str(pid, l, s));
    let qualname = name(l.code_qualname).or_else(|| name(l.code_name))?;
    let filename = name(l.code_filename).unwrap_or_default();
    let mut first = [0u8; 4];
    let firstlineno = if read_mem(pid, code + l.code_firstlineno, &mut first) {
        i32::from_le_bytes(first)
    } else {
        0
    };
    let linetable = read_u64(pid, code + l.code_linetable)
        .and_then(|b| {
            let n = read_u64(pid, b + l.bytes_size)?.min(MAX_LINETABLE);
            let mut t = vec![0u8; n as usize];
            read_mem(pid, b + l.bytes_data, &mut t).then_some(t)
        })
        .unwrap_or_default();
    Some(Code {
        qualname,
        filename,
        firstlineno,
        linetable,
        bytecode: code + l.code_bytecode,
    })
}

/// The line of instruction `index` (in code units) from a 3.11 location table
/// (CPython's Objects/locations.md): entries of one start byte (bit 7 set, a 4-bit code and the
/// length in code units minus one) and their varint fields.
pub fn line_of(table: &[u8], firstlineno: i32, index: i64) -> i32 {
    if index < 0 {
        return firstlineno;
    }
    let mut line = firstlineno;
    let mut at = 0usize;
    let mut start: i64 = 0;
    while at < table.len() {
        let b = table[at];
        if b & 0x80 == 0 {
            at += 1;
            continue;
        }
        let code = (b >> 3) & 15;
        let len = (b & 7) as i64 + 1;
        let delta = match code {
            13 | 14 => signed_varint(&table[at + 1..]),
            11 => 1,
            12 => 2,
            _ => 0,
        };
        line = line.wrapping_add(delta);
        if index < start + len {
            return line;
        }
        start += len;
        at += 1;
    }
    line
}

fn signed_varint(b: &[u8]) -> i32 {
    let mut v: u32 = 0;
    let mut shift = 0;
    for &c in b {
        if shift < 32 {
            v |= ((c & 63) as u32) << shift;
        }
        shift += 6;
        if c & 64 == 0 {
            break;
        }
    }
    if v & 1 != 0 {
        -((v >> 1) as i32)
    } else {
        (v >> 1) as i32
    }
}

/// Where the interpreter frames of one sample go among its native user frames (leaf first):
/// each `(i, name)` goes just before native frame `i`, i.e. just above (leafward of) the
/// `_PyEval_EvalFrameDefault` call that ran it; `i == user.len()` is the root end, where frames
/// go that no evaluation-loop call is left for (the native unwind stopped early).
pub fn splice(
    user: &[u64],
    eval: &Range<u64>,
    names: &[Arc<str>],
    entry: u64,
) -> Vec<(u32, Arc<str>)> {
    let mut out = Vec::with_capacity(names.len());
    let mut py = 0usize;
    for (i, a) in user.iter().enumerate() {
        if py >= names.len() {
            break;
        }
        if !eval.contains(a) {
            continue;
        }
        // One C call of the loop ran frames up to and including the one it was entered with.
        loop {
            out.push((i as u32, names[py].clone()));
            let entered = py < 64 && entry & (1 << py) != 0;
            py += 1;
            if entered || py >= names.len() {
                break;
            }
        }
    }
    for n in &names[py..] {
        out.push((user.len() as u32, n.clone()));
    }
    out
}

/// How close a frame record's time must be to its sample's (they are taken in the same
/// interrupt; a thread's next sample is at least a sampling period later).
const PAIRING_NS: u64 = 1_000_000;

/// Bound of the named-code cache (entries), cleared whole when reached.
const MAX_CODES: usize = 1 << 16;

/// The records not yet paired with their samples, the interpreters, and the code objects
/// named so far.
#[derive(Default)]
pub struct Frames {
    /// The registered interpreters, by pid.
    pub interpreters: HashMap<u32, Interpreter>,
    pending: HashMap<u32, VecDeque<PyRecord>>,
    codes: HashMap<(u32, u64), Option<Arc<Code>>>,
    names: HashMap<(u32, u64, i32), Arc<str>>,
    /// Records read.
    pub records: u64,
    /// Records paired with a sample.
    pub paired: u64,
}

impl Frames {
    /// Records just drained from the ring, in ring order.
    pub fn feed(&mut self, recs: Vec<PyRecord>) {
        for r in recs {
            self.records += 1;
            self.pending.entry(r.tid).or_default().push_back(r);
        }
    }

    /// Drops records older than `now_ns - keep_ns` (their samples were lost or dropped).
    pub fn expire(&mut self, now_ns: u64, keep_ns: u64) {
        let old = now_ns.saturating_sub(keep_ns);
        self.pending.retain(|_, q| {
            while q.front().is_some_and(|r| r.time_ns < old) {
                q.pop_front();
            }
            !q.is_empty()
        });
    }

    /// A process exec'd or exited: what was read of it goes.
    pub fn forget(&mut self, pid: u32) {
        self.interpreters.remove(&pid);
        self.codes.retain(|(p, _), _| *p != pid);
        self.names.retain(|(p, _, _), _| *p != pid);
    }

    /// The interpreter frames of the sample of `tid` (process `pid`) taken at `time_ns`,
    /// placed among its native user frames (see [`splice`]); empty when there is no record.
    pub fn of_sample(
        &mut self,
        pid: u32,
        tid: u32,
        time_ns: u64,
        user: &[u64],
    ) -> Vec<(u32, Arc<str>)> {
        let Some(q) = self.pending.get_mut(&tid) else {
            return Vec::new();
        };
        while q
            .front()
            .is_some_and(|r| r.time_ns + PAIRING_NS < time_ns || r.pid != pid)
        {
            q.pop_front();
        }
        if q.front().is_none_or(|r| r.time_ns > time_ns + PAIRING_NS) {
            return Vec::new();
        }
        let r = q.pop_front().expect("front exists");
        let Some(interp) = self.interpreters.get(&pid).cloned() else {
            return Vec::new();
        };
        self.paired += 1;
        let names: Vec<Arc<str>> = r
            .frames
            .iter()
            .map(|&(code, instr)| self.name(pid, &interp.layout, code, instr))
            .collect();
        splice(user, &interp.eval, &names, r.entry)
    }

    fn name(&mut self, pid: u32, l: &Layout, code: u64, instr: u64) -> Arc<str> {
        if self.codes.len() >= MAX_CODES || self.names.len() >= MAX_CODES {
            self.codes.clear();
            self.names.clear();
        }
        let c = self
            .codes
            .entry((pid, code))
            .or_insert_with(|| read_code(pid, l, code).map(Arc::new))
            .clone();
        let Some(c) = c else {
            return format!("py:0x{code:x}").into();
        };
        let index = if instr == 0 {
            -1
        } else {
            (instr as i64).wrapping_sub(c.bytecode as i64) / 2
        };
        let line = line_of(&c.linetable, c.firstlineno, index);
        self.names
            .entry((pid, code, line))
            .or_insert_with(|| format!("py:{} ({}:{line})", c.qualname, c.filename).into())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_file_names() {
        assert_eq!(version_of_path("/usr/bin/python3.11"), Some((3, 11)));
        assert_eq!(
            version_of_path("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"),
            Some((3, 11))
        );
        assert_eq!(version_of_path("/opt/py/bin/python3.12d"), Some((3, 12)));
        assert_eq!(version_of_path("/usr/bin/python3.11-config"), None);
        assert_eq!(version_of_path("/usr/bin/python3"), None);
        assert_eq!(version_of_path("/usr/bin/perl"), None);
    }

    #[test]
    fn frames_go_above_the_loop_call_that_ran_them() {
        let eval = 100..200;
        let n = |s: &str| -> Arc<str> { s.into() };
        let names = [n("c"), n("b"), n("a"), n("<module>")];
        // leaf, eval (ran c and b, b entered by C), cfunc, eval (ran a, <module>), main
        let user = [7, 150, 300, 160, 400];
        let entry = 0b0010 | 0b1000;
        let s = splice(&user, &eval, &names, entry);
        assert_eq!(
            s,
            vec![(1, n("c")), (1, n("b")), (3, n("a")), (3, n("<module>"))]
        );
        // No loop frame in the native stack (it was cut short): all at the root end.
        let s = splice(&[7, 8], &eval, &names, entry);
        assert!(s.iter().all(|(i, _)| *i == 2));
        // More loop calls than entries: the frames are used up by the first ones.
        let s = splice(&[150, 150, 150], &eval, &names[..1], 1);
        assert_eq!(s, vec![(0, n("c"))]);
    }

    /// `def f():` at line 1 with its body on lines 2 and 4: the table CPython 3.11 made for it.
    #[test]
    fn location_table_lines() {
        // Entry codes: 13 = no columns with a line delta; 0..9 short forms (same line);
        // 11 = one line, delta 1; 14 = long form.
        let t = [
            0x80 | (13 << 3), // 1 unit, delta +0 (svarint 0)
            0x00,
            0x80 | (11 << 3) | 1, // 2 units, line +1
            0x01,
            0x02,
            0x80 | (14 << 3) | 2, // 3 units, long form delta +2
            0x04,
            0x00,
            0x01,
            0x02,
            0x80 | (13 << 3), // 1 unit, delta -1 (svarint 3)
            0x03,
        ];
        assert_eq!(line_of(&t, 1, 0), 1);
        assert_eq!(line_of(&t, 1, 1), 2);
        assert_eq!(line_of(&t, 1, 2), 2);
        assert_eq!(line_of(&t, 1, 3), 4);
        assert_eq!(line_of(&t, 1, 5), 4);
        assert_eq!(line_of(&t, 1, 6), 3);
        assert_eq!(line_of(&t, 1, -1), 1);
        // Past the end: the last line.
        assert_eq!(line_of(&t, 1, 99), 3);
    }

    proptest::proptest! {
        #[test]
        fn any_table_or_stack_is_safe(
            t in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            i in -5i64..200,
            user in proptest::collection::vec(0u64..400, 0..20),
            entry in proptest::prelude::any::<u64>(),
            n in 0usize..70,
        ) {
            let _ = line_of(&t, 1, i);
            let names: Vec<Arc<str>> = (0..n).map(|k| Arc::from(format!("f{k}"))).collect();
            let s = splice(&user, &(100..200), &names, entry);
            proptest::prop_assert_eq!(s.len(), n);
        }
    }

    #[test]
    fn records_pair_with_their_own_sample() {
        let mut f = Frames::default();
        f.interpreters.insert(
            5,
            Interpreter {
                layout: CPYTHON_311,
                runtime: 0,
                eval: 0..0,
            },
        );
        let rec = |t: u64| PyRecord {
            pid: 5,
            tid: 6,
            time_ns: t,
            frames: vec![(0, 0)],
            entry: 1,
        };
        f.feed(vec![rec(1_000), rec(10_000_000), rec(20_000_500)]);
        // The sample of the first record was lost: the second pairs with its own sample.
        assert_eq!(f.of_sample(5, 6, 10_000_100, &[]).len(), 1);
        // No record near this sample.
        assert!(f.of_sample(5, 6, 15_000_000, &[]).is_empty());
        assert_eq!(f.of_sample(5, 6, 20_000_000, &[]).len(), 1);
        assert_eq!(f.paired, 2);
        f.feed(vec![rec(30_000_000)]);
        f.expire(40_000_000, 5_000_000);
        assert!(f.of_sample(5, 6, 30_000_000, &[]).is_empty());
    }
}
