//! A window without samples (after the recording, or over a segment lost to damage) is reported
//! as the window asked for, not as the baseline's last sample after the epoch.

use std::path::PathBuf;

#[test]
fn a_window_without_samples_is_the_one_asked_for() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/diagnose/idle");
    let r = jitterscope_model::stored::SampleReader::open(&dir).unwrap();
    let (_, last) = r.store().time_bounds().unwrap().unwrap();
    let (from, to) = (last + 60_000_000_000, last + 120_000_000_000);
    let rep =
        jitterscope_diagnose::diagnose(&dir, from, to, jitterscope_diagnose::Options::default())
            .unwrap();
    assert_eq!(rep.samples, 0);
    assert!(rep.findings.is_empty());
    assert_eq!(rep.window.from, jitterscope_model::time::rfc3339(from));
    assert_eq!(rep.window.to, jitterscope_model::time::rfc3339(to));
}
