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

#[cfg(test)]
mod tests {
    #[test]
    fn formats_and_falls_back() {
        assert_eq!(super::rfc3339(1_500_000_000), "1970-01-01T00:00:01.500Z");
        assert_eq!(super::rfc3339(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(super::rfc3339(i64::MAX), "2262-04-11T23:47:16.854Z");
    }
}
