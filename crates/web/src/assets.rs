//! The UI's files, embedded: our own from `assets/`, and the browser libraries vendored in
//! `web/vendor` (by `scripts/web-assets.sh`, from `web/package-lock.json`), so that neither
//! building nor running needs node.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// Name, content type, bytes.
const FILES: &[(&str, &str, &[u8])] = &[
    js("fmt.js", include_bytes!("../assets/fmt.js")),
    js("source.js", include_bytes!("../assets/source.js")),
    js("charts.js", include_bytes!("../assets/charts.js")),
    js("episode.js", include_bytes!("../assets/episode.js")),
    js("flame.js", include_bytes!("../assets/flame.js")),
    js("app.js", include_bytes!("../assets/app.js")),
    js("fleet.js", include_bytes!("../assets/fleet.js")),
    css("app.css", include_bytes!("../assets/app.css")),
    js(
        "uPlot.iife.min.js",
        include_bytes!("../../../web/vendor/uPlot.iife.min.js"),
    ),
    css(
        "uPlot.min.css",
        include_bytes!("../../../web/vendor/uPlot.min.css"),
    ),
    js(
        "d3-flamegraph.min.js",
        include_bytes!("../../../web/vendor/d3-flamegraph.min.js"),
    ),
    js(
        "d3-selection.min.js",
        include_bytes!("../../../web/vendor/d3-selection.min.js"),
    ),
    css(
        "d3-flamegraph.css",
        include_bytes!("../../../web/vendor/d3-flamegraph.css"),
    ),
];

const fn js(name: &'static str, b: &'static [u8]) -> (&'static str, &'static str, &'static [u8]) {
    (name, "text/javascript; charset=utf-8", b)
}

const fn css(name: &'static str, b: &'static [u8]) -> (&'static str, &'static str, &'static [u8]) {
    (name, "text/css; charset=utf-8", b)
}

/// The page's style sheets, in order.
pub const STYLES: &[&str] = &["uPlot.min.css", "d3-flamegraph.css", "app.css"];

/// The page's scripts, in order: the libraries, then ours (each of ours adds to the `JS`
/// namespace the next ones use; `app.js` starts the page).
pub const SCRIPTS: &[&str] = &[
    "uPlot.iife.min.js",
    "d3-selection.min.js",
    "d3-flamegraph.min.js",
    "fmt.js",
    "source.js",
    "charts.js",
    "episode.js",
    "flame.js",
    "app.js",
];

/// The page's markup inside `<body>`: the same for the live page and a report.
pub const BODY: &str = include_str!("../assets/body.html");

/// An embedded text file by name (empty for an unknown name: the lists above name only files
/// of [`FILES`], which a test checks).
pub fn text(name: &str) -> &'static str {
    FILES
        .iter()
        .find(|f| f.0 == name)
        .and_then(|f| std::str::from_utf8(f.2).ok())
        .unwrap_or("")
}

fn index_html() -> &'static str {
    static PAGE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PAGE.get_or_init(|| {
        let mut p = String::from(
            "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>jitterscope</title>\n<link rel=\"icon\" href=\"data:,\">\n",
        );
        for s in STYLES {
            p.push_str(&format!("<link rel=\"stylesheet\" href=\"/assets/{s}\">\n"));
        }
        p.push_str("</head>\n<body>\n");
        p.push_str(BODY);
        for s in SCRIPTS {
            p.push_str(&format!("<script src=\"/assets/{s}\"></script>\n"));
        }
        p.push_str("</body>\n</html>\n");
        p
    })
}

const FLEET: &str = include_str!("../assets/fleet.html");

/// The OpenAPI description of `/api/v1`.
pub const OPENAPI: &str = include_str!("../assets/openapi.json");

/// `GET /`.
pub async fn index() -> Response {
    page(index_html())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_embedded_files() {
        for name in STYLES.iter().chain(SCRIPTS) {
            assert!(!text(name).is_empty(), "{name} is not embedded");
        }
        let page = index_html();
        for name in SCRIPTS {
            assert!(page.contains(&format!("src=\"/assets/{name}\"")), "{name}");
        }
        // Ours start after the libraries they use, and app.js, which starts the page, last.
        assert_eq!(SCRIPTS.last(), Some(&"app.js"));
        assert!(BODY.contains("id=\"charts\"") && !BODY.contains("<script"));
    }
}
