//! The names a person reads for a series: the container, pod or systemd unit of a cgroup (the
//! names the recorder resolved from the path and the runtime's files) before the path, a
//! process as `comm (pid)`, and the metric itself only where the instance says nothing. The
//! raw series name stays available to the page (on hover) and in every JSON answer.

use jitterscope_model::registry::{self, MetricDef};
use jitterscope_sources::cgroup::identify;

/// A cgroup's name: its container or unit, else its last path component (a lab or
/// hand-made cgroup has no runtime or unit; its leaf is what its maker called it).
pub fn cgroup(path: &str) -> String {
    if let Some(l) = identify(path).label() {
        return l;
    }
    match path.trim_end_matches('/').rsplit_once('/') {
        Some((_, leaf)) if !leaf.is_empty() => leaf.to_string(),
        _ => "/ (root)".to_string(),
    }
}

/// The last component of a metric's template, without its unit suffix: what a legend says of
/// a host-wide series (`cpu.sys_pct` → `sys`, `reclaim.stalls_per_s` → `stalls`).
pub fn metric_short(def: &MetricDef) -> String {
    let last = def.name.rsplit('.').next().unwrap_or(def.name);
    const SUFFIXES: &[&str] = &[
        "_bytes_per_s",
        "_per_s",
        "_pct",
        "_bytes",
        "_usec",
        "_msec",
        "_ms",
        "_ns",
        "_s",
        "_pages",
    ];
    SUFFIXES
        .iter()
        .find_map(|s| last.strip_suffix(s))
        .filter(|s| !s.is_empty())
        .unwrap_or(last)
        .replace('_', " ")
}

/// What a series is about, for a legend or a list: the instance its placeholders name, or
/// `None` for a host-wide series.
pub fn subject(def: &MetricDef, labels: &[String]) -> Option<String> {
    let ph = def.placeholders();
    if ph.is_empty() || ph.len() != labels.len() {
        return None;
    }
    let get = |name: &str| ph.iter().position(|p| *p == name).map(|i| &labels[i]);
    let mut parts = Vec::new();
    if let (Some(pid), Some(comm)) = (get("pid"), get("comm")) {
        parts.push(format!("{comm} ({pid})"));
    }
    for (p, v) in ph.iter().zip(labels) {
        match *p {
            "pid" | "comm" => {}
            "cgroup" => parts.push(cgroup(v)),
            _ => parts.push(v.clone()),
        }
    }
    Some(parts.join(" "))
}

/// The legend of a series: its subject, else the metric's short name. Unknown names are
/// shown as they are.
pub fn legend(series: &str) -> String {
    match registry::parse_series(jitterscope_model::metrics::all(), series) {
        Some((def, labels)) => subject(def, &labels).unwrap_or_else(|| metric_short(def)),
        None => series.to_string(),
    }
}

/// The subject of a series by name (`None` for host-wide series and unknown names).
pub fn subject_of(series: &str) -> Option<String> {
    let (def, labels) = registry::parse_series(jitterscope_model::metrics::all(), series)?;
    subject(def, &labels)
}

/// The unit of a series by name (`as_str` form), when the name is a known metric's.
pub fn unit_of(series: &str) -> Option<&'static str> {
    registry::parse_series(jitterscope_model::metrics::all(), series).map(|(d, _)| d.unit.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn people_read_containers_units_and_processes_not_paths() {
        assert_eq!(
            legend("cgroup./jitterscope-lab/cfs-throttle.cpu.throttled_pct"),
            "cfs-throttle"
        );
        assert_eq!(
            legend("cgroup./system.slice/nginx.service.cpu.throttled_pct"),
            "nginx.service"
        );
        assert_eq!(
            legend("proc.31162.jitterscope.rss_bytes"),
            "jitterscope (31162)"
        );
        assert_eq!(legend("cpu.sys_pct"), "sys");
        assert_eq!(legend("runqlat.p99_usec"), "p99");
        assert_eq!(legend("psi.memory.some_pct"), "memory");
        assert_eq!(subject_of("cpu.sys_pct"), None);
        assert_eq!(legend("no.such.metric"), "no.such.metric");
        assert_eq!(unit_of("cgroup./a.cpu.throttled_pct"), Some("percent"));
        assert_eq!(cgroup("/"), "/ (root)");
        let docker = "/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope";
        assert_eq!(cgroup(docker), "docker 0123456789ab");
    }
}
