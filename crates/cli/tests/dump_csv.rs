//! `dump --format csv` on a real recording: a process may name itself anything, so series names
//! built from its name are quoted where CSV needs it, and read back as JSON names them.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{now_arg, parse_csv, run, s, text, ChildGuard};

/// A comma and a quote in a process name, set through /proc (no privilege needed).
const ODD_NAME: &str = "odd,na\"me";

#[test]
fn series_of_a_process_named_with_a_comma_and_a_quote_are_quoted() {
    let t = tempfile::tempdir().unwrap();
    let store = t.path().join("store");
    // The shell renames itself and keeps running (waking often enough to be sampled afresh).
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf '%s' '{ODD_NAME}' > /proc/$$/comm && while :; do sleep 0.1; done"
        ))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let child = ChildGuard::new(child);
    let pid = child.pid();
    let comm = format!("/proc/{}/comm", child.pid());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&comm)
        .unwrap_or_default()
        .trim_end()
        != ODD_NAME
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the shell did not rename itself"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let from = now_arg();
    let r = run(
        &[
            "record",
            "--dir",
            s(&store),
            "--duration",
            "3s",
            "--interval",
            "1s",
            "--no-tracers",
            "--profile-hz",
            "0",
        ],
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "record: {}", text(&r.stderr));
    drop(child);

    let dump = |format: &str| {
        let o = run(
            &[
                "dump",
                "--dir",
                s(&store),
                "--from",
                &from,
                "--to",
                "now",
                "--format",
                format,
            ],
            Duration::from_secs(30),
        );
        assert!(o.status.success(), "dump: {}", text(&o.stderr));
        text(&o.stdout)
    };
    let csv = dump("csv");
    let mine = format!("proc.{pid}.{ODD_NAME}.rss_bytes");
    let quoted = format!("\"proc.{pid}.odd,na\"\"me.rss_bytes\"");
    assert!(
        csv.lines().any(|l| l.contains(&format!(",{quoted},"))),
        "no quoted {quoted} in the CSV"
    );
    let rows = parse_csv(&csv);
    assert!(
        rows.iter().any(|r| r.series == mine),
        "{mine} not read back"
    );
    // Every series CSV names, JSON names the same way, sample by sample.
    let json: Vec<serde_json::Value> = dump("json")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut from_json: Vec<(String, String)> = json
        .iter()
        .flat_map(|v| {
            let t = v["time"].as_str().unwrap().to_string();
            v["values"]
                .as_object()
                .unwrap()
                .keys()
                .map(move |k| (t.clone(), k.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut from_csv: Vec<(String, String)> =
        rows.into_iter().map(|r| (r.time, r.series)).collect();
    from_json.sort();
    from_csv.sort();
    assert_eq!(from_csv, from_json);
}
