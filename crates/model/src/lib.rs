//! The typed sample of one interval, how it is collected, encoded, and turned into metrics.
//!
//! - [`sample::Sample`]: raw counters of one interval, exactly as the sources read them.
//! - [`collector`]: the `Collector` trait and the one place every source is registered.
//! - [`codec`]: the versioned, evolvable payload encoding the store keeps.
//! - [`registry`]: every metric described once (name, unit, kind, help) with how it is derived
//!   from two consecutive samples; dump, status lines and (later) rules and views read from it.
#![deny(missing_docs)]

pub mod codec;
pub mod collector;
pub mod derive;
pub mod glob;
pub mod metrics;
pub mod openmetrics;
pub mod profile;
pub mod registry;
pub mod sample;
pub mod sources;
pub mod time;
pub mod tracers;

pub use registry::{Kind, MetricDef, Unit};
pub use sample::Sample;
