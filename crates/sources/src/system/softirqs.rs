//! /proc/softirqs: softirqs handled per type and CPU.

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, lossy, parse_u64, ParseError};

/// One type (`HI`, `TIMER`, `NET_TX`, `NET_RX`, `BLOCK`, `IRQ_POLL`, `TASKLET`, `SCHED`,
/// `HRTIMER`, `RCU`; older kernels name IRQ_POLL `BLOCK_IOPOLL`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Softirq {
    /// The type name.
    pub name: String,
    /// Count per CPU, aligned with [`Softirqs::cpus`].
    pub per_cpu: Vec<u64>,
}

impl Softirq {
    /// Sum over CPUs.
    pub fn total(&self) -> u64 {
        self.per_cpu.iter().fold(0u64, |a, &b| a.wrapping_add(b))
    }
}

/// The parsed file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Softirqs {
    /// CPU ids of the columns, from the header (all possible CPUs, online or not).
    pub cpus: Vec<u32>,
    /// Every type, in file order.
    pub types: Vec<Softirq>,
}

impl Softirqs {
    /// The type named `name`.
    pub fn get(&self, name: &str) -> Option<&Softirq> {
        self.types.iter().find(|s| s.name == name)
    }
}

/// Parses /proc/softirqs.
pub fn parse_softirqs(buf: &[u8]) -> Result<Softirqs, ParseError> {
    let mut ls = lines(buf);
    let (hn, header) = ls
        .next()
        .ok_or_else(|| ParseError::new(0, "empty softirqs file"))?;
    let cpus = super::parse_cpu_header(header, hn)?;
    let mut types = Vec::with_capacity(10);
    for (n, l) in ls {
        let (name, rest) =
            super::split_colon(l).ok_or_else(|| ParseError::new(n, "expected `NAME:`"))?;
        if name.is_empty() {
            return Err(ParseError::new(n, "empty softirq name"));
        }
        let per_cpu = fields(rest)
            .map(|f| parse_u64(f, n, "count"))
            .collect::<Result<Vec<_>, _>>()?;
        if per_cpu.len() != cpus.len() {
            return Err(ParseError::new(
                n,
                format!("{} counts for {} CPUs", per_cpu.len(), cpus.len()),
            ));
        }
        types.push(Softirq {
            name: lossy(name),
            per_cpu,
        });
    }
    Ok(Softirqs { cpus, types })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_softirqs() {
        let s = parse_softirqs(&crate::system::fixtures::read("host/proc/softirqs")).unwrap();
        assert_eq!(s.cpus, [0, 1]);
        let names: Vec<&str> = s.types.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED",
                "HRTIMER", "RCU"
            ]
        );
        assert_eq!(s.get("BLOCK").unwrap().per_cpu, [0, 31314]);
        assert_eq!(s.get("RCU").unwrap().total(), 11706 + 13146);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_softirqs(b"").is_err());
        assert!(parse_softirqs(b"  CPU0 CPU1\n HI: 1\n").is_err());
        assert!(parse_softirqs(b"  CPU0\n HI 1\n").is_err());
    }
}
