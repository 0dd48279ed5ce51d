//! Every command that reads a window takes the same flags in the same forms (README: WINDOW):
//! `--since D` back from `--to` (now by default), or `--from T [--to T]`, with T as RFC 3339,
//! epoch seconds, `now`, `-10m`, `10m ago` or `10m`.

mod common;

use std::time::Duration;

use common::{run, text};

const READERS: [&str; 5] = ["dump", "flame", "top-functions", "events", "diagnose"];

/// The native-leak recording and its window as epoch seconds.
fn fixture() -> (String, i64, i64) {
    common::lab_recording("native-leak")
}

fn reader(cmd: &str, dir: &str, window: &[&str]) -> std::process::Output {
    let mut args = vec![cmd, "--dir", dir];
    args.extend_from_slice(window);
    // Text output: the same for the window as JSON, and every reader has it.
    run(&args, Duration::from_secs(60))
}

#[test]
fn every_reader_takes_every_spelling_of_a_window() {
    let (dir, _, _) = fixture();
    for cmd in READERS {
        for w in [
            &["--since", "10m"][..],
            &["--since", "10m ago"],
            &["--from", "-10m"],
            &["--from", "10m ago"],
            &["--from", "10m"],
            &["--from", "-2h", "--to", "-1h"],
            &["--to", "-1h", "--since", "30m"],
            &["--from", "2026-01-01T00:00:00Z", "--to", "now"],
        ] {
            let o = reader(cmd, &dir, w);
            let err = text(&o.stderr);
            // Parsed: no usage error (2), nothing called invalid. Whether the window holds
            // data (this recording is older) is another matter.
            assert_ne!(o.status.code(), Some(2), "{cmd} {w:?}: {err}");
            assert!(!err.contains("invalid"), "{cmd} {w:?}: {err}");
            assert!(!err.contains("panicked"), "{cmd} {w:?}: {err}");
        }
    }
}

#[test]
fn the_same_window_reads_the_same_data_however_it_is_spelt() {
    let (dir, from, to) = fixture();
    let (f, t) = (from.to_string(), to.to_string());
    let since = format!("{}s", to - from);
    let rfc = |s: i64| {
        chrono::DateTime::from_timestamp(s, 0)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let (rf, rt) = (rfc(from), rfc(to));
    for cmd in READERS {
        let spelt = [
            vec!["--from", &f, "--to", &t],
            vec!["--to", &t, "--since", &since],
            vec!["--from", &rf, "--to", &rt],
        ];
        let outs: Vec<String> = spelt
            .iter()
            .map(|w| {
                let o = reader(cmd, &dir, w);
                assert!(o.status.success(), "{cmd} {w:?}: {}", text(&o.stderr));
                text(&o.stdout)
            })
            .collect();
        assert!(!outs[0].is_empty(), "{cmd}: nothing in the window");
        assert_eq!(
            outs[0], outs[1],
            "{cmd}: --to/--since differs from --from/--to"
        );
        assert_eq!(
            outs[0], outs[2],
            "{cmd}: RFC 3339 differs from epoch seconds"
        );
    }
}

#[test]
fn from_and_since_together_are_a_usage_error() {
    let (dir, _, _) = fixture();
    for cmd in READERS {
        let o = reader(cmd, &dir, &["--from", "-10m", "--since", "5m"]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", text(&o.stderr));
    }
}
