//! Pure parsers of cgroupfs file formats, v1 and v2, over the bytes of one file.
//!
//! They return the values exactly as the file states them (units in the field names); turning
//! `max`/`-1`/near-2^63 into "unlimited" is the one interpretation done here, because every reader
//! of these files has to do it and doing it differently in two places would be a bug.

use crate::fileio::{fields, lines, lossy, parse_i64, parse_u64, trim_ascii, ParseError};

/// The keys of `cpu.stat` in either version. A key the running kernel does not print stays `None`.
///
/// Unknown keys (`core_sched.force_idle_usec`, v1 `wait_sum` with schedstats, future additions)
/// are skipped rather than kept: keeping them would cost an allocation per key per cgroup per
/// interval, and a new key worth recording deserves a typed, unit-named field here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuStatFile {
    /// v2: total CPU time, µs.
    pub usage_usec: Option<u64>,
    /// v2: user CPU time, µs.
    pub user_usec: Option<u64>,
    /// v2: system CPU time, µs.
    pub system_usec: Option<u64>,
    /// v2 (6.6+): CPU time at positive nice, µs.
    pub nice_usec: Option<u64>,
    /// Both: enforcement periods that elapsed with runnable tasks.
    pub nr_periods: Option<u64>,
    /// Both: periods in which the group ran out of quota.
    pub nr_throttled: Option<u64>,
    /// v2: total time throttled, µs.
    pub throttled_usec: Option<u64>,
    /// v1: total time throttled, ns (`throttled_time`).
    pub throttled_time_ns: Option<u64>,
    /// Both (5.14+): periods in which burst was used.
    pub nr_bursts: Option<u64>,
    /// v2 (5.14+): total burst time, µs.
    pub burst_usec: Option<u64>,
    /// v1 (5.14+): total burst time, ns (`burst_time`).
    pub burst_time_ns: Option<u64>,
}

/// Parses `cpu.stat` (v1 or v2).
pub fn parse_cpu_stat(buf: &[u8]) -> Result<CpuStatFile, ParseError> {
    let mut s = CpuStatFile::default();
    for (n, l) in lines(buf) {
        let mut it = fields(l);
        let Some(key) = it.next() else { continue };
        let slot = match key {
            b"usage_usec" => &mut s.usage_usec,
            b"user_usec" => &mut s.user_usec,
            b"system_usec" => &mut s.system_usec,
            b"nice_usec" => &mut s.nice_usec,
            b"nr_periods" => &mut s.nr_periods,
            b"nr_throttled" => &mut s.nr_throttled,
            b"throttled_usec" => &mut s.throttled_usec,
            b"throttled_time" => &mut s.throttled_time_ns,
            b"nr_bursts" => &mut s.nr_bursts,
            b"burst_usec" => &mut s.burst_usec,
            b"burst_time" => &mut s.burst_time_ns,
            _ => continue,
        };
        *slot = Some(value_of(it, n, "cpu.stat")?);
    }
    Ok(s)
}

/// The single value after a key; more fields than that is a format we do not understand.
fn value_of<'a>(
    mut it: impl Iterator<Item = &'a [u8]>,
    line: usize,
    what: &str,
) -> Result<u64, ParseError> {
    let v = it
        .next()
        .ok_or_else(|| ParseError::new(line, format!("{what}: key without value")))?;
    if it.next().is_some() {
        return Err(ParseError::new(
            line,
            format!("{what}: expected 'key value'"),
        ));
    }
    parse_u64(v, line, what)
}

/// v2 `cpu.max`: `$MAX $PERIOD`, where `$MAX` is `max` when unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuMax {
    /// Runtime allowed per period, µs; `None` = unlimited.
    pub quota_us: Option<u64>,
    /// Enforcement period, µs.
    pub period_us: u64,
}

/// Parses v2 `cpu.max`.
pub fn parse_cpu_max(buf: &[u8]) -> Result<CpuMax, ParseError> {
    let mut it = fields(buf);
    let (Some(q), Some(p), None) = (it.next(), it.next(), it.next()) else {
        return Err(ParseError::new(1, "cpu.max: expected '$MAX $PERIOD'"));
    };
    let quota_us = if q == b"max" {
        None
    } else {
        Some(parse_u64(q, 1, "cpu.max quota")?)
    };
    Ok(CpuMax {
        quota_us,
        period_us: parse_u64(p, 1, "cpu.max period")?,
    })
}

/// v1 `cpuacct.stat`, in USER_HZ ticks (the kernel converts to clock_t; usually 100 per second).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuacctStat {
    /// User time, USER_HZ ticks.
    pub user_ticks: u64,
    /// System time, USER_HZ ticks.
    pub system_ticks: u64,
}

/// Parses v1 `cpuacct.stat`; both keys are required.
pub fn parse_cpuacct_stat(buf: &[u8]) -> Result<CpuacctStat, ParseError> {
    let (mut user, mut system) = (None, None);
    for (n, l) in lines(buf) {
        let mut it = fields(l);
        match it.next() {
            Some(b"user") => user = Some(value_of(it, n, "cpuacct.stat user")?),
            Some(b"system") => system = Some(value_of(it, n, "cpuacct.stat system")?),
            _ => {}
        }
    }
    match (user, system) {
        (Some(user_ticks), Some(system_ticks)) => Ok(CpuacctStat {
            user_ticks,
            system_ticks,
        }),
        _ => Err(ParseError::new(0, "cpuacct.stat: missing user or system")),
    }
}

/// Parses a flat keyed file (`memory.stat`, `memory.events`, v1 `memory.stat`): every line
/// `key value`, kept in file order because that order groups related keys for a reader.
pub fn parse_keyed(buf: &[u8]) -> Result<Vec<(super::StatKey, u64)>, ParseError> {
    let mut out = Vec::with_capacity(64);
    for (n, l) in lines(buf) {
        let mut it = fields(l);
        let Some(key) = it.next() else { continue };
        let v = value_of(it, n, "keyed file")?;
        let key = match std::str::from_utf8(key) {
            Ok(k) => super::stat_key(k),
            Err(_) => lossy(key).into(),
        };
        out.push((key, v));
    }
    Ok(out)
}

/// Parses a file holding one unsigned number (`cpuacct.usage`, `memory.current`, `cpu.weight`).
pub fn parse_single(buf: &[u8]) -> Result<u64, ParseError> {
    parse_u64(buf, 1, "value")
}

/// Parses a v2 single value that may be `max` (`memory.max`, `memory.high`); `max` → `None`.
pub fn parse_max_or_u64(buf: &[u8]) -> Result<Option<u64>, ParseError> {
    if trim_ascii(buf) == b"max" {
        Ok(None)
    } else {
        parse_single(buf).map(Some)
    }
}

/// Parses v1 `cpu.cfs_quota_us`: -1 (any negative) means unlimited → `None`.
pub fn parse_cfs_quota(buf: &[u8]) -> Result<Option<u64>, ParseError> {
    let v = parse_i64(buf, 1, "cfs_quota_us")?;
    Ok(u64::try_from(v).ok())
}

/// v1 memory limits at or above this are "unlimited". The kernel stores the limit in pages and
/// reports `PAGE_COUNTER_MAX * PAGE_SIZE`, i.e. `i64::MAX` rounded down to the page size:
/// 0x7FFFFFFFFFFFF000 with 4 KiB pages but 0x7FFFFFFFFFFF0000 with 64 KiB pages (arm64, ppc64),
/// so the threshold is the 64 KiB rounding; nobody sets a real limit within 64 KiB of 8 EiB.
pub const V1_UNLIMITED_BYTES: u64 = 0x7FFF_FFFF_FFFF_0000;

/// Parses a v1 memory limit (`memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`);
/// unlimited → `None`.
pub fn parse_v1_limit(buf: &[u8]) -> Result<Option<u64>, ParseError> {
    let v = parse_single(buf)?;
    Ok((v < V1_UNLIMITED_BYTES).then_some(v))
}

/// v1 `memory.oom_control`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OomControl {
    /// The OOM killer is disabled for this group (tasks hang instead).
    pub oom_kill_disable: bool,
    /// The group is currently under OOM.
    pub under_oom: bool,
    /// OOM kills in this group (kernel 4.13+; `None` before).
    pub oom_kill: Option<u64>,
}

/// Parses v1 `memory.oom_control`.
pub fn parse_oom_control(buf: &[u8]) -> Result<OomControl, ParseError> {
    let mut o = OomControl::default();
    let mut seen = false;
    for (n, l) in lines(buf) {
        let mut it = fields(l);
        match it.next() {
            Some(b"oom_kill_disable") => {
                o.oom_kill_disable = value_of(it, n, "oom_kill_disable")? != 0;
                seen = true;
            }
            Some(b"under_oom") => {
                o.under_oom = value_of(it, n, "under_oom")? != 0;
                seen = true;
            }
            Some(b"oom_kill") => o.oom_kill = Some(value_of(it, n, "oom_kill")?),
            _ => {}
        }
    }
    if !seen {
        return Err(ParseError::new(0, "memory.oom_control: no known keys"));
    }
    Ok(o)
}

/// One device's line of v2 `io.stat`: cumulative counters of the I/O the cgroup (and its
/// descendants) issued to that device, as the kernel prints them
/// (`8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStatDevice {
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// `rbytes`: bytes read.
    pub read_bytes: u64,
    /// `wbytes`: bytes written.
    pub write_bytes: u64,
    /// `rios`: read I/Os.
    pub read_ios: u64,
    /// `wios`: write I/Os.
    pub write_ios: u64,
    /// `dbytes`: bytes discarded (5.0+; `None` when the line has no such key).
    pub discard_bytes: Option<u64>,
    /// `dios`: discard I/Os (5.0+; `None` when the line has no such key).
    pub discard_ios: Option<u64>,
}

/// Parses v2 `io.stat`: one line per device, `MAJ:MIN` then `key=value` pairs in any order.
///
/// Keys other than rbytes, wbytes, rios, wios, dbytes and dios are skipped whatever their value
/// (io.latency's `use_delay=`/`avg_lat=`, io.cost's `cost.vrate=1.00`, future keys). A missing
/// rbytes/wbytes/rios/wios reads as 0: kernels before 5.x print a device only when one of them
/// is non-zero, and a line carried by another policy's keys alone had none. An empty file
/// (no I/O yet) is no device, not an error.
pub fn parse_io_stat(buf: &[u8]) -> Result<Vec<IoStatDevice>, ParseError> {
    let mut out = Vec::new();
    for (n, l) in lines(buf) {
        if let Some(d) = io_stat_line(n, l)? {
            out.push(d);
        }
    }
    Ok(out)
}

/// One line of `io.stat`; `None` for a blank line.
fn io_stat_line(n: usize, l: &[u8]) -> Result<Option<IoStatDevice>, ParseError> {
    const WHAT: &str = "io.stat";
    let mut it = fields(l);
    let Some(dev) = it.next() else {
        return Ok(None);
    };
    let (major, minor) = parse_dev(dev)
        .ok_or_else(|| ParseError::new(n, format!("{WHAT}: expected MAJ:MIN first")))?;
    let mut d = IoStatDevice {
        major,
        minor,
        ..IoStatDevice::default()
    };
    for kv in it {
        let Some(eq) = kv.iter().position(|&c| c == b'=') else {
            return Err(ParseError::new(n, format!("{WHAT}: expected key=value")));
        };
        let (k, v) = (&kv[..eq], &kv[eq + 1..]);
        let slot = match k {
            b"rbytes" => &mut d.read_bytes,
            b"wbytes" => &mut d.write_bytes,
            b"rios" => &mut d.read_ios,
            b"wios" => &mut d.write_ios,
            b"dbytes" => d.discard_bytes.insert(0),
            b"dios" => d.discard_ios.insert(0),
            _ => continue,
        };
        *slot = parse_u64(v, n, WHAT)?;
    }
    Ok(Some(d))
}

/// `MAJ:MIN` as two u32.
fn parse_dev(f: &[u8]) -> Option<(u32, u32)> {
    let colon = f.iter().position(|&c| c == b':')?;
    let num = |s: &[u8]| -> Option<u32> {
        if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(s).ok()?.parse().ok()
    };
    Some((num(&f[..colon])?, num(&f[colon + 1..])?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::IoStats;

    const HOST: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/host/sys/fs/cgroup"
    );

    fn host(rel: &str) -> Vec<u8> {
        std::fs::read(format!("{HOST}/{rel}")).unwrap()
    }

    #[test]
    fn cpu_stat_v1_captured() {
        let s = parse_cpu_stat(&host("cpu/jitterscope-fixture/cpu.stat")).unwrap();
        assert_eq!(s.nr_periods, Some(31));
        assert_eq!(s.nr_throttled, Some(31));
        assert_eq!(s.throttled_time_ns, Some(2_429_017_994));
        assert_eq!(s.nr_bursts, Some(0));
        assert_eq!(s.burst_time_ns, Some(0));
        assert_eq!(s.usage_usec, None);
        assert_eq!(s.throttled_usec, None);
    }

    #[test]
    fn cpu_stat_v1_before_burst() {
        let s = parse_cpu_stat(b"nr_periods 10\nnr_throttled 2\nthrottled_time 5000\n").unwrap();
        assert_eq!(s.nr_throttled, Some(2));
        assert_eq!(s.nr_bursts, None);
        assert_eq!(s.burst_time_ns, None);
    }

    #[test]
    fn cpu_stat_v2_all_keys_unknown_ignored() {
        let s = parse_cpu_stat(
            b"usage_usec 9\nuser_usec 5\nsystem_usec 4\nnice_usec 1\ncore_sched.force_idle_usec 0\n\
              nr_periods 7\nnr_throttled 3\nthrottled_usec 1200\nnr_bursts 1\nburst_usec 300\n\
              future_key x y z\n",
        )
        .unwrap();
        assert_eq!(s.usage_usec, Some(9));
        assert_eq!(s.nice_usec, Some(1));
        assert_eq!(s.throttled_usec, Some(1200));
        assert_eq!(s.burst_usec, Some(300));
        assert_eq!(s.throttled_time_ns, None);
    }

    #[test]
    fn cpu_stat_rejects_bad_known_key() {
        assert_eq!(parse_cpu_stat(b"nr_periods x\n").unwrap_err().line, 1);
        assert!(parse_cpu_stat(b"usage_usec\n").is_err());
        assert!(parse_cpu_stat(b"usage_usec 1 2\n").is_err());
        assert_eq!(parse_cpu_stat(b"").unwrap(), CpuStatFile::default());
    }

    #[test]
    fn cpu_max() {
        assert_eq!(
            parse_cpu_max(b"max 100000\n").unwrap(),
            CpuMax {
                quota_us: None,
                period_us: 100_000
            }
        );
        assert_eq!(
            parse_cpu_max(b"20000 100000\n").unwrap().quota_us,
            Some(20_000)
        );
        assert!(parse_cpu_max(b"max\n").is_err());
        assert!(parse_cpu_max(b"1 2 3\n").is_err());
        assert!(parse_cpu_max(b"max max\n").is_err());
    }

    #[test]
    fn cpuacct_stat_captured() {
        let s = parse_cpuacct_stat(&host("cpuacct/jitterscope-fixture/cpuacct.stat")).unwrap();
        assert_eq!(s.user_ticks, 64);
        assert_eq!(s.system_ticks, 0);
        assert!(parse_cpuacct_stat(b"user 1\n").is_err());
    }

    #[test]
    fn keyed_v1_memory_stat_captured() {
        let kv = parse_keyed(&host("memory/jitterscope-fixture/memory.stat")).unwrap();
        assert_eq!(kv[0], ("cache".into(), 0));
        let limit = kv
            .iter()
            .find(|(k, _)| k == "hierarchical_memory_limit")
            .unwrap();
        assert_eq!(limit.1, 256 << 20);
        assert!(parse_keyed(b"anon 1\nfile\n").is_err());
        assert!(parse_keyed(b"anon -1\n").is_err());
    }

    #[test]
    fn single_values() {
        assert_eq!(parse_single(b"653584592\n").unwrap(), 653_584_592);
        assert_eq!(parse_max_or_u64(b"max\n").unwrap(), None);
        assert_eq!(parse_max_or_u64(b"4096\n").unwrap(), Some(4096));
        assert!(parse_max_or_u64(b"maximum\n").is_err());
        assert_eq!(parse_cfs_quota(b"-1\n").unwrap(), None);
        assert_eq!(parse_cfs_quota(b"20000\n").unwrap(), Some(20_000));
    }

    #[test]
    fn v1_limits() {
        assert_eq!(parse_v1_limit(b"9223372036854771712\n").unwrap(), None);
        assert_eq!(parse_v1_limit(b"9223372036854710272\n").unwrap(), None); // 64 KiB pages
        assert_eq!(parse_v1_limit(b"268435456\n").unwrap(), Some(256 << 20));
        assert_eq!(
            parse_v1_limit(&host("memory/memory.limit_in_bytes")).unwrap(),
            None
        );
    }

    #[test]
    fn oom_control() {
        let o = parse_oom_control(&host("memory/jitterscope-fixture/memory.oom_control")).unwrap();
        assert_eq!(
            o,
            OomControl {
                oom_kill_disable: false,
                under_oom: false,
                oom_kill: Some(0)
            }
        );
        // Kernels before 4.13 print no oom_kill line.
        let o = parse_oom_control(b"oom_kill_disable 1\nunder_oom 1\n").unwrap();
        assert!(o.under_oom && o.oom_kill_disable && o.oom_kill.is_none());
        assert!(parse_oom_control(b"").is_err());
    }

    /// The example of Documentation/admin-guide/cgroup-v2.rst ("io.stat"), not a capture.
    const IO_STAT_DOCUMENTED_SAMPLE: &[u8] =
        b"8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n\
          254:0 rbytes=90112 wbytes=0 rios=22 wios=0 dbytes=0 dios=0\n";

    #[test]
    fn io_stat_documented_sample() {
        let d = parse_io_stat(IO_STAT_DOCUMENTED_SAMPLE).unwrap();
        assert_eq!(
            d,
            [
                IoStatDevice {
                    major: 8,
                    minor: 16,
                    read_bytes: 1_459_200,
                    write_bytes: 314_773_504,
                    read_ios: 192,
                    write_ios: 353,
                    discard_bytes: Some(0),
                    discard_ios: Some(0),
                },
                IoStatDevice {
                    major: 254,
                    minor: 0,
                    read_bytes: 90_112,
                    write_bytes: 0,
                    read_ios: 22,
                    write_ios: 0,
                    discard_bytes: Some(0),
                    discard_ios: Some(0),
                },
            ]
        );
    }

    const VM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/vm");

    /// io.stat of the VM harness's probe cgroup (tests/vm/guest.py writes 96 MiB through the
    /// page cache with fsyncs) as a 5.10 guest's kernel wrote it, copied by
    /// tests/vm/capture-fixtures.sh: the write-back is charged to the writer's cgroup.
    #[test]
    fn io_stat_captured_5_10_v2() {
        let b = std::fs::read(format!("{VM}/5.10-v2/probe/io.stat")).unwrap();
        assert_eq!(
            parse_io_stat(&b).unwrap(),
            [IoStatDevice {
                major: 254,
                minor: 0,
                read_bytes: 0,
                write_bytes: 96 << 20,
                read_ios: 0,
                write_ios: 95,
                discard_bytes: Some(0),
                discard_ios: Some(0),
            }]
        );
    }

    #[test]
    fn io_stat_key_order_old_kernels_and_other_policies() {
        // Before 5.0: no discard keys. Keys in any order; io.latency's and io.cost's keys
        // (one with a decimal value) are skipped; a line of another policy's keys alone is a
        // device without I/O.
        let d = parse_io_stat(
            b"8:0 wios=3 rios=2 wbytes=4096 rbytes=8192 use_delay=0 delay_nsec=0\n\
              8:16 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=5 dios=6 cost.vrate=100.00 cost.usage=7\n\
              259:0 avg_lat=1200 win=100\n",
        )
        .unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(
            (
                d[0].read_bytes,
                d[0].write_bytes,
                d[0].read_ios,
                d[0].write_ios
            ),
            (8192, 4096, 2, 3)
        );
        assert_eq!((d[0].discard_bytes, d[0].discard_ios), (None, None));
        assert_eq!((d[1].discard_bytes, d[1].discard_ios), (Some(5), Some(6)));
        assert_eq!(
            d[2],
            IoStatDevice {
                major: 259,
                ..IoStatDevice::default()
            }
        );
    }

    #[test]
    fn io_stat_empty_and_malformed() {
        assert_eq!(parse_io_stat(b"").unwrap(), []);
        assert_eq!(parse_io_stat(b"\n  \n").unwrap(), []);
        assert!(parse_io_stat(b"sda rbytes=1\n").is_err());
        assert!(parse_io_stat(b"8: rbytes=1\n").is_err());
        assert!(parse_io_stat(b"8:1:2 rbytes=1\n").is_err());
        assert!(parse_io_stat(b"4294967296:0 rbytes=1\n").is_err());
        assert_eq!(parse_io_stat(b"8:0 rbytes\n").unwrap_err().line, 1);
        assert_eq!(
            parse_io_stat(b"8:0 rbytes=1\n8:16 wios=-1\n")
                .unwrap_err()
                .line,
            2
        );
        assert!(parse_io_stat(b"8:0 rbytes=18446744073709551616\n").is_err());
        assert!(parse_io_stat(b"8:0 unknown=x=y\n").is_ok());
    }

    #[test]
    fn io_stat_sums_devices() {
        let s = IoStats::sum(&parse_io_stat(IO_STAT_DOCUMENTED_SAMPLE).unwrap());
        assert_eq!(
            s,
            IoStats {
                read_bytes: 1_549_312,
                write_bytes: 314_773_504,
                read_ios: 214,
                write_ios: 353,
                discard_bytes: Some(0),
                discard_ios: Some(0),
                devices: 2,
            }
        );
        let old = IoStats::sum(&parse_io_stat(b"8:0 rbytes=1 wbytes=2 rios=3 wios=4\n").unwrap());
        assert_eq!(
            (old.discard_bytes, old.discard_ios, old.devices),
            (None, None, 1)
        );
        assert_eq!(IoStats::sum(&[]), IoStats::default());
    }

    proptest::proptest! {
        #[test]
        fn never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = parse_cpu_stat(&b);
            let _ = parse_cpu_max(&b);
            let _ = parse_cpuacct_stat(&b);
            let _ = parse_keyed(&b);
            let _ = parse_single(&b);
            let _ = parse_max_or_u64(&b);
            let _ = parse_cfs_quota(&b);
            let _ = parse_v1_limit(&b);
            let _ = parse_oom_control(&b);
            let _ = parse_io_stat(&b);
        }

        #[test]
        fn never_panic_on_plausible_text(s in "([a-z_]{1,12}( [0-9a-z-]{0,22}){0,3}\n){0,6}") {
            let b = s.as_bytes();
            let _ = parse_cpu_stat(b);
            let _ = parse_cpu_max(b);
            let _ = parse_cpuacct_stat(b);
            let _ = parse_keyed(b);
            let _ = parse_oom_control(b);
        }

        #[test]
        fn io_stat_never_panics_on_plausible_text(
            s in "([0-9]{0,11}:?[0-9]{0,11}( (rbytes|wbytes|rios|wios|dbytes|dios|[a-z.]{0,7})=?[0-9.-]{0,21}){0,8}\n?){0,5}"
        ) {
            if let Ok(d) = parse_io_stat(s.as_bytes()) {
                let _ = IoStats::sum(&d);
            }
        }
    }
}
