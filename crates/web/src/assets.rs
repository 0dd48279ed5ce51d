//! The UI's files, embedded: our own from `assets/`, and the browser libraries vendored in
//! `web/vendor` (by `scripts/web-assets.sh`, from `web/package-lock.json`), so that neither
//! building nor running needs node.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// Name, content type, bytes.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/app.js"),
    ),
    (
        "fleet.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/fleet.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../assets/app.css"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../web/vendor/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../web/vendor/uPlot.min.css"),
    ),
    (
        "d3-flamegraph.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../web/vendor/d3-flamegraph.min.js"),
    ),
    (
        "d3-selection.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../web/vendor/d3-selection.min.js"),
    ),
    (
        "d3-flamegraph.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../web/vendor/d3-flamegraph.css"),
    ),
];

const INDEX: &str = include_str!("../assets/index.html");
const FLEET: &str = include_str!("../assets/fleet.html");

/// The OpenAPI description of `/api/v1`.
pub const OPENAPI: &str = include_str!("../assets/openapi.json");

/// `GET /`.
pub async fn index() -> Response {
    page(INDEX)
}

/// `GET /fleet`: across hosts (`serve --clickhouse`).
pub async fn fleet() -> Response {
    page(FLEET)
}

fn page(html: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // The page loads only its own files and talks only to this server.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
            ),
        ],
        html,
    )
        .into_response()
}

/// `GET /assets/{name}`.
pub async fn file(Path(name): Path<String>) -> Response {
    match FILES.iter().find(|f| f.0 == name) {
        Some((_, ty, body)) => (
            [
                (header::CONTENT_TYPE, *ty),
                (header::CACHE_CONTROL, "max-age=3600"),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}

/// `GET /api/v1/openapi.json`.
pub async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}
