//! The OOM killer's reports, from the kernel log (`/dev/kmsg`).
//!
//! The counters say that an OOM kill happened (vmstat `oom_kill`, a cgroup's `memory.events`
//! or v1 `memory.oom_control` `oom_kill`); only the kernel's report says whom it killed, in
//! which cgroup and how large the victim was. Two of its records carry that:
//!
//! ```text
//! oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a/b,task=python3,pid=2999,uid=0
//! Memory cgroup out of memory: Killed process 2999 (python3) total-vm:49592kB, anon-rss:39684kB, file-rss:3612kB, shmem-rss:0kB, UID:0 pgtables:140kB oom_score_adj:0
//! ```
//!
//! The first exists since 4.19; the second (its prefix is `Out of memory:` for a host-wide
//! kill) in every kernel the project supports. Each reader of `/dev/kmsg` has its own position
//! in the ring: reading does not consume records from `dmesg`, journald or anyone else
//! (unlike `syslog(2)`'s READ_CLEAR). [`KmsgReader`] starts at the end of the ring, so a
//! recorder reports the kills that happen while it runs, once each.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;

use serde::{Deserialize, Serialize};

use crate::fileio::{ReadError, Root};

/// One process the OOM killer killed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OomKill {
    /// Kernel log time of the report, µs since boot (CLOCK_MONOTONIC).
    pub at_usec: u64,
    /// Victim pid.
    pub pid: u32,
    /// Victim name.
    pub comm: String,
    /// `CONSTRAINT_MEMCG` (a memory cgroup's limit), `CONSTRAINT_NONE` (the host ran out),
    /// `CONSTRAINT_CPUSET`, `CONSTRAINT_MEMORY_POLICY`; None before 4.19.
    pub constraint: Option<String>,
    /// The memory cgroup whose limit was hit (a memcg kill).
    pub oom_memcg: Option<String>,
    /// The victim's memory cgroup.
    pub task_memcg: Option<String>,
    /// Victim's virtual size, bytes.
    pub total_vm_bytes: Option<u64>,
    /// Victim's resident anonymous memory when killed, bytes.
    pub anon_rss_bytes: Option<u64>,
    /// Victim's resident file-backed memory, bytes.
    pub file_rss_bytes: Option<u64>,
    /// Victim's resident shared memory, bytes.
    pub shmem_rss_bytes: Option<u64>,
}

impl OomKill {
    /// The victim's resident memory when killed (anon + file + shmem), when reported.
    pub fn rss_bytes(&self) -> Option<u64> {
        let parts = [
            self.anon_rss_bytes,
            self.file_rss_bytes,
            self.shmem_rss_bytes,
        ];
        parts
            .iter()
            .any(Option::is_some)
            .then(|| parts.iter().flatten().sum())
    }

    /// Whether a memory cgroup's limit caused the kill (not the host running out).
    pub fn memcg(&self) -> bool {
        self.constraint.as_deref() == Some("CONSTRAINT_MEMCG")
            || self.constraint.is_none() && self.oom_memcg.is_some()
    }
}

/// One `/dev/kmsg` record: `<prio>,<seq>,<µs since boot>,<flags>[,...];<text>`, possibly
/// followed by continuation lines (` KEY=value`) that are ignored here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KmsgRecord<'a> {
    /// Sequence number.
    pub seq: u64,
    /// Time, µs since boot.
    pub usec: u64,
    /// The message (first line).
    pub text: &'a str,
}

/// Parses one record; None for anything not in the `/dev/kmsg` format.
pub fn parse_kmsg_record(buf: &[u8]) -> Option<KmsgRecord<'_>> {
    let semi = buf.iter().position(|&c| c == b';')?;
    let head = std::str::from_utf8(&buf[..semi]).ok()?;
    let mut f = head.split(',');
    let _prio = f.next()?;
    let seq = f.next()?.parse().ok()?;
    let usec = f.next()?.parse().ok()?;
    let rest = &buf[semi + 1..];
    let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
    let text = std::str::from_utf8(&rest[..end]).ok()?;
    Some(KmsgRecord { seq, usec, text })
}

/// The value of `key=` in a comma-separated `oom-kill:` line.
fn kv<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(',')
        .find_map(|p| p.strip_prefix(key)?.strip_prefix('='))
}

/// `<n>kB` after `key:` in a `Killed process` line, in bytes.
fn kb(line: &str, key: &str) -> Option<u64> {
    let i = line.find(key)?;
    let v = line[i + key.len()..].trim_start();
    let digits: &str = &v[..v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len())];
    v[digits.len()..]
        .starts_with("kB")
        .then(|| digits.parse::<u64>().ok())?
        .map(|k| k.saturating_mul(1024))
}

/// Builds [`OomKill`]s from records as they come: an `oom-kill:` line opens a kill, the
/// `Killed process` line that follows completes it. A `Killed process` line without an
/// `oom-kill:` line before it (kernels before 4.19) is a kill on its own.
#[derive(Debug, Default)]
pub struct OomParser {
    open: Option<OomKill>,
}

impl OomParser {
    /// Feeds one record's text; returns a kill when the record completes one.
    pub fn feed(&mut self, usec: u64, text: &str) -> Option<OomKill> {
        if let Some(line) = text.strip_prefix("oom-kill:") {
            let pid = kv(line, "pid").and_then(|p| p.parse().ok())?;
            self.open = Some(OomKill {
                at_usec: usec,
                pid,
                comm: kv(line, "task").unwrap_or_default().to_string(),
                constraint: kv(line, "constraint").map(str::to_string),
                oom_memcg: kv(line, "oom_memcg").map(str::to_string),
                task_memcg: kv(line, "task_memcg").map(str::to_string),
                ..Default::default()
            });
            return None;
        }
        let i = text.find("Killed process ")?;
        let rest = &text[i + "Killed process ".len()..];
        let sp = rest.find(' ')?;
        let pid: u32 = rest[..sp].parse().ok()?;
        let after = &rest[sp + 1..];
        let comm = after
            .strip_prefix('(')
            .and_then(|a| a.rfind(')').map(|j| &a[..j]))
            .unwrap_or_default();
        let mut k = match self.open.take() {
            Some(o) if o.pid == pid => o,
            _ => OomKill {
                at_usec: usec,
                pid,
                ..Default::default()
            },
        };
        if !comm.is_empty() {
            k.comm = comm.to_string();
        }
        if k.constraint.is_none() && text.starts_with("Memory cgroup out of memory") {
            k.constraint = Some("CONSTRAINT_MEMCG".into());
        }
        k.total_vm_bytes = kb(after, "total-vm:");
        k.anon_rss_bytes = kb(after, "anon-rss:");
        k.file_rss_bytes = kb(after, "file-rss:");
        k.shmem_rss_bytes = kb(after, "shmem-rss:");
        Some(k)
    }
}

/// The OOM kills in a run of `/dev/kmsg` records, one per line (as a capture stores them).
pub fn parse_kmsg_ooms(buf: &[u8]) -> Vec<OomKill> {
    let mut p = OomParser::default();
    buf.split(|&c| c == b'\n')
        .filter_map(parse_kmsg_record)
        .filter_map(|r| p.feed(r.usec, r.text))
        .collect()
}

/// Follows `/dev/kmsg` from the end of the ring at open.
pub struct KmsgReader {
    file: File,
    parser: OomParser,
    buf: Vec<u8>,
}

/// Most records read in one call: a flood of kernel messages (a driver logging in a loop)
/// must not stall the sampling loop; what is left is read next time.
const MAX_RECORDS: usize = 10_000;

impl KmsgReader {
    /// Opens `<root>/dev/kmsg` and skips what is already in the ring.
    pub fn open(root: &Root) -> Result<KmsgReader, ReadError> {
        let path = root.path("/dev/kmsg");
        let err = |source| ReadError::Io {
            path: path.clone(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(err)?;
        // On /dev/kmsg, SEEK_END places the reader after the newest record; a regular file
        // (a test root) is read from its start instead, as a capture.
        if file.metadata().map(|m| !m.is_file()).unwrap_or(true) {
            file.seek(SeekFrom::End(0)).map_err(err)?;
        }
        Ok(KmsgReader {
            file,
            parser: OomParser::default(),
            buf: vec![0; 8192],
        })
    }

    /// The OOM kills reported since the last call.
    pub fn read_ooms(&mut self) -> Vec<OomKill> {
        let mut out = Vec::new();
        for _ in 0..MAX_RECORDS {
            match self.file.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => {
                    // One read is one record on /dev/kmsg; a captured file may hold many.
                    for line in self.buf[..n].split(|&c| c == b'\n') {
                        if let Some(r) = parse_kmsg_record(line) {
                            out.extend(self.parser.feed(r.usec, r.text));
                        }
                    }
                }
                // EPIPE: records were overwritten before we read them; the next read resumes
                // at the oldest record still there.
                Err(e) if e.kind() == ErrorKind::BrokenPipe => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // EAGAIN: nothing new.
                Err(_) => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/edge");

    #[test]
    fn finds_the_memcg_kill_in_a_captured_report() {
        let buf = std::fs::read(format!("{FX}/kmsg-oom.txt")).unwrap();
        let k = parse_kmsg_ooms(&buf);
        assert_eq!(k.len(), 1, "{k:?}");
        let k = &k[0];
        assert_eq!(k.comm, "python3");
        assert!(k.pid > 1);
        assert!(k.memcg());
        assert_eq!(k.oom_memcg.as_deref(), Some("/jitterscope-fixture-oom"));
        assert_eq!(k.task_memcg.as_deref(), Some("/jitterscope-fixture-oom"));
        // The capture's cgroup limit was 32 MiB: the victim held about that (its RSS counts
        // pages shared with its parent, charged elsewhere).
        let rss = k.rss_bytes().unwrap();
        assert!(rss > 16 << 20 && rss <= 64 << 20, "{rss}");
        assert!(k.at_usec > 0);
    }

    #[test]
    fn host_wide_kill_without_the_oom_kill_line() {
        let k = parse_kmsg_ooms(b"3,10,500,-;Out of memory: Killed process 77 (java) total-vm:100kB, anon-rss:8kB, file-rss:4kB, shmem-rss:0kB\n");
        assert_eq!(k.len(), 1);
        assert_eq!((k[0].pid, k[0].comm.as_str()), (77, "java"));
        assert!(!k[0].memcg());
        assert_eq!(k[0].rss_bytes(), Some(12 * 1024));
    }

    #[test]
    fn reader_reads_a_capture_from_its_start() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("dev")).unwrap();
        std::fs::copy(format!("{FX}/kmsg-oom.txt"), root.path().join("dev/kmsg")).unwrap();
        let mut r = KmsgReader::open(&Root::new(root.path())).unwrap();
        assert_eq!(r.read_ooms().len(), 1);
        assert!(r.read_ooms().is_empty());
    }

    proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_kmsg_ooms(&b);
        }

        #[test]
        fn never_panics_on_mangled_reports(cut in 0usize..4466, junk in "[ -~]{0,40}") {
            let mut b = std::fs::read(format!("{FX}/kmsg-oom.txt")).unwrap();
            b.truncate(cut.min(b.len()));
            b.extend_from_slice(junk.as_bytes());
            let _ = parse_kmsg_ooms(&b);
        }
    }
}
