//! A diagnosed window with holes: a lab recording (tests/fixtures/diagnose) is rewritten
//! through the recorder's encoder without the samples of a stretch of its window, as if the
//! recorder had been stopped there. The report must name the hole, lower every confidence by
//! its share of the window, and say so in the text; the whole recording must not.

mod common;

use std::path::Path;

use common::{fixtures, report};

use jitterscope_diagnose::{chain, rules, text, Data};
use jitterscope_model::codec::Parts;
use jitterscope_model::signals::SignalRecord;
use jitterscope_model::stored::{Encoder, SampleReader};
use jitterscope_store::{StoreConfig, Writer};

const SCENARIO: &str = "oom-leak";

/// The recording without the samples in `[cut.0, cut.1)`, written as `record` writes.
fn copy_without(dst: &Path, cut: (i64, i64)) -> usize {
    let mut c = StoreConfig::new(dst);
    c.retain = std::time::Duration::from_secs(100 * 365 * 86400);
    let mut w = Writer::open(c).unwrap();
    let mut enc = Encoder::new();
    let mut dropped = 0;
    for mut s in SampleReader::open(fixtures().join(SCENARIO))
        .unwrap()
        .samples(i64::MIN, i64::MAX, Parts::ALL)
        .unwrap()
    {
        if (cut.0..cut.1).contains(&s.ts_ns) {
            dropped += 1;
            continue;
        }
        let e = enc.encode(&mut s, &SignalRecord::default()).unwrap();
        w.append_lanes(s.ts_ns, e.main, &e.lanes).unwrap();
    }
    w.close().unwrap();
    dropped
}

#[test]
fn holes_lower_the_confidences_and_say_so() {
    let (base, from, to) = common::windows(SCENARIO);
    let whole = report(&fixtures().join(SCENARIO), (base, from, to));
    assert!(whole.holes.is_none(), "{:?}", whole.holes);
    assert!(
        !text::render(&whole).contains("holes"),
        "{}",
        text::render(&whole)
    );

    // Four seconds of an eleven-second window, from its third second.
    let tmp = tempfile::tempdir().unwrap();
    let cut = (from + 2_500_000_000, from + 6_500_000_000);
    assert_eq!(copy_without(tmp.path(), cut), 4);
    let r = report(tmp.path(), (base, from, to));

    let h = r.holes.as_ref().expect("the hole is reported");
    assert_eq!(h.holes.len(), 1, "{h:?}");
    // From the sample before the cut to the one after it: the 4 s cut plus one interval.
    assert!((h.seconds - 5.0).abs() < 0.2, "{h:?}");
    assert!((h.of_seconds - 11.0).abs() < 1.0, "{h:?}");
    assert!(
        (h.fraction - h.seconds / h.of_seconds).abs() < 0.001,
        "{h:?}"
    );
    assert_eq!(h.holes[0].seconds, h.seconds);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["holes"]["holes"][0]["from"], h.holes[0].from.as_str());

    // Every finding at the rules' own confidence on the same samples, times what was recorded.
    let select: Vec<_> = rules::RULES
        .iter()
        .flat_map(|r| r.select.iter())
        .chain(chain::READS)
        .map(|s| s.select())
        .collect();
    let d = Data::load(
        tmp.path(),
        from,
        to,
        from - base + 1_000_000_000,
        &select,
        true,
    )
    .unwrap();
    let raw: Vec<_> = rules::RULES.iter().flat_map(|r| (r.run)(&d)).collect();
    assert!(!r.findings.is_empty(), "the hole left nothing to diagnose");
    for f in &r.findings {
        let own = raw
            .iter()
            .find(|g| g.rule_id == f.rule_id && g.title == f.title)
            .unwrap_or_else(|| panic!("{} not found by the rules", f.title));
        let want = ((own.confidence * (1.0 - h.fraction)) * 100.0).round() / 100.0;
        assert_eq!(f.confidence, want, "{}: {}", f.rule_id, own.confidence);
        assert!(f.confidence < own.confidence, "{}", f.rule_id);
    }

    let out = text::render(&r);
    let line = out
        .lines()
        .find(|l| l.contains("the window has holes"))
        .unwrap_or_else(|| panic!("no holes line:\n{out}"));
    let pct = format!("confidences lowered by {:.0}%", h.fraction * 100.0);
    assert!(line.contains(&pct), "{line}");
    assert!(line.contains(&h.holes[0].from), "{line}");
}
