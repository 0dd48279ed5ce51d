//! The questions `jitterscope fleet` and `serve`'s fleet page ask of ClickHouse, as one API:
//! each answers with the JSON document `fleet … --json` prints and `/api/v1/fleet/…` serves.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::clickhouse::{quote, Engine, EPISODES, FINDINGS, STACKS};
use crate::inventory::{HOSTS, INVENTORY};
use crate::inventory_query::{groups_sql, hosts_sql, matching_hosts_sql, parse};

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

/// One episode as a fleet store holds it ([`Fleet::episode`]).
#[derive(Debug, Clone)]
pub struct Episode {
    /// Its bounds and values, as the recorder marked it.
    pub mark: jitterscope_model::signals::Mark,
    /// Still open (not closed, not diagnosed yet).
    pub open: bool,
    /// Its findings, each as the host's diagnosis wrote it (`diagnose --json`'s finding).
    pub findings: Vec<Value>,
    /// Folded stacks sampled during it (`comm;root;…;leaf`, kernel frames `_[k]`).
    pub stacks: Vec<(String, u64)>,
    /// The sampling rate of those stacks (0: none).
    pub hz: u64,
    /// The host's newest inventory row: `kernel`, `os`, `jitterscope_version` (empty
    /// without one).
    pub host: Value,
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
    /// `rule`, on the hosts whose newest inventory meets `conditions` (`fleet inventory`'s,
    /// such as `jemalloc~5.`). Each host's row names its longest episode (`worst`, with the id
    /// the host's own `events` and web UI know it by).
    pub fn episodes(
        &self,
        span: Span,
        kind: Option<&str>,
        rule: Option<&str>,
        conditions: &[String],
        top: usize,
    ) -> Result<Value> {
        let conds = conditions
            .iter()
            .map(|c| parse(c))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(QueryError::Bad)?;
        // A host sends its inventory when it changes and every 6 h: a day back at least.
        let inv_since = span.since_ns.min(span.now_ns - 86_400_000_000_000);
        let hosts = (!conds.is_empty()).then(|| matching_hosts_sql(inv_since, &conds));
        let (mut rows, took) = self.rows(
            &episodes_sql(
                span.since_ns,
                span.now_ns,
                kind,
                rule,
                hosts.as_deref(),
                top,
            ),
            EPISODES,
        )?;
        for r in &mut rows {
            worst_of(r);
        }
        Ok(json!({
            "since": span.since(),
            "until": span.until(),
            "kind": kind,
            "rule": rule,
            "conditions": conditions,
            "hosts": rows,
            "query_ms": took.as_secs_f64() * 1e3,
        }))
    }

    /// One closed or open episode of `host`, by the id its host knows it by (`events`'s
    /// `<kind>@<start epoch s>+<seconds>`; the start second and kind find it, `series` tells
    /// apart episodes of one kind that started in the same second): its row (as `fleet
    /// episodes` reads it), its findings in the order the host's report ranked them (each
    /// the host's JSON of it), its stacks, and the host's newest inventory facts. `Ok(None)`
    /// when the fleet holds no such episode, [`QueryError::Bad`] for an id that is not one or
    /// one that names several. This is what a report of the episode is built from when the
    /// host itself cannot be reached.
    pub fn episode(&self, host: &str, id: &str, series: Option<&str>) -> Result<Option<Episode>> {
        let bad = || {
            QueryError::Bad(format!(
                "{id:?} is not an episode id (`<kind>@<start epoch s>+<seconds>`)"
            ))
        };
        let (kind, _) = id.rsplit_once('@').ok_or_else(bad)?;
        let (from, _) = jitterscope_diagnose::events::parse_id(id).ok_or_else(bad)?;
        let second = from.checked_add(1_000_000_000).ok_or_else(bad)?;
        let mut key = format!(
            "host = {} AND kind = {} AND start_ns >= {from} AND start_ns < {second}",
            quote(host),
            quote(kind),
        );
        if let Some(s) = series {
            key.push_str(&format!(" AND series = {}", quote(s)));
        }
        let day = format!("toDate(intDiv({from}, 1000000000))");
        let (rows, _) = self.rows(
            &format!(
                "SELECT series, start_ns, argMax(end_ns, version) AS end_ns, \
                 argMax(open, version) AS open, argMax(peak, version) AS peak, \
                 argMax(baseline, version) AS baseline, argMax(threshold, version) AS threshold \
                 FROM {EPISODES} WHERE date = {day} AND {key} GROUP BY series, start_ns \
                 ORDER BY series"
            ),
            EPISODES,
        )?;
        let r = match rows.as_slice() {
            [] => return Ok(None),
            [r] => r,
            several => {
                let names: Vec<&str> = several
                    .iter()
                    .filter_map(|r| r["series"].as_str())
                    .collect();
                return Err(QueryError::Bad(format!(
                    "{id} names {} episodes on {host}; give the series, one of {}",
                    several.len(),
                    names.join(", ")
                )));
            }
        };
        let series = r["series"].as_str().unwrap_or_default().to_string();
        let start_ns = r["start_ns"].as_i64().ok_or_else(bad)?;
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        let mark = jitterscope_model::signals::Mark {
            kind: kind.to_string(),
            series: series.clone(),
            state: jitterscope_model::signals::MarkState::Start,
            from_ns: start_ns,
            to_ns: r["end_ns"].as_i64().unwrap_or(start_ns),
            peak: f("peak"),
            baseline: f("baseline"),
            threshold: f("threshold"),
        };
        let open = r["open"].as_u64() == Some(1);
        let of = format!(
            "host = {} AND episode_kind = {} AND episode_series = {} AND episode_start_ns = {start_ns}",
            quote(host),
            quote(kind),
            quote(&series)
        );
        let (findings, _) = self.rows(
            &format!(
                "SELECT finding FROM {FINDINGS} FINAL WHERE date = {day} AND {of} ORDER BY rank"
            ),
            FINDINGS,
        )?;
        let findings = findings
            .iter()
            .filter_map(|r| serde_json::from_str(r["finding"].as_str()?).ok())
            .collect();
        let (stacks, _) = self.rows(
            &format!(
                "SELECT stack, samples, hz FROM {STACKS} FINAL WHERE date = {day} AND {of} \
                 ORDER BY samples DESC, stack LIMIT 20000"
            ),
            STACKS,
        )?;
        let hz = stacks.iter().find_map(|r| r["hz"].as_u64()).unwrap_or(0);
        let stacks = stacks
            .iter()
            .filter_map(|r| Some((r["stack"].as_str()?.to_string(), r["samples"].as_u64()?)))
            .collect();
        // The inventory may be missing (a table not there yet): the report goes without it.
        let host_row = self
            .rows(
                &format!(
                    "SELECT kernel, os, jitterscope_version FROM {HOSTS} FINAL \
                     WHERE host = {} ORDER BY taken_ns DESC LIMIT 1",
                    quote(host)
                ),
                HOSTS,
            )
            .ok()
            .and_then(|(r, _)| r.into_iter().next())
            .unwrap_or_default();
        Ok(Some(Episode {
            mark,
            open,
            findings,
            stacks,
            hz,
            host: host_row,
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
/// has closed), clipped to the window, summed per host; `hosts`, a query of the host names to
/// keep.
fn episodes_sql(
    since_ns: i64,
    now_ns: i64,
    kind: Option<&str>,
    rule: Option<&str>,
    hosts: Option<&str>,
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
    if let Some(h) = hosts {
        kind.push_str(&format!(" AND host IN ({h})"));
    }
    // An episode's seconds: from its start (or the window's) to its last up second, at
    // least one; an open one runs to now. The longest is the host's worst; the key breaks
    // ties the same way for each of its columns.
    let worst = "tuple(ep, start_ns, kind, series)";
    format!(
        "SELECT host, count() AS episodes, sum(ep) AS seconds, \
         sum(is_open) AS open, groupUniqArray(kind) AS kinds, max(last_peak) AS worst_peak, \
         argMax(kind, {worst}) AS worst_kind, argMax(series, {worst}) AS worst_series, \
         argMax(start_ns, {worst}) AS worst_start_ns, argMax(last_end, {worst}) AS worst_end_ns, \
         argMax(is_open, {worst}) AS worst_open \
         FROM (SELECT host, kind, series, start_ns, last_end, is_open, last_peak, \
         greatest(1.0, (if(is_open = 1, toInt64({now_ns}), last_end) - greatest(start_ns, toInt64({since_ns}))) / 1e9) AS ep \
         FROM (SELECT host, kind, series, start_ns, argMax(end_ns, version) AS last_end, \
         argMax(open, version) AS is_open, argMax(peak, version) AS last_peak \
         FROM {EPISODES} WHERE date >= toDate(intDiv({since_ns}, 1000000000)) - 1{kind} \
         GROUP BY host, kind, series, start_ns) \
         WHERE (last_end >= {since_ns} OR is_open = 1) AND start_ns <= {now_ns}) \
         GROUP BY host ORDER BY seconds DESC, episodes DESC, host LIMIT {top}"
    )
}

/// Folds a host row's `worst_*` columns into `worst`: kind, series, bounds, whether open,
/// and its episode id.
fn worst_of(r: &mut Value) {
    let Some(o) = r.as_object_mut() else { return };
    let mut take = |k: &str| o.remove(&format!("worst_{k}")).unwrap_or(Value::Null);
    let (kind, series, start, end, open) = (
        take("kind"),
        take("series"),
        take("start_ns"),
        take("end_ns"),
        take("open"),
    );
    let id = match (kind.as_str(), start.as_i64(), end.as_i64()) {
        (Some(k), Some(f), Some(t)) => json!(jitterscope_diagnose::events::id_of(k, f, t)),
        _ => Value::Null,
    };
    o.insert(
        "worst".into(),
        json!({"kind": kind, "series": series, "start_ns": start, "end_ns": end,
               "open": open == json!(1), "id": id}),
    );
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
        let sql = episodes_sql(1, 2, Some("x' OR 1=1 --"), Some("r"), None, 5);
        assert!(sql.contains("rule_id = 'r'"), "{sql}");
        assert!(sql.contains("kind = 'x\\' OR 1=1 --'"), "{sql}");
        let w = stacks_where(1, 2, Some("r'"), None, Some("h'"));
        assert!(
            w.contains("rule_id = 'r\\''") && w.contains("host = 'h\\''"),
            "{w}"
        );
    }

    #[test]
    fn a_host_row_names_its_worst_episode_by_the_id_the_host_gives_it() {
        let mut r = json!({"host": "h", "worst_kind": "throttling",
            "worst_series": "cgroup./a.cpu.throttled_pct", "worst_start_ns": 1_700_000_000_000_000_000i64,
            "worst_end_ns": 1_700_000_009_000_000_000i64, "worst_open": 0});
        worst_of(&mut r);
        assert_eq!(r["worst"]["id"], "throttling@1700000000+9");
        assert_eq!(r["worst"]["open"], false);
        assert!(r.get("worst_kind").is_none());
        // A host with nothing usable keeps a null id rather than a made-up one.
        let mut r = json!({"host": "h"});
        worst_of(&mut r);
        assert!(r["worst"]["id"].is_null());
    }

    /// `--to` bounds every question: an episode that started after the window is not in it.
    #[test]
    fn windows_have_an_end() {
        assert!(episodes_sql(10, 20, None, None, None, 5).contains("start_ns <= 20"));
        assert!(findings_sql(10, 20, None, 5).contains("episode_start_ns <= 20"));
        assert!(stacks_where(10, 20, None, None, None).contains("episode_start_ns <= 20"));
    }
}
