//! The one-line-per-second status of `record --status`: the four signals the seed cases needed
//! first (sys vs usr, reclaim scanning, TLB shootdowns, the worst-throttled cgroup).

use jitterscope_model::derive::evaluate;
use jitterscope_model::registry::find;
use jitterscope_model::Sample;

const METRICS: [&str; 6] = [
    "cpu.usr_pct",
    "cpu.sys_pct",
    "reclaim.pgscan_kswapd_per_s",
    "reclaim.pgscan_direct_per_s",
    "irq.tlb_per_s",
    "cgroup.<cgroup>.cpu.throttled_pct",
];

fn fmt(v: Option<f64>, unit: &str) -> String {
    match v {
        Some(v) if v >= 100.0 || unit != "%" => format!("{v:.0}{unit}"),
        Some(v) => format!("{v:.1}{unit}"),
        None => "-".to_string(),
    }
}

/// Formats the status line of `cur` (rates need `prev`; without it they print as `-`).
pub fn line(prev: Option<&Sample>, cur: &Sample) -> String {
    let defs: Vec<_> = METRICS.iter().filter_map(|n| find(n)).collect();
    let vals = evaluate(&defs, cur, prev, &[]);
    let get = |name: &str| {
        vals.iter()
            .find(|v| v.def.name == name)
            .and_then(|v| v.value)
    };
    let worst = vals
        .iter()
        .filter(|v| v.def.name == "cgroup.<cgroup>.cpu.throttled_pct")
        .filter_map(|v| Some((v.value?, v.labels.first()?.as_str())))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let scan = match (
        get("reclaim.pgscan_kswapd_per_s"),
        get("reclaim.pgscan_direct_per_s"),
    ) {
        (Some(k), Some(d)) => format!("{:.0}/s (kswapd {k:.0} direct {d:.0})", k + d),
        _ => "-".into(),
    };
    let throttled = match worst {
        Some((v, path)) => format!("{} {path}", fmt(Some(v), "%")),
        None => "-".into(),
    };
    let lag = cur
        .recorder
        .as_ref()
        .map(|r| format!(" | lag {:.1}ms", r.lateness_ns as f64 / 1e6))
        .unwrap_or_default();
    format!(
        "{} usr {} sys {} | scan {} | tlb {} | worst throttled {}{}",
        crate::timearg::fmt_ns(cur.ts_ns),
        fmt(get("cpu.usr_pct"), "%"),
        fmt(get("cpu.sys_pct"), "%"),
        scan,
        fmt(get("irq.tlb_per_s"), "/s"),
        throttled,
        lag
    )
}
