//! Pressure stall information: /proc/pressure/{cpu,memory,io,irq} and cgroup `*.pressure` files.
//!
//! The kernel's averages hide short stalls; `total` (cumulative µs stalled) is what the model
//! turns into a per-interval stall percentage, so both are kept.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, parse_u64, ParseError};

/// One `some`/`full` line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PressureLine {
    /// 10 s running average, percent.
    pub avg10: f64,
    /// 60 s running average, percent.
    pub avg60: f64,
    /// 300 s running average, percent.
    pub avg300: f64,
    /// Cumulative stall time, microseconds (a counter).
    pub total_usec: u64,
}

/// A pressure file: `some` always, `full` where the kernel reports it (not for cpu before 5.13).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pressure {
    /// At least one task stalled.
    pub some: Option<PressureLine>,
    /// All non-idle tasks stalled at once.
    pub full: Option<PressureLine>,
}

fn parse_avg(v: &[u8], line: usize) -> Result<f64, ParseError> {
    let s = std::str::from_utf8(v).map_err(|_| ParseError::new(line, "average is not UTF-8"))?;
    let f: f64 = s
        .parse()
        .map_err(|_| ParseError::new(line, format!("bad average {s:?}")))?;
    if !f.is_finite() || f < 0.0 {
        return Err(ParseError::new(line, format!("bad average {s:?}")));
    }
    Ok(f)
}

/// Parses a pressure file.
pub fn parse_pressure(buf: &[u8]) -> Result<Pressure, ParseError> {
    let mut p = Pressure::default();
    for (n, l) in lines(buf) {
        let mut it = fields(l);
        let kind = it.next().unwrap_or_default();
        let mut line = PressureLine::default();
        let mut seen_total = false;
        for kv in it {
            let Some(eq) = kv.iter().position(|&c| c == b'=') else {
                return Err(ParseError::new(n, "expected key=value"));
            };
            let (k, v) = (&kv[..eq], &kv[eq + 1..]);
            match k {
                b"avg10" => line.avg10 = parse_avg(v, n)?,
                b"avg60" => line.avg60 = parse_avg(v, n)?,
                b"avg300" => line.avg300 = parse_avg(v, n)?,
                b"total" => {
                    line.total_usec = parse_u64(v, n, "total")?;
                    seen_total = true;
                }
                _ => {} // newer kernels may add keys; ignore what we do not know
            }
        }
        if !seen_total {
            return Err(ParseError::new(n, "pressure line without total="));
        }
        match kind {
            b"some" => p.some = Some(line),
            b"full" => p.full = Some(line),
            _ => return Err(ParseError::new(n, "expected 'some' or 'full'")),
        }
    }
    if p.some.is_none() && p.full.is_none() {
        return Err(ParseError::new(0, "empty pressure file"));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_cpu_pressure() {
        let buf = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/host/proc/pressure/cpu"
        ))
        .unwrap();
        let p = parse_pressure(&buf).unwrap();
        assert!(p.some.unwrap().total_usec > 0);
        assert!(p.full.is_some());
    }

    #[test]
    fn parses_line_values() {
        let p = parse_pressure(
            b"some avg10=1.50 avg60=0.21 avg300=0.31 total=1923080\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
        )
        .unwrap();
        let s = p.some.unwrap();
        assert_eq!(s.avg10, 1.5);
        assert_eq!(s.total_usec, 1_923_080);
        assert_eq!(p.full.unwrap().total_usec, 7);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_pressure(b"").is_err());
        assert!(parse_pressure(b"some avg10=x total=1\n").is_err());
        assert!(parse_pressure(b"half avg10=1 total=1\n").is_err());
        assert!(parse_pressure(b"some avg10=1\n").is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = parse_pressure(&b);
        }
    }
}
