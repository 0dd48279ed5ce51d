//! Each series has one value per sample: over every recorded lab store, no sample derives two
//! values under one series name (issue 18: a tracer's map read twice gave a process eight TLB
//! rows in one sample; CSV showed them all, JSON kept the last).

mod common;

use std::collections::HashMap;

use jitterscope_model::codec::Parts;
use jitterscope_model::derive::for_each_series;
use jitterscope_model::metrics::all;
use jitterscope_model::stored::SampleReader;

#[test]
fn no_sample_has_two_values_for_one_series() {
    let stores = common::lab_stores();
    let mut checked = 0usize;
    for dir in &stores {
        let r = SampleReader::open(dir).unwrap();
        let mut prev = None;
        for s in r.samples(i64::MIN, i64::MAX, Parts::ALL).unwrap() {
            let mut seen: HashMap<String, Option<f64>> = HashMap::new();
            let mut dups = Vec::new();
            for_each_series(all(), &s, prev.as_ref(), &[], |_, _, series, v| {
                if let Some(first) = seen.insert(series.to_string(), v) {
                    dups.push(format!("{series}: {first:?} and {v:?}"));
                }
            });
            assert!(
                dups.is_empty(),
                "{} at {}: {} series twice, e.g. {:?}",
                dir.display(),
                s.ts_ns,
                dups.len(),
                &dups[..dups.len().min(5)]
            );
            checked += seen.len();
            prev = Some(s);
        }
    }
    assert!(checked > 100_000, "only {checked} series checked");
}
