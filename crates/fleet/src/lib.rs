//! Fleet export: the recorder's data in the engines a fleet already runs.
//!
//! - [`remote_write`]: per-second samples to any Prometheus remote-write receiver
//!   (Prometheus, VictoriaMetrics, Mimir, Thanos, Cortex), with the store as write-ahead log.

pub mod clickhouse;
pub mod cursor;
pub mod inventory;
pub mod inventory_query;
pub mod query;
pub mod remote_write;
pub mod url;
