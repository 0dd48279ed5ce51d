//! A recorded store written again as `record` writes now.

use std::path::Path;

use jitterscope_detect::Online;
use jitterscope_model::codec::Parts;
use jitterscope_model::stored::{SampleReader, SampleWriter};
use jitterscope_model::Sample;
use jitterscope_store::{StoreConfig, Writer};

/// A new store at `dir` written as the recorder writes, that keeps every sample it is given
/// however old (a century), for tests that build a store sample by sample.
pub fn sample_writer(dir: &Path) -> Result<SampleWriter, jitterscope_store::StoreError> {
    let mut c = StoreConfig::new(dir);
    c.retain = std::time::Duration::from_secs(100 * 365 * 86400);
    Ok(SampleWriter::new(Writer::open(c)?))
}

/// Writes every sample of the store at `src` into a new store at `dst` through the recorder's
/// own [`SampleWriter`], with the signals lane [`Online`] makes of them (values and episode
/// marks), and returns the number of marks. A store recorded before the lanes existed gains
/// them, so tests can compare the lane's read path with the samples' on one recording. Every
/// sample is kept: `dst` retains a century.
pub fn rewrite(src: &Path, dst: &Path) -> Result<usize, Box<dyn std::error::Error>> {
    let mut w = sample_writer(dst)?;
    let mut online = Online::new();
    let mut prev: Option<Sample> = None;
    let mut marks = 0;
    for mut s in SampleReader::open(src)?.samples(i64::MIN, i64::MAX, Parts::ALL)? {
        let rec = online.step(&s, prev.as_ref());
        marks += rec.marks.len();
        w.append(&mut s, &rec)?;
        prev = Some(s);
    }
    w.close()?;
    Ok(marks)
}
