//! Episode detection as the recorder runs, below the analysis: `record` and `store check
//! --repair` write what [`Online`] returns (each sample's signal values and episode marks) to
//! the store's signals lane, and `events` runs the same [`SpikeDetector`] and [`LeakDetector`]
//! over any range. Nothing here reads a rule or a diagnosis, so the recorder's path to the
//! store holds no analysis crate; the leak test ([`trend`]) is shared with the `memory.leak`
//! rule, which judges a whole window with it. How the detectors work is in
//! `jitterscope_diagnose::events`.

#![deny(missing_docs)]

pub mod detectors;
pub mod online;
pub mod stats;
pub mod trend;

pub use detectors::{Change, Episode, LeakDetector, SpikeDetector, GAP, WINDOW};
pub use online::Online;

/// Episode kind of leak trends.
pub const LEAK_KIND: &str = "leak-trend";
