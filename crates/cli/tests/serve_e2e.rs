//! `jitterscope serve` end to end: headless Chromium (Debian's `chromium`) loads the UI over a
//! recorded lab store with a window selected in the URL, and the findings panel and the flame
//! graph render (web_ui_e2e.rs drives every view with the mouse and keys); a real Prometheus (Debian's
//! `prometheus`) scrapes `/metrics` of a live recording and a PromQL query returns our series;
//! listening beyond loopback without a token is refused. Without Chromium, node or Prometheus the
//! test concerned prints `SKIPPED:` (fails under `JITTERSCOPE_REQUIRE_PRIVILEGED=1`, as in CI).

mod common;

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cmd, serve, ChildGuard};
use jitterscope_testkit::skip;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/diagnose")
        .join(name)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn have(prog: &str) -> bool {
    jitterscope_testkit::which(prog, &[]).is_some()
}

fn http_get(url_path: &str, addr: SocketAddr) -> String {
    use std::io::Write;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {url_path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn the_ui_renders_findings_and_flame_graph_of_a_selected_window() {
    const TEST: &str = "the_ui_renders_findings_and_flame_graph_of_a_selected_window";
    if !have("chromium") {
        return skip(
            TEST,
            "chromium is not installed (scripts/setup.sh installs it)",
        );
    }
    let (_srv, addr) = serve(&fixture("tlb-shootdown"), &[]);
    // The whole recording, and the storm's seconds selected: the URL carries the selection
    // the way a drag leaves it there, and the page applies it through the same function.
    let url = format!(
        "http://{addr}/?from=1795331565&to=1795331576&sel_from=1795331568&sel_to=1795331574"
    );
    let o = common::chromium(&["--dump-dom"], &url);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dom = String::from_utf8_lossy(&o.stdout);
    for want in [
        "data-timeline=\"ready\"",
        "data-findings=\"ready\"",
        "data-flame=\"ready\"",
        // The finding of the window, with its evidence and fix.
        "data-rule=\"cpu.tlb-shootdown\"",
        "TLB-shootdown storm",
        "MALLOC_TRIM_THRESHOLD_",
        // Both episodes listed.
        "data-id=\"tlb-storm@1795331568+5\"",
        "data-id=\"sys-cpu@1795331568+5\"",
        // The flame graph: an SVG with the storm's process in it.
        "class=\"partition d3-flame-graph\"",
        "lab-madvise",
    ] {
        assert!(dom.contains(want), "the page lacks {want:?}");
    }
    // Six timelines have data (the evidence charts below them are uPlot charts too).
    assert_eq!(
        dom.matches("class=\"uplot").count() - dom.matches("class=\"chart evidence\"").count(),
        6,
        "six timelines have data"
    );
    assert!(!dom.contains("class=\"error\""), "an error is shown");
    // The header names the host as its recorder named it.
    let answer = http_get("/api/v1/range", addr);
    let range: serde_json::Value =
        serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
    let host = range["host"].as_str().unwrap();
    assert!(!host.is_empty(), "{range}");
    assert!(
        dom.contains(&format!(
            "{host} · {}</span>",
            range["kernel"].as_str().unwrap()
        )),
        "the header does not name {host}"
    );
}

/// A real Prometheus (Debian's) scraping `serve` at `addr` with the given `global:` settings.
struct Scraper {
    _prom: ChildGuard,
    _work: tempfile::TempDir,
    addr: SocketAddr,
}

impl Scraper {
    fn start(addr: SocketAddr, global: &str) -> Scraper {
        let port = free_port();
        let work = tempfile::tempdir().unwrap();
        let cfg = work.path().join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  {global}\nscrape_configs:\n  - job_name: jitterscope\n    static_configs:\n      - targets: ['{addr}']\n"
            ),
        )
        .unwrap();
        let prom = ChildGuard::new(
            Command::new("prometheus")
                .arg(format!("--config.file={}", cfg.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    work.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        Scraper {
            _prom: prom,
            _work: work,
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
        }
    }

    /// The HTTP answer to an instant query (empty while Prometheus is not up yet).
    fn query(&self, q: &str) -> String {
        let enc: String = q
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        TcpStream::connect(self.addr)
            .map(|_| http_get(&format!("/api/v1/query?query={enc}"), self.addr))
            .unwrap_or_default()
    }
}

#[test]
fn prometheus_scrapes_a_live_recording() {
    if !have("prometheus") {
        return skip(
            "prometheus_scrapes_a_live_recording",
            "prometheus is not installed (scripts/setup.sh installs it)",
        );
    }
    let store = tempfile::tempdir().unwrap();
    // With its tracers where it can (root), so the run-queue histogram has buckets to show.
    let tracing = jitterscope_testkit::is_root();
    let mut rec = common::traced_recorder_cmd(store.path());
    if tracing {
        // runqlat attached throughout: on demand it waits for threads waiting for a CPU.
        rec.args(["--on-demand-tracers", "always"]);
    } else {
        rec.arg("--no-tracers");
    }
    let _rec = ChildGuard::new(
        rec.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("record starts"),
    );
    let (_srv, addr) = serve(store.path(), &["--metrics-top-processes", "5"]);
    let prom = Scraper::start(addr, "scrape_interval: 2s\n  scrape_timeout: 1500ms");
    let query = |q: &str| prom.query(q);
    let number = |answer: &str| -> Option<f64> {
        answer
            .rsplit("\"value\":[")
            .next()
            .and_then(|v| v.split('"').nth(1))
            .and_then(|v| v.parse().ok())
    };
    // Base-unit names, a counter `rate()` works on, a histogram `histogram_quantile()` works
    // on, the peak of the seconds between scrapes, and the build.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let host = query("jitterscope_cpu_usr_ratio");
        let procs = query("count(jitterscope_proc_cpu_ratio)");
        let up = query("up{job=\"jitterscope\"}");
        let ctxt = query("rate(jitterscope_sched_ctxt_total[10s])");
        let peak =
            query("jitterscope_sched_ctxt_per_second_max >= jitterscope_sched_ctxt_per_second_min");
        let build = query("jitterscope_build_info");
        let runq = query(
            "histogram_quantile(0.99, sum by (le) (rate(jitterscope_runqlat_seconds_bucket[10s])))",
        );
        let have_runq = !tracing || number(&runq).is_some_and(|v| v > 0.0);
        if host.contains("\"__name__\":\"jitterscope_cpu_usr_ratio\"")
            && procs.contains("\"value\":[")
            && up.contains("\"1\"]")
            && number(&ctxt).is_some_and(|v| v > 0.0)
            && peak.contains("\"value\":[")
            && build.contains("\"version\":")
            && have_runq
        {
            // Processes are bounded by --metrics-top-processes: 5 by CPU and 5 by RSS, with
            // room for as many held after they left the top.
            let n = number(&procs).unwrap();
            let most = (jitterscope_model::export::TOP_ROOM * 2 * 5) as f64;
            assert!((1.0..=most).contains(&n), "{procs}");
            // A ratio is 0–1, not a percentage.
            let usr = number(&host).unwrap();
            assert!((0.0..=1.0).contains(&usr), "{host}");
            if !tracing {
                jitterscope_testkit::skip(
                    "prometheus_scrapes_a_live_recording (histograms)",
                    "not root: the recorder has no tracers, so no run-queue histogram",
                );
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not every family in Prometheus after 90 s:\n{host}\n{procs}\n{up}\n{ctxt}\n{peak}\n{build}\n{runq}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn listening_beyond_loopback_needs_a_token() {
    let o = cmd()
        .args(["serve", "--listen", "0.0.0.0:0", "--dir"])
        .arg(fixture("idle"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("is not a loopback address") && e.contains("--auth-token-file"),
        "{e}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let short = tmp.path().join("short");
    std::fs::write(&short, "abc\n").unwrap();
    for (file, want) in [
        (short.as_path(), "too short"),
        (
            Path::new("/nonexistent/token"),
            "cannot read the token file",
        ),
    ] {
        let o = cmd()
            .args(["serve", "--listen", "0.0.0.0:0", "--dir"])
            .arg(fixture("idle"))
            .arg("--auth-token-file")
            .arg(file)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{e}");
    }
    let o = cmd()
        .args(["serve", "--dir", "/nonexistent/store"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no store at /nonexistent/store"));
}

/// Under the throttling reproducer, a real Prometheus scraping `/metrics` at its default 15 s
/// reads the same CPU and throttling as the recorder: `rate()` over a minute of the `_total`
/// counters (the kernel's CPU time of the cgroup; the throttled periods `serve` sums from every
/// recorded second) is within 5% of the mean of the recorder's own per-second values over
/// the minute between the first and last scrape the rate used. A 1 s ratio sampled every 15 s
/// reads one second in fifteen; the counters miss none.
#[test]
fn rate_of_the_counters_matches_the_recorder_under_throttling() {
    const T: &str = "rate_of_the_counters_matches_the_recorder_under_throttling";
    if !have("prometheus") {
        return skip(
            T,
            "prometheus is not installed (scripts/setup.sh installs it)",
        );
    }
    if !jitterscope_testkit::is_root() {
        return skip(T, "needs root: the throttling reproducer makes cgroups");
    }
    let store = tempfile::tempdir().unwrap();
    let _rec = ChildGuard::new(
        common::recorder_cmd(store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("record starts"),
    );
    let lab = ChildGuard::new(
        cmd()
            .args(["lab", "run", "cfs-throttle", "--duration", "140s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("lab run starts"),
    );
    let (_srv, addr) = serve(store.path(), &[]);
    // Prometheus' default interval.
    let prom = Scraper::start(addr, "scrape_interval: 15s");
    let query = |q: &str| -> serde_json::Value {
        let body = prom.query(q);
        let json = body.split_once("\r\n\r\n").map_or(body.as_str(), |x| x.1);
        serde_json::from_str(json).unwrap_or_default()
    };
    // (cgroup, value) of each series of an instant vector.
    let series = |v: &serde_json::Value| -> Vec<(String, f64)> {
        v["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let cg = r["metric"]["cgroup"].as_str()?.to_string();
                let v = r["value"][1].as_str()?.parse().ok()?;
                Some((cg, v))
            })
            .collect()
    };
    let lab_cg = "cgroup=~\".*jitterscope-lab/.*\"";
    // Wait until the throttled cgroup's series is older than the rate's minute: while it is
    // younger, rate() extrapolates its first point only part of the way back to zero (the
    // cgroup's counters start at 0 when the reproducer makes it) and reads low.
    let deadline = Instant::now() + Duration::from_secs(135);
    let (usage, throttled, window) = loop {
        assert!(
            Instant::now() < deadline,
            "no minute of scrapes of the lab's cgroup: {}",
            query(&format!(
                "count_over_time(jitterscope_cgroup_cpu_usage_seconds_total{{{lab_cg}}}[1m])"
            ))
        );
        std::thread::sleep(Duration::from_secs(2));
        let n = series(&query(&format!(
            "count_over_time(jitterscope_cgroup_cpu_usage_seconds_total{{{lab_cg}}}[90s])"
        )));
        if !n.iter().any(|(_, c)| *c >= 6.0) {
            continue;
        }
        // The scrape times the rate reads: the first and last in the minute.
        let raw = query(&format!(
            "jitterscope_cgroup_cpu_usage_seconds_total{{{lab_cg}}}[1m]"
        ));
        let times: Vec<f64> = raw["data"]["result"][0]["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p[0].as_f64())
            .collect();
        let usage = series(&query(&format!(
            "rate(jitterscope_cgroup_cpu_usage_seconds_total{{{lab_cg}}}[1m])"
        )));
        let throttled = series(&query(&format!(
            "rate(jitterscope_cgroup_cpu_nr_throttled_total{{{lab_cg}}}[1m])"
        )));
        if let (Some(f), Some(l)) = (times.first(), times.last()) {
            if !usage.is_empty() && !throttled.is_empty() {
                break (usage, throttled, (*f, *l));
            }
        }
    };
    // Stopped as an operator stops it, so it removes its cgroups.
    let mut lab = lab;
    lab.signal(libc::SIGINT);
    assert!(
        lab.wait_timeout(Duration::from_secs(30)).is_some(),
        "the lab run did not stop on SIGINT"
    );
    // The recorder's own per-second values over the same scrapes.
    let o = cmd()
        .args(["dump", "--format", "json", "--select"])
        .arg("cgroup.*.cpu.usage_pct,cgroup.*.cpu.nr_throttled_per_s")
        .args(["--from", &format!("{}", window.0 as i64)])
        .args(["--to", &format!("{}", window.1 as i64)])
        .arg("--dir")
        .arg(store.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines = common::parse_json_lines(&String::from_utf8_lossy(&o.stdout));
    let mean = |series: &str| -> Option<f64> {
        let v = common::json_values(&lines, series);
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let mut compared = 0;
    for (cg, rate) in &usage {
        let Some(rec) = mean(&format!("cgroup.{cg}.cpu.usage_pct")) else {
            continue;
        };
        let rec = rec / 100.0;
        eprintln!("{cg}: rate(cpu_usage_seconds_total[1m]) = {rate:.4}, recorder {rec:.4} CPU");
        assert!(
            (rate - rec).abs() <= 0.05 * rec.max(0.01),
            "{cg}: Prometheus' rate {rate} vs the recorder's {rec} CPU"
        );
        compared += 1;
    }
    for (cg, rate) in &throttled {
        let Some(rec) = mean(&format!("cgroup.{cg}.cpu.nr_throttled_per_s")) else {
            continue;
        };
        eprintln!("{cg}: rate(cpu_nr_throttled_total[1m]) = {rate:.3}/s, recorder {rec:.3}/s");
        assert!(
            rec > 1.0,
            "{cg}: the reproducer was not throttled ({rec}/s)"
        );
        assert!(
            (rate - rec).abs() <= 0.05 * rec,
            "{cg}: Prometheus' rate {rate} vs the recorder's {rec} throttled periods/s"
        );
        compared += 1;
    }
    assert!(compared >= 2, "nothing compared: {usage:?} {throttled:?}");
}
