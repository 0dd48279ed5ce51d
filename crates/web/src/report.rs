//! An incident report: one self-contained HTML file that opens offline, for a postmortem or a
//! ticket. It is the UI itself (the same scripts and styles, inlined) over the answers the UI
//! would ask the server for, embedded as JSON: host and window, the episodes, the findings with
//! their chain, remediation and evidence charts, the timelines, and the plain and
//! differential flame graphs of the window. The page reads the embedded answers instead of
//! `/api/v1` (see `source.js`), so the report and the live view cannot drift apart.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use crate::api::{self, ApiError, FlameQuery, SeriesQuery, TableQuery};

/// Context drawn around the diagnosed window on the timelines: a minute, or the window's own
/// length when longer, before; half that after.
fn context(from: i64, to: i64) -> (i64, i64) {
    let before = (to - from).max(60_000_000_000);
    (from - before, to + before / 2)
}

/// Points per timeline: enough for a full-width chart.
const POINTS: usize = 600;

/// Frames below this share of a flame graph's samples are left out of a report: they are
/// narrower than a pixel at any width a report is read at, and a 10-minute window's long tail
/// of one-sample stacks would otherwise be most of the file.
const MIN_FRAME_SHARE: f64 = 1.0 / 4000.0;

/// What a report covers: the diagnosed window and, for an episode, its id.
#[derive(Debug, Clone)]
pub struct Scope {
    /// Start of the diagnosed window (ns since the epoch).
    pub from: i64,
    /// End of it.
    pub to: i64,
    /// The episode (`jitterscope events` id), when the report is of one.
    pub event: Option<String>,
}

impl Scope {
    /// The window of the flame graphs: an episode's own seconds, else the whole window.
    pub fn flame_window(&self) -> (i64, i64) {
        self.event
            .as_deref()
            .and_then(jitterscope_diagnose::events::parse_id)
            .map_or((self.from, self.to), |(f, t)| (f, t + 1_000_000_000))
    }

    /// The window of an episode id: its seconds with 10 s either side (as `diagnose --event`).
    pub fn of_event(id: &str) -> Option<Scope> {
        let (f, t) = jitterscope_diagnose::events::parse_id(id)?;
        Some(Scope {
            from: f.checked_sub(10_000_000_000)?,
            to: t.checked_add(10_000_000_000)?,
            event: Some(id.to_string()),
        })
    }
}

/// The answers a report embeds, as the page's `source.js` reads them.
pub fn data(dir: &Path, scope: &Scope) -> Result<Value, ApiError> {
    let (from, to) = (scope.from, scope.to);
    let (vf, vt) = context(from, to);
    let range = api::range_read(dir)?;
    let charts: Vec<_> = crate::charts::CHARTS.iter().map(|c| c.out()).collect();
    let secs = |ns: i64| format!("{:.3}", ns as f64 / 1e9);
    let mut series = BTreeMap::new();
    for c in &charts {
        let q = SeriesQuery {
            select: c.select.clone(),
            from: Some(secs(vf)),
            to: Some(secs(vt)),
            points: Some(POINTS),
            top: c.top,
        };
        // A chart whose read fails says so in the report, as it would on the page.
        let v = api::series_read(dir, &q).unwrap_or_else(|e| json!({"error": e.1}));
        series.insert(c.id.to_string(), v);
    }
    let (events, _) = api::events_read(dir, vf, vt)?;
    let findings = api::findings_read(dir, from, to)?;
    // Each finding's evidence over the same span as the timelines.
    let mut evidence = BTreeMap::new();
    for f in findings["findings"].as_array().into_iter().flatten() {
        for ev in f["evidence"].as_array().into_iter().flatten() {
            let Some(name) = ev["series"].as_str() else {
                continue;
            };
            if evidence.contains_key(name) {
                continue;
            }
            let q = SeriesQuery {
                select: name.to_string(),
                from: Some(secs(vf)),
                to: Some(secs(vt)),
                points: Some(POINTS / 2),
                top: None,
            };
            if let Ok(v) = api::series_read(dir, &q) {
                evidence.insert(name.to_string(), v);
            }
        }
    }
    // Each culprit's row among the processes or cgroups of the window.
    let mut tables = BTreeMap::new();
    for f in findings["findings"].as_array().into_iter().flatten() {
        let c = &f["culprit"];
        let (of, focus) = match (c["pid"].as_u64(), c["cgroup"].as_str()) {
            (Some(pid), _) => ("processes", pid.to_string()),
            (None, Some(cg)) => ("cgroups", cg.to_string()),
            _ => continue,
        };
        let key = format!("{of}|{focus}");
        if tables.contains_key(&key) {
            continue;
        }
        let q = TableQuery {
            of: of.into(),
            from: None,
            to: None,
            top: None,
            focus: Some(focus),
        };
        if let Ok(t) = api::table_read(dir, &q, from, to) {
            tables.insert(key, t);
        }
    }
    let plain = FlameQuery::default();
    let diff = FlameQuery {
        compare: Some("before".into()),
        ..Default::default()
    };
    // An episode's flame graphs are of its own seconds (the differential against as many
    // seconds just before it), as the page draws them.
    let (ff, ft) = scope.flame_window();
    let mut flame = api::flame_read(dir, &plain, ff, ft)?;
    let mut flame_diff = api::flame_read(dir, &diff, ff, ft)?;
    for f in [&mut flame, &mut flame_diff] {
        let total = f["tree"]["value"].as_u64().unwrap_or(0);
        let min = (total as f64 * MIN_FRAME_SHARE).ceil() as u64;
        prune(&mut f["tree"], min.max(1));
    }
    Ok(json!({
        "made": jitterscope_model::time::rfc3339(
            chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)
        ),
        "version": env!("CARGO_PKG_VERSION"),
        "range": range,
        "view": {"from": vf as f64 / 1e9, "to": vt as f64 / 1e9},
        "window": {"from": from as f64 / 1e9, "to": to as f64 / 1e9},
        "event": scope.event,
        "charts": charts,
        "series": series,
        "events": events,
        "findings": findings,
        "evidence": evidence,
        "tables": tables,
        "flame": {"plain": flame, "before": flame_diff},
        "libraries": libraries(&findings),
    }))
}

/// What a report built from a fleet store says of the parts it lacks.
const ON_THE_HOST: &str = "stay on the host: a fleet store keeps an episode's findings and \
stacks, not its series. Open the host's own page for them.";

/// The answers of a report of `host`'s episode `ep` as a fleet store holds it: the episode,
/// its findings with their chain and remediation, the plain flame graph of the stacks
/// sampled during it, the host's kernel. No timelines, evidence series or tables: those stay
/// in the host's store. `None` for a kind this build does not know.
pub fn from_fleet(host: &str, ep: &jitterscope_fleet::query::Episode) -> Option<Value> {
    let e = jitterscope_diagnose::events::event_of_mark(&ep.mark, true)?;
    let scope = Scope::of_event(&e.id)?;
    let (vf, vt) = context(scope.from, scope.to);
    let rfc = jitterscope_model::time::rfc3339;
    let mut event = json!(e);
    event["unit"] = json!(crate::names::unit_of(&e.series));
    event["subject"] = json!(crate::names::subject_of(&e.series));
    let mut notes = vec![format!(
        "Built from the fleet store, where {host} sent it: the timelines and evidence charts {ON_THE_HOST}"
    )];
    if ep.open {
        notes.push(
            "The episode was still open when the fleet was last told of it: it is diagnosed \
             when it closes."
                .to_string(),
        );
    }
    let findings = json!({
        "window": {"from": rfc(scope.from), "to": rfc(scope.to)},
        "samples": null,
        "baseline_samples": null,
        "findings": ep.findings,
        "damaged": {},
        "notes": notes,
    });
    let (ff, ft) = scope.flame_window();
    let tree = crate::api::folded_tree(&ep.stacks);
    let total = tree.value;
    let mut plain = json!({
        "from_ns": ff,
        "to_ns": ft,
        "samples": total,
        "total": total,
        "hz": ep.hz,
        "damaged": {},
        "tree": tree,
    });
    let min = (total as f64 * MIN_FRAME_SHARE).ceil() as u64;
    prune(&mut plain["tree"], min.max(1));
    Some(json!({
        "made": rfc(chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)),
        "version": env!("CARGO_PKG_VERSION"),
        "range": {
            "from_ns": scope.from,
            "to_ns": scope.to,
            "from": rfc(scope.from),
            "to": rfc(scope.to),
            "host": host,
            "kernel": ep.host["kernel"].as_str().unwrap_or(""),
        },
        "view": {"from": vf as f64 / 1e9, "to": vt as f64 / 1e9},
        "window": {"from": scope.from as f64 / 1e9, "to": scope.to as f64 / 1e9},
        "event": e.id,
        "charts": [],
        "series": {},
        "events": [event],
        "findings": findings,
        "evidence": {},
        "tables": {},
        "flame": {
            "plain": plain,
            "before": {"error": "a fleet store keeps the stacks of an episode's own seconds only, \
                not of those before it: the plain flame graph is of the episode"},
        },
        "libraries": libraries(&findings),
        "missing": ON_THE_HOST,
        "source": "fleet",
    }))
}

/// Drops the children narrower than `min` samples (their samples stay in their parent).
fn prune(node: &mut Value, min: u64) {
    if let Some(kids) = node.get_mut("children").and_then(Value::as_array_mut) {
        kids.retain(|k| k["value"].as_u64().unwrap_or(0) >= min);
        for k in kids {
            prune(k, min);
        }
    }
}

/// The libraries the findings name, with their versions, once each.
fn libraries(findings: &Value) -> Vec<Value> {
    let mut seen = BTreeMap::new();
    for f in findings["findings"].as_array().into_iter().flatten() {
        let c = &f["culprit"];
        if let Some(lib) = c["library"].as_str() {
            let v = c["library_version"].as_str().unwrap_or("").to_string();
            seen.entry((lib.to_string(), v))
                .or_insert_with(|| f["rule_id"].clone());
        }
    }
    seen.into_iter()
        .map(|((library, version), rule)| json!({"library": library, "version": version, "rule": rule}))
        .collect()
}

/// An episode id as given in a URL: its `+` comes as a space when the id was typed in
/// unencoded (`?event=throttling@1796654380+18`), and no id holds a space.
pub fn typed_id(id: &str) -> String {
    id.trim().replace(' ', "+")
}

/// Parameters of `/api/v1/report`: an episode id, or a window.
#[derive(Debug, serde::Deserialize)]
pub struct ReportQuery {
    pub event: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
}

/// `GET /api/v1/report`: the incident report of an episode or a window, as a download.
pub async fn route(
    axum::extract::State(st): axum::extract::State<std::sync::Arc<crate::AppState>>,
    q: Result<axum::extract::Query<ReportQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    let q = q
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?
        .0;
    let scope = match (&q.event.as_deref().map(typed_id), &q.from, &q.to) {
        (Some(id), None, None) => Scope::of_event(id).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("event {id:?} is not an episode id (`<kind>@<start epoch s>+<seconds>`)"),
            )
        })?,
        (None, Some(f), Some(t)) => Scope {
            from: api::parse_time(f)?,
            to: api::parse_time(t)?,
            event: None,
        },
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "give event, or from and to".into(),
            ))
        }
    };
    if scope.from >= scope.to {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "from must be before to".into(),
        ));
    }
    let dir = st.cfg.dir.clone();
    st.heavy
        .run(jitterscope_model::cancel::Token::new(), move || {
            let d = data(&dir, &scope)?;
            let name = file_name(&d);
            Ok((
                [
                    (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
                    (
                        header::CONTENT_DISPOSITION,
                        format!("attachment; filename=\"{name}\""),
                    ),
                ],
                html(&d),
            )
                .into_response())
        })
        .await
}

/// `jitterscope-<host>-<episode or start>.html`, in characters any file system takes.
pub fn file_name(data: &Value) -> String {
    let host = data["range"]["host"].as_str().unwrap_or("host");
    let what = match data["event"].as_str() {
        Some(id) => id.to_string(),
        None => format!("{:.0}", data["window"]["from"].as_f64().unwrap_or(0.0)),
    };
    let clean: String = format!("jitterscope-{host}-{what}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{clean}.html")
}

/// Embeds text in an HTML `<script>` or `<style>` element: a `</` inside would end it early.
fn inline(text: &str) -> String {
    text.replace("</", "<\\/")
}

/// The report as one HTML document.
pub fn html(data: &Value) -> String {
    let host = data["range"]["host"].as_str().unwrap_or("");
    let title = match data["event"].as_str() {
        Some(id) => format!("jitterscope incident {id} on {host}"),
        None => format!("jitterscope report on {host}"),
    };
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    // `<` as \u003c: the JSON can then hold any text (a process named `</script>`).
    let json = serde_json::to_string(data)
        .unwrap_or_default()
        .replace('<', "\\u003c");
    let mut out = String::with_capacity(json.len() + 200_000);
    out.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str(&format!("<title>{}</title>\n", escape(&title)));
    // No icon to fetch: the file asks nothing of any server.
    out.push_str("<link rel=\"icon\" href=\"data:,\">\n");
    for name in crate::assets::STYLES {
        out.push_str("<style>\n");
        out.push_str(&inline(crate::assets::text(name)));
        out.push_str("\n</style>\n");
    }
    out.push_str("</head>\n<body class=\"report\">\n");
    out.push_str(crate::assets::BODY);
    out.push_str("\n<script>window.JITTERSCOPE_REPORT = ");
    out.push_str(&json);
    out.push_str(";</script>\n");
    for name in crate::assets::SCRIPTS {
        out.push_str("<script>\n");
        out.push_str(&inline(crate::assets::text(name)));
        out.push_str("\n</script>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_text_cannot_end_its_element() {
        let d = json!({"range": {"host": "h<1>"}, "event": null, "x": "</script><b>"});
        let h = html(&d);
        assert_eq!(
            h.matches("</script>").count(),
            crate::assets::SCRIPTS.len() + 1
        );
        assert!(h.contains("<title>jitterscope report on h&lt;1&gt;</title>"));
        assert!(h.contains("\\u003c/script>\\u003cb>"));
    }

    #[test]
    fn narrow_frames_fold_into_their_parent() {
        let mut t = json!({"name": "all", "value": 100, "children": [
            {"name": "a", "value": 99, "children": [{"name": "tiny", "value": 1}]},
            {"name": "b", "value": 1}]});
        prune(&mut t, 2);
        assert_eq!(t["children"].as_array().unwrap().len(), 1);
        assert!(t["children"][0]["children"].as_array().unwrap().is_empty());
    }

    #[test]
    fn an_episode_is_reported_with_ten_seconds_either_side() {
        let s = Scope::of_event("throttling@1795331535+4").unwrap();
        assert_eq!(s.from, 1_795_331_525_000_000_000);
        assert_eq!(s.to, 1_795_331_549_000_000_000);
        assert!(Scope::of_event("nonsense").is_none());
    }

    #[test]
    fn a_report_from_the_fleet_holds_what_the_fleet_keeps() {
        let ep = jitterscope_fleet::query::Episode {
            mark: jitterscope_model::signals::Mark {
                kind: "throttling".into(),
                series: "cgroup./jitterscope-lab/cfs-throttle.cpu.throttled_pct".into(),
                state: jitterscope_model::signals::MarkState::Start,
                from_ns: 1_796_000_000_400_000_000,
                to_ns: 1_796_000_015_400_000_000,
                peak: 100.0,
                baseline: 0.0,
                threshold: 20.0,
            },
            open: false,
            findings: vec![json!({"rule_id": "cpu.cfs-throttling",
                "culprit": {"library": "glibc", "library_version": "2.36"}})],
            stacks: vec![
                ("lab-fibtest;main;fib".into(), 50),
                ("lab-fibtest;main;x_[k]".into(), 5),
            ],
            hz: 49,
            host: json!({"kernel": "6.1.0-41-amd64"}),
        };
        let d = from_fleet("busy", &ep).unwrap();
        assert_eq!(d["event"], "throttling@1796000000+15");
        assert_eq!(d["events"][0]["id"], d["event"]);
        assert_eq!(d["range"]["kernel"], "6.1.0-41-amd64");
        // The flame graph is of the episode's own seconds, as the page asks for it.
        let (f, t) = Scope::of_event("throttling@1796000000+15")
            .unwrap()
            .flame_window();
        assert_eq!(d["flame"]["plain"]["from_ns"], f);
        assert_eq!(d["flame"]["plain"]["to_ns"], t);
        assert_eq!(d["flame"]["plain"]["tree"]["value"], 55);
        assert!(d["flame"]["before"]["error"].is_string());
        assert_eq!(d["charts"], json!([]));
        assert_eq!(d["libraries"][0]["version"], "2.36");
        assert!(d["findings"]["notes"][0]
            .as_str()
            .unwrap()
            .contains("fleet store"));
        assert_eq!(
            file_name(&d),
            "jitterscope-busy-throttling_1796000000_15.html"
        );
        // A kind this build does not know makes no report.
        let mut other = ep.clone();
        other.mark.kind = "newer-kind".into();
        assert!(from_fleet("busy", &other).is_none());
    }
}
