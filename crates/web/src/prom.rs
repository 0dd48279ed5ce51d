//! `/metrics`: the newest sample as OpenMetrics text, named from the registry.
//!
//! Cardinality is bounded: every host series and every cgroup, processes only for the
//! `top_processes` busiest by CPU, and none of the raw per-field families that repeat curated
//! metrics or grow with the kernel's tables (`vmstat.<field>`, `meminfo.<field>`,
//! `cgroup.<cgroup>.memory.stat.<field>`, buddyinfo, per-slab-cache, per-IRQ, look-up path
//! patterns). Those stay in the store, where `dump` and the API read them.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use jitterscope_model::codec::Parts;
use jitterscope_model::derive::{evaluate, SeriesValue};
use jitterscope_model::metrics::{cgroup, irq, mem, process, tracer};
use jitterscope_model::registry::{all, MetricDef};
use jitterscope_model::stored::{Damage, Pair, SampleReader};
use jitterscope_model::Sample;

use crate::AppState;

/// Families left out of `/metrics` (see the module comment).
static LEFT_OUT: &[&MetricDef] = &[
    &mem::VMSTAT_FIELD,
    &mem::VMSTAT_FIELD_PER_S,
    &mem::MEMINFO_FIELD,
    &mem::MEMINFO_FIELD_BYTES,
    &mem::BUDDY_FREE_BLOCKS,
    &mem::SLAB_CACHE_TOTAL_BYTES,
    &mem::SLAB_CACHE_ACTIVE_OBJS,
    &mem::SLAB_CACHE_OBJS_GROWTH_PER_S,
    &irq::IRQ_PER_S,
    &irq::SOFTIRQ_PER_S,
    &tracer::LOOKUPS_PATTERN_SAMPLES,
    &cgroup::MEMORY_STAT,
];

/// The metrics exposed: the registry less [`LEFT_OUT`].
pub fn exposed() -> Vec<&'static MetricDef> {
    all()
        .iter()
        .filter(|d| !LEFT_OUT.contains(d))
        .copied()
        .collect()
}

/// The exposition of `cur` (rates against `prev`), processes limited to the `top` busiest.
pub fn exposition(cur: &Sample, prev: Option<&Sample>, top: usize) -> Vec<u8> {
    let vals = evaluate(&exposed(), cur, prev, &[]);
    let mut busy: Vec<(f64, &str)> = vals
        .iter()
        .filter(|v| v.def == &process::PROC_CPU_PCT)
        .filter_map(|v| Some((v.value?, v.labels.first()?.as_str())))
        .collect();
    busy.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    let keep: HashSet<&str> = busy.iter().take(top).map(|b| b.1).collect();
    let points: Vec<(Option<i64>, SeriesValue)> = vals
        .iter()
        .filter(
            |v| match v.def.placeholders().iter().position(|p| *p == "pid") {
                Some(i) => v
                    .labels
                    .get(i)
                    .is_some_and(|pid| keep.contains(pid.as_str())),
                None => true,
            },
        )
        .map(|v| (None, v.clone()))
        .collect();
    let mut out = Vec::with_capacity(64 * 1024);
    // Writing to a Vec cannot fail.
    let info = jitterscope_model::openmetrics::cgroup_info(
        cur.cgroups.iter().flatten().map(|c| (c, None)),
    );
    let _ = jitterscope_model::openmetrics::write_with(&mut out, &points, &info);
    out
}

/// The newest sample that decodes, the one before it, and what the read skipped.
fn latest(dir: &std::path::Path) -> anyhow::Result<(Option<Pair>, Damage)> {
    Ok(SampleReader::open(dir)?.latest_pair(Parts::ALL)?)
}

/// `GET /metrics`.
pub async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let cfg = st.cfg.clone();
    let r = crate::limits::light(&st.light, move || -> Result<(Vec<u8>, Damage), (StatusCode, String)> {
        let err = |e: anyhow::Error| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}\n"));
        let (pair, damage) = latest(&cfg.dir).map_err(err)?;
        let Some((cur, prev)) = pair else {
            let why = damage.note().unwrap_or_else(|| "the store holds no samples".into());
            return Err((StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")));
        };
        let now = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
        let age_s = (now - cur.ts_ns) as f64 / 1e9;
        if !cfg.metrics_max_age.is_zero() && age_s > cfg.metrics_max_age.as_secs_f64() {
            return Err((
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the newest sample is {age_s:.0} s old (more than {:?}): is the recorder running?\n",
                    cfg.metrics_max_age
                ),
            ));
        }
        Ok((exposition(&cur, prev.as_ref(), cfg.top_processes), damage))
    })
    .await;
    match r {
        Ok(Ok((body, damage))) => {
            let mut resp = (
                [(
                    header::CONTENT_TYPE,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )],
                body,
            )
                .into_response();
            crate::api::damage_header(&mut resp, &damage);
            resp
        }
        Ok(Err((code, msg))) => (code, msg).into_response(),
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitterscope_sources::cgroup::{Cgroup, Identity, Runtime};

    #[test]
    fn cgroup_owners_are_an_info_family_before_eof() {
        let id = "ee295493ada3f9189f6f47168e5943bd26ddbe117f58b8072a75d74720ceb6d5";
        let cur = Sample {
            cgroups: Some(vec![
                Cgroup {
                    path: "/".into(),
                    ..Default::default()
                },
                Cgroup {
                    path: format!("/kubepods.slice/cri-containerd-{id}.scope"),
                    identity: Identity {
                        runtime: Runtime::Containerd,
                        container_id: Some(id.into()),
                        name: Some("api".into()),
                        pod: Some("checkout-7d9f".into()),
                        namespace: Some("shop".into()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let text = String::from_utf8(exposition(&cur, None, 3)).unwrap();
        assert!(text.ends_with(&format!(
            "# TYPE jitterscope_cgroup info\n\
             # HELP jitterscope_cgroup The container, pod or systemd unit that owns a cgroup, as its runtime names it\n\
             jitterscope_cgroup_info{{cgroup=\"/kubepods.slice/cri-containerd-{id}.scope\",runtime=\"containerd\",container_id=\"{id}\",container_name=\"api\",pod_name=\"checkout-7d9f\",pod_namespace=\"shop\"}} 1\n\
             # EOF\n"
        )), "{text}");
        // A host of no containers or units has no such family.
        let bare = Sample::default();
        let text = String::from_utf8(exposition(&bare, None, 3)).unwrap();
        assert!(!text.contains("jitterscope_cgroup_info"));
    }
}
