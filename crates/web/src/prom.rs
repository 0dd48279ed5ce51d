//! `/metrics`: the newest sample as OpenMetrics text, named from the registry.
//!
//! Cardinality is bounded by `jitterscope_model::export::Bounded`, the set remote write
//! sends too: every host series and every cgroup, processes only for the `top_processes`
//! busiest by CPU and largest by RSS, and none of the raw per-field families.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use jitterscope_model::codec::Parts;
use jitterscope_model::derive::SeriesValue;
use jitterscope_model::export::Bounded;
use jitterscope_model::stored::{Damage, Pair, SampleReader};
use jitterscope_model::Sample;

use crate::AppState;

/// The exposition of `cur` (rates against `prev`), processes limited to the `top` busiest by
/// CPU and the `top` largest by RSS.
pub fn exposition(cur: &Sample, prev: Option<&Sample>, top: usize) -> Vec<u8> {
    let mut points: Vec<(Option<i64>, SeriesValue)> = Vec::new();
    Bounded::new(top).for_each(cur, prev, |def, labels, value| {
        points.push((
            None,
            SeriesValue {
                def,
                labels: labels.iter().map(|s| s.to_string()).collect(),
                series: def.series_name(labels),
                value: Some(value),
            },
        ))
    });
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
