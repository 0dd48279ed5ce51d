//! `record --remote-write` against real receivers started here on loopback: Debian's
//! Prometheus 2.42 (`--web.enable-remote-write-receiver`) and VictoriaMetrics 1.79. What the
//! engines hold is compared point by point with what `dump` reads from the recorder's store;
//! the receiver is killed and restarted, the recorder is killed with SIGKILL, and bad targets
//! (nothing listening, 400/429/500 answers, wrong credentials, a bad scheme) must each be said
//! once while recording goes on.

mod common;
// Only this test starts engines: the other test crates need not build the HTTP client.
#[path = "common/engines.rs"]
mod engines;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{cmd, parse_json_lines, recorder_cmd, text, ChildGuard};
use engines::{enc, Engine, Kind, Series};
use jitterscope_model::export::{base_name, exposed};
use jitterscope_model::registry::MetricDef;

fn skip(test: &str, why: &str) {
    jitterscope_testkit::skip(test, why);
}

fn engine(test: &str, kind: Kind, dir: &Path) -> Option<Engine> {
    let e = Engine::start(kind, dir);
    if e.is_none() {
        skip(
            test,
            &format!(
                "{} is not installed (scripts/setup.sh --test installs it)",
                kind.binary()
            ),
        );
    }
    e
}

/// Prometheus and VictoriaMetrics, each in its own directory under `dir`.
fn both(test: &str, dir: &Path) -> Option<(Engine, Engine)> {
    let prom = engine(test, Kind::Prometheus, &dir.join("prom"))?;
    let vm = engine(test, Kind::Victoria, &dir.join("vm"))?;
    Some((prom, vm))
}

/// `record` into `dir` sending to `url`, cheap (no tracers, no profiler), stderr kept.
fn record_to(dir: &Path, url: &str, extra: &[&str]) -> ChildGuard {
    spawn_recorder(recorder_cmd(dir), url, extra)
}

/// [`record_to`] with the BPF tracers on, as shipped: the dashboards' run-queue and reclaim
/// panels read their series.
fn record_traced_to(dir: &Path, url: &str, extra: &[&str]) -> ChildGuard {
    spawn_recorder(common::traced_recorder_cmd(dir), url, extra)
}

fn spawn_recorder(mut c: std::process::Command, url: &str, extra: &[&str]) -> ChildGuard {
    let child = c
        .args(["--remote-write", url, "--remote-write-flush", "1s"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("record starts");
    ChildGuard::new(child)
}

/// Waits for a recorder started with `--duration` and returns its stderr.
fn finish(g: ChildGuard, within: Duration) -> (bool, String) {
    let mut g = g;
    let st = g.wait_timeout(within).expect("record stops by itself");
    let mut c = g.into_inner();
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    // Already reaped by wait_timeout; this only returns its status again.
    let _ = c.wait();
    (st.success(), err)
}

/// The exported metric each engine series name (and label set) comes from.
fn by_name() -> HashMap<(String, Vec<&'static str>), &'static MetricDef> {
    let mut m = HashMap::new();
    for d in exposed() {
        let mut keys = d.placeholders();
        keys.sort();
        m.insert((base_name(d).name, keys), d);
    }
    m
}

/// What `dump --format json` reads from `dir`: ms → series → value.
fn dumped(dir: &Path) -> BTreeMap<i64, HashMap<String, f64>> {
    let out = cmd()
        .args(["dump", "--format", "json", "--from", "1h ago", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut m = BTreeMap::new();
    for l in parse_json_lines(&text(&out.stdout)) {
        let ts = l["ts_ns"].as_i64().unwrap().div_euclid(1_000_000);
        let vals: HashMap<String, f64> = l["values"]
            .as_object()
            .unwrap()
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
            .collect();
        m.insert(ts, vals);
    }
    m
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// An engine series back as the stored series it was made from, with its scale; `None` for
/// `jitterscope_cgroup_info`, which is not a stored series.
fn stored_series(
    names: &HashMap<(String, Vec<&'static str>), &'static MetricDef>,
    labels: &BTreeMap<String, String>,
) -> Option<(&'static MetricDef, String, f64)> {
    let name = labels.get("__name__")?;
    if name == "jitterscope_cgroup_info" || name == "jitterscope_build_info" {
        return None;
    }
    let own: Vec<&str> = labels
        .keys()
        .map(|k| k.as_str())
        .filter(|k| !matches!(*k, "__name__" | "host" | "job" | "instance"))
        .collect();
    let def = names
        .iter()
        .find(|((n, keys), _)| n == name && keys.iter().copied().eq(own.iter().copied()))
        .map(|(_, d)| *d)
        .unwrap_or_else(|| panic!("{name} {own:?}: no metric exports this"));
    let vals: Vec<&str> = def
        .placeholders()
        .iter()
        .map(|p| labels[*p].as_str())
        .collect();
    Some((def, def.series_name(&vals), base_name(def).scale))
}

/// The stored value of a kernel worker's series sent under its folded name
/// (`kworker/0:0H` for the stored `kworker/0:0H-events_highpri`, `export::stable_comm`).
fn renamed_worker<'a>(
    def: &'static MetricDef,
    labels: &BTreeMap<String, String>,
    at: &'a HashMap<String, f64>,
) -> Option<&'a f64> {
    let keys = def.placeholders();
    let (pid, comm) = (labels.get("pid")?, labels.get("comm")?);
    // Only names that start as the worker's and end as the metric's are parsed: a sample
    // holds thousands of series, and parsing each against every metric took minutes.
    let vals: Vec<&str> = keys.iter().map(|p| labels[*p].as_str()).collect();
    let sent = def.series_name(&vals);
    let cut = sent.find(comm.as_str())? + comm.len();
    let (head, tail) = (&sent[..cut], &sent[cut..]);
    at.iter().find_map(|(k, v)| {
        if !(k.starts_with(head) && k.ends_with(tail) && k.len() > sent.len()) {
            return None;
        }
        let (d, vals) =
            jitterscope_model::registry::parse_series(jitterscope_model::metrics::all(), k)?;
        let of = |key: &str| {
            keys.iter()
                .position(|p| *p == key)
                .map(|i| vals[i].as_str())
        };
        (std::ptr::eq(d, def)
            && of("pid") == Some(pid.as_str())
            && of("comm").map(jitterscope_model::export::stable_comm) == Some(comm.as_str()))
        .then_some(v)
    })
}

fn close(a: f64, b: f64) -> bool {
    // VictoriaMetrics keeps 12 significant digits.
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Holds the engine's `series` of `host` to the store's dump: every engine point equals the
/// stored value at its second, and every stored value of a host or cgroup series (those are
/// all sent; processes are the top N only) is in the engine. Returns (points checked, series,
/// duplicate timestamps seen).
fn compare(
    series: &[Series],
    dump: &BTreeMap<i64, HashMap<String, f64>>,
    from_ms: i64,
) -> (usize, usize, usize) {
    let names = by_name();
    let mut checked = 0;
    let mut dups = 0;
    let mut seen: HashMap<String, Vec<i64>> = HashMap::new();
    for (labels, pts) in series {
        let Some((def, stored, scale)) = stored_series(&names, labels) else {
            continue;
        };
        let mut last = None;
        for &(ts, v) in pts {
            if ts < from_ms {
                continue;
            }
            if last == Some(ts) {
                dups += 1;
                continue;
            }
            last = Some(ts);
            let at = dump
                .get(&ts)
                .unwrap_or_else(|| panic!("{stored} at {ts}: no stored sample at that time"));
            let want = at
                .get(&stored)
                .or_else(|| renamed_worker(def, labels, at))
                .unwrap_or_else(|| panic!("{stored} at {ts}: the store has no value"));
            assert!(
                close(v, want * scale),
                "{stored} at {ts}: engine {v}, store {want} × {scale}"
            );
            checked += 1;
        }
        if !def.placeholders().contains(&"pid") {
            seen.insert(stored, pts.iter().map(|p| p.0).collect());
        }
    }
    // Every stored second of every host and cgroup series the engine knows is there: the
    // engine has no gap the store does not have.
    let exported: Vec<&'static MetricDef> = exposed();
    for (ts, vals) in dump.range(from_ms..) {
        for s in vals.keys() {
            let Some(pts) = seen.get(s) else {
                // A series the engine does not have at all: only allowed for metrics that are
                // not exported (raw per-field tables) and processes.
                let def =
                    jitterscope_model::registry::parse_series(jitterscope_model::metrics::all(), s)
                        .map(|(d, _)| d);
                if let Some(d) = def {
                    assert!(
                        !exported.contains(&d) || d.placeholders().contains(&"pid"),
                        "{s}: stored but never sent"
                    );
                }
                continue;
            };
            if pts.binary_search(ts).is_err() {
                let missing = vals
                    .keys()
                    .filter(|k| seen.get(*k).is_some_and(|p| p.binary_search(ts).is_err()))
                    .count();
                let at = dump.keys().position(|k| k == ts).unwrap_or(0);
                let firsts: Vec<i64> = dump.keys().take(3).copied().collect();
                panic!(
                    "{s}: stored at {ts} (sample {at} of {}) but missing from the engine, with {missing} of {} series at that time; engine has {:?}, store {firsts:?}",
                    dump.len(),
                    vals.len(),
                    &pts[..pts.len().min(3)]
                );
            }
        }
    }
    (checked, seen.len(), dups)
}

/// Two recorders at once, one per engine, for a minute while the cfs-throttle scenario runs:
/// both engines hold exactly what the stores hold, cgroup throttling included.
#[test]
fn both_engines_hold_every_second_the_store_holds() {
    const T: &str = "both_engines_hold_every_second_the_store_holds";
    let _g = common::serial();
    let tmp = tempfile::tempdir().unwrap();
    let Some((prom, vm)) = both(T, tmp.path()) else {
        return;
    };
    if !jitterscope_testkit::is_root() {
        skip(T, "the lab scenario needs root (cgroups)");
        return;
    }
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let start = now_s();
    // Stopped below, once the engines hold the seconds after the scenarios (the duration only
    // bounds a test gone wrong).
    let ra = record_traced_to(
        &a,
        &prom.write_url(),
        &["--duration", "300s", "--fleet-host", "a"],
    );
    let rb = record_traced_to(
        &b,
        &vm.write_url(),
        &["--duration", "300s", "--fleet-host", "b"],
    );
    // Throttling, then reclaim: the dashboards' panels of both have data to show.
    for scenario in ["cfs-throttle", "reclaim-storm"] {
        let lab = cmd()
            .args(["lab", "run", scenario, "--duration", "25s"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert!(
            lab.status.success(),
            "lab {scenario}: {}",
            text(&lab.stderr)
        );
    }
    // A stopping recorder sends what is at hand, not a catch-up from the store: on a loaded
    // host its sender can be seconds behind. With a fixed 70 s run, Prometheus lacked recorder
    // a's per-cgroup reclaim series, which only the last scenario makes, in two CI runs (never
    // alone here). So the recorders run until each engine holds a second after the
    // scenarios, and at least a minute.
    let labs_done = now_s();
    eprintln!(
        "the scenarios ended {:.1} s into the recording",
        labs_done - start
    );
    for (engine, host) in [(&prom, "a"), (&vm, "b")] {
        let t0 = Instant::now();
        loop {
            let now = now_s();
            let newest = engine
                .raw(
                    &format!("jitterscope_build_info{{host=\"{host}\"}}"),
                    now,
                    30,
                )
                .iter()
                .filter_map(|(_, pts)| pts.last().map(|p| p.0 as f64 / 1000.0))
                .fold(f64::MIN, f64::max);
            if newest > labs_done + 1.0 && now - start >= 62.0 {
                eprintln!(
                    "{:?} held {:.1} s after the scenarios at {:.1} s",
                    engine.kind,
                    newest - labs_done,
                    now - start
                );
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "{:?}: newest point of {host} {:.1} s after the scenarios",
                engine.kind,
                newest - labs_done
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    ra.signal(libc::SIGTERM);
    rb.signal(libc::SIGTERM);
    let (oka, erra) = finish(ra, Duration::from_secs(30));
    let (okb, errb) = finish(rb, Duration::from_secs(30));
    assert!(oka && okb, "{erra}\n{errb}");
    for e in [&erra, &errb] {
        assert!(!e.contains("remote write: http"), "a failure was said: {e}");
    }
    for (engine, dir, host) in [(&prom, &a, "a"), (&vm, &b, "b")] {
        let dump = dumped(dir);
        let first = *dump.keys().next().unwrap();
        let now = now_s();
        let series = engine.raw(
            &format!("{{host=\"{host}\"}}"),
            now,
            (now - start) as u64 + 5,
        );
        let (points, n, dups) = compare(&series, &dump, first);
        eprintln!(
            "{:?}: {n} host and cgroup series, {points} points equal to the store's, {} samples, {dups} duplicates",
            engine.kind,
            dump.len()
        );
        assert!(dump.len() >= 55, "{} samples", dump.len());
        assert_eq!(dups, 0);
        // The lab cgroup's throttling reached the engine, every second of it.
        let throttled = series.iter().find(|(l, pts)| {
            l["__name__"] == "jitterscope_cgroup_cpu_throttled_ratio"
                && l.get("cgroup").is_some_and(|c| c.ends_with("cfs-throttle"))
                && pts.iter().any(|p| p.1 > 0.5)
        });
        assert!(
            throttled.is_some(),
            "{:?}: no throttled lab cgroup in the engine",
            engine.kind
        );
        // The lab removed its cgroup when the scenario ended: the recorder ended the
        // cgroup's series with a staleness marker, so an instant query 2 s after its last
        // point finds nothing (without it, the last value stood for 5 minutes).
        let last = throttled.unwrap().1.last().unwrap().0 as f64 / 1000.0;
        let sel = enc(&format!(
            "jitterscope_cgroup_cpu_throttled_ratio{{host=\"{host}\",cgroup=~\".*cfs-throttle\"}}"
        ));
        let (_, before) = engine.api(&format!("/api/v1/query?query={sel}&time={last:.3}"));
        let (_, after) = engine.api(&format!("/api/v1/query?query={sel}&time={:.3}", last + 2.0));
        let found = |body: &str| {
            serde_json::from_str::<serde_json::Value>(body).unwrap()["data"]["result"]
                .as_array()
                .map_or(0, |r| r.len())
        };
        assert_eq!(
            found(&before),
            1,
            "{:?} at its last point: {before}",
            engine.kind
        );
        assert_eq!(
            found(&after),
            0,
            "{:?} 2 s after it ended: {after}",
            engine.kind
        );
        // Which recorder sent it.
        assert!(series
            .iter()
            .any(|(l, _)| l["__name__"] == "jitterscope_build_info"
                && l.get("version")
                    .is_some_and(|v| v == env!("CARGO_PKG_VERSION"))));
        // The top processes, with their names.
        assert!(series
            .iter()
            .any(|(l, _)| l["__name__"] == "jitterscope_proc_cpu_ratio"
                && l.contains_key("comm")
                && l.contains_key("pid")));
        // What the store holds of the per-cgroup reclaim series, for a panel without data.
        let mut reclaim: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for (ts, vals) in &dump {
            for k in vals.keys() {
                if k.starts_with("reclaim.cgroup.") && k.ends_with(".stalls_per_s") {
                    reclaim.entry(k).or_default().push(ts / 1000);
                }
            }
        }
        let log = if host == "a" { &erra } else { &errb };
        let stored = format!(
            "the store's per-cgroup reclaim stalls (series: seconds): {reclaim:?}\nrecorder {host}: {log}"
        );
        dashboards_return_data(engine, host, start, now_s(), &stored);
    }
}

/// Every query of every Grafana dashboard in `deploy/grafana` (Grafana itself is not installed
/// here), against `engine` holding host `host`'s recording of `[start, end]`: each variable
/// lists values and each panel's PromQL parses and returns data.
fn dashboards_return_data(engine: &Engine, host: &str, start: f64, end: f64, context: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    let range = format!("{}s", (end - start).ceil() as u64);
    let fill = |q: &str| {
        q.replace("$host", host)
            .replace("$cgroup", ".*")
            .replace("$__range", &range)
            .replace("$__rate_interval", "30s")
    };
    let data = |body: &str| -> Option<usize> {
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        (v["status"] == "success").then(|| v["data"]["result"].as_array().map_or(0, |r| r.len()))
    };
    let (mut failed, mut queries) = (Vec::new(), 0);
    for f in &files {
        let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for v in d["templating"]["list"].as_array().unwrap() {
            if v["type"] != "query" {
                continue;
            }
            let var = v["name"].as_str().unwrap_or_default();
            // label_values(MATCH, LABEL)
            let q = v["definition"].as_str().unwrap();
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{}: variable query {q}", f.display()));
            let (m, label) = inner.rsplit_once(',').unwrap();
            let (code, body) = engine.api(&format!(
                "/api/v1/label/{}/values?match[]={}&start={start:.0}&end={end:.0}",
                label.trim(),
                enc(&fill(m.trim()))
            ));
            queries += 1;
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let values = v["data"].as_array().map_or(0, |a| a.len());
            if code != 200 || values == 0 {
                failed.push(format!("{}: variable {q}: {code} {body}", f.display()));
            }
            // A cgroup the list offers has data in some panel of the dashboard when chosen
            // (a list from another hierarchy offered cgroups none of its panels had).
            if var == "cgroup" {
                let offered: Vec<String> = v["data"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                for cg in offered.iter().take(5) {
                    let re = cg.replace('.', "\\.");
                    let mut any = false;
                    for p in d["panels"].as_array().unwrap() {
                        for t in p["targets"].as_array().unwrap() {
                            let expr = fill(&t["expr"].as_str().unwrap().replace("$cgroup", &re));
                            let (code, body) = engine.api(&format!(
                                "/api/v1/query_range?query={}&start={start:.0}&end={end:.0}&step=5",
                                enc(&expr)
                            ));
                            queries += 1;
                            any |= code == 200 && data(&body).is_some_and(|n| n > 0);
                        }
                    }
                    if !any {
                        failed.push(format!(
                            "{}: variable {q} offers {cg}, which no panel has data for",
                            f.display()
                        ));
                    }
                }
            }
        }
        for p in d["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().unwrap() {
                let expr = fill(t["expr"].as_str().unwrap());
                let path = if t["instant"] == true {
                    format!("/api/v1/query?query={}&time={end:.0}", enc(&expr))
                } else {
                    format!(
                        "/api/v1/query_range?query={}&start={start:.0}&end={end:.0}&step=5",
                        enc(&expr)
                    )
                };
                let (code, body) = engine.api(&path);
                queries += 1;
                match data(&body) {
                    Some(n) if code == 200 && n > 0 => {}
                    _ => failed.push(format!(
                        "{} / {}: {expr}: {code} {}",
                        f.display(),
                        p["title"],
                        &body[..body.len().min(300)]
                    )),
                }
            }
        }
    }
    eprintln!("{:?}: {queries} dashboard queries", engine.kind);
    assert!(
        failed.is_empty(),
        "{:?}: dashboard queries without data:\n{}\n{context}",
        engine.kind,
        failed.join("\n")
    );
}

/// The receiver is killed for 30 s mid-run and restarted: after the backfill it holds every
/// second, and it was complete again soon after it came back.
#[test]
fn an_outage_is_backfilled_from_the_store() {
    const T: &str = "an_outage_is_backfilled_from_the_store";
    let _g = common::serial();
    let tmp = tempfile::tempdir().unwrap();
    let Some(mut prom) = engine(T, Kind::Prometheus, &tmp.path().join("prom")) else {
        return;
    };
    // A second receiver that stays up: one recorder sends to both, each with its own sender,
    // so the outage of one holds back nothing of the other.
    let Some(vm) = engine(T, Kind::Victoria, &tmp.path().join("vm")) else {
        return;
    };
    let dir = tmp.path().join("store");
    let r = record_to(
        &dir,
        &prom.write_url(),
        &["--duration", "60s", "--remote-write", &vm.write_url()],
    );
    std::thread::sleep(Duration::from_secs(12));
    prom.stop();
    std::thread::sleep(Duration::from_secs(30));
    // The receiver that stayed up is current: it holds a second from the last few.
    let newest = |e: &Engine| {
        e.raw("jitterscope_load_avg1", now_s(), 120)
            .first()
            .and_then(|s| s.1.last().map(|p| p.0))
    };
    let during = now_s();
    let vm_newest = newest(&vm).expect("VictoriaMetrics holds the recorder's points");
    assert!(
        during - vm_newest as f64 / 1000.0 < 6.0,
        "VictoriaMetrics is {:.1} s behind while Prometheus is down",
        during - vm_newest as f64 / 1000.0
    );
    prom.restart();
    let back = Instant::now();
    let back_s = now_s();
    // Complete again: the engine holds every sample the store has up to its return.
    let complete = loop {
        let dump = dumped(&dir);
        let want: Vec<i64> = dump
            .keys()
            .copied()
            .filter(|t| (*t as f64) / 1000.0 <= back_s)
            .collect();
        let have = prom.raw("jitterscope_load_avg1", now_s(), 120);
        let have: Vec<i64> = have
            .first()
            .map(|s| s.1.iter().map(|p| p.0).collect())
            .unwrap_or_default();
        if want.iter().all(|t| have.binary_search(t).is_ok()) {
            break back.elapsed();
        }
        assert!(
            back.elapsed() < Duration::from_secs(40),
            "the engine did not catch up: {} of {} seconds",
            have.len(),
            want.len()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let (ok, err) = finish(r, Duration::from_secs(60));
    assert!(ok, "{err}");
    // The outage was said once per kind of failure (refused connections; a 503 while the
    // restarted engine starts up), and its end.
    let mut kinds: Vec<&str> = err
        .lines()
        .filter_map(|l| l.split_once(" (will retry").map(|x| x.0))
        .collect();
    let n = kinds.len();
    kinds.sort();
    kinds.dedup();
    assert!(n >= 1 && kinds.len() == n, "{err}");
    assert!(err.contains("accepts again"), "{err}");
    let dump = dumped(&dir);
    let first = *dump.keys().next().unwrap();
    let series = prom.raw("{host!=\"\"}", now_s(), 120);
    let (points, n, dups) = compare(&series, &dump, first);
    eprintln!(
        "complete again {:.1} s after the receiver came back; {n} series, {points} points equal to the store's over {} samples",
        complete.as_secs_f64(),
        dump.len()
    );
    assert_eq!(dups, 0);
    // The receiver that stayed up holds every second too, with the same values; each
    // receiver's cursor is its own.
    let series = vm.raw("{host!=\"\"}", now_s(), 120);
    let (points, n, dups) = compare(&series, &dump, first);
    eprintln!("VictoriaMetrics: {n} series, {points} points equal to the store's");
    assert_eq!(dups, 0);
    let cursors = std::fs::read_to_string(dir.join("remote-write.json")).unwrap();
    for e in [&prom, &vm] {
        assert!(cursors.contains(&e.write_url()), "{cursors}");
    }
}

/// Reads one HTTP/1.1 message (head and a `content-length` body) from `r`; `None` at the end
/// of the connection.
fn read_message(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut msg = Vec::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        msg.extend_from_slice(line.as_bytes());
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    msg.extend_from_slice(&body);
    Some(msg)
}

/// A loopback proxy in front of `upstream` that, once `hold` is set, forwards a request, gets
/// the engine's answer, and then keeps that answer from the recorder (reporting on `held`):
/// the engine has the points, the recorder does not know it yet.
fn holding_proxy(
    upstream: u16,
    hold: Arc<std::sync::atomic::AtomicBool>,
    held: std::sync::mpsc::Sender<()>,
) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api/v1/write", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let (hold, held) = (hold.clone(), held.clone());
            std::thread::spawn(move || {
                let mut from = BufReader::new(c.try_clone().unwrap());
                let mut to_client = c;
                while let Some(req) = read_message(&mut from) {
                    let mut up = std::net::TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                    up.write_all(&req).unwrap();
                    let Some(resp) = read_message(&mut BufReader::new(up)) else {
                        return;
                    };
                    if hold.load(Ordering::SeqCst) {
                        let _ = held.send(());
                        std::thread::sleep(Duration::from_secs(30));
                    }
                    if to_client.write_all(&resp).is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// `kill -9` of the recorder while a request is in flight (the engine has accepted it, the
/// recorder has not heard so, a proxy holds the answer), then a new recorder on the same store:
/// no point is missing, and the request in flight is sent again with the same timestamps and
/// values. Prometheus keeps one sample per timestamp (a repeated identical sample is not an
/// error); VictoriaMetrics keeps both as raw points unless started with
/// `-dedup.minScrapeInterval`, and its queries read one value per step.
#[test]
fn a_recorder_killed_mid_send_resumes_without_losing_points() {
    const T: &str = "a_recorder_killed_mid_send_resumes_without_losing_points";
    let _g = common::serial();
    let tmp = tempfile::tempdir().unwrap();
    let Some((prom, vm)) = both(T, tmp.path()) else {
        return;
    };
    let mut runs = Vec::new();
    for (e, name) in [(&prom, "prom"), (&vm, "vm")] {
        let hold = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let url = holding_proxy(e.port, hold.clone(), tx);
        let dir = tmp.path().join(name);
        let r = record_to(&dir, &url, &[]);
        runs.push((e, dir, hold, rx, r, url));
    }
    std::thread::sleep(Duration::from_secs(8));
    let mut cursors = Vec::new();
    for (_, dir, hold, rx, r, url) in &runs {
        hold.store(true, Ordering::SeqCst);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a request reached the engine");
        r.signal(libc::SIGKILL);
        let c: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("remote-write.json")).unwrap()).unwrap();
        cursors.push(c["receivers"][url.as_str()].as_i64().unwrap());
    }
    for (i, (e, dir, hold, _, r, url)) in runs.into_iter().enumerate() {
        drop(r);
        // The same receiver URL (its cursor), the answers passed on this time.
        hold.store(false, Ordering::SeqCst);
        let r = record_to(&dir, &url, &["--duration", "6s"]);
        let (ok, err) = finish(r, Duration::from_secs(30));
        assert!(ok, "{err}");
        assert!(err.contains("remote write: resuming after"), "{err}");
        let dump = dumped(&dir);
        let first = *dump.keys().next().unwrap();
        let series = e.raw("{host!=\"\"}", now_s(), 120);
        let (points, n, dups) = compare(&series, &dump, first);
        eprintln!(
            "{:?}, killed with a request in flight after the cursor at {}: {n} series, {points} points equal to the store's, {dups} raw points sent twice (same time and value)",
            e.kind, cursors[i]
        );
        match e.kind {
            Kind::Prometheus => assert_eq!(dups, 0, "Prometheus keeps one sample per time"),
            Kind::Victoria => assert!(dups > 0, "the request in flight was not sent again"),
        }
    }
}

/// A loopback receiver answering every request with `status`; counts the requests.
fn answering(status: u16) -> (String, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api/v1/write", l.local_addr().unwrap());
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; len];
            let _ = r.read_exact(&mut body);
            seen.fetch_add(1, Ordering::SeqCst);
            let body = format!("answer {status}\n");
            let _ = write!(
                s,
                "HTTP/1.1 {status} Test\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, n)
}

/// The last value of the recorder's own `series` in `dir`.
fn last_value(dir: &Path, series: &str) -> Option<f64> {
    let dump = dumped(dir);
    dump.values().rev().find_map(|v| v.get(series).copied())
}

/// A bad target: its name, URL, what its one line says, whether points are given up on, and
/// the receiver's request counter.
type Case = (
    &'static str,
    String,
    &'static str,
    bool,
    Option<Arc<AtomicUsize>>,
);

/// Each bad target is said in one line, once, counted, and recording goes on.
#[test]
fn bad_targets_are_said_once_and_recording_goes_on() {
    const T: &str = "bad_targets_are_said_once_and_recording_goes_on";
    let tmp = tempfile::tempdir().unwrap();
    let (u400, n400) = answering(400);
    let (u429, n429) = answering(429);
    let (u500, n500) = answering(500);
    let nothing = format!("http://127.0.0.1:{}/api/v1/write", engines::free_port());
    // (url, what the one line says, points given up on, counter of requests it made)
    let cases: Vec<Case> = vec![
        (
            "400",
            u400,
            "HTTP 400: answer 400 (refused",
            true,
            Some(n400),
        ),
        (
            "429",
            u429,
            "HTTP 429: answer 429 (will retry",
            false,
            Some(n429),
        ),
        (
            "500",
            u500,
            "HTTP 500: answer 500 (will retry",
            false,
            Some(n500),
        ),
        ("nothing", nothing, "(will retry", false, None),
        (
            "scheme",
            "ftp://127.0.0.1/api/v1/write".into(),
            "scheme ftp:// is not supported",
            true,
            None,
        ),
    ];
    let runs: Vec<_> = cases
        .iter()
        .map(|(name, url, ..)| {
            let dir = tmp.path().join(name);
            (dir.clone(), record_to(&dir, url, &["--duration", "8s"]))
        })
        .collect();
    for ((dir, r), (name, _, says, gives_up, requests)) in runs.into_iter().zip(&cases) {
        let (ok, err) = finish(r, Duration::from_secs(30));
        assert!(ok, "{name}: the recorder failed: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.contains(says)).collect();
        assert_eq!(lines.len(), 1, "{name}: said {} times:\n{err}", lines.len());
        let samples = dumped(&dir).len();
        assert!(samples >= 6, "{name}: {samples} samples recorded");
        let failed = last_value(&dir, "self.remote_write.points_failed").unwrap_or(0.0);
        let requests_failed = last_value(&dir, "self.remote_write.requests_failed").unwrap_or(0.0);
        assert!(requests_failed >= 1.0, "{name}: no failed request counted");
        assert_eq!(failed > 0.0, *gives_up, "{name}: {failed} points failed");
        if let Some(n) = requests {
            let n = n.load(Ordering::SeqCst);
            if *gives_up {
                // One request a flush: refused points are not retried.
                assert!(n >= 3, "{name}: {n} requests");
            } else {
                // Retried with backoff (0.5, 1, 2, 4 s), not hammered.
                assert!((2..=8).contains(&n), "{name}: {n} requests");
            }
        }
        eprintln!("{name}: {:?}", lines[0]);
    }
    let _ = T;
}

/// TLS with the test's own CA, and basic authentication: the right password gets the points in,
/// a wrong one is refused (401) once and counted.
#[test]
fn tls_and_basic_auth_against_prometheus() {
    const T: &str = "tls_and_basic_auth_against_prometheus";
    let tmp = tempfile::tempdir().unwrap();
    let (Some(_), Some(_)) = (
        jitterscope_testkit::which("openssl", &[]),
        jitterscope_testkit::which("htpasswd", &[]),
    ) else {
        skip(T, "openssl or htpasswd (apache2-utils) is missing");
        return;
    };
    let d = tmp.path();
    let sh = |script: &str| {
        let out = std::process::Command::new("sh")
            .arg("-ec")
            .arg(script)
            .current_dir(d)
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=jitterscope-test-ca 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=127.0.0.1 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext
        openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile san.ext 2>/dev/null");
    let hash = sh("htpasswd -nbBC 5 fleet right-password");
    let hash = hash.trim().split_once(':').unwrap().1.to_string();
    let web = d.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {0}/srv.pem\n  key_file: {0}/srv.key\nbasic_auth_users:\n  fleet: '{hash}'\n",
            d.display()
        ),
    )
    .unwrap();
    let Some(prom) = Engine::start_with(Kind::Prometheus, &d.join("prom"), Some(web)) else {
        skip(T, "prometheus is not installed");
        return;
    };
    let url = format!("https://127.0.0.1:{}/api/v1/write", prom.port);
    std::fs::write(d.join("right"), "right-password\n").unwrap();
    std::fs::write(d.join("wrong"), "wrong-password\n").unwrap();
    let ca = d.join("ca.pem");
    let auth = |file: &str| {
        vec![
            "--duration".to_string(),
            "6s".into(),
            "--remote-write-ca-file".into(),
            ca.display().to_string(),
            "--remote-write-user".into(),
            "fleet".into(),
            "--remote-write-password-file".into(),
            d.join(file).display().to_string(),
        ]
    };
    let good_args = auth("right");
    let bad_args = auth("wrong");
    let good: Vec<&str> = good_args.iter().map(String::as_str).collect();
    let bad: Vec<&str> = bad_args.iter().map(String::as_str).collect();
    let good = record_to(&d.join("good"), &url, &good);
    let bad = record_to(&d.join("bad"), &url, &bad);
    let no_ca = record_to(&d.join("no-ca"), &url, &["--duration", "6s"]);
    let (ok, err) = finish(good, Duration::from_secs(30));
    assert!(ok && !err.contains("remote write: https"), "{err}");
    let (ok, bad_err) = finish(bad, Duration::from_secs(30));
    assert!(ok, "{bad_err}");
    let refused: Vec<&str> = bad_err.lines().filter(|l| l.contains("HTTP 401")).collect();
    assert_eq!(refused.len(), 1, "{bad_err}");
    let (ok, no_ca_err) = finish(no_ca, Duration::from_secs(30));
    assert!(ok, "{no_ca_err}");
    let untrusted: Vec<&str> = no_ca_err
        .lines()
        .filter(|l| l.contains("remote write: https"))
        .collect();
    assert_eq!(untrusted.len(), 1, "{no_ca_err}");
    assert!(last_value(&d.join("bad"), "self.remote_write.points_failed").unwrap_or(0.0) > 0.0);
    // Queried with the same credentials over TLS: the good recorder's samples are there.
    let dump = dumped(&d.join("good"));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(
                    ureq::tls::parse_pem(&std::fs::read(&ca).unwrap())
                        .filter_map(|i| match i {
                            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c.to_owned()),
                            _ => None,
                        })
                        .collect(),
                )))
                .build(),
        )
        .build()
        .into();
    let q = engines::enc("jitterscope_load_avg1[2m]");
    let body = agent
        .get(&format!(
            "https://127.0.0.1:{}/api/v1/query?query={q}",
            prom.port
        ))
        .header("Authorization", "Basic ZmxlZXQ6cmlnaHQtcGFzc3dvcmQ=")
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let got = v["data"]["result"][0]["values"]
        .as_array()
        .map_or(0, |a| a.len());
    assert_eq!(got, dump.len(), "{body}");
    eprintln!(
        "TLS + basic auth: {got} samples in; wrong password: {:?}; no CA: {:?}",
        refused[0], untrusted[0]
    );
    let _ = std::io::stdout().flush();
}

/// What the fault proxy does with one request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// Passed to the engine, its answer passed back.
    Pass,
    /// Answered with this status; the engine never sees the request.
    Answer(u16),
    /// Read and never answered: the connection is held past the recorder's 10 s timeout.
    Stall,
}

/// The requests a [`fault_proxy`] saw: what it did with each and the request's head.
/// One request the proxy saw: what it did, the request's head (lower-cased), whether the body
/// held metadata only, and the engine's status when the request was passed to it.
type Seen = Arc<std::sync::Mutex<Vec<(Fault, String, bool, Option<u16>)>>>;

/// A loopback proxy in front of the engine at `upstream` that plays `script` on its first
/// requests, in order, and passes every later one. A request without the tenant header
/// `x-scope-orgid: <tenant>` is answered 401, as Mimir or Cortex answer it.
fn fault_proxy(upstream: u16, tenant: &'static str, script: Vec<Fault>) -> (String, Seen) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api/v1/write", l.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let script = Arc::new(script);
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let (log, script) = (log.clone(), script.clone());
            std::thread::spawn(move || {
                let mut from = BufReader::new(c.try_clone().unwrap());
                let mut to_client = c;
                while let Some(req) = read_message(&mut from) {
                    let head = String::from_utf8_lossy(&req)
                        .split("\r\n\r\n")
                        .next()
                        .unwrap_or_default()
                        .to_ascii_lowercase();
                    let metadata = req
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .and_then(|i| {
                            jitterscope_fleet::remote_write::proto::decode(&req[i + 4..]).ok()
                        })
                        .is_some_and(|r| r.timeseries.is_empty() && !r.metadata.is_empty());
                    let (fault, at) = {
                        let mut s = log.lock().unwrap();
                        let f = script.get(s.len()).copied().unwrap_or(Fault::Pass);
                        s.push((f, head.clone(), metadata, None));
                        (f, s.len() - 1)
                    };
                    let tenant_ok = head.contains(&format!("\r\nx-scope-orgid: {tenant}"));
                    let answer = match fault {
                        Fault::Stall => {
                            std::thread::sleep(Duration::from_secs(12));
                            return;
                        }
                        _ if !tenant_ok => Fault::Answer(401),
                        f => f,
                    };
                    let resp = match answer {
                        Fault::Answer(code) => {
                            let body = format!("fault {code}\n");
                            format!(
                                "HTTP/1.1 {code} Fault\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            )
                            .into_bytes()
                        }
                        _ => {
                            let mut up =
                                std::net::TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                            up.write_all(&req).unwrap();
                            let Some(resp) = read_message(&mut BufReader::new(up)) else {
                                return;
                            };
                            let status = String::from_utf8_lossy(&resp)
                                .split(' ')
                                .nth(1)
                                .and_then(|c| c.parse().ok());
                            log.lock().unwrap()[at].3 = status;
                            resp
                        }
                    };
                    if to_client.write_all(&resp).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

/// Remote write to a real VictoriaMetrics behind a proxy that wants a tenant header and
/// fails on purpose: 500, 429, a stalled request, then a 400 some requests later. Across the
/// retryable faults nothing is lost; the one refused request's points are dropped, counted
/// and said once; every request carries the tenant header and the basic-auth credentials,
/// and the password is never in the log.
#[test]
fn faults_in_front_of_a_tenant_engine_lose_only_what_was_refused() {
    const T: &str = "faults_in_front_of_a_tenant_engine_lose_only_what_was_refused";
    let _g = common::serial();
    let tmp = tempfile::tempdir().unwrap();
    let Some(vm) = engine(T, Kind::Victoria, &tmp.path().join("vm")) else {
        return;
    };
    const SECRET: &str = "pw-9f3a7c-never-logged";
    let pw = tmp.path().join("password");
    std::fs::write(&pw, format!("{SECRET}\n")).unwrap();
    // The first request is the families' metadata; the samples' requests follow.
    let mut script = vec![
        Fault::Pass,
        Fault::Answer(500),
        Fault::Answer(429),
        Fault::Stall,
    ];
    // After the stall, the held-back points go through, then a few flushes pass before one
    // is refused.
    script.extend([Fault::Pass; 4]);
    script.push(Fault::Answer(400));
    let (url, seen) = fault_proxy(vm.port, "team-a", script);
    let dir = tmp.path().join("store");
    let r = record_to(
        &dir,
        &url,
        &[
            "--duration",
            "40s",
            "--remote-write-header",
            "X-Scope-OrgID: team-a",
            "--remote-write-user",
            "alice",
            "--remote-write-password-file",
            pw.to_str().unwrap(),
        ],
    );
    let (ok, err) = finish(r, Duration::from_secs(90));
    assert!(ok, "{err}");
    assert!(!err.contains(SECRET), "the password is in the log:\n{err}");
    let seen = seen.lock().unwrap().clone();
    let faults: Vec<Fault> = seen.iter().map(|s| s.0).collect();
    assert!(
        faults.len() > 12,
        "only {} requests: {faults:?}",
        faults.len()
    );
    let basic = format!(
        "authorization: basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("alice:{SECRET}")
        )
    );
    // The proxy keeps heads lower-cased.
    let basic = basic.to_ascii_lowercase();
    for (f, head, ..) in &seen {
        assert!(
            head.contains("\r\nx-scope-orgid: team-a") && head.contains(&basic),
            "{f:?}: a request without the tenant or the credentials:\n{head}"
        );
    }
    // The families' metadata went first, on its own, and the engine took it.
    let (_, _, metadata, status) = &seen[0];
    assert!(*metadata, "the first request was not the metadata");
    assert!(
        status.is_some_and(|s| (200..300).contains(&s)),
        "the engine answered the metadata with {status:?}"
    );
    assert_eq!(seen.iter().filter(|s| s.2).count(), 1, "{faults:?}");
    // Each kind of failure said once; the refusal says its points are dropped.
    for says in ["HTTP 500", "HTTP 429", "HTTP 400"] {
        let n = err.lines().filter(|l| l.contains(says)).count();
        assert_eq!(n, 1, "{says} said {n} times:\n{err}");
    }
    assert!(
        err.lines()
            .any(|l| l.contains("HTTP 400") && l.contains("refused")),
        "{err}"
    );
    let failed = last_value(&dir, "self.remote_write.points_failed").unwrap_or(0.0);
    let requests_failed = last_value(&dir, "self.remote_write.requests_failed").unwrap_or(0.0);
    assert!(failed > 0.0, "the refused points were not counted");
    assert!(
        requests_failed >= 4.0,
        "{requests_failed} failed requests counted"
    );

    // The engine lacks exactly the seconds of the refused request: one short run of them.
    let mut dump = dumped(&dir);
    let have: Vec<i64> = vm
        .raw("jitterscope_load_avg1", now_s(), 300)
        .first()
        .map(|s| s.1.iter().map(|p| p.0).collect())
        .unwrap_or_default();
    let first = *dump.keys().next().unwrap();
    let missing: Vec<i64> = dump
        .keys()
        .copied()
        .filter(|t| dump[t].contains_key("load.avg1") && have.binary_search(t).is_err())
        .collect();
    assert!(
        (1..=3).contains(&missing.len()),
        "{} stored seconds are not in the engine: {missing:?} (requests: {faults:?})",
        missing.len()
    );
    assert!(
        missing.windows(2).all(|w| w[1] - w[0] <= 1_100),
        "the missing seconds are not one run: {missing:?}"
    );
    for t in &missing {
        dump.remove(t);
    }
    let series = vm.raw("{host!=\"\"}", now_s(), 300);
    let (points, n, _) = compare(&series, &dump, first);
    eprintln!(
        "{} requests ({faults:?}); {} seconds refused and dropped ({failed} points counted); {n} series, {points} points equal to the store's",
        faults.len(),
        missing.len()
    );
}
