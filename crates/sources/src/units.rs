//! Byte sizes and clock readings as every crate shows and stamps them: one copy each, in the
//! crate all others build on.

/// Bytes in a MiB.
pub const MIB: f64 = 1_048_576.0;

/// `bytes` in MiB, rounded to a tenth (for numbers in sentences).
pub fn mib(bytes: f64) -> f64 {
    (bytes / MIB * 10.0).round() / 10.0
}

/// `bytes` as `12.3 MiB`.
pub fn mib_text(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / MIB)
}

/// Wall-clock time, ns since the Unix epoch (0 if the clock reads before it).
pub fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn mib_rounds_to_a_tenth() {
        assert_eq!(super::mib(1_572_864.0), 1.5);
        assert_eq!(super::mib_text(3.0 * super::MIB), "3.0 MiB");
        assert!(super::wall_ns() > 1_700_000_000_000_000_000);
    }
}
