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
    file: File,
}

impl ProcMem {
    /// Opens `/proc/<pid>/mem`. Needs the right to ptrace the process (same user and YAMA
    /// `ptrace_scope` 0, or `CAP_SYS_PTRACE`); the error says which check failed.
    pub fn open(pid: u32) -> io::Result<ProcMem> {
        Ok(ProcMem {
            file: File::open(format!("/proc/{pid}/mem"))?,
        })
    }
}

impl MemRead for ProcMem {
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read_at(buf, addr)
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
