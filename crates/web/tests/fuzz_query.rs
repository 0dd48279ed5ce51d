//! The API's query parsing under arbitrary input (times, selects, points, top, windows), through
//! the real router in this process: no panic, every answer one of the documented statuses with a
//! JSON reason, and every answer within the heavy-request time limit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use jitterscope_web::{limits, router, AppState, Config};
use proptest::prelude::*;
use tower::ServiceExt;

fn state() -> Arc<AppState> {
    AppState::new(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        dir: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/diagnose/tlb-shootdown"),
        token: None,
        top_processes: 3,
        metrics_max_age: Duration::ZERO,
        clickhouse: None,
        clickhouse_user: None,
        build: Vec::new(),
        public_metrics: false,
        fleet_host_url: None,
    })
    .unwrap()
}

/// Characters a query value may hold once decoded, the awkward ones over-represented.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,12}(\\.[0-9]{0,9})?",
        "-?[0-9]{1,25}",
        "(1e309|NaN|inf|-0|4e9|4000000001)",
        "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,12})?(Z|[+-][01][0-9]:[0-5][0-9])",
        "[a-z.*?,%]{0,40}",
        "[*]{1,300}",
        ".{0,64}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    let ep = prop_oneof![
        Just("series"),
        Just("events"),
        Just("findings"),
        Just("flame"),
        Just("range"),
    ];
    let key = prop_oneof![
        Just("from"),
        Just("to"),
        Just("select"),
        Just("points"),
        Just("top"),
        Just("format"),
        Just("pid"),
        Just("kernel_only"),
    ];
    (ep, proptest::collection::vec((key, value()), 0..6)).prop_map(|(ep, kv)| {
        let q: Vec<String> = kv
            .into_iter()
            .map(|(k, v)| {
                let enc: String = v
                    .bytes()
                    .map(|b| {
                        if b.is_ascii_alphanumeric() || b".-*_".contains(&b) {
                            (b as char).to_string()
                        } else {
                            format!("%{b:02X}")
                        }
                    })
                    .collect();
                format!("{k}={enc}")
            })
            .collect();
        format!("/api/v1/{ep}?{}", q.join("&"))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn any_query_gets_a_documented_answer_in_time(p in path()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let st = state();
        let (status, body, took) = rt.block_on(async {
            let mut req = Request::get(&p).body(Body::empty()).unwrap();
            req.extensions_mut()
                .insert(ConnectInfo("127.0.0.1:1".parse::<SocketAddr>().unwrap()));
            let t = Instant::now();
            let r = router(st).oneshot(req).await.unwrap();
            let status = r.status().as_u16();
            let body = axum::body::to_bytes(r.into_body(), 64 << 20).await.unwrap();
            (status, body, t.elapsed())
        });
        prop_assert!(
            matches!(status, 200 | 400 | 404 | 413 | 429 | 503),
            "{p}: {status} {}", String::from_utf8_lossy(&body[..body.len().min(300)])
        );
        if status != 200 {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let e = v["error"].as_str().unwrap_or_default();
            prop_assert!(!e.is_empty() && !e.contains('\n'), "{p}: {status} without a one-line reason");
        }
        prop_assert!(took <= limits::HEAVY_TIME_LIMIT + Duration::from_secs(5), "{p}: {took:?}");
    }
}
