//! Real Prometheus-family engines started by the tests, on loopback, in a temporary directory:
//! Debian's Prometheus 2.42 (`--web.enable-remote-write-receiver`) and VictoriaMetrics 1.79.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::ChildGuard;

/// Which engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Prometheus,
    Victoria,
}

impl Kind {
    pub fn binary(self) -> &'static str {
        match self {
            Kind::Prometheus => "prometheus",
            Kind::Victoria => "victoria-metrics",
        }
    }
}

/// A running engine; killed when dropped.
pub struct Engine {
    pub kind: Kind,
    pub port: u16,
    dir: PathBuf,
    web_config: Option<PathBuf>,
    guard: Option<ChildGuard>,
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One series' raw points: labels, and (ms, value) in time order.
pub type Series = (BTreeMap<String, String>, Vec<(i64, f64)>);

impl Engine {
    /// Starts `kind` with its data under `dir`, or `None` when it is not installed (the
    /// caller skips).
    pub fn start(kind: Kind, dir: &Path) -> Option<Engine> {
        Self::start_with(kind, dir, None)
    }

    /// Starts Prometheus with a `--web.config.file` (TLS, basic auth).
    pub fn start_with(kind: Kind, dir: &Path, web_config: Option<PathBuf>) -> Option<Engine> {
        jitterscope_testkit::which(kind.binary(), &[])?;
        let mut e = Engine {
            kind,
            port: free_port(),
            dir: dir.to_path_buf(),
            web_config,
            guard: None,
        };
        e.spawn();
        Some(e)
    }

    fn spawn(&mut self) {
        let data = self.dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let listen = format!("127.0.0.1:{}", self.port);
        let mut c = Command::new(self.kind.binary());
        match self.kind {
            Kind::Prometheus => {
                let cfg = self.dir.join("prometheus.yml");
                std::fs::write(&cfg, "global:\n  scrape_interval: 15s\n").unwrap();
                c.arg(format!("--config.file={}", cfg.display()))
                    .arg(format!("--storage.tsdb.path={}", data.display()))
                    .arg(format!("--web.listen-address={listen}"))
                    .arg("--web.enable-remote-write-receiver");
                if let Some(w) = &self.web_config {
                    c.arg(format!("--web.config.file={}", w.display()));
                }
            }
            Kind::Victoria => {
                c.arg(format!("-storageDataPath={}", data.display()))
                    .arg(format!("-httpListenAddr={listen}"))
                    .arg("-retentionPeriod=1")
                    // Queries see the newest points at once (the default hides 30 s).
                    .arg("-search.latencyOffset=0s")
                    .arg("-search.disableCache");
            }
        }
        let log = std::fs::File::create(self.dir.join("engine.log")).unwrap();
        let child = c
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("engine starts");
        self.guard = Some(ChildGuard::new(child));
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{:?} did not listen: {}",
                self.kind,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        if self.web_config.is_none() {
            // Prometheus listens before its storage is ready: wait for /-/ready.
            let deadline = Instant::now() + Duration::from_secs(60);
            while self.kind == Kind::Prometheus && self.get("/-/ready").is_none() {
                assert!(
                    Instant::now() < deadline,
                    "prometheus not ready: {}",
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    /// The engine's own log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("engine.log")).unwrap_or_default()
    }

    /// Its remote-write URL.
    pub fn write_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/write", self.port)
    }

    /// Stops it (SIGTERM, so what it acknowledged is on its disk) and waits.
    pub fn stop(&mut self) {
        if let Some(g) = self.guard.take() {
            g.signal(libc::SIGTERM);
            let mut c = g.into_inner();
            let _ = c.wait();
        }
        // The port stays ours: nothing else in the test binds it before the restart.
    }

    /// Starts it again on the same port and data.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// The status and body of a GET of the engine's HTTP API, errors included (a query that
    /// does not parse is a 400 whose body says why).
    pub fn api(&self, path_and_query: &str) -> (u16, String) {
        let url = format!("http://127.0.0.1:{}{path_and_query}", self.port);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        match agent.get(&url).call() {
            Ok(mut r) => (
                r.status().as_u16(),
                r.body_mut().read_to_string().unwrap_or_default(),
            ),
            Err(e) => (0, e.to_string()),
        }
    }

    fn get(&self, path_and_query: &str) -> Option<String> {
        let url = format!("http://127.0.0.1:{}{path_and_query}", self.port);
        let mut r = ureq::get(&url).call().ok()?;
        r.body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_string()
            .ok()
    }

    /// Every raw point of the series `selector` matches, over the last `window_s` seconds
    /// before `at_s` (Unix seconds). Prometheus: an instant query of a range selector, which
    /// returns raw samples; VictoriaMetrics: its export API (raw, duplicates included).
    pub fn raw(&self, selector: &str, at_s: f64, window_s: u64) -> Vec<Series> {
        match self.kind {
            Kind::Prometheus => {
                let q = enc(&format!("{selector}[{window_s}s]"));
                let body = self
                    .get(&format!("/api/v1/query?query={q}&time={at_s:.3}"))
                    .expect("prometheus answers");
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["status"], "success", "{body}");
                v["data"]["result"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| {
                        let labels = labels_of(&r["metric"]);
                        let pts = r["values"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|p| {
                                let ts = (p[0].as_f64().unwrap() * 1000.0).round() as i64;
                                (ts, p[1].as_str().unwrap().parse().unwrap())
                            })
                            .collect();
                        (labels, pts)
                    })
                    .collect()
            }
            Kind::Victoria => {
                // Flush what was just ingested to searchable parts first.
                let _ = self.get("/internal/force_flush");
                let start = at_s - window_s as f64;
                let body = self
                    .get(&format!(
                        "/api/v1/export?match[]={}&start={start:.3}&end={at_s:.3}",
                        enc(selector)
                    ))
                    .expect("victoria-metrics answers");
                body.lines()
                    .map(|l| {
                        let v: serde_json::Value = serde_json::from_str(l).unwrap();
                        let labels = labels_of(&v["metric"]);
                        let ts = v["timestamps"].as_array().unwrap();
                        let vals = v["values"].as_array().unwrap();
                        // A staleness marker (a series' end) exports as a non-number; like
                        // Prometheus' range selection, leave it out of the points.
                        let mut pts: Vec<(i64, f64)> = ts
                            .iter()
                            .zip(vals)
                            .filter_map(|(t, x)| Some((t.as_i64().unwrap(), x.as_f64()?)))
                            .collect();
                        pts.sort_by_key(|p| p.0);
                        (labels, pts)
                    })
                    .collect()
            }
        }
    }
}

fn labels_of(m: &serde_json::Value) -> BTreeMap<String, String> {
    m.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// Percent-encodes a query parameter.
pub fn enc(s: &str) -> String {
    jitterscope_fleet::clickhouse::encode(s)
}
