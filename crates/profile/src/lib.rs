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
