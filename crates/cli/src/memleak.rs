//! `jitterscope memleak --pid P`: is a running process leaking, where, and what piles up.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use jitterscope_memleak::analyze::{Options, Report};
use jitterscope_memleak::census;
use jitterscope_memleak::{Snapshot, Target};

use crate::timearg::{parse_duration, parse_size};

/// Strings kept in a snapshot file: enough for any leak to be among them.
const SNAPSHOT_STRINGS: usize = 50_000;

/// Arguments of `memleak`.
#[derive(Args, Debug)]
pub struct MemleakArgs {
    /// The process.
    #[arg(long)]
    pid: u32,
    /// Time between readings, at least 1s.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    interval: Duration,
    /// Readings (the first and the last also count strings and, for Python, the heap).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    samples: u32,
    /// Shortest string counted.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(4..=96))]
    min_len: u32,
    /// Most bytes of the process's memory one census reads.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    budget: u64,
    /// Count strings exactly (by default digit runs fold to '#': ids differ, leaks do not).
    #[arg(long)]
    exact: bool,
    /// Take one reading and write it to FILE, to --compare against later.
    #[arg(long, value_name = "FILE", conflicts_with = "compare")]
    snapshot: Option<PathBuf>,
    /// Take one reading now and compare it with a snapshot written earlier by --snapshot.
    #[arg(long, value_name = "FILE")]
    compare: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

use jitterscope_sources::units::mib_text as mib;

/// Shortest `--interval`: one reading (smaps of every mapping) takes a good part of a second
/// on a large process, and growth measured between readings closer than that is noise.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Runs `memleak`.
pub fn run(a: MemleakArgs) -> Result<()> {
    // Checked before the process is opened, so the mistake is named whatever the pid.
    if a.interval < MIN_INTERVAL {
        anyhow::bail!(
            "--interval {} is too short: readings must be at least 1s apart",
            humantime::format_duration(a.interval)
        );
    }
    let o = Options {
        census: census::Options {
            min_len: a.min_len as usize,
            budget_bytes: a.budget,
            exact: a.exact,
        },
    };
    let t = Target::open(a.pid)?;
    if let Some(path) = &a.snapshot {
        let mut s = t.snapshot(o, None, 0)?;
        if let Some(c) = s.census.as_mut() {
            census::keep_top(c, SNAPSHOT_STRINGS);
        }
        write_snapshot(path, &s)?;
        let rss: u64 = s.mappings.iter().map(|m| m.rss_bytes).sum();
        if a.json {
            println!(
                "{}",
                crate::jsonout::versioned(
                    serde_json::json!({"pid": t.pid, "comm": t.comm, "snapshot": path, "rss_bytes": rss})
                )
            );
        } else {
            println!(
                "pid {} ({}): snapshot written to {} (RSS {}); compare later with --compare {}",
                t.pid,
                t.comm,
                path.display(),
                mib(rss as f64),
                path.display()
            );
        }
        return Ok(());
    }
    let first = match &a.compare {
        Some(p) => Some(read_snapshot(p)?),
        None => None,
    };
    if first.is_none() {
        eprintln!(
            "jitterscope: reading pid {} ({}) {} times, {:?} apart",
            t.pid, t.comm, a.samples, a.interval
        );
    }
    let (report, _) =
        jitterscope_memleak::run(&t, o, a.interval, a.samples as usize, first, |i, tot| {
            eprintln!(
                "jitterscope: reading {}: RSS {}",
                i + 1,
                mib(tot.rss as f64)
            );
        })?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::jsonout::versioned_of(&report)?)?
        );
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// Writes the snapshot through a temporary file, so a crash never leaves half a file.
fn write_snapshot(path: &Path, s: &Snapshot) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    serde_json::to_writer(&mut f, s)?;
    f.flush()?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn read_snapshot(path: &Path) -> Result<Snapshot> {
    let b = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&b)
        .with_context(|| format!("{} is not a memleak snapshot", path.display()))
}

/// A command line on one line, at most 120 characters.
fn short(cmd: &str) -> String {
    let one: String = cmd.split_whitespace().collect::<Vec<_>>().join(" ");
    match one.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &one[..i]),
        None => one,
    }
}

/// The report for people.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let first = r.readings.first().map(|p| p.totals).unwrap_or_default();
    let last = r.readings.last().map(|p| p.totals).unwrap_or_default();
    s += &format!(
        "pid {} ({}) {}\n{} readings over {:.0} s: RSS {} -> {} ({:+.1} MiB, {:.2} MiB/s), anonymous {:+.1} MiB, swap {:+.1} MiB\n",
        r.pid,
        r.comm,
        short(&r.cmdline),
        r.readings.len(),
        r.seconds,
        mib(first.rss as f64),
        mib(last.rss as f64),
        (last.rss as f64 - first.rss as f64) / 1048576.0,
        r.rss_bytes_per_s / 1048576.0,
        (last.anon as f64 - first.anon as f64) / 1048576.0,
        (last.swap as f64 - first.swap as f64) / 1048576.0,
    );
    s += &format!("\nverdict: {}\n", r.verdict);
    let grew: Vec<_> = r.mappings.iter().filter(|m| m.after != m.before).collect();
    if !grew.is_empty() {
        s += "\nmappings that changed (resident + swapped):\n";
        for m in grew {
            s += &format!(
                "  {:>+10.1} MiB  {:>8.3} MiB/s  {} {} ({})\n",
                (m.after as f64 - m.before as f64) / 1048576.0,
                m.bytes_per_s / 1048576.0,
                m.name,
                m.start,
                mib(m.size as f64)
            );
        }
    }
    if let Some(p) = &r.python {
        s += &format!(
            "\nPython {} small-object heap (pymalloc): {} -> {}, {} -> {} blocks\n",
            p.version,
            mib(p.bytes_before as f64),
            mib(p.bytes_after as f64),
            p.blocks_before,
            p.blocks_after
        );
        for t in &p.types {
            s += &format!(
                "  {:>+10} {:<32} {} blocks now\n",
                t.after as i64 - t.before as i64,
                t.name,
                t.after
            );
        }
    }
    if !r.strings.is_empty() {
        s += &format!(
            "\nstrings that pile up (the last census read {} at {:.0} MiB/s):\n",
            mib(r.census_bytes as f64),
            r.census_mib_per_s
        );
        for g in &r.strings {
            s += &format!(
                "  {:>+10} {:>10}  {}\n",
                g.after as i64 - g.before as i64,
                g.after,
                g.string
            );
        }
    }
    if let Some(al) = &r.allocator {
        s += &format!(
            "\nallocator: {}{}{}\n",
            al.name,
            al.version
                .as_deref()
                .map(|v| format!(" {v}"))
                .unwrap_or_default(),
            al.library
                .as_deref()
                .map(|l| format!(" ({l})"))
                .unwrap_or_default()
        );
    }
    if let Some(g) = &r.glibc_arenas {
        s += &format!(
            "glibc arenas: main ([heap]) {} resident; {} thread arena heap(s), {} resident\n",
            mib(g.main_resident as f64),
            g.heaps,
            mib(g.heaps_resident as f64)
        );
    }
    if !r.advice.is_empty() {
        s += "\nwhat to do:\n";
        for a in &r.advice {
            s += &format!("  - {a}\n");
        }
    }
    s
}
