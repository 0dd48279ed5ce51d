//! The store (being written).
