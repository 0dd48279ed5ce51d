//! Time arguments: RFC 3339, epoch seconds, `HH:MM[:SS]` (today, local time), `now`, and a
//! time back from now as `-10m`, `10m ago` or `10m`; and [`Window`], the one set of window
//! flags every command that reads a window of the store takes.

use std::time::Duration;

use chrono::{DateTime, Local, NaiveTime, TimeZone, Utc};
use clap::Args;
use jitterscope_model::time::{LATEST, MAX_EPOCH_SECS, SUPPORTED_RANGE};

/// The window a command reads: `--since D` back from `--to` (now by default), or `--from T`
/// to `--to`. Each command has its own default length for when neither `--from` nor `--since`
/// is given; it says so in its help.
#[derive(Args, Debug, Clone, Default)]
pub struct Window {
    /// Start: RFC 3339 (2026-11-22T10:00:00Z), epoch seconds, HH:MM[:SS] (today, local),
    /// 'now', or back from now: '-10m', '10m ago', '10m'.
    #[arg(long, conflicts_with = "since", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// End (the same forms) [default: now].
    #[arg(long, allow_hyphen_values = true)]
    pub to: Option<String>,
    /// The window's length, back from --to: '10m', '1h30m' ('10m ago' is the same).
    #[arg(long, value_parser = parse_since)]
    pub since: Option<Duration>,
}

impl Window {
    /// The window as nanoseconds since the epoch, `[from, to)`; `default` is its length when
    /// neither `--from` nor `--since` gives it.
    pub fn resolve(&self, default: Duration, now: DateTime<Utc>) -> Result<(i64, i64), String> {
        let to = parse_time(self.to.as_deref().unwrap_or("now"), now)?;
        let from = match &self.from {
            Some(f) => parse_time(f, now)?,
            None => before(to, self.since.unwrap_or(default), "--since")?,
        };
        Ok((from, to))
    }
}

/// `--since`: a duration, with or without a trailing `ago`.
pub fn parse_since(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    parse_duration(t.strip_suffix("ago").unwrap_or(t))
}

/// Parses a time argument into nanoseconds since the epoch (UTC), relative to `now`.
pub fn parse_time(s: &str, now: DateTime<Utc>) -> Result<i64, String> {
    let t = s.trim();
    let bad = || {
        format!(
            "invalid time {s:?}: use RFC 3339 (2026-11-22T10:00:00Z), epoch seconds, HH:MM:SS \
             (today, local), 'now', '-10m' or '10m ago'"
        )
    };
    // A well-formed time the store cannot hold must not be called malformed.
    let beyond = || format!("time {s:?} is outside the supported range, {SUPPORTED_RANGE}");
    if t.is_empty() {
        return Err(bad());
    }
    if t == "now" {
        return to_ns(now).ok_or_else(beyond);
    }
    // Back from now: `10m ago`, `-10m`.
    let back = |d: &str| -> Result<i64, String> {
        let d =
            humantime::parse_duration(d.trim()).map_err(|e| format!("invalid time {s:?}: {e}"))?;
        let d = chrono::Duration::from_std(d).map_err(|_| beyond())?;
        now.checked_sub_signed(d).and_then(to_ns).ok_or_else(beyond)
    };
    if let Some(ago) = t.strip_suffix("ago") {
        return back(ago);
    }
    if let Some(d) = t.strip_prefix('-') {
        return back(d);
    }
    if let Ok(dt) = DateTime::parse_from_rfc3339(t) {
        return to_ns(dt.with_timezone(&Utc)).ok_or_else(beyond);
    }
    if t.bytes().all(|c| c.is_ascii_digit() || c == b'.')
        && t.bytes().filter(|&c| c == b'.').count() <= 1
    {
        let secs: f64 = t.parse().map_err(|_| bad())?;
        if !(0.0..=MAX_EPOCH_SECS).contains(&secs) {
            return Err(format!(
                "epoch seconds {s:?} are outside the supported range, 0 to {MAX_EPOCH_SECS} \
                 (1970-01-01T00:00:00Z to {LATEST})"
            ));
        }
        // Whole seconds exactly: a double holds 53 bits, and seconds near the range's end
        // times 1e9 need 63.
        if let Ok(whole) = t.parse::<i64>() {
            return Ok(whole * 1_000_000_000);
        }
        return Ok((secs * 1e9).round() as i64);
    }
    for fmt in ["%H:%M:%S%.f", "%H:%M:%S", "%H:%M"] {
        if let Ok(tod) = NaiveTime::parse_from_str(t, fmt) {
            let today = now.with_timezone(&Local).date_naive();
            let local = Local
                .from_local_datetime(&today.and_time(tod))
                .earliest()
                .ok_or_else(|| format!("invalid time {s:?}: does not exist today (DST change)"))?;
            return to_ns(local.with_timezone(&Utc)).ok_or_else(bad);
        }
    }
    // A bare duration (`10m`; a unit is what tells it from epoch seconds) is back from now,
    // as `--since` reads it.
    if t.bytes().any(|c| c.is_ascii_alphabetic()) && humantime::parse_duration(t).is_ok() {
        return back(t);
    }
    Err(bad())
}

fn to_ns(t: DateTime<Utc>) -> Option<i64> {
    t.timestamp_nanos_opt()
}

/// `t` less `d`: the start of a window of length `d` ending at `t`. `what` names the argument
/// that asked for it, for the error when the start falls outside the supported range (a
/// duration of centuries is accepted by the parser, and would otherwise wrap around).
pub fn before(t: i64, d: Duration, what: &str) -> Result<i64, String> {
    i64::try_from(d.as_nanos())
        .ok()
        .and_then(|d| t.checked_sub(d))
        .ok_or_else(|| {
            format!(
                "{what} {} reaches outside the supported range of times, {SUPPORTED_RANGE}",
                humantime::format_duration(d)
            )
        })
}

/// `t` plus `d`; see [`before`].
pub fn after(t: i64, d: Duration, what: &str) -> Result<i64, String> {
    i64::try_from(d.as_nanos())
        .ok()
        .and_then(|d| t.checked_add(d))
        .ok_or_else(|| {
            format!(
                "{what} {} reaches outside the supported range of times, {SUPPORTED_RANGE}",
                humantime::format_duration(d)
            )
        })
}

/// Parses a size such as `2GiB`, `500MB`, `1048576`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: expected e.g. 2GiB, 500MB or a byte count"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024.0 * 1024.0,
        "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "ti" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        u => return Err(format!("invalid size {s:?}: unknown unit {u:?}")),
    };
    let v = n * mult;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("invalid size {s:?}: out of range"));
    }
    Ok(v as u64)
}

/// Parses a duration such as `1s`, `100ms`, `7d`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-22T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn forms() {
        let n = to_ns(now()).unwrap();
        assert_eq!(parse_time("now", now()).unwrap(), n);
        assert_eq!(parse_time("10m ago", now()).unwrap(), n - 600_000_000_000);
        assert_eq!(
            parse_time("1h30m ago", now()).unwrap(),
            n - 5_400_000_000_000
        );
        assert_eq!(
            parse_time("2026-11-22T11:00:00Z", now()).unwrap(),
            n - 3_600_000_000_000
        );
        assert_eq!(parse_time("2026-11-22T13:00:00+01:00", now()).unwrap(), n);
        assert_eq!(
            parse_time("1795348800", now()).unwrap(),
            1_795_348_800_000_000_000
        );
        assert_eq!(
            parse_time("1795348800.5", now()).unwrap(),
            1_795_348_800_500_000_000
        );
        let hms = parse_time("11:00:00", now()).unwrap();
        let back = Utc.timestamp_nanos(hms).with_timezone(&Local);
        assert_eq!(back.format("%H:%M:%S").to_string(), "11:00:00");
        assert_eq!(back.date_naive(), now().with_timezone(&Local).date_naive());
    }

    #[test]
    fn back_from_now_has_three_spellings() {
        let n = to_ns(now()).unwrap();
        for t in ["10m ago", "-10m", "10m", " -10m ", "10min"] {
            assert_eq!(parse_time(t, now()), Ok(n - 600_000_000_000), "{t}");
        }
        assert_eq!(parse_since("10m ago"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_since("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_since("yesterday").is_err());
    }

    #[test]
    fn a_window_is_since_back_from_to_or_from_to() {
        let n = to_ns(now()).unwrap();
        let w = |from: Option<&str>, to: Option<&str>, since: Option<u64>| Window {
            from: from.map(Into::into),
            to: to.map(Into::into),
            since: since.map(Duration::from_secs),
        };
        let five = Duration::from_secs(300);
        assert_eq!(
            w(None, None, None).resolve(five, now()),
            Ok((n - 300_000_000_000, n))
        );
        assert_eq!(
            w(None, Some("-1h"), Some(60)).resolve(five, now()),
            Ok((n - 3_660_000_000_000, n - 3_600_000_000_000))
        );
        assert_eq!(
            w(Some("1795348800"), None, None).resolve(five, now()),
            Ok((1_795_348_800_000_000_000, n))
        );
        assert!(w(Some("soon"), None, None).resolve(five, now()).is_err());
    }

    proptest::proptest! {
        /// Whatever is typed: an answer or a one-line error, never a panic.
        #[test]
        fn any_input_is_a_time_or_one_line(s in "\\PC{0,40}") {
            if let Err(e) = parse_time(&s, now()) {
                proptest::prop_assert!(!e.contains('\n'));
            }
            let _ = parse_since(&s);
        }

        /// The three spellings of a time back from now agree, and with `--since`.
        #[test]
        fn spellings_of_back_from_now_agree(secs in 0u64..(200 * 365 * 86400), unit in 0usize..4) {
            let (div, u) = [(1, "s"), (60, "m"), (3600, "h"), (86400, "d")][unit];
            let d = format!("{}{u}", secs / div);
            let a = parse_time(&format!("{d} ago"), now());
            proptest::prop_assert_eq!(&a, &parse_time(&format!("-{d}"), now()));
            proptest::prop_assert_eq!(&a, &parse_time(&d, now()));
            let since = parse_since(&d).unwrap();
            let n = to_ns(now()).unwrap();
            proptest::prop_assert_eq!(a, before(n, since, "--since"));
        }

        /// Epoch seconds read back as themselves.
        #[test]
        fn epoch_seconds_round_trip(secs in 0i64..9_223_372_036) {
            proptest::prop_assert_eq!(parse_time(&secs.to_string(), now()), Ok(secs * 1_000_000_000));
        }
    }

    #[test]
    fn errors_are_one_line() {
        for bad in [
            "",
            "yesterday",
            "25:00:00",
            "10 parsecs ago",
            "-5",
            "1.2.3",
            "2026-13-01T00:00:00Z",
        ] {
            let e = parse_time(bad, now()).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn valid_times_beyond_the_range_say_so() {
        for t in [
            "3000-01-01T00:00:00Z",
            "1600-01-01T00:00:00Z",
            "9999999999",
            "400y ago",
            "18446744733s ago",
        ] {
            let e = parse_time(t, now()).unwrap_err();
            assert!(e.contains("outside the supported range"), "{t}: {e}");
            assert!(e.contains("2262-04-11T23:47:16Z"), "{t}: {e}");
            assert!(!e.contains("RFC 3339 ("), "{t}: {e}");
        }
        // The range's own ends are accepted.
        for t in ["2262-04-11T23:47:16Z", "1677-09-21T00:12:44Z", "9223372036"] {
            assert!(parse_time(t, now()).is_ok(), "{t}");
        }
    }

    #[test]
    fn windows_that_leave_the_range_are_errors() {
        let n = to_ns(now()).unwrap();
        let huge = Duration::from_secs(18_446_744_733);
        let e = before(n, huge, "--since").unwrap_err();
        assert!(
            e.starts_with("--since ") && e.contains("supported range"),
            "{e}"
        );
        assert!(after(i64::MAX - 10, Duration::from_secs(1), "--at").is_err());
        assert_eq!(
            before(n, Duration::from_secs(60), "--since"),
            Ok(n - 60_000_000_000)
        );
        assert_eq!(
            after(n, Duration::from_secs(1), "--at"),
            Ok(n + 1_000_000_000)
        );
        // Centuries back still fit: refused only when nanoseconds cannot hold the duration
        // (292 years) or the start.
        assert!(before(n, Duration::from_secs(300 * 365 * 86400), "--since").is_err());
        assert!(before(n, Duration::from_secs(280 * 365 * 86400), "--since").is_ok());
        let early = parse_time("1700-01-01T00:00:00Z", now()).unwrap();
        assert!(before(early, Duration::from_secs(30 * 365 * 86400), "--since").is_err());
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("500MB").unwrap(), 500_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("2 parsecs").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(parse_duration("7d").unwrap().as_secs(), 7 * 86400);
        assert_eq!(parse_duration("100ms").unwrap().as_millis(), 100);
        assert!(parse_duration("soon").is_err());
        assert_eq!(
            jitterscope_model::time::rfc3339(1_795_348_800_500_000_000),
            "2026-11-22T12:00:00.500Z"
        );
    }
}
