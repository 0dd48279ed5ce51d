//! Per-process /proc/<pid> files.
