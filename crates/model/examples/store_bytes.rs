//! Where a store's bytes go, for `bench/busy.sh` (issue 23's bytes target).
//!
//! `cargo run --release -p jitterscope-model --example store_bytes -- <store dir>`
//!
//! Prints Markdown: the bytes of each lane on disk (index files apart); for the main lane, what
//! each top-level part of the sample costs when the store's writer writes its series alone (the
//! segment bytes; the parts' sum over-counts the lane a little, each paying its own framing, but
//! it ranks them), and what the lane takes without the stack slices (the host's own data:
//! system, cgroups, tracers, the recorder's account of itself); and, for the process table, the
//! order-0 entropy of each changing
//! column's differences from one sample to the next (plug-in estimate, per process matched by pid
//! and start time).
//!
//! That last sum is what a codec would need that stored the table as differences from the
//! previous sample and coded each column on its own with a fixed distribution. It is not a bound
//! on every codec: one that modelled a process's columns together or its history could do with
//! less. It is a measure of how far the present self-contained columns, which leave repetition to
//! zstd (zstd matches repeated bytes and cannot subtract), are from such a codec.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use jitterscope_model::codec::Parts;
use jitterscope_model::stored::SampleReader;
use jitterscope_sources::process::Process;

/// Records of one part: (timestamp, MessagePack bytes).
type Series = Vec<(i64, Vec<u8>)>;

/// The segment bytes a series of records takes when the store's own writer (default settings)
/// writes it alone: its frames, flushes and compression are the ones a recording gets.
fn written_bytes(records: &Series) -> Result<u64, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut cfg = jitterscope_store::StoreConfig::new(dir.path());
    cfg.max_bytes = u64::MAX;
    cfg.retain = std::time::Duration::from_secs(100 * 365 * 86400);
    let mut w = jitterscope_store::Writer::open(cfg)?;
    for (ts, r) in records {
        w.append(*ts, r)?;
    }
    w.close()?;
    let mut n = 0;
    for e in std::fs::read_dir(dir.path())? {
        let e = e?;
        if e.file_name().to_string_lossy().ends_with(".jss") {
            n += e.metadata()?.len();
        }
    }
    Ok(n)
}

/// Order-0 entropy of `values`, in bytes.
fn entropy_bytes(values: &[i64]) -> f64 {
    let mut counts: HashMap<i64, u64> = HashMap::new();
    for v in values {
        *counts.entry(*v).or_default() += 1;
    }
    let n = values.len() as f64;
    counts
        .values()
        .map(|&c| {
            let p = c as f64 / n;
            -(c as f64) * p.log2()
        })
        .sum::<f64>()
        / 8.0
}

/// One column of the process table and how to read it from a row (None: the row has no value,
/// e.g. no `io` without permission).
type Field = (&'static str, fn(&Process) -> Option<i64>);

/// The columns that change from one second to the next on a busy host, as stored (schedstat's
/// times in µs, codec 4). Not every column: those that rarely change (pid, start time, names,
/// limits) cost little in any encoding, and `stat.rss_pages`, the sum of the `status` rss fields,
/// is left out. Some overlap remains (timeslices and context switches, ticks and run time).
const FIELDS: &[Field] = &[
    ("schedstat.run_us", |p| {
        p.schedstat.as_ref().map(|s| (s.run_ns / 1000) as i64)
    }),
    ("schedstat.wait_us", |p| {
        p.schedstat.as_ref().map(|s| (s.wait_ns / 1000) as i64)
    }),
    ("schedstat.timeslices", |p| {
        p.schedstat.as_ref().map(|s| s.timeslices as i64)
    }),
    ("status.voluntary_ctxt_switches", |p| {
        Some(p.status.as_ref()?.voluntary_ctxt_switches? as i64)
    }),
    ("status.nonvoluntary_ctxt_switches", |p| {
        Some(p.status.as_ref()?.nonvoluntary_ctxt_switches? as i64)
    }),
    ("status.rss_anon_bytes", |p| {
        Some(p.status.as_ref()?.rss_anon_bytes? as i64)
    }),
    ("status.rss_file_bytes", |p| {
        Some(p.status.as_ref()?.rss_file_bytes? as i64)
    }),
    ("stat.utime_ticks", |p| Some(p.stat.utime_ticks as i64)),
    ("stat.stime_ticks", |p| Some(p.stat.stime_ticks as i64)),
    ("stat.minflt", |p| Some(p.stat.minflt as i64)),
    ("stat.processor", |p| Some(i64::from(p.stat.processor))),
    ("stat.state", |p| Some(p.stat.state as i64)),
    ("io.rchar", |p| p.io.as_ref().map(|i| i.rchar as i64)),
    ("io.wchar", |p| p.io.as_ref().map(|i| i.wchar as i64)),
];

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: store_bytes <store dir>");
        std::process::exit(2);
    };
    if let Err(e) = run(Path::new(&dir)) {
        eprintln!("store_bytes: {dir}: {e}");
        std::process::exit(1);
    }
}

fn run(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let out = report(dir)?;
    // One write: a reader that closes the pipe early (`| head`) ends the program quietly
    // instead of a failed print panicking.
    let _ = std::io::stdout().write_all(out.as_bytes());
    Ok(())
}

/// The Markdown report on the store at `dir`.
fn report(dir: &Path) -> Result<String, Box<dyn std::error::Error>> {
    let mut lanes = [
        ("main", 0u64),
        ("detail (process table)", 0),
        ("signals", 0),
        ("index files", 0),
    ];
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let i = if name.ends_with(".d.jss") {
            1
        } else if name.ends_with(".s.jss") {
            2
        } else if name.ends_with(".jss") {
            0
        } else if name.ends_with(".idx") {
            3
        } else {
            continue;
        };
        lanes[i].1 += e.metadata()?.len();
    }
    let reader = SampleReader::open(dir)?;

    // The main lane's top-level parts, each as its own series of MessagePack values, and the
    // lane without its stack slices.
    let mut parts: Vec<(String, Series)> = Vec::new();
    let mut host: Series = Vec::new();
    let mut records = 0usize;
    for rec in reader.store().range_main(i64::MIN, i64::MAX)? {
        let rec = rec?;
        records += 1;
        let Some(mut body) = rec.payload.get(1..) else {
            continue;
        };
        let Ok(rmpv::Value::Map(fields)) = rmpv::decode::read_value(&mut body) else {
            continue;
        };
        let mut without = vec![rec.payload[0]];
        let kept = fields
            .iter()
            .filter(|(k, _)| k.as_str() != Some("profile"))
            .cloned()
            .collect();
        rmpv::encode::write_value(&mut without, &rmpv::Value::Map(kept))?;
        host.push((rec.ts_ns, without));
        for (k, v) in fields {
            let name = k.as_str().map_or_else(|| k.to_string(), str::to_string);
            let mut b = Vec::new();
            rmpv::encode::write_value(&mut b, &v)?;
            match parts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, series)) => series.push((rec.ts_ns, b)),
                None => parts.push((name, vec![(rec.ts_ns, b)])),
            }
        }
    }
    let host_bytes = written_bytes(&host)?;
    let mut parts: Vec<(u64, String)> = parts
        .into_iter()
        .map(|(n, s)| Ok((written_bytes(&s)?, n)))
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    parts.sort_by(|a, b| b.cmp(a));

    // Per-second differences of the table's counters, process by process (pid and start time).
    let mut last: HashMap<(u32, u64), Vec<Option<i64>>> = HashMap::new();
    let mut diffs: Vec<Vec<i64>> = vec![Vec::new(); FIELDS.len()];
    let mut rows = 0u64;
    for s in reader.samples(i64::MIN, i64::MAX, Parts::PROCESSES)? {
        for p in s.processes.iter().flatten() {
            rows += 1;
            let now: Vec<Option<i64>> = FIELDS.iter().map(|(_, f)| f(p)).collect();
            if let Some(before) = last.get(&(p.stat.pid, p.stat.starttime_ticks)) {
                for (d, (a, b)) in diffs.iter_mut().zip(now.iter().zip(before)) {
                    // A value that appears or goes is a presence change, not a difference.
                    if let (Some(a), Some(b)) = (a, b) {
                        d.push(a.wrapping_sub(*b));
                    }
                }
            }
            last.insert((p.stat.pid, p.stat.starttime_ticks), now);
        }
    }

    let mut out = String::new();
    macro_rules! outln {
        ($o:ident) => { $o.push('\n') };
        ($o:ident, $($a:tt)*) => {{ use std::fmt::Write as _; let _ = writeln!($o, $($a)*); }};
    }
    let total: u64 = lanes.iter().map(|l| l.1).sum();
    outln!(out, "Bytes on disk by lane ({records} samples):");
    outln!(out);
    outln!(out, "| lane | bytes | share |");
    outln!(out, "|---|---:|---:|");
    for (n, b) in lanes {
        outln!(
            out,
            "| {n} | {b} | {:.0} % |",
            100.0 * b as f64 / total.max(1) as f64
        );
    }
    outln!(out);
    outln!(
        out,
        "The main lane's parts, each written alone by the store's writer (the largest 12):"
    );
    outln!(out);
    outln!(out, "| part | bytes |");
    outln!(out, "|---|---:|");
    for (b, n) in parts.iter().take(12) {
        outln!(out, "| {n} | {b} |");
    }
    outln!(out);
    outln!(
        out,
        "The main lane without the stack slices, written alone the same way: **{host_bytes}** bytes."
    );
    outln!(out);
    outln!(out, "The process table ({rows} rows): order-0 entropy of each changing column's differences from one sample to the next:");
    outln!(out);
    outln!(out, "| column | bytes |");
    outln!(out, "|---|---:|");
    let mut sum = 0.0;
    let mut by: Vec<(f64, &str)> = diffs
        .iter()
        .zip(FIELDS)
        .map(|(d, (n, _))| (entropy_bytes(d), *n))
        .collect();
    by.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (e, n) in by {
        sum += e;
        if e >= 1.0 {
            outln!(out, "| {n} | {e:.0} |");
        }
    }
    outln!(out, "| **all of them** | **{sum:.0}** |");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store recorded on this machine (tests/fixtures/store-lanes-v2: main, detail and signals
    /// lanes, a process table in every sample).
    const STORE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/store-lanes-v2"
    );

    fn bytes_of(row: &str, out: &str) -> u64 {
        let line = out
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row {row:?} in\n{out}"));
        line.split('|')
            .nth(2)
            .unwrap()
            .trim()
            .trim_matches('*')
            .parse()
            .unwrap()
    }

    #[test]
    fn reports_a_recorded_store() {
        let out = report(Path::new(STORE)).unwrap();
        let on_disk = |suffix: &str| -> u64 {
            std::fs::read_dir(STORE)
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
                .map(|e| e.metadata().unwrap().len())
                .sum()
        };
        assert_eq!(bytes_of("| detail", &out), on_disk(".d.jss"));
        assert_eq!(bytes_of("| signals", &out), on_disk(".s.jss"));
        let main = bytes_of("| main", &out);
        assert_eq!(
            main,
            on_disk(".jss") - on_disk(".d.jss") - on_disk(".s.jss")
        );
        // The parts: each written alone takes less than the whole lane, and the vmstat part,
        // in every sample, is there.
        let vmstat = bytes_of("| vmstat", &out);
        assert!(0 < vmstat && vmstat < main, "{out}");
        // Without its stack slices (this fixture was recorded without the sampler: none), the
        // lane rewritten alone is about the lane.
        let line = out
            .lines()
            .find(|l| l.contains("without the stack slices"))
            .unwrap();
        let host: u64 = line.split("**").nth(1).unwrap().parse().unwrap();
        assert!(
            host > vmstat && host * 10 > main * 8 && host < main * 12 / 10,
            "{out}"
        );
        // Its four samples of four processes: 16 rows, matched from one sample to the next
        // (they barely ran, so the sum of the columns' entropy may be 0; entropy_of_values
        // checks the arithmetic).
        assert!(out.contains("The process table (16 rows)"), "{out}");
        bytes_of("| **all of them**", &out);
    }

    #[test]
    fn entropy_of_values() {
        assert_eq!(entropy_bytes(&[7; 16]), 0.0);
        // Four equally likely values: 2 bits each, 8 values = 2 bytes.
        assert_eq!(entropy_bytes(&[1, 2, 3, 4, 1, 2, 3, 4]), 2.0);
    }
}
