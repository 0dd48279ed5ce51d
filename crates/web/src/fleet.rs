//! `serve --clickhouse URL`: the fleet page (`/fleet`) and its API (`/api/v1/fleet/…`), the
//! same questions `jitterscope fleet` asks ([`jitterscope_fleet::query`]), answered with the
//! same JSON documents. Each runs on the heavy pool: a query of a remote engine blocks.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use jitterscope_fleet::query::{Fleet, QueryError, Span};
use jitterscope_model::cancel::Token;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::ApiError;
use crate::AppState;

/// Parameters of the fleet API.
#[derive(Debug, Deserialize)]
pub struct FleetQuery {
    /// How far back: `90s`, `15m`, `1h`, `1d`, `2w`.
    pub since: Option<String>,
    pub kind: Option<String>,
    pub rule: Option<String>,
    pub host: Option<String>,
    /// `fleet inventory`'s conditions, separated by spaces.
    pub q: Option<String>,
    /// On `episodes`: only hosts whose newest inventory meets these conditions (as `q`).
    #[serde(rename = "where")]
    pub where_: Option<String>,
    pub top: Option<usize>,
}

/// Conditions separated by spaces, as a list.
fn conditions(q: Option<&str>) -> Vec<String> {
    q.unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// `90s`, `15m`, `1h`, `1d` or `2w`.
pub fn parse_since(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("since {s:?} is not a duration such as 90s, 15m, 1h, 1d or 2w");
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(secs)
        .filter(|&v| v > 0 && v <= 400 * 86_400)
        .map(Duration::from_secs)
        .ok_or_else(bad)
}

fn fail(e: QueryError) -> ApiError {
    match e {
        QueryError::Bad(m) => ApiError::new(StatusCode::BAD_REQUEST, m),
        QueryError::Engine(m) => ApiError::new(StatusCode::BAD_GATEWAY, m),
    }
}

/// The engine `serve --clickhouse` names, and its user.
fn engine(st: &AppState) -> Result<(String, Option<(String, String)>), ApiError> {
    match &st.cfg.clickhouse {
        Some(url) => Ok((url.clone(), st.cfg.clickhouse_user.clone())),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "serve was started without --clickhouse: no fleet to ask".into(),
        )),
    }
}

/// Runs `f` over the fleet's engine on the heavy pool, for the window the query asks.
async fn ask<T: Send + 'static>(
    st: &AppState,
    q: Result<Query<FleetQuery>, QueryRejection>,
    default_since: &str,
    f: impl FnOnce(&Fleet, Span, FleetQuery) -> Result<T, QueryError> + Send + 'static,
) -> Result<T, ApiError> {
    let (url, user) = engine(st)?;
    let Query(q) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let since = parse_since(q.since.as_deref().unwrap_or(default_since))
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    st.heavy
        .run(Token::new(), move || {
            let fleet = Fleet::new(&url, user, Duration::from_secs(20)).map_err(fail)?;
            f(&fleet, Span::last(since), q).map_err(fail)
        })
        .await
}

/// `GET /api/v1/fleet/episodes`: as `jitterscope fleet episodes --json`.
pub async fn episodes(
    State(st): State<Arc<AppState>>,
    q: Result<Query<FleetQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    ask(&st, q, "1h", |f, span, q| {
        f.episodes(
            span,
            q.kind.as_deref(),
            q.rule.as_deref(),
            &conditions(q.where_.as_deref()),
            q.top.unwrap_or(50),
        )
    })
    .await
    .map(Json)
}

/// `GET /api/v1/fleet/findings`: as `jitterscope fleet findings --json`.
pub async fn findings(
    State(st): State<Arc<AppState>>,
    q: Result<Query<FleetQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    ask(&st, q, "1d", |f, span, q| {
        f.findings(span, q.rule.as_deref(), q.top.unwrap_or(100))
    })
    .await
    .map(Json)
}

/// `GET /api/v1/fleet/inventory?q=…`: as `jitterscope fleet inventory --json`.
pub async fn inventory(
    State(st): State<Arc<AppState>>,
    q: Result<Query<FleetQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    ask(&st, q, "1d", |f, span, q| {
        f.inventory(span, &conditions(q.q.as_deref()), q.top.unwrap_or(200))
    })
    .await
    .map(Json)
}

/// `GET /api/v1/fleet/flame`: the merged stacks of the fleet's episodes as d3-flame-graph's
/// tree (root `all`, then process names, then frames root first).
pub async fn flame(
    State(st): State<Arc<AppState>>,
    q: Result<Query<FleetQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    ask(&st, q, "1h", |f, span, q| {
        let m = f.flame(
            span,
            q.rule.as_deref(),
            q.kind.as_deref(),
            q.host.as_deref(),
        )?;
        Ok(json!({
            "samples": m.samples,
            "episodes": m.episodes,
            "hosts": m.hosts,
            "tree": crate::api::folded_tree(&m.stacks),
        }))
    })
    .await
    .map(Json)
}

/// `GET /api/v1/fleet/about`: how the page links a host's own web UI (`serve
/// --fleet-host-url`, null without it).
pub async fn about(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"host_url": st.cfg.fleet_host_url}))
}

/// Parameters of `/api/v1/fleet/report`: one episode of one host, by its id.
#[derive(Debug, Deserialize)]
pub struct EpisodeKey {
    pub host: String,
    /// `<kind>@<start epoch s>+<seconds>`, as the host's `events` names it.
    pub event: String,
    /// The series that rose, where episodes of one kind started in the same second.
    pub series: Option<String>,
}

/// `GET /api/v1/fleet/report?host=&event=[&series=]`: the incident report of one episode
/// built from what the fleet store holds of it (its findings with their chain and
/// remediation, the stacks sampled during it, the host's kernel), for a host whose own
/// `serve` cannot be reached. Its timelines and evidence series stay on the host.
pub async fn report(
    State(st): State<Arc<AppState>>,
    q: Result<Query<EpisodeKey>, QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    use axum::http::header;
    use axum::response::IntoResponse;
    let (url, user) = engine(&st)?;
    let Query(mut k) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    k.event = crate::report::typed_id(&k.event);
    st.heavy
        .run(Token::new(), move || {
            let fleet = Fleet::new(&url, user, Duration::from_secs(20)).map_err(fail)?;
            let ep = fleet
                .episode(&k.host, &k.event, k.series.as_deref())
                .map_err(fail)?
                .ok_or_else(|| {
                    ApiError::new(
                        StatusCode::NOT_FOUND,
                        format!("the fleet holds no episode {} of {}", k.event, k.host),
                    )
                })?;
            let d = crate::report::from_fleet(&k.host, &ep).ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("{:?} is not of an episode kind this build knows", k.event),
                )
            })?;
            Ok((
                [
                    (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
                    (
                        header::CONTENT_DISPOSITION,
                        format!("inline; filename=\"{}\"", crate::report::file_name(&d)),
                    ),
                ],
                crate::report::html(&d),
            )
                .into_response())
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_the_usual_units() {
        assert_eq!(parse_since("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_since("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in [
            "",
            "1",
            "h",
            "1y",
            "0h",
            "-1h",
            "99999999999999999999d",
            "1000d",
        ] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn folded_stacks_become_a_tree() {
        let t = crate::api::folded_tree(&[
            ("app;main;work".into(), 3),
            ("app;main;sys_read_[k]".into(), 1),
            ("other;x".into(), 2),
        ]);
        assert_eq!(t.value, 6);
        assert_eq!(t.children[0].name, "app");
        assert_eq!(t.children[0].children[0].children.len(), 2);
        assert_eq!(t.children[0].children[0].children[1].name, "sys_read [k]");
    }
}
