//! The signals lane against the samples: lab recordings (tests/fixtures/diagnose, written
//! before lanes existed) are rewritten through the recorder's writer (`jitterscope_testkit::rewrite`); `events` over the
//! signals lane must then find exactly the episodes it finds deriving from the samples, and
//! flag those the online detector marked.

use std::path::{Path, PathBuf};

use jitterscope_diagnose::events::{self, Event};
use jitterscope_store::Reader;

fn fixture(scenario: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/diagnose")
        .join(scenario)
}

fn rewrite(src: &Path, dst: &Path) -> usize {
    jitterscope_testkit::rewrite(src, dst).unwrap()
}

fn without_online(ev: &[Event]) -> Vec<Event> {
    ev.iter()
        .map(|e| Event {
            online: false,
            ..e.clone()
        })
        .collect()
}

fn remove_signals_lane(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".s.jss") || name.ends_with(".s.idx") {
            std::fs::remove_file(p).unwrap();
        }
    }
}

/// Events over the whole recording, from the signals lane and then from the samples.
fn both_ways(scenario: &str) -> (Vec<Event>, Vec<Event>, usize) {
    let d = tempfile::tempdir().unwrap();
    let marks = rewrite(&fixture(scenario), d.path());
    let (first, last) = Reader::open(d.path())
        .unwrap()
        .time_bounds()
        .unwrap()
        .unwrap();
    let (from, to) = (first, last + 1);
    let fast = events::load(d.path(), from, to, 0).unwrap();
    assert!(fast.from_signals_lane, "{scenario}: signals lane not used");
    let fast_ev = events::detect(&fast.data, &fast.marks);
    remove_signals_lane(d.path());
    let slow = events::load(d.path(), from, to, 0).unwrap();
    assert!(!slow.from_signals_lane);
    assert_eq!(fast.data.ts, slow.data.ts, "{scenario}: samples differ");
    let slow_ev = events::detect(&slow.data, &slow.marks);
    (fast_ev, slow_ev, marks)
}

#[test]
fn the_signals_lane_gives_the_episodes_the_samples_give() {
    // Each scenario's own episode (kind, a piece of its series); the control has none.
    for (scenario, want) in [
        ("tlb-shootdown", Some(("tlb-storm", "irq.tlb_per_s"))),
        (
            "cfs-throttle",
            Some(("throttling", "/jitterscope-lab/cfs-throttle.")),
        ),
        (
            "reclaim-storm",
            Some(("reclaim-stalls", "reclaim.stalls_per_s")),
        ),
        (
            "negative-dentry",
            Some(("negative-dentries", "dentry.negative_growth_per_s")),
        ),
        (
            "native-leak",
            Some(("leak-trend", ".lab-native-leak.rss_bytes")),
        ),
        (
            "python-leak",
            Some(("leak-trend", ".lab-python-leak.rss_bytes")),
        ),
        ("idle", None),
    ] {
        let (fast, slow, marks) = both_ways(scenario);
        eprintln!(
            "{scenario}: {} episodes, {marks} marks: {:?}",
            fast.len(),
            fast.iter()
                .map(|e| (&e.id, &e.series, e.online))
                .collect::<Vec<_>>()
        );
        assert_eq!(without_online(&fast), slow, "{scenario}");
        assert!(slow.iter().all(|e| !e.online));
        match want {
            Some((kind, series)) => assert!(
                fast.iter()
                    .any(|e| e.kind == kind && e.series.contains(series) && e.online),
                "{scenario}: no online-marked {kind} episode on *{series}*"
            ),
            None => assert!(fast.is_empty() && marks == 0, "{scenario}: {fast:?}"),
        }
    }
}
