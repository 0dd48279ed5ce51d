//! Reading another process's memory through `/proc/<pid>/mem`. The target keeps running: each
//! read holds its mmap lock for reading only as long as the copy of that chunk takes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Memory that can be read at virtual addresses: a live process or, in tests, an image.
pub trait MemRead {
    /// Reads up to `buf.len()` bytes at `addr`; fewer (or an error) where the range is not
    /// mapped or not readable.
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> io::Result<usize>;
}

/// A live process's memory.
pub struct ProcMem {
    pid: u32,
    // Opened to check access up front: it fails with the error the reads would give.
    file: File,
}

impl ProcMem {
    /// Opens `/proc/<pid>/mem`. Needs the right to ptrace the process (same user and YAMA
    /// `ptrace_scope` 0, or `CAP_SYS_PTRACE`); the error says which check failed.
    pub fn open(pid: u32) -> io::Result<ProcMem> {
        Ok(ProcMem {
            pid,
            file: File::open(format!("/proc/{pid}/mem"))?,
        })
    }
}

impl MemRead for ProcMem {
    /// Reads with process_vm_readv: it takes the target's mmap lock once per 16 pages, where
    /// a read of /proc/<pid>/mem takes it once per page, and a target that maps and unmaps
    /// memory at a high rate waits for that lock each time. Falls back to /proc/<pid>/mem.
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
        let e = match jitterscope_sources::fileio::read_process_memory(self.pid, addr, buf) {
            Ok(n) => return Ok(n),
            Err(e) => e,
        };
        if e.raw_os_error() == Some(libc::ENOSYS) {
            return self.file.read_at(buf, addr);
        }
        Err(e)
    }
}

/// A memory image: byte regions at addresses (tests, and memory captured into fixtures).
#[derive(Debug, Default, Clone)]
pub struct Image {
    /// `(start address, bytes)`, not overlapping.
    pub regions: Vec<(u64, Vec<u8>)>,
}

impl MemRead for Image {
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
        for (start, bytes) in &self.regions {
            let end = start + bytes.len() as u64;
            if addr >= *start && addr < end {
                let off = (addr - start) as usize;
                let n = buf.len().min(bytes.len() - off);
                buf[..n].copy_from_slice(&bytes[off..off + n]);
                return Ok(n);
            }
        }
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
}

/// Bytes per read of a target's memory: big enough that a scan is a few thousand reads, small
/// enough that no read holds the target's mmap lock for long.
pub const CHUNK: usize = 1 << 20;

/// What [`for_each_chunk`] read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Read {
    /// Bytes read.
    pub scanned: u64,
    /// Bytes of the regions the budget left unread.
    pub skipped: u64,
}

/// Reads `regions` (`(start, end)`) in order, at most `budget` bytes, handing each chunk to
/// `f` with its address. Chunks end at [`CHUNK`]-aligned addresses (or a region's end), so
/// anything aligned to a power of two up to `CHUNK` (pymalloc pools) never straddles two.
/// Unreadable pages (guard pages, ranges unmapped since smaps was read) are skipped.
pub fn for_each_chunk(
    mem: &dyn MemRead,
    regions: &[(u64, u64)],
    budget: u64,
    mut f: impl FnMut(u64, &[u8]),
) -> Read {
    let mut r = Read::default();
    let mut buf = vec![0u8; CHUNK];
    let mut left = budget;
    for &(start, end) in regions {
        let mut addr = start;
        while addr < end {
            if left == 0 {
                r.skipped += end - addr;
                break;
            }
            let boundary = (addr / CHUNK as u64 + 1) * CHUNK as u64;
            let want = (boundary.min(end) - addr).min(left) as usize;
            match mem.read_at(addr, &mut buf[..want]) {
                Ok(n) if n > 0 => {
                    f(addr, &buf[..n]);
                    r.scanned += n as u64;
                    left -= n as u64;
                    addr += n as u64;
                }
                _ => addr = (addr + 4096) & !4095,
            }
        }
    }
    r
}
