//! File access shared by every reader: the root directory, a buffer-reusing read, and the error
//! type with the single missing-data policy.

use std::path::{Path, PathBuf};

/// The directory every kernel path is resolved under: `/` on a live host, a fixture tree in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root(PathBuf);

impl Default for Root {
    fn default() -> Self {
        Root(PathBuf::from("/"))
    }
}

impl Root {
    /// A root at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Root(dir.into())
    }

    /// The root directory itself.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// Resolves an absolute kernel path (`/proc/stat`) under this root.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        let rel = abs.strip_prefix("/").unwrap_or(abs);
        self.0.join(rel)
    }
}

/// A parse failure inside one file, before the path is known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {msg}")]
pub struct ParseError {
    /// 1-based line number where parsing failed (0 when not line-oriented).
    pub line: usize,
    /// What was wrong.
    pub msg: String,
}

impl ParseError {
    /// A parse error at `line` (1-based).
    pub fn new(line: usize, msg: impl Into<String>) -> Self {
        ParseError {
            line,
            msg: msg.into(),
        }
    }
}

/// Why a reader could not return data.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Reading the file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file was read but its content did not parse.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and why.
        source: ParseError,
    },
}

impl ReadError {
    /// The one missing-data policy: the file does not exist on this kernel (ENOENT), the device
    /// or feature is absent (ENODEV, EOPNOTSUPP, e.g. PSI disabled), or the process vanished
    /// between listing and reading (ESRCH). Such data is "not collected", never a failure.
    pub fn is_missing(&self) -> bool {
        match self {
            ReadError::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::NotFound
                    || matches!(
                        source.raw_os_error(),
                        Some(libc::ENOENT | libc::ENODEV | libc::ESRCH | libc::EOPNOTSUPP)
                    )
            }
            ReadError::Parse { .. } => false,
        }
    }

    /// True when the failure is a permission problem (not root, YAMA, hidepid).
    pub fn is_permission(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied)
    }

    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ReadError::Io { path, .. } | ReadError::Parse { path, .. } => path,
        }
    }
}

/// Turns a missing file into `Ok(None)` and keeps every other outcome.
pub fn optional<T>(r: Result<T, ReadError>) -> Result<Option<T>, ReadError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_missing() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads a whole file into `buf` (cleared first). procfs and cgroupfs files report size 0, so
/// this reads until EOF rather than trusting metadata; the buffer is reused across calls so the
/// sampling loop does not allocate per file.
pub fn read_into(path: &Path, buf: &mut Vec<u8>) -> Result<(), ReadError> {
    buf.clear();
    let f = std::fs::File::open(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    fill(&f, buf, false).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads `f` to its end into `buf` (which the caller cleared): with read(2) from where the
/// file stands, or, when `from_start`, with pread(2) from offset 0 whatever it read before.
///
/// A plain read loop into the buffer's spare capacity rather than read_to_end: read_to_end
/// asks for the file size first (statx + lseek), two wasted syscalls per file on procfs and
/// cgroupfs where the size is 0, and zero-filling the buffer before each read showed up as 3%
/// of the recorder's CPU; the cgroup walk alone reads ~6 files per cgroup every second.
pub(crate) fn fill(f: &std::fs::File, buf: &mut Vec<u8>, from_start: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    loop {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(buf.capacity().max(4096));
        }
        let at = buf.len() as libc::off_t;
        let spare = buf.spare_capacity_mut();
        // SAFETY: read(2) and pread(2) write at most `spare.len()` bytes into the spare
        // capacity, which is valid for writes, and return how many they wrote; only those are
        // exposed by set_len.
        let n = unsafe {
            if from_start {
                libc::pread(fd, spare.as_mut_ptr().cast(), spare.len(), at)
            } else {
                libc::read(fd, spare.as_mut_ptr().cast(), spare.len())
            }
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            buf.clear();
            return Err(e);
        }
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the kernel initialised the first `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n as usize) };
    }
}

/// procfs's `f_type` (statfs(2)).
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// The procfs files a reader reads every interval, kept open and read again from offset 0.
///
/// Why: opening a /proc file walks its path and allocates a file each time. For the 14
/// system files the recorder reads every second, reading all of them took 90 µs of CPU
/// opening each, 64 µs through held descriptors (this host, 5,000 rounds). A procfs file read
/// from offset 0 again is generated afresh (seq_file restarts at position 0; sysctl files read
/// at the offset asked), so the content is what a new open would read. The price is a
/// descriptor and the kernel's seq_file buffer per file, which is why the cgroup walk (a dozen
/// files per cgroup, thousands of cgroups) does not hold its files.
///
/// Only procfs files are held: a regular file (a fixture tree) may be replaced by another file
/// at its path, which a held descriptor would not see. Any failure on a held descriptor drops
/// it and reads the file the usual way.
#[derive(Debug, Default)]
pub struct HeldFiles {
    files: std::collections::HashMap<PathBuf, std::fs::File>,
}

impl HeldFiles {
    /// Like [`read_into`], through a held descriptor where there is one (or can be one).
    pub fn read_into(&mut self, path: &Path, buf: &mut Vec<u8>) -> Result<(), ReadError> {
        buf.clear();
        if let Some(f) = self.files.get(path) {
            if fill(f, buf, true).is_ok() {
                return Ok(());
            }
            self.files.remove(path);
            buf.clear();
        }
        let f = std::fs::File::open(path).map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if !on_procfs(&f) {
            return fill(&f, buf, false).map_err(|source| ReadError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
        match fill(&f, buf, true) {
            Ok(()) => {
                self.files.insert(path.to_path_buf(), f);
                Ok(())
            }
            // A file that refuses pread (none of the system files does) is read as before.
            Err(_) => read_into(path, buf),
        }
    }

    /// Like [`read_parse`], through [`HeldFiles::read_into`].
    pub fn read_parse<T>(
        &mut self,
        path: &Path,
        buf: &mut Vec<u8>,
        parse: impl FnOnce(&[u8]) -> Result<T, ParseError>,
    ) -> Result<T, ReadError> {
        self.read_into(path, buf)?;
        parse(buf).map_err(|source| ReadError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    /// How many files are held open.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

fn on_procfs(f: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: statfs is plain data, written by the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a buffer that outlives the call.
    let r = unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) };
    r == 0 && st.f_type as i64 == PROC_SUPER_MAGIC
}

/// Reads `path` and parses it with `parse`, attaching the path to any error.
pub fn read_parse<T>(
    path: &Path,
    buf: &mut Vec<u8>,
    parse: impl FnOnce(&[u8]) -> Result<T, ParseError>,
) -> Result<T, ReadError> {
    read_into(path, buf)?;
    parse(buf).map_err(|source| ReadError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses an unsigned decimal field, with a line number for the error.
pub fn parse_u64(s: &[u8], line: usize, what: &str) -> Result<u64, ParseError> {
    let s = trim_ascii(s);
    if s.is_empty() || s.len() > 20 {
        return Err(ParseError::new(line, format!("{what}: not a number")));
    }
    let mut v: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return Err(ParseError::new(
                line,
                format!("{what}: not a number: {:?}", String::from_utf8_lossy(s)),
            ));
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add((c - b'0') as u64))
            .ok_or_else(|| ParseError::new(line, format!("{what}: number overflows u64")))?;
    }
    Ok(v)
}

/// Parses a signed decimal field.
pub fn parse_i64(s: &[u8], line: usize, what: &str) -> Result<i64, ParseError> {
    let s = trim_ascii(s);
    match s.first() {
        Some(b'-') => {
            let v = parse_u64(&s[1..], line, what)?;
            if v > i64::MAX as u64 + 1 {
                return Err(ParseError::new(
                    line,
                    format!("{what}: number overflows i64"),
                ));
            }
            Ok((v as i128).wrapping_neg() as i64)
        }
        _ => {
            let v = parse_u64(s, line, what)?;
            i64::try_from(v)
                .map_err(|_| ParseError::new(line, format!("{what}: number overflows i64")))
        }
    }
}

/// Trims ASCII whitespace from both ends.
pub fn trim_ascii(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end]
}

/// Splits on ASCII whitespace, skipping empty pieces.
pub fn fields(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|c| c.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
}

/// Iterates lines with 1-based numbers.
pub fn lines(s: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    s.split(|&c| c == b'\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.is_empty())
}

/// Lossy UTF-8 to an owned string (kernel names are ASCII in practice; never panic on bytes).
pub fn lossy(s: &[u8]) -> String {
    String::from_utf8_lossy(s).into_owned()
}

/// Reads another process's memory at `addr` into `buf` with one `process_vm_readv` call (the
/// target's mmap lock once per 16 pages, where `/proc/<pid>/mem` takes it once per page): the
/// bytes read, or the call's error (`ENOSYS` where the kernel lacks it, `EPERM` without
/// ptrace access, `EFAULT` for an unmapped address).
pub fn read_process_memory(pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which we own mutably for the call; the remote address
    // is only read by the kernel, from the other process.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b" 42\n", 1, "x").unwrap(), 42);
        assert!(parse_u64(b"18446744073709551616", 1, "x").is_err());
        assert_eq!(
            parse_u64(b"18446744073709551615", 1, "x").unwrap(),
            u64::MAX
        );
        assert_eq!(parse_i64(b"-1", 1, "x").unwrap(), -1);
        assert_eq!(
            parse_i64(b"-9223372036854775808", 1, "x").unwrap(),
            i64::MIN
        );
        assert!(parse_i64(b"-9223372036854775809", 1, "x").is_err());
        assert!(parse_u64(b"", 1, "x").is_err());
        assert!(parse_u64(b"1a", 1, "x").is_err());
    }

    #[test]
    fn root_resolves_under_dir() {
        let r = Root::new("/tmp/fx");
        assert_eq!(r.path("/proc/stat"), PathBuf::from("/tmp/fx/proc/stat"));
        assert_eq!(
            Root::default().path("/proc/stat"),
            PathBuf::from("/proc/stat")
        );
    }

    #[test]
    fn reads_procfs_and_large_files_whole() {
        let mut buf = Vec::new();
        // procfs reports size 0; the content must still come back whole.
        read_into(Path::new("/proc/self/status"), &mut buf).unwrap();
        assert!(buf.starts_with(b"Name:") && buf.ends_with(b"\n"));
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("big"), &big).unwrap();
        read_into(&dir.path().join("big"), &mut buf).unwrap();
        assert_eq!(buf, big);
        // Reuse keeps nothing of the previous content.
        std::fs::write(dir.path().join("small"), b"abc").unwrap();
        read_into(&dir.path().join("small"), &mut buf).unwrap();
        assert_eq!(buf, b"abc");
    }

    #[test]
    fn held_procfs_files_are_read_afresh_from_their_start() {
        // A thread of its own, so renaming it touches no other test; /proc/thread-self/comm is
        // procfs, held, and its content is what this thread sets.
        std::thread::spawn(|| {
            let name = |n: &str| {
                let c = std::ffi::CString::new(n).unwrap();
                // SAFETY: a NUL-terminated name that outlives the call.
                assert_eq!(unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr()) }, 0);
            };
            let comm = Path::new("/proc/thread-self/comm");
            let mut held = HeldFiles::default();
            let mut buf = Vec::new();
            for n in ["js-held-long", "x", "js-held-b"] {
                name(n);
                held.read_into(comm, &mut buf).unwrap();
                assert_eq!(buf, format!("{n}\n").as_bytes());
                assert_eq!(held.len(), 1, "the file is held after its first read");
            }
            // A file longer than one read, twice through the held descriptor: both whole, and
            // the same as a new open reads.
            let crypto = Path::new("/proc/crypto");
            let mut fresh = Vec::new();
            if read_into(crypto, &mut fresh).is_ok() && fresh.len() > 4096 {
                let mut small = Vec::new();
                for _ in 0..2 {
                    held.read_into(crypto, &mut small).unwrap();
                    assert_eq!(small, fresh);
                }
                assert_eq!(held.len(), 2);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn held_files_are_procfs_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut held = HeldFiles::default();
        let mut buf = Vec::new();
        std::fs::write(&p, b"first").unwrap();
        held.read_into(&p, &mut buf).unwrap();
        assert_eq!(buf, b"first");
        // Replaced at its path, as a fixture may be: the new file is read.
        std::fs::write(dir.path().join("g"), b"second").unwrap();
        std::fs::rename(dir.path().join("g"), &p).unwrap();
        held.read_into(&p, &mut buf).unwrap();
        assert_eq!(buf, b"second");
        assert!(held.is_empty());
        let e = held
            .read_into(&dir.path().join("none"), &mut buf)
            .unwrap_err();
        assert!(e.is_missing());
        assert!(held.is_empty());
    }

    #[test]
    fn missing_policy() {
        let e = read_into(Path::new("/nonexistent/x"), &mut Vec::new()).unwrap_err();
        assert!(e.is_missing());
        assert!(optional::<()>(Err(e)).unwrap().is_none());
    }

    proptest::proptest! {
        #[test]
        fn numbers_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = parse_u64(&b, 1, "x");
            let _ = parse_i64(&b, 1, "x");
        }
    }
}
