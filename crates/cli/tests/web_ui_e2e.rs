//! The web UI as an operator uses it after an incident, in a real browser: `lab check
//! cfs-throttle` records a throttling incident beside a busy host (the soak), `jitterscope
//! report` writes the episode's incident report, `serve` serves the store, and
//! `tests/web_ui.mjs` drives Debian's headless chromium with npm's puppeteer-core through every
//! view (see there for what it checks). Screenshots are kept in target/test-artifacts.
//! Without root, chromium, node or puppeteer-core (`scripts/setup.sh --test` installs it into
//! web/tests) it prints `SKIPPED:` (fails under `JITTERSCOPE_REQUIRE_PRIVILEGED=1`, as in CI).

mod common;

use std::path::PathBuf;
use std::process::Stdio;

use common::{cmd, serve};
use jitterscope_testkit::skip;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn an_episode_is_explored_in_the_browser_and_reported_offline() {
    const T: &str = "an_episode_is_explored_in_the_browser_and_reported_offline";
    if !jitterscope_testkit::is_root() {
        return skip(T, "needs root: the lab scenario makes cgroups");
    }
    for prog in ["chromium", "node"] {
        if jitterscope_testkit::which(prog, &[]).is_none() {
            return skip(
                T,
                &format!("{prog} is not installed (scripts/setup.sh --test installs it)"),
            );
        }
    }
    let web_tests = repo().join("web/tests");
    if !web_tests.join("node_modules/puppeteer-core").is_dir() {
        return skip(
            T,
            "puppeteer-core is not installed in web/tests (scripts/setup.sh --test runs npm ci there)",
        );
    }
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let o = cmd()
        .args(["lab", "check", "cfs-throttle", "--intensity", "low"])
        .args(["--duration", "8s", "--beside", "soak", "--json", "--dir"])
        .arg(&store)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "lab check: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = cmd()
        .args(["events", "--since", "1h", "--json", "--dir"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let id = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["kind"] == "throttling")
        .and_then(|e| e["id"].as_str().map(str::to_string))
        .expect("a throttling episode was recorded");

    let report = work.path().join("incident.html");
    let o = cmd()
        .args(["report", "--event", &id, "-o"])
        .arg(&report)
        .arg("--dir")
        .arg(&store)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let size = std::fs::metadata(&report).unwrap().len();
    assert!(size < 2 << 20, "the report has {size} bytes");

    let (_srv, addr) = serve(&store, &[]);
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../test-artifacts");
    std::fs::create_dir_all(&shots).unwrap();
    let o = std::process::Command::new("node")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/web_ui.mjs"))
        .arg(format!("http://{addr}"))
        .arg(&id)
        .arg(&report)
        .arg(&shots)
        .env("WEB_TESTS_DIR", &web_tests)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "web_ui.mjs: {}{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    eprintln!("web_ui.mjs: {v}");
    assert_eq!(v["utc"]["chain"][0]["rule"], "cpu.cfs-throttling", "{v}");
    assert!(v["link"].as_str().unwrap().contains("tz=local"), "{v}");
    assert!(v["report_render_ms"].as_u64().is_some(), "{v}");
    for png in [
        "web-episode-utc.png",
        "web-episode-local.png",
        "web-report.png",
    ] {
        let b = std::fs::read(shots.join(png)).unwrap();
        assert!(b.starts_with(b"\x89PNG") && b.len() > 50_000, "{png}");
    }
}
