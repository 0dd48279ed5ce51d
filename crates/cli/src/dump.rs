//! `jitterscope dump`: recorded metrics for a time range as CSV, JSON lines or OpenMetrics, and
//! `dump --list`, the metric registry.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use jitterscope_model::derive::{Selection, SeriesValue};
use jitterscope_model::glob::Pattern;
use jitterscope_model::metrics::all;
use jitterscope_model::openmetrics::{self, write_num};
use jitterscope_model::registry::MetricDef;
use jitterscope_model::stored::SampleReader;
use jitterscope_model::time::rfc3339;
use jitterscope_model::Sample;

use crate::timearg::Window;

/// Output formats of `dump`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `time,series,value,unit`, one row per series per sample (an empty value is unknown).
    Csv,
    /// JSON Lines, one object per sample: `{"time", "ts_ns", "values": {series: value|null},
    /// "labels": {series: {label: value}}}` (docs/JSON.md).
    Json,
    /// OpenMetrics text exposition with timestamps, one family per metric.
    Openmetrics,
}

/// Arguments of `dump`.
#[derive(Args, Debug)]
pub struct DumpArgs {
    // --since/--from/--to; without --from or --since, the last 10 minutes.
    #[command(flatten)]
    window: Window,
    /// Series to print: names or globs (`cgroup.*.cpu.throttled_pct`), comma-separated or repeated.
    #[arg(long, value_delimiter = ',')]
    select: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    format: Format,
    /// List the metrics (name, kind, unit, help) instead of printing data.
    #[arg(long)]
    list: bool,
    /// Store directory [default: $JITTERSCOPE_DIR or /var/lib/jitterscope].
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Runs `dump`. A reader that closes the pipe early (`| head`) ends the dump quietly.
pub fn run(a: DumpArgs) -> Result<()> {
    match dump(a) {
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        r => r,
    }
}

fn dump(a: DumpArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if a.list {
        list(&mut out, a.format)?;
        return finish(out);
    }
    let now = chrono::Utc::now();
    let (from, to) = a
        .window
        .resolve(Duration::from_secs(600), now)
        .map_err(anyhow::Error::msg)?;
    if from > to {
        bail!("--from ({}) is after --to ({})", rfc3339(from), rfc3339(to));
    }
    let select: Vec<Pattern> = a
        .select
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| Pattern::new(s))
        .collect();
    if !select.is_empty() && !select.iter().any(|p| all().iter().any(|d| d.may_match(p))) {
        bail!(
            "--select {} matches no metric (see `jitterscope dump --list`)",
            a.select.join(",")
        );
    }
    let dir = crate::store_dir(a.dir);
    if !dir.is_dir() {
        bail!(
            "no store at {} (record with `jitterscope record --dir {}`)",
            dir.display(),
            dir.display()
        );
    }
    let reader =
        SampleReader::open(&dir).with_context(|| format!("cannot open store {}", dir.display()))?;
    // Prepared once: which metrics the globs may reach, and which patterns each must check.
    let sel = Selection::new(all(), &select);
    let mut pairs = reader.pairs(from, to, sel.parts())?.read_ahead();
    let mut om: Vec<(Option<i64>, SeriesValue)> = Vec::new();
    // OpenMetrics: who owns each cgroup the selected series name, as last recorded.
    let mut owners: std::collections::BTreeMap<String, (jitterscope_sources::cgroup::Cgroup, i64)> =
        Default::default();
    if a.format == Format::Csv {
        writeln!(out, "time,series,value,unit")?;
    }
    let mut samples = 0usize;
    while let Some((sample, prev)) = pairs.next() {
        samples += 1;
        match a.format {
            Format::Csv => write_csv(&mut out, &sel, sample, prev)?,
            Format::Json => write_json(&mut out, &sel, sample, prev)?,
            Format::Openmetrics => {
                let mut named = std::collections::HashSet::new();
                sel.for_each(sample, prev, |def, labels, series, value| {
                    if let Some(i) = def.placeholders().iter().position(|p| *p == "cgroup") {
                        named.extend(labels.get(i).map(|l| l.to_string()));
                    }
                    om.push((
                        Some(sample.ts_ns),
                        SeriesValue {
                            def,
                            labels: labels.iter().map(|l| l.to_string()).collect(),
                            series: series.to_string(),
                            value,
                        },
                    ))
                });
                for c in sample.cgroups.iter().flatten() {
                    if named.contains(&c.path) {
                        owners.insert(
                            c.path.clone(),
                            (
                                jitterscope_sources::cgroup::Cgroup {
                                    path: c.path.clone(),
                                    identity: c.identity.clone(),
                                    ..Default::default()
                                },
                                sample.ts_ns,
                            ),
                        );
                    }
                }
            }
        }
    }
    if a.format == Format::Openmetrics {
        // Stamped with the last sample each was seen in: a backfill (promtool tsdb
        // create-blocks-from openmetrics) needs every line timestamped.
        let info = openmetrics::cgroup_info(owners.values().map(|(c, ts)| (c, Some(*ts))));
        openmetrics::write_with(&mut out, &om, &info)?;
    }
    if let Some(note) = pairs.damage().note() {
        eprintln!("jitterscope: {note}");
    }
    finish(out)?;
    if samples == 0 && !crate::pipe::closed() {
        return Err(crate::nodata::no_samples(&dir, from, to).into());
    }
    Ok(())
}

fn finish(mut out: impl Write) -> Result<()> {
    match out.flush() {
        // A closed pipe (`| head`) is the reader's choice, not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn needs_quotes(s: &str) -> bool {
    s.bytes().any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r'))
}

fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if needs_quotes(s) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

fn write_csv(
    out: &mut impl Write,
    sel: &Selection,
    sample: &Sample,
    prev: Option<&Sample>,
) -> Result<()> {
    const CHUNK: usize = 1 << 16;
    let t = rfc3339(sample.ts_ns);
    // Lines gather here and go out in chunks larger than the BufWriter's buffer, which passes
    // such writes straight through: each byte is copied once, not into a line and then again
    // into the writer's buffer (2.5% of a one-minute dump's instructions, callgrind).
    let mut lines = String::with_capacity(CHUNK + 512);
    let mut err = Ok(());
    let mut quoted = String::new();
    // The text every line of a metric starts with ("<time>,<name up to its first placeholder
    // value>") and ends with (",<unit>\n"), made once per metric and sample.
    let mut metric: Option<&'static MetricDef> = None;
    let (mut head, mut tail) = (String::new(), String::new());
    sel.for_each_parts(sample, prev, |def, name, value| {
        if !metric.is_some_and(|m| std::ptr::eq(m, def)) {
            metric = Some(def);
            head.clear();
            head.push_str(&t);
            head.push(',');
            head.push_str(name.head());
            tail.clear();
            tail.push(',');
            tail.push_str(def.unit.as_str());
            tail.push('\n');
        }
        // Pushed, not `write!`: this closure runs for every value of every sample. Metric
        // templates need no quoting (a test says so), so only placeholder values are looked
        // at, and the name goes straight into the line.
        if name.labels.iter().any(|l| needs_quotes(l)) {
            quoted.clear();
            name.write_to(&mut quoted);
            lines.push_str(&t);
            lines.push(',');
            lines.push_str(&csv_field(&quoted));
        } else {
            lines.push_str(&head);
            name.write_rest(&mut lines);
        }
        lines.push(',');
        if let Some(v) = value {
            write_num(&mut lines, v);
        }
        lines.push_str(&tail);
        if lines.len() >= CHUNK {
            if err.is_ok() {
                err = out.write_all(lines.as_bytes());
            }
            lines.clear();
        }
    });
    err?;
    out.write_all(lines.as_bytes())?;
    Ok(())
}

fn write_json(
    out: &mut impl Write,
    sel: &Selection,
    sample: &Sample,
    prev: Option<&Sample>,
) -> Result<()> {
    // A cgroup's series carry its owner (container, pod, unit) as labels, as
    // `jitterscope_cgroup_info` carries them for Prometheus.
    let owners: std::collections::HashMap<&str, Vec<(&'static str, &str)>> = sample
        .cgroups
        .iter()
        .flatten()
        .filter_map(|c| Some((c.path.as_str(), openmetrics::owner_labels(c)?)))
        .collect();
    let mut values = serde_json::Map::new();
    let mut labels = serde_json::Map::new();
    sel.for_each(sample, prev, |def, parts, series, value| {
        let val = value
            .and_then(serde_json::Number::from_f64)
            .map_or(serde_json::Value::Null, serde_json::Value::Number);
        values.insert(series.to_string(), val);
        if parts.is_empty() {
            return;
        }
        let mut l = serde_json::Map::new();
        for (k, v) in def.placeholders().into_iter().zip(parts) {
            l.insert(k.to_string(), (*v).into());
            if k != "cgroup" {
                continue;
            }
            for (ok, ov) in owners.get(v).into_iter().flatten() {
                if *ok != "cgroup" {
                    l.insert(ok.to_string(), (*ov).into());
                }
            }
        }
        labels.insert(series.to_string(), l.into());
    });
    let line = crate::jsonout::versioned(serde_json::json!({
        "time": rfc3339(sample.ts_ns),
        "ts_ns": sample.ts_ns,
        "values": values,
        "labels": labels,
    }));
    writeln!(out, "{line}")?;
    Ok(())
}

fn list(out: &mut impl Write, format: Format) -> Result<()> {
    if format == Format::Json {
        // JSON Lines: one metric per line (docs/JSON.md).
        for d in all() {
            let v = serde_json::json!({
                "name": d.name,
                "kind": d.kind.as_str(),
                "unit": d.unit.as_str(),
                "help": d.help,
                "labels": d.placeholders(),
            });
            writeln!(out, "{}", crate::jsonout::versioned(v))?;
        }
        return Ok(());
    }
    let w = all().iter().map(|d| d.name.len()).max().unwrap_or(10);
    writeln!(out, "{:w$}  {:7}  {:16}  HELP", "NAME", "KIND", "UNIT")?;
    for d in all() {
        writeln!(
            out,
            "{:w$}  {:7}  {:16}  {}",
            d.name,
            d.kind.as_str(),
            d.unit.as_str(),
            d.help
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }

    /// The CSV writer checks only placeholder values for characters that need quoting.
    #[test]
    fn no_metric_template_needs_quoting() {
        for d in all() {
            assert!(!needs_quotes(d.name), "{} would need quoting", d.name);
        }
    }
}
