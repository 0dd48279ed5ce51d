//! `jitterscope fleet`: questions across hosts, answered by the engines recorders push to.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use jitterscope_fleet::clickhouse::{Engine, EPISODES, FINDINGS};

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
    /// Each host's diagnosed causes (the findings of its closed episodes) and their culprits,
    /// root causes first.
    Findings(FindingsArgs),
}

#[derive(Args, Debug)]
struct FindingsArgs {
    /// ClickHouse's HTTP interface, as given to `record --clickhouse` (http://HOST:8123/).
    #[arg(long, value_name = "URL", env = "JITTERSCOPE_CLICKHOUSE")]
    clickhouse: String,
    /// How far back: episodes that ended since then.
    #[arg(long, default_value = "1d", value_parser = parse_duration, value_name = "DURATION")]
    since: Duration,
    /// Only this rule (`diagnose --list-rules`: `cpu.cfs-throttling`...).
    #[arg(long, value_name = "RULE")]
    rule: Option<String>,
    /// Rows shown.
    #[arg(long, default_value_t = 100, value_name = "N")]
    top: usize,
    /// One JSON document instead of a table.
    #[arg(long)]
    json: bool,
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
        FleetCmd::Findings(f) => findings(f),
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

/// The query behind `fleet findings`: per host and rule, the closed episodes it explained,
/// whether it was a root cause in any, its best confidence and its culprits.
fn findings_sql(since_ns: i64, rule: Option<&str>, top: usize) -> String {
    let rule = rule
        .map(|r| format!(" AND rule_id = {}", quote(r)))
        .unwrap_or_default();
    format!(
        "SELECT host, rule_id, count() AS episodes, max(root) AS root_cause, \
         max(mechanism) AS is_mechanism, max(confidence) AS best_confidence, \
         groupUniqArrayIf(culprit_comm, culprit_comm != '') AS culprits, \
         groupUniqArrayIf(culprit_cgroup, culprit_cgroup != '') AS cgroups, \
         groupUniqArrayIf(container, container != '') AS containers, \
         groupUniqArrayIf(concat(library, ' ', library_version), library != '') AS libraries, \
         argMax(title, confidence) AS example_title, max(episode_end_ns) AS last_ns \
         FROM {FINDINGS} FINAL \
         WHERE date >= toDate(intDiv({since_ns}, 1000000000)) - 1 \
         AND episode_end_ns >= {since_ns}{rule} \
         GROUP BY host, rule_id \
         ORDER BY root_cause DESC, is_mechanism DESC, episodes DESC, best_confidence DESC, host \
         LIMIT {top}"
    )
}

/// The engine of `url`, and the rows of `sql`, with a missing table said as such.
fn query(url: &str, sql: &str, table: &str) -> Result<(Vec<serde_json::Value>, Duration)> {
    let engine = Engine::new(url, None, Duration::from_secs(30))
        .map_err(|e| anyhow::anyhow!("--clickhouse {e}"))?;
    let t0 = std::time::Instant::now();
    match engine.rows(sql) {
        Ok(r) => Ok((r, t0.elapsed())),
        Err(e) if e.contains("UNKNOWN_TABLE") || e.contains("doesn't exist") => {
            bail!("{url}: no {table} table: no recorder has pushed there yet (record --clickhouse)")
        }
        Err(e) => bail!("{e}"),
    }
}

fn findings(a: FindingsArgs) -> Result<()> {
    let now = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
    let since = now - a.since.as_nanos().min(i64::MAX as u128) as i64;
    let (rows, took) = query(
        &a.clickhouse,
        &findings_sql(since, a.rule.as_deref(), a.top),
        FINDINGS,
    )?;
    if a.json {
        let doc = serde_json::json!({
            "since": jitterscope_model::time::rfc3339(since),
            "until": jitterscope_model::time::rfc3339(now),
            "rule": a.rule,
            "findings": rows,
            "query_ms": took.as_secs_f64() * 1e3,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!(
            "no findings since {}",
            jitterscope_model::time::rfc3339(since)
        );
        return Ok(());
    }
    let list = |v: &serde_json::Value| -> String {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    println!(
        "{:<20} {:<28} {:>8} {:>5}  CULPRITS",
        "HOST", "RULE", "EPISODES", "ROOT"
    );
    for r in &rows {
        let mut who = list(&r["culprits"]);
        for extra in [&r["containers"], &r["cgroups"], &r["libraries"]] {
            let e = list(extra);
            if !e.is_empty() {
                who = if who.is_empty() {
                    e
                } else {
                    format!("{who}; {e}")
                };
            }
        }
        println!(
            "{:<20} {:<28} {:>8} {:>5}  {}",
            r["host"].as_str().unwrap_or(""),
            r["rule_id"].as_str().unwrap_or(""),
            r["episodes"].as_u64().unwrap_or(0),
            if r["root_cause"].as_u64() == Some(1) {
                "yes"
            } else {
                ""
            },
            who
        );
    }
    Ok(())
}

fn episodes(a: EpisodesArgs) -> Result<()> {
    let now = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
    let since = now - a.since.as_nanos().min(i64::MAX as u128) as i64;
    let (rows, took) = query(
        &a.clickhouse,
        &episodes_sql(since, now, a.kind.as_deref(), a.top),
        EPISODES,
    )?;
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
