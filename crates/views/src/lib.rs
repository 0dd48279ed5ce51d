//! The terminal views: `top` (live) and `replay` (the recorded past) share one screen.
//!
//! - [`snapshot`]: the values one screen shows for one sample, through the metric registry.
//! - [`source`]: where samples come from (a store, followed or replayed; the collectors
//!   directly) and how the shown time moves.
//! - [`app`]: the screen's state and its keys, without a terminal.
//! - [`render`]: drawing an [`app::App`] with ratatui.
//! - [`term`]: the terminal loop.

pub mod analysis;
pub mod app;
pub mod render;
pub mod snapshot;
pub mod source;
pub mod term;
