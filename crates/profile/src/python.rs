//! CPython frames in native stacks (issue 22): which processes are interpreters, where their
//! structures are, and what the frame records of `jitterscope_bpf::python_walker` name.
//!
//! At a sample, a BPF program on the sampler's own events copies the sampled thread's frame
//! chain as (code object, last instruction) pairs. Here, on the profiler thread and while the
//! process still lives (the same drain that names its native frames), each code object is read
//! from the process's memory once, its qualified name, file and line table kept, and the frames
//! are spliced into the native stack at the `_PyEval_EvalFrameDefault` calls that ran them:
//! the frames one C call of the evaluation loop ran sit just above it, as
//! `py:<qualname> (<file>:<line>)`.
//!
//! Supported: CPython 3.8 to 3.13 on x86-64, with the layouts `scripts/python-offsets.sh`
//! prints from each version's own headers. The walk differs by version: 3.8–3.10 chain
//! `PyFrameObject`s (one C call of the loop per frame) and name threads by pthread_self();
//! 3.11 marks the frames a C call entered with `is_entry`; 3.12 and 3.13 push a shim frame
//! for each C call instead, and 3.13 keeps the frame in the thread state. Other versions
//! (and free-threaded builds, `python3.13t`) are said to be unsupported.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use jitterscope_bpf::python_walker::{EntryKind, InstrKind, Offsets, PyRecord, TidKind, NONE};

use crate::maps::Table;

/// How a code object maps instructions to lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// `co_lnotab` (3.8, 3.9): (bytes, line) increments; the frame's `f_lasti` is a byte offset.
    Lnotab,
    /// `co_linetable` (3.10): (bytes, line) deltas, -128 for no line; `f_lasti` counts code
    /// units.
    Linetable,
    /// `co_linetable` (3.11+): the location table; the frame points into the bytecode.
    Locations,
}

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
    /// PyCodeObject: `co_qualname` (3.11+).
    pub code_qualname: Option<u64>,
    /// PyCodeObject: `co_firstlineno`.
    pub code_firstlineno: u64,
    /// PyCodeObject: `co_lnotab` or `co_linetable`.
    pub code_lines: u64,
    /// How to read it.
    pub lines: Lines,
    /// PyCodeObject: start of the bytecode (`co_code_adaptive`, 3.11+), which the frame's
    /// instruction pointer points into.
    pub code_bytecode: Option<u64>,
    /// Where a compact ASCII string's characters start (`sizeof(PyASCIIObject)`).
    pub str_ascii_data: u64,
    /// Where another compact string's start (`sizeof(PyCompactUnicodeObject)`).
    pub str_compact_data: u64,
}

/// PyBytesObject: `ob_size` and `ob_sval`; PyASCIIObject: `length` and `state`. The same in
/// every supported version.
const BYTES_SIZE: u64 = 16;
const BYTES_DATA: u64 = 32;
const STR_LENGTH: u64 = 16;
const STR_STATE: u64 = 32;

/// 3.8–3.10's walk: the thread state's `frame`, each `PyFrameObject`'s `f_back`.
const fn walk_310(runtime_tstate: u32, f_lasti: u32) -> Offsets {
    Offsets {
        runtime_interp_head: 32,
        runtime_tstate,
        interp_threads_head: 8,
        tstate_next: 8,
        tstate_tid: 176,
        tstate_frame: 24,
        cframe_current: NONE,
        frame_code: 32,
        frame_previous: 24,
        frame_instr: f_lasti,
        frame_entry: NONE,
        owner_cstack: 0,
        tid_kind: TidKind::Pthread,
        instr_kind: InstrKind::Int,
        entry_kind: EntryKind::All,
    }
}

/// 3.8–3.10's code objects and strings.
const fn layout_310(version: (u8, u8), walk: Offsets, lines: Lines) -> Layout {
    Layout {
        version,
        walk,
        code_filename: 104,
        code_name: 112,
        code_qualname: None,
        code_firstlineno: 40,
        code_lines: 120,
        lines,
        code_bytecode: None,
        str_ascii_data: 48,
        str_compact_data: 72,
    }
}

/// The layouts this build reads, x86-64 (LP64): printed by `scripts/python-offsets.sh` from
/// each version's own headers (3.11 from Debian's python3.11-dev, the others from CPython
/// builds of 3.8.18, 3.9.18, 3.10.13, 3.12.1 and 3.13.0). CPython keeps these structures
/// within a minor version; a test checks the table against the headers the machine has.
pub const LAYOUTS: &[Layout] = &[
    layout_310((3, 8), walk_310(1368, 104), Lines::Lnotab),
    layout_310((3, 9), walk_310(568, 104), Lines::Lnotab),
    layout_310((3, 10), walk_310(568, 96), Lines::Linetable),
    Layout {
        version: (3, 11),
        walk: Offsets {
            runtime_interp_head: 40,
            runtime_tstate: 576,
            interp_threads_head: 16,
            tstate_next: 8,
            tstate_tid: 160,
            tstate_frame: 56,
            cframe_current: 8,
            frame_code: 32,
            frame_previous: 48,
            frame_instr: 56,
            frame_entry: 68,
            owner_cstack: 0,
            tid_kind: TidKind::Native,
            instr_kind: InstrKind::Pointer,
            entry_kind: EntryKind::Flag,
        },
        code_filename: 112,
        code_name: 120,
        code_qualname: Some(128),
        code_firstlineno: 72,
        code_lines: 136,
        lines: Lines::Locations,
        code_bytecode: Some(184),
        str_ascii_data: 48,
        str_compact_data: 72,
    },
    Layout {
        version: (3, 12),
        walk: Offsets {
            runtime_interp_head: 40,
            runtime_tstate: NONE,
            interp_threads_head: 72,
            tstate_next: 8,
            tstate_tid: 144,
            tstate_frame: 56,
            cframe_current: 0,
            frame_code: 0,
            frame_previous: 8,
            frame_instr: 56,
            frame_entry: 70,
            owner_cstack: 3,
            tid_kind: TidKind::Native,
            instr_kind: InstrKind::Pointer,
            entry_kind: EntryKind::Shim,
        },
        code_filename: 112,
        code_name: 120,
        code_qualname: Some(128),
        code_firstlineno: 68,
        code_lines: 136,
        lines: Lines::Locations,
        code_bytecode: Some(192),
        str_ascii_data: 40,
        str_compact_data: 56,
    },
    Layout {
        version: (3, 13),
        walk: Offsets {
            runtime_interp_head: 632,
            runtime_tstate: NONE,
            interp_threads_head: 7344,
            tstate_next: 8,
            tstate_tid: 160,
            tstate_frame: 72,
            cframe_current: NONE,
            frame_code: 0,
            frame_previous: 8,
            frame_instr: 56,
            frame_entry: 70,
            owner_cstack: 3,
            tid_kind: TidKind::Native,
            instr_kind: InstrKind::Pointer,
            entry_kind: EntryKind::Shim,
        },
        code_filename: 112,
        code_name: 120,
        code_qualname: Some(128),
        code_firstlineno: 68,
        code_lines: 136,
        lines: Lines::Locations,
        code_bytecode: Some(200),
        str_ascii_data: 40,
        str_compact_data: 56,
    },
];

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
    // One pass over the symbols for all three names: an interpreter built with debug info
    // (pyenv's libpython) has tens of thousands in `.symtab`.
    const NAMES: [&str; 3] = ["_PyRuntime", "_PyEval_EvalFrameDefault", "Py_Version"];
    let mut found: [Option<(u64, u64)>; 3] = [None; 3];
    for sym in elf.dynamic_symbols().chain(elf.symbols()) {
        let Ok(name) = sym.name() else { continue };
        if let Some(i) = NAMES.iter().position(|n| *n == name) {
            found[i].get_or_insert((sym.address(), sym.size()));
            if found.iter().all(Option::is_some) {
                break;
            }
        }
    }
    let [runtime, eval, version] = found;
    let (runtime, _) = runtime?;
    let (eval, eval_size) = eval?;
    let segments: Vec<(u64, u64, u64)> = elf
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (s.address(), off, size)
        })
        .collect();
    if let Some((at, 8)) = version {
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
    jitterscope_sources::fileio::read_process_memory(pid, addr, buf).is_ok_and(|n| n == buf.len())
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
    let len = read_u64(pid, obj + STR_LENGTH)?;
    let mut state = [0u8; 4];
    if !read_mem(pid, obj + STR_STATE, &mut state) {
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

/// The words of a code object that say which one it is: its name, qualname, file and line
/// table pointers and its first line. CPython frees code objects while it runs (a module's
/// top-level code once the import has run it, a class body's once the class is made) and
/// soon puts another at the same address, so a name read at an address holds only while
/// these words are the ones it was read with.
type Stamp = [u64; 5];

/// PyObject: `ob_refcnt`, `ob_type`; PyTypeObject: `tp_name`. The same in every supported
/// version.
const OB_REFCNT: u64 = 0;
const OB_TYPE: u64 = 8;
const TP_NAME: u64 = 24;

/// A live object's count of references is small; pymalloc writes its free list's next
/// pointer (or null) over that of a freed one.
const MAX_REFCNT: u64 = 1 << 40;

/// What is at `code` now, read in one go: the stamp of a live code object, with its type's
/// address; `None` for anything else (the object was freed, or something else stands there).
fn probe(pid: u32, l: &Layout, code: u64) -> Option<(u64, Stamp)> {
    let offs = [
        l.code_name,
        l.code_qualname.unwrap_or(l.code_name),
        l.code_filename,
        l.code_lines,
        l.code_firstlineno,
    ];
    let hi = offs.iter().copied().max().unwrap_or(0) + 8;
    // Every supported layout keeps these within its first 150 bytes.
    let mut b = [0u8; 160];
    let b = b.get_mut(..hi as usize)?;
    if !read_mem(pid, code, b) {
        return None;
    }
    let word = |off: u64| {
        let i = off as usize;
        u64::from_le_bytes(b[i..i + 8].try_into().expect("eight bytes"))
    };
    if !(1..MAX_REFCNT).contains(&word(OB_REFCNT)) {
        return None;
    }
    let stamp = offs.map(|off| {
        // co_firstlineno is an int: the four bytes after it are another field.
        if off == l.code_firstlineno {
            word(off) & 0xffff_ffff
        } else {
            word(off)
        }
    });
    Some((word(OB_TYPE), stamp))
}

/// Whether `ty` is CPython's `code` type (its `tp_name`).
fn is_code_type(pid: u32, ty: u64) -> bool {
    let mut name = [0u8; 5];
    read_u64(pid, ty + TP_NAME).is_some_and(|p| read_mem(pid, p, &mut name)) && &name == b"code\0"
}

fn read_code(pid: u32, l: &Layout, code: u64) -> Option<Code> {
    let name = |off: u64| read_u64(pid, code + off).and_then(|s| read_str(pid, l, s));
    let qualname = l
        .code_qualname
        .and_then(name)
        .or_else(|| name(l.code_name))?;
    let filename = name(l.code_filename).unwrap_or_default();
    let mut first = [0u8; 4];
    let firstlineno = if read_mem(pid, code + l.code_firstlineno, &mut first) {
        i32::from_le_bytes(first)
    } else {
        0
    };
    let linetable = read_u64(pid, code + l.code_lines)
        .and_then(|b| {
            let n = read_u64(pid, b + BYTES_SIZE)?.min(MAX_LINETABLE);
            let mut t = vec![0u8; n as usize];
            read_mem(pid, b + BYTES_DATA, &mut t).then_some(t)
        })
        .unwrap_or_default();
    Some(Code {
        qualname,
        filename,
        firstlineno,
        linetable,
        bytecode: l.code_bytecode.map_or(0, |o| code + o),
    })
}

/// The line of a frame whose last instruction the record gives as `instr` (a pointer into
/// the bytecode from 3.11, `f_lasti` sign-extended before).
pub fn line(l: &Layout, c: &Code, instr: u64) -> i32 {
    match l.lines {
        Lines::Locations => {
            let index = if instr == 0 {
                -1
            } else {
                (instr as i64).wrapping_sub(c.bytecode as i64) / 2
            };
            line_of(&c.linetable, c.firstlineno, index)
        }
        Lines::Linetable => line_of_310(
            &c.linetable,
            c.firstlineno,
            (instr as i64).saturating_mul(2),
        ),
        Lines::Lnotab => line_of_lnotab(&c.linetable, c.firstlineno, instr as i64),
    }
}

/// The line of the instruction at byte offset `addr` from a 3.8/3.9 `co_lnotab`: pairs of an
/// unsigned byte increment and a signed line increment.
pub fn line_of_lnotab(table: &[u8], firstlineno: i32, addr: i64) -> i32 {
    let mut line = firstlineno;
    let mut at: i64 = 0;
    for p in table.chunks_exact(2) {
        at += p[0] as i64;
        if at > addr {
            break;
        }
        line = line.wrapping_add(p[1] as i8 as i32);
    }
    line
}

/// The line of the instruction at byte offset `addr` from a 3.10 `co_linetable`: pairs of an
/// unsigned byte length and a signed line delta, -128 for a range without a line.
pub fn line_of_310(table: &[u8], firstlineno: i32, addr: i64) -> i32 {
    if addr < 0 {
        return firstlineno;
    }
    let mut line = firstlineno;
    let mut end: i64 = 0;
    for p in table.chunks_exact(2) {
        let delta = p[1] as i8;
        if delta != -128 {
            line = line.wrapping_add(delta as i32);
        }
        end += p[0] as i64;
        if addr < end {
            break;
        }
    }
    line
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

/// Bound of the named-code cache (code objects and names), cleared whole when reached.
const MAX_CODES: usize = 1 << 16;

/// A code object read at an address, and the names of its lines.
struct Named {
    code: Option<Arc<Code>>,
    stamp: Option<Stamp>,
    /// The drain in which `stamp` was last found still to be the address's.
    checked: u64,
    lines: HashMap<i32, Arc<str>>,
}

/// The records not yet paired with their samples, the interpreters, and the code objects
/// named so far.
#[derive(Default)]
pub struct Frames {
    /// The registered interpreters, by pid.
    pub interpreters: HashMap<u32, Interpreter>,
    pending: HashMap<u32, VecDeque<PyRecord>>,
    codes: HashMap<(u32, u64), Named>,
    /// Names held in `codes`, all addresses together.
    names: usize,
    /// Drains so far: an address's stamp is read again once per drain, not once per frame.
    drains: u64,
    /// Each interpreter's `code` type, once seen.
    code_types: HashMap<u32, u64>,
    /// Records read.
    pub records: u64,
    /// Records paired with a sample.
    pub paired: u64,
    /// Addresses found holding another code object than the one named there before.
    pub reused: u64,
}

impl Frames {
    /// Records just drained from the ring, in ring order.
    pub fn feed(&mut self, recs: Vec<PyRecord>) {
        self.drains += 1;
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
        // Only interpreters have named code: every other exit (most of them, on a host that
        // forks) costs one look-up, not a walk of the caches.
        if self.interpreters.remove(&pid).is_some() {
            self.codes.retain(|(p, _), _| *p != pid);
            self.names = self.codes.values().map(|n| n.lines.len()).sum();
            self.code_types.remove(&pid);
        }
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
        let l = interp.layout;
        let mut names: Vec<Arc<str>> = Vec::with_capacity(r.frames.len());
        let mut entry = 0u64;
        for (i, &(code, instr)) in r.frames.iter().enumerate() {
            let flag = r.flags.get(i).copied().unwrap_or(0);
            let bit = 1u64 << (names.len() & 63);
            match l.walk.entry_kind {
                EntryKind::Shim if flag as u32 == l.walk.owner_cstack => {
                    // A C call pushed this shim and entered the frame above it.
                    if !names.is_empty() {
                        entry |= bit >> 1;
                    }
                    continue;
                }
                EntryKind::Shim => {}
                EntryKind::Flag if flag != 0 => entry |= bit,
                EntryKind::Flag => {}
                EntryKind::All => entry |= bit,
            }
            let instr = match l.walk.instr_kind {
                InstrKind::Int => instr as u32 as i32 as i64 as u64,
                InstrKind::Pointer => instr,
            };
            names.push(self.name(pid, &l, code, instr));
        }
        splice(user, &interp.eval, &names, entry)
    }

    fn name(&mut self, pid: u32, l: &Layout, code: u64, instr: u64) -> Arc<str> {
        if self.codes.len() >= MAX_CODES || self.names >= MAX_CODES {
            self.codes.clear();
            self.names = 0;
        }
        let drains = self.drains;
        let n = match self.codes.entry((pid, code)) {
            Entry::Occupied(o) => {
                let n = o.into_mut();
                if n.checked != drains {
                    n.checked = drains;
                    // The record was taken less than a drain ago: the object at the address
                    // now is the one it saw, unless it was freed and another put there since.
                    // Freed and not yet replaced (or the process gone), what was read of it
                    // while it lived is the best there is.
                    if let Some(now) = probe(pid, l, code) {
                        let types = &mut self.code_types;
                        if Some(now.1) != n.stamp && is_code(types, pid, now.0) {
                            self.reused += 1;
                            self.names -= n.lines.len();
                            *n = Named::read(pid, l, code, Some(now.1), drains);
                        }
                    }
                }
                n
            }
            Entry::Vacant(v) => {
                let now = probe(pid, l, code)
                    .filter(|(ty, _)| is_code(&mut self.code_types, pid, *ty))
                    .map(|(_, stamp)| stamp);
                v.insert(Named::read(pid, l, code, now, drains))
            }
        };
        let Some(c) = n.code.clone() else {
            return format!("py:0x{code:x}").into();
        };
        let line = line(l, &c, instr);
        let names = &mut self.names;
        n.lines
            .entry(line)
            .or_insert_with(|| {
                *names += 1;
                format!("py:{} ({}:{line})", c.qualname, c.filename).into()
            })
            .clone()
    }
}

/// Whether `ty` is the `code` type of `pid`'s interpreter, remembered once it is.
fn is_code(types: &mut HashMap<u32, u64>, pid: u32, ty: u64) -> bool {
    if types.get(&pid) == Some(&ty) {
        return true;
    }
    let yes = is_code_type(pid, ty);
    if yes {
        types.insert(pid, ty);
    }
    yes
}

impl Named {
    /// What a live code object at `code` (with `stamp`) says; nothing when none is there.
    fn read(pid: u32, l: &Layout, code: u64, stamp: Option<Stamp>, drains: u64) -> Self {
        Self {
            code: stamp.and_then(|_| read_code(pid, l, code)).map(Arc::new),
            stamp,
            checked: drains,
            lines: HashMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each layout as `key=value` pairs named as `scripts/python-offsets.sh` prints them;
    /// a field the version lacks is left out.
    fn keys(l: &Layout) -> Vec<(&'static str, u64)> {
        let w = &l.walk;
        let mut v: Vec<(&'static str, u64)> = vec![
            ("runtime_interp_head", w.runtime_interp_head as u64),
            ("runtime_tstate", w.runtime_tstate as u64),
            ("interp_threads_head", w.interp_threads_head as u64),
            ("tstate_tid", w.tstate_tid as u64),
            ("tstate_next", w.tstate_next as u64),
            ("tstate_frame", w.tstate_frame as u64),
            ("cframe_current", w.cframe_current as u64),
            ("frame_code", w.frame_code as u64),
            ("frame_instr", w.frame_instr as u64),
            ("frame_previous", w.frame_previous as u64),
            ("frame_entry", w.frame_entry as u64),
            ("code_filename", l.code_filename),
            ("code_name", l.code_name),
            ("code_firstlineno", l.code_firstlineno),
            ("code_lines", l.code_lines),
            ("bytes_size", BYTES_SIZE),
            ("bytes_data", BYTES_DATA),
            ("str_length", STR_LENGTH),
            ("str_state", STR_STATE),
            ("str_ascii_data", l.str_ascii_data),
            ("str_compact_data", l.str_compact_data),
        ];
        v.retain(|&(_, x)| x != NONE as u64);
        if w.entry_kind == EntryKind::Shim {
            v.push(("owner_cstack", w.owner_cstack as u64));
        }
        v.extend(l.code_qualname.map(|q| ("code_qualname", q)));
        v.extend(l.code_bytecode.map(|q| ("code_bytecode", q)));
        v.sort();
        v
    }

    /// The table against the C compiler's reading of each version's headers that this machine
    /// has (Debian's python3.11-dev in CI; more versions where pyenv has installed them).
    #[test]
    fn layouts_match_the_headers() {
        const TEST: &str = "layouts_match_the_headers";
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/python-offsets.sh");
        let o = std::process::Command::new("bash").arg(&script).output();
        let Some(o) = o.ok().filter(|o| o.status.success()) else {
            return jitterscope_testkit::skip(TEST, "python-offsets.sh did not run (no cc?)");
        };
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut seen = Vec::new();
        for line in out.lines() {
            let mut it = line.split_whitespace();
            let Some(v) = it.next() else { continue };
            let mut kv: Vec<(&str, u64)> = it
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k, v.parse().ok()?))
                })
                .collect();
            kv.sort();
            let l = LAYOUTS
                .iter()
                .find(|l| format!("{}.{}", l.version.0, l.version.1) == v)
                .unwrap_or_else(|| panic!("headers of CPython {v}, which LAYOUTS lacks"));
            assert_eq!(keys(l), kv, "CPython {v}");
            seen.push(v.to_string());
        }
        if seen.is_empty() {
            return jitterscope_testkit::skip(
                TEST,
                "no CPython headers on this machine (Debian: python3.11-dev)",
            );
        }
        eprintln!("layouts checked against the headers of CPython {seen:?}");
    }

    /// Every instruction of every code object of `tests/fixtures/python/sample.py`, as each
    /// CPython on the capturing machine compiled it: our line for it is the interpreter's own
    /// (`scripts/capture-python-fixtures.sh`).
    #[test]
    fn lines_agree_with_the_interpreters() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/python/lines.jsonl");
        let text = std::fs::read_to_string(&path).expect("fixture");
        let mut checked: HashMap<String, usize> = HashMap::new();
        for l in text.lines() {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            let version = v["version"].as_str().unwrap();
            let (major, minor) = version.split_once('.').unwrap();
            let layout = LAYOUTS
                .iter()
                .find(|l| l.version == (major.parse().unwrap(), minor.parse().unwrap()))
                .expect("a layout for every captured version");
            let first = v["first"].as_i64().unwrap() as i32;
            let hex = v["table"].as_str().unwrap();
            let table: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            for pair in v["lines"].as_array().unwrap() {
                let (off, want) = (pair[0].as_i64().unwrap(), pair[1].as_i64().unwrap() as i32);
                let got = match layout.lines {
                    Lines::Locations => line_of(&table, first, off / 2),
                    Lines::Linetable => line_of_310(&table, first, off),
                    Lines::Lnotab => line_of_lnotab(&table, first, off),
                };
                assert_eq!(got, want, "{version} {} offset {off}", v["name"]);
                *checked.entry(version.to_string()).or_default() += 1;
            }
        }
        assert!(checked.contains_key("3.11"), "{checked:?}");
        eprintln!("instructions checked per version: {checked:?}");
    }

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

    /// A compact ASCII `str` object as 3.11 lays it out.
    fn py_str(text: &str) -> Vec<u8> {
        let mut o = vec![0u8; 48 + text.len() + 1];
        o[16..24].copy_from_slice(&(text.len() as u64).to_le_bytes());
        let state: u32 = (1 << 2) | (1 << 5) | (1 << 6);
        o[32..36].copy_from_slice(&state.to_le_bytes());
        o[48..48 + text.len()].copy_from_slice(text.as_bytes());
        o
    }

    /// A code object at an address whose first one was freed and replaced (in this
    /// process's own memory, which it may always read): the frames are named after the
    /// one there now, once the next drain begins.
    #[test]
    fn a_reused_code_address_is_named_after_its_new_object() {
        let l = LAYOUTS[3];
        assert_eq!(l.version, (3, 11));
        let pid = std::process::id();
        let (first, second, file) = (py_str("first"), py_str("second"), py_str("m.py"));
        // An empty location table: every instruction is on the first line.
        let table = vec![0u8; 40];
        let addr = |o: &Vec<u8>| o.as_ptr() as u64;
        let tp_name = b"code\0".to_vec();
        let mut ty = vec![0u8; 64];
        ty[TP_NAME as usize..TP_NAME as usize + 8].copy_from_slice(&addr(&tp_name).to_le_bytes());
        let mut code = vec![0u8; 256];
        let put = |code: &mut Vec<u8>, off: u64, v: u64| {
            code[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes())
        };
        let make = |code: &mut Vec<u8>, name: &Vec<u8>, line: u32| {
            put(code, OB_REFCNT, 2);
            put(code, OB_TYPE, addr(&ty));
            put(code, l.code_name, addr(name));
            put(code, l.code_qualname.unwrap(), addr(name));
            put(code, l.code_filename, addr(&file));
            put(code, l.code_lines, addr(&table));
            code[l.code_firstlineno as usize..l.code_firstlineno as usize + 4]
                .copy_from_slice(&line.to_le_bytes());
        };
        make(&mut code, &first, 3);
        std::hint::black_box(&code);
        let at = addr(&code);
        let mut f = Frames::default();
        f.feed(Vec::new());
        let bytecode = at + l.code_bytecode.unwrap();
        assert_eq!(&*f.name(pid, &l, at, bytecode), "py:first (m.py:3)");
        make(&mut code, &second, 9);
        std::hint::black_box(&code);
        // Within the drain that named it, the address is not read again.
        assert_eq!(&*f.name(pid, &l, at, bytecode), "py:first (m.py:3)");
        f.feed(Vec::new());
        assert_eq!(&*f.name(pid, &l, at, bytecode), "py:second (m.py:9)");
        assert_eq!(f.reused, 1);
        assert_eq!(f.names, 1);
        // Unchanged, it stays named without being read again.
        f.feed(Vec::new());
        assert_eq!(&*f.name(pid, &l, at, bytecode), "py:second (m.py:9)");
        assert_eq!(f.reused, 1);
        // Freed since its frame was sampled (pymalloc's free list pointer over the count of
        // references, its fields left as they were but for a name): still named as it was.
        put(&mut code, OB_REFCNT, at + 0x400);
        put(&mut code, l.code_qualname.unwrap(), addr(&first));
        std::hint::black_box(&code);
        f.feed(Vec::new());
        assert_eq!(&*f.name(pid, &l, at, bytecode), "py:second (m.py:9)");
        assert_eq!(f.reused, 1);
        // Another kind of object there: not a code object, whatever its words.
        put(&mut code, OB_REFCNT, 1);
        put(&mut code, OB_TYPE, addr(&file));
        std::hint::black_box(&code);
        f.feed(Vec::new());
        assert_eq!(&*f.name(pid, &l, at, bytecode), "py:second (m.py:9)");
        let mut g = Frames::default();
        g.feed(Vec::new());
        assert_eq!(&*g.name(pid, &l, at, bytecode), format!("py:0x{at:x}"));
    }

    #[test]
    fn records_pair_with_their_own_sample() {
        let mut f = Frames::default();
        f.interpreters.insert(
            5,
            Interpreter {
                layout: LAYOUTS[3],
                runtime: 0,
                eval: 0..0,
            },
        );
        let rec = |t: u64| PyRecord {
            pid: 5,
            tid: 6,
            time_ns: t,
            frames: vec![(0, 0)],
            flags: vec![1],
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
