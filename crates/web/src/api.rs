//! The JSON API. Reading the store blocks, so each handler runs off the runtime's threads:
//! light reads on the blocking pool, heavy ones on `limits::Heavy`'s readers.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use jitterscope_diagnose::{Data, Options};
use jitterscope_model::cancel::Token;
use jitterscope_model::glob::Pattern;
use jitterscope_model::metrics::all;
use jitterscope_profile::window::{Filter, Named};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::AppState;

pub use crate::error::ApiError;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, msg.into())
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"))
}

/// The header that carries what a read skipped as damaged, for answers whose body has no place
/// for it (`/api/v1/events`, `/metrics`).
pub const DAMAGED_HEADER: &str = "x-jitterscope-damaged";

/// Adds [`DAMAGED_HEADER`] with the damage note when anything was skipped.
pub fn damage_header(resp: &mut Response, d: &jitterscope_model::stored::Damage) {
    let Some(note) = d.note() else { return };
    let ascii: String = note
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if let Ok(v) = header::HeaderValue::from_str(&ascii) {
        resp.headers_mut().insert(DAMAGED_HEADER, v);
    }
}

/// A query string that does not parse (a missing `select`, `points=abc`) gets the same
/// one-line JSON error as any other bad parameter, not axum's plain-text rejection.
fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(v)| v)
        .map_err(|e| bad(e.body_text().replace('\n', " ")))
}

/// A time parameter: epoch seconds (fractions allowed) or RFC 3339.
pub fn parse_time(s: &str) -> Result<i64, ApiError> {
    let t = s.trim();
    use jitterscope_model::time::{LATEST, MAX_EPOCH_SECS, SUPPORTED_RANGE};
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && (0.0..=MAX_EPOCH_SECS).contains(&secs) {
            return Ok((secs * 1e9).round() as i64);
        }
        return Err(bad(format!(
            "epoch seconds {s:?} are outside the supported range, 0 to {MAX_EPOCH_SECS} \
             (1970-01-01T00:00:00Z to {LATEST})"
        )));
    }
    match chrono::DateTime::parse_from_rfc3339(t) {
        // Well-formed, but nanoseconds since the epoch cannot hold it.
        Ok(d) => d.timestamp_nanos_opt().ok_or_else(|| {
            bad(format!(
                "time {s:?} is outside the supported range, {SUPPORTED_RANGE}"
            ))
        }),
        Err(_) => Err(bad(format!(
            "time {s:?} is neither epoch seconds nor RFC 3339"
        ))),
    }
}

/// `from` and `to` of a request.
#[derive(Debug, Deserialize, Default)]
pub struct Window {
    pub from: Option<String>,
    pub to: Option<String>,
}

/// The store's first and last record times.
fn bounds(dir: &Path) -> Result<(i64, i64), ApiError> {
    let r = jitterscope_store::Reader::open(dir).map_err(internal)?;
    r.time_bounds()
        .map_err(internal)?
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, "the store holds no samples".into()))
}

/// The requested window; without `to`, the store's newest sample; without `from`, the hour
/// before `to`.
fn resolve(from: &Option<String>, to: &Option<String>, dir: &Path) -> Result<(i64, i64), ApiError> {
    let to = match to {
        Some(t) => parse_time(t)?,
        None => bounds(dir)?.1,
    };
    let from = match from {
        Some(f) => parse_time(f)?,
        None => to - 3_600_000_000_000,
    };
    if from >= to {
        return Err(bad("from must be before to"));
    }
    Ok((from, to))
}

impl Window {
    fn resolve(&self, dir: &Path) -> Result<(i64, i64), ApiError> {
        resolve(&self.from, &self.to, dir)
    }
}

/// `GET /api/v1/metrics`: every metric of the registry.
pub async fn metrics() -> impl IntoResponse {
    let v: Vec<_> = all()
        .iter()
        .map(|d| {
            json!({
                "name": d.name,
                "kind": d.kind.as_str(),
                "unit": d.unit.as_str(),
                "help": d.help,
                "openmetrics": jitterscope_model::openmetrics::family_name(d),
                "prometheus": jitterscope_model::export::base_name(d).name,
            })
        })
        .collect();
    Json(v)
}

/// `GET /api/v1/charts`: the timelines the page draws, and the series of each.
pub async fn charts() -> impl IntoResponse {
    let v: Vec<_> = crate::charts::CHARTS.iter().map(|c| c.out()).collect();
    Json(v)
}

/// `GET /api/v1/range`: the recorded span.
pub async fn range(State(st): State<Arc<AppState>>) -> Result<Json<serde_json::Value>, ApiError> {
    let dir = st.cfg.dir.clone();
    crate::limits::light(&st.light, move || range_read(&dir))
        .await?
        .map(Json)
}

/// The recorded span, and the host and kernel of its newest sample.
pub fn range_read(dir: &Path) -> Result<serde_json::Value, ApiError> {
    let (first, last) = bounds(dir)?;
    let (host, kernel) = newest_host(dir, last).unwrap_or_default();
    Ok(json!({
        "from_ns": first,
        "to_ns": last,
        "from": jitterscope_model::time::rfc3339(first),
        "to": jitterscope_model::time::rfc3339(last),
        "host": host,
        "kernel": kernel,
    }))
}

/// The host name and kernel of the sample at `ts` (the newest): the recorder's `--host`.
fn newest_host(dir: &std::path::Path, ts: i64) -> Option<(String, String)> {
    let reader = jitterscope_model::stored::SampleReader::open(dir).ok()?;
    let s = reader
        .samples(ts, ts, jitterscope_model::codec::Parts::NONE)
        .ok()?
        .next()?;
    Some((s.host.hostname.clone(), s.host.kernel.clone()))
}

/// `GET /healthz`: 200 while the recorder records (the newest sample is at most
/// `--metrics-max-age` old), else 503 with why; for a kubelet's probes and a load balancer.
/// A liveness probe of the recorder's container on it restarts a recorder that stopped
/// writing, as systemd's watchdog does for the service.
pub async fn healthz(State(st): State<Arc<AppState>>) -> Response {
    let dir = st.cfg.dir.clone();
    let max_age = st.cfg.metrics_max_age;
    let r = crate::limits::light(&st.light, move || {
        let reader =
            jitterscope_model::stored::SampleReader::open(&dir).map_err(|e| e.to_string())?;
        let newest = reader
            .store()
            .latest_ts()
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the store holds no samples yet".to_string())?;
        let now = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
        let age = (now - newest).max(0) as f64 / 1e9;
        if !max_age.is_zero() && age > max_age.as_secs_f64() {
            return Err(format!(
                "the newest sample is {age:.0} s old (more than {max_age:?}): is the recorder running?"
            ));
        }
        Ok(format!("ok: the newest sample is {age:.1} s old"))
    })
    .await;
    match r {
        Ok(Ok(msg)) => (StatusCode::OK, format!("{msg}\n")).into_response(),
        Ok(Err(why)) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Parameters of `/api/v1/series`.
#[derive(Debug, Deserialize)]
pub struct SeriesQuery {
    /// Comma-separated names or globs (`cgroup.*.cpu.throttled_pct`).
    pub select: String,
    pub from: Option<String>,
    pub to: Option<String>,
    /// Points across the window (the screen's width in pixels, say); 1..=5000.
    pub points: Option<usize>,
    /// Keep only the series with the highest maxima (for globs over processes or cgroups).
    pub top: Option<usize>,
}

/// One series downsampled: per bucket, the mean and the maximum of its points (`null` where
/// the bucket has none). A jitter spike lives in the maximum; the mean says how long it
/// lasted.
#[derive(Debug, Serialize)]
pub struct SeriesOut {
    /// The series' name (`dump --select` names it so).
    pub name: String,
    /// What a legend says: the instance (`nginx.service`, `redis (412)`) or, for a host-wide
    /// series, the metric's short name.
    pub label: String,
    /// The instance the series is about, absent for a host-wide series.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub unit: &'static str,
    pub mean: Vec<Option<f64>>,
    pub max: Vec<Option<f64>>,
}

/// Buckets `points` (sample index, value) over the sample times `ts` into `n` equal spans of
/// `[from, to]`: (bucket start times in seconds, mean, max).
pub fn downsample(
    ts: &[i64],
    points: &[(u32, f64)],
    from: i64,
    to: i64,
    n: usize,
) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let n = n.max(1);
    let width = ((to - from) as f64 / n as f64).max(1.0);
    let mut sum = vec![0.0f64; n];
    let mut cnt = vec![0u32; n];
    let mut max = vec![f64::NEG_INFINITY; n];
    for &(i, v) in points {
        let Some(&t) = ts.get(i as usize) else {
            continue;
        };
        if t <= from || t > to || !v.is_finite() {
            continue;
        }
        // Buckets are (start, end], as windows are.
        let b = (((t - from) as f64 / width).ceil() as usize).clamp(1, n) - 1;
        sum[b] += v;
        cnt[b] += 1;
        max[b] = max[b].max(v);
    }
    let mean = (0..n)
        .map(|b| (cnt[b] > 0).then(|| sum[b] / cnt[b] as f64))
        .collect();
    let max = (0..n).map(|b| (cnt[b] > 0).then_some(max[b])).collect();
    (mean, max)
}

/// `GET /api/v1/series`: the selected series over a window, downsampled.
pub async fn series(
    State(st): State<Arc<AppState>>,
    q: Result<Query<SeriesQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let q = query(q)?;
    // A malformed request is refused before it waits for a read slot.
    series_check(&q)?;
    let dir = st.cfg.dir.clone();
    st.heavy
        .run(Token::new(), move || series_read(&dir, &q).map(Json))
        .await
}

/// The patterns and points of a series request, or why it is refused.
fn series_check(q: &SeriesQuery) -> Result<(Vec<String>, usize), ApiError> {
    use crate::limits::{MAX_PATTERNS, MAX_PATTERN_LEN, MAX_SERIES};
    let select: Vec<String> = q
        .select
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if select.is_empty() {
        return Err(bad("select names no series"));
    }
    if select.len() > MAX_PATTERNS {
        return Err(bad(format!(
            "select has {} patterns; at most {MAX_PATTERNS}",
            select.len()
        )));
    }
    if let Some(p) = select.iter().find(|p| p.len() > MAX_PATTERN_LEN) {
        return Err(bad(format!(
            "a select pattern has {} characters; at most {MAX_PATTERN_LEN}",
            p.len()
        )));
    }
    let points = q.points.unwrap_or(600);
    if !(1..=5000).contains(&points) {
        return Err(bad("points must be 1..=5000"));
    }
    if q.top.is_some_and(|t| !(1..=MAX_SERIES).contains(&t)) {
        return Err(bad(format!("top must be 1..={MAX_SERIES}")));
    }
    Ok((select, points))
}

/// The answer of `/api/v1/series` (also what an incident report embeds).
pub fn series_read(dir: &Path, q: &SeriesQuery) -> Result<serde_json::Value, ApiError> {
    use crate::limits::MAX_SERIES;
    let (select, points) = series_check(q)?;
    let (from, to) = resolve(&q.from, &q.to, dir)?;
    // Load only the recorded part of the window: process series are evaluated on a
    // subsample whose stride follows the loaded span, and an hour's stride over ten
    // recorded seconds would leave them no pair of samples.
    let (first, last) = bounds(dir)?;
    crate::limits::check_window("series", from, to, (first, last))?;
    let sel: Vec<&str> = select.iter().map(String::as_str).collect();
    let mut damaged = jitterscope_model::stored::Damage::default();
    let (lo, hi) = (from.max(first - 1), to.min(last));
    let in_lane = in_signals_lane(&select, q.top);
    let covers = lo < hi
        && in_lane != InLane::No
        && jitterscope_store::Reader::open(dir)
            .and_then(|r| r.lane_covers(jitterscope_store::Lane::Signals, lo, hi))
            .unwrap_or(false);
    // The lane is read first (milliseconds). Records written before the timelines' series
    // were kept in it send the read to the samples, which have them.
    let from_lane: Option<Data> = if covers {
        let l = jitterscope_diagnose::events::load(dir, lo, hi, 0).map_err(internal)?;
        (in_lane == InLane::Always || l.version >= jitterscope_model::signals::LANE_VERSION)
            .then_some(l.data)
    } else {
        None
    };
    if lo < hi {
        let e = estimate(dir, &sel, lo, hi, from_lane.is_some())?;
        e.check(q.top, points)?;
    }
    let lane = from_lane.is_some();
    let d = if lo >= hi {
        Data::default()
    } else if let Some(mut d) = from_lane {
        let pats: Vec<Pattern> = sel.iter().map(|p| Pattern::new(p)).collect();
        d.series
            .retain(|name, _| pats.iter().any(|p| p.matches(name)));
        d
    } else {
        Data::load_globs(dir, lo, hi, &sel).map_err(internal)?
    };
    damaged.add(&d.damage);
    // No more buckets than samples: a short window is drawn sample by sample.
    // Samples with a value in the window (a store's first sample has no rates).
    let mut seen = vec![false; d.ts.len()];
    for s in d.series.values() {
        for &(i, _) in &s.points {
            if let Some(x) = seen.get_mut(i as usize) {
                *x = true;
            }
        }
    }
    let in_window =
        d.ts.iter()
            .zip(&seen)
            .filter(|(&t, &had)| had && t > from && t <= to)
            .count();
    // As many buckets as the recording interval fills across the window, at most
    // `points`: a window wider than what was recorded keeps its samples where they were
    // taken, with empty buckets where nothing was.
    let recorded: Vec<i64> =
        d.ts.iter()
            .zip(&seen)
            .filter(|(_, &had)| had)
            .map(|(&t, _)| t)
            .collect();
    let interval = match (recorded.first(), recorded.last()) {
        (Some(&a), Some(&b)) if recorded.len() > 1 => {
            ((b - a) / (recorded.len() as i64 - 1)).max(1)
        }
        _ => to - from,
    };
    let slots = ((to - from) as f64 / interval.max(1) as f64)
        .round()
        .max(1.0) as usize;
    let n = points.min(slots.max(in_window).max(1));
    let width = (to - from) as f64 / n as f64;
    let t: Vec<f64> = (0..n)
        .map(|b| (from as f64 + (b as f64 + 0.5) * width) / 1e9)
        .collect();
    // Each series' peak in the window, from its points: the top N are chosen before any is
    // bucketed, so a select of thousands with top=500 buckets 500 (two vectors of `n` each
    // per bucketed series were most of such a request's memory).
    let peak = |points: &[(u32, f64)]| {
        points
            .iter()
            .filter(|(i, v)| {
                v.is_finite() && d.ts.get(*i as usize).is_some_and(|&t| t > from && t <= to)
            })
            .map(|p| p.1)
            .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
    };
    let mut chosen: Vec<(&String, &jitterscope_diagnose::data::Series, f64)> = d
        .series
        .iter()
        .filter_map(|(name, s)| peak(&s.points).map(|p| (name, s, p)))
        .collect();
    if q.top.is_none() && chosen.len() > MAX_SERIES {
        return Err(too_large(format!(
        "select matches {} series; at most {MAX_SERIES} per answer (add top=N or narrow the select)",
        chosen.len()
    )));
    }
    if let Some(top) = q.top {
        chosen.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(b.0)));
        chosen.truncate(top);
    }
    let out: Vec<SeriesOut> = chosen
        .into_iter()
        .map(|(name, s, _)| {
            let (mean, max) = downsample(&d.ts, &s.points, from, to, n);
            let labels = s.def.labels_of(name).unwrap_or_default();
            let subject = crate::names::subject(s.def, &labels);
            SeriesOut {
                label: subject
                    .clone()
                    .unwrap_or_else(|| crate::names::metric_short(s.def)),
                subject,
                name: name.clone(),
                unit: s.def.unit.as_str(),
                mean,
                max,
            }
        })
        .collect();
    Ok(json!({
        "from_ns": from,
        "to_ns": to,
        "samples": in_window,
        "source": if lane { "signals" } else { "samples" },
        "damaged": damaged,
        "t": t,
        "series": out,
    }))
}

fn too_large(msg: String) -> ApiError {
    ApiError(StatusCode::PAYLOAD_TOO_LARGE, msg)
}

/// What a `series` request would read and answer, from the store's newest samples, before any
/// of the window is read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Series the select takes in the newest sample.
    pub series: usize,
    /// Of those, the series computed from the process table (read on a subsample).
    pub proc_series: usize,
    /// Samples in the window, at the newest samples' interval.
    pub samples: u64,
    /// Whether the signals lane serves it (no sample is decoded).
    pub lane: bool,
}

impl Estimate {
    /// 413 when the answer or the read would be over a limit.
    pub fn check(&self, top: Option<usize>, points: usize) -> Result<(), ApiError> {
        use crate::limits::{
            MAX_ANSWER_POINTS, MAX_DECODED_SAMPLES, MAX_LOADED_POINTS, MAX_SERIES,
        };
        if top.is_none() && self.series > MAX_SERIES {
            return Err(too_large(format!(
                "select matches {} series; at most {MAX_SERIES} per answer (add top=N or narrow the select)",
                self.series
            )));
        }
        if !self.lane && self.samples > MAX_DECODED_SAMPLES {
            return Err(too_large(format!(
                "these series are not in the signals lane and the window holds about {} samples; at most {MAX_DECODED_SAMPLES} are decoded per request (ask for a shorter window)",
                self.samples
            )));
        }
        if !self.lane {
            let per_proc = self
                .samples
                .min(jitterscope_diagnose::data::PROCESS_POINTS as u64);
            let held = (self.series - self.proc_series) as u64 * self.samples
                + self.proc_series as u64 * per_proc;
            if held > MAX_LOADED_POINTS {
                return Err(too_large(format!(
                    "reading {} series over about {} samples would hold about {held} points; at most {MAX_LOADED_POINTS} per request (narrow the select or the window)",
                    self.series, self.samples
                )));
            }
        }
        let shown = top.map_or(self.series, |t| t.min(self.series)) as u64;
        let buckets = shown * (points as u64).min(self.samples.max(1));
        if buckets > MAX_ANSWER_POINTS {
            return Err(too_large(format!(
                "the answer would hold {shown} series of {} points; at most {MAX_ANSWER_POINTS} points in all (lower points or top)",
                (points as u64).min(self.samples.max(1))
            )));
        }
        Ok(())
    }
}

/// Estimates a `series` read of `[lo, hi]`: the sampling interval and the series from the
/// selection evaluated on the newest sample and the one before it.
pub fn estimate(
    dir: &Path,
    sel: &[&str],
    lo: i64,
    hi: i64,
    lane: bool,
) -> Result<Estimate, ApiError> {
    use jitterscope_model::codec::Parts;
    use jitterscope_model::derive::Selection;
    let reader = jitterscope_model::stored::SampleReader::open(dir).map_err(internal)?;
    let (pair, _) = reader.latest_pair(Parts::ALL).map_err(internal)?;
    let Some((cur, prev)) = pair else {
        return Ok(Estimate {
            series: 0,
            proc_series: 0,
            samples: 0,
            lane,
        });
    };
    let pats: Vec<Pattern> = sel.iter().map(|p| Pattern::new(p)).collect();
    let (mut series, mut proc_series) = (0, 0);
    Selection::new(all(), &pats).for_each(&cur, prev.as_ref(), |def, _, _, _| {
        series += 1;
        if def.parts().contains(Parts::PROCESSES) {
            proc_series += 1;
        }
    });
    let interval = prev
        .as_ref()
        .map(|p| cur.ts_ns - p.ts_ns)
        .filter(|&g| g > 0)
        .unwrap_or(1_000_000_000);
    Ok(Estimate {
        series,
        proc_series,
        samples: ((hi - lo) / interval).max(0) as u64,
        lane,
    })
}

/// Where the store's signals lane (what the recorder derives every second) holds every series
/// `select` asks for: each pattern takes exactly the series of one watched signal or one
/// [`SHOWN`](jitterscope_model::signals::SHOWN) series (every series of its metric, or one
/// series of it), or the RSS of the largest processes when at most as many are wanted as the
/// lane keeps per sample. Decided through the registry, so `proc.*.rss_bytes` and
/// `proc.*.*.rss_bytes` are the same. Reading the lane skips decoding samples, and for RSS the
/// process tables: an hour of the RSS chart went from 3.1 s to milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InLane {
    /// Not all in the lane: decode the samples.
    No,
    /// Signals and RSS, which every lane record holds.
    Always,
    /// Also a `SHOWN` series, which records older than `LANE_VERSION` 1 lack.
    Shown,
}

fn in_signals_lane(select: &[String], top: Option<usize>) -> InLane {
    use jitterscope_model::registry::{parse_series, Fit};
    use jitterscope_model::signals::{shown, signal_of, RSS, RSS_TOP, SHOWN, SIGNALS};
    let mut out = InLane::Always;
    for p in select {
        let pat = Pattern::new(p);
        let (signal, kept) = if !p.contains(['*', '?']) {
            match parse_series(all(), p) {
                Some((def, labels)) => {
                    let l: Vec<&str> = labels.iter().map(String::as_str).collect();
                    (signal_of(def, &l).is_some(), shown(def, &l))
                }
                None => (false, false),
            }
        } else {
            // A glob: it must take every series of one metric. (Another metric's template may
            // admit a name it matches, such as a `memory.stat` field named
            // `x.cpu.throttled_pct`; no such series is recorded.)
            let mut fits = all().iter().filter(|d| d.fit(&pat) == Fit::Always);
            let (Some(&def), None) = (fits.next(), fits.next()) else {
                return InLane::No;
            };
            if def == RSS {
                (top.is_some_and(|t| t <= RSS_TOP), false)
            } else {
                (
                    SIGNALS
                        .iter()
                        .any(|s| s.metric == def && s.labels.is_empty()),
                    SHOWN.iter().any(|s| s.def == def && s.labels.is_empty()),
                )
            }
        };
        match (signal, kept) {
            (true, _) => {}
            (false, true) => out = InLane::Shown,
            (false, false) => return InLane::No,
        }
    }
    out
}

/// `GET /api/v1/events`: the episodes of a window.
pub async fn events(
    State(st): State<Arc<AppState>>,
    w: Result<Query<Window>, QueryRejection>,
) -> Result<Response, ApiError> {
    let w = query(w)?;
    let dir = st.cfg.dir.clone();
    st.heavy
        .run(Token::new(), move || {
            let (from, to) = w.resolve(&dir)?;
            let (ev, damage) = events_read(&dir, from, to)?;
            let mut resp = Json(ev).into_response();
            damage_header(&mut resp, &damage);
            Ok(resp)
        })
        .await
}

/// The episodes of a window, each with the unit of its series and the instance it is about
/// (`subject`) for a person to read, and what the read skipped.
pub fn events_read(
    dir: &Path,
    from: i64,
    to: i64,
) -> Result<(serde_json::Value, jitterscope_model::stored::Damage), ApiError> {
    crate::limits::check_window("events", from, to, bounds(dir)?)?;
    let (ev, damage) = jitterscope_diagnose::events(dir, from, to).map_err(internal)?;
    let list: Vec<serde_json::Value> = ev
        .iter()
        .map(|e| {
            let mut v = json!(e);
            v["unit"] = json!(crate::names::unit_of(&e.series));
            v["subject"] = json!(crate::names::subject_of(&e.series));
            v
        })
        .collect();
    Ok((json!(list), damage))
}

/// `GET /api/v1/findings`: `diagnose` of a window.
pub async fn findings(
    State(st): State<Arc<AppState>>,
    w: Result<Query<Window>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let w = query(w)?;
    let dir = st.cfg.dir.clone();
    st.heavy
        .run(Token::new(), move || {
            let (from, to) = w.resolve(&dir)?;
            findings_read(&dir, from, to).map(Json)
        })
        .await
}

/// `diagnose` of a window as JSON; the report carries what the read skipped (`damaged`).
pub fn findings_read(dir: &Path, from: i64, to: i64) -> Result<serde_json::Value, ApiError> {
    crate::limits::check_window("findings", from, to, bounds(dir)?)?;
    let r = jitterscope_diagnose::diagnose(dir, from, to, Options::default()).map_err(internal)?;
    Ok(json!(r))
}

/// The columns of `/api/v1/table`: (metric, statistic). The first ranks the rows.
type Columns = &'static [(&'static jitterscope_model::registry::MetricDef, Stat)];

/// Which of a bucket's statistics a column shows.
#[derive(Debug, Clone, Copy)]
enum Stat {
    Mean,
    Max,
}

impl Stat {
    fn as_str(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::Max => "max",
        }
    }
}

/// What a process looks like over a window, as `top` would show it: CPU, waiting for a CPU,
/// memory, major faults, preemptions.
const PROCESS_COLUMNS: Columns = {
    use jitterscope_model::metrics::process::*;
    &[
        (&PROC_CPU_PCT, Stat::Mean),
        (&PROC_CPU_PCT, Stat::Max),
        (&PROC_RUNQ_WAIT_PCT, Stat::Mean),
        (&PROC_RSS_BYTES, Stat::Max),
        (&PROC_MAJFLT_PER_S, Stat::Mean),
        (&PROC_IVCSW_PER_S, Stat::Mean),
    ]
};

/// What a cgroup looks like over a window: CPU, throttling, memory, refaults.
const CGROUP_COLUMNS: Columns = {
    use jitterscope_model::metrics::cgroup::*;
    &[
        (&CPU_USAGE_PCT, Stat::Mean),
        (&CPU_USAGE_PCT, Stat::Max),
        (&CPU_THROTTLED_PCT, Stat::Mean),
        (&MEMORY_USAGE_BYTES, Stat::Max),
        (&MEMORY_REFAULT_FILE_PER_S, Stat::Mean),
    ]
};

/// Parameters of `/api/v1/table`.
#[derive(Debug, Deserialize, Clone)]
pub struct TableQuery {
    /// `processes` or `cgroups`.
    pub of: String,
    pub from: Option<String>,
    pub to: Option<String>,
    /// Rows kept, the busiest first (by the first column); 1..=100, default 10.
    pub top: Option<usize>,
    /// A pid or a cgroup path whose row is kept (and marked) even when it is not among them.
    pub focus: Option<String>,
}

/// `GET /api/v1/table`: the processes or cgroups of a window, one row each, the busiest
/// first, with a culprit's row marked.
pub async fn table(
    State(st): State<Arc<AppState>>,
    q: Result<Query<TableQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let q = query(q)?;
    let dir = st.cfg.dir.clone();
    st.heavy
        .run(Token::new(), move || {
            let (from, to) = resolve(&q.from, &q.to, &dir)?;
            table_read(&dir, &q, from, to).map(Json)
        })
        .await
}

/// The answer of `/api/v1/table` (also what an incident report embeds).
pub fn table_read(
    dir: &Path,
    q: &TableQuery,
    from: i64,
    to: i64,
) -> Result<serde_json::Value, ApiError> {
    let (columns, key_labels): (Columns, usize) = match q.of.as_str() {
        "processes" => (PROCESS_COLUMNS, 2),
        "cgroups" => (CGROUP_COLUMNS, 1),
        o => return Err(bad(format!("of {o:?} is not processes or cgroups"))),
    };
    let top = q.top.unwrap_or(10);
    if !(1..=100).contains(&top) {
        return Err(bad("top must be 1..=100"));
    }
    // Each metric once, over the whole window as one bucket: its mean and its maximum.
    let mut defs: Vec<&'static jitterscope_model::registry::MetricDef> = Vec::new();
    for (d, _) in columns {
        if !defs.contains(d) {
            defs.push(d);
        }
    }
    let secs = |ns: i64| format!("{:.3}", ns as f64 / 1e9);
    // (the row's labels) -> (its subject, per metric: (mean, max)).
    type Row = (
        Option<String>,
        BTreeMap<&'static str, (Option<f64>, Option<f64>)>,
    );
    let mut rows: BTreeMap<Vec<String>, Row> = BTreeMap::new();
    for d in &defs {
        let sq = SeriesQuery {
            select: d.glob(),
            from: Some(secs(from)),
            to: Some(secs(to)),
            points: Some(1),
            top: Some(crate::limits::MAX_SERIES),
        };
        let v = series_read(dir, &sq)?;
        for s in v["series"].as_array().into_iter().flatten() {
            let Some(labels) = d.labels_of(s["name"].as_str().unwrap_or("")) else {
                continue;
            };
            let key: Vec<String> = labels.into_iter().take(key_labels).collect();
            let row = rows
                .entry(key.clone())
                .or_insert_with(|| (crate::names::subject(d, &key), BTreeMap::new()));
            let stat = |k: &str| s[k][0].as_f64();
            row.1.insert(d.name, (stat("mean"), stat("max")));
        }
    }
    let value = |row: &Row, (d, stat): &(&'static jitterscope_model::registry::MetricDef, Stat)| {
        row.1.get(d.name).and_then(|(mean, max)| match stat {
            Stat::Mean => *mean,
            Stat::Max => *max,
        })
    };
    let is_focus = |key: &[String]| {
        q.focus
            .as_deref()
            .is_some_and(|f| key.first().is_some_and(|k| k == f))
    };
    let mut ranked: Vec<(&Vec<String>, &Row)> = rows.iter().collect();
    ranked.sort_by(|a, b| {
        let (x, y) = (value(a.1, &columns[0]), value(b.1, &columns[0]));
        y.unwrap_or(f64::NEG_INFINITY)
            .total_cmp(&x.unwrap_or(f64::NEG_INFINITY))
            .then(a.0.cmp(b.0))
    });
    let total = ranked.len();
    let out: Vec<serde_json::Value> = ranked
        .iter()
        .enumerate()
        .filter(|(i, (k, _))| *i < top || is_focus(k))
        .map(|(i, (k, row))| {
            json!({
                "rank": i + 1,
                "key": k,
                "name": row.0,
                "focus": is_focus(k),
                "values": columns.iter().map(|c| value(row, c)).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({
        "of": q.of,
        "from_ns": from,
        "to_ns": to,
        "rows_total": total,
        "columns": columns.iter().map(|(d, stat)| json!({
            "metric": d.name,
            "stat": stat.as_str(),
            "unit": d.unit.as_str(),
            "name": format!("{} {}", crate::names::metric_short(d), stat.as_str()),
            "help": d.help,
        })).collect::<Vec<_>>(),
        "rows": out,
    }))
}

/// Parameters of `/api/v1/flame`.
#[derive(Debug, Deserialize, Default, Clone)]
pub struct FlameQuery {
    pub from: Option<String>,
    pub to: Option<String>,
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub cgroup: Option<String>,
    #[serde(default)]
    pub kernel_only: bool,
    /// `json` (d3-flame-graph's tree, default) or `folded`.
    pub format: Option<String>,
    /// `before`: a differential tree against the same length of time just before the window.
    pub compare: Option<String>,
}

/// A node of d3-flame-graph's tree.
#[derive(Debug, Default, Serialize)]
pub struct Node {
    pub name: String,
    pub value: u64,
    /// In a differential tree: the node's share of the window's samples minus its share of
    /// the samples before (-1..1; positive: it ran more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Node>,
}

/// The named stacks as paths from the root: process name, then frames root first. Kernel
/// frames carry `[k]` as in folded stacks.
fn paths(named: &Named) -> Vec<(Vec<String>, u64)> {
    named
        .stacks
        .iter()
        .map(|s| {
            let frames = s.frames.iter().map(|f| {
                if f.space == jitterscope_profile::window::Space::Kernel {
                    format!("{} [k]", f.name)
                } else {
                    f.name.to_string()
                }
            });
            (
                std::iter::once(s.comm.to_string()).chain(frames).collect(),
                s.count,
            )
        })
        .collect()
}

/// The named stacks as a tree under `all`.
pub fn tree(named: &Named) -> Node {
    tree_of(paths(named))
}

#[derive(Default)]
struct Acc {
    value: u64,
    kids: BTreeMap<String, Acc>,
}

impl Acc {
    fn of(stacks: impl IntoIterator<Item = (Vec<String>, u64)>) -> Acc {
        let mut root = Acc::default();
        for (path, count) in stacks {
            root.value += count;
            let mut n = &mut root;
            for name in path {
                n = n.kids.entry(name).or_default();
                n.value += count;
            }
        }
        root
    }

    /// As a d3-flame-graph node, children the largest first; with `before`, each node's
    /// delta against the same path there.
    fn node(self, name: String, before: Option<(&Acc, f64, f64)>) -> Node {
        let delta = before.map(|(b, now_total, before_total)| {
            self.value as f64 / now_total.max(1.0) - b.value as f64 / before_total.max(1.0)
        });
        let empty = Acc::default();
        let mut children: Vec<Node> = self
            .kids
            .into_iter()
            .map(|(k, v)| {
                let b = before.map(|(b, n, t)| (b.kids.get(&k).unwrap_or(&empty), n, t));
                v.node(k, b)
            })
            .collect();
        children.sort_by(|a, b| b.value.cmp(&a.value).then(a.name.cmp(&b.name)));
        Node {
            name,
            value: self.value,
            delta,
            children,
        }
    }
}

/// Folded stacks (`comm;root;…;leaf`, kernel frames `_[k]`) as a tree; kernel frames get
/// ` [k]`, as the single-host flame graph names them (the fleet's stacks
/// arrive folded).
pub fn folded_tree(stacks: &[(String, u64)]) -> Node {
    tree_of(stacks.iter().map(|(stack, n)| {
        let path = stack
            .split(';')
            .map(|f| match f.strip_suffix("_[k]") {
                Some(k) => format!("{k} [k]"),
                None => f.to_string(),
            })
            .collect();
        (path, *n)
    }))
}

/// Paths from the root (process name, then frames) with their samples, as d3-flame-graph's
/// tree under `all`; children the largest first.
pub fn tree_of(stacks: impl IntoIterator<Item = (Vec<String>, u64)>) -> Node {
    Acc::of(stacks).node("all".into(), None)
}

/// A differential tree (Brendan Gregg's differential flame graph): widths are the window's
/// samples, and each frame carries how much larger a share of the samples it took than in
/// `before`, so a frame that grew stands out from one that merely ran. Shares, not counts,
/// are compared: the two windows need not hold the same number of samples.
pub fn diff_tree_of(
    now: impl IntoIterator<Item = (Vec<String>, u64)>,
    before: impl IntoIterator<Item = (Vec<String>, u64)>,
) -> Node {
    let (now, before) = (Acc::of(now), Acc::of(before));
    let (n, b) = (now.value as f64, before.value as f64);
    now.node("all".into(), Some((&before, n, b)))
}

/// `GET /api/v1/flame`: the stack samples of a window.
pub async fn flame(
    State(st): State<Arc<AppState>>,
    q: Result<Query<FlameQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let dir = st.cfg.dir.clone();
    st.heavy
        .run(Token::new(), move || {
            let (from, to) = resolve(&q.from, &q.to, &dir)?;
            match q.format.as_deref() {
                None | Some("json") => Ok(Json(flame_read(&dir, &q, from, to)?).into_response()),
                Some("folded") => {
                    if q.compare.is_some() {
                        return Err(bad("compare needs format=json"));
                    }
                    let (named, _) = flame_named(&dir, &q, from, to)?;
                    let mut text = named.folded().join("\n");
                    text.push('\n');
                    Ok(
                        ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text)
                            .into_response(),
                    )
                }
                Some(f) => Err(bad(format!("format {f:?} is not json or folded"))),
            }
        })
        .await
}

/// The symbolised stacks of `(from, to]` under the request's filter.
fn flame_named(
    dir: &Path,
    q: &FlameQuery,
    from: i64,
    to: i64,
) -> Result<(Named, jitterscope_model::stored::Damage), ApiError> {
    crate::limits::check_window("flame", from, to, bounds(dir)?)?;
    let filter = Filter {
        pid: q.pid,
        comm: q.comm.clone(),
        cgroup: q.cgroup.clone(),
        kernel_only: q.kernel_only,
        skip_idle: false,
    };
    let (w, _, damaged) =
        jitterscope_profile::window::read_store(dir, from, to, &filter).map_err(internal)?;
    Ok((
        w.resolve(&mut jitterscope_profile::system::FileSymbolizer::new()),
        damaged,
    ))
}

/// The JSON answer of `/api/v1/flame` (also what an incident report embeds).
pub fn flame_read(
    dir: &Path,
    q: &FlameQuery,
    from: i64,
    to: i64,
) -> Result<serde_json::Value, ApiError> {
    let (named, damaged) = flame_named(dir, q, from, to)?;
    let mut out = json!({
        "from_ns": from,
        "to_ns": to,
        "samples": named.samples,
        "total": named.total,
        "hz": named.hz,
        "damaged": damaged,
    });
    match q.compare.as_deref() {
        None => out["tree"] = json!(tree(&named)),
        Some("before") => {
            let (bf, bt) = (from - (to - from), from);
            let before = match flame_named(dir, q, bf, bt) {
                Ok((b, _)) => b,
                // Nothing recorded before the window: every frame grew from nothing.
                Err(ApiError(StatusCode::NOT_FOUND, _)) => Named::default(),
                Err(e) => return Err(e),
            };
            out["before"] = json!({"from_ns": bf, "to_ns": bt, "samples": before.samples});
            out["tree"] = json!(diff_tree_of(paths(&named), paths(&before)));
        }
        Some(c) => return Err(bad(format!("compare {c:?} is not `before`"))),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_read_that_would_hold_too_many_points_is_refused_before_it_starts() {
        let e = |series, proc_series, samples| Estimate {
            series,
            proc_series,
            samples,
            lane: false,
        };
        // A day of 50 host series: 4.3 M points.
        let err = e(50, 0, 86_400).check(None, 600).unwrap_err();
        assert_eq!(err.0, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            err.1.contains("narrow the select or the window"),
            "{}",
            err.1
        );
        // A day of 45 host series, and an hour of 1,100: within the budget.
        e(45, 0, 86_400).check(None, 600).unwrap();
        e(1_100, 0, 3_600).check(Some(500), 600).unwrap();
        // Process series are read on a subsample: 3000 of them over a day hold 240 points each.
        e(3_020, 3_000, 86_400).check(Some(10), 600).unwrap();
        // The signals lane decodes no sample.
        let lane = Estimate {
            lane: true,
            ..e(100, 0, 86_400)
        };
        lane.check(None, 600).unwrap();
    }

    use super::*;

    #[test]
    fn a_differential_tree_compares_shares_not_counts() {
        let p = |s: &str, n: u64| (s.split(';').map(String::from).collect::<Vec<_>>(), n);
        // Before: 100 samples, `hot` 10% of them; in the window: 50 samples, `hot` 60%.
        let t = super::diff_tree_of(
            [p("app;main;hot", 30), p("app;main;cold", 20)],
            [p("app;main;hot", 10), p("app;main;cold", 90)],
        );
        let main = &t.children[0].children[0];
        let hot = main.children.iter().find(|n| n.name == "hot").unwrap();
        let cold = main.children.iter().find(|n| n.name == "cold").unwrap();
        assert!((hot.delta.unwrap() - 0.5).abs() < 1e-9, "{:?}", hot.delta);
        assert!((cold.delta.unwrap() + 0.5).abs() < 1e-9, "{:?}", cold.delta);
        assert!(main.delta.unwrap().abs() < 1e-9);
        // Widths stay the window's samples.
        assert_eq!((hot.value, cold.value, t.value), (30, 20, 50));
        // A frame new in the window grew by its whole share; a plain tree has no deltas.
        let t = super::diff_tree_of([p("new;f", 5)], []);
        assert_eq!(t.children[0].delta, Some(1.0));
        assert_eq!(super::tree_of([p("a;b", 1)]).children[0].delta, None);
    }

    #[test]
    fn buckets_keep_mean_and_max() {
        let ts = [10, 20, 30, 40];
        let pts = [(0, 1.0), (1, 3.0), (2, 10.0), (3, f64::NAN)];
        let (mean, max) = downsample(&ts, &pts, 0, 40, 2);
        assert_eq!(mean, vec![Some(2.0), Some(10.0)]);
        assert_eq!(max, vec![Some(3.0), Some(10.0)]);
        let (mean, _) = downsample(&ts, &pts, 0, 40, 8);
        assert_eq!(mean.iter().flatten().count(), 3);
    }

    #[test]
    fn every_timeline_but_per_process_ones_past_the_top_takes_the_signals_lane() {
        let select = |id: &str| -> (Vec<String>, Option<usize>) {
            let c = crate::charts::CHARTS
                .iter()
                .find(|c| c.id == id)
                .unwrap()
                .out();
            (c.select.split(',').map(str::to_string).collect(), c.top)
        };
        for id in ["runq", "throttling", "reclaim", "tlb", "rss"] {
            let (s, top) = select(id);
            assert_eq!(in_signals_lane(&s, top), InLane::Always, "{id}: {s:?}");
        }
        // Usr CPU and the cpu and io pressure are kept for the timelines only.
        for id in ["cpu", "psi"] {
            let (s, top) = select(id);
            assert_eq!(in_signals_lane(&s, top), InLane::Shown, "{id}: {s:?}");
        }
        for c in crate::charts::CHARTS {
            let o = c.out();
            let s: Vec<String> = o.select.split(',').map(str::to_string).collect();
            assert_ne!(in_signals_lane(&s, o.top), InLane::No, "{}", c.id);
        }
        let (rss, _) = select("rss");
        assert_eq!(
            in_signals_lane(&rss, Some(50)),
            InLane::No,
            "more RSS series than the lane keeps"
        );
        let no = |s: &str| in_signals_lane(&[s.to_string()], None);
        assert_eq!(no("cpu.iowait_pct"), InLane::No);
        assert_eq!(no("psi.*.some_pct"), InLane::No, "psi of every resource");
        assert_eq!(no("psi.io.some_pct"), InLane::Shown);
        assert_eq!(no("psi.memory.some_pct"), InLane::Always);
    }

    #[test]
    fn times_parse_or_say_why() {
        assert_eq!(parse_time("1.5").unwrap(), 1_500_000_000);
        assert_eq!(parse_time("1970-01-01T00:00:02Z").unwrap(), 2_000_000_000);
        assert!(parse_time("soon").is_err());
        assert!(parse_time("-1").is_err());
        // A valid RFC 3339 time beyond what the store can hold is refused for that reason.
        let e = parse_time("3000-01-01T00:00:00Z").unwrap_err().1;
        assert!(
            e.contains("outside the supported range") && e.contains("2262"),
            "{e}"
        );
        assert!(!e.contains("RFC 3339"), "{e}");
        assert!(parse_time("2262-04-11T23:47:16Z").is_ok());
        // The ends agree with the RFC 3339 ones: the whole range, nothing beyond it.
        assert_eq!(
            parse_time("9223372036").unwrap(),
            parse_time("2262-04-11T23:47:16Z").unwrap()
        );
        let e = parse_time("9223372037").unwrap_err().1;
        assert!(e.contains("2262-04-11T23:47:16Z"), "{e}");
    }
}
