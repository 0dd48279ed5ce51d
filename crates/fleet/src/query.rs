//! The questions `jitterscope fleet` and `serve`'s fleet page ask of ClickHouse, as one API:
//! each answers with the JSON document `fleet … --json` prints and `/api/v1/fleet/…` serves.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::clickhouse::{quote, Engine, EPISODES, FINDINGS, STACKS};
use crate::inventory::{HOSTS, INVENTORY};
use crate::inventory_query::{groups_sql, hosts_sql, parse};

/// Why a question got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryError {
    /// The question itself cannot be asked (a condition that does not parse).
    Bad(String),
    /// The engine did not answer, refused, or has no such table yet.
    Engine(String),
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueryError::Bad(e) | QueryError::Engine(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for QueryError {}

type Result<T> = std::result::Result<T, QueryError>;

/// The window of a question, ns since the epoch.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub since_ns: i64,
    pub now_ns: i64,
}

impl Span {
    /// From `ago` before now to now.
    pub fn last(ago: Duration) -> Span {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        Span {
            since_ns: now_ns - ago.as_nanos().min(i64::MAX as u128) as i64,
            now_ns,
        }
    }

    fn since(&self) -> String {
        jitterscope_model::time::rfc3339(self.since_ns)
    }

    fn until(&self) -> String {
        jitterscope_model::time::rfc3339(self.now_ns)
    }
}

/// A flame graph's stacks, merged across hosts.
#[derive(Debug, Clone, Default)]
pub struct Flame {
    /// Folded stacks and their samples, the most sampled first.
    pub stacks: Vec<(String, u64)>,
    pub hosts: u64,
    pub episodes: u64,
    pub samples: u64,
}

/// The ClickHouse that recorders push to.
pub struct Fleet {
    engine: Engine,
    url: String,
}

impl Fleet {
    /// `url` as given to `record --clickhouse`; `user`: a user and its password.
    pub fn new(url: &str, user: Option<(String, String)>, timeout: Duration) -> Result<Fleet> {
        let engine = Engine::new(url, user, timeout)
            .map_err(|e| QueryError::Bad(format!("--clickhouse {e}")))?;
        Ok(Fleet {
            engine,
            url: url.to_string(),
        })
    }

    /// The rows of `sql`, with a missing table said as such.
    fn rows(&self, sql: &str, table: &str) -> Result<(Vec<Value>, Duration)> {
        let t0 = Instant::now();
        match self.engine.rows(sql) {
            Ok(r) => Ok((r, t0.elapsed())),
            Err(e) if e.contains("UNKNOWN_TABLE") || e.contains("doesn't exist") => {
                Err(QueryError::Engine(format!(
                    "{}: no {table} table: no recorder has pushed there yet (record --clickhouse)",
                    self.url
                )))
            }
            Err(e) => Err(QueryError::Engine(e)),
        }
    }

    /// Hosts ranked by time in episode, then by episodes: of `kind`, with a finding of
    /// `rule`.
    pub fn episodes(
        &self,
        span: Span,
        kind: Option<&str>,
        rule: Option<&str>,
        top: usize,
    ) -> Result<Value> {
        let (rows, took) = self.rows(
            &episodes_sql(span.since_ns, span.now_ns, kind, rule, top),
            EPISODES,
        )?;
        Ok(json!({
            "since": span.since(),
            "until": span.until(),
            "kind": kind,
            "rule": rule,
            "hosts": rows,
            "query_ms": took.as_secs_f64() * 1e3,
        }))
    }

    /// Each host's diagnosed causes and culprits, root causes first.
    pub fn findings(&self, span: Span, rule: Option<&str>, top: usize) -> Result<Value> {
        let (rows, took) = self.rows(
            &findings_sql(span.since_ns, span.now_ns, rule, top),
            FINDINGS,
        )?;
        Ok(json!({
            "since": span.since(),
            "until": span.until(),
            "rule": rule,
            "findings": rows,
            "query_ms": took.as_secs_f64() * 1e3,
        }))
    }

    /// The hosts and groups of processes whose newest inventory meets `conditions`
    /// ([`crate::inventory_query`]); without process conditions, the hosts only.
    pub fn inventory(&self, span: Span, conditions: &[String], top: usize) -> Result<Value> {
        let conds = conditions
            .iter()
            .map(|c| parse(c))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(QueryError::Bad)?;
        let (hosts, t1) = self.rows(&hosts_sql(span.since_ns, &conds), HOSTS)?;
        let about_processes = conds.iter().any(|c| !c.on_host);
        let (groups, t2) = if about_processes {
            self.rows(&groups_sql(span.since_ns, &conds, top), INVENTORY)?
        } else {
            (Vec::new(), Duration::ZERO)
        };
        let (all, t3) = if conds.iter().any(|c| c.on_host) {
            let (all, t) = self.rows(&hosts_sql(span.since_ns, &[]), HOSTS)?;
            (all.len(), t)
        } else {
            (hosts.len(), Duration::ZERO)
        };
        let matched: Vec<&Value> = if about_processes {
            let with: std::collections::BTreeSet<&str> =
                groups.iter().filter_map(|g| g["host"].as_str()).collect();
            hosts
                .iter()
                .filter(|h| h["host"].as_str().is_some_and(|n| with.contains(n)))
                .collect()
        } else {
            hosts.iter().collect()
        };
        let processes: u64 = groups.iter().filter_map(|g| g["processes"].as_u64()).sum();
        Ok(json!({
            "since": span.since(),
            "conditions": conditions,
            "about_processes": about_processes,
            "hosts": matched,
            "groups": groups,
            "processes": processes,
            "hosts_with_inventory": all,
            "query_ms": (t1 + t2 + t3).as_secs_f64() * 1e3,
        }))
    }

    /// The stacks of the episodes that ended in `span`, of `kind`, on `host`, with a finding
    /// of `rule`, merged.
    pub fn flame(
        &self,
        span: Span,
        rule: Option<&str>,
        kind: Option<&str>,
        host: Option<&str>,
    ) -> Result<Flame> {
        let w = stacks_where(span.since_ns, span.now_ns, rule, kind, host);
        let (rows, _) = self.rows(
            &format!(
                "SELECT stack, sum(samples) AS merged FROM {STACKS} FINAL WHERE {w} \
                 GROUP BY stack ORDER BY merged DESC, stack LIMIT 20000"
            ),
            STACKS,
        )?;
        let (about, _) = self.rows(
            &format!(
                "SELECT uniqExact(host) AS hosts, \
                 uniqExact(host, episode_kind, episode_series, episode_start_ns) AS episodes, \
                 sum(samples) AS all_samples FROM {STACKS} FINAL WHERE {w}"
            ),
            STACKS,
        )?;
        let a = about.first().cloned().unwrap_or_default();
        Ok(Flame {
            stacks: rows
                .iter()
                .filter_map(|r| Some((r["stack"].as_str()?.to_string(), r["merged"].as_u64()?)))
                .collect(),
            hosts: a["hosts"].as_u64().unwrap_or(0),
            episodes: a["episodes"].as_u64().unwrap_or(0),
            samples: a["all_samples"].as_u64().unwrap_or(0),
        })
    }
}

/// The query behind `fleet episodes`: each episode once (its newest row: the close when it
/// has closed), clipped to the window, summed per host.
fn episodes_sql(
    since_ns: i64,
    now_ns: i64,
    kind: Option<&str>,
    rule: Option<&str>,
    top: usize,
) -> String {
    let mut kind = kind
        .map(|k| format!(" AND kind = {}", quote(k)))
        .unwrap_or_default();
    // Episodes one of whose findings is of the rule (so only closed, diagnosed ones).
    if let Some(r) = rule {
        kind.push_str(&format!(
            " AND (host, kind, series, start_ns) IN (SELECT host, episode_kind, \
             episode_series, episode_start_ns FROM {FINDINGS} WHERE rule_id = {} \
             AND episode_end_ns >= {since_ns})",
            quote(r)
        ));
    }
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
         WHERE (last_end >= {since_ns} OR is_open = 1) AND start_ns <= {now_ns} \
         GROUP BY host ORDER BY seconds DESC, episodes DESC, host LIMIT {top}"
    )
}

/// The query behind `fleet findings`: per host and rule, the closed episodes it explained,
/// whether it was a root cause in any, its best confidence and its culprits.
fn findings_sql(since_ns: i64, until_ns: i64, rule: Option<&str>, top: usize) -> String {
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
         AND episode_end_ns >= {since_ns} AND episode_start_ns <= {until_ns}{rule} \
         GROUP BY host, rule_id \
         ORDER BY root_cause DESC, is_mechanism DESC, episodes DESC, best_confidence DESC, host \
         LIMIT {top}"
    )
}

/// Which stacks `fleet flame` merges: the episodes that ended since `since_ns`, of `kind`,
/// on `host`, with a finding of `rule`.
fn stacks_where(
    since_ns: i64,
    until_ns: i64,
    rule: Option<&str>,
    kind: Option<&str>,
    host: Option<&str>,
) -> String {
    let mut w = format!(
        "date >= toDate(intDiv({since_ns}, 1000000000)) - 1 AND episode_end_ns >= {since_ns} \
         AND episode_start_ns <= {until_ns}"
    );
    if let Some(k) = kind {
        w.push_str(&format!(" AND episode_kind = {}", quote(k)));
    }
    if let Some(h) = host {
        w.push_str(&format!(" AND host = {}", quote(h)));
    }
    if let Some(r) = rule {
        w.push_str(&format!(
            " AND (host, episode_kind, episode_series, episode_start_ns) IN \
             (SELECT host, episode_kind, episode_series, episode_start_ns FROM {FINDINGS} \
             WHERE rule_id = {} AND episode_end_ns >= {since_ns})",
            quote(r)
        ));
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_quoted() {
        let sql = episodes_sql(1, 2, Some("x' OR 1=1 --"), Some("r"), 5);
        assert!(sql.contains("rule_id = 'r'"), "{sql}");
        assert!(sql.contains("kind = 'x\\' OR 1=1 --'"), "{sql}");
        let w = stacks_where(1, 2, Some("r'"), None, Some("h'"));
        assert!(
            w.contains("rule_id = 'r\\''") && w.contains("host = 'h\\''"),
            "{w}"
        );
    }

    /// `--to` bounds every question: an episode that started after the window is not in it.
    #[test]
    fn windows_have_an_end() {
        assert!(episodes_sql(10, 20, None, None, 5).contains("start_ns <= 20"));
        assert!(findings_sql(10, 20, None, 5).contains("episode_start_ns <= 20"));
        assert!(stacks_where(10, 20, None, None, None).contains("episode_start_ns <= 20"));
    }
}
