//! /proc/net/dev: per-interface traffic and error counters (of the reader's network namespace).

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, lossy, parse_u64, ParseError};

/// One interface line: 8 receive and 8 transmit counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetDev {
    /// Interface name.
    pub name: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Receive errors (sum of the driver's error counters).
    pub rx_errs: u64,
    /// Received packets dropped (no buffer, filtered, backlog full).
    pub rx_drop: u64,
    /// Receive FIFO overruns.
    pub rx_fifo: u64,
    /// Receive framing errors (length, CRC, alignment).
    pub rx_frame: u64,
    /// Compressed packets received.
    pub rx_compressed: u64,
    /// Multicast packets received.
    pub rx_multicast: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Transmit errors.
    pub tx_errs: u64,
    /// Transmit drops.
    pub tx_drop: u64,
    /// Transmit FIFO errors.
    pub tx_fifo: u64,
    /// Collisions.
    pub tx_colls: u64,
    /// Carrier errors.
    pub tx_carrier: u64,
    /// Compressed packets sent.
    pub tx_compressed: u64,
}

/// The parsed file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetDevs {
    /// Every interface, in file order.
    pub interfaces: Vec<NetDev>,
}

impl NetDevs {
    /// The interface named `name`.
    pub fn get(&self, name: &str) -> Option<&NetDev> {
        self.interfaces.iter().find(|d| d.name == name)
    }
}

/// Parses /proc/net/dev, skipping its two header lines (the ones with `|`).
pub fn parse_net_dev(buf: &[u8]) -> Result<NetDevs, ParseError> {
    let mut interfaces = Vec::new();
    for (n, l) in lines(buf) {
        if l.contains(&b'|') || fields(l).next().is_none() {
            continue;
        }
        // Interface names cannot contain ':' (dev_valid_name), and old kernels print large
        // byte counts glued to it (`eth0:1234`), so split at the first colon, not at a space.
        let (name, rest) = super::split_colon(l)
            .ok_or_else(|| ParseError::new(n, "expected `iface: counters`"))?;
        if name.is_empty() {
            return Err(ParseError::new(n, "empty interface name"));
        }
        let mut v = [0u64; 16];
        let mut count = 0;
        for f in fields(rest) {
            if count == v.len() {
                return Err(ParseError::new(n, "more than 16 counters"));
            }
            v[count] = parse_u64(f, n, "counter")?;
            count += 1;
        }
        if count != v.len() {
            return Err(ParseError::new(
                n,
                format!("{count} counters (expected 16)"),
            ));
        }
        interfaces.push(NetDev {
            name: lossy(name),
            rx_bytes: v[0],
            rx_packets: v[1],
            rx_errs: v[2],
            rx_drop: v[3],
            rx_fifo: v[4],
            rx_frame: v[5],
            rx_compressed: v[6],
            rx_multicast: v[7],
            tx_bytes: v[8],
            tx_packets: v[9],
            tx_errs: v[10],
            tx_drop: v[11],
            tx_fifo: v[12],
            tx_colls: v[13],
            tx_carrier: v[14],
            tx_compressed: v[15],
        });
    }
    Ok(NetDevs { interfaces })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_net_dev() {
        let d = parse_net_dev(&crate::system::fixtures::read("host/proc/net/dev")).unwrap();
        let names: Vec<&str> = d.interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["lo", "ifb0", "ifb1", "eth0"]);
        let eth0 = d.get("eth0").unwrap();
        assert_eq!(eth0.rx_bytes, 51276696);
        assert_eq!(eth0.rx_packets, 2043);
        assert_eq!(eth0.tx_bytes, 102381);
        assert_eq!(eth0.tx_packets, 980);
        let lo = d.get("lo").unwrap();
        assert_eq!(lo.rx_bytes, lo.tx_bytes);
    }

    #[test]
    fn byte_count_glued_to_the_name() {
        let d = parse_net_dev(b"eth0:4294967295 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n").unwrap();
        assert_eq!(d.interfaces[0].rx_bytes, 4294967295);
        assert_eq!(d.interfaces[0].tx_compressed, 15);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_net_dev(b"").unwrap().interfaces.is_empty());
        assert!(parse_net_dev(b"eth0 1 2 3\n").is_err());
        assert!(parse_net_dev(b"eth0: 1 2 3\n").is_err());
        assert!(parse_net_dev(b"eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n").is_err());
    }
}
