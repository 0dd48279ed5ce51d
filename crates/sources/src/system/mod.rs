//! System-wide /proc files.

pub mod pressure;
