//! The always-on stack sampler and what reads its slices back.
//!
//! - [`sampler`]: perf_event `cpu-clock` per CPU, drained by a thread, cut per interval; the
//!   recorder's [`sampler::ProfileCollector`].
//! - [`capture`]: perf records → interned [`jitterscope_model::profile::Profile`] slices, with
//!   what names their frames captured while the processes live ([`system`], over the mapping
//!   tables of [`maps`]).
//! - [`window`]: a window of stored slices → filtered, named stacks → folded lines, SVG,
//!   hottest functions; [`pprof`]: the same as a pprof profile.
#![deny(missing_docs)]

pub mod capture;
pub mod maps;
pub mod pprof;
pub mod python;
pub mod sampler;
pub mod system;
pub mod unwind;
pub mod window;

/// Frames kept per stack part; deeper stacks are cut at the root end. Garbage frame pointers
/// can produce chains of the kernel's maximum (127) that are noise. Both the capture and the
/// DWARF unwinder cut at it, so it is theirs in common, here.
pub const MAX_DEPTH: usize = 64;
