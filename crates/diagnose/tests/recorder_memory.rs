//! The recorder's own memory is the agent's budget, never a workload's leak (issue 44: the
//! recorder's RSS was reported as a `memory.leak` of culprit `jitterscope`).
//!
//! A lab recording of a native leak (tests/fixtures/diagnose/native-leak) is written again
//! through the recorder's encoder and online detector, its samples saying that the leaking
//! process was the recorder (`RecorderStats::pid`), as a recorder whose own RSS grew would
//! have written them. Neither the `memory.leak` rule nor the leak-trend detector may name it;
//! the report says in a note that the recorder grew. The same recording written with another
//! recorder pid keeps both.

mod common;

use std::path::Path;

use common::{fixtures, windows};

use jitterscope_detect::Online;
use jitterscope_diagnose::{text, Report};
use jitterscope_model::codec::Parts;
use jitterscope_model::sample::RecorderStats;
use jitterscope_model::stored::{Encoder, SampleReader};
use jitterscope_model::Sample;
use jitterscope_store::{StoreConfig, Writer};

const SCENARIO: &str = "native-leak";

/// The recording written again as `record` writes it (main payload, lanes, the online
/// detector's marks), every sample taken by a recorder of pid `recorder`.
fn rewrite_as_recorder(dst: &Path, recorder: u32) {
    let mut c = StoreConfig::new(dst);
    c.retain = std::time::Duration::from_secs(100 * 365 * 86400);
    let mut w = Writer::open(c).unwrap();
    let mut enc = Encoder::new();
    let mut online = Online::new();
    let mut prev: Option<Sample> = None;
    for mut s in SampleReader::open(fixtures().join(SCENARIO))
        .unwrap()
        .samples(i64::MIN, i64::MAX, Parts::ALL)
        .unwrap()
    {
        s.recorder.get_or_insert_with(RecorderStats::default).pid = recorder;
        let rec = online.step(&s, prev.as_ref());
        let e = enc.encode(&mut s, &rec).unwrap();
        w.append_lanes(s.ts_ns, e.main, &e.lanes).unwrap();
        prev = Some(s);
    }
    w.close().unwrap();
}

fn report(dir: &Path) -> Report {
    common::report(dir, windows(SCENARIO))
}

/// The pids of the report's `memory.leak` findings.
fn leaking(r: &Report) -> Vec<u32> {
    r.findings
        .iter()
        .filter(|f| f.rule_id == "memory.leak")
        .filter_map(|f| f.culprit.pid)
        .collect()
}

/// The series of the leak trends the store's episodes hold.
fn leak_trends(dir: &Path) -> Vec<String> {
    let (events, _) = jitterscope_diagnose::events(dir, i64::MIN + 1, i64::MAX).unwrap();
    events
        .into_iter()
        .filter(|e| e.kind == jitterscope_diagnose::events::LEAK_KIND)
        .map(|e| e.series)
        .collect()
}

#[test]
fn the_recorders_own_growth_is_its_budget_not_a_leak() {
    let tmp = tempfile::tempdir().unwrap();
    let original = report(&fixtures().join(SCENARIO));
    let pid = *leaking(&original)
        .first()
        .expect("the recording's leak is found");
    let own = format!("proc.{pid}.");

    // Recorded by another process: the leak and its trend are there, and no note.
    let other = tmp.path().join("other");
    rewrite_as_recorder(&other, pid + 1);
    let r = report(&other);
    assert!(leaking(&r).contains(&pid), "{:?}", r.findings);
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    assert!(
        leak_trends(&other).iter().any(|s| s.starts_with(&own)),
        "the control has the leak trend: {:?}",
        leak_trends(&other)
    );

    // Recorded by the leaking process itself: its growth is the recorder's budget.
    let own_dir = tmp.path().join("own");
    rewrite_as_recorder(&own_dir, pid);
    let r = report(&own_dir);
    assert!(!leaking(&r).contains(&pid), "{:?}", r.findings);
    assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
    let note = &r.notes[0];
    assert!(
        note.starts_with("the recorder itself (") && note.contains(&format!("pid {pid})")),
        "{note}"
    );
    assert!(
        note.contains("budget") && note.contains("self.rss_bytes"),
        "{note}"
    );
    assert!(text::render(&r).contains(&format!("note: {note}")));
    assert!(
        !leak_trends(&own_dir).iter().any(|s| s.starts_with(&own)),
        "no leak trend on the recorder: {:?}",
        leak_trends(&own_dir)
    );
    // Its samples still hold its row of the process table: only the leak reading leaves it out.
    let (_, from, to) = windows(SCENARIO);
    let d =
        jitterscope_diagnose::Data::load_globs(&own_dir, from, to, &[&format!("{own}*.rss_bytes")])
            .unwrap();
    assert!(!d.series.is_empty());
}
