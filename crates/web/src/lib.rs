//! `jitterscope serve`: a read-only web UI over a store, its JSON API (`/api/v1`, described
//! by `/api/v1/openapi.json`) and a Prometheus endpoint (`/metrics`).
//!
//! - [`api`]: the JSON handlers (metrics, range, series, events, findings, flame graph).
//! - [`prom`]: `/metrics`: base units, counters, peaks between scrapes, histograms.
//! - [`assets`]: the UI, embedded at build time.
//! - [`fleet`]: `/fleet` and `/api/v1/fleet/…` over the ClickHouse recorders push to
//!   (`serve --clickhouse`).
//!
//! Access: without a token the server binds only loopback addresses and also refuses any
//! request whose peer is not loopback. Binding anything else needs a token, which every
//! request must then carry (`Authorization: Bearer …`, or `?token=` for a browser's first
//! page, which sets a same-site cookie for the page's own requests). Only GET and HEAD are
//! routed. With `public_metrics`, `/metrics` and `/healthz` are served to any client without
//! the token (as node_exporter's are), so a Prometheus and a kubelet reach them on the pod's
//! address, and the server may listen beyond loopback without a token; the UI and the API
//! stay loopback-only (or token-only).

pub mod api;
pub mod assets;
pub mod charts;
pub mod error;
pub mod fleet;
pub mod limits;
pub mod names;
pub mod prom;
pub mod report;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// What `serve` serves and how.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The store.
    pub dir: PathBuf,
    /// The token every request must carry; required for a non-loopback address.
    pub token: Option<String>,
    /// Processes exposed on `/metrics` (the busiest by CPU).
    pub top_processes: usize,
    /// `/metrics` answers 503 when the newest sample is older than this (a stopped recorder
    /// must not look like a flat line); zero serves any age.
    pub metrics_max_age: Duration,
    /// `jitterscope_build_info`'s labels (version, revision).
    pub build: Vec<(String, String)>,
    /// The ClickHouse recorders push to (`record --clickhouse`): the fleet page asks it.
    pub clickhouse: Option<String>,
    /// Its user and password, when not the default user.
    pub clickhouse_user: Option<(String, String)>,
    /// `/metrics` and `/healthz` to any client, without the token.
    pub public_metrics: bool,
    /// The fleet page's link to a host's own web UI: a URL with `{host}` in it.
    pub fleet_host_url: Option<String>,
}

/// The paths `public_metrics` opens.
const PUBLIC: &[&str] = &["/metrics", "/healthz"];

/// Shared by the handlers.
#[derive(Debug)]
pub struct AppState {
    pub cfg: Config,
    /// The pool heavy requests run on.
    pub heavy: limits::Heavy,
    /// Cancelled when the server stops: every heavy read then ends.
    pub stopping: jitterscope_model::cancel::Token,
    /// Places for light reads ([`limits::light`]).
    pub light: tokio::sync::Semaphore,
    /// What `/metrics` carries between scrapes (counters, windows, histograms).
    pub scrapes: prom::Scrapes,
}

impl AppState {
    /// The state of a server of `cfg`, with its heavy-request pool started.
    pub fn new(cfg: Config) -> Result<Arc<AppState>> {
        let stopping = jitterscope_model::cancel::Token::new();
        let heavy = limits::Heavy::start(stopping.clone())
            .context("cannot start the server's reader threads")?;
        Ok(Arc::new(AppState {
            cfg,
            heavy,
            stopping,
            light: tokio::sync::Semaphore::new(limits::LIGHT_AT_ONCE),
            scrapes: prom::Scrapes::default(),
        }))
    }
}

/// Refuses to listen beyond loopback without a token, unless only the public paths are served
/// to other clients (`serve`'s argument check says the same before the token file is read).
pub fn check_listen(listen: SocketAddr, token: bool, public_metrics: bool) -> Result<()> {
    if !listen.ip().is_loopback() && !token && !public_metrics {
        bail!(
            "--listen {listen} is not a loopback address: it needs --auth-token-file (every request then carries the token), or --public-metrics to serve only /metrics and /healthz beyond loopback"
        );
    }
    Ok(())
}

/// Refuses a configuration that would expose the store without a token.
pub fn check(cfg: &Config) -> Result<()> {
    check_listen(cfg.listen, cfg.token.is_some(), cfg.public_metrics)?;
    if let Some(t) = &cfg.token {
        if t.len() < 16 {
            bail!(
                "the auth token is too short ({} characters; use at least 16)",
                t.len()
            );
        }
    }
    match std::fs::metadata(&cfg.dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("no store at {}", cfg.dir.display())
        }
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read the store {}", cfg.dir.display()))
        }
        Ok(m) if !m.is_dir() => bail!("{} is not a store: not a directory", cfg.dir.display()),
        Ok(_) => {}
    }
    // Every request lists the store: one this user cannot list would start, then answer 500
    // to everything.
    jitterscope_store::Reader::open(&cfg.dir)
        .and_then(|r| r.segments())
        .with_context(|| format!("cannot read the store {}", cfg.dir.display()))?;
    Ok(())
}

/// Compares without stopping at the first difference, so timing says nothing of the token.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Where a request's token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carried {
    Header,
    Query,
    Cookie,
}

/// The cookie set when a browser opens the UI with `?token=`: its page's own requests (the
/// scripts it loads, its API calls) then carry the token without it sitting in every URL.
const COOKIE: &str = "jitterscope_token";

fn token_of(req: &Request) -> Option<(&str, Carried)> {
    if let Some(h) = req.headers().get(header::AUTHORIZATION) {
        // The scheme is case-insensitive and may be followed by several spaces (RFC 7235
        // section 2.1); clients do send `bearer`.
        return h
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| (t.trim_start_matches(' '), Carried::Header));
    }
    if let Some(t) = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")))
    {
        return Some((t, Carried::Query));
    }
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .map(|t| (t, Carried::Cookie))
}

async fn access(
    State(st): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if st.cfg.public_metrics && PUBLIC.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    match &st.cfg.token {
        Some(t) => match token_of(&req) {
            Some((given, how)) if same(given.as_bytes(), t.as_bytes()) => {
                let mut r = next.run(req).await;
                if how == Carried::Query {
                    if let Ok(v) = header::HeaderValue::from_str(&format!(
                        "{COOKIE}={t}; HttpOnly; SameSite=Strict; Path=/"
                    )) {
                        r.headers_mut().insert(header::SET_COOKIE, v);
                    }
                }
                r
            }
            _ => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a token is required: Authorization: Bearer <token>\n",
            )
                .into_response(),
        },
        None if peer.ip().is_loopback() => next.run(req).await,
        None => (
            StatusCode::FORBIDDEN,
            "only loopback clients are served without --auth-token-file\n",
        )
            .into_response(),
    }
}

/// The routes.
pub fn router(st: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/assets/{name}", get(assets::file))
        .route("/metrics", get(prom::metrics))
        .route("/healthz", get(api::healthz))
        .route("/api/v1/openapi.json", get(assets::openapi))
        .route("/api/v1/metrics", get(api::metrics))
        .route("/api/v1/charts", get(api::charts))
        .route("/api/v1/range", get(api::range))
        .route("/api/v1/series", get(api::series))
        .route("/api/v1/events", get(api::events))
        .route("/api/v1/findings", get(api::findings))
        .route("/api/v1/flame", get(api::flame))
        .route("/api/v1/table", get(api::table))
        .route("/api/v1/report", get(report::route))
        .route("/fleet", get(assets::fleet))
        .route("/api/v1/fleet/episodes", get(fleet::episodes))
        .route("/api/v1/fleet/findings", get(fleet::findings))
        .route("/api/v1/fleet/inventory", get(fleet::inventory))
        .route("/api/v1/fleet/flame", get(fleet::flame))
        .route("/api/v1/fleet/about", get(fleet::about))
        .route("/api/v1/fleet/report", get(fleet::report))
        .layer(axum::middleware::from_fn_with_state(st.clone(), access))
        .with_state(st)
}

/// Serves until `stop` is set (polled every 200 ms): the caller's SIGINT/SIGTERM flag.
pub fn run(cfg: Config, stop: &'static std::sync::atomic::AtomicBool) -> Result<()> {
    check(&cfg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("serve")
        .build()
        .context("cannot start the server's runtime")?;
    let r = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "jitterscope: serving {} on http://{addr}/{}",
            cfg.dir.display(),
            if cfg.token.is_some() {
                " (token required)"
            } else {
                ""
            }
        );
        let st = AppState::new(cfg)?;
        serve(listener, st, async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await
    });
    // Blocking tasks still running (a light read stuck on the disk) are not waited for.
    rt.shutdown_timeout(Duration::from_millis(100));
    r
}

/// Serves `st` on `listener` until `shutdown` completes, then ends within
/// [`limits::SHUTDOWN_GRACE`]: heavy reads are cancelled at once, answers in flight get the
/// grace period, and connections still open after it are dropped.
///
/// Connections: at most [`limits::max_connections`] at once (the listener is not polled
/// meanwhile, so the kernel's backlog holds the next ones), and a connection that does not
/// complete a request's headers within [`limits::HEADER_TIMEOUT`], whether new or kept alive,
/// is closed: idle sockets cannot hold the server's file descriptors. A client that stops
/// reading its answer for [`limits::WRITE_TIMEOUT`] is disconnected, so unread answers cannot
/// pile up in memory.
pub async fn serve(
    listener: tokio::net::TcpListener,
    st: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::Service;
    let app = router(st.clone());
    let slots = Arc::new(tokio::sync::Semaphore::new(limits::max_connections()));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits::HEADER_TIMEOUT)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.context("connection slots closed")?,
            () = &mut shutdown => break,
        };
        let (io, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors or a connection reset before accept: the next one
                    // may do; a tight loop would only burn the CPU we are watching.
                    if !matches!(e.kind(), std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset) {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = io.set_nodelay(true);
        let mut io = tokio_io_timeout::TimeoutStream::new(io);
        io.set_write_timeout(Some(limits::WRITE_TIMEOUT));
        let io = Box::pin(io);
        let app = app.clone();
        let svc =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                let mut app = app.clone();
                async move { app.call(req.map(axum::body::Body::new)).await }
            });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(io), svc));
        tokio::spawn(async move {
            let _ = conn.await;
            drop(slot);
        });
    }
    drop(listener);
    st.stopping.cancel();
    let _ = tokio::time::timeout(limits::SHUTDOWN_GRACE, graceful.shutdown()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abcdefghijklmnop", b"abcdefghijklmnop"));
        assert!(!same(b"abcdefghijklmnop", b"abcdefghijklmnoq"));
        assert!(!same(b"abc", b"abcd"));
    }

    #[test]
    fn exposing_without_a_token_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config {
            listen: "0.0.0.0:9630".parse().unwrap(),
            dir: dir.path().to_path_buf(),
            token: None,
            top_processes: 20,
            metrics_max_age: Duration::from_secs(60),
            clickhouse: None,
            clickhouse_user: None,
            public_metrics: false,
            fleet_host_url: None,
            build: Vec::new(),
        };
        assert!(check(&cfg)
            .unwrap_err()
            .to_string()
            .contains("--auth-token-file"));
        cfg.token = Some("short".into());
        assert!(check(&cfg).unwrap_err().to_string().contains("too short"));
        cfg.token = Some("0123456789abcdef".into());
        check(&cfg).unwrap();
        cfg.listen = "[::1]:0".parse().unwrap();
        cfg.token = None;
        check(&cfg).unwrap();
    }

    #[test]
    fn a_store_that_is_a_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("store");
        std::fs::write(&file, "not a store").unwrap();
        let cfg = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            dir: file.clone(),
            token: None,
            top_processes: 20,
            metrics_max_age: Duration::from_secs(60),
            clickhouse: None,
            clickhouse_user: None,
            public_metrics: false,
            fleet_host_url: None,
            build: Vec::new(),
        };
        let e = check(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("not a directory") && e.contains(&*file.to_string_lossy()),
            "{e}"
        );
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let with = |auth: &str| {
            axum::http::Request::builder()
                .header(header::AUTHORIZATION, auth)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        for auth in [
            "Bearer 0123456789abcdef",
            "bearer 0123456789abcdef",
            "BEARER 0123456789abcdef",
            "Bearer   0123456789abcdef",
        ] {
            let r = with(auth);
            assert_eq!(
                token_of(&r),
                Some(("0123456789abcdef", Carried::Header)),
                "{auth}"
            );
        }
        for auth in [
            "Basic 0123456789abcdef",
            "Bearer0123456789abcdef",
            "Bearerx y",
        ] {
            let r = with(auth);
            assert_eq!(token_of(&r), None, "{auth}");
        }
    }
}
