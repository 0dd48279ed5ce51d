//! The JSON contract (docs/JSON.md): every machine-readable output carries `schema_version`,
//! and is one document when the command answers with one report, or JSON Lines when it lists
//! records of one kind (samples, episodes, tracers, metrics, scenarios, log lines), so that
//! `jq -c 'select(…)'` filters a list without unwrapping it and a long dump streams.

use serde_json::Value;

/// Raised when a field is removed or changes meaning; adding a field keeps the version.
pub const SCHEMA_VERSION: u64 = 1;

/// `v` with `schema_version` added. `v` is an object by construction everywhere this is
/// called; anything else is returned as it was rather than wrapped, so a mistake shows up in
/// the schema tests instead of as a silently different shape.
pub fn versioned(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.insert("schema_version".into(), SCHEMA_VERSION.into());
    }
    v
}

/// A serializable value as a versioned object.
pub fn versioned_of(v: &impl serde::Serialize) -> serde_json::Result<Value> {
    Ok(versioned(serde_json::to_value(v)?))
}

/// The placeholder values of a series name by placeholder (`{"cgroup": "/x"}` for
/// `cgroup./x.cpu.throttled_pct`); empty for a series without placeholders or of no known
/// metric.
pub fn series_labels(series: &str) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    let registry = jitterscope_model::metrics::all();
    if let Some((d, vals)) = jitterscope_model::registry::parse_series(registry, series) {
        for (k, v) in d.placeholders().into_iter().zip(vals) {
            m.insert(k.to_string(), v.into());
        }
    }
    m
}

/// A diagnosis as its versioned document, each piece of evidence with the labels of its
/// series beside the name, as `events` and `dump` give theirs (`{}` for a host series or a
/// derived figure).
pub fn report_with_labels(r: &jitterscope_diagnose::Report) -> serde_json::Result<Value> {
    let mut v = versioned_of(r)?;
    let evidence = v["findings"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .filter_map(|f| f.get_mut("evidence")?.as_array_mut())
        .flatten();
    for e in evidence {
        let labels = e["series"].as_str().map(series_labels).unwrap_or_default();
        if let Some(o) = e.as_object_mut() {
            o.insert("labels".into(), labels.into());
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_names_split_into_their_labels() {
        let l = series_labels("cgroup./system.slice/a.b.service.cpu.throttled_pct");
        assert_eq!(l["cgroup"], "/system.slice/a.b.service");
        assert_eq!(l.len(), 1);
        let l = series_labels("proc.42.python3.11.rss_bytes");
        assert_eq!(
            (&l["pid"], &l["comm"]),
            (&"42".into(), &"python3.11".into())
        );
        assert!(series_labels("cpu.sys_pct").is_empty());
        assert!(series_labels("no.such.series").is_empty());
        assert!(series_labels("").is_empty());
    }

    #[test]
    fn objects_get_the_version_and_nothing_else_changes() {
        let v = versioned(serde_json::json!({"a": 1}));
        assert_eq!(
            v,
            serde_json::json!({"a": 1, "schema_version": SCHEMA_VERSION})
        );
        assert_eq!(versioned(serde_json::json!([1])), serde_json::json!([1]));
    }
}
