//! System-wide /proc files (filled in by the system parsers).
