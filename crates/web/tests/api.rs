//! The API, `/metrics` and access control over a recorded lab store, through a real server on
//! an ephemeral port and plain HTTP/1.1 requests.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use jitterscope_web::{AppState, Config};

fn store(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/diagnose")
        .join(name)
}

/// A server on `ip:0` over `dir`, running until the test process ends.
/// A server of `dir` on `listen`, with no token, fleet or age limit.
fn config(listen: SocketAddr, dir: PathBuf) -> Config {
    Config {
        listen,
        dir,
        token: None,
        top_processes: 3,
        metrics_max_age: Duration::ZERO,
        clickhouse: None,
        clickhouse_user: None,
        build: Vec::new(),
        public_metrics: false,
        fleet_host_url: None,
    }
}

fn start(ip: IpAddr, dir: PathBuf, token: Option<&str>, max_age: Duration) -> SocketAddr {
    let cfg = Config {
        token: token.map(str::to_string),
        metrics_max_age: max_age,
        ..config(SocketAddr::new(ip, 0), dir)
    };
    jitterscope_web::check(&cfg).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind(cfg.listen).await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            let st = AppState::new(cfg).unwrap();
            jitterscope_web::serve(l, st, std::future::pending())
                .await
                .unwrap();
        });
    });
    rx.recv().unwrap()
}

fn fixture_server() -> SocketAddr {
    start(
        "127.0.0.1".parse().unwrap(),
        store("tlb-shootdown"),
        None,
        Duration::ZERO,
    )
}

/// (status, headers, body) of one request.
fn request(addr: SocketAddr, method: &str, path: &str, headers: &[&str]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = buf[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, head, body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
}

fn get_json(addr: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let (st, _, body) = request(addr, "GET", path, &[]);
    (
        st,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

const STORM: (i64, i64) = (1_795_331_568, 1_795_331_574);

#[test]
fn range_metrics_and_series() {
    let a = fixture_server();
    let (st, r) = get_json(a, "/api/v1/range");
    assert_eq!(st, 200);
    assert_eq!(r["from"], "2026-11-22T07:12:45.399Z");
    assert_eq!(r["to"], "2026-11-22T07:12:55.399Z");

    let (_, m) = get_json(a, "/api/v1/metrics");
    let names: Vec<&str> = m
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"cgroup.<cgroup>.cpu.throttled_pct"));
    assert_eq!(names.len(), jitterscope_model::metrics::all().len());

    // The page's charts, each asked of the series API as the page asks: every one answers,
    // and the recording's TLB storm is on the TLB chart.
    let (st, charts) = get_json(a, "/api/v1/charts");
    assert_eq!(st, 200);
    let charts = charts.as_array().unwrap();
    assert_eq!(charts.len(), 7);
    for c in charts {
        let mut q = format!("/api/v1/series?select={}", c["select"].as_str().unwrap());
        if let Some(top) = c["top"].as_u64() {
            q.push_str(&format!("&top={top}"));
        }
        let (st, s) = get_json(a, &q);
        assert_eq!(st, 200, "{}: {s}", c["id"]);
        for x in s["series"].as_array().unwrap() {
            assert_eq!(x["unit"], c["unit"], "{}", c["id"]);
        }
        if c["id"] == "tlb" {
            assert_eq!(s["series"][0]["name"], "irq.tlb_per_s");
        }
    }

    // The default hour over 10 recorded seconds: 600 buckets of 6 s, the samples in the
    // buckets of the seconds they were taken, the rest empty; the storm's peak is the
    // recorded one.
    let (st, s) = get_json(a, "/api/v1/series?select=irq.tlb_per_s,cpu.sys_pct");
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["samples"], 10);
    let t: Vec<f64> = s["t"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(t.len(), 600);
    let (first, last) = (1_795_331_566.0, 1_795_331_576.0);
    for x in s["series"].as_array().unwrap() {
        for (i, v) in x["max"].as_array().unwrap().iter().enumerate() {
            if !v.is_null() {
                assert!(
                    t[i] > first - 6.0 && t[i] < last + 6.0,
                    "{}: a point drawn at {} is far from the recorded {first}..{last}",
                    x["name"],
                    t[i]
                );
            }
        }
    }
    // Over the recorded seconds alone: sample by sample.
    let (_, s1) = get_json(
        a,
        "/api/v1/series?select=irq.tlb_per_s&from=1795331565&to=1795331576",
    );
    assert_eq!(s1["t"].as_array().unwrap().len(), 11, "{s1}");
    let tlb = s["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "irq.tlb_per_s")
        .unwrap();
    assert_eq!(tlb["unit"], "per_second");
    let peak = tlb["max"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_f64())
        .fold(0.0, f64::max);
    let (ev, _) = jitterscope_diagnose::events(&store("tlb-shootdown"), 0, i64::MAX / 2).unwrap();
    let storm = ev.iter().find(|e| e.kind == "tlb-storm").unwrap();
    assert!((peak - storm.peak).abs() < 1e-6, "{peak} vs {}", storm.peak);

    // Downsampled to 2 buckets: each keeps the maximum of its samples.
    let (_, s2) = get_json(
        a,
        "/api/v1/series?select=irq.tlb_per_s&points=2&from=1795331565&to=1795331576",
    );
    let max2: Vec<f64> = s2["series"][0]["max"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_f64())
        .collect();
    assert_eq!(max2.len(), 2);
    assert!((max2.iter().cloned().fold(0.0, f64::max) - peak).abs() < 1e-6);

    // Globs over processes, the busiest kept.
    let (_, p) = get_json(
        a,
        "/api/v1/series?select=madvise.proc.*.dontneed_per_s&top=1",
    );
    let ps = p["series"].as_array().unwrap();
    assert_eq!(ps.len(), 1);
    assert!(
        ps[0]["name"].as_str().unwrap().contains("lab-madvise"),
        "{p}"
    );
}

#[test]
fn events_findings_and_flame() {
    let a = fixture_server();
    let (st, ev) = get_json(a, "/api/v1/events");
    assert_eq!(st, 200);
    let (want, _) = jitterscope_diagnose::events(
        &store("tlb-shootdown"),
        1_795_327_975_399_435_220,
        1_795_331_575_399_435_220,
    )
    .unwrap();
    // Each episode as `events --json` gives it, with its series' unit and what it is about
    // (host-wide series here: nothing).
    let mut ev = ev;
    for e in ev.as_array_mut().unwrap() {
        let o = e.as_object_mut().unwrap();
        let unit = o.remove("unit").unwrap();
        let want_unit = if o["series"] == "irq.tlb_per_s" {
            "per_second"
        } else {
            "percent"
        };
        assert_eq!(unit, want_unit, "{o:?}");
        assert_eq!(o.remove("subject"), Some(serde_json::Value::Null));
    }
    assert_eq!(ev, serde_json::to_value(&want).unwrap());

    let (st, f) = get_json(
        a,
        &format!("/api/v1/findings?from={}&to={}", STORM.0, STORM.1),
    );
    assert_eq!(st, 200, "{f}");
    assert_eq!(
        f["damaged"]["undecodable"], 0,
        "the read's damage is reported"
    );
    assert_eq!(f["findings"][0]["rule_id"], "cpu.tlb-shootdown");

    let (st, fl) = get_json(a, &format!("/api/v1/flame?from={}&to={}", STORM.0, STORM.1));
    assert_eq!(st, 200);
    let tree = &fl["tree"];
    assert_eq!(tree["name"], "all");
    assert_eq!(tree["value"], fl["samples"]);
    let kids: u64 = tree["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["value"].as_u64().unwrap())
        .sum();
    assert_eq!(kids, tree["value"].as_u64().unwrap(), "children add up");
    assert!(tree["children"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "lab-madvise"));

    let (st, head, body) = request(
        a,
        "GET",
        &format!(
            "/api/v1/flame?from={}&to={}&format=folded&comm=lab-madvise",
            STORM.0, STORM.1
        ),
        &[],
    );
    assert_eq!(st, 200);
    assert!(head.contains("text/plain"));
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.lines().all(|l| l.starts_with("lab-madvise;")),
        "{text}"
    );
}

#[test]
fn bad_requests_get_one_line_errors() {
    let a = fixture_server();
    let long_pattern = format!("/api/v1/series?select={}", "*".repeat(257));
    for (path, want) in [
        (
            "/api/v1/series?select=cpu.sys_pct&from=soon",
            "neither epoch seconds nor RFC 3339",
        ),
        (
            "/api/v1/series?select=cpu.sys_pct&points=0",
            "points must be",
        ),
        ("/api/v1/series?select=,", "select names no series"),
        ("/api/v1/events?from=20&to=10", "from must be before to"),
        ("/api/v1/flame?format=svg", "not json or folded"),
        (
            "/api/v1/series?select=a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,x,y,z,A,B,C,D,E,F,G",
            "select has 33 patterns; at most 32",
        ),
        ("/api/v1/series?select=cpu.sys_pct&top=0", "top must be 1..=500"),
        (&long_pattern, "a select pattern has 257 characters; at most 256"),
    ] {
        let (st, v) = get_json(a, path);
        assert_eq!(st, 400, "{path}: {v}");
        assert!(v["error"].as_str().unwrap().contains(want), "{path}: {v}");
    }
    let (st, _, _) = request(a, "GET", "/api/v1/series", &[]);
    assert_eq!(st, 400, "select is required");
    let (st, _, _) = request(a, "POST", "/api/v1/range", &[]);
    assert_eq!(st, 405, "read-only");
    let (st, _, _) = request(a, "DELETE", "/metrics", &[]);
    assert_eq!(st, 405);
    let (st, _, _) = request(a, "GET", "/assets/../Cargo.toml", &[]);
    assert_eq!(st, 404);
    let empty = tempfile::tempdir().unwrap();
    let e = start(
        "127.0.0.1".parse().unwrap(),
        empty.path().to_path_buf(),
        None,
        Duration::ZERO,
    );
    let (st, v) = get_json(e, "/api/v1/range");
    assert_eq!(
        (st, v["error"].as_str().unwrap()),
        (404, "the store holds no samples")
    );
}

#[test]
fn the_fleet_api_says_it_has_no_fleet_without_clickhouse() {
    let a = fixture_server();
    for path in [
        "/api/v1/fleet/episodes",
        "/api/v1/fleet/findings?since=1d",
        "/api/v1/fleet/inventory?q=softokn",
        "/api/v1/fleet/flame?rule=x",
    ] {
        let (st, v) = get_json(a, path);
        assert_eq!(st, 404, "{path}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("without --clickhouse"),
            "{path}: {v}"
        );
    }
    let (st, _, body) = request(a, "GET", "/fleet", &[]);
    assert_eq!(st, 200);
    assert!(String::from_utf8_lossy(&body).contains("/assets/fleet.js"));
}

#[test]
fn openapi_documents_every_route() {
    let a = fixture_server();
    let (st, doc) = get_json(a, "/api/v1/openapi.json");
    assert_eq!(st, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().unwrap();
    let src = include_str!("../src/lib.rs");
    let routed: Vec<&str> = src
        .lines()
        .filter_map(|l| l.trim().strip_prefix(".route(\""))
        .map(|l| &l[..l.find('"').unwrap()])
        .filter(|p| p.starts_with("/api/") || *p == "/metrics" || *p == "/healthz")
        .collect();
    assert!(routed.len() >= 8);
    for r in &routed {
        assert!(
            paths.contains_key(*r),
            "{r} is routed but not in openapi.json"
        );
    }
    for p in paths.keys() {
        assert!(
            routed.contains(&p.as_str()),
            "{p} is documented but not routed"
        );
    }
}

#[test]
fn the_culprit_table_and_the_incident_report() {
    let a = fixture_server();
    // The storm's process among the processes of the storm, marked.
    let (_, f) = get_json(
        a,
        &format!("/api/v1/findings?from={}&to={}", STORM.0, STORM.1),
    );
    let pid = f["findings"][0]["culprit"]["pid"].as_u64().unwrap();
    let (st, t) = get_json(
        a,
        &format!(
            "/api/v1/table?of=processes&from={}&to={}&top=3&focus={pid}",
            STORM.0, STORM.1
        ),
    );
    assert_eq!(st, 200, "{t}");
    let rows = t["rows"].as_array().unwrap();
    let focus: Vec<_> = rows.iter().filter(|r| r["focus"] == true).collect();
    assert_eq!(focus.len(), 1, "{t}");
    assert_eq!(focus[0]["key"][0], pid.to_string());
    assert!(
        focus[0]["name"]
            .as_str()
            .unwrap()
            .starts_with("lab-madvise ("),
        "{t}"
    );
    assert!(rows.len() <= 4 && t["rows_total"].as_u64().unwrap() >= rows.len() as u64);
    assert_eq!(t["columns"][0]["unit"], "percent");
    // Ranked by the first column, the busiest first.
    let first: Vec<f64> = rows
        .iter()
        .filter(|r| r["focus"] == false)
        .filter_map(|r| r["values"][0].as_f64())
        .collect();
    assert!(first.windows(2).all(|w| w[0] >= w[1]), "{first:?}");
    let (st, _) = get_json(a, "/api/v1/table?of=threads");
    assert_eq!(st, 400);

    // The report of the storm's episode: a download, the page with its answers inside.
    let (st, head, body) = request(
        a,
        "GET",
        "/api/v1/report?event=tlb-storm@1795331568%2B5",
        &[],
    );
    assert_eq!(st, 200, "{head}");
    assert!(head.contains("text/html"), "{head}");
    assert!(
        head.contains("attachment; filename=\"jitterscope-")
            && head.contains("tlb-storm_1795331568_5.html"),
        "{head}"
    );
    let html = String::from_utf8(body).unwrap();
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.contains("window.JITTERSCOPE_REPORT = "));
    assert!(html.contains("\"rule_id\":\"cpu.tlb-shootdown\""));
    // Nothing is fetched from anywhere: no script or style sheet by address.
    assert!(!html.contains("src=\"") && !html.contains("<link rel=\"stylesheet\""));
    for (q, why) in [
        ("", "give event, or from and to"),
        ("?event=nonsense", "is not an episode id"),
        ("?from=10&to=5", "from must be before to"),
    ] {
        let (st, e) = get_json(a, &format!("/api/v1/report{q}"));
        assert_eq!(st, 400, "{q}");
        assert!(e["error"].as_str().unwrap().contains(why), "{q}: {e}");
    }
}

#[test]
fn ui_and_assets_are_embedded() {
    let a = fixture_server();
    let (st, head, body) = request(a, "GET", "/", &[]);
    assert_eq!(st, 200);
    assert!(head.contains("text/html"));
    let html = String::from_utf8(body).unwrap();
    for asset in jitterscope_web::assets::SCRIPTS
        .iter()
        .chain(jitterscope_web::assets::STYLES)
    {
        assert!(
            html.contains(&format!("/assets/{asset}")),
            "{asset} not linked"
        );
        let (st, _, b) = request(a, "GET", &format!("/assets/{asset}"), &[]);
        assert_eq!(st, 200, "{asset}");
        assert!(b.len() > 500, "{asset} is {} bytes", b.len());
    }
}

#[test]
fn metrics_endpoint_is_bounded_and_refuses_stale_data() {
    let a = fixture_server();
    // What Prometheus asks for.
    let (st, head, body) = request(
        a,
        "GET",
        "/metrics",
        &["Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"],
    );
    assert_eq!(st, 200);
    assert!(head.contains("application/openmetrics-text"));
    let text = String::from_utf8(body).unwrap();
    assert!(text.ends_with("# EOF\n"));
    strict_openmetrics(&text);
    // How old the newest sample is (the fixture's: days).
    let age: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("jitterscope_sample_age_seconds "))
        .expect("jitterscope_sample_age_seconds")
        .parse()
        .unwrap();
    assert!(age > 3600.0, "{age}");
    // The recorder's own cumulative counts are counters.
    assert!(text.contains("# TYPE jitterscope_self_ticks_missed counter\n"));
    assert!(text.contains("\njitterscope_self_ticks_missed_total "));
    assert!(
        text.contains("\njitterscope_irq_tlb_per_second "),
        "host series"
    );
    assert!(
        text.contains("\njitterscope_irq_tlb_total "),
        "and its counter"
    );
    assert!(text.contains("jitterscope_cgroup_memory_usage_bytes{cgroup=\"/process_api\"}"));
    assert!(
        !text.contains("jitterscope_vmstat"),
        "raw per-field families are left out"
    );
    let pids: std::collections::HashSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split("pid=\"").nth(1))
        .map(|r| &r[..r.find('"').unwrap()])
        .collect();
    assert!(
        !pids.is_empty() && pids.len() <= 6,
        "top 3 processes by CPU and 3 by RSS only: {pids:?}"
    );
    // They are the busiest and the largest of the newest sample, as the registry derives them.
    let r = jitterscope_store::Reader::open(store("tlb-shootdown")).unwrap();
    let recs: Vec<_> = r
        .range(i64::MIN, i64::MAX)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let dec = |i: usize| {
        jitterscope_model::codec::decode_lanes(
            &recs[i].payload,
            recs[i].detail.as_deref(),
            jitterscope_model::codec::Parts::ALL,
        )
        .unwrap()
    };
    let (cur, prev) = (dec(recs.len() - 1), dec(recs.len() - 2));
    let mut want: std::collections::HashSet<String> = Default::default();
    for name in ["proc.<pid>.<comm>.cpu_pct", "proc.<pid>.<comm>.rss_bytes"] {
        let def = jitterscope_model::metrics::find(name).unwrap();
        let mut top: Vec<(f64, u32)> =
            jitterscope_model::derive::evaluate(&[def], &cur, Some(&prev), &[])
                .into_iter()
                .filter_map(|v| Some((v.value?, v.labels[0].parse().ok()?)))
                .collect();
        top.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        want.extend(top.iter().take(3).map(|c| c.1.to_string()));
    }
    let want: std::collections::HashSet<&str> = want.iter().map(|s| s.as_str()).collect();
    assert_eq!(pids, want);
    // One TYPE line per family.
    let mut types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let n = types.len();
    types.dedup();
    assert_eq!(types.len(), n);

    // The fixture is old: with a maximum age, /metrics says so instead of a flat line.
    let s = start(
        "127.0.0.1".parse().unwrap(),
        store("tlb-shootdown"),
        None,
        Duration::from_secs(60),
    );
    let (st, _, body) = request(s, "GET", "/metrics", &[]);
    assert_eq!(st, 503);
    assert!(String::from_utf8(body)
        .unwrap()
        .contains("is the recorder running?"));
}

/// This host's address on its default route, found without sending anything (a UDP
/// "connection" only picks the source address).
fn non_loopback_ip() -> Option<IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// Serves `cfg` without `check`, until the test process ends; its port.
fn serve_unchecked(cfg: Config) -> u16 {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind(cfg.listen).await.unwrap();
            tx.send(l.local_addr().unwrap().port()).unwrap();
            let st = AppState::new(cfg).unwrap();
            jitterscope_web::serve(l, st, std::future::pending())
                .await
                .unwrap();
        });
    });
    rx.recv().unwrap()
}

#[test]
fn non_loopback_clients_need_the_token() {
    let Some(ip) = non_loopback_ip() else {
        return jitterscope_testkit::skip(
            "non_loopback_clients_need_the_token",
            "no non-loopback IPv4 address on this host",
        );
    };
    let any: IpAddr = "0.0.0.0".parse().unwrap();
    // A server bound to all addresses without a token (check() refuses this configuration;
    // the router refuses such clients anyway, which is what is tested here).
    let cfg = config(SocketAddr::new(any, 0), store("idle"));
    assert!(jitterscope_web::check(&cfg).is_err());
    let open = serve_unchecked(cfg);
    let (st, _, _) = request(SocketAddr::new(ip, open), "GET", "/api/v1/range", &[]);
    assert_eq!(st, 403, "a non-loopback client without a token configured");
    let (st, _, _) = request(
        SocketAddr::new("127.0.0.1".parse().unwrap(), open),
        "GET",
        "/api/v1/range",
        &[],
    );
    assert_eq!(st, 200, "loopback clients are served");

    let token = "s3cret-token-0123456789";
    let port = start(any, store("idle"), Some(token), Duration::ZERO).port();
    let to = SocketAddr::new(ip, port);
    let (st, head, _) = request(to, "GET", "/api/v1/range", &[]);
    assert_eq!(st, 401);
    assert!(head
        .to_ascii_lowercase()
        .contains("www-authenticate: bearer"));
    let (st, _, _) = request(
        to,
        "GET",
        "/api/v1/range",
        &["Authorization: Bearer wrong-token-0123456789"],
    );
    assert_eq!(st, 401);
    let (st, _, _) = request(
        to,
        "GET",
        "/metrics",
        &[&format!("Authorization: Bearer {token}")],
    );
    assert_eq!(st, 200);
    let (st, head, _) = request(to, "GET", &format!("/?token={token}"), &[]);
    assert_eq!(
        st, 200,
        "a browser's first page carries the token in the query"
    );
    assert!(head.contains(&format!(
        "jitterscope_token={token}; HttpOnly; SameSite=Strict"
    )));
    let (st, _, _) = request(
        to,
        "GET",
        "/assets/app.js",
        &[&format!("Cookie: jitterscope_token={token}")],
    );
    assert_eq!(st, 200, "then the page's own requests carry the cookie");
    let (st, _, _) = request(
        to,
        "GET",
        "/assets/app.js",
        &["Cookie: jitterscope_token=nope"],
    );
    assert_eq!(st, 401);
    // With a token, loopback clients carry it too.
    let (st, _, _) = request(
        SocketAddr::new("127.0.0.1".parse().unwrap(), port),
        "GET",
        "/api/v1/range",
        &[],
    );
    assert_eq!(st, 401);
}

#[test]
fn healthz_says_whether_the_recorder_records() {
    // The fixture's newest sample is days old: fresh for a server that takes any age, stale
    // for one that takes a minute.
    let any = start(
        "127.0.0.1".parse().unwrap(),
        store("idle"),
        None,
        Duration::ZERO,
    );
    let (st, _, body) = request(any, "GET", "/healthz", &[]);
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).starts_with("ok: the newest sample is "));
    let minute = start(
        "127.0.0.1".parse().unwrap(),
        store("idle"),
        None,
        Duration::from_secs(60),
    );
    let (st, _, body) = request(minute, "GET", "/healthz", &[]);
    assert_eq!(st, 503);
    assert!(
        String::from_utf8_lossy(&body).contains("is the recorder running?"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    // The range names the host, as the recorder named it.
    let (st, r) = get_json(any, "/api/v1/range");
    assert_eq!(st, 200);
    assert!(!r["host"].as_str().unwrap_or("").is_empty(), "{r}");
    assert!(!r["kernel"].as_str().unwrap_or("").is_empty(), "{r}");
}

#[test]
fn public_metrics_open_metrics_and_healthz_only() {
    let Some(ip) = non_loopback_ip() else {
        return jitterscope_testkit::skip(
            "public_metrics_open_metrics_and_healthz_only",
            "no non-loopback IPv4 address on this host",
        );
    };
    let any: IpAddr = "0.0.0.0".parse().unwrap();
    let cfg = Config {
        public_metrics: true,
        fleet_host_url: None,
        ..config(SocketAddr::new(any, 0), store("idle"))
    };
    jitterscope_web::check(&cfg).expect("no token needed beyond loopback with public metrics");
    let to = SocketAddr::new(ip, serve_unchecked(cfg));
    let (st, _, body) = request(to, "GET", "/metrics", &[]);
    assert_eq!(st, 200);
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("jitterscope_host_info{host=\""), "{body}");
    assert_eq!(request(to, "GET", "/healthz", &[]).0, 200);
    for private in [
        "/api/v1/range",
        "/",
        "/api/v1/events",
        "/metrics/../api/v1/range",
    ] {
        assert_eq!(request(to, "GET", private, &[]).0, 403, "{private}");
    }
}

#[test]
fn series_read_the_signals_lane_when_it_holds_them() {
    // The fixture predates the lanes: rewritten the way `record` writes now, it has them.
    let dir = tempfile::tempdir().unwrap();
    jitterscope_testkit::rewrite(&store("tlb-shootdown"), dir.path()).unwrap();
    let lanes = start(
        "127.0.0.1".parse().unwrap(),
        dir.path().to_path_buf(),
        None,
        Duration::ZERO,
    );
    let old = fixture_server();
    let q = "/api/v1/series?from=1795331565&to=1795331576&select=";
    for (select, source) in [
        ("irq.tlb_per_s,reclaim.stalls_per_s", "signals"),
        ("proc.*.rss_bytes&top=3", "signals"),
        ("proc.*.rss_bytes", "samples"),
        ("cpu.sys_pct,cpu.usr_pct", "signals"),
        (
            "psi.cpu.some_pct,psi.memory.some_pct,psi.io.some_pct",
            "signals",
        ),
        ("cpu.iowait_pct", "samples"),
    ] {
        let (_, a) = get_json(lanes, &format!("{q}{select}"));
        let (_, b) = get_json(old, &format!("{q}{select}"));
        assert_eq!(a["source"], source, "{select}");
        assert_eq!(b["source"], "samples", "{select}");
        // Both paths give the same points.
        assert_eq!(a["t"], b["t"], "{select}");
        assert_eq!(a["series"], b["series"], "{select}");
        assert!(!a["series"].as_array().unwrap().is_empty(), "{select}");
    }
}

/// A lane written before the timelines' series were kept in it (its records at version 0, as
/// a recorder of the previous release wrote them): those series are read from the samples,
/// not answered empty; the signals still come from the lane.
#[test]
fn series_the_lane_did_not_keep_yet_come_from_the_samples() {
    use jitterscope_model::signals::{SignalRecord, SHOWN};
    let dir = tempfile::tempdir().unwrap();
    jitterscope_testkit::rewrite(&store("tlb-shootdown"), dir.path()).unwrap();
    let reader = jitterscope_model::stored::SampleReader::open(dir.path()).unwrap();
    let mut old = Vec::new();
    for (ts, mut r) in reader.signals(i64::MIN, i64::MAX).unwrap() {
        r.version = 0;
        r.values.retain(|(name, _)| {
            !SHOWN.iter().any(|s| {
                jitterscope_model::registry::parse_series(&[s.def], name).is_some_and(
                    |(def, labels)| {
                        let l: Vec<&str> = labels.iter().map(String::as_str).collect();
                        jitterscope_model::signals::shown(def, &l)
                    },
                )
            })
        });
        let mut buf = Vec::new();
        SignalRecord::encode(&r, &mut buf);
        old.push((ts, buf));
    }
    let segments: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.ends_with(".jss") && n.matches('.').count() == 1
        })
        .collect();
    assert_eq!(segments.len(), 1, "{segments:?}");
    jitterscope_store::write_lane(&segments[0], jitterscope_store::Lane::Signals, &old).unwrap();
    let a = start(
        "127.0.0.1".parse().unwrap(),
        dir.path().to_path_buf(),
        None,
        Duration::ZERO,
    );
    let q = "/api/v1/series?from=1795331565&to=1795331576&select=";
    let (_, v) = get_json(a, &format!("{q}cpu.sys_pct,cpu.usr_pct"));
    assert_eq!(v["source"], "samples", "{v}");
    assert_eq!(v["series"].as_array().unwrap().len(), 2, "{v}");
    let (_, v) = get_json(a, &format!("{q}irq.tlb_per_s"));
    assert_eq!(v["source"], "signals", "{v}");
}

#[test]
fn a_series_request_over_budget_is_refused_before_reading() {
    let a = fixture_server();
    let (st, v) = get_json(
        a,
        "/api/v1/series?select=***&points=5000&from=0&to=4000000000",
    );
    assert_eq!(st, 413, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(
        e.starts_with("select matches ") && e.contains("series; at most 500 per answer"),
        "{e}"
    );
    // The same select with top= is within budget and served.
    let (st, v) = get_json(
        a,
        "/api/v1/series?select=***&top=20&points=5000&from=0&to=4000000000",
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["series"].as_array().unwrap().len(), 20);
}

/// Without an `Accept` that prefers OpenMetrics (curl, promtool, older scrapers), `/metrics` is
/// the Prometheus text format 0.0.4, and `promtool check metrics` reads it without a problem.
#[test]
fn metrics_speak_the_text_format_to_whoever_does_not_ask_for_openmetrics() {
    let a = fixture_server();
    for accept in [
        &[][..],
        &["Accept: text/plain;version=0.0.4"][..],
        &["Accept: text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"][..],
    ] {
        let (st, head, body) = request(a, "GET", "/metrics", accept);
        assert_eq!(st, 200, "{accept:?}");
        assert!(
            head.contains("text/plain; version=0.0.4"),
            "{accept:?}: {head}"
        );
        let text = String::from_utf8(body).unwrap();
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{accept:?}"
        );
        // A counter family is named by its samples, and so is an info family.
        assert!(text.contains("# TYPE jitterscope_irq_tlb_total counter\n"));
        assert!(text.contains("\njitterscope_irq_tlb_total "));
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        assert!(
            types
                .iter()
                .all(|l| !l.ends_with(" info") && !l.ends_with(" unknown")),
            "{types:?}"
        );
        assert!(
            types.iter().any(|l| l.ends_with("_info gauge")),
            "an info family: {types:?}"
        );
        if accept.is_empty() {
            match pipe_into("promtool", &["check", "metrics"], &text) {
                Err(e) => eprintln!("SKIPPED promtool check metrics: promtool: {e}"),
                Ok(o) => assert!(
                    o.status.success(),
                    "promtool check metrics: {}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
            }
        }
    }
}

/// Runs `program` with `text` on its standard input; its output, or why it did not start.
fn pipe_into(program: &str, args: &[&str], text: &str) -> std::io::Result<std::process::Output> {
    let mut c = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    c.stdin.take().unwrap().write_all(text.as_bytes())?;
    c.wait_with_output()
}

/// Parses `text` with a strict OpenMetrics parser, Python prometheus_client's (Debian's
/// python3-prometheus-client, which `scripts/setup.sh --test` installs).
fn strict_openmetrics(text: &str) {
    let py = "import sys\n\
              from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
              n = sum(1 for _ in text_string_to_metric_families(sys.stdin.read()))\n\
              print(n)\n";
    let o = match pipe_into("/usr/bin/python3", &["-c", py], text) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIPPED the strict OpenMetrics parse: /usr/bin/python3: {e}");
            return;
        }
    };
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("No module named 'prometheus_client'") {
        eprintln!("SKIPPED the strict OpenMetrics parse: no prometheus_client (apt install python3-prometheus-client)");
        return;
    }
    assert!(
        o.status.success(),
        "prometheus_client refuses /metrics: {err}"
    );
    let families: usize = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert!(families > 50, "{families} families");
}
