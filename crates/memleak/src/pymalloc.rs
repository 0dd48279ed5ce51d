//! CPython's small-object heap (pymalloc), measured from outside.
//!
//! Objects of up to 512 bytes live in pools: 16 KiB-aligned blocks of memory (4 KiB before
//! Python 3.10) inside anonymous arenas, each starting with a `pool_header`. On x86-64:
//!
//! | offset | field | |
//! |---|---|---|
//! | 0 | `ref.count` (u32 in a pointer-sized union) | allocated blocks |
//! | 8 | `freeblock` | head of the free list, NULL when full |
//! | 16, 24 | `nextpool`, `prevpool` | |
//! | 32 | `arenaindex` (u32) | |
//! | 36 | `szidx` (u32) | block size = (szidx + 1) × 16 |
//! | 40 | `nextoffset` (u32) | first never-used block |
//! | 44 | `maxnextoffset` (u32) | = pool size − block size |
//!
//! The layout has not changed since Python 3.0 (block alignment went from 8 to 16 bytes in
//! 3.8, pools from 4 to 16 KiB in 3.10), so no per-version table is needed. A pool is accepted
//! only when its header is consistent with itself and its free list: blocks carved so far
//! (`(nextoffset − 48) / size`) minus the free list's length must equal `count`. Random memory
//! passes that by chance practically never.
//!
//! The sum of `count` is what `sys.getallocatedblocks()` returns inside the process. Types come
//! from the allocated blocks: the object starts at the block (plain objects), 16 bytes in
//! (objects the GC tracks: `PyGC_Head` first) or 32 bytes in (3.11+ instances with a managed
//! dict: two more pointers before that). A candidate `ob_type` (8 bytes into the object) is
//! accepted when it points at a type object: its own type is `type` (the one object whose type
//! is itself) or a metaclass whose type is `type`. The name is the C string at `tp_name`
//! (24 bytes into the type). Candidates are cached: a heap holds a few hundred types.
//!
//! The target runs while it is read, so a pool can change under a read: a pool whose free list
//! does not add up counts its header's blocks but gives no types.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::procmem::MemRead;

const HEADER: usize = 48;
const ALIGN: usize = 16;
const CLASSES: u32 = 32;
/// Pool sizes tried, largest first (3.10+ and before).
const POOL_SIZES: [usize; 2] = [16 << 10, 4 << 10];
/// Types kept in a result.
const TOP_TYPES: usize = 50;

/// The small-object heap of one reading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PyHeap {
    /// Bytes read looking for pools.
    pub bytes_scanned: u64,
    /// Pools found in use.
    pub pools: u64,
    /// Pools whose free list did not add up (changed while read): counted, but no types.
    pub pools_changing: u64,
    /// Allocated blocks (what `sys.getallocatedblocks()` says inside the process).
    pub allocated_blocks: u64,
    /// Their bytes.
    pub allocated_bytes: u64,
    /// Allocated blocks by type, most first (at most 50).
    pub types: Vec<TypeCount>,
}

/// Blocks of one type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TypeCount {
    /// `tp_name`.
    pub name: String,
    /// Blocks.
    pub count: u64,
    /// Their bytes (block sizes).
    pub bytes: u64,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// A consistent pool header: (block size, blocks carved).
fn header(p: &[u8], pool_size: usize) -> Option<(usize, usize)> {
    let count = u32_at(p, 0) as usize;
    let szidx = u32_at(p, 36);
    if szidx >= CLASSES || count == 0 {
        return None;
    }
    let size = (szidx as usize + 1) * ALIGN;
    let next = u32_at(p, 40) as usize;
    let maxnext = u32_at(p, 44) as usize;
    if maxnext != pool_size - size || next < HEADER + size || next > maxnext + size {
        return None;
    }
    if !(next - HEADER).is_multiple_of(size) {
        return None;
    }
    let carved = (next - HEADER) / size;
    (count <= carved).then_some((size, carved))
}

/// Reads type names, caching by address.
struct Types<'a> {
    mem: &'a dyn MemRead,
    names: HashMap<u64, Option<usize>>,
    list: Vec<TypeCount>,
}

impl Types<'_> {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        (self.mem.read_at(addr, &mut b).ok()? == 8).then(|| u64::from_le_bytes(b))
    }

    fn self_typed(&self, t: u64) -> bool {
        t != 0 && self.read_u64(t + 8) == Some(t)
    }

    /// The index of the type at `t`, if `t` is a type object.
    fn index(&mut self, t: u64) -> Option<usize> {
        if t == 0 || !t.is_multiple_of(8) {
            return None;
        }
        if let Some(i) = self.names.get(&t) {
            return *i;
        }
        let found = (|| {
            let meta = self.read_u64(t + 8)?;
            if !(self.self_typed(meta)
                || self
                    .read_u64(meta + 8)
                    .is_some_and(|mm| self.self_typed(mm)))
            {
                return None;
            }
            let name_ptr = self.read_u64(t + 24)?;
            let mut b = [0u8; 128];
            let n = self.mem.read_at(name_ptr, &mut b).ok()?;
            let end = b[..n].iter().position(|&c| c == 0)?;
            let name = &b[..end];
            if name.is_empty() || !name.iter().all(|c| c.is_ascii_graphic()) {
                return None;
            }
            self.list.push(TypeCount {
                name: String::from_utf8_lossy(name).into_owned(),
                ..Default::default()
            });
            Some(self.list.len() - 1)
        })();
        self.names.insert(t, found);
        found
    }
}

/// Counts the allocated blocks of one consistent pool by type; false if its free list does not
/// add up.
fn pool_types(p: &[u8], pool: u64, size: usize, carved: usize, types: &mut Types) -> bool {
    let count = u32_at(p, 0) as usize;
    let mut free = vec![false; carved];
    let mut fb = u64_at(p, 8);
    let mut nfree = 0;
    while fb != 0 {
        let Some(off) = fb.checked_sub(pool).map(|o| o as usize) else {
            return false;
        };
        if off < HEADER || off >= HEADER + carved * size || !(off - HEADER).is_multiple_of(size) {
            return false;
        }
        let i = (off - HEADER) / size;
        if free[i] {
            return false;
        }
        free[i] = true;
        nfree += 1;
        fb = u64_at(p, off);
    }
    if carved - nfree != count {
        return false;
    }
    for (i, _) in free.iter().enumerate().filter(|(_, f)| !**f) {
        let b = HEADER + i * size;
        // Plain object, GC-tracked, GC-tracked with a managed dict.
        for obj in [0usize, 16, 32] {
            if obj + 16 > size {
                break;
            }
            let refcnt = u64_at(p, b + obj);
            if refcnt == 0 || refcnt > 1 << 40 {
                continue;
            }
            if let Some(t) = types.index(u64_at(p, b + obj + 8)) {
                types.list[t].count += 1;
                types.list[t].bytes += size as u64;
                break;
            }
        }
    }
    true
}

/// Finds pools in memory handed to it chunk by chunk (so one read of a process can feed both
/// this and the string census).
pub struct Scanner<'a> {
    heap: PyHeap,
    types: Types<'a>,
}

impl<'a> Scanner<'a> {
    /// A scanner resolving type names through `mem`.
    pub fn new(mem: &'a dyn MemRead) -> Self {
        Scanner {
            heap: PyHeap::default(),
            types: Types {
                mem,
                names: HashMap::new(),
                list: Vec::new(),
            },
        }
    }

    /// Looks for pools in `b`, read at `addr`. Pools are aligned to their size, so a chunk
    /// that ends at a 16 KiB-aligned address never cuts one.
    pub fn feed(&mut self, addr: u64, b: &[u8]) {
        let h = &mut self.heap;
        h.bytes_scanned += b.len() as u64;
        let small = POOL_SIZES[1] as u64;
        let first = (addr.div_ceil(small) * small - addr) as usize;
        let mut off = first;
        while off + POOL_SIZES[1] <= b.len() {
            let at = addr + off as u64;
            let mut step = POOL_SIZES[1];
            for ps in POOL_SIZES {
                if !at.is_multiple_of(ps as u64) || off + ps > b.len() {
                    continue;
                }
                let p = &b[off..off + ps];
                if let Some((size, carved)) = header(p, ps) {
                    let count = u32_at(p, 0) as u64;
                    h.pools += 1;
                    h.allocated_blocks += count;
                    h.allocated_bytes += count * size as u64;
                    if !pool_types(p, at, size, carved, &mut self.types) {
                        h.pools_changing += 1;
                    }
                    step = ps;
                    break;
                }
            }
            off += step;
        }
    }

    /// The heap seen, with its most frequent types.
    pub fn finish(self) -> PyHeap {
        let mut h = self.heap;
        let mut list = self.types.list;
        list.retain(|t| t.count > 0);
        list.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
        list.truncate(TOP_TYPES);
        h.types = list;
        h
    }
}

/// Measures the pymalloc heap in `regions` (`(start, end)`), reading at most `budget_bytes`.
pub fn scan(mem: &dyn MemRead, regions: &[(u64, u64)], budget_bytes: u64) -> PyHeap {
    let mut s = Scanner::new(mem);
    crate::procmem::for_each_chunk(mem, regions, budget_bytes, |addr, b| s.feed(addr, b));
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procmem::Image;

    const BASE: u64 = 0x7f00_0000_0000;
    const POOL: usize = 16 << 10;

    /// An image with a `type` type, a `dict` type, and one pool of 64-byte blocks holding
    /// `n` dicts followed by one freed block.
    fn image(n: usize) -> Image {
        let mut meta = vec![0u8; 64];
        let type_addr = BASE + 0x10_0000;
        meta[8..16].copy_from_slice(&type_addr.to_le_bytes());
        meta[24..32].copy_from_slice(&(type_addr + 0x100).to_le_bytes());
        meta.resize(0x100, 0);
        meta.extend_from_slice(b"type\0");
        meta.resize(0x200, 0);
        let dict_addr = type_addr + 0x200;
        let mut dict = vec![0u8; 64];
        dict[8..16].copy_from_slice(&type_addr.to_le_bytes());
        dict[24..32].copy_from_slice(&(dict_addr + 0x80).to_le_bytes());
        dict.resize(0x80, 0);
        dict.extend_from_slice(b"dict\0");
        meta.extend_from_slice(&dict);

        let size = 64usize;
        let mut p = vec![0u8; POOL];
        let carved = n + 1;
        p[0..4].copy_from_slice(&(n as u32).to_le_bytes());
        let free_off = HEADER + n * size;
        p[8..16].copy_from_slice(&(BASE + free_off as u64).to_le_bytes());
        p[36..40].copy_from_slice(&((size / 16 - 1) as u32).to_le_bytes());
        p[40..44].copy_from_slice(&((HEADER + carved * size) as u32).to_le_bytes());
        p[44..48].copy_from_slice(&((POOL - size) as u32).to_le_bytes());
        for i in 0..n {
            let b = HEADER + i * size;
            p[b..b + 8].copy_from_slice(&1u64.to_le_bytes());
            p[b + 8..b + 16].copy_from_slice(&dict_addr.to_le_bytes());
        }
        Image {
            regions: vec![(BASE, p), (type_addr, meta)],
        }
    }

    #[test]
    fn a_consistent_pool_counts_with_its_types() {
        let img = image(10);
        let h = scan(&img, &[(BASE, BASE + POOL as u64)], 1 << 30);
        assert_eq!(
            (h.pools, h.allocated_blocks, h.allocated_bytes),
            (1, 10, 640)
        );
        assert_eq!(h.pools_changing, 0);
        assert_eq!(h.types.len(), 1);
        assert_eq!((h.types[0].name.as_str(), h.types[0].count), ("dict", 10));
    }

    #[test]
    fn a_free_list_that_does_not_add_up_gives_no_types() {
        let mut img = image(10);
        // The header claims one more block than the free list leaves.
        img.regions[0].1[0] = 11;
        let h = scan(&img, &[(BASE, BASE + POOL as u64)], 1 << 30);
        assert_eq!((h.pools, h.pools_changing), (1, 1));
        assert!(h.types.is_empty());
    }

    #[test]
    fn zeros_text_and_noise_hold_no_pools() {
        let mut noise = vec![0u8; 1 << 20];
        let mut x = 0x9e3779b97f4a7c15u64;
        for b in noise.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let text: Vec<u8> = b"jitterscope.memleak.context_info{req=12} "
            .iter()
            .copied()
            .cycle()
            .take(1 << 20)
            .collect();
        for bytes in [vec![0u8; 1 << 20], text, noise] {
            let img = Image {
                regions: vec![(BASE, bytes)],
            };
            let h = scan(&img, &[(BASE, BASE + (1 << 20))], 1 << 30);
            assert_eq!(h.pools, 0);
        }
    }

    #[test]
    fn the_budget_bounds_the_read() {
        let img = image(3);
        let h = scan(&img, &[(BASE, BASE + POOL as u64)], 4096);
        assert_eq!(h.bytes_scanned, 4096);
        assert_eq!(h.pools, 0);
    }

    proptest::proptest! {
        #[test]
        fn mutated_pools_never_panic(at in 0usize..(16 << 10), byte in proptest::prelude::any::<u8>(), n in 1usize..200) {
            let mut img = image(n);
            img.regions[0].1[at] = byte;
            let _ = scan(&img, &[(BASE, BASE + POOL as u64)], 1 << 30);
        }
    }
}
