//! /proc/loadavg: load averages and the instantaneous run queue.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, parse_u64, trim_ascii, ParseError};

/// The parsed file: `0.98 0.52 0.19 2/79 4484`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoadAvg {
    /// 1-minute load average (runnable + uninterruptible tasks, exponentially averaged).
    pub load1: f64,
    /// 5-minute load average.
    pub load5: f64,
    /// 15-minute load average.
    pub load15: f64,
    /// Runnable tasks right now (threads, on all CPUs).
    pub runnable: u64,
    /// Threads that exist right now.
    pub threads: u64,
    /// The most recently allocated PID.
    pub last_pid: u64,
}

fn parse_load(f: &[u8]) -> Result<f64, ParseError> {
    let bad = || ParseError::new(1, format!("bad load {:?}", String::from_utf8_lossy(f)));
    let v: f64 = std::str::from_utf8(f)
        .map_err(|_| bad())?
        .parse()
        .map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    Ok(v)
}

/// Parses /proc/loadavg.
pub fn parse_loadavg(buf: &[u8]) -> Result<LoadAvg, ParseError> {
    let mut it = fields(trim_ascii(buf));
    let mut next = |what: &str| {
        it.next()
            .ok_or_else(|| ParseError::new(1, format!("missing {what}")))
    };
    let load1 = parse_load(next("load1")?)?;
    let load5 = parse_load(next("load5")?)?;
    let load15 = parse_load(next("load15")?)?;
    let rq = next("runnable/threads")?;
    let slash = rq
        .iter()
        .position(|&c| c == b'/')
        .ok_or_else(|| ParseError::new(1, "expected runnable/threads"))?;
    let runnable = parse_u64(&rq[..slash], 1, "runnable")?;
    let threads = parse_u64(&rq[slash + 1..], 1, "threads")?;
    let last_pid = parse_u64(next("last pid")?, 1, "last pid")?;
    Ok(LoadAvg {
        load1,
        load5,
        load15,
        runnable,
        threads,
        last_pid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_loadavg() {
        let l = parse_loadavg(&crate::system::fixtures::read("host/proc/loadavg")).unwrap();
        assert_eq!(l.load1, 0.98);
        assert_eq!(l.load15, 0.19);
        assert_eq!(l.runnable, 2);
        assert_eq!(l.threads, 79);
        assert_eq!(l.last_pid, 4484);
        assert!(l.runnable <= l.threads);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_loadavg(b"").is_err());
        assert!(parse_loadavg(b"0.1 0.2 0.3 2 44\n").is_err());
        assert!(parse_loadavg(b"0.1 0.2 nan 2/3 44\n").is_err());
        assert!(parse_loadavg(b"0.1 0.2 0.3 2/3\n").is_err());
    }
}
