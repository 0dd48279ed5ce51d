//! Memory-leak analysis of a running process, from outside: no ptrace stop, no code injected.
//! Everything is read from `/proc/<pid>/{smaps,maps,mem,cmdline,exe}`.

#![deny(missing_docs)]

pub mod analyze;
pub mod census;
pub mod growth;
pub mod procmem;
pub mod pymalloc;
pub mod runtime;

pub use analyze::{run, Error, Options, Report, Snapshot, Target};
