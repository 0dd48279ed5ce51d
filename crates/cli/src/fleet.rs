//! `jitterscope fleet`: questions across hosts, answered by the engines recorders push to.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use jitterscope_fleet::clickhouse::{Engine, EPISODES};

use crate::timearg::parse_duration;

/// `jitterscope fleet`.
#[derive(Args, Debug)]
pub struct FleetArgs {
    #[command(subcommand)]
    cmd: FleetCmd,
}

#[derive(Subcommand, Debug)]
enum FleetCmd {
    /// Hosts ranked by their time in episode and their number of episodes, from the ClickHouse
    /// that `record --clickhouse` pushes to.
    Episodes(EpisodesArgs),
}

#[derive(Args, Debug)]
struct EpisodesArgs {
    /// ClickHouse's HTTP interface, as given to `record --clickhouse` (http://HOST:8123/).
    #[arg(long, value_name = "URL", env = "JITTERSCOPE_CLICKHOUSE")]
    clickhouse: String,
    /// How far back: episodes that were going on at any time since then.
    #[arg(long, default_value = "1h", value_parser = parse_duration, value_name = "DURATION")]
    since: Duration,
    /// Only episodes of this kind (`events --list-kinds` shows them; `cpu.throttle`...).
    #[arg(long, value_name = "KIND")]
    kind: Option<String>,
    /// Hosts shown, the worst first.
    #[arg(long, default_value_t = 50, value_name = "N")]
    top: usize,
    /// One JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `jitterscope fleet`.
pub fn run(a: FleetArgs) -> Result<()> {
    match a.cmd {
        FleetCmd::Episodes(e) => episodes(e),
    }
}

/// A string literal for ClickHouse SQL.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The query behind `fleet episodes`: each episode once (its newest row: the close when it
/// has closed), clipped to the window, summed per host.
fn episodes_sql(since_ns: i64, now_ns: i64, kind: Option<&str>, top: usize) -> String {
    let kind = kind
        .map(|k| format!(" AND kind = {}", quote(k)))
        .unwrap_or_default();
    // An episode's seconds: from its start (or the window's) to its last up second, at
    // least one; an open one runs to now.
    format!(
        "SELECT host, count() AS episodes, \
         sum(greatest(1.0, (if(is_open = 1, toInt64({now_ns}), last_end) - greatest(start_ns, toInt64({since_ns}))) / 1e9)) AS seconds, \
         sum(is_open) AS open, groupUniqArray(kind) AS kinds, max(last_peak) AS worst_peak \
         FROM (SELECT host, kind, series, start_ns, argMax(end_ns, version) AS last_end, \
         argMax(open, version) AS is_open, argMax(peak, version) AS last_peak \
         FROM {EPISODES} WHERE date >= toDate(intDiv({since_ns}, 1000000000)) - 1{kind} \
         GROUP BY host, kind, series, start_ns) \
         WHERE (last_end >= {since_ns} OR is_open = 1) \
         GROUP BY host ORDER BY seconds DESC, episodes DESC, host LIMIT {top}"
    )
}

fn episodes(a: EpisodesArgs) -> Result<()> {
    let engine = Engine::new(&a.clickhouse, None, Duration::from_secs(30))
        .map_err(|e| anyhow::anyhow!("--clickhouse {e}"))?;
    let now = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
    let since = now - a.since.as_nanos().min(i64::MAX as u128) as i64;
    let t0 = std::time::Instant::now();
    let rows = match engine.rows(&episodes_sql(since, now, a.kind.as_deref(), a.top)) {
        Ok(r) => r,
        Err(e) if e.contains("UNKNOWN_TABLE") || e.contains("doesn't exist") => bail!(
            "{}: no {EPISODES} table: no recorder has pushed there yet (record --clickhouse)",
            a.clickhouse
        ),
        Err(e) => bail!("{e}"),
    };
    let took = t0.elapsed();
    if a.json {
        let doc = serde_json::json!({
            "since": jitterscope_model::time::rfc3339(since),
            "until": jitterscope_model::time::rfc3339(now),
            "kind": a.kind,
            "hosts": rows,
            "query_ms": took.as_secs_f64() * 1e3,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!(
            "no episodes since {}{}",
            jitterscope_model::time::rfc3339(since),
            a.kind
                .as_deref()
                .map(|k| format!(" of kind {k}"))
                .unwrap_or_default()
        );
        return Ok(());
    }
    println!(
        "{:<24} {:>8} {:>12} {:>5}  KINDS",
        "HOST", "EPISODES", "IN EPISODE", "OPEN"
    );
    for r in &rows {
        let kinds: Vec<&str> = r["kinds"]
            .as_array()
            .map(|k| k.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        println!(
            "{:<24} {:>8} {:>10.0} s {:>5}  {}",
            r["host"].as_str().unwrap_or(""),
            r["episodes"].as_u64().unwrap_or(0),
            r["seconds"].as_f64().unwrap_or(0.0),
            r["open"].as_u64().unwrap_or(0),
            kinds.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_quoted() {
        assert_eq!(quote("a'b\\"), "'a\\'b\\\\'");
        let sql = episodes_sql(1, 2, Some("x' OR 1=1 --"), 5);
        assert!(sql.contains("kind = 'x\\' OR 1=1 --'"), "{sql}");
    }
}
