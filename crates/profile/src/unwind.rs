//! Whole user stacks of code built without frame pointers: each sample carries a copy of the
//! top of the thread's user stack and its registers (perf's PERF_SAMPLE_STACK_USER and
//! REGS_USER), unwound here, on the profiler thread, with the modules' `.eh_frame` /
//! `.debug_frame` call frame information by framehop.
//!
//! Debian's libraries and Rust release binaries keep no frame pointer, so the kernel's
//! frame-pointer walk ends at the leaf (usually glibc's syscall wrapper) and the caller that
//! matters is lost. Unwinding in user space from a copy was chosen over unwinding in BPF from
//! precomputed tables: it needs no per-binary preprocessing, runs on every kernel the sampler
//! runs on, and its cost is a memcpy of a few KiB per sample in the kernel (measured in
//! `bench/profile.sh`).
//!
//! Each module's unwind sections are read once per file (path and inode) and shared by every
//! process that maps it; each process gets a framehop unwinder built from its mapping table,
//! rebuilt when that table changes (a new mapping, an exec).

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};
use object::{Object, ObjectSection, ObjectSegment};

use crate::maps::{Mapping, Table};
use crate::MAX_DEPTH;

/// perf's x86_64 register numbers (`arch/x86/include/uapi/asm/perf_regs.h`).
const PERF_REG_X86_BP: u32 = 6;
const PERF_REG_X86_SP: u32 = 7;
const PERF_REG_X86_IP: u32 = 8;

/// The user registers each sample records: all that x86_64 unwinding starts from.
pub const REGS_MASK: u64 = (1 << PERF_REG_X86_BP) | (1 << PERF_REG_X86_SP) | (1 << PERF_REG_X86_IP);

/// Bytes of user stack copied per sample by default: perf's own default for
/// `--call-graph dwarf`, enough for the native frames of most services (a CPython eval frame
/// takes a few hundred bytes). Deeper stacks are completed from the frame-pointer chain where
/// it links up (see [`merge`]).
pub const DEFAULT_STACK_BYTES: u32 = 8192;

thread_local! {
    /// Stack copies of dropped [`UserStack`]s, for the next samples of this thread. A copy is
    /// 8 KiB by default; allocated and freed once per sample, each made glibc consolidate its free
    /// lists (malloc_consolidate), which with the other allocations of the profiler thread
    /// was a third of its time on a busy host.
    static SPARE_COPIES: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spare copies kept per thread: 64 of the configured stack size (`--profile-stack`; 512 KiB
/// at the default 8 KiB). A drain (every 250 ms) of a 2-CPU host sampled at 99 Hz holds about
/// 50 samples; a larger host allocates the rest as before.
const SPARES: usize = 64;

impl Drop for UserStack {
    fn drop(&mut self) {
        let bytes = std::mem::take(&mut self.bytes);
        if bytes.capacity() == 0 {
            return;
        }
        let _ = SPARE_COPIES.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < SPARES {
                    s.push(bytes);
                }
            }
        });
    }
}

/// What one sample copied of its thread's user state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserStack {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer: the address of `bytes[0]`.
    pub sp: u64,
    /// Frame pointer register.
    pub bp: u64,
    /// The stack from `sp` up.
    pub bytes: Vec<u8>,
}

impl UserStack {
    /// From a sample's REGS_USER (`regs` in register-number order of `mask`; `abi` 0 when the
    /// sample has no user state, as in kernel threads) and STACK_USER bytes. Samples without
    /// all three registers or without stack bytes give `None`.
    pub fn from_sample(abi: u64, mask: u64, regs: &[u64], stack: &[u8]) -> Option<Self> {
        if abi == 0 || stack.is_empty() {
            return None;
        }
        let reg = |n: u32| -> Option<u64> {
            if mask & (1 << n) == 0 {
                return None;
            }
            let i = (mask & ((1u64 << n) - 1)).count_ones() as usize;
            regs.get(i).copied()
        };
        let (ip, sp, bp) = (
            reg(PERF_REG_X86_IP)?,
            reg(PERF_REG_X86_SP)?,
            reg(PERF_REG_X86_BP)?,
        );
        let mut bytes = SPARE_COPIES
            .try_with(|s| s.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(stack);
        Some(UserStack { ip, sp, bp, bytes })
    }

    /// The 8 bytes at `addr`, if the copy holds them.
    fn read(&self, addr: u64) -> Result<u64, ()> {
        let off = usize::try_from(addr.checked_sub(self.sp).ok_or(())?).map_err(|_| ())?;
        let b = self
            .bytes
            .get(off..off.checked_add(8).ok_or(())?)
            .ok_or(())?;
        Ok(u64::from_le_bytes(b.try_into().map_err(|_| ())?))
    }
}

/// Section bytes shared between a file's modules in every process.
#[derive(Clone, Debug)]
pub struct Bytes(Arc<[u8]>);

impl Default for Bytes {
    fn default() -> Self {
        Bytes(Arc::from(&[][..]))
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// What unwinding needs of one ELF file: its unwind sections and where its loadable segments
/// sit in the file, to place it in a process from a mapping's file offset.
#[derive(Debug, Clone, Default)]
struct ElfUnwindInfo {
    text: Option<Range<u64>>,
    got: Option<Range<u64>>,
    eh_frame: Option<(Range<u64>, Bytes)>,
    eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    debug_frame: Option<Bytes>,
    /// (file offset, virtual address, file size) of each PT_LOAD.
    loads: Vec<(u64, u64, u64)>,
    bytes: usize,
}

impl ElfUnwindInfo {
    /// An ELF image's unwind sections. Files that are not ELF, or have no unwind information,
    /// give `None`: their frames are still walked by frame pointers.
    fn from_object<'d, R: object::ReadRef<'d>>(f: &object::File<'d, R>) -> Option<Self> {
        let mut info = ElfUnwindInfo::default();
        for s in f.sections() {
            let name = s.name().unwrap_or("");
            let range = s.address()..s.address().saturating_add(s.size());
            // Only these are read (a file's code is not): with a file-backed ReadCache, that is
            // a few reads of the headers and sections.
            let data = || -> Option<Bytes> {
                let d = s.compressed_data().ok()?;
                // A compressed .debug_frame is left alone; .eh_frame never is compressed.
                if d.format != object::CompressionFormat::None {
                    return None;
                }
                Some(Bytes(Arc::from(d.data)))
            };
            match name {
                ".text" => info.text = Some(range),
                ".got" => info.got = Some(range),
                ".eh_frame" => info.eh_frame = data().map(|b| (range, b)),
                ".eh_frame_hdr" => info.eh_frame_hdr = data().map(|b| (range, b)),
                ".debug_frame" => info.debug_frame = data(),
                _ => {}
            }
        }
        info.loads = f
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, s.address(), size)
            })
            .collect();
        if info.eh_frame.is_none() && info.debug_frame.is_none() {
            return None;
        }
        info.bytes = info.eh_frame.as_ref().map_or(0, |(_, b)| b.len())
            + info.eh_frame_hdr.as_ref().map_or(0, |(_, b)| b.len())
            + info.debug_frame.as_ref().map_or(0, |b| b.len());
        Some(info)
    }

    /// Whether a cached process unwinder holds its sections (its modules share the bytes).
    fn in_use(&self) -> bool {
        let held = |b: &Bytes| Arc::strong_count(&b.0) > 1;
        self.eh_frame.as_ref().is_some_and(|(_, b)| held(b))
            || self.eh_frame_hdr.as_ref().is_some_and(|(_, b)| held(b))
            || self.debug_frame.as_ref().is_some_and(held)
    }

    /// How far the file's stated addresses are moved in a process where `m` maps it: the
    /// segment holding `m`'s file offset gives the difference.
    fn bias(&self, m: &Mapping) -> Option<u64> {
        // Mappings start at page boundaries: a segment whose file offset is not page aligned
        // is mapped from the page holding its start, a page it may share with the end of the
        // previous segment. The later segment is the one this mapping was made for.
        let &(off, vaddr, _) = self
            .loads
            .iter()
            .filter(|&&(off, _, size)| {
                off & !0xfff <= m.pgoff && m.pgoff < off.saturating_add(size.max(1))
            })
            .max_by_key(|&&(off, _, _)| off)?;
        Some(
            m.start
                .wrapping_sub(m.pgoff)
                .wrapping_add(off)
                .wrapping_sub(vaddr),
        )
    }

    fn module(&self, m: &Mapping) -> Option<Module<Bytes>> {
        let bias = self.bias(m)?;
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text.clone(),
            got_svma: self.got.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|(r, _)| r.clone()),
            eh_frame: self.eh_frame.as_ref().map(|(_, b)| b.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|(_, b)| b.clone()),
            debug_frame: self.debug_frame.clone(),
            ..Default::default()
        };
        Some(Module::new(m.path.to_string(), m.start..m.end, bias, info))
    }
}

/// Reads just an ELF file's headers and unwind sections from disk.
fn read_elf(path: &str) -> Option<ElfUnwindInfo> {
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    ElfUnwindInfo::from_object(&object::File::parse(&cache).ok()?)
}

/// The vDSO's unwind information, read from this process's own copy: the kernel maps the same
/// image into every process. Hot paths such as `clock_gettime` run there.
fn read_vdso() -> Option<ElfUnwindInfo> {
    // SAFETY: getauxval only reads the auxiliary vector.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if base == 0 {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (a, rest) = line.split_once('-')?;
    let b = rest.split(' ').next()?;
    let (start, end) = (
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    );
    if start != base || end <= start || end - start > 1 << 20 {
        return None;
    }
    // SAFETY: [start, end) is this process's vDSO mapping, readable for the process's life.
    let image = unsafe { std::slice::from_raw_parts(start as *const u8, (end - start) as usize) };
    ElfUnwindInfo::from_object(&object::File::parse(image).ok()?)
}

/// Unwind sections kept: past this, the files no cached process maps are dropped first, and
/// everything if that is not enough; what is dropped is read again as needed (the cost is
/// re-reading). 64 MiB holds the unwind sections of a busy host's every library and binary
/// several times over (this host's peak was a few MB); it bounds the recorder's memory
/// (issue 44: at most 150 MiB across an episode close), where 256 MiB left a host with much
/// code, or with many containers mapping the same files, room to pass it.
const MAX_FILE_BYTES: usize = 64 << 20;
/// Processes whose unwinders are kept, likewise.
const MAX_PROCESSES: usize = 8192;

/// Unwinds copied user stacks; see the module documentation.
pub struct StackUnwinder {
    files: HashMap<(Arc<str>, u64), Option<Arc<ElfUnwindInfo>>>,
    file_bytes: usize,
    vdso: Option<Option<Arc<ElfUnwindInfo>>>,
    procs: HashMap<u32, (Arc<Table>, UnwinderX86_64<Bytes>)>,
    cache: CacheX86_64,
}

impl Default for StackUnwinder {
    fn default() -> Self {
        StackUnwinder {
            files: HashMap::new(),
            file_bytes: 0,
            vdso: None,
            procs: HashMap::new(),
            cache: CacheX86_64::new(),
        }
    }
}

impl StackUnwinder {
    /// Return addresses of `s` (leaf first, each after the first minus one, as
    /// [`RawStack`](crate::capture::RawStack) keeps them), unwound in process `pid` with mapping table
    /// `table`. `root` prefixes the paths (`/proc/<pid>/root` for a process in another mount
    /// namespace). Stops at the end of the copy, at code it cannot unwind, or at
    /// [`MAX_DEPTH`].
    pub fn unwind(&mut self, pid: u32, table: &Arc<Table>, root: &str, s: &UserStack) -> Vec<u64> {
        let fresh = !matches!(self.procs.get(&pid), Some((t, _)) if Arc::ptr_eq(t, table));
        if fresh {
            if self.procs.len() >= MAX_PROCESSES {
                self.procs.clear();
            }
            let u = self.build(table, root);
            self.procs.insert(pid, (table.clone(), u));
        }
        let Some((_, unwinder)) = self.procs.get(&pid) else {
            return Vec::new();
        };
        let mut read = |addr: u64| s.read(addr);
        let regs = UnwindRegsX86_64::new(s.ip, s.sp, s.bp);
        let mut it = unwinder.iter_frames(s.ip, regs, &mut self.cache, &mut read);
        let mut out = Vec::new();
        // An error ends the stack where the copy or the unwind information ends.
        while let Ok(Some(f)) = it.next() {
            let a = f.address_for_lookup();
            if a == 0 {
                break;
            }
            out.push(a);
            if out.len() >= MAX_DEPTH {
                break;
            }
        }
        out
    }

    /// Forgets a process (exited or exec'd).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    fn build(&mut self, table: &Table, root: &str) -> UnwinderX86_64<Bytes> {
        let mut u = UnwinderX86_64::new();
        for m in table.iter() {
            let info = if m.path.as_ref() == "[vdso]" {
                self.vdso
                    .get_or_insert_with(|| read_vdso().map(Arc::new))
                    .clone()
            } else {
                self.file(root, m)
            };
            if let Some(module) = info.and_then(|i| i.module(m)) {
                u.add_module(module);
            }
        }
        u
    }

    fn file(&mut self, root: &str, m: &Mapping) -> Option<Arc<ElfUnwindInfo>> {
        let path: Arc<str> = if root.is_empty() {
            m.path.clone()
        } else {
            format!("{root}{}", m.path).into()
        };
        // The same file seen through another process's root (every process of a container,
        // every `podman exec`) is read once: by its build id where the kernel gave it.
        let key = match &m.build_id {
            Some(id) => (id.clone(), 0),
            None => (path.clone(), m.inode),
        };
        if let Some(i) = self.files.get(&key) {
            return i.clone();
        }
        if self.file_bytes > MAX_FILE_BYTES || self.files.len() > MAX_PROCESSES {
            self.evict();
        }
        // "(deleted)" files (an upgraded library still mapped) cannot be opened by path.
        let info = if path.ends_with(" (deleted)") {
            None
        } else {
            read_elf(&path).map(Arc::new)
        };
        self.file_bytes += info.as_ref().map_or(0, |i| i.bytes);
        self.files.insert(key, info.clone());
        info
    }
}

impl StackUnwinder {
    /// Makes room: drops the files no cached process unwinder holds, then, if the rest is
    /// still over half the bound, everything.
    fn evict(&mut self) {
        self.files
            .retain(|_, i| i.as_ref().is_some_and(|i| i.in_use()));
        self.file_bytes = self
            .files
            .values()
            .map(|i| i.as_ref().map_or(0, |i| i.bytes))
            .sum();
        if self.file_bytes > MAX_FILE_BYTES / 2 || self.files.len() > MAX_PROCESSES / 2 {
            self.files.clear();
            self.procs.clear();
            self.file_bytes = 0;
        }
    }
}

/// One sample's user stack from both walks: the DWARF unwind of the copy (`dwarf`) and the
/// kernel's frame-pointer chain (`fp`), both leaf first. The DWARF one is right wherever the
/// modules have call frame information, but ends with the copy; the frame-pointer one goes as
/// deep as the stack but breaks (or wanders) at the first function without a frame pointer.
/// So: the DWARF stack, completed with the frame-pointer chain's frames beyond its last frame
/// where the chain holds that same frame (the two agree there); the frame-pointer chain alone
/// when the unwind gave no more than the leaf.
pub fn merge(dwarf: Vec<u64>, fp: Vec<u64>) -> Vec<u64> {
    if dwarf.len() <= 1 && fp.len() > dwarf.len() {
        return fp;
    }
    if dwarf.len() >= fp.len() || dwarf.len() >= MAX_DEPTH {
        return dwarf;
    }
    let Some(&last) = dwarf.last() else {
        return fp;
    };
    // Only frames past the leaf: the leaf of both is the sampled instruction itself.
    match fp.iter().skip(1).position(|&a| a == last) {
        Some(i) => {
            let mut out = dwarf;
            out.extend(fp.iter().skip(i + 2).copied());
            out.truncate(MAX_DEPTH);
            out
        }
        None => dwarf,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_copy_is_reused_with_the_next_samples_bytes() {
        let a = UserStack::from_sample(2, REGS_MASK, &[1, 2, 3], &[7; 64]).unwrap();
        let at = a.bytes.as_ptr();
        drop(a);
        let b = UserStack::from_sample(2, REGS_MASK, &[1, 2, 3], &[9; 40]).unwrap();
        assert_eq!(
            b.bytes.as_ptr(),
            at,
            "the dropped copy's allocation is taken again"
        );
        assert_eq!(b.bytes, vec![9; 40], "holding this sample's bytes only");
        // A clone is a copy of its own, given back like any other.
        let c = b.clone();
        assert_ne!(c.bytes.as_ptr(), b.bytes.as_ptr());
        drop((b, c));
        let spare = SPARE_COPIES.with(|s| s.borrow().len());
        assert!(spare >= 2, "{spare} spare copies after dropping two");
    }

    #[test]
    fn registers_come_in_mask_order() {
        let s = UserStack::from_sample(2, REGS_MASK, &[0xb, 0x5, 0x1], &[0; 16]).unwrap();
        assert_eq!((s.bp, s.sp, s.ip), (0xb, 0x5, 0x1));
        // A wider mask (perf's own, for instance) still finds the three.
        let mask = REGS_MASK | 1 | (1 << 10);
        let s = UserStack::from_sample(2, mask, &[9, 0xb, 0x5, 0x1, 7], &[0; 8]).unwrap();
        assert_eq!((s.bp, s.sp, s.ip), (0xb, 0x5, 0x1));
        assert!(UserStack::from_sample(0, REGS_MASK, &[1, 2, 3], &[0; 8]).is_none());
        assert!(UserStack::from_sample(2, REGS_MASK, &[1, 2], &[0; 8]).is_none());
        assert!(UserStack::from_sample(2, REGS_MASK, &[1, 2, 3], &[]).is_none());
    }

    #[test]
    fn reads_stay_inside_the_copy() {
        let mut bytes = vec![0u8; 24];
        bytes[8..16].copy_from_slice(&0x1122u64.to_le_bytes());
        let s = UserStack {
            ip: 0,
            sp: 0x1000,
            bp: 0,
            bytes,
        };
        assert_eq!(s.read(0x1008), Ok(0x1122));
        assert_eq!(s.read(0x1010), Ok(0));
        assert!(s.read(0x1011).is_err());
        assert!(s.read(0xff8).is_err());
        assert!(s.read(u64::MAX).is_err());
    }

    #[test]
    fn merging_the_two_walks() {
        // The unwind is whole: it wins over a chain that wandered off.
        assert_eq!(merge(vec![1, 2, 3], vec![1, 9]), vec![1, 2, 3]);
        // The unwind ended with the copy; the chain holds its last frame and goes on.
        assert_eq!(merge(vec![1, 2, 3], vec![1, 3, 4, 5]), vec![1, 2, 3, 4, 5]);
        // No common frame: the chain cannot be trusted to continue the unwind.
        assert_eq!(merge(vec![1, 2, 3], vec![1, 7, 8, 9]), vec![1, 2, 3]);
        // Nothing but the leaf unwound (no copy, no unwind info): the chain.
        assert_eq!(merge(vec![1], vec![1, 2, 3]), vec![1, 2, 3]);
        assert_eq!(merge(vec![], vec![1, 2]), vec![1, 2]);
        assert_eq!(merge(vec![], vec![]), Vec::<u64>::new());
    }

    proptest::proptest! {
        /// Arbitrary registers, masks, stacks and walks: no panic, and a merged stack is never
        /// deeper than the limit nor loses the unwound frames.
        #[test]
        fn arbitrary_samples_and_walks(
            abi in 0u64..4,
            mask in proptest::prelude::any::<u64>(),
            regs in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..70),
            stack in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            at in proptest::prelude::any::<u64>(),
            dwarf in proptest::collection::vec(0u64..8, 0..80),
            fp in proptest::collection::vec(0u64..8, 0..80),
        ) {
            if let Some(s) = UserStack::from_sample(abi, mask, &regs, &stack) {
                let _ = s.read(at);
                let _ = s.read(s.sp.wrapping_add(at % 128));
            }
            let d = dwarf.len().min(MAX_DEPTH);
            let m = merge(dwarf[..d].to_vec(), fp.clone());
            proptest::prop_assert!(m.len() <= MAX_DEPTH.max(fp.len()));
            if d > 1 {
                proptest::prop_assert_eq!(&m[..d], &dwarf[..d]);
            }
        }
    }

    /// A file's unwind information claiming `mb` MiB, with its eh_frame bytes.
    fn info_of(mb: usize) -> Option<Arc<ElfUnwindInfo>> {
        Some(Arc::new(ElfUnwindInfo {
            eh_frame: Some((0..1, Bytes(Arc::from(&[0u8][..])))),
            bytes: mb << 20,
            ..Default::default()
        }))
    }

    #[test]
    fn eviction_keeps_what_a_cached_process_maps() {
        let mut u = StackUnwinder::default();
        let (held, a, b) = (info_of(20), info_of(30), info_of(30));
        // A process unwinder's module shares the held file's section bytes.
        let module = held.as_ref().unwrap().eh_frame.clone();
        for (k, i) in [("held", &held), ("a", &a), ("b", &b)] {
            u.files.insert((k.into(), 1), i.clone());
        }
        drop((held, a, b));
        u.file_bytes = 80 << 20;
        u.evict();
        assert_eq!(u.files.len(), 1, "only the held file is kept");
        assert!(u.files.contains_key(&(Arc::from("held"), 1)));
        assert_eq!(u.file_bytes, 20 << 20);
        // Still over half the bound in use: everything goes.
        u.files.insert(("big".into(), 1), info_of(40));
        let _big = u.files[&(Arc::from("big"), 1)]
            .as_ref()
            .unwrap()
            .eh_frame
            .clone();
        u.file_bytes = 60 << 20;
        u.evict();
        assert!(u.files.is_empty() && u.file_bytes == 0);
        drop(module);
    }

    #[test]
    fn a_file_seen_through_another_root_is_read_once_by_its_build_id() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let m = Mapping {
            start: 0x1000,
            end: 0x2000,
            pgoff: 0,
            path: exe.to_string_lossy().as_ref().into(),
            inode: 7,
            build_id: Some("0123abcd".into()),
        };
        let mut u = StackUnwinder::default();
        let first = u.file("", &m);
        assert!(first.is_some(), "the test binary has unwind sections");
        let again = u.file("/proc/self/root", &m);
        assert!(Arc::ptr_eq(
            first.as_ref().unwrap(),
            again.as_ref().unwrap()
        ));
        assert_eq!(u.files.len(), 1);
        // Without a build id, each root is its own key (the path is all there is).
        let bare = Mapping {
            build_id: None,
            ..m
        };
        u.file("", &bare);
        u.file("/proc/self/root", &bare);
        assert_eq!(u.files.len(), 3);
    }

    #[test]
    fn an_elf_is_placed_by_the_segment_of_its_mapping() {
        let info = ElfUnwindInfo {
            loads: vec![(0, 0, 0x1000), (0x1000, 0x1000, 0x5000)],
            ..Default::default()
        };
        let m = Mapping {
            start: 0x7f00_0000_1000,
            end: 0x7f00_0000_6000,
            pgoff: 0x1000,
            path: "/x".into(),
            inode: 1,
            build_id: None,
        };
        assert_eq!(info.bias(&m), Some(0x7f00_0000_0000));
        let odd = ElfUnwindInfo {
            // A segment whose virtual address is not its file offset (as with prelinked or
            // PIE-linked executables with a gap).
            loads: vec![(0x1000, 0x401000, 0x5000)],
            ..Default::default()
        };
        let m = Mapping {
            start: 0x401000,
            end: 0x406000,
            pgoff: 0x1000,
            ..m
        };
        assert_eq!(odd.bias(&m), Some(0));
        assert_eq!(
            odd.bias(&Mapping {
                pgoff: 0x9000,
                ..m.clone()
            }),
            None
        );
        // GNU ld's layout of a Rust test binary: the code segment starts mid-page, one page
        // further in memory than in the file, and its first page is the read-only segment's
        // last one.
        let ld = ElfUnwindInfo {
            loads: vec![(0, 0, 0x0fddc8), (0x0fddd0, 0x0fedd0, 0x2c31a0)],
            ..Default::default()
        };
        let m = Mapping {
            start: 0x5600_0000_0000,
            end: 0x5600_002c_2000,
            pgoff: 0xfd000,
            ..m
        };
        // .text's first byte (vaddr 0xfedd0, file offset 0xfddd0) is at start + 0xdd0.
        assert_eq!(ld.bias(&m).map(|b| b + 0x0fedd0), Some(0x5600_0000_0dd0));
    }
}
