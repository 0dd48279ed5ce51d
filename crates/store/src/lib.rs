//! Embedded, append-only, crash-safe, time-indexed store of opaque sample payloads.
//!
//! The store never interprets payloads: the model crate encodes one sample per second into bytes and
//! versions that encoding itself. What the store adds is compression across consecutive samples,
//! checksums, a time index, retention, and survival of `kill -9` and full disks.
//!
//! # Layout
//!
//! A store is a directory holding `LOCK` (flocked by the one writer) and pairs of files
//! `seg-<first ts ns, 20 digits>.jss` / `seg-<same>.idx`. See [`format`] for the byte layout.
//!
//! **Lanes.** A record may carry payloads for [`Lane`]s besides its main one. Each lane is a
//! further file of the segment format, `seg-<same>.<letter>.jss` / `.idx`, whose frames end
//! with the main stream's:
//! - [`Lane::Detail`] holds bulk a reader rarely needs (the recorder: the process table, 90%
//!   of a busy host's bytes). [`Reader::range`] joins it to main records by timestamp;
//!   [`Reader::range_main`] never opens it, so reading a day of host metrics decompresses a
//!   tenth of the bytes. A detail lost to damage leaves its record without one.
//! - [`Lane::Signals`] holds a small summary per record (the recorder: key derived series and
//!   event marks), read on its own by [`Reader::range_lane`]: a day of it is a few MB.
//!
//! Every writer run starts a new segment, so a segment torn by a crash is never appended to. Within a
//! segment, records are compressed together in zstd frames of up to [`StoreConfig::frame_records`]
//! records; each append is flushed to the file as a complete zstd block, so it is readable (and
//! survives the process being killed) as soon as [`Writer::append`] returns.

#![deny(missing_docs)]

mod check;
mod decode;
pub mod format;
mod lock;
pub mod perms;
mod reader;
mod writer;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use check::{check_store, rebuild_index, restore_header, salvage, FileCheck, Kind};
pub use format::{Lane, FORMAT_VERSION};
pub use lock::{lock_store, StoreLock};
pub use reader::{merge_touching, Range, RangeStats, Reader, StoreStats};
pub use writer::{write_lane, Writer};

/// One stored sample: its timestamp and the opaque payload bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Sample time, nanoseconds since the Unix epoch (UTC). May go backwards if the clock jumped.
    pub ts_ns: i64,
    /// Payload bytes exactly as passed to [`Writer::append`].
    pub payload: Vec<u8>,
    /// The [`Lane::Detail`] payload passed to [`Writer::append_lanes`], when the read asked for
    /// it ([`Reader::range`]) and it was written and is intact.
    pub detail: Option<Vec<u8>>,
}

/// A file a read gave up on or read around, and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedFile {
    /// The file.
    pub path: PathBuf,
    /// What was wrong, and what the read did about it.
    pub what: String,
}

/// Default [`StoreConfig::segment_span`]: one hour of data per segment.
pub const DEFAULT_SEGMENT_SPAN: Duration = Duration::from_secs(3600);
/// Default [`StoreConfig::segment_max_bytes`]: 64 MiB.
pub const DEFAULT_SEGMENT_MAX_BYTES: u64 = 64 << 20;
/// Default [`StoreConfig::frame_records`]: one minute of one-second samples per zstd frame.
pub const DEFAULT_FRAME_RECORDS: u32 = 60;
/// Default [`StoreConfig::fsync_interval`]: 10 seconds.
pub const DEFAULT_FSYNC_INTERVAL: Duration = Duration::from_secs(10);
/// Default [`StoreConfig::retain`]: 7 days.
pub const DEFAULT_RETAIN: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default [`StoreConfig::max_bytes`]: 2 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;
/// Default [`StoreConfig::compression_level`]: zstd level 3.
pub const DEFAULT_COMPRESSION_LEVEL: i32 = 3;

/// Configuration of a [`Writer`]. Build it with [`StoreConfig::new`] and adjust fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Store directory; created if missing.
    pub dir: PathBuf,
    /// Rotate to a new segment once the records of the current one span this much time
    /// (max ts - min ts). Default [`DEFAULT_SEGMENT_SPAN`].
    pub segment_span: Duration,
    /// Rotate to a new segment once its file reaches this size. Default [`DEFAULT_SEGMENT_MAX_BYTES`].
    pub segment_max_bytes: u64,
    /// Records per zstd frame (and per index entry). Default [`DEFAULT_FRAME_RECORDS`].
    pub frame_records: u32,
    /// Longest time appended data may stay without fdatasync. Default [`DEFAULT_FSYNC_INTERVAL`].
    pub fsync_interval: Duration,
    /// Delete segments whose newest record is older than this. Default [`DEFAULT_RETAIN`].
    pub retain: Duration,
    /// Upper bound on the total size of all segment and index files. Default [`DEFAULT_MAX_BYTES`].
    pub max_bytes: u64,
    /// zstd compression level. Default [`DEFAULT_COMPRESSION_LEVEL`].
    pub compression_level: i32,
    /// Write to a store directory that belongs to another user (refused by default: see
    /// [`perms::writable_store_dir`]).
    pub allow_other_owner: bool,
}

impl StoreConfig {
    /// A configuration for `dir` with every other field at its documented default.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            dir: dir.into(),
            segment_span: DEFAULT_SEGMENT_SPAN,
            segment_max_bytes: DEFAULT_SEGMENT_MAX_BYTES,
            frame_records: DEFAULT_FRAME_RECORDS,
            fsync_interval: DEFAULT_FSYNC_INTERVAL,
            retain: DEFAULT_RETAIN,
            max_bytes: DEFAULT_MAX_BYTES,
            compression_level: DEFAULT_COMPRESSION_LEVEL,
            allow_other_owner: false,
        }
    }
}

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The filesystem is full (ENOSPC), a quota is exceeded (EDQUOT) or a file size limit was hit
    /// (EFBIG). The current segment was truncated to its last complete record and abandoned; the
    /// next append starts a new segment and succeeds once space returns.
    #[error("no space left for the store at {path}: {source}")]
    NoSpace {
        /// File being written.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// Any other I/O error, with the file it concerns.
    #[error("{path}: {source}")]
    Io {
        /// File or directory concerned.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// The store directory is not one to write: a symbolic link, not a directory, or another
    /// user's.
    #[error("{dir} {why}")]
    Refused {
        /// Store directory.
        dir: PathBuf,
        /// Why, and what to do.
        why: String,
    },
    /// Another writer holds the store's lock.
    #[error("store {dir} is already being written by another process (flock on LOCK is held)")]
    Locked {
        /// Store directory.
        dir: PathBuf,
    },
    /// A segment or index file has a format version this build does not know.
    #[error(
        "{path}: unsupported store format version {version} (this build reads version {supported})"
    )]
    UnsupportedVersion {
        /// File with the unknown version.
        path: PathBuf,
        /// Version found in the file.
        version: u16,
        /// Version this build reads and writes.
        supported: u16,
    },
    /// A segment file does not start with the segment magic bytes.
    #[error("{path}: not a jitterscope segment file (bad magic)")]
    BadMagic {
        /// File concerned.
        path: PathBuf,
    },
    /// A payload is larger than [`format::MAX_PAYLOAD_BYTES`].
    #[error("payload of {len} bytes exceeds the store's limit of {max} bytes")]
    PayloadTooLarge {
        /// Payload length.
        len: usize,
        /// Limit.
        max: usize,
    },
}

impl StoreError {
    /// True for [`StoreError::NoSpace`], so callers can pause and log once.
    pub fn is_no_space(&self) -> bool {
        matches!(self, StoreError::NoSpace { .. })
    }

    fn io(path: &Path, source: io::Error) -> Self {
        if is_no_space_errno(&source) {
            StoreError::NoSpace {
                path: path.to_path_buf(),
                source,
            }
        } else {
            StoreError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}

fn is_no_space_errno(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG)
    )
}

/// Result alias of the store.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
