//! Readers and parsers of the kernel's text interfaces: /proc, /sys and cgroupfs.
//!
//! Every reader is rooted at a [`Root`] (the real `/` in production, a recorded tree under
//! `tests/fixtures/` in tests), parses into plain serde-serializable structs that hold *raw*
//! counters exactly as the kernel reports them, and never derives rates: that is the model's job,
//! so improved derivations re-run over old recordings.
//!
//! Missing data has one policy, [`ReadError::is_missing`]: a file or process that is absent is
//! "not collected", never an error that stops a sample.
#![deny(missing_docs)]

pub mod cgroup;
pub mod fileio;
pub mod process;
pub mod redact;
pub mod smaps;
pub mod system;
pub mod task_records;
pub mod units;

pub use fileio::{ParseError, ReadError, Root};
