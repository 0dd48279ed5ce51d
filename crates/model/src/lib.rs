//! The typed sample of one interval, how it is collected, encoded, and turned into metrics.
//!
//! - [`sample::Sample`]: raw counters of one interval, exactly as the sources read them.
//! - [`collector`]: the `Collector` trait and the one place every source is registered.
//! - [`codec`]: the versioned, evolvable payload encoding the store keeps.
//! - [`stored`]: samples written to and read back from the store, with one policy for damage.
//! - [`registry`] and [`metrics`]: every metric described once (name, unit, kind, help) with
//!   how it is derived from two consecutive samples, each a named static that every consumer
//!   (dump, rules, signals, views, charts, lab checks) refers to.
//! - [`signals`]: the key series the recorder derives into the signals lane, and its records.
#![deny(missing_docs)]

pub mod cancel;
pub mod caps;
pub mod codec;
pub mod collector;
pub mod derive;
pub mod eval;
pub mod export;
pub mod glob;
pub mod metrics;
pub mod openmetrics;
pub mod profile;
pub mod registry;
pub mod sample;
pub mod signals;
pub mod sources;
pub mod stored;
pub mod time;
pub mod tracers;

pub use registry::{Kind, MetricDef, Unit};
pub use sample::Sample;
