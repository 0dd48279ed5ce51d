//! `fleet inventory`'s conditions and the SQL they make over the inventory tables.
//!
//! A condition is `FIELD` (present), `!FIELD` (absent), `FIELD=VALUE`, `FIELD!=VALUE` (the
//! negation of `=`, so an absent field matches), `FIELD~PREFIX`, or `FIELD<N`, `<=`, `>`, `>=`
//! on a numeric field. Fields are the process columns, the libraries (whose value is the
//! version), the [`SETTINGS`] variables, and the host's columns. Conditions are ANDed and are
//! matched against each host's newest inventory.

use crate::clickhouse::quote;
use crate::inventory::{HOSTS, INVENTORY, SETTINGS};

/// How a field is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A String column: present when not empty.
    Text,
    /// A Nullable(String) column (a library's version): present when not NULL.
    Library,
    /// A number, Nullable or not.
    Number,
    /// An environment variable in `env_keys`/`env_values`.
    Env,
}

/// Fields of the processes table.
const PROCESS: &[(&str, Kind)] = &[
    ("comm", Kind::Text),
    ("exe", Kind::Text),
    ("cgroup", Kind::Text),
    ("container", Kind::Text),
    ("worker_server", Kind::Text),
    ("worker_recycle", Kind::Text),
    ("glibc", Kind::Library),
    ("jemalloc", Kind::Library),
    ("tcmalloc", Kind::Library),
    ("mimalloc", Kind::Library),
    ("softokn", Kind::Library),
    ("python", Kind::Library),
    ("jemalloc_dirty_decay_ms", Kind::Number),
    ("processes", Kind::Number),
];

/// Fields of the hosts table.
const HOST: &[(&str, Kind)] = &[
    ("host", Kind::Text),
    ("kernel", Kind::Text),
    ("os", Kind::Text),
    ("cgroup_layout", Kind::Text),
    ("cpus", Kind::Number),
    ("memory_bytes", Kind::Number),
];

/// Every field a condition can name, for the error that lists them.
pub fn fields() -> Vec<&'static str> {
    PROCESS
        .iter()
        .chain(HOST)
        .map(|(n, _)| *n)
        .chain(SETTINGS.iter().copied())
        .collect()
}

/// One parsed condition: its SQL and whether it is about the host or its processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub text: String,
    pub sql: String,
    pub on_host: bool,
}

/// Parses one condition.
pub fn parse(cond: &str) -> Result<Condition, String> {
    let c = cond.trim();
    let (negated, c) = match c.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, c),
    };
    let ops = ["!=", "<=", ">=", "=", "~", "<", ">"];
    let split = ops
        .iter()
        .filter_map(|op| c.find(op).map(|i| (i, *op)))
        .min_by_key(|(i, op)| (*i, std::cmp::Reverse(op.len())));
    let (field, op, value) = match split {
        Some((i, op)) => (&c[..i], Some(op), &c[i + op.len()..]),
        None => (c, None, ""),
    };
    let field = field.trim();
    if negated && op.is_some() {
        return Err(format!(
            "{cond}: ! goes with a field alone (!NSS_SDB_USE_CACHE); use != for a value"
        ));
    }
    let (kind, on_host) = if let Some((_, k)) = PROCESS.iter().find(|(n, _)| *n == field) {
        (*k, false)
    } else if let Some((_, k)) = HOST.iter().find(|(n, _)| *n == field) {
        (*k, true)
    } else if SETTINGS.contains(&field) {
        (Kind::Env, false)
    } else {
        return Err(format!(
            "{cond}: unknown field {field:?}; fields: {}",
            fields().join(", ")
        ));
    };
    let col = match kind {
        Kind::Env => format!("env_values[indexOf(env_keys, {})]", quote(field)),
        _ => field.to_string(),
    };
    let present = match kind {
        Kind::Text => format!("{col} != ''"),
        Kind::Library | Kind::Number => format!("isNotNull({col})"),
        Kind::Env => format!("has(env_keys, {})", quote(field)),
    };
    let sql = match op {
        None if negated => format!("NOT ({present})"),
        None => present,
        Some(op @ ("<" | "<=" | ">" | ">=")) => {
            if kind != Kind::Number {
                return Err(format!(
                    "{cond}: {op} compares numbers; {field} is not one (use = or ~)"
                ));
            }
            let n: f64 = value
                .trim()
                .parse()
                .map_err(|_| format!("{cond}: {value:?} is not a number"))?;
            format!("({present} AND {col} {op} {n})")
        }
        Some(op) => {
            let v = quote(value);
            let test = match (op, kind) {
                ("~", Kind::Number) => {
                    return Err(format!("{cond}: ~ matches text; {field} is a number"))
                }
                ("~", _) => format!("startsWith({col}, {v})"),
                (_, Kind::Number) => {
                    let n: f64 = value
                        .trim()
                        .parse()
                        .map_err(|_| format!("{cond}: {value:?} is not a number"))?;
                    format!("{col} = {n}")
                }
                _ => format!("{col} = {v}"),
            };
            let eq = format!("({present} AND {test})");
            if op == "!=" {
                format!("NOT {eq}")
            } else {
                eq
            }
        }
    };
    Ok(Condition {
        text: cond.to_string(),
        sql,
        on_host,
    })
}

/// Each host's newest inventory taken since `since_ns`: `(host, taken_ns)` pairs.
fn newest(since_ns: i64) -> String {
    format!(
        "SELECT host, max(taken_ns) FROM {HOSTS} \
         WHERE date >= toDate(intDiv({since_ns}, 1000000000)) - 1 AND taken_ns >= {since_ns} \
         GROUP BY host"
    )
}

/// The newest host rows that meet the host conditions.
pub fn hosts_sql(since_ns: i64, conds: &[Condition]) -> String {
    let mut w = format!("(host, taken_ns) IN ({})", newest(since_ns));
    for c in conds.iter().filter(|c| c.on_host) {
        w.push_str(" AND ");
        w.push_str(&c.sql);
    }
    format!(
        "SELECT host, taken_ns, kernel, os, cgroup_layout, cpus, memory_bytes, processes, \
         groups, jitterscope_version FROM {HOSTS} FINAL WHERE {w} ORDER BY host"
    )
}

/// The groups of processes, in the newest inventory of the hosts that meet the host
/// conditions, that meet the process conditions; the most processes first.
pub fn groups_sql(since_ns: i64, conds: &[Condition], top: usize) -> String {
    format!(
        "SELECT host, comm, exe, cgroup, container, processes, pids, glibc, jemalloc, \
         tcmalloc, mimalloc, softokn, python, jemalloc_dirty_decay_ms, env_keys, env_values, \
         worker_server, worker_recycle FROM {INVENTORY} FINAL WHERE {} \
         ORDER BY host, processes DESC, comm LIMIT {top}",
        groups_where(since_ns, conds)
    )
}

/// The names of the hosts whose newest inventory meets `conds`: with a process condition,
/// those with a group of processes that meets them all (so `jemalloc~5.` keeps the hosts
/// that run jemalloc 5).
pub fn matching_hosts_sql(since_ns: i64, conds: &[Condition]) -> String {
    if conds.iter().any(|c| !c.on_host) {
        format!(
            "SELECT DISTINCT host FROM {INVENTORY} FINAL WHERE {}",
            groups_where(since_ns, conds)
        )
    } else {
        format!("SELECT host FROM ({})", hosts_sql(since_ns, conds))
    }
}

fn groups_where(since_ns: i64, conds: &[Condition]) -> String {
    let mut w = format!(
        "date >= toDate(intDiv({since_ns}, 1000000000)) - 1 AND (host, taken_ns) IN ({})",
        newest(since_ns)
    );
    if conds.iter().any(|c| c.on_host) {
        w.push_str(&format!(
            " AND host IN (SELECT host FROM ({}))",
            hosts_sql(since_ns, conds)
        ));
    }
    for c in conds.iter().filter(|c| !c.on_host) {
        w.push_str(" AND ");
        w.push_str(&c.sql);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql(c: &str) -> String {
        parse(c).unwrap().sql
    }

    #[test]
    fn the_seeds_questions() {
        // Seed 5: jemalloc 5.x with immediate decay.
        assert_eq!(
            sql("jemalloc~5."),
            "(isNotNull(jemalloc) AND startsWith(jemalloc, '5.'))"
        );
        assert_eq!(
            sql("jemalloc_dirty_decay_ms=0"),
            "(isNotNull(jemalloc_dirty_decay_ms) AND jemalloc_dirty_decay_ms = 0)"
        );
        // Case 1: NSS softokn without NSS_SDB_USE_CACHE.
        assert_eq!(sql("softokn"), "isNotNull(softokn)");
        assert_eq!(
            sql("!NSS_SDB_USE_CACHE"),
            "NOT (has(env_keys, 'NSS_SDB_USE_CACHE'))"
        );
        assert_eq!(
            sql("NSS_SDB_USE_CACHE!=yes"),
            "NOT (has(env_keys, 'NSS_SDB_USE_CACHE') AND env_values[indexOf(env_keys, 'NSS_SDB_USE_CACHE')] = 'yes')"
        );
        assert!(parse("kernel~5.4").unwrap().on_host);
        assert_eq!(sql("cpus>=8"), "(isNotNull(cpus) AND cpus >= 8)");
    }

    #[test]
    fn bad_conditions_say_why() {
        for (c, want) in [
            ("libfoo", "unknown field"),
            ("!jemalloc=5", "! goes with a field alone"),
            ("jemalloc<5", "compares numbers"),
            ("cpus~4", "matches text"),
            ("cpus=many", "not a number"),
            ("", "unknown field"),
        ] {
            let e = parse(c).unwrap_err();
            assert!(e.contains(want), "{c}: {e}");
        }
    }

    #[test]
    fn values_cannot_break_out_of_their_literal() {
        let s = sql("comm=x' OR 1=1 --");
        assert_eq!(s, "(comm != '' AND comm = 'x\\' OR 1=1 --')");
    }

    proptest::proptest! {
        #[test]
        fn any_condition_parses_or_says_why(c in ".{0,40}") {
            match parse(&c) {
                Ok(x) => proptest::prop_assert!(!x.sql.is_empty()),
                Err(e) => proptest::prop_assert!(!e.is_empty() && !e.contains('\n')),
            }
        }
    }
}
