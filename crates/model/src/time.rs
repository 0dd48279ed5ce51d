//! How times are shown: every command and report prints them the same way.

/// `ns` since the Unix epoch as RFC 3339 UTC with milliseconds (`2026-11-22T07:12:48.399Z`);
/// a time chrono cannot represent is printed as the plain number.
pub fn rfc3339(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nsec = ns.rem_euclid(1_000_000_000) as u32;
    match chrono::DateTime::from_timestamp(secs, nsec) {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => ns.to_string(),
    }
}

/// The times a store can hold, in whole seconds: nanoseconds since the epoch in an `i64`.
/// Every time argument outside it is refused with this range, never as a malformed time.
pub const SUPPORTED_RANGE: &str = "1677-09-21T00:12:44Z to 2262-04-11T23:47:16Z";

/// The end of [`SUPPORTED_RANGE`].
pub const LATEST: &str = "2262-04-11T23:47:16Z";

/// The largest epoch seconds inside [`SUPPORTED_RANGE`] (epoch seconds are never negative).
pub const MAX_EPOCH_SECS: f64 = 9_223_372_036.0;

/// A duration the recorder measured on itself (a collector's time, a collection's, its
/// lateness), kept to the nearest µs. Below that it is clock noise: on 100 samples of
/// `bench/busy.sh`'s load, the per-collector times took 9.3 KB of the store with their ns digits
/// and 7.2 KB without (`examples/store_bytes.rs`, the `collector_ns` part).
pub const fn self_timing_ns(ns: u64) -> u64 {
    ns.saturating_add(500) / 1000 * 1000
}

#[cfg(test)]
mod tests {
    #[test]
    fn self_timings_round_to_the_nearest_microsecond() {
        use super::self_timing_ns as r;
        assert_eq!(
            [r(0), r(499), r(500), r(1_499), r(2_345_678)],
            [0, 0, 1_000, 1_000, 2_346_000]
        );
        assert_eq!(r(u64::MAX), u64::MAX / 1000 * 1000);
    }

    #[test]
    fn the_supported_range_is_what_nanoseconds_hold() {
        let (lo, hi) = super::SUPPORTED_RANGE.split_once(" to ").unwrap();
        assert_eq!(hi, super::LATEST);
        let ns = |t: &str| {
            chrono::DateTime::parse_from_rfc3339(t)
                .unwrap()
                .timestamp_nanos_opt()
        };
        let second = chrono::Duration::seconds(1);
        let shift = |t: &str, d: chrono::Duration| {
            (chrono::DateTime::parse_from_rfc3339(t).unwrap() + d).timestamp_nanos_opt()
        };
        assert!(ns(lo).is_some() && shift(lo, -second).is_none());
        assert!(ns(hi).is_some() && shift(hi, second).is_none());
        assert_eq!(
            ns(hi).unwrap() / 1_000_000_000,
            super::MAX_EPOCH_SECS as i64
        );
    }

    #[test]
    fn formats_and_falls_back() {
        assert_eq!(super::rfc3339(1_500_000_000), "1970-01-01T00:00:01.500Z");
        assert_eq!(super::rfc3339(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(super::rfc3339(i64::MAX), "2262-04-11T23:47:16.854Z");
    }
}
